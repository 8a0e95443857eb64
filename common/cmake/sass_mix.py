#!/usr/bin/env python3
"""What the GPU runs: the instruction mix of every rung's main loop, from nvcc's machine code.

Disassembles the chapters' kernel objects (`cuobjdump -sass`, which calls nvdisasm: the SASS
that ptxas wrote for sm_90, sm_90a for chapter 11; other architectures in the object are
skipped), splits the listing by kernel, finds each kernel's main loop and counts its
instructions by kind. No GPU is needed: this is what the compiler decided, as the simulator's
traffic counts are what the kernels move.

  sass_mix.py --chapter 08_fa2_at_speed OBJ... [--chapter 06_fa2_rescaled OBJ...]
              --source-dir ROOT [--shown INSTANCE...] [--cuobjdump PATH] [--csv FILE] [--quiet]
      the table of every rung of the first chapter named; OBJ are its kernel objects (and those
      of the earlier chapters whose rungs it names again, KERNELS_FROM), one object per kernel
      file, named as the build names them: `<file stem>.cuda.cu.o`; --shown names instances to
      show instead of the rule's (wb_add_chapter's SASS_SHOWN)
  sass_mix.py --from-csv CSV... [--page-claims PAGE... --nvcc-version V] [--html DIR]
      reads tables written before (the build's chNN_sass.csv), holds the counts the pages
      state, marked "<!--sass NAME on sm_NN: SCOPE COLUMN-->N" (NAME a rung of the page's
      chapter, for its shown kernel, or a kernel's full name; SCOPE `loop` or `kernel`;
      COLUMN one of COLUMNS below), to them when V's major.minor is the one the page names
      ("nvcc 13.0 gives"), and writes DIR/chNN_sass.html for the docs
  sass_mix.py --sass-text LISTING --chapter NAME OBJ... --csv FILE
      the same from a saved listing, each object's `cuobjdump -sass` output after a line
      "== OBJ" (the planted test, tests/nvcc)

The CSV: chapter, place and rung (empty for a kernel file of no rung), role (main: the rung's
kernel; helper: another kernel its object holds; none: a rung with no kernel of its own; other:
a kernel file of no rung), kernel, arch, scope (loop: the main loop; kernel: all of it), range
(the loop's addresses), via (the earlier chapter's rung it is, or why it has no kernel), then one
column per kind of instruction (COLUMNS) and the total.

Which kernel is a rung's: every kernel file is its own translation unit, so a rung's object
(rungs/N_name.cuh -> N_name.cuda.cu.o) holds exactly the kernels its launcher instantiates. Its
main kernel is the one whose `__global__` function the rung file defines; where it defines none,
the largest kernel of its object (chapter 08's rungs 2-4 are instances of fa2_mma_kernel from
mma_kernel.cuh); where its object holds none, the rung of the earlier chapter its file names
again (`chNN::Rungs<kThisBackend>::name()`); else it has no kernel of its own (chapter 07's
dispatch, which launches one of rungs 1-3). Its other kernels (a prep or a combine kernel) are
listed as helpers. The shown instance of a main kernel: fp16 (`__half`) where it has one, else
float, else bfloat16, and of those the instance with the most instructions: D = 128 for the
attention kernels, the longest row for chapter 07's warp_per_row.

The main loop: a loop is a backward branch (`BRA` to a lower address, not a divergence path's
`BRA.DIV` return), its body the straight range from the target to the branch, which must hold no
EXIT or RET (a divergence fallback jumping back is not a loop). The main loop is the loop with
the most tensor-core MMAs (HMMA, HGMMA), the innermost of those with as many; in a kernel
without MMA, the loop with the most MUFU (a softmax's exponentials, Welford's quotients: chapter
07's statistics pass rather than its normalizing pass, which has none), then the most float
arithmetic (FP32 and MUFU: chapter 09's K/V loop rather than a reduction inside it; an inner
loop is counted inside it once), the innermost of equals. A kernel with no loop at all (unrolled
whole, chapter 07's warp_per_row) is shown whole: its mix is per row. The counts are static:
each instruction of the body once, as ptxas laid it out; in the attention kernels one trip of
the main loop is one K/V tile (ptxas does not unroll it: its trip count is not known), so the
loop's counts are per warp and K/V tile (per Q tile in chapter 10's backward kernels, whose
outer loop walks the Q tiles), as every SASS instruction is a warp's.
"""

import argparse
import csv
import html
import pathlib
import re
import shutil
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from kernel_resources import readable, same_compiler  # noqa: E402  (shared with nvcc/registers)

# The columns, in order, each a kind of instruction (by its opcode, the text before the first
# dot, unless a rule below names the whole mnemonic).
COLUMNS = ["HMMA", "HGMMA", "LDSM", "cp.async/TMA", "LDG/STG", "LDS/STS", "FP32", "MUFU.EX2",
           "MUFU", "convert", "integer", "move", "barrier", "SHFL", "other"]
KINDS = {
    "HMMA": "HMMA",  # mma.sync (and wmma): a warp's tensor-core product
    "HGMMA": "HGMMA",  # wgmma.mma_async: a warpgroup's (Hopper)
    "LDSM": "LDSM",  # ldmatrix
    # cp.async (LDGSTS, and LDGDEPBAR: its commit_group); TMA and bulk copies
    "LDGSTS": "cp.async/TMA", "LDGDEPBAR": "cp.async/TMA", "UTMALDG": "cp.async/TMA",
    "UTMASTG": "cp.async/TMA", "UTMAPF": "cp.async/TMA", "UBLKCP": "cp.async/TMA",
    "UBLKPF": "cp.async/TMA",
    # global memory (and local: a spill, which nvcc/registers rejects), atomics included
    "LDG": "LDG/STG", "STG": "LDG/STG", "LD": "LDG/STG", "ST": "LDG/STG", "REDG": "LDG/STG",
    "RED": "LDG/STG", "ATOMG": "LDG/STG", "ATOM": "LDG/STG", "LDL": "LDG/STG", "STL": "LDG/STG",
    "LDS": "LDS/STS", "STS": "LDS/STS", "ATOMS": "LDS/STS",
    "FFMA": "FP32", "FMUL": "FP32", "FADD": "FP32", "FMNMX": "FP32", "FSETP": "FP32",
    "FSEL": "FP32", "FCHK": "FP32", "FSWZADD": "FP32",
    # conversions and packed 16-bit arithmetic (F2FP packs two floats into P's fp16 pair)
    "F2FP": "convert", "F2F": "convert", "F2I": "convert", "I2F": "convert", "I2FP": "convert",
    "FRND": "convert", "HADD2": "convert", "HMUL2": "convert", "HFMA2": "convert",
    "HMNMX2": "convert", "HSETP2": "convert",
    # integer: addresses, indices, bounds and masks (the uniform datapath's U... twins too)
    "IMAD": "integer", "IADD3": "integer", "IADD": "integer", "LEA": "integer",
    "SHF": "integer", "LOP3": "integer", "LOP": "integer", "ISETP": "integer",
    "IABS": "integer", "IMNMX": "integer", "VIADD": "integer", "VIMNMX": "integer",
    "VIADDMNMX": "integer", "PRMT": "integer", "SEL": "integer", "IMUL": "integer",
    "POPC": "integer", "FLO": "integer", "BREV": "integer", "BMSK": "integer",
    "SGXT": "integer",
    "MOV": "move", "S2R": "move", "S2UR": "move", "CS2R": "move", "LDC": "move",
    "R2UR": "move", "MOVM": "move", "P2R": "move", "R2P": "move",
    # barriers: __syncthreads and named barriers, mbarriers (SYNCS), cp.async's wait_group
    # (DEPBAR), wgmma's fences and waits (WARPGROUP), __syncwarp, memory fences
    "BAR": "barrier", "SYNCS": "barrier", "DEPBAR": "barrier", "MEMBAR": "barrier",
    "FENCE": "barrier", "WARPSYNC": "barrier", "WARPGROUP": "barrier", "ERRBAR": "barrier",
    "SHFL": "SHFL",
}
# ptxas issues some moves on other units: IMAD.MOV (a copy on the integer multiplier) and
# HFMA2.MMA with RZ operands (a constant on the FMA pipe).
MOVE_MNEMONICS = re.compile(r"^(IMAD\.MOV|HFMA2\.MMA)")
UNIFORM = {"UIADD3", "UIMAD", "UISETP", "ULEA", "ULOP3", "USHF", "USEL", "UPRMT", "UMOV",
           "ULDC", "ULOP", "UIABS", "UIMNMX", "UPOPC", "UFLO", "UBREV", "USGXT", "UBMSK"}
FLOAT_MATH = ("FP32", "MUFU.EX2", "MUFU")  # what a kernel without MMA computes with
MMA = ("HMMA", "HGMMA")


def kind(mnemonic):
    """The column of one instruction's mnemonic ("HMMA.16816.F32", "MUFU.EX2", ...)."""
    if MOVE_MNEMONICS.match(mnemonic):
        return "move"
    opcode = mnemonic.split(".")[0]
    if opcode == "MUFU":
        return "MUFU.EX2" if mnemonic.startswith("MUFU.EX2") else "MUFU"
    if opcode in UNIFORM:
        opcode = opcode[1:]
    return KINDS.get(opcode, "other")


# cuobjdump -sass: "code for sm_90", then per kernel "Function : MANGLED" and its instructions,
# "/*0a40*/  @!P0 BRA 0xb40 ;"
CODE_FOR = re.compile(r"^\s*code for (sm_\w+)")
FUNCTION = re.compile(r"^\s*Function : (\S+)")
INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]\s+)?([A-Z][A-Za-z0-9_.]*)"
                         r"(?:\s+([^;]*))?;")


class Kernel:
    def __init__(self, mangled, arch):
        self.mangled = mangled
        self.arch = arch
        self.code = []  # (address, mnemonic, operands)

    def counts(self, lo=None, hi=None):
        c = dict.fromkeys(COLUMNS, 0)
        for address, mnemonic, _ in self.code:
            if lo is None or lo <= address <= hi:
                c[kind(mnemonic)] += 1
        return c

    def loops(self):
        """[(target, branch)] of every loop: a backward BRA whose range holds no EXIT or RET."""
        ends = [a for a, m, _ in self.code if m.split(".")[0] in ("EXIT", "RET")]
        found = {}
        for address, mnemonic, operands in self.code:
            if mnemonic.split(".")[0] != "BRA" or mnemonic.startswith("BRA.DIV"):
                continue
            m = re.search(r"0x([0-9a-f]+)", operands or "")
            if not m:
                continue
            target = int(m.group(1), 16)
            if target >= address or any(target <= e <= address for e in ends):
                continue
            found[target] = max(found.get(target, 0), address)  # one loop per head
        return sorted(found.items())

    def main_loop(self):
        """(target, branch) of the main loop (the module's docstring says how), or None."""
        loops = self.loops()
        if not loops:
            return None
        def weight(loop):
            c = self.counts(*loop)
            mma = sum(c[k] for k in MMA)
            work = sum(c[k] for k in FLOAT_MATH)
            mufu = c["MUFU"] + c["MUFU.EX2"]
            return (mma, mufu if mma == 0 else 0, work if mma == 0 else 0, -(loop[1] - loop[0]))
        return max(loops, key=weight)


def disassembler(obj, tool):
    """A function returning the `cuobjdump -sass` listing of one object."""
    def listing():
        run = subprocess.run([tool, "-sass", str(obj)], capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"sass_mix.py: {tool} -sass {obj} failed: {run.stderr.strip()}")
        return run.stdout
    return listing


def parse(text):
    """[Kernel] of one listing, sm_90 and sm_90a code only."""
    kernels, arch, current = [], None, None
    for line in text.splitlines():
        if m := CODE_FOR.match(line):
            arch = m.group(1)
            current = None
        elif m := FUNCTION.match(line):
            current = Kernel(m.group(1), arch) if arch in ("sm_90", "sm_90a") else None
            if current:
                kernels.append(current)
        elif current and (m := INSTRUCTION.match(line)):
            current.code.append((int(m.group(1), 16), m.group(2), m.group(3) or ""))
    return kernels


def function_of(name):
    """`ch08::fa2_mma_kernel` of `ch08::fa2_mma_kernel<__half, 64, ...>`."""
    return name.split("<", 1)[0]


def type_rank(name):
    args = name.split("<", 1)[1] if "<" in name else ""
    first = args.split(",")[0].strip(" >")
    return {"__half": 0, "float": 1, "__nv_bfloat16": 2}.get(first, 3)


SHOWN_INSTANCES = set()  # --shown: instances a chapter names, preferred to the rule's


def shown_instance(instances):
    """The instance a rung's row shows: one --shown names, else fp16 first, then float, then
    bf16, and of those the largest."""
    return min(instances, key=lambda k: (k.name not in SHOWN_INSTANCES, type_rank(k.name),
                                         -len(k.code), k.name))


RUNG_FILE = re.compile(r"^(\d+)_([a-z][a-z0-9_]*)$")
GLOBAL_FN = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(")
DELEGATE = re.compile(r"\bch(\d\d)::Rungs<kThisBackend>::(\w+)\(\)")


class Chapter:
    """A chapter's kernel objects, disassembled when first asked for (an earlier chapter's
    objects only for the rung it names again)."""

    def __init__(self, name, listings):
        self.name = name  # 08_fa2_at_speed
        self.listings = listings  # stem (2_fa2_mma, combine_kernel) -> () -> listing text
        self.parsed = {}

    def stems(self):
        return sorted(self.listings)

    def kernels(self, stem):
        if stem not in self.parsed:
            kernels = parse(self.listings[stem]()) if stem in self.listings else []
            names = readable([k.mangled for k in kernels])
            for k in kernels:
                k.name = names[k.mangled]
            self.parsed[stem] = kernels
        return self.parsed[stem]


def rows_of(chapters, source_dir):
    """The table: one row per (rung, kernel shown) and scope, for the first chapter."""
    by_name = {c.name[:2]: c for c in chapters}
    chapter = chapters[0]
    rung_dir = source_dir / "chapters" / chapter.name / "rungs"
    rungs = []
    for path in sorted(rung_dir.glob("*.cuh"), key=lambda p: int(p.stem.split("_")[0])):
        if m := RUNG_FILE.match(path.stem):
            rungs.append((int(m.group(1)), m.group(2), path))
    rows = []
    used = set()

    def add(place, rung, role, kernels, via=""):
        for k in kernels:
            loop = k.main_loop()
            for scope, span in (("loop", loop), ("kernel", None)):
                if scope == "loop" and span is None:
                    where = "no loop: the whole kernel"
                    c = k.counts()
                elif scope == "loop":
                    where = f"0x{span[0]:04x}-0x{span[1]:04x}"
                    c = k.counts(*span)
                else:
                    where = "all"
                    c = k.counts()
                rows.append({"chapter": chapter.name, "place": place, "rung": rung, "role": role,
                             "kernel": k.name, "arch": k.arch, "scope": scope, "range": where,
                             "via": via, **c, "total": sum(c.values())})

    def rung_kernels(ch, place, name, path, depth=0):
        """(main instances, helper instances, via) of rung `name` of chapter `ch`."""
        kernels = ch.kernels(f"{place}_{name}")
        if not kernels:
            m = DELEGATE.search(path.read_text()) if depth == 0 else None
            if m and m.group(1) in by_name and m.group(1) != ch.name[:2]:
                other = by_name[m.group(1)]
                for p in (source_dir / "chapters" / other.name / "rungs").glob("*.cuh"):
                    if (rm := RUNG_FILE.match(p.stem)) and rm.group(2) == m.group(2):
                        main, helpers, _ = rung_kernels(other, int(rm.group(1)), m.group(2), p, 1)
                        return main, helpers, f"{other.name} rung {rm.group(2)}"
            return [], [], ""
        own = set(GLOBAL_FN.findall(path.read_text()))
        functions = {}
        for k in kernels:
            functions.setdefault(function_of(k.name), []).append(k)
        mains = [f for f in functions if f.split("::")[-1] in own]
        if not mains:
            mains = [max(functions, key=lambda f: max(len(k.code) for k in functions[f]))]
        main = [shown_instance(functions[f]) for f in mains]
        helpers = [shown_instance(functions[f]) for f in functions if f not in mains]
        return main, helpers, ""

    for place, name, path in rungs:
        main, helpers, via = rung_kernels(chapter, place, name, path)
        used.add(f"{place}_{name}")
        if not main:
            rows.append({"chapter": chapter.name, "place": place, "rung": name, "role": "none",
                         "kernel": "", "arch": "", "scope": "loop", "range": "",
                         "via": "no kernel of its own", **dict.fromkeys(COLUMNS, ""),
                         "total": ""})
            continue
        add(place, name, "main", main, via)
        add(place, name, "helper", helpers, via)
    for stem in chapter.stems():  # the chapter's other kernel files
        if stem in used or RUNG_FILE.match(stem):
            continue
        kernels = chapter.kernels(stem)
        functions = {}
        for k in kernels:
            functions.setdefault(function_of(k.name), []).append(k)
        add("", "", "other", [shown_instance(v) for v in functions.values()])
    return rows


FIELDS = ["chapter", "place", "rung", "role", "kernel", "arch", "scope", "range", "via"] + \
    COLUMNS + ["total"]

# The columns a terminal table shows (the CSV has them all), short headers.
SHOWN = [("HMMA", "HMMA"), ("HGMMA", "HGMMA"), ("LDSM", "LDSM"), ("cp.async/TMA", "async"),
         ("LDG/STG", "LDG/STG"), ("LDS/STS", "LDS/STS"), ("FP32", "FP32"), ("MUFU.EX2", "EX2"),
         ("MUFU", "MUFU"), ("convert", "cvt"), ("integer", "int"), ("move", "move"),
         ("barrier", "bar"), ("SHFL", "SHFL"), ("other", "other"), ("total", "total")]


def print_table(rows, out=sys.stdout):
    shown = [r for r in rows if r["scope"] == "loop" and r["role"] in ("main", "none")]
    if not shown:
        return
    out.write(f"Chapter {shown[0]['chapter']}: the main loop of each rung's kernel, instructions "
              "by kind (static counts from cuobjdump -sass; per warp and trip)\n")
    width = max(len("rung"), *(len(r["rung"]) for r in shown))
    out.write(f"{'#':>2}  {'rung':<{width}}  " + " ".join(f"{h:>7}" for _, h in SHOWN) + "\n")
    for r in shown:
        cells = " ".join(f"{str(r[c]) or '-':>7}" for c, _ in SHOWN)
        out.write(f"{r['place']:>2}  {r['rung']:<{width}}  {cells}\n")
    out.write("kernels shown, and where the loop is:\n")
    for r in shown:
        what = r["via"] if r["role"] == "none" else f"{r['kernel']} on {r['arch']}, {r['range']}"
        if r["via"] and r["role"] != "none":
            what += f" ({r['via']})"
        out.write(f"  {r['rung']}: {what}\n")


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)


def read_csvs(paths):
    rows = []
    for path in paths:
        if not path.exists():
            sys.exit(f"sass_mix.py: no table {path}: build the chapter programs first (each "
                     "builds its chNN_sass.csv)")
        with open(path, newline="") as f:
            rows.extend(csv.DictReader(f))
    return rows


def write_html(rows, out_dir):
    """DIR/chNN_sass.html per chapter: the main loops' mix, the page's table."""
    for chapter in sorted({r["chapter"] for r in rows}):
        shown = [r for r in rows if r["chapter"] == chapter and r["scope"] == "loop"
                 and r["role"] in ("main", "none")]
        # A kind no rung of the chapter issues is left out (the table fits the page).
        kept = [(c, h) for c, h in SHOWN if any(str(r[c]) not in ("", "0") for r in shown)]
        cells = [c for c, _ in kept]
        lines = ['<table class="markdownTable">', "<tr class=\"markdownTableHead\">"
                 "<th class=\"markdownTableHeadNone\">rung</th>" +
                 "".join(f'<th class="markdownTableHeadRight" title="{html.escape(c)}">'
                         f"{html.escape(h)}</th>" for c, h in kept) + "</tr>"]
        for r in shown:
            lines.append('<tr class="markdownTableBody"><td class="markdownTableBodyNone">'
                         f"<code>{html.escape(r['rung'])}</code></td>" +
                         "".join(f'<td class="markdownTableBodyRight">'
                                 f"{html.escape(str(r[c]) or '-')}</td>" for c in cells) + "</tr>")
        lines.append("</table>")
        notes = []
        for r in shown:
            if r["role"] == "none":
                notes.append(f"<code>{html.escape(r['rung'])}</code>: {html.escape(r['via'])}")
            else:
                via = f", {html.escape(r['via'])}" if r["via"] else ""
                notes.append(f"<code>{html.escape(r['rung'])}</code>: "
                             f"<code>{html.escape(r['kernel'])}</code> on {r['arch']}, "
                             f"{html.escape(r['range'])}{via}")
        left_out = [h for c, h in SHOWN if c not in cells]
        if left_out:
            lines.append(f"<p>No rung issues {', '.join(left_out)}: "
                         "those columns are left out.</p>")
        lines.append("<p>async: cp.async and TMA copies (LDGSTS and its commits, UTMALDG); EX2: "
                     "MUFU.EX2; MUFU: the other MUFU (RCP, RSQ, LG2); cvt: conversions and packed "
                     "16-bit math; int: integer and address arithmetic (IMAD, IADD3, LEA, SHF, "
                     "LOP3, ISETP...); move: MOV, S2R, CS2R, LDC; bar: barriers, mbarriers "
                     "(SYNCS), cp.async waits, wgmma fences, __syncwarp; other: branches, NOP, "
                     "predicate logic.</p>")
        lines.append("<p>The kernel each row shows, and its main loop's addresses: "
                     + "; ".join(notes) + ".</p>")
        ch = "ch" + chapter[:2]
        (out_dir / f"{ch}_sass.html").write_text("\n".join(lines) + "\n")


CLAIM = re.compile(r"<!--sass (.+?) on (sm_\w+): (loop|kernel) (\S+)-->(\d+)")


def check_claims(rows, pages, nvcc_version):
    """Every marked count in the pages against the table."""
    bad = 0
    for page in pages:
        text = page.read_text()
        claims = CLAIM.findall(text)
        if not claims:
            continue
        verdict = same_compiler(text, page, nvcc_version)
        if verdict != "yes":
            bad += int(verdict == "error")
            continue
        chapter = page.parent.name
        agree = 0
        for name, arch, scope, column, stated in claims:
            if column not in COLUMNS + ["total"]:
                print(f"error: {page.name}: '{column}' is no column ({', '.join(COLUMNS)}, total)")
                bad += 1
                continue
            match = [r for r in rows if r["scope"] == scope and r["arch"] == arch and
                     ((r["rung"] == name and r["role"] == "main") or r["kernel"] == name)]
            if any(r["chapter"] == chapter for r in match):  # a rung of the page's chapter
                match = [r for r in match if r["chapter"] == chapter]
            got = sorted({int(r[column]) for r in match})
            if got == [int(stated)]:
                agree += 1
            else:
                print(f"error: {page.name}: states {stated} {column} in the {scope} of {name} on "
                      f"{arch}, nvcc {nvcc_version} gives {got if got else 'no such kernel'}")
                bad += 1
        print(f"{page.name}: {agree} of {len(claims)} SASS counts in the text agree with nvcc "
              f"{nvcc_version}")
    return bad


def find_tool():
    tool = shutil.which("cuobjdump")
    if not tool:
        sys.exit("sass_mix.py: cuobjdump not found (python3 -m pip install "
                 "nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    return tool


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chapter", nargs="+", action="append", default=[],
                        metavar=("NAME", "OBJECT"))
    parser.add_argument("--source-dir", type=pathlib.Path,
                        default=pathlib.Path(__file__).resolve().parents[2])
    parser.add_argument("--cuobjdump")
    parser.add_argument("--sass-text", type=pathlib.Path)
    parser.add_argument("--shown", nargs="+", default=[])
    parser.add_argument("--csv", type=pathlib.Path)
    parser.add_argument("--from-csv", type=pathlib.Path, nargs="+", default=[])
    parser.add_argument("--html", type=pathlib.Path)
    parser.add_argument("--page-claims", type=pathlib.Path, nargs="+", default=[])
    parser.add_argument("--nvcc-version", default="")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()

    if args.chapter:
        SHOWN_INSTANCES.update(args.shown)
        saved = {}
        if args.sass_text:  # a saved listing, "== STEM" before each object's part
            saved = dict(re.findall(r"^== (\S+)\n(.*?)(?=^== |\Z)", args.sass_text.read_text(),
                                    re.S | re.M))
        chapters = []
        for name, *objects in args.chapter:
            listings = {}
            for obj in objects:
                stem = pathlib.Path(obj).name.split(".")[0]  # 2_fa2_mma.cuda.cu.o
                if args.sass_text:
                    listings[stem] = (lambda text: lambda: text)(saved.get(obj, ""))
                else:
                    listings[stem] = disassembler(obj, args.cuobjdump or find_tool())
            chapters.append(Chapter(name, listings))
        rows = rows_of(chapters, args.source_dir)
        if args.csv:
            write_csv(rows, args.csv)
        if not args.quiet:
            print_table(rows)
    else:
        rows = read_csvs(args.from_csv)
        if not args.quiet:
            for chapter in sorted({r["chapter"] for r in rows}):
                print_table([r for r in rows if r["chapter"] == chapter])
    if args.html:
        args.html.mkdir(parents=True, exist_ok=True)
        write_html(rows, args.html)
    return 1 if check_claims(rows, args.page_claims, args.nvcc_version) else 0


if __name__ == "__main__":
    sys.exit(main())
