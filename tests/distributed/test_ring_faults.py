"""flash_workbook.ring when a rank fails (CTest distributed/ring-faults): every run ends within
its bound, with the same clear error on every surviving rank.

A rank that dies (os._exit) before the ring, in its forward or in its backward: the others raise
RingError naming themselves, the step and their peers, with gloo's own message appended. A rank
that stops answering: the others meet the process group's timeout (2 s here) and raise RingError
the same way. Ranks whose shapes disagree, or an argument the op refuses: every rank raises the
same ValueError (naming the rank and the field), and the ring stays usable for the next call.
"""
import time

import torch

import flash_workbook.ring as ring
from ring_checks import adversarial
from ring_launch import describe, launch
from ring_worker import DIED

WORLD = 3  # the forward's faults; a ring of 2 for the others (one survivor)


def base_case(name, length=40, layout="zigzag", causal=True, grad=True, seed=7):
    q, k, v, d_o = adversarial(1, 2, 2, length, 16, seed)
    return dict(name=name, q=q, k=k, v=v, d_o=d_o, layout=layout, causal=causal, grad=grad)


def survivors_raise(ranks, dead, *fragments):
    """Every rank but `dead` raised RingError naming itself, with each of `fragments`."""
    for r, rank in enumerate(ranks):
        if r == dead:
            continue
        assert rank.results and rank.results[-1].get("error") == "RingError", describe(ranks)
        message = rank.results[-1]["message"]
        assert message.startswith(f"flash_workbook.ring: rank {r}, "), message
        assert "a rank died or left the ring" in message, message
        for fragment in fragments:
            assert fragment.format(rank=r) in message, (fragment, message)


def test_a_rank_that_dies_before_the_ring_stops_every_other_with_a_ring_error(tmp_path):
    case = base_case("dies before", grad=False)
    case["fault"] = dict(rank=1, when="before")
    ranks = launch(tmp_path, 2, [case], bound_s=20)
    assert ranks[1].returncode == DIED, describe(ranks)
    # The first exchange is the all_gather of the shapes; gloo says "Connection closed by
    # peer" or "Connection reset by peer" for the rank that left.
    survivors_raise(ranks, 1, "the all_gather of every rank's shapes among ranks 0..1",
                    "torch.distributed: ", "Connection")


def test_a_rank_that_dies_in_the_forward_stops_every_other_with_a_ring_error(tmp_path):
    case = base_case("dies in the forward")
    # Rank 1 dies at its first op call, after posting step 0's exchange: the others reach a
    # step whose exchange it never posts. (A rank that dies at its last step may leave the
    # others nothing to wait for: every exchange is posted a step ahead.)
    case["fault"] = dict(rank=1, when="during", at_call=1)
    ranks = launch(tmp_path, WORLD, [case], bound_s=20)
    assert ranks[1].returncode == DIED, describe(ranks)
    # Both survivors exchange with rank 1: rank 0 sends to it, rank 2 receives from it.
    survivors_raise(ranks, 1, "ring step", "rank 1 (", "forward K/V", "torch.distributed: ")


def test_a_rank_that_dies_in_the_backward_stops_every_other_with_a_ring_error(tmp_path):
    case = base_case("dies in the backward")
    case["fault"] = dict(rank=1, when="during", at_call=2, op="backward")
    ranks = launch(tmp_path, 2, [case], bound_s=20)
    assert ranks[1].returncode == DIED, describe(ranks)
    survivors_raise(ranks, 1, "ring step", "rank 1 (", "backward", "torch.distributed: ")


def test_a_rank_that_stops_answering_ends_the_ring_at_the_group_timeout(tmp_path):
    case = base_case("hangs", grad=False)
    case["fault"] = dict(rank=1, when="hang", at_call=1, seconds=60)
    start = time.monotonic()
    ranks = launch(tmp_path, WORLD, [case], bound_s=20, pg_timeout_s=2, silent=(1,))
    # The process group's 2 s timeout, not the hang's 60 s, ends the survivors' waits.
    assert time.monotonic() - start < 15, describe(ranks)
    survivors_raise(ranks, 1, "ring step", "rank 1 (", "timeout", "Timed out")


def test_every_rank_raises_the_same_value_error_and_the_ring_stays_usable(tmp_path):
    # Shapes that disagree (found by the all_gather before the ring), and an argument the op
    # refuses at every rank's first op call (a rank with no position probes the op itself).
    good = base_case("agree", length=20, layout="contiguous", causal=True)
    shard = lambda t, r: ring.shard(t, r, 2, "contiguous")
    own = lambda case, r: [shard(case[n], r) for n in ("q", "k", "v", "d_o")]
    wide = base_case("", length=20, layout="contiguous", seed=8)
    wide.update({n: torch.randn(1, 2, 20, 32) for n in ("q", "k", "v", "d_o")})
    bf16 = [t.to(torch.bfloat16) for t in own(good, 1)]
    short_k = own(good, 1)
    short_k[1], short_k[2] = short_k[1][:, :, :9].contiguous(), short_k[2][:, :, :9].contiguous()
    long_ = base_case("", length=20, layout="contiguous", seed=9)
    nine = [t[:, :, :9].contiguous() for t in own(good, 0)]
    eleven = [torch.cat([t, t[:, :, :1]], 2) for t in own(long_, 1)]
    cases = [
        dict(good, name="head_dim", shards={0: own(good, 0), 1: own(wide, 1)}),
        dict(good, name="dtype", shards={0: own(good, 0), 1: bf16}),
        dict(good, name="lengths", shards={0: nine, 1: eleven}),
        dict(good, name="causal", rank_args={1: {"causal": False}}),
        dict(good, name="k length", shards={0: own(good, 0), 1: short_k}),
        dict(good, name="backend", backend="bogus"),
        dict(base_case("", length=1, layout="contiguous"), name="backend, L = 1",
             backend="bogus"),
        good,
    ]
    want = {
        "head_dim": "flash_workbook.ring: rank 1 holds head_dim 32 where rank 0 holds 16: every "
                    "rank must hold the same batch, heads, head_dim, dtype and mask",
        "dtype": "flash_workbook.ring: rank 1 holds dtype bfloat16 where rank 0 holds float32",
        "lengths": "flash_workbook.ring: rank 0 holds 9 positions where the contiguous layout of "
                   "L = 20 (the sum of the ranks' lengths) over 2 ranks gives it 10",
        "causal": "flash_workbook.ring: rank 1 holds causal False where rank 0 holds True",
        "k length": "flash_workbook.ring: rank 1's k and v hold 9 positions and its q 10",
        "backend": "flash_workbook: backend 'bogus' is not one of 'cpu', 'sim', 'cuda'",
        "backend, L = 1": "flash_workbook: backend 'bogus' is not one of 'cpu', 'sim', 'cuda'",
    }
    ranks = launch(tmp_path, 2, cases, bound_s=20)
    assert all(len(r.results) == len(cases) for r in ranks), describe(ranks)
    for i, case in enumerate(cases[:-1]):
        got = [r.results[i] for r in ranks]
        assert all(g.get("error") == "ValueError" for g in got), (case["name"], got)
        assert got[0]["message"] == got[1]["message"], (got[0]["message"], got[1]["message"])
        assert got[0]["message"].startswith(want[case["name"]]), got[0]["message"]
    # After every refusal the ranks are still in step (the exchanges a step had posted were
    # waited for before raising): the next call runs.
    assert all("error" not in r.results[-1] for r in ranks), describe(ranks)
