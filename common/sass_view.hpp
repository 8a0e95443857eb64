// `chNN --sass`: what the GPU runs, no GPU needed. For each rung of the chapter's ladder, the
// instruction mix of its kernel's main loop in nvcc's sm_90 machine code (SASS): tensor-core
// MMAs, ldmatrix, cp.async and TMA copies, global and shared loads and stores, float math,
// MUFU.EX2, integer (address) arithmetic, moves, barriers, shuffles. The build disassembles the
// kernel objects it made (cuobjdump -sass, common/cmake/sass_mix.py, which also says how a rung's
// kernel and its main loop are found) into chNN_sass.csv beside the program, which this prints
// in ladder order. A build without nvcc has no machine code: it refuses --sass in one line.
#pragma once

#include <string>
#include <vector>

#include "common/cli.hpp"

namespace wb {

/// Prints the SASS table of `chapter` for its rungs `rungs` (the ladder's names, in order).
/// Returns the program's exit code: 2 in a build without nvcc, 1 when the table cannot be read
/// or names no rung of the ladder, each after one line.
int print_sass_view(const Cli& cli, const std::string& chapter,
                    const std::vector<std::string>& rungs);

}  // namespace wb
