"""Output of a run: the CSV, the ratio table, the plots (matplotlib)."""

import csv
import os
import statistics
import sys

from .counting import COLUMNS


class CsvAppender:
    """The run's CSV, written as it goes: the header first, then each job's rows, flushed,
    so that a run cut short (a time limit, a crash) keeps what it measured."""

    def __init__(self, path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.file = open(path, "w", newline="")
        self.writer = csv.DictWriter(self.file, fieldnames=COLUMNS, extrasaction="ignore")
        self.writer.writeheader()
        self.file.flush()

    def add(self, rows):
        self.writer.writerows(rows)
        self.file.flush()

    def close(self):
        self.file.close()


def read_csv(path):
    """The rows of an earlier run's CSV, or the first column it lacks in one line."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise SystemExit(f"bench_vs_torch: error: {path} has no column '{missing[0]}' "
                             "(not a CSV of bench_vs_torch)")
        return list(reader)


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
                          # a kernel whose bytes are not counted (the backward) has no fraction
                          f"{100 * float(best['fraction_of_copy']):.1f}%"
                          if best and float(best["gbps"]) > 0 else "-",
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


def plot(path_stem, title, xlabel, ylabel, series, hline, notes):
    """One log2-x line plot, PNG, with matplotlib (Debian: python3-matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        notes.append(f"matplotlib not installed (apt-get install python3-matplotlib): "
                     f"no {path_stem}.png")
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
    fig.savefig(path_stem + ".png", dpi=120)
    plt.close(fig)


def draw_plots(rows, plots_dir, notes, prefix=""):
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
            plot(os.path.join(plots_dir, f"{prefix}{op}_{dtype}_gbps_vs_cols"),
                 f"{op} {dtype}, ({rows_}, cols), {device}, {date}", "cols", "GB/s", s, hline, notes)
    # Attention, forward and backward: TFLOP/s against the sequence length, per (bh, d, mask).
    # Shapes "bh16 lq4096 lk4096 d64 causal": fields 0, 3 and 4 are the key, field 1 the x.
    for op in ("attention", "attention_backward"):
        att = [r for r in rows if r["op"] == op]
        for dtype in sorted({r["dtype"] for r in att}):
            for key in sorted({" ".join(r["shape"].split()[i] for i in (0, 3, 4)) for r in att}):
                bh, d, mask = key.split()
                s = series_for(
                    att, op, dtype, lambda r: int(r["shape"].split()[1][2:]),
                    lambda r, k=key: " ".join(r["shape"].split()[i] for i in (0, 3, 4)) == k)
                plot(os.path.join(plots_dir, f"{prefix}{op}_{dtype}_{d}_{mask}_tflops_vs_seqlen"),
                     f"{op} {dtype}, {bh} {d} {mask}, {device}, {date}", "sequence length",
                     "TFLOP/s", s, None, notes)
    # Decoding: GB/s of the cache read against its length, per (heads, KV heads, lq, d), with
    # the copy roofline. Shapes "b1 hq32 hkv4 lq1 lk4096 d64": field 4 is the x.
    dec = [r for r in rows if r["op"] == "decode"]
    copies = [float(r["copy_gbps"]) for r in dec if float(r["copy_gbps"]) > 0]
    hline = (f"copy roofline {statistics.median(copies):.0f} GB/s",
             statistics.median(copies)) if copies else None
    for dtype in sorted({r["dtype"] for r in dec}):
        for key in sorted({" ".join(r["shape"].split()[i] for i in (1, 2, 3, 5)) for r in dec}):
            hq, hkv, lq, d = key.split()
            s = series_for(
                dec, "decode", dtype, lambda r: int(r["shape"].split()[4][2:]),
                lambda r, k=key: " ".join(r["shape"].split()[i] for i in (1, 2, 3, 5)) == k)
            plot(os.path.join(plots_dir, f"{prefix}decode_{dtype}_{hq}_{hkv}_{lq}_{d}_gbps_vs_lk"),
                 f"decode {dtype}, {hq} {hkv} {lq} {d}, {device}, {date}", "KV cache length",
                 "GB/s", s, hline, notes)


def row_ops_html(rows):
    """The row ops (softmax, LayerNorm) as one HTML table: a line per (op, dtype), a column per
    cols, each cell the best workbook kernel's fraction of the copy bandwidth / its ratio to
    PyTorch in the same run (the targets: >= 90 % from 1024 columns on, >= 1.0x everywhere).
    None when the run has no row op."""
    best, torch_gbps, cols_seen = {}, {}, set()
    for r in rows:
        if r["op"] not in ("softmax", "layernorm"):
            continue
        cols = int(r["shape"].split("x")[1])
        cols_seen.add(cols)
        key = (r["op"], r["dtype"], cols)
        if r["source"] == "workbook":
            if key not in best or float(r["throughput"]) > float(best[key]["throughput"]):
                best[key] = r
        elif r["source"] == "torch":
            torch_gbps[key] = float(r["throughput"])
    if not best:
        return None
    cols = sorted(cols_seen)
    out = ['<table class="markdowntable">',
           "<tr><th>op, dtype</th>" + "".join(f"<th>{c}</th>" for c in cols) + "</tr>"]
    for op, dtype in sorted({(k[0], k[1]) for k in best}):
        cells = []
        for c in cols:
            r = best.get((op, dtype, c))
            t = torch_gbps.get((op, dtype, c))
            if r is None:
                cells.append("<td></td>")
                continue
            ratio = f"{float(r['throughput']) / t:.2f}" if t else "-"
            cells.append(f"<td title=\"{r['kernel']}\">"
                         f"{100 * float(r['fraction_of_copy']):.0f}/{ratio}</td>")
        out.append(f"<tr><td>{op} {dtype}</td>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out) + "\n"


def report(rows, args, notes):
    html = row_ops_html(rows)
    if html:
        os.makedirs(args.plots, exist_ok=True)
        with open(os.path.join(args.plots, "row_ops_vs_torch.html"), "w") as f:
            f.write(html)
    header, table = ratio_table(rows)
    if table:
        print("\nWorkbook vs PyTorch (ratio > 1: the workbook is faster):")
        print_table(header, table)
    draw_plots(rows, args.plots, notes, args.plot_prefix)
    print(f"\nCSV: {args.out}; plots: {args.plots}")


