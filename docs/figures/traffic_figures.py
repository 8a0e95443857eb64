#!/usr/bin/env python3
"""The pages' traffic tables and figures, drawn by the docs build from what the simulator counted.

Reads the CSV files that `chNN --profile --csv FILE` wrote into DIR (common/ladder_profile.hpp
documents the columns) and writes next to them:

  chNN_traffic.html, chNN_traffic.png   every chapter: each rung's counted bytes per element
                                        (or per attention row) against its header's formula
  io_vs_n.png                           attention: bytes per head against the sequence length
  io_vs_tile.png                        FA1 and FA2: bytes per head against the tile size
  io_table.html                         N = 1024, d = 64: per head, and at GPT-2 medium's
                                        16 heads x batch 64, beside the FA paper's figures
  io_fwd_bwd.html, io_fwd_bwd.png       the same for forward + backward (chapter 10's page)

Inputs: DIR/chNN_profile.csv (a chapter program on its profile shape) and
DIR/io_chNN[_dtype]_N.csv (chapters 04-06 at lq = lk = N, d = 64, one head; chapter 10 at the
largest N). Any row whose counted
bytes differ from the stated formula stops the build: a figure never shows a claim the count
contradicts.

Usage: traffic_figures.py DIR
"""
import csv
import glob
import html
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

# Figure 2 of the FlashAttention paper (arXiv 2205.14135 v2): GPT-2 medium attention, N 1024,
# d 64, 16 heads, batch 64, forward + backward, fp16, on an A100: measured HBM reads + writes.
PAPER_HEADS = 16 * 64
PAPER_STANDARD_GB = 40.3
PAPER_FLASH_GB = 4.4

# The attention rungs of the IO figures, in the derivation's order: (chapter, rung, label).
IO_RUNGS = [
    ("ch05", "standard", "standard (ch05 baseline: S and P stored, fp32)"),
    ("ch04", "fused_softmax_qk", "fused QK^T-softmax (ch04: P stored, fp32)"),
    ("ch05", "fa1", "FA1 (ch05: Bc = 32, O and (m, l) round trips, fp32)"),
    ("ch06", "fa2", "FA2 (ch06: Br = 16, K and V once per Q tile, fp32)"),
    ("ch06", "fa2_tensor_core", "FA2 on tensor cores (ch06: fp16, Br = 64)"),
]

# Forward + backward, both counted at the largest N: (label, forward rung, backward rung).
FWD_BWD = [
    ("standard (ch05 forward: S, P stored; ch10 backward: P read, dP, dS stored; fp32)",
     ("ch05", "standard"), ("ch10", "standard_backward")),
    ("FA2 on tensor cores (ch06 forward, ch10 backward: no N x N matrix; fp16)",
     ("ch06", "fa2_tensor_core"), ("ch10", "fa2_backward_tensor_core")),
]


def fail(message):
    sys.exit("traffic_figures.py: " + message)


def read_rows(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        if r["source"] == "counted" and r["stated_loaded_bytes"] and (
            r["loaded_bytes"] != r["stated_loaded_bytes"]
            or r["stored_bytes"] != r["stated_stored_bytes"]
        ):
            fail(f"{path}: {r['rung']} on {r['shape']} moved {r['loaded_bytes']} + "
                 f"{r['stored_bytes']} bytes, its header states {r['stated_loaded_bytes']} + "
                 f"{r['stated_stored_bytes']}")
    return rows


def per_unit(r, column):
    return int(r[column]) / int(r["units"])


def save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # legends placed outside the axes included
    plt.close(fig)


# ---- Every chapter: its rungs' counted traffic --------------------------------------------


def chapter_table(rows, path):
    counted = [r for r in rows if r["source"] == "counted"]
    out = ['<table class="markdowntable">',
           "<tr><th>shape</th><th>rung</th><th>loaded B/{0}</th><th>stored B/{0}</th>"
           "<th>the header's formula</th><th>sectors per load, store</th>"
           "<th>shared memory read B/{0}</th>"
           "<th>bank conflict degree</th></tr>".format(html.escape(counted[0]["unit"]))]
    for r in counted:
        out.append(
            "<tr><td>{}</td><td><code>{}</code></td><td>{:.2f}</td><td>{:.2f}</td><td>{}</td>"
            "<td>{}, {}</td><td>{:.2f}</td><td>{}</td></tr>".format(
                html.escape(r["shape"]), html.escape(r["rung"]), per_unit(r, "loaded_bytes"),
                per_unit(r, "stored_bytes"), html.escape(r["formula"]),
                r["sectors_per_load"], r["sectors_per_store"],
                per_unit(r, "shared_loaded_bytes"), r["conflict_degree"]))
    out.append("</table>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def chapter_figure(chapter, rows, path):
    counted = [r for r in rows if r["source"] == "counted"]
    shapes = list(dict.fromkeys(r["shape"] for r in counted))
    labels = [r["rung"] + ("" if len(shapes) == 1 else "\n" + r["shape"]) for r in counted]
    loaded = [per_unit(r, "loaded_bytes") for r in counted]
    stored = [per_unit(r, "stored_bytes") for r in counted]
    stated = [(int(r["stated_loaded_bytes"]) + int(r["stated_stored_bytes"])) / int(r["units"])
              for r in counted]
    fig, ax = plt.subplots(figsize=(7.5, 0.55 * len(counted) + 1.6))
    y = list(range(len(counted)))[::-1]
    ax.barh(y, loaded, color="#4878a8", label="loaded (counted)")
    ax.barh(y, stored, left=loaded, color="#e0a040", label="stored (counted)")
    ax.plot(stated, y, "k|", markersize=22, markeredgewidth=2, label="the header's formula")
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel(f"global-memory bytes per {counted[0]['unit']}")
    title = shapes[0] if len(shapes) == 1 else f"{len(shapes)} shapes"
    ax.set_title(f"{chapter}: what each rung moves, counted by the simulator\n({title})",
                 fontsize=9)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    save(fig, path)


# ---- The attention chapters: IO against N and against the tile size ------------------------


def io_points(directory):
    """{(chapter, rung): {N: counted row}} from the io_chNN_N.csv files."""
    points = {}
    for path in glob.glob(os.path.join(directory, "io_ch*_*.csv")):
        m = re.match(r"io_(ch\d\d)(?:_[a-z0-9]+)?_(\d+)\.csv$", os.path.basename(path))
        if not m:
            continue
        for r in read_rows(path):
            if r["source"] == "counted":
                points.setdefault((m.group(1), r["rung"]), {})[int(m.group(2))] = r
    return points


def head_bytes(r):
    return int(r["loaded_bytes"]) + int(r["stored_bytes"])


def io_vs_n(points, path):
    fig, ax = plt.subplots(figsize=(7, 4.4))
    for chapter, rung, label in IO_RUNGS:
        by_n = points.get((chapter, rung), {})
        ns = sorted(by_n)
        ax.plot(ns, [head_bytes(by_n[n]) / 1e6 for n in ns], "o-", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length N (lq = lk = N, d = 64, one head, fp32)")
    ax.set_ylabel("global bytes read + written (MB)")
    ax.set_xlabel("sequence length N (lq = lk = N, d = 64, one head; fp32, fp16 on tensor cores)")
    ax.set_title("Counted by the simulator: the N^2 terms of S and P against FlashAttention's "
                 "tiles", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, path)


def io_vs_tile(directory, points, n, path):
    """The FA1 and FA2 formulas at other tile sizes, the count at the kernels' own."""
    sweeps = {}
    for chapter in ("ch05", "ch06"):
        file = os.path.join(directory, f"io_{chapter}_{n}.csv")
        for r in read_rows(file):
            if r["source"].startswith("formula"):
                sweeps.setdefault(r["rung"], []).append(r)
    fig, ax = plt.subplots(figsize=(7, 4.4))
    for rung, tile_name in (("fa1", "Bc (K/V tile of FA1)"), ("fa2", "Br (Q tile of FA2)")):
        rows = sorted(sweeps.get(rung, []), key=lambda r: int(r["tile_size"]))
        if not rows:
            fail(f"no tile sweep of {rung} at N = {n}")
        sizes = [int(r["tile_size"]) for r in rows]
        line, = ax.plot(sizes, [head_bytes(r) / 1e6 for r in rows], "-",
                        label=f"{rung}: the header's formula against {tile_name}")
        own = [r for r in rows if r["source"] == "formula, own"][0]
        chapter = "ch05" if rung == "fa1" else "ch06"
        counted = points[(chapter, rung)][n]
        if head_bytes(counted) != head_bytes(own):
            fail(f"{rung}: the formula at the kernel's tile ({head_bytes(own)} bytes) is not "
                 f"the count ({head_bytes(counted)})")
        ax.plot([int(own["tile_size"])], [head_bytes(counted) / 1e6], "o", color=line.get_color(),
                markersize=8, label=f"{rung}: counted, the kernel's {own['tile']}")
    standard = points[("ch05", "standard")][n]
    ax.axhline(head_bytes(standard) / 1e6, color="gray", linestyle="--",
               label="standard attention, counted")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tile size (rows or keys)")
    ax.set_ylabel("global bytes read + written (MB)")
    ax.set_title(f"N = {n}, d = 64, one head, fp32: larger tiles, fewer re-reads", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, path)


def io_row(label, first, second, standard):
    """A row of per-head bytes in two parts (loaded and stored, or forward and backward), their
    total, the total at the paper's 1024 heads, and its ratio to the standard's total."""
    total = first + second
    return ("<tr><td>{}</td><td>{:.2f} MB</td><td>{:.2f} MB</td><td>{:.2f} MB</td>"
            "<td>{:.1f} GB</td><td>{:.2f}x</td></tr>".format(
                html.escape(label), first / 1e6, second / 1e6, total / 1e6,
                total * PAPER_HEADS / 1e9, total / standard))


def paper_rows(what):
    """The paper's two Figure 2 totals as table rows, the FlashAttention one as a ratio too."""
    return [f"<tr><td>FA paper, Figure 2: {name} (A100, {what}, fp16)</td>"
            f"<td></td><td></td><td></td><td>{gb} GB</td>"
            f"<td>{gb / PAPER_STANDARD_GB:.2f}x of the paper's standard</td></tr>"
            for name, gb in (("standard", PAPER_STANDARD_GB), ("FlashAttention", PAPER_FLASH_GB))]


def write_table(rows, path):
    with open(path, "w") as f:
        f.write("\n".join(rows + ["</table>"]) + "\n")


def io_table(points, n, path):
    standard = head_bytes(points[("ch05", "standard")][n])
    out = ['<table class="markdowntable">',
           f"<tr><th>kernel (N = {n}, d = 64, one head)</th><th>loaded per head</th>"
           "<th>stored per head</th><th>total per head</th>"
           f"<th>x {PAPER_HEADS} heads (16 heads x batch 64)</th><th>vs standard</th></tr>"]
    for chapter, rung, label in IO_RUNGS:
        r = points[(chapter, rung)][n]
        out.append(io_row(label, int(r["loaded_bytes"]), int(r["stored_bytes"]), standard))
    out += paper_rows("measured, forward + backward")
    write_table(out, path)


def fwd_bwd_totals(points, n):
    """[(label, forward bytes per head, backward bytes per head)] of FWD_BWD at N = n."""
    out = []
    for label, fwd, bwd in FWD_BWD:
        for key in (fwd, bwd):
            if n not in points.get(key, {}):
                fail(f"no io_{key[0]}_{n}.csv count of {key[1]}")
        out.append((label, head_bytes(points[fwd][n]), head_bytes(points[bwd][n])))
    return out


def io_fwd_bwd_table(totals, n, path):
    standard = totals[0][1] + totals[0][2]
    out = ['<table class="markdowntable">',
           f"<tr><th>forward + backward (N = {n}, d = 64, counted)</th><th>forward per head</th>"
           "<th>backward per head</th><th>total per head</th>"
           f"<th>x {PAPER_HEADS} heads (16 heads x batch 64)</th><th>vs standard</th></tr>"]
    rows = list(totals)
    # Every buffer of the standard pair is fp32, so with 2-byte elements every term halves.
    _, fwd, bwd = totals[0]
    rows.insert(1, ("the same standard launches with 2-byte elements (the count / 2)",
                    fwd / 2, bwd / 2))
    for label, fwd, bwd in rows:
        out.append(io_row(label, fwd, bwd, standard))
    out += paper_rows("HBM bytes measured")
    write_table(out, path)


def io_fwd_bwd_figure(totals, n, path):
    _, fwd_std, bwd_std = totals[0]
    bars = [
        ("standard, counted (fp32)", fwd_std, bwd_std),
        ("standard, 2-byte elements (count / 2)", fwd_std / 2, bwd_std / 2),
    ] + [(label.split(" (")[0] + ", counted (fp16)", fwd, bwd) for label, fwd, bwd in totals[1:]]
    heads = PAPER_HEADS / 1e9
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    y = list(range(len(bars) + 2))[::-1]
    for i, (label, fwd, bwd) in enumerate(bars):
        ax.barh(y[i], fwd * heads, color="#4878a8", label="forward" if i == 0 else None)
        ax.barh(y[i], bwd * heads, left=fwd * heads, color="#e0a040",
                label="backward" if i == 0 else None)
    paper = [("FA paper: standard (A100, HBM, fp16)", PAPER_STANDARD_GB),
             ("FA paper: FlashAttention (A100, HBM, fp16)", PAPER_FLASH_GB)]
    for i, (label, gb) in enumerate(paper):
        ax.barh(y[len(bars) + i], gb, color="#999999",
                label="paper, forward + backward" if i == 0 else None)
    ax.set_yticks(y)
    ax.set_yticklabels([b[0] for b in bars] + [p[0] for p in paper], fontsize=8)
    ax.set_xlabel(f"GB read + written, N = {n}, d = 64, 16 heads x batch 64")
    ax.set_title("Forward + backward: global-memory requests counted by the simulator,\n"
                 "beside the DRAM bytes the paper measured", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    save(fig, path)


def main():
    if len(sys.argv) != 2:
        fail("usage: traffic_figures.py DIR")
    directory = sys.argv[1]
    chapters = sorted(glob.glob(os.path.join(directory, "ch*_profile.csv")))
    if not chapters:
        fail(f"no chNN_profile.csv in {directory}")
    for path in chapters:
        chapter = os.path.basename(path)[: -len("_profile.csv")]
        rows = read_rows(path)
        if not any(r["source"] == "counted" for r in rows):
            fail(f"{path}: no counted rung")
        chapter_table(rows, os.path.join(directory, f"{chapter}_traffic.html"))
        chapter_figure(chapter, rows, os.path.join(directory, f"{chapter}_traffic.png"))
    points = io_points(directory)
    for chapter, rung, _ in IO_RUNGS:
        if (chapter, rung) not in points:
            fail(f"no io_{chapter}_N.csv counts of {rung}")
    n = max(points[("ch05", "standard")])
    io_vs_n(points, os.path.join(directory, "io_vs_n.png"))
    io_vs_tile(directory, points, n, os.path.join(directory, "io_vs_tile.png"))
    io_table(points, n, os.path.join(directory, "io_table.html"))
    if any(chapter == "ch10" for chapter, _ in points):  # a build with chapter 10
        totals = fwd_bwd_totals(points, n)
        io_fwd_bwd_table(totals, n, os.path.join(directory, "io_fwd_bwd.html"))
        io_fwd_bwd_figure(totals, n, os.path.join(directory, "io_fwd_bwd.png"))


if __name__ == "__main__":
    main()
