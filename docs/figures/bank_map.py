#!/usr/bin/env python3
"""Chapter 08's bank map: which lane's 16-byte row of one ldmatrix lands in which shared-memory
bank, in the three layouts of eq. (3), as the simulator recorded it.

ACCESS_CSV is what `ch08 --profile --access-csv FILE` wrote (common/ladder_profile.hpp,
write_access_csv): its rungs bank_map_unpadded, bank_map_padded and bank_map_swizzled are one
warp's ldmatrix .x4 of a 16 x 64 fp16 tile (chapters/08_fa2_at_speed/bank_map_kernel.cuh). The
figure shows the request's first phase (matrix 0: the 8 lanes that give rows 0-7 of columns
0-7): a 4-byte word is a cell in its bank's column (bank = word mod 32); words of one bank that
differ are stacked, one wavefront each, which is how the banks serve them.

Usage: bank_map.py ACCESS_CSV OUT_PNG
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

LAYOUTS = [("bank_map_unpadded", "unpadded: rows 128 B apart"),
           ("bank_map_padded", "padded: rows 144 B apart"),
           ("bank_map_swizzled", "swizzled: 128 B rows, chunk c of row r at c ^ (r % 8)")]
BANKS, BANK_BYTES = 32, 4


def fail(message):
    print(f"bank_map.py: error: {message}", file=sys.stderr)
    sys.exit(1)


def phase_rows(path, rung):
    """[(lane, offset, bytes)] of the first ldmatrix request's phase 0 of the rung."""
    rows, request = [], None
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["rung"] != rung or r["buffer"] != "shared" or r["ldmatrix"] != "1":
                continue
            if request is None:
                request = r["request"]
            if r["request"] == request and r["phase"] == "0":
                rows.append((int(r["thread"]) % 32, int(r["offset"]), int(r["bytes"])))
    if not rows:
        fail(f"no ldmatrix of rung '{rung}' in {path}")
    return rows


def stacks(rows):
    """{bank: [(lane, word), ...]}: the distinct words each bank must serve, in order."""
    by_bank = {}
    for lane, offset, nbytes in rows:
        for word in range(offset // BANK_BYTES, (offset + nbytes - 1) // BANK_BYTES + 1):
            cell = by_bank.setdefault(word % BANKS, [])
            if word not in [w for _, w in cell]:
                cell.append((lane, word))
    return by_bank


def main():
    if len(sys.argv) != 3:
        fail("usage: bank_map.py ACCESS_CSV OUT_PNG")
    path, out = sys.argv[1], sys.argv[2]
    maps = [(title, stacks(phase_rows(path, rung))) for rung, title in LAYOUTS]
    heights = [max(len(c) for c in m.values()) for _, m in maps]
    fig, axes = plt.subplots(len(maps), 1, figsize=(8, 1.2 + 0.32 * sum(heights) + len(maps)),
                             gridspec_kw={"height_ratios": [h + 1.5 for h in heights]})
    colors = plt.get_cmap("tab10")
    for ax, (title, by_bank), height in zip(axes, maps, heights):
        for bank, cell in by_bank.items():
            for level, (lane, _) in enumerate(cell):
                ax.add_patch(plt.Rectangle((bank, level), 1, 1, facecolor=colors(lane % 10),
                                           edgecolor="white"))
                ax.text(bank + 0.5, level + 0.5, f"r{lane}", ha="center", va="center",
                        fontsize=6, color="white")
        ax.set_xlim(0, BANKS)
        ax.set_ylim(0, height)
        ax.set_xticks([b + 0.5 for b in range(0, BANKS, 4)])
        ax.set_xticklabels([str(b) for b in range(0, BANKS, 4)], fontsize=7)
        ax.set_yticks([])
        ax.set_ylabel("wavefronts", fontsize=7)
        waves = "wavefront" if height == 1 else "wavefronts (an %d-way conflict)" % height
        ax.set_title(f"{title}: {height} {waves}", fontsize=8)
    axes[-1].set_xlabel("shared-memory bank (r0-r7: the lane giving row 0-7 of matrix 0)",
                        fontsize=8)
    fig.suptitle("One ldmatrix .x4, matrix 0, as the simulator recorded it (ch08 --profile)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110, bbox_inches="tight")


if __name__ == "__main__":
    main()
