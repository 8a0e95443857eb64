"""The workbook's side of a run in-process (--in-process): each rung called through the PyTorch
ops (python/flash_workbook), in the process that times torch, on torch's stream, with the same
timer (TorchTimer: warm-up, L2 flushed, CUDA events): what a model calling the ops gets, the
ops' Python checks and dispatch included.

A program whose every rung the job takes is an op's rung is timed here; one with a rung no op
runs (chapters 02, 04 and 05: the ladders chapter 06 supersedes) runs as a subprocess as before.
The rows have the programs' columns; only `copy_gbps` is torch's copy roofline, not the
program's own."""

import math
import sys

from .counting import make_row

# The plan's op names -> the ops' (flash_workbook.rungs).
OP_NAMES = {"softmax": "softmax", "layernorm": "layer_norm", "attention": "attention",
            "decode": "decode", "attention_backward": "attention_backward"}


def rungs_of(program, job):
    """The rungs of `program` (a plan.Program) that take the job's shape, as its --bench would
    run them."""
    p = job.params
    if job.op in ("softmax", "layernorm"):
        return program.rungs_taking(job.dtype, cols=p["cols"])
    return program.rungs_taking(job.dtype, d=p["d"], causal=p.get("causal", False))


def split_commands(fw, loaded, job):
    """([(chapter, rung)] timed in-process, [(chapter, argv)] left to the programs)."""
    op_rungs = {r.name for r in fw.rungs(OP_NAMES[job.op])}
    here, programs = [], []
    for name, argv in job.commands:
        rungs = rungs_of(loaded[name], job)
        if rungs and all(r in op_rungs for r in rungs):
            here += [(name, r) for r in rungs]
        else:
            programs.append((name, argv))
    return here, programs


def torch_dtype(torch, name):
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


def make_calls(torch, fw, job, device, backend):
    """rung -> a function running it once on the job's inputs (made here, once per job)."""
    p = job.params
    dt = torch_dtype(torch, job.dtype)
    randn = lambda *shape: torch.randn(*shape, device=device, dtype=dt)  # noqa: E731
    if job.op == "softmax":
        x = randn(p["rows"], p["cols"])
        return lambda rung: lambda: fw.softmax(x, rung=rung, backend=backend)
    if job.op == "layernorm":
        cols = p["cols"]
        x, g, b = randn(p["rows"], cols), randn(cols) * 0.5 + 1, randn(cols) * 0.5
        return lambda rung: lambda: fw.layer_norm(x, (cols,), g, b, 1e-5, rung=rung,
                                                  backend=backend)
    if job.op == "decode":  # a few query rows against the whole cache, no mask
        q = randn(1, p["bh"], p["lq"], p["d"])
        k, v = randn(1, p["hkv"], p["lk"], p["d"]), randn(1, p["hkv"], p["lk"], p["d"])
        return lambda rung: lambda: fw.decode(q, k, v, rung=rung, backend=backend)
    n, d, causal = p["seqlen"], p["d"], p["causal"]
    q, k, v = (randn(1, p["bh"], n, d) for _ in range(3))
    if job.op == "attention":
        return lambda rung: lambda: fw.attention(q, k, v, causal=causal, rung=rung,
                                                 backend=backend)
    # The backward of the ops' own forward (its last rung): O and the logsumexp it keeps.
    o, lse = fw.attention(q, k, v, causal=causal, backend=backend, return_lse=True)
    d_o = randn(1, p["bh"], n, d)
    scale = 1.0 / math.sqrt(d)
    backward = torch.ops.flash_workbook.attention_backward
    return lambda rung: lambda: backward(d_o, q, k, v, o, lse, causal, scale, rung, backend)


def time_in_process(torch, fw, timer, job, here, copy_gbps, device_name, date, notes,
                    device="cuda", backend="cuda"):
    """The rows of the job's rungs timed through the ops; a rung the op refuses (a limit the
    program's listing does not state) is a note."""
    if not here:
        return []
    call = make_calls(torch, fw, job, device, backend)
    rows = []
    for chapter, rung in here:
        fn = call(rung)
        try:
            fn()  # its checks, once, before the timer's warm-up
        except ValueError as e:
            notes.append(f"{chapter} {rung} {job.dtype} {job.shape}: the op refuses: {e}")
            continue
        rows.append(make_row(job.op, "workbook", chapter, rung, job.dtype, job.shape,
                             timer.time(fn), job.nbytes, job.flops, copy_gbps, device_name, date))
    return rows


def import_ops(root):
    """The flash_workbook package of this repository (python/), or the reason in one line."""
    sys.path.insert(0, f"{root}/python")
    try:
        import flash_workbook
    except ImportError as e:
        raise SystemExit(f"bench_vs_torch: error: --in-process needs the PyTorch ops: {e}")
    return flash_workbook
