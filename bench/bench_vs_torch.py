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
from wb_bench.plan import find_programs, load_programs, plan
from wb_bench.torch_side import real_run


def powers_of_two(lo, hi):
    n, out = lo, []
    while n <= hi:
        out.append(n)
        n *= 2
    return out


def parse_args(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--programs", default=os.path.join(root, "build", "chapter_programs.txt"),
                   help="the build's chapter_programs.txt (default build/chapter_programs.txt)")
    p.add_argument("--out", default=os.path.join(root, "docs", "bench", "results.csv"))
    p.add_argument("--plots", default=os.path.join(root, "docs", "bench"))
    p.add_argument("--reps", type=int, default=50, help="timed runs per kernel (default 50)")
    p.add_argument("--program-timeout", type=int, default=300,
                   help="seconds one chapter program may take on one shape before it is "
                        "stopped (its rows so far are kept; default 300)")
    p.add_argument("--rows", type=int, default=49152)
    p.add_argument("--cols", default="32-32768", help="LO-HI (powers of 2) or a list a,b,c")
    p.add_argument("--dtypes", default="fp32,fp16,bf16",
                   help="softmax and LayerNorm dtypes (default fp32,fp16,bf16)")
    p.add_argument("--ops", default="softmax,layernorm,attention,decode,attention_backward")
    p.add_argument("--bh", type=int, default=16)
    p.add_argument("--seqlens", default="1024-16384")
    p.add_argument("--head-dims", default="64,128")
    p.add_argument("--attention-dtypes", default="fp16,bf16", help="attention and decode dtypes")
    p.add_argument("--decode-bh", type=int, default=32, help="heads of the decode shapes")
    p.add_argument("--decode-lq", default="1,4", help="query rows of the decode shapes")
    p.add_argument("--decode-lengths", default="4096-131072", help="KV cache lengths")
    p.add_argument("--decode-groups", default="1,8",
                   help="query heads per KV head of the decode shapes (1: multi-head)")
    p.add_argument("--backward-seqlens", default="1024-4096",
                   help="sequence lengths of the attention_backward shapes")
    p.add_argument("--backward-dtypes", default="fp32,fp16,bf16",
                   help="attention_backward dtypes")
    p.add_argument("--dry-run", action="store_true",
                   help="check the programs and print the plan; needs no torch, no GPU")
    p.add_argument("--plot-only", metavar="CSV", help="redraw the table and plots from a CSV")
    a = p.parse_args(argv)

    def ints(text):
        if "-" in text:
            lo, hi = (int(t) for t in text.split("-"))
            return powers_of_two(lo, hi)
        return [int(t) for t in text.split(",")]

    a.cols, a.seqlens, a.head_dims = ints(a.cols), ints(a.seqlens), ints(a.head_dims)
    a.decode_lq, a.decode_lengths = ints(a.decode_lq), ints(a.decode_lengths)
    a.decode_groups = ints(a.decode_groups)
    a.backward_seqlens = ints(a.backward_seqlens)
    a.backward_dtypes = a.backward_dtypes.split(",")
    a.ops = a.ops.split(",")
    a.dtypes, a.attention_dtypes = a.dtypes.split(","), a.attention_dtypes.split(",")
    for dt in a.dtypes + a.attention_dtypes + a.backward_dtypes:
        if dt not in ELEM_BYTES:
            p.error(f"unknown dtype '{dt}' (fp32, fp16, bf16)")
    if a.reps <= 0:
        p.error("--reps must be positive")
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
    sink = CsvAppender(args.out)  # written as the run goes: a run cut short keeps its rows
    try:
        rows = real_run(args, jobs, notes, sink)
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
