#!/usr/bin/env python3
"""The workbook's kernels against PyTorch, on the same shapes, in the same run.

On a GPU machine with PyTorch:

    python3 bench/bench_vs_torch.py --programs build/chapter_programs.txt

runs, shape by shape, each chapter program with `--bench --csv` (every kernel of its ladder)
and then the PyTorch op on the same shape with the same method (10 warm-up runs, then --reps
runs, each after a write of twice the L2 cache, timed with CUDA events, median [min, max]):

    softmax    chapters 01, 02, 03        torch.softmax(x, dim=-1)           (rows, cols)
    layernorm  chapter 07                 torch.nn.functional.layer_norm     (rows, cols)
    attention  chapter 06 (once it has    F.scaled_dot_product_attention,    BH = 16,
               --bench)                   flash and cuDNN backends           L = 1024..16384

It writes one CSV with both (the columns of common/bench.hpp's csv_header), prints each
shape's best workbook kernel next to PyTorch with the ratio, and draws GB/s vs cols and
TFLOP/s vs sequence length into --plots (matplotlib if installed, else a hand-written SVG).

`--dry-run` needs neither torch nor a GPU: it checks that the chapter programs are built and
offer --bench, and prints every command the real run would execute (CTest: bench/dry-run).
`--plot-only CSV` redraws the plots and the table from a CSV of an earlier run.
Only the Python standard library is required besides torch; matplotlib is optional.
"""

import argparse
import csv
import datetime
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

# The columns of common/bench.hpp's csv_header(), in its order.
COLUMNS = ["op", "source", "chapter", "kernel", "dtype", "shape", "median_ms", "min_ms",
           "max_ms", "reps", "throughput", "unit", "gbps", "fraction_of_copy", "copy_gbps",
           "device", "date"]

WARMUP = 10  # common/bench.hpp kBenchWarmup: the same for the programs and for torch
ELEM_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}

# Which chapter program times which op. Chapters listed as required must offer --bench.
SOFTMAX_PROGRAMS = ["ch01", "ch02", "ch03"]
LAYERNORM_PROGRAMS = ["ch07"]
ATTENTION_PROGRAMS = ["ch06"]
REQUIRED_BENCH = SOFTMAX_PROGRAMS + LAYERNORM_PROGRAMS


# ------------------------------------------------------------------------------------------
# What is counted: the formulas of common/bench.cpp, so both sides divide the same numbers.
# ------------------------------------------------------------------------------------------

def softmax_bytes(rows, cols, elem):
    return 2.0 * rows * cols * elem  # read x, write y


def layernorm_bytes(rows, cols, elem):
    return 2.0 * rows * cols * elem + 2.0 * cols * elem + 2.0 * rows * 4  # x y, gamma beta, mean rstd


def attention_flops(bh, lq, lk, d, causal):
    full = 4.0 * bh * lq * lk * d  # Q K^T and P V, 2 Lq Lk D each
    return full / 2.0 if causal else full


def attention_bytes(bh, lq, lk, d, elem):
    return bh * (2.0 * lq * d + 2.0 * lk * d) * elem + bh * lq * 4.0  # Q O K V, lse


def gb_per_s(nbytes, ms):
    return nbytes / (ms * 1e-3) / 1e9 if ms > 0 else 0.0


def tflop_per_s(flops, ms):
    return flops / (ms * 1e-3) / 1e12 if ms > 0 else 0.0


def shape_string(rows, cols):
    return f"{rows}x{cols}"


def attention_shape_string(bh, lq, lk, d, causal):
    return f"bh{bh} lq{lq} lk{lk} d{d} {'causal' if causal else 'full'}"


def self_check():
    """The formulas against the values tests/test_bench.cpp checks on the C++ side."""
    assert layernorm_bytes(10, 7, 4) == 696.0
    assert layernorm_bytes(10, 7, 2) == 388.0
    assert attention_flops(1, 3, 5, 7, False) == 420.0
    assert attention_flops(16, 4096, 4096, 64, True) == 2.0 * 16 * 4096 * 4096 * 64
    assert attention_bytes(2, 3, 5, 7, 2) == 472.0
    assert softmax_bytes(49152, 32768, 4) == 12884901888.0
    assert gb_per_s(1e9, 1000.0) == 1.0 and tflop_per_s(5e11, 1.0) == 500.0
    assert attention_shape_string(16, 4096, 4096, 64, True) == "bh16 lq4096 lk4096 d64 causal"


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def summarize(samples):
    s = sorted(samples)
    return statistics.median(s), s[0], s[-1]


def make_row(op, source, chapter, kernel, dtype, shape, samples, nbytes, flops, copy_gbps,
             device, date):
    median, lo, hi = summarize(samples)
    gbps = gb_per_s(nbytes, median)
    thr, unit = (tflop_per_s(flops, median), "TFLOP/s") if flops > 0 else (gbps, "GB/s")
    return {"op": op, "source": source, "chapter": chapter, "kernel": kernel, "dtype": dtype,
            "shape": shape, "median_ms": f"{median:.6g}", "min_ms": f"{lo:.6g}",
            "max_ms": f"{hi:.6g}", "reps": str(len(samples)), "throughput": f"{thr:.6g}",
            "unit": unit, "gbps": f"{gbps:.6g}",
            "fraction_of_copy": f"{gbps / copy_gbps:.4f}" if copy_gbps > 0 else "0.0000",
            "copy_gbps": f"{copy_gbps:.6g}", "device": device, "date": date}


# ------------------------------------------------------------------------------------------
# The plan: which programs, which shapes, which commands
# ------------------------------------------------------------------------------------------

def find_programs(programs_file):
    """chNN -> path, from the build's chapter_programs.txt (one program path per line)."""
    if not os.path.isfile(programs_file):
        raise SystemExit(f"bench_vs_torch: error: {programs_file} not found; build the workbook "
                         "first (cmake --build build) or pass --programs")
    programs = {}
    with open(programs_file) as f:
        for line in f:
            path = line.strip()
            if path:
                programs[os.path.basename(path)] = path
    return programs


def program_help(path):
    try:
        out = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        return None, str(e)
    if out.returncode != 0:
        return None, f"`{path} --help` exited with {out.returncode}"
    return out.stdout, None


def powers_of_two(lo, hi):
    n, out = lo, []
    while n <= hi:
        out.append(n)
        n *= 2
    return out


class Job:
    """One shape of one op: the workbook commands and the torch calls timed on it."""

    def __init__(self, op, dtype, shape, nbytes, flops, commands, torch_calls, params):
        self.op, self.dtype, self.shape = op, dtype, shape
        self.nbytes, self.flops = nbytes, flops
        self.commands = commands        # [(chNN, argv)]
        self.torch_calls = torch_calls  # [(kernel name, description)]
        self.params = params


def plan(args, programs, notes):
    helps = {}
    for name, path in programs.items():
        helps[name], _ = program_help(path) if os.path.isfile(path) else (None, None)

    def bench_programs(names):
        ok = [n for n in names if helps.get(n) and "--bench" in helps[n]]
        for n in names:
            if n not in programs:
                notes.append(f"{n}: not built in this build (WB_ONLY_CHAPTERS?); skipped")
            elif n not in ok:
                notes.append(f"{n}: has no --bench yet; skipped")
        return ok

    jobs = []
    common = ["--bench", "--reps", str(args.reps), "--csv", "{csv}"]
    for op, names, torch_name in (("softmax", SOFTMAX_PROGRAMS, "torch.softmax"),
                                  ("layernorm", LAYERNORM_PROGRAMS, "F.layer_norm")):
        if op not in args.ops:
            continue
        names = bench_programs(names)
        for dtype in args.dtypes:
            elem = ELEM_BYTES[dtype]
            for cols in args.cols:
                shape = shape_string(args.rows, cols)
                nbytes = (softmax_bytes if op == "softmax" else layernorm_bytes)(args.rows, cols, elem)
                commands = []
                for n in names:
                    takes_dtype = "--dtype" in helps[n]
                    if dtype != "fp32" and not takes_dtype:
                        continue  # the chapter's kernels are fp32 only
                    argv = [programs[n]] + common + ["--rows", str(args.rows), "--cols", str(cols)]
                    commands.append((n, argv + (["--dtype", dtype] if takes_dtype else [])))
                desc = (f"{torch_name}(x, dim=-1)" if op == "softmax" else
                        f"{torch_name}(x, ({cols},), gamma, beta, eps=1e-5)")
                jobs.append(Job(op, dtype, shape, nbytes, 0.0, commands,
                                [(torch_name, f"{desc}, x ({args.rows}, {cols}) {dtype}")],
                                {"rows": args.rows, "cols": cols}))
    if "attention" in args.ops:
        names = bench_programs(ATTENTION_PROGRAMS)
        for dtype in args.attention_dtypes:
            elem = ELEM_BYTES[dtype]
            for d in args.head_dims:
                for causal in (False, True):
                    for seqlen in args.seqlens:
                        shape = attention_shape_string(args.bh, seqlen, seqlen, d, causal)
                        commands = []
                        for n in names:
                            h = helps[n]
                            if (causal and "--causal" not in h) or (dtype != "fp32" and "--dtype" not in h):
                                continue
                            argv = [programs[n]] + common + ["--bh", str(args.bh), "--lq", str(seqlen),
                                                             "--lk", str(seqlen), "--d", str(d)]
                            argv += ["--causal"] if causal else []
                            argv += ["--dtype", dtype] if "--dtype" in h else []
                            commands.append((n, argv))
                        calls = [(f"sdpa {b}", f"F.scaled_dot_product_attention(q, k, v, is_causal={causal}) "
                                  f"under sdpa_kernel(SDPBackend.{b.upper()}_ATTENTION), "
                                  f"q k v (1, {args.bh}, {seqlen}, {d}) {dtype}")
                                 for b in ("flash", "cudnn")]
                        jobs.append(Job("attention", dtype, shape,
                                        attention_bytes(args.bh, seqlen, seqlen, d, elem),
                                        attention_flops(args.bh, seqlen, seqlen, d, causal),
                                        commands, calls,
                                        {"bh": args.bh, "seqlen": seqlen, "d": d, "causal": causal}))
    return jobs


# ------------------------------------------------------------------------------------------
# The real run (torch and a GPU)
# ------------------------------------------------------------------------------------------

class TorchTimer:
    """time_cuda of common/timer.cpp in torch: warm-up, then each run after a write of twice
    the L2 cache, timed with CUDA events."""

    def __init__(self, torch, warmup, reps):
        self.torch, self.warmup, self.reps = torch, warmup, reps
        props = torch.cuda.get_device_properties(0)
        l2 = getattr(props, "L2_cache_size", 0) or (64 << 20)
        self.flush = torch.empty(2 * max(l2, 1 << 20), dtype=torch.uint8, device="cuda")

    def time(self, fn):
        torch = self.torch
        for _ in range(self.warmup):
            fn()
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        samples = []
        for i in range(self.reps):
            self.flush.fill_(i & 0xFF)  # evict the inputs from L2
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            samples.append(start.elapsed_time(stop))
        return samples


def torch_dtype(torch, name):
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


def run_torch_job(torch, timer, job):
    """[(kernel, samples or None, note)] for the job's torch calls."""
    F = torch.nn.functional
    dt = torch_dtype(torch, job.dtype)
    out = []
    if job.op in ("softmax", "layernorm"):
        rows, cols = job.params["rows"], job.params["cols"]
        x = torch.randn(rows, cols, device="cuda", dtype=dt)
        if job.op == "softmax":
            out.append(("torch.softmax", timer.time(lambda: torch.softmax(x, dim=-1)), ""))
        else:
            g = torch.randn(cols, device="cuda", dtype=dt) * 0.5 + 1
            b = torch.randn(cols, device="cuda", dtype=dt) * 0.5
            out.append(("F.layer_norm", timer.time(lambda: F.layer_norm(x, (cols,), g, b, 1e-5)), ""))
        del x
    else:
        p = job.params
        q, k, v = (torch.randn(1, p["bh"], p["seqlen"], p["d"], device="cuda", dtype=dt)
                   for _ in range(3))
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except ImportError:
            return [("sdpa", None, "torch.nn.attention.sdpa_kernel missing (torch < 2.3)")]
        for name, backend in (("sdpa flash", "FLASH_ATTENTION"), ("sdpa cudnn", "CUDNN_ATTENTION")):
            if not hasattr(SDPBackend, backend):
                out.append((name, None, f"SDPBackend.{backend} not in this torch"))
                continue
            try:
                with sdpa_kernel(getattr(SDPBackend, backend)):
                    fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=p["causal"])  # noqa: E731
                    out.append((name, timer.time(fn), ""))
            except RuntimeError as e:  # the backend cannot take this dtype, shape or device
                out.append((name, None, str(e).splitlines()[0][:120]))
    torch.cuda.empty_cache()
    return out


def torch_copy_gbps(torch, timer):
    nbytes = 1 << 30
    src = torch.ones(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    samples = timer.time(lambda: dst.copy_(src))
    del src, dst
    torch.cuda.empty_cache()
    return samples, 2.0 * nbytes


def real_run(args, jobs, notes):
    try:
        import torch
    except ImportError:
        raise SystemExit("bench_vs_torch: error: PyTorch is not installed (pip install torch); "
                         "--dry-run checks the plan without it")
    if not torch.cuda.is_available():
        raise SystemExit("bench_vs_torch: error: torch sees no CUDA GPU; absolute times only "
                         "come from one (--dry-run prints the plan without it)")
    device, date = torch.cuda.get_device_name(0), utc_now()
    timer = TorchTimer(torch, WARMUP, args.reps)
    copy_samples, copy_bytes = torch_copy_gbps(torch, timer)
    torch_copy = gb_per_s(copy_bytes, summarize(copy_samples)[0])
    rows = [make_row("copy", "torch", "torch", "Tensor.copy_", "u8", "1073741824", copy_samples,
                     copy_bytes, 0.0, torch_copy, device, date)]
    print(f"device: {device}; torch {torch.__version__}; torch copy roofline {torch_copy:.1f} GB/s")
    with tempfile.TemporaryDirectory() as tmp:
        for job in jobs:
            csv_path = os.path.join(tmp, "workbook.csv")
            workbook = []
            for name, argv in job.commands:
                if os.path.exists(csv_path):
                    os.remove(csv_path)
                argv = [a.replace("{csv}", csv_path) for a in argv]
                done = subprocess.run(argv, capture_output=True, text=True)
                if done.returncode != 0:
                    notes.append(f"{name} {job.shape}: exit {done.returncode}: "
                                 f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")
                    continue
                with open(csv_path, newline="") as f:
                    workbook += list(csv.DictReader(f))
            rows += workbook
            copies = [float(r["copy_gbps"]) for r in workbook if float(r["copy_gbps"]) > 0]
            copy = statistics.median(copies) if copies else torch_copy
            for kernel, samples, note in run_torch_job(torch, timer, job):
                if samples is None:
                    notes.append(f"{kernel} {job.dtype} {job.shape}: skipped: {note}")
                    continue
                rows.append(make_row(job.op, "torch", "torch", kernel, job.dtype, job.shape,
                                     samples, job.nbytes, job.flops, copy, device, date))
            print(f"  {job.op} {job.dtype} {job.shape}: {len(workbook)} workbook rows, torch done",
                  flush=True)
    return rows


# ------------------------------------------------------------------------------------------
# Output: CSV, ratio table, plots
# ------------------------------------------------------------------------------------------

def write_csv(path, rows):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def print_table(header, rows, out=sys.stdout):
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    out.write(line(header) + "\n" + "  ".join("-" * w for w in widths) + "\n")
    for r in rows:
        out.write(line(r) + "\n")


def ratio_table(rows):
    """Per (op, dtype, shape): the best workbook kernel and each torch kernel, with the ratio."""
    groups = {}
    for r in rows:
        if r["op"] != "copy":
            groups.setdefault((r["op"], r["dtype"], r["shape"]), []).append(r)
    table = []
    for (op, dtype, shape), rs in groups.items():
        ours = [r for r in rs if r["source"] == "workbook"]
        best = max(ours, key=lambda r: float(r["throughput"])) if ours else None
        for t in [r for r in rs if r["source"] == "torch"] or [None]:
            if best is None and t is None:
                continue
            ratio = (f"{float(best['throughput']) / float(t['throughput']):.2f}"
                     if best and t and float(t["throughput"]) > 0 else "-")
            ref = best or t
            table.append([op, dtype, shape,
                          best["kernel"] if best else "-",
                          f"{float(best['throughput']):.1f}" if best else "-",
                          f"{100 * float(best['fraction_of_copy']):.1f}%" if best else "-",
                          t["kernel"] if t else "-",
                          f"{float(t['throughput']):.1f}" if t else "-",
                          ratio, ref["unit"]])
    return ["op", "dtype", "shape", "best workbook kernel", "workbook", "of copy bw",
            "torch", "torch value", "workbook / torch", "unit"], table


def series_for(rows, op, dtype, x_of, extra=lambda r: True):
    """{label: [(x, y)]}, one series per (source, kernel)."""
    series = {}
    for r in rows:
        if r["op"] == op and r["dtype"] == dtype and extra(r):
            label = (r["chapter"] + " " if r["source"] == "workbook" else "") + r["kernel"]
            series.setdefault(label, []).append((x_of(r), float(r["throughput"])))
    return {k: sorted(v) for k, v in series.items()}


def svg_plot(path, title, xlabel, ylabel, series, hline=None):
    """A log2-x line plot as a standalone SVG, with the standard library only."""
    W, H, L, R, T, B = 900, 520, 70, 250, 40, 60
    xs = [x for pts in series.values() for x, _ in pts]
    ys = [y for pts in series.values() for _, y in pts] + ([hline[1]] if hline else [])
    if not xs:
        return False
    lx0, lx1 = math.log2(min(xs)), math.log2(max(xs))
    lx1 = lx1 if lx1 > lx0 else lx0 + 1
    y1 = max(ys) * 1.1 or 1.0
    px = lambda x: L + (math.log2(x) - lx0) / (lx1 - lx0) * (W - L - R)  # noqa: E731
    py = lambda y: H - B - y / y1 * (H - T - B)  # noqa: E731
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
              "#7f7f7f", "#bcbd22", "#17becf"]
    esc = lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">{esc(title)}</text>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>']
    for x in sorted(set(xs)):
        out.append(f'<text x="{px(x):.1f}" y="{H - B + 16}" text-anchor="middle">{x}</text>')
    for i in range(6):
        y = y1 * i / 5
        out.append(f'<line x1="{L}" y1="{py(y):.1f}" x2="{W - R}" y2="{py(y):.1f}" stroke="#ddd"/>'
                   f'<text x="{L - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.0f}</text>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 15}" text-anchor="middle">{esc(xlabel)}</text>')
    out.append(f'<text x="18" y="{(T + H - B) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 18 {(T + H - B) / 2})">{esc(ylabel)}</text>')
    if hline:
        out.append(f'<line x1="{L}" y1="{py(hline[1]):.1f}" x2="{W - R}" y2="{py(hline[1]):.1f}" '
                   f'stroke="black" stroke-dasharray="6 4"/>')
    legend = list(series.items()) + ([(hline[0], None)] if hline else [])
    for i, (label, pts) in enumerate(legend):
        c = colors[i % len(colors)] if pts is not None else "black"
        ly = T + 10 + 18 * i
        dash = '' if pts is not None else ' stroke-dasharray="6 4"'
        out.append(f'<line x1="{W - R + 15}" y1="{ly}" x2="{W - R + 40}" y2="{ly}" stroke="{c}" '
                   f'stroke-width="2"{dash}/><text x="{W - R + 46}" y="{ly + 4}">{esc(label)}</text>')
        if pts:
            d = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
            out.append(f'<polyline points="{d}" fill="none" stroke="{c}" stroke-width="2"/>')
            out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{c}"/>' for x, y in pts]
    out.append("</svg>\n")
    with open(path, "w") as f:
        f.write("\n".join(out))
    return True


def plot(path_stem, title, xlabel, ylabel, series, hline, notes):
    """matplotlib when installed (SVG and PNG), else the hand-written SVG."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        if svg_plot(path_stem + ".svg", title, xlabel, ylabel, series, hline):
            notes.append(f"matplotlib not installed: drew {path_stem}.svg by hand")
        return
    fig, ax = plt.subplots(figsize=(9, 5.2))
    for label, pts in series.items():
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=label)
    if hline:
        ax.axhline(hline[1], color="black", linestyle="--", label=hline[0])
    ax.set_xscale("log", base=2)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1, 0.5))
    fig.tight_layout()
    fig.savefig(path_stem + ".svg")
    fig.savefig(path_stem + ".png", dpi=120)
    plt.close(fig)


def draw_plots(rows, plots_dir, notes):
    os.makedirs(plots_dir, exist_ok=True)
    device = next((r["device"] for r in rows if r["device"]), "?")
    date = next((r["date"][:10] for r in rows if r["date"]), "?")
    for op in ("softmax", "layernorm"):
        for dtype in sorted({r["dtype"] for r in rows if r["op"] == op}):
            s = series_for(rows, op, dtype, lambda r: int(r["shape"].split("x")[1]))
            copies = [float(r["copy_gbps"]) for r in rows
                      if r["op"] == op and r["source"] == "workbook" and float(r["copy_gbps"]) > 0]
            hline = (f"copy roofline {statistics.median(copies):.0f} GB/s",
                     statistics.median(copies)) if copies else None
            rows_ = next(r["shape"].split("x")[0] for r in rows if r["op"] == op)
            plot(os.path.join(plots_dir, f"{op}_{dtype}_gbps_vs_cols"),
                 f"{op} {dtype}, ({rows_}, cols), {device}, {date}", "cols", "GB/s", s, hline, notes)
    att = [r for r in rows if r["op"] == "attention"]
    for dtype in sorted({r["dtype"] for r in att}):
        for key in sorted({" ".join(r["shape"].split()[i] for i in (0, 3, 4)) for r in att}):
            bh, d, mask = key.split()
            s = series_for(att, "attention", dtype,
                           lambda r: int(r["shape"].split()[1][2:]),
                           lambda r, k=key: " ".join(r["shape"].split()[i] for i in (0, 3, 4)) == k)
            plot(os.path.join(plots_dir, f"attention_{dtype}_{d}_{mask}_tflops_vs_seqlen"),
                 f"attention {dtype}, {bh} {d} {mask}, {device}, {date}", "sequence length",
                 "TFLOP/s", s, None, notes)


def report(rows, args, notes):
    header, table = ratio_table(rows)
    if table:
        print("\nWorkbook vs PyTorch (ratio > 1: the workbook is faster):")
        print_table(header, table)
    draw_plots(rows, args.plots, notes)
    print(f"\nCSV: {args.out}; plots: {args.plots}")


# ------------------------------------------------------------------------------------------

def parse_args(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--programs", default=os.path.join(root, "build", "chapter_programs.txt"),
                   help="the build's chapter_programs.txt (default build/chapter_programs.txt)")
    p.add_argument("--out", default=os.path.join(root, "docs", "bench", "results.csv"))
    p.add_argument("--plots", default=os.path.join(root, "docs", "bench"))
    p.add_argument("--reps", type=int, default=50, help="timed runs per kernel (default 50)")
    p.add_argument("--rows", type=int, default=49152)
    p.add_argument("--cols", default="32-32768", help="LO-HI (powers of 2) or a list a,b,c")
    p.add_argument("--dtypes", default="fp32", help="softmax and LayerNorm dtypes (fp32,fp16,bf16)")
    p.add_argument("--ops", default="softmax,layernorm,attention")
    p.add_argument("--bh", type=int, default=16)
    p.add_argument("--seqlens", default="1024-16384")
    p.add_argument("--head-dims", default="64,128")
    p.add_argument("--attention-dtypes", default="fp16,bf16")
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
    a.ops = a.ops.split(",")
    a.dtypes, a.attention_dtypes = a.dtypes.split(","), a.attention_dtypes.split(",")
    for dt in a.dtypes + a.attention_dtypes:
        if dt not in ELEM_BYTES:
            p.error(f"unknown dtype '{dt}' (fp32, fp16, bf16)")
    if a.reps <= 0:
        p.error("--reps must be positive")
    return a


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
    programs = find_programs(args.programs)
    jobs = plan(args, programs, notes)
    if args.dry_run:
        missing = []
        for n in REQUIRED_BENCH:
            if n in programs and not os.path.isfile(programs[n]):
                missing.append(f"{n}: {programs[n]} is listed but not built")
            elif n in programs:
                h, why = program_help(programs[n])
                if h is None or "--bench" not in h:
                    missing.append(f"{n}: {why or 'its --help lists no --bench'}")
        print(f"bench_vs_torch --dry-run: {len(programs)} chapter programs in {args.programs}")
        for n in sorted(programs):
            print(f"  {n}: {programs[n]}")
        print(f"method: {WARMUP} warm-up runs, {args.reps} timed runs, L2 flushed before each, "
              "CUDA events, median [min, max] (the same for the programs and for torch)")
        for job in jobs:
            print(f"\n{job.op} {job.dtype} {job.shape}:")
            for _, argv_ in job.commands:
                print("  $ " + shlex.join(a.replace("{csv}", "RUN.csv") for a in argv_))
            for kernel, desc in job.torch_calls:
                print(f"  torch: {desc}")
        try:
            import torch  # noqa: F401
            print("\ntorch: installed")
        except ImportError:
            print("\ntorch: not installed here (the real run needs it and a GPU)")
        print(f"would write {args.out} and plots into {args.plots}")
        for n in notes:
            print("note:", n)
        if missing:
            for m in missing:
                print("bench_vs_torch: error:", m, file=sys.stderr)
            return 1
        if not any(job.commands for job in jobs):
            print("bench_vs_torch: error: no chapter program with --bench found", file=sys.stderr)
            return 1
        return 0
    rows = real_run(args, jobs, notes)
    write_csv(args.out, rows)
    report(rows, args, notes)
    for n in notes:
        print("note:", n)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
