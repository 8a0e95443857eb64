#!/usr/bin/env python3
"""Chapter 12's figures and overlap table, drawn by the docs build (docs/CMakeLists.txt).

    ring_figures.py balance BALANCE_CSV PNG
        The causal load of each layout: chapter 06's tiles per rank and step, as `ch12 --trace
        --balance-csv` counted them (the records the tests count).
    ring_figures.py overlap H100_CSV GLOO_CSV PNG HTML
        The overlap condition of eq. (9): per ring step, a rank's compute time 4 n^2 d / F
        (half of it under the causal mask, zigzag) against the transfer of its next K/V block,
        2 n d elements over the link. F is chapter 08's best rung as measured on an H100
        (H100_CSV, the committed benchmark run); the links' bandwidths are the datasheet's. Beside
        it, the gloo ring measured on a CPU machine (GLOO_CSV, bench/ring_overlap.py) against the
        same model with that machine's own F and bandwidth fitted from the same run.
"""
import csv
import html
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Datasheet bandwidths, one direction of one link: a ring rank receives from one neighbour.
# H100 SXM's NVLink 4: 900 GB/s both directions together, 450 GB/s each way. PCIe 5.0 x16:
# 64 GB/s each way before protocol overhead.
LINKS = [("NVLink 4 (H100 SXM)", 450e9), ("PCIe 5.0 x16", 64e9)]
BYTES_16 = 2  # bf16 / fp16 K and V


def fail(message):
    print(f"ring_figures.py: {message}", file=sys.stderr)
    sys.exit(1)


def read_csv(path):
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except OSError as e:
        fail(f"cannot read {path}: {e}")


def balance(csv_path, png):
    rows = read_csv(csv_path)
    layouts = []
    for r in rows:
        if r["layout"] not in layouts:
            layouts.append(r["layout"])
    if not layouts:
        fail(f"{csv_path} holds no rows")
    ranks = int(rows[0]["ranks"])
    length = int(rows[0]["length"])
    fig, axes = plt.subplots(1, len(layouts), figsize=(4.2 * len(layouts), 3.4), sharey=True)
    for ax, layout in zip(axes, layouts):
        bottom = [0] * ranks
        for step in range(ranks):
            tiles = [0] * ranks
            for r in rows:
                if r["layout"] == layout and int(r["step"]) == step:
                    tiles[int(r["rank"])] = int(r["tiles"])
            ax.bar(range(ranks), tiles, bottom=bottom, label=f"step {step}",
                   color=plt.cm.viridis(step / max(ranks - 1, 1)))
            bottom = [b + t for b, t in zip(bottom, tiles)]
        ax.set_title(f"{layout}: max / min {max(bottom) / max(min(bottom), 1):.2f}")
        ax.set_xlabel("rank")
        ax.set_xticks(range(ranks))
    axes[0].set_ylabel("chapter 06's tiles computed")
    axes[-1].legend(fontsize=8)
    fig.suptitle(f"Causal ring, {length} positions on {ranks} ranks: the tiles each rank computes, "
                 "by step", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=96)


def h100_rates(path):
    """Chapter 08's best measured TFLOP/s in 16 bits, full and causal, and the device."""
    best = {"full": 0.0, "causal": 0.0}
    device = ""
    for r in read_csv(path):
        if r["op"] == "attention" and r["chapter"] == "08_fa2_at_speed" and r["unit"] == "TFLOP/s":
            mask = "causal" if r["shape"].endswith("causal") else "full"
            best[mask] = max(best[mask], float(r["throughput"]) * 1e12)
            device = r["device"]
    if not best["full"] or not best["causal"]:
        fail(f"{path}: no chapter 08 attention rows in TFLOP/s")
    return best, device


def crossover(bytes_per_element, flops, bandwidth, causal):
    """Eq. (9): the block length n above which a step's compute outlasts its K/V transfer,
    4 n^2 d c / F >= 2 n d b / B  <=>  n >= b F / (2 c B), c = 1/2 under the causal mask."""
    c = 0.5 if causal else 1.0
    return bytes_per_element * flops / (2.0 * c * bandwidth)


def overlap(h100_csv, gloo_csv, png, table_html):
    rates, device = h100_rates(h100_csv)
    gloo = read_csv(gloo_csv)
    if not gloo:
        fail(f"{gloo_csv} holds no rows")
    n = [int(r["block_len"]) for r in gloo]
    compute = [float(r["compute_ms"]) * 1e-3 for r in gloo]
    transfer = [float(r["transfer_ms"]) * 1e-3 for r in gloo]
    step = [float(r["step_ms"]) * 1e-3 for r in gloo]
    flops = [float(r["flops_per_step"]) for r in gloo]
    moved = [float(r["bytes_per_step"]) for r in gloo]
    # This machine's F and bandwidth, from the run's largest block (the least overhead).
    f_cpu = flops[-1] / compute[-1]
    bw_cpu = moved[-1] / transfer[-1]
    d = int(gloo[0]["head_dim"])
    bh = int(gloo[0]["batch_heads"])
    bytes_cpu = moved[-1] / (2.0 * n[-1] * d * bh)  # the element size the run sent

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    lengths = [2 ** k for k in range(7, 17)]  # block lengths n = N / P
    per_head = 1  # per head: both sides scale with batch x heads
    for mask, style in (("full", "-"), ("causal", "--")):
        c = 0.5 if mask == "causal" else 1.0
        left.plot(lengths, [4 * m * m * 128 * c * per_head / rates[mask] * 1e6 for m in lengths],
                  style, color="C0", label=f"compute, {mask} ({rates[mask] / 1e12:.0f} TFLOP/s)")
    for (name, bw), color in zip(LINKS, ("C1", "C3")):
        left.plot(lengths, [2 * m * 128 * BYTES_16 * per_head / bw * 1e6 for m in lengths],
                  color=color, label=f"K/V transfer, {name}")
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xlabel("block length n = N / P (positions per rank)")
    left.set_ylabel("µs per ring step, one head of d = 128")
    left.set_title(f"Model, bf16, {device}: compute hides the transfer where the blue line is above",
                   fontsize=9)
    left.legend(fontsize=7)

    right.plot(n, [x * 1e3 for x in compute], "o-", color="C0", label="compute alone (measured)")
    right.plot(n, [x * 1e3 for x in transfer], "o-", color="C1", label="K/V exchange alone (measured)")
    right.plot(n, [x * 1e3 for x in step], "s-", color="k", label="step, overlapped (measured)")
    model = [max(fl / f_cpu, by / bw_cpu) * 1e3 for fl, by in zip(flops, moved)]
    right.plot(n, model, ":", color="k", label="model: max(compute, transfer)")
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    right.set_xlabel("block length n")
    right.set_ylabel("ms per ring step")
    world = gloo[0]["world"]
    right.set_title(f"gloo ring on this CPU machine: {world} processes, d {d}, {bh} heads, fp32",
                    fontsize=9)
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=96)

    rows = []
    for name, bw in LINKS:
        rows.append((name, f"{bw / 1e9:.0f} GB/s", f"{rates['full'] / 1e12:.0f} / {rates['causal'] / 1e12:.0f} TFLOP/s",
                     f"{crossover(BYTES_16, rates['full'], bw, False):.0f}",
                     f"{crossover(BYTES_16, rates['causal'], bw, True):.0f}"))
    rows.append((f"gloo over loopback, this CPU ({world} processes, fp32)", f"{bw_cpu / 1e9:.2f} GB/s (measured)",
                 f"{f_cpu / 1e9:.1f} GFLOP/s (measured)",
                 f"{crossover(bytes_cpu, f_cpu, bw_cpu, False):.0f}",
                 f"{crossover(bytes_cpu, f_cpu, bw_cpu, True):.0f}"))
    with open(table_html, "w") as f:
        f.write("<table class=\"markdownTable\">\n<tr class=\"markdownTableHead\"><th>link</th>"
                "<th>bandwidth, one way</th><th>F: full / causal</th>"
                "<th>n* full</th><th>n* causal</th></tr>\n")
        for row in rows:
            f.write("<tr class=\"markdownTableRowOdd\">" +
                    "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>\n")
        f.write("</table>\n")


def main(argv):
    if len(argv) == 4 and argv[1] == "balance":
        balance(argv[2], argv[3])
    elif len(argv) == 6 and argv[1] == "overlap":
        overlap(argv[2], argv[3], argv[4], argv[5])
    else:
        fail("usage: ring_figures.py balance CSV PNG | overlap H100_CSV GLOO_CSV PNG HTML")


if __name__ == "__main__":
    main(sys.argv)
