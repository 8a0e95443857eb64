#!/usr/bin/env python3
"""The Hopper test kernels as ptxas compiled them (test nvcc/registers-hopper, label nvcc).

  check_registers.py BUILD_DIR --nvcc-version V

Reads the OBJECT.resources files that common/cmake/nvcc_resources.sh keeps beside
warpgroup_gemm.cuh's cuda objects, with common/cmake/kernel_resources.py's parser, and fails
when a warpgroup_gemm_kernel instance is missing, keeps a stack frame or spills (local memory in
the loop that feeds the tensor cores), or, compiled by the nvcc named in MEASURED_WITH, uses
more registers per thread than that nvcc gave it when the kernel was written (BUDGET). Another
nvcc's counts are printed, not compared: a compiler may move them either way.
"""

import argparse
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "common" / "cmake"))
import kernel_resources  # noqa: E402

MEASURED_WITH = "13.0"
# (n, A from registers) -> registers per thread on sm_90a with nvcc 13.0, the same for fp16 and
# bf16 and for B K-major and MN-major. The accumulator alone is n / 2 of them; wgmma_rs keeps
# A's 4 fragments of a tile (16 registers) and their swizzled addresses besides.
BUDGET = {(64, False): 58, (128, False): 90, (256, False): 154,
          (64, True): 112, (128, True): 161, (256, True): 207}
KERNEL = re.compile(r"test::warpgroup_gemm_kernel<(__half|__nv_bfloat16), (\d+), (true|false), "
                    r"\(ptx::Major\)([01])>")
ARCH = "sm_90a"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("build_dir", type=pathlib.Path)
    parser.add_argument("--nvcc-version", required=True)
    args = parser.parse_args()
    files = sorted(args.build_dir.glob("**/*.resources"))
    kernels = kernel_resources.parse(files)
    names = kernel_resources.readable(kernels)
    compare = ".".join(args.nvcc_version.split(".")[:2]) == MEASURED_WITH
    bad = kernel_resources.check_frames(kernels, names)
    seen = set()
    for mangled, kernel in sorted(kernels.items(), key=lambda item: names[item[0]]):
        m = KERNEL.fullmatch(names[mangled])
        if not m or ARCH not in kernel.registers:
            continue
        dtype, n, registers_a = m.group(1), int(m.group(2)), m.group(3) == "true"
        seen.add((dtype, n, registers_a, m.group(4)))
        used, budget = kernel.registers[ARCH], BUDGET[(n, registers_a)]
        verdict = "" if not compare else " ok" if used <= budget else " MORE THAN THE BUDGET"
        print(f"{names[mangled]} on {ARCH}: {used} registers (nvcc {MEASURED_WITH} gave {budget})"
              f"{verdict}")
        if compare and used > budget:
            bad += 1
    expected = 2 * len(BUDGET) * 2  # 2 types x (n, A) x 2 majors of B
    if len(seen) != expected:
        print(f"error: {len(seen)} of the {expected} warpgroup_gemm_kernel instances found for "
              f"{ARCH} under {args.build_dir}: were the Hopper kernels built by nvcc?")
        bad += 1
    if not compare:
        print(f"note: the budget is nvcc {MEASURED_WITH}'s, this is nvcc {args.nvcc_version}: "
              "registers not compared, spills still checked")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
