#!/usr/bin/env python3
"""Which block reads which tile of K, and in what order: drawn from the simulator's record.

    tile_order.py ACCESS_CSV OUT_PNG --rung NAME --row-bytes B --tile-rows T --title TEXT
                  [--block-label "Q tile"] [--blocks-per-row N]

ACCESS_CSV is what `chNN --profile --access-csv FILE` wrote on a tiny shape: every global
access of every rung's launches, in the order the simulator ran them (rung, launch, kernel,
block, thread, buffer, offset, bytes, store). For the rung NAME's first launch, each K row
read is offset // B (B = bytes per row of K: d x the element's bytes) and its tile that row //
T. Left: for every block, the tiles of K it read, numbered in the order it first read them
(hatched: never loaded, a tile the kernel skipped). Right: the K rows read, in the order the
simulator ran the accesses (one block after another; a GPU runs the blocks at once, each in
this order).

Nothing here is typed in by hand: if the kernel's loop changes, so does the figure. Needs
matplotlib (Debian's python3-matplotlib).
"""

import argparse
import csv
import sys


def fail(message):
    print(f"tile_order.py: error: {message}", file=sys.stderr)
    sys.exit(1)


def read_k_reads(path, rung):
    """{block: [K row offsets in bytes, in order]} of the rung's first launch, and the number
    of blocks that launch ran (a block that loaded no K still made some access)."""
    k_reads, blocks = {}, 0
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["rung"] != rung or r["launch"] != "0":
                continue
            block = int(r["block"])
            blocks = max(blocks, block + 1)
            if r["buffer"] == "k" and r["store"] == "0":
                k_reads.setdefault(block, []).append(int(r["offset"]))
    if not k_reads:
        fail(f"no reads of buffer k by rung '{rung}' in {path}")
    return k_reads, blocks


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("png")
    p.add_argument("--rung", required=True)
    p.add_argument("--row-bytes", type=int, required=True)
    p.add_argument("--tile-rows", type=int, required=True)
    p.add_argument("--title", required=True)
    p.add_argument("--block-label", default="block")
    a = p.parse_args()

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k_reads, n_blocks = read_k_reads(a.csv, a.rung)
    blocks = sorted(k_reads)
    n_tiles = max(off // a.row_bytes // a.tile_rows for offs in k_reads.values() for off in offs) + 1
    order = [[None] * n_tiles for _ in range(n_blocks)]
    for b, offs in k_reads.items():
        step = 0
        for off in offs:
            t = off // a.row_bytes // a.tile_rows
            if order[b][t] is None:
                step += 1
                order[b][t] = step

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.45 * n_blocks + 2.2),
                                      gridspec_kw={"width_ratios": [max(n_tiles, 3), 6]})
    cmap = plt.get_cmap("viridis")
    for b in range(n_blocks):
        for t in range(n_tiles):
            s = order[b][t]
            if s is None:
                left.add_patch(plt.Rectangle((t, b), 1, 1, facecolor="white", edgecolor="0.7",
                                             hatch="//"))
                continue
            most = max(x for x in order[b] if x is not None)
            left.add_patch(plt.Rectangle((t, b), 1, 1, facecolor=cmap(0.15 + 0.7 * (s - 1) / max(most - 1, 1)),
                                         edgecolor="white"))
            left.text(t + 0.5, b + 0.5, str(s), ha="center", va="center", color="white", fontsize=9)
    left.set_xlim(0, n_tiles)
    left.set_ylim(n_blocks, 0)
    left.set_xticks([t + 0.5 for t in range(n_tiles)], [str(t) for t in range(n_tiles)])
    left.set_yticks([b + 0.5 for b in range(n_blocks)], [str(b) for b in range(n_blocks)])
    left.set_xlabel(f"K tile ({a.tile_rows} rows each)")
    left.set_ylabel(a.block_label)
    left.set_title("order of first read; hatched: never loaded", fontsize=10)
    left.set_aspect("equal")

    start = 0  # the simulator runs the blocks one after another: one time axis for all
    for b in blocks:
        rows = [off // a.row_bytes for off in k_reads[b]]
        right.plot(range(start, start + len(rows)), rows, ".", markersize=2, label=f"{b}",
                   color=cmap(b / max(n_blocks - 1, 1)))
        start += len(rows)
    for t in range(1, n_tiles):
        right.axhline(t * a.tile_rows - 0.5, color="0.8", linewidth=0.8)
    right.set_xlabel("K accesses of the launch, in the order the simulator ran them")
    right.set_ylabel("K row read")
    right.set_title("each block walks its K tiles in order (lines: tile edges)", fontsize=10)
    right.grid(True, alpha=0.3)
    if n_blocks <= 12:
        right.legend(title=a.block_label, fontsize=7, title_fontsize=8, loc="center left",
                     bbox_to_anchor=(1, 0.5))
    fig.suptitle(a.title, fontsize=11)
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
