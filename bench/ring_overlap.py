#!/usr/bin/env python3
"""Does ring attention hide its K/V exchange behind its compute? One ring step, measured on a
gloo ring of CPU processes (chapter 12's overlap figure).

    FLASH_WORKBOOK_LIBRARY=build/python/libwb_torch_ops.so PYTHONPATH=python \\
        /usr/bin/python3 bench/ring_overlap.py [--csv docs/bench/ring_gloo_cpu_2026-11-27.csv]

P processes (torch.multiprocessing.spawn, one thread of compute each: torch.set_num_threads(1))
join a gloo group over loopback. For each block length n, every rank times, per ring step,
  compute:  the block's compute alone: the forward op on backend "cpu" (not causal), q, k, v of
            (1, batch_heads, n, head_dim) float32, and its merge into the running (O, lse),
            what flash_workbook.ring does per step;
  transfer: the K/V exchange alone: 2 n head_dim batch_heads floats sent to rank + 1 and as
            many received from rank - 1 (dist.batch_isend_irecv), posted and waited for;
  step:     the two as the ring runs them: the exchange posted, the compute, then the wait.
Each repetition starts at a barrier and counts the slower rank's time (the step ends when
both have); the CSV holds the median over the repetitions after a warm-up. With perfect overlap
step = max(compute, transfer); with none, compute + transfer. The CSV's columns:
  world,block_len,head_dim,batch_heads,dtype,flops_per_step,bytes_per_step,compute_ms,
  transfer_ms,step_ms
flops_per_step = 4 n^2 head_dim batch_heads (QK^T and PV); bytes_per_step = 2 n head_dim
batch_heads 4, the bytes one rank receives per step.
"""
import argparse
import datetime
import math
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

HEADER = ("world,block_len,head_dim,batch_heads,dtype,flops_per_step,bytes_per_step,compute_ms,"
          "transfer_ms,step_ms")


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--csv", default=os.path.join(ROOT, "docs", "bench",
                                                 "ring_gloo_cpu_2026-11-27.csv"))
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--lengths", default="64,128,256,512,1024,2048",
                   help="block lengths n (each rank's positions), comma-separated")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--batch-heads", type=int, default=4)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    args = p.parse_args()
    args.lengths = [int(n) for n in args.lengths.split(",")]
    if args.world < 2 or min(args.lengths) < 1 or args.reps < 1 or args.warmup < 0:
        p.error("--world >= 2, lengths >= 1, --reps >= 1 and --warmup >= 0")
    return args


def slowest(seconds):
    """The slower rank's time of one repetition (the step ends when every rank's has)."""
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def timed(run, args):
    """The median over args.reps of the slowest rank's seconds, after args.warmup runs."""
    times = []
    for rep in range(args.warmup + args.reps):
        dist.barrier()
        start = time.perf_counter()
        run()
        seconds = slowest(time.perf_counter() - start)
        if rep >= args.warmup:
            times.append(seconds)
    return statistics.median(times)


def rank_main(rank, args, store):
    torch.set_num_threads(1)
    import flash_workbook as fw
    import flash_workbook.ring as ring
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=args.world, timeout=datetime.timedelta(seconds=120))
    send_to, recv_from = (rank + 1) % args.world, (rank - 1) % args.world
    d, bh = args.head_dim, args.batch_heads
    scale = 1.0 / math.sqrt(d)
    rows = []
    for n in args.lengths:
        g = torch.Generator().manual_seed(rank * 1000 + n)
        q = torch.randn(1, bh, n, d, generator=g)
        kv = torch.randn(2, 1, bh, n, d, generator=g)
        kv_in = torch.empty_like(kv)
        o = torch.zeros(1, bh, n, d)
        lse = torch.full((1, bh, n), -math.inf)

        def compute():
            o_b, lse_b = fw._ops.attention_forward(q, kv[0], kv[1], False, scale, "", "cpu", "")
            ring.merge(o, lse, o_b, lse_b)

        def post():
            return dist.batch_isend_irecv([dist.P2POp(dist.isend, kv, send_to),
                                           dist.P2POp(dist.irecv, kv_in, recv_from)])

        def transfer():
            for work in post():
                work.wait()

        def step():
            works = post()
            compute()
            for work in works:
                work.wait()

        compute_s, transfer_s, step_s = (timed(f, args) for f in (compute, transfer, step))
        rows.append(f"{args.world},{n},{d},{bh},fp32,{4 * n * n * d * bh},{2 * n * d * bh * 4},"
                    f"{compute_s * 1e3:.4f},{transfer_s * 1e3:.4f},{step_s * 1e3:.4f}")
        if rank == 0:
            print(f"n {n}: compute {compute_s * 1e3:.3f} ms, transfer {transfer_s * 1e3:.3f} ms,"
                  f" step {step_s * 1e3:.3f} ms", flush=True)
    if rank == 0:
        os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
        with open(args.csv, "w") as f:
            f.write("\n".join([HEADER] + rows) + "\n")
    dist.barrier()
    dist.destroy_process_group()


def main():
    args = parse()
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(rank_main, args=(args, os.path.join(tmp, "store")), nprocs=args.world)
    with open(args.csv) as f:
        print(f.read(), end="")


if __name__ == "__main__":
    main()
