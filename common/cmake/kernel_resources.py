#!/usr/bin/env python3
"""What ptxas made of every kernel: registers per thread, stack frame and spills.

Reads the OBJECT.resources files that common/cmake/nvcc_resources.sh keeps beside each
chapter's kernel objects (nvcc --resource-usage) and prints one line per kernel, its
registers on every architecture built, with the stack frame and the spill stores and loads
where they are not 0. No GPU is needed: this is what the compiler decided.

  kernel_resources.py BUILD_DIR                 the table
  kernel_resources.py BUILD_DIR --check         also exit 1 if a kernel spills or keeps a
                                                stack frame (local memory), outside ALLOWED
  ... --page-table PAGE --nvcc-version V        also hold a rung table of PAGE (rows
                                                "| `fa2_rung` | regs D=64 | ... | regs D=128 |")
                                                to sm_90's registers, when V's major.minor is
                                                the one the page names ("nvcc 13.0 gives")
  ... --page-claims PAGE... --nvcc-version V    also hold every count in the pages' prose
                                                marked "<!--registers KERNEL on sm_NN-->N"
                                                (the comment is invisible on the page; N is
                                                the number the reader sees) to the compiler,
                                                under the same condition

Registers decide how many blocks an SM holds (65536 per SM, allocated 8 per thread at a
time); a spill or a stack frame puts values in local memory, which is off-chip DRAM behind
L1: in the inner loop of a kernel meant to run at the tensor-core peak, that is a defect.
"""

import argparse
import pathlib
import re
import shutil
import subprocess
import sys

# Local memory accepted, each with its reason: (kernel regex, architecture regex, most bytes of
# stack frame, spill stores or spill loads, why). Anything else fails --check.
SLOW_DIVISION = ("the IEEE division's slow path (operands near the ends of the float range) is "
                 "a subroutine, and ptxas saves registers around its call; the common path "
                 "never takes it (with -prec-div=false the frame is gone)")
ALLOWED = [
    (r"ch08::fa2_register_blocked_kernel<[^,]+, 128>", r"sm_8\d", 16,
     "below sm_90 ptxas needs a few registers more than 255 for 32 rows x 128 columns of O "
     "per warp; chapter 08's page names the 8 bytes (section ch08_layout)"),
    (r"ch06::fa2_tensor_core_kernel<__half, 64>", r"sm_\d+", 32,
     "ptxas's trade: 128 registers (4 blocks of 4 warps per SM) for 16 bytes of spills; with "
     "__launch_bounds__(128, 3) it takes 146-153 and 3 blocks, no spill; chapter 08 replaces it"),
    (r"ch03::warp_registers_kernel<[^,]+, (16|32), false>", r"sm_8\d", 8, SLOW_DIVISION),
    (r"ch03::warp_registers_kernel<(__half|__nv_bfloat16), 64, true>", r"sm_8\d", 8,
     SLOW_DIVISION),
    (r"ch07::warp_per_row_kernel<(float, 32|__half, 64|__nv_bfloat16, 64), 32, true>", r"sm_\d+",
     16, SLOW_DIVISION),
]

# sm_90a: the architecture-specific target of the Hopper kernels (wgmma, setmaxnreg).
ENTRY = re.compile(r"Compiling entry function '(\S+)' for '(sm_\d+a?)'")
PROPERTIES = re.compile(r"Function properties for (\S+)")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers")


class Kernel:
    def __init__(self):
        self.registers = {}  # arch -> registers per thread
        self.frame = {}  # arch -> (stack frame, spill stores, spill loads)


def parse(files):
    """{mangled name: Kernel} over every .resources file (callees' frames included)."""
    kernels = {}
    for path in files:
        arch = entry = properties = None
        for line in path.read_text().splitlines():
            if m := ENTRY.search(line):
                entry, arch = m.groups()
                kernels.setdefault(entry, Kernel())
            elif m := PROPERTIES.search(line):
                properties = m.group(1)
            elif (m := FRAME.search(line)) and properties and arch:
                kernels.setdefault(properties, Kernel()).frame[arch] = tuple(map(int, m.groups()))
            elif (m := USED.search(line)) and entry:
                kernels[entry].registers[arch] = int(m.group(1))
    return kernels


def readable(mangled):
    """{mangled: short name}: demangled (c++filt), without the argument list,
    `void`, `wb::` and anonymous namespaces."""
    names = list(mangled)
    if shutil.which("c++filt"):
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
        demangled = out.stdout.splitlines()
        if len(demangled) == len(names):
            names = demangled
    short = []
    for name in names:
        name = name.removeprefix("void ").replace("(anonymous namespace)::", "")
        depth = 0
        for i, c in enumerate(name):  # cut at the argument list's '(' outside template args
            depth += c == "<"
            depth -= c == ">"
            if c == "(" and depth == 0:
                name = name[:i]
                break
        short.append(re.sub(r"\bwb::", "", name))
    return dict(zip(mangled, short))


def frame_note(frame):
    stack, stores, loads = frame
    if not (stack or stores or loads):
        return ""
    return f" (stack {stack}, spills {stores}/{loads})"


def table(kernels, names, archs):
    rows = []
    for mangled, k in kernels.items():
        if not k.registers:
            continue  # a callee: its frame is reported with the check
        cells = []
        for arch in archs:
            regs = k.registers.get(arch)
            cells.append("-" if regs is None else f"{regs}{frame_note(k.frame.get(arch, (0, 0, 0)))}")
        rows.append((names[mangled], cells))
    rows = sorted(set((name, tuple(cells)) for name, cells in rows))  # a header's kernels
    # compiled into two translation units are two identical rows
    width = max([len("kernel")] + [len(r[0]) for r in rows])
    cell = max([len(a) for a in archs] + [len(c) for r in rows for c in r[1]])
    print("registers per thread by architecture (stack frame and spill stores/loads in bytes where not 0)")
    print(f"{'kernel':<{width}}  " + "  ".join(f"{a:>{cell}}" for a in archs))
    for name, cells in rows:
        print(f"{name:<{width}}  " + "  ".join(f"{c:>{cell}}" for c in cells))


def check_frames(kernels, names):
    bad = 0
    for mangled, k in kernels.items():
        for arch, frame in sorted(k.frame.items()):
            if not any(frame):
                continue
            allowed = [why for kernel, archs, most, why in ALLOWED
                       if re.search(kernel, names[mangled]) and re.fullmatch(archs, arch)
                       and frame[0] <= most and frame[1] <= most and frame[2] <= most]
            if allowed:
                print(f"accepted: {names[mangled]} on {arch}{frame_note(frame)}: {allowed[0]}")
            else:
                print(f"error: {names[mangled]} on {arch}{frame_note(frame)}: local memory "
                      "in a kernel (make the array's indices compile-time constants, or "
                      "give the kernel fewer live values)")
                bad += 1
    return bad


def same_compiler(text, page, nvcc_version):
    """Whether the compiler a page's counts are from ("nvcc NN.N gives") is this build's: "yes";
    "no" when it is another (a note says so); "error" when the page names none. The register
    counts here and the SASS counts of sass_mix.py both ask it."""
    named = re.search(r"nvcc (\d+\.\d+) gives", text)
    if not named:
        print(f"error: {page}: no 'nvcc NN.N gives' names the compiler its counts are from")
        return "error"
    if named.group(1) != ".".join(nvcc_version.split(".")[:2]):
        print(f"note: {page.name}'s counts are nvcc {named.group(1)}'s, this is nvcc "
              f"{nvcc_version}: not compared")
        return "no"
    return "yes"


def comparable(kernels, text, page, nvcc_version, archs):
    """Whether the page's counts can be compared with this build's: "yes"; "no" when they are
    another compiler's or for an architecture not built (a note says so); "error" when the
    page names no compiler."""
    verdict = same_compiler(text, page, nvcc_version)
    if verdict != "yes":
        return verdict
    built = {a for k in kernels.values() for a in k.registers}
    missing = sorted(a for a in archs if a not in built)
    if missing:
        print(f"note: {page.name} states counts for {', '.join(missing)}, which this build does "
              "not compile for: not compared")
        return "no"
    return "yes"


# Rungs 2 to 4 of chapter 08 are one kernel, fa2_mma_kernel<T, D, Fragments>: the fragments it
# reads and the layout of their tiles (its third argument) say which rung an instance is.
MMA_RUNGS = {("PairFragments", "false"): "fa2_mma", ("LdmatrixFragments", "false"): "fa2_ldmatrix",
             ("LdmatrixFragments", "true"): "fa2_swizzle"}


def page_rung(name):
    """(rung, D) of a kernel of chapter 08's rung table, or None."""
    m = re.fullmatch(r"ch08::fa2_mma_kernel<[^,]+, (\d+), ch08::(\w+)<ch08::TileLayout<\d+, "
                     r"(true|false)> ?> ?>", name)
    if m:
        rung = MMA_RUNGS.get((m.group(2), m.group(3)))
        return (rung, int(m.group(1))) if rung else None
    m = re.fullmatch(r"ch08::(fa2_\w+)_kernel<[^,]+, (\d+)>", name)
    return (m.group(1), int(m.group(2))) if m else None


def check_page(kernels, names, page, nvcc_version):
    """The page's rung table against sm_90's registers (fp16 and bf16 alike)."""
    text = page.read_text()
    verdict = comparable(kernels, text, page, nvcc_version, ["sm_90"])
    if verdict != "yes":
        return int(verdict == "error")
    measured = {}  # (rung, D) -> set of sm_90 registers
    for mangled, k in kernels.items():
        rung_and_d = page_rung(names[mangled])
        if rung_and_d and "sm_90" in k.registers:
            measured.setdefault(rung_and_d, set()).add(k.registers["sm_90"])
    # The register table's rows: rung | registers | blocks (warps) | registers | blocks (warps);
    # the measured ladder's rows (TFLOP/s) have no "(warps)" column and are not matched.
    row = re.compile(r"^\| `(fa2_\w+)` \| (\d+) \| \d+ \(\d+\) \| (\d+) \| \d+ \(\d+\) \|", re.M)
    bad = compared = 0
    for rung, d64, d128 in row.findall(text):
        for d, stated in ((64, int(d64)), (128, int(d128))):
            got = measured.get((rung, d))
            compared += 1
            if got != {stated}:
                print(f"error: {page.name}: {rung} at D = {d} states {stated} registers on "
                      f"sm_90, nvcc {nvcc_version} gives {sorted(got) if got else 'nothing'}")
                bad += 1
    if compared == 0:
        print(f"error: {page.name}: no rung table rows found")
        return 1
    print(f"{page.name}: {compared - bad} of {compared} register counts agree with nvcc "
          f"{nvcc_version} on sm_90")
    return bad


CLAIM = re.compile(r"<!--registers (.+?) on (sm_\d+a?)-->(\d+)")


def check_claims(kernels, names, pages, nvcc_version):
    """Every marked register count in the pages' prose against the compiler."""
    bad = 0
    for page in pages:
        text = page.read_text()
        claims = CLAIM.findall(text)
        if not claims:
            continue
        verdict = comparable(kernels, text, page, nvcc_version, sorted({c[1] for c in claims}))
        if verdict != "yes":
            bad += int(verdict == "error")
            continue
        agree = 0
        for kernel, arch, stated in claims:
            got = {k.registers[arch] for mangled, k in kernels.items()
                   if names[mangled] == kernel and arch in k.registers}
            if got == {int(stated)}:
                agree += 1
            else:
                print(f"error: {page.name}: states {stated} registers for {kernel} on {arch}, "
                      f"nvcc {nvcc_version} gives {sorted(got) if got else 'no such kernel'}")
                bad += 1
        print(f"{page.name}: {agree} of {len(claims)} register counts in the text agree with "
              f"nvcc {nvcc_version}")
    return bad


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("build_dir", type=pathlib.Path)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--page-table", type=pathlib.Path)
    parser.add_argument("--page-claims", type=pathlib.Path, nargs="+", default=[])
    parser.add_argument("--nvcc-version")
    args = parser.parse_args()
    files = sorted(args.build_dir.glob("**/*.resources"))
    if not files:
        print(f"error: no *.resources under {args.build_dir}: were the kernels built by nvcc?")
        return 1
    kernels = parse(files)
    names = readable(kernels)
    archs = sorted({a for k in kernels.values() for a in k.registers})
    table(kernels, names, archs)
    bad = check_frames(kernels, names) if args.check else 0
    if args.page_table:
        bad += check_page(kernels, names, args.page_table, args.nvcc_version or "")
    bad += check_claims(kernels, names, args.page_claims, args.nvcc_version or "")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
