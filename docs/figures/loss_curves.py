#!/usr/bin/env python3
"""The example model's loss curves (examples/tiny_gpt.py --csv): the workbook's attention and
the math attention, and the two math runs' distance, drawn for the examples page.

    loss_curves.py RUN.csv OUT.png
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: loss_curves.py RUN.csv OUT.png")
    with open(sys.argv[1], newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"loss_curves.py: {sys.argv[1]} has no step")
    step = [int(r["step"]) for r in rows]
    wb = [float(r["workbook"]) for r in rows]
    ma = [float(r["math"]) for r in rows]
    rev = [float(r["math_keys_reversed"]) for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    top.plot(step, ma, label="math attention", linewidth=2.5, color="#bbbbbb")
    top.plot(step, wb, label="flash_workbook.attention", linewidth=1, color="#1f77b4")
    top.set_ylabel("training loss (cross-entropy)")
    top.legend()
    top.grid(alpha=0.3)
    bottom.semilogy(step, [abs(a - b) + 1e-9 for a, b in zip(wb, ma)],
                    label="|workbook - math|", color="#1f77b4")
    bottom.semilogy(step, [abs(a - b) + 1e-9 for a, b in zip(rev, ma)],
                    label="|math, keys reversed - math|", color="#ff7f0e")
    bottom.set_xlabel("step")
    bottom.set_ylabel("loss difference (+1e-9)")
    bottom.legend()
    bottom.grid(alpha=0.3)
    fig.suptitle("Tiny GPT on the workbook's pages, float32 on the CPU")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
