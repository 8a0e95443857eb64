"""bench_vs_torch.py --in-process without a GPU: its workbook side (bench/wb_bench/ops_side.py)
on CPU tensors through the simulator, with a timer that runs each call once. The rungs an op
runs are timed through it and give the programs' CSV columns; a program with a rung no op runs
stays a subprocess; a rung the op refuses is a note, not a row. (On a GPU the same functions run
with backend "cuda" and torch's CUDA-event timer.)"""
import os
import sys

import pytest
import torch

import flash_workbook as fw

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))

from wb_bench.counting import COLUMNS, attention_flops  # noqa: E402
from wb_bench.ops_side import split_commands, time_in_process  # noqa: E402
from wb_bench.plan import Job, Program  # noqa: E402


class OnceTimer:
    """Runs the call once and reports three made-up samples: the rows' arithmetic, not a time."""

    def __init__(self):
        self.calls = 0

    def time(self, fn):
        fn()
        self.calls += 1
        return [2.0, 1.0, 3.0]


def listing(op, names, dtypes="fp16;bf16", head_dims="64;128"):
    """A program's --list rows, as plan.Program reads them."""
    return [{"op": op, "name": n, "dtypes": dtypes, "max_cols": "0", "max_row_bytes": "0",
             "head_dims": head_dims, "max_head_dim": "128", "causal": "1"} for n in names]


def attention_job(op, n=40, d=64, causal=True, commands=()):
    return Job(op, "fp16", f"bh1 lq{n} lk{n} d{d} {'causal' if causal else 'full'}",
               1.0e6, attention_flops(1, n, n, d, causal), list(commands), [],
               {"bh": 1, "seqlen": n, "d": d, "causal": causal})


def test_the_ops_rungs_are_timed_through_them_and_other_programs_stay_subprocesses():
    forward = [r.name for r in fw.rungs("attention")]
    loaded = {"ch08": Program("ch08", "ch08", listing("attention", forward[-3:-1]), True),
              "ch05": Program("ch05", "ch05", listing("attention", ["not_an_op_rung"]), True)}
    job = attention_job("attention", commands=[("ch08", ["ch08", "--bench"]),
                                               ("ch05", ["ch05", "--bench"])])
    here, programs = split_commands(fw, loaded, job)
    assert here == [("ch08", forward[-3]), ("ch08", forward[-2])]
    assert programs == [("ch05", ["ch05", "--bench"])]
    notes, timer = [], OnceTimer()
    rows = time_in_process(torch, fw, timer, job, here, 1000.0, "cpu", "today", notes,
                           device="cpu", backend="sim")
    assert notes == [] and timer.calls == 2
    assert [(r["chapter"], r["kernel"]) for r in rows] == here
    for r in rows:
        assert list(r) == COLUMNS
        assert (r["source"], r["op"], r["median_ms"], r["min_ms"], r["max_ms"], r["reps"]) == \
            ("workbook", "attention", "2", "1", "3", "3")
        assert r["unit"] == "TFLOP/s"
        assert float(r["throughput"]) == pytest.approx(job.flops / 2e-3 / 1e12, rel=1e-5)


def test_a_rung_the_op_refuses_is_a_note():
    """Chapter 11's rungs take d = 64 and 128 only; a listing that claims d = 32 is refused
    by the op, and the refusal becomes a note."""
    hopper = [r.name for r in fw.rungs("attention") if r.requires][:1]
    loaded = {"ch11": Program("ch11", "ch11", listing("attention", hopper, head_dims="32"), True)}
    job = attention_job("attention", d=32, commands=[("ch11", ["ch11"])])
    here, _ = split_commands(fw, loaded, job)
    notes = []
    rows = time_in_process(torch, fw, OnceTimer(), job, here, 1000.0, "cpu", "today", notes,
                           device="cpu", backend="sim")
    assert rows == [] and len(notes) == 1 and "the op refuses" in notes[0]


def test_the_backward_and_the_row_ops_in_process():
    backward = [r.name for r in fw.rungs("attention_backward") if not r.requires][-1]
    loaded = {"ch10": Program("ch10", "ch10", listing("attention_backward", [backward]), True)}
    job = attention_job("attention_backward", n=33, commands=[("ch10", ["ch10"])])
    here, _ = split_commands(fw, loaded, job)
    notes = []
    rows = time_in_process(torch, fw, OnceTimer(), job, here, 1000.0, "cpu", "today", notes,
                           device="cpu", backend="sim")
    assert notes == [] and [r["kernel"] for r in rows] == [backward]

    for op, ops_name in (("softmax", "softmax"), ("layernorm", "layer_norm")):
        last = fw.rungs(ops_name)[-1].name
        rung_rows = [{"op": op, "name": last, "dtypes": "fp32;fp16;bf16", "max_cols": "65536",
                      "max_row_bytes": "0", "head_dims": "", "max_head_dim": "0", "causal": "0"}]
        loaded = {"chNN": Program("chNN", "chNN", rung_rows, True)}
        job = Job(op, "fp32", "5x300", 1.0e4, 0.0, [("chNN", ["chNN"])], [],
                  {"rows": 5, "cols": 300})
        here, _ = split_commands(fw, loaded, job)
        rows = time_in_process(torch, fw, OnceTimer(), job, here, 1000.0, "cpu", "today", notes,
                               device="cpu", backend="sim")
        assert notes == [] and [r["kernel"] for r in rows] == [last] and rows[0]["unit"] == "GB/s"
