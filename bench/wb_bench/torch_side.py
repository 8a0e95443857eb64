"""The PyTorch side of a run: the same method as common/timer.cpp, on the same shapes."""

import csv
import os
import statistics
import subprocess
import tempfile

from .counting import WARMUP, gb_per_s, make_row, summarize, utc_now
from .ops_side import split_commands, time_in_process, torch_dtype


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
    elif job.op == "attention_backward":
        out += run_torch_backward(torch, timer, job, dt)
    else:
        p = job.params
        extra = {}
        if job.op == "decode":  # a few query rows against a long cache, no mask
            q = torch.randn(1, p["bh"], p["lq"], p["d"], device="cuda", dtype=dt)
            k, v = (torch.randn(1, p["hkv"], p["lk"], p["d"], device="cuda", dtype=dt)
                    for _ in range(2))
            causal = False
            if p["hkv"] != p["bh"]:
                extra = {"enable_gqa": True}  # torch 2.5 and later
        else:
            q, k, v = (torch.randn(1, p["bh"], p["seqlen"], p["d"], device="cuda", dtype=dt)
                       for _ in range(3))
            causal = p["causal"]
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
                    fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, **extra)  # noqa: E731
                    out.append((name, timer.time(fn), ""))
            except (RuntimeError, TypeError) as e:  # this backend, dtype, shape or torch cannot

                out.append((name, None, str(e).splitlines()[0][:120]))
    return out  # its tensors freed on return; real_run empties the cache after


def run_torch_backward(torch, timer, job, dt):
    """dQ, dK, dV of sdpa's output for a fixed dO: the forward once per backend, then only
    torch.autograd.grad timed (retain_graph keeps the saved tensors for every run)."""
    F = torch.nn.functional
    p = job.params
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return [("sdpa backward", None, "torch.nn.attention.sdpa_kernel missing (torch < 2.3)")]
    q, k, v = (torch.randn(1, p["bh"], p["seqlen"], p["d"], device="cuda", dtype=dt,
                           requires_grad=True) for _ in range(3))
    d_o = torch.randn(1, p["bh"], p["seqlen"], p["d"], device="cuda", dtype=dt)
    out = []
    for name, backend in (("sdpa flash backward", "FLASH_ATTENTION"),
                          ("sdpa efficient backward", "EFFICIENT_ATTENTION"),
                          ("sdpa cudnn backward", "CUDNN_ATTENTION")):
        if not hasattr(SDPBackend, backend):
            out.append((name, None, f"SDPBackend.{backend} not in this torch"))
            continue
        try:
            with sdpa_kernel(getattr(SDPBackend, backend)):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=p["causal"])
                fn = lambda: torch.autograd.grad(o, (q, k, v), d_o, retain_graph=True)  # noqa: E731
                out.append((name, timer.time(fn), ""))
            del o
        except (RuntimeError, TypeError) as e:  # this backend, dtype, shape or torch cannot
            out.append((name, None, str(e).splitlines()[0][:120]))
    return out


def torch_copy_gbps(torch, timer):
    nbytes = 1 << 30
    src = torch.ones(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    samples = timer.time(lambda: dst.copy_(src))
    del src, dst
    torch.cuda.empty_cache()
    return samples, 2.0 * nbytes


def run_program(name, argv, shape, csv_path, timeout, notes):
    """One chapter program's --bench on one shape: the rows it wrote to `csv_path`, also when
    it failed part-way or ran past `timeout` seconds (it appends each rung's row as timed)."""
    if os.path.exists(csv_path):
        os.remove(csv_path)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines()
            why = lines[-1] if lines else "no output"
            if "needs a CUDA GPU" in why:  # every other program would say the same
                raise SystemExit(f"bench_vs_torch: error: {name}: {why}")
            notes.append(f"{name} {shape}: exit {done.returncode}: {why}")
            print(f"  {name} {shape}: exit {done.returncode}: {why}", flush=True)
    except subprocess.TimeoutExpired:
        notes.append(f"{name} {shape}: stopped after {timeout} s (--program-timeout)")
        print(f"  {name} {shape}: stopped after {timeout} s", flush=True)
    if not os.path.exists(csv_path):
        return []
    with open(csv_path, newline="") as f:  # a row cut short by the timeout is dropped
        return [r for r in csv.DictReader(f) if None not in r.values() and r.get("median_ms")]


def import_torch():
    """torch, with a CUDA GPU, or the reason in one line."""
    try:
        import torch
    except ImportError:
        raise SystemExit("bench_vs_torch: error: PyTorch is not installed (pip install torch); "
                         "--dry-run checks the plan without it")
    if not torch.cuda.is_available():
        raise SystemExit("bench_vs_torch: error: torch sees no CUDA GPU; absolute times only "
                         "come from one (--dry-run prints the plan without it)")
    return torch


def real_run(torch, args, jobs, notes, sink, loaded, fw=None):
    """Every job: the workbook's kernels (through the ops in this process when `fw`, the
    flash_workbook package, is given; otherwise each program as a subprocess), then torch's."""
    device, date = torch.cuda.get_device_name(0), utc_now()
    timer = TorchTimer(torch, WARMUP, args.reps)
    copy_samples, copy_bytes = torch_copy_gbps(torch, timer)
    torch_copy = gb_per_s(copy_bytes, summarize(copy_samples)[0])
    rows = [make_row("copy", "torch", "torch", "Tensor.copy_", "u8", "1073741824", copy_samples,
                     copy_bytes, 0.0, torch_copy, device, date)]
    sink.add(rows)
    print(f"device: {device}; torch {torch.__version__}; torch copy roofline {torch_copy:.1f} GB/s")
    with tempfile.TemporaryDirectory() as tmp:
        for job in jobs:
            csv_path = os.path.join(tmp, "workbook.csv")
            workbook, commands = [], job.commands
            if fw is not None:
                here, commands = split_commands(fw, loaded, job)
                workbook += time_in_process(torch, fw, timer, job, here, torch_copy, device,
                                            date, notes)
            for name, argv in commands:
                argv = [a.replace("{csv}", csv_path) for a in argv]
                workbook += run_program(name, argv, job.shape, csv_path, args.program_timeout,
                                        notes)
            job_rows = list(workbook)
            copies = [float(r["copy_gbps"]) for r in workbook if float(r["copy_gbps"]) > 0]
            copy = statistics.median(copies) if copies else torch_copy
            for kernel, samples, note in run_torch_job(torch, timer, job):
                if samples is None:
                    notes.append(f"{kernel} {job.dtype} {job.shape}: skipped: {note}")
                    continue
                job_rows.append(make_row(job.op, "torch", "torch", kernel, job.dtype, job.shape,
                                         samples, job.nbytes, job.flops, copy, device, date))
            torch.cuda.empty_cache()  # the job's tensors are gone: give their memory back
            rows += job_rows
            sink.add(job_rows)
            print(f"  {job.op} {job.dtype} {job.shape}: {len(workbook)} workbook rows, torch done",
                  flush=True)
    return rows


