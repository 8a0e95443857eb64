#!/usr/bin/env python3
"""The workbook's kernels against PyTorch, on the same shapes, in the same run.

On a GPU machine with PyTorch:

    python3 bench/bench_vs_torch.py --programs build/chapter_programs.txt

runs, shape by shape, each chapter program with `--bench --csv` (every kernel of its ladder)
and then the PyTorch op on the same shape with the same method (10 warm-up runs, then --reps
runs, each after a write of twice the L2 cache, timed with CUDA events, median [min, max]):

    softmax    torch.softmax(x, dim=-1)                                     (rows, cols)
    layernorm  torch.nn.functional.layer_norm                               (rows, cols)
    attention  F.scaled_dot_product_attention, flash and cuDNN backends     BH = 16,
                                                                            L = 1024..16384
    decode     the same, a few query rows against a long KV cache           BH = 32, lq 1, 4,
               (grouped-query: enable_gqa=True)                             lk = 4096..131072,
                                                                            32 or 4 KV heads
    attention_backward  torch.autograd.grad of the same, flash,             BH = 16,
               efficient and cuDNN backends                                 L = 1024..4096

With --in-process the rungs the PyTorch ops run (python/flash_workbook) are called through the
ops in this process instead, on torch's stream, with the same timer (bench/wb_bench/ops_side.py);
the CSV's columns are the same.

The script knows no chapter: each program's `--list --csv -` names its op and the limits of
every rung (element types, row lengths, head dimensions, causal), and a program runs on the
shapes and types some rung of its ladder takes (bench/wb_bench/plan.py).

It writes one CSV with both (the columns of common/bench.hpp's csv_header), prints each
shape's best workbook kernel next to PyTorch with the ratio, and draws GB/s vs cols and
TFLOP/s vs sequence length into --plots (matplotlib, Debian's python3-matplotlib).

`--dry-run` needs neither torch nor a GPU: it reads every program's ladder and prints every
command the real run would execute (CTest: bench/dry-run).
`--plot-only CSV` redraws the plots and the table from a CSV of an earlier run.
Only the Python standard library is required besides torch and matplotlib.
"""

import argparse
import os
import shlex
import sys

from wb_bench.counting import ELEM_BYTES, WARMUP, self_check
from wb_bench.output import CsvAppender, read_csv, report
from wb_bench.plan import OPS, find_programs, load_programs, plan
from wb_bench.ops_side import import_ops
from wb_bench.torch_side import import_torch, real_run


def powers_of_two(lo, hi):
    n, out = lo, []
    while n <= hi:
        out.append(n)
        n *= 2
    return out


# The validators of the options' values: each turns bad input into argparse's refusal, so that
# no size reaches the plan as 0 (a range from 0 doubles 0 forever), negative or not a number.
def positive_int(text):
    """A size, count, or timeout: an integer >= 1."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'")
    return n


def int_list(text):
    """LO-HI, the powers of two from LO to HI (1 <= LO <= HI), or a list a,b,c of positive
    integers."""
    lo, dash, hi = text.partition("-")
    try:
        values = [positive_int(t) for t in ((lo, hi) if dash else text.split(","))]
    except argparse.ArgumentTypeError:
        values = None
    if values is None or (dash and values[0] > values[1]):
        raise argparse.ArgumentTypeError(
            f"expected LO-HI with 1 <= LO <= HI or a list a,b,c of positive integers, got '{text}'")
    return powers_of_two(*values) if dash else values


def names_in(known):
    """The validator of a list a,b,c whose every name is one of `known`."""
    def names(text):
        items = text.split(",")
        unknown = [t for t in items if t not in known]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown '{unknown[0]}' (known: {', '.join(known)})")
        return items
    return names


def csv_file(text):
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"no file '{text}'")
    return text


class OneLineParser(argparse.ArgumentParser):
    """Refuses bad input in one line and exit code 2, as the chapter programs do
    (common/cmake/expect_refusal.cmake checks both); argparse's usage block would bury the
    reason under a dozen lines, and --help prints it."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse_args(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    p = OneLineParser(prog="bench_vs_torch", description=__doc__.split("\n\n")[0])
    dtypes = names_in(tuple(ELEM_BYTES))
    p.add_argument("--programs", default=os.path.join(root, "build", "chapter_programs.txt"),
                   help="the build's chapter_programs.txt (default build/chapter_programs.txt)")
    p.add_argument("--out", default=os.path.join(root, "docs", "bench", "results.csv"))
    p.add_argument("--plots", default=os.path.join(root, "docs", "bench"))
    p.add_argument("--reps", type=positive_int, default=50,
                   help="timed runs per kernel (default 50)")
    p.add_argument("--program-timeout", type=positive_int, default=300,
                   help="seconds one chapter program may take on one shape before it is "
                        "stopped (its rows so far are kept; default 300)")
    p.add_argument("--rows", type=positive_int, default=49152)
    p.add_argument("--cols", type=int_list, default="32-32768",
                   help="LO-HI (powers of 2) or a list a,b,c")
    p.add_argument("--dtypes", type=dtypes, default="fp32,fp16,bf16",
                   help="softmax and LayerNorm dtypes (default fp32,fp16,bf16)")
    p.add_argument("--ops", type=names_in(OPS), default=",".join(OPS))
    p.add_argument("--bh", type=positive_int, default=16)
    p.add_argument("--seqlens", type=int_list, default="1024-16384")
    p.add_argument("--head-dims", type=int_list, default="64,128")
    p.add_argument("--attention-dtypes", type=dtypes, default="fp16,bf16",
                   help="attention and decode dtypes")
    p.add_argument("--decode-bh", type=positive_int, default=32, help="heads of the decode shapes")
    p.add_argument("--decode-lq", type=int_list, default="1,4",
                   help="query rows of the decode shapes")
    p.add_argument("--decode-lengths", type=int_list, default="4096-131072",
                   help="KV cache lengths")
    p.add_argument("--decode-groups", type=int_list, default="1,8",
                   help="query heads per KV head of the decode shapes (1: multi-head)")
    p.add_argument("--backward-seqlens", type=int_list, default="1024-4096",
                   help="sequence lengths of the attention_backward shapes")
    p.add_argument("--backward-dtypes", type=dtypes, default="fp32,fp16,bf16",
                   help="attention_backward dtypes")
    p.add_argument("--dry-run", action="store_true",
                   help="check the programs and print the plan; needs no torch, no GPU")
    p.add_argument("--plot-only", type=csv_file, metavar="CSV",
                   help="redraw the table and plots from a CSV")
    p.add_argument("--in-process", action="store_true",
                   help="time the workbook's rungs through its PyTorch ops (python/flash_workbook) "
                        "in this process, with torch's timer and stream; programs with a rung no "
                        "op runs still run as subprocesses")
    p.add_argument("--plot-prefix", default="", metavar="PREFIX",
                   help="put PREFIX before every plot's file name (two runs' plots in one folder)")
    a = p.parse_args(argv)
    # Checked before the run, not where they are written: --plots only after the whole run.
    if os.path.isdir(a.out):
        p.error(f"--out {a.out} is a directory")
    if os.path.exists(a.plots) and not os.path.isdir(a.plots):
        p.error(f"--plots {a.plots} is not a directory")
    return a


def dry_run(args, loaded, jobs, notes):
    print(f"bench_vs_torch --dry-run: {len(loaded)} chapter programs in {args.programs}")
    for p in loaded.values():
        print(f"  {p.name}: {p.op}, rungs {', '.join(r['name'] for r in p.rungs)}; "
              f"{'--bench' if p.offers_bench else 'no --bench'}; {p.path}")
    print(f"method: {WARMUP} warm-up runs, {args.reps} timed runs, L2 flushed before each, "
          "CUDA events, median [min, max] (the same for the programs and for torch)")
    for job in jobs:
        print(f"\n{job.op} {job.dtype} {job.shape}:")
        for _, argv_ in job.commands:
            print("  $ " + shlex.join(a.replace("{csv}", "RUN.csv") for a in argv_))
        for _, desc in job.torch_calls:
            print(f"  torch: {desc}")
    try:
        import torch  # noqa: F401
        print("\ntorch: installed")
    except ImportError:
        print("\ntorch: not installed here (the real run needs it and a GPU)")
    print(f"would write {args.out} and plots into {args.plots}")
    for n in notes:
        print("note:", n)
    if not any(job.commands for job in jobs):
        print("bench_vs_torch: error: no chapter program with --bench found", file=sys.stderr)
        return 1
    return 0


def main(argv):
    args = parse_args(argv)
    self_check()
    notes = []
    if args.plot_only:
        rows = read_csv(args.plot_only)
        report(rows, args, notes)
        for n in notes:
            print("note:", n)
        return 0
    loaded = load_programs(find_programs(args.programs), notes)
    jobs = plan(args, loaded, notes)
    if args.dry_run:
        return dry_run(args, loaded, jobs, notes)
    if not any(job.commands for job in jobs):
        print("bench_vs_torch: error: no chapter program with --bench found", file=sys.stderr)
        return 1
    torch = import_torch()  # before the sink: a run that cannot start keeps the last CSV
    fw = import_ops(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) if args.in_process else None
    sink = CsvAppender(args.out)  # written as the run goes: a run cut short keeps its rows
    try:
        rows = real_run(torch, args, jobs, notes, sink, loaded, fw)
    finally:
        sink.close()
    report(rows, args, notes)
    for n in notes:
        print("note:", n)
    if not any(r["source"] == "workbook" for r in rows):
        print("bench_vs_torch: error: no workbook kernel was timed (see the notes)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
