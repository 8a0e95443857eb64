"""One rank of a test ring (started by ring_launch.py, one process per rank):

    python ring_worker.py STORE RANK WORLD JOB OUT

joins a gloo process group through the FileStore STORE (no fixed TCP port, so parallel runs
never collide; gloo's own connections take ephemeral ports), makes a group with the timeout the
job names, then runs the job's cases in order with flash_workbook.ring.ring_attention and
torch.saves a result per case to OUT after each one: this rank's O, lse and, when the case asks,
dq, dk, dv; or the error's type and message. A case may plant a fault on one rank: it exits
(os._exit) before the call or at its n-th op call inside the ring's forward or backward, or it
stops answering there (sleeps) so that the others meet the process group's timeout. A case's
"rank_args" give one rank other arguments (causal, layout) than the rest.
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import flash_workbook.ring as ring

DIED = 3  # the exit status of a rank that a case kills


def plant(case, rank):
    """Before the call: the fault of `case` on this rank, if it names this rank."""
    fault = case.get("fault")
    if not fault or fault["rank"] != rank:
        return
    if fault["when"] == "before":
        os._exit(DIED)
    calls = {"n": 0}
    which = "_block_" + fault.get("op", "forward")  # the forward's op calls, or the backward's
    real = getattr(ring, which)

    def dying(*args):
        calls["n"] += 1
        if calls["n"] == fault["at_call"]:
            if fault["when"] == "during":
                os._exit(DIED)
            time.sleep(fault["seconds"])  # "hang": alive but silent
        return real(*args)

    setattr(ring, which, dying)


def inputs(case, rank, world):
    """This rank's (q, k, v, d_o): the case's own per-rank tensors, or its shard of the
    global ones."""
    if "shards" in case:
        return case["shards"][rank]
    return [ring.shard(case[n], rank, world, case["layout"]) for n in ("q", "k", "v", "d_o")]


JOIN_TIMEOUT_S = 60  # the rendezvous: every rank started and joined


def run(case, rank, world, group):
    q, k, v, d_o = inputs(case, rank, world)
    grad = case.get("grad", False)
    q, k, v = (t.clone().requires_grad_(grad) for t in (q, k, v))
    args = dict(causal=case["causal"], layout=case["layout"], backend=case.get("backend"),
                scale=case.get("scale"))
    args.update(case.get("rank_args", {}).get(rank, {}))
    o, lse = ring.ring_attention(q, k, v, return_lse=True, group=group, **args)
    out = {"o": o.detach(), "lse": lse}
    if grad:
        (o.float() * d_o.float()).sum().backward()
        out.update(dq=q.grad, dk=k.grad, dv=v.grad)
    return out


def main():
    store, rank, world, job_path, out_path = sys.argv[1:6]
    rank, world = int(rank), int(world)
    torch.set_num_threads(1)
    job = torch.load(job_path)
    # Joining waits for every rank, and under a loaded machine one may start seconds after the
    # others: the rendezvous gets a generous timeout of its own, and the job's (2 s for the
    # silent rank's case) applies to the ring's group, made once all are there.
    timeout = datetime.timedelta(seconds=job["pg_timeout"])
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=max(timeout, datetime.timedelta(seconds=JOIN_TIMEOUT_S)))
    dist.barrier()
    group = dist.new_group(list(range(world)), timeout=timeout)
    results, clean = [], True
    for case in job["cases"]:
        plant(case, rank)
        try:
            result = run(case, rank, world, group)
        except (ValueError, RuntimeError) as error:
            result = {"error": type(error).__name__, "message": str(error)}
            clean = clean and isinstance(error, ValueError)
        result["name"] = case["name"]
        results.append(result)
        torch.save(results, out_path)
        print(f"rank {rank}: {case['name']}: {result.get('error', 'ok')}", flush=True)
        if not clean:
            break  # the ring is broken: leave without the closing barrier
    if clean:
        dist.barrier()  # every rank done before any closes its connections
    sys.stdout.flush()
    os._exit(0)  # no process-group teardown to wait on


if __name__ == "__main__":
    main()
