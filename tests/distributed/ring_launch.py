"""Starts a test ring: `world` worker processes (ring_worker.py), one per rank, on a gloo
process group joined through a FileStore in the test's own tmp_path, and collects what each
saved. Every run has a hard wall-clock bound: past it, every worker is killed and the test fails
with their output. Or a ring of this process alone (one_rank_group)."""
import contextlib
import os
import subprocess
import sys
import time
from collections import namedtuple

import pytest
import torch
import torch.distributed as dist

import flash_workbook.ring as ring

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")
WORKER = os.path.join(HERE, "ring_worker.py")

Rank = namedtuple("Rank", ["returncode", "log", "results"])


@contextlib.contextmanager
def one_rank_group(tmp_path, backend):
    """A process group of this process alone (world size 1) on `backend`, joined through a
    FileStore in tmp_path, destroyed on leaving."""
    dist.init_process_group(backend, init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def launch(tmp_path, world, cases, bound_s=30, pg_timeout_s=10, silent=()):
    """Runs `cases` (dicts, see ring_worker.py) on a ring of `world` ranks; returns a Rank per
    rank: exit status, output, the list of per-case results it saved. Ranks in `silent` (a
    planted hang) are not waited for: killed once the others end."""
    job = tmp_path / "job.pt"
    torch.save({"cases": cases, "pg_timeout": pg_timeout_s}, job)
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([PACKAGE, os.environ.get("PYTHONPATH", "")]))
    procs, logs = [], []
    for r in range(world):
        logs.append(tmp_path / f"rank{r}.log")
        with open(logs[-1], "w") as log:
            procs.append(subprocess.Popen(
                [sys.executable, WORKER, str(tmp_path / "store"), str(r), str(world), str(job),
                 str(tmp_path / f"rank{r}.pt")], stdout=log, stderr=subprocess.STDOUT, env=env))
    deadline = time.monotonic() + bound_s
    waited = [p for r, p in enumerate(procs) if r not in silent]
    while any(p.poll() is None for p in waited) and time.monotonic() < deadline:
        time.sleep(0.02)
    overrun = any(p.poll() is None for p in waited)
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    text = lambda r: logs[r].read_text()
    if overrun:
        pytest.fail(f"the ring of {world} ranks ran past its {bound_s} s bound; every worker "
                    "killed. Their output:\n" + "\n".join(f"--- rank {r}:\n{text(r)}"
                                                          for r in range(world)))
    out = []
    for r, p in enumerate(procs):
        saved = tmp_path / f"rank{r}.pt"
        out.append(Rank(p.returncode, text(r), torch.load(saved) if saved.exists() else []))
    return out


def gathered(ranks, case_index, name, layout):
    """The global tensor `name` of case `case_index` from every rank's shard."""
    return ring.unshard([r.results[case_index][name] for r in ranks], layout)


def describe(ranks):
    return "\n".join(f"--- rank {r} (exit {x.returncode}):\n{x.log}" for r, x in enumerate(ranks))
