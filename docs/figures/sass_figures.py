#!/usr/bin/env python3
"""The pages' SASS figures: each rung's main loop, its instructions by kind, as stacked bars.

Reads the tables the build wrote from nvcc's machine code (chNN_sass.csv, common/cmake/
sass_mix.py documents the columns and how a rung's kernel and main loop are found) and writes
DIR/chNN_sass.png per chapter, beside the table sass_mix.py --html writes (chNN_sass.html).

  sass_figures.py DIR CSV...                        the figures
  sass_figures.py DIR --missing chNN... --why TEXT  a build with no tables: a table and a
                                                    figure per chapter that say why
"""
import csv
import html
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

# Kinds grouped as the pages discuss them, each with its colour: the tensor cores, the loads
# that feed them, the softmax's float math, and the overhead around it.
GROUPS = [
    ("HMMA", "tensor-core MMA (HMMA, HGMMA)", ["HMMA", "HGMMA"], "#2c7a3f"),
    ("LDSM", "ldmatrix (LDSM)", ["LDSM"], "#7fc97f"),
    ("async", "cp.async / TMA", ["cp.async/TMA"], "#beaed4"),
    ("global", "global loads, stores (LDG, STG)", ["LDG/STG"], "#4878a8"),
    ("shared", "shared loads, stores (LDS, STS)", ["LDS/STS"], "#9ecae1"),
    ("fp", "float math (FFMA, FMUL, FADD, FMNMX...)", ["FP32"], "#e0a040"),
    ("mufu", "MUFU (EX2, RCP, RSQ...)", ["MUFU.EX2", "MUFU"], "#d62728"),
    ("cvt", "conversions, packed 16-bit", ["convert"], "#f2c57c"),
    ("int", "integer / address arithmetic", ["integer"], "#888888"),
    ("move", "moves (MOV, S2R, CS2R, LDC)", ["move"], "#bbbbbb"),
    ("sync", "barriers, shuffles", ["barrier", "SHFL"], "#555555"),
    ("other", "branches, other", ["other"], "#dddddd"),
]


def chapter_figure(rows, path):
    shown = [r for r in rows if r["scope"] == "loop" and r["role"] in ("main", "none")]
    shown.sort(key=lambda r: int(r["place"]))
    fig, ax = plt.subplots(figsize=(7.5, 0.5 * len(shown) + 1.9))
    y = list(range(len(shown)))[::-1]
    left = [0.0] * len(shown)
    for _, label, columns, colour in GROUPS:
        values = [sum(int(r[c] or 0) for c in columns) for r in shown]
        ax.barh(y, values, left=left, color=colour, label=label, edgecolor="white", linewidth=0.4)
        left = [a + b for a, b in zip(left, values)]
    def label(r):
        if r["role"] == "none":
            return f"{r['rung']}\n(no kernel of its own)"
        if r["range"].startswith("no loop"):
            return f"{r['rung']}\n(no loop: whole kernel)"
        return r["rung"]
    ax.set_yticks(y)
    ax.set_yticklabels([label(r) for r in shown])
    ax.set_xlabel("instructions in the main loop body (static counts, each a warp's)", fontsize=8)
    arch = sorted({r["arch"] for r in shown if r["arch"]})
    ax.set_title(f"{shown[0]['chapter']}: each rung's main loop in nvcc's {'/'.join(arch)} "
                 "code, by kind", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def missing(out_dir, programs, why):
    for p in programs:
        with open(os.path.join(out_dir, f"{p}_sass.html"), "w") as f:
            f.write(f"<p><em>No SASS table in this build: {html.escape(why)}.</em></p>\n")
        fig, ax = plt.subplots(figsize=(7.5, 1.0))
        ax.axis("off")
        ax.text(0.5, 0.5, f"No SASS in this build:\n{why}", ha="center", va="center",
                fontsize=8, wrap=True)
        fig.savefig(os.path.join(out_dir, f"{p}_sass.png"), dpi=110)
        plt.close(fig)


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    out_dir = argv[1]
    if argv[2] == "--missing":
        at = argv.index("--why")
        missing(out_dir, argv[3:at], " ".join(argv[at + 1:]))
        return 0
    for path in argv[2:]:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        if not rows:
            sys.exit(f"sass_figures.py: {path} has no rows")
        ch = "ch" + rows[0]["chapter"][:2]
        chapter_figure(rows, os.path.join(out_dir, f"{ch}_sass.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
