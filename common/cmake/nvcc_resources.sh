#!/usr/bin/env bash
# CUDA compiler launcher (CMake's CUDA_COMPILER_LAUNCHER) for the chapters' kernel libraries:
# runs the nvcc command it is given, which carries --resource-usage, and keeps what ptxas
# reported of every kernel (registers, stack frame, spill stores and loads, per architecture)
# in OBJECT.resources next to the object file, for common/cmake/kernel_resources.py. Every
# other line of nvcc's standard error (warnings, errors) is passed through unchanged, so the
# build log reads as it would without the launcher; the exit status is nvcc's.
set -uo pipefail

object=
previous=
for arg in "$@"; do
  if [[ $previous == -o ]]; then object=$arg; fi
  previous=$arg
done

if [[ -z $object ]]; then exec "$@"; fi

log=$object.resources
"$@" 2> "$log.stderr"
status=$?
# ptxas's lines are "ptxas info    : ..." and, under "Function properties", an indented
# "N bytes stack frame, N bytes spill stores, N bytes spill loads".
ptxas_lines='^ptxas info|^ +[0-9]+ bytes stack frame'
grep -E "$ptxas_lines" "$log.stderr" > "$log"
grep -vE "$ptxas_lines" "$log.stderr" >&2
rm -f "$log.stderr"
exit "$status"
