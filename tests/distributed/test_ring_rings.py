"""flash_workbook.ring on rings of 2, 3 and 4 gloo ranks (CTest distributed/ring-P2, -P3, -P4):
O, lse and the gradients of every rank's shard, gathered, against the fp64 attention of the
whole sequence, held to the bounds of ring_checks.py (at most twice the single-process op's
error, plus what the ring's merges and sums add). One launch of P worker processes computes
every case of its ring (ring_launch.py).

The cases: every layout, causal or not; lengths that are not multiples of P or 2P (37, 50) and
shorter ones (1, P - 1, P + 1: ranks and chunks with no position); grouped-query K/V (4 query
heads on 2) in a batch of 2; the simulated kernels on backend "sim". The masks leave whole blocks
out (a causal rank's later chunks) and whole rows of an op call unseen (striped, causal: a rank's
first row sees no key of a later rank, the op returns lse = -inf there, merged as the identity).
Inputs: randn with outliers x20 and offsets (ring_checks.adversarial).
"""
import pytest

import flash_workbook.ring as ring
from ring_checks import adversarial, check_case
from ring_launch import describe, gathered, launch


def ring_cases(world):
    cases, seed = [], 1000 * world
    lengths = [37, 50, 1, world + 1] + ([world - 1] if world > 2 else [])
    for length in lengths:
        for layout in ring.LAYOUTS:
            for causal in (False, True):
                seed += 1
                q, k, v, d_o = adversarial(1, 2, 2, length, 16, seed)
                cases.append(dict(name=f"P={world} L={length} {layout} causal={causal}", q=q,
                                  k=k, v=v, d_o=d_o, layout=layout, causal=causal, grad=True))
    for layout, causal in (("zigzag", True), ("striped", False)):
        seed += 1
        q, k, v, d_o = adversarial(2, 4, 2, 29, 16, seed)
        cases.append(dict(name=f"P={world} L=29 GQA batch 2 {layout} causal={causal}", q=q, k=k,
                          v=v, d_o=d_o, layout=layout, causal=causal, grad=True))
    if world < 4:
        layout = "zigzag" if world == 2 else "striped"
        q, k, v, d_o = adversarial(1, 2, 2, 37, 16, seed + 1)
        cases.append(dict(name=f"P={world} L=37 {layout} causal sim", q=q, k=k, v=v, d_o=d_o,
                          layout=layout, causal=True, grad=True, backend="sim"))
    return cases


@pytest.mark.parametrize("world", [2, 3, 4], ids=["P2", "P3", "P4"])
def test_the_ring_equals_attention_on_the_whole_sequence(world, tmp_path):
    cases = ring_cases(world)
    ranks = launch(tmp_path, world, cases, bound_s=60)
    assert all(len(r.results) == len(cases) for r in ranks), describe(ranks)
    problems = []
    for i, case in enumerate(cases):
        errors = [r.results[i].get("message") for r in ranks if "error" in r.results[i]]
        if errors:
            problems.append(f"{case['name']}: {errors[0]}")
            continue
        got = {n: gathered(ranks, i, n, case["layout"]) for n in ("o", "lse", "dq", "dk", "dv")}
        problems += check_case(case, world, got, case.get("backend"))
    assert not problems, "\n".join(problems)
