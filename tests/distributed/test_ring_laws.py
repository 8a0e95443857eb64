"""flash_workbook.ring in one process (CTest distributed/ring-laws): its layouts give the
stated positions and cover the sequence once; its blocks cover the whole sequence's causal mask
exactly once; its merge keeps chapter 09's laws (the identity exact, no NaN, commutative bit for
bit); it refuses bad arguments before any communication; and a ring of one rank (a gloo group
of its own) equals the op on the whole sequence. Rings of several ranks: test_ring_rings.py.
"""
import math

import pytest
import torch
import torch.distributed as dist

import flash_workbook.ring as ring
from ring_checks import adversarial, check_case
from ring_launch import one_rank_group

# ------------------------------------------------------------------------------------------
# Layouts and masks, in one process
# ------------------------------------------------------------------------------------------


def test_layouts_give_the_stated_positions():
    # 2P = 4 chunks of L = 10: sizes 3, 3, 2, 2 (the first L mod 2P one longer).
    assert ring.positions(10, 0, 2, "zigzag").tolist() == [0, 1, 2, 8, 9]
    assert ring.positions(10, 1, 2, "zigzag").tolist() == [3, 4, 5, 6, 7]
    assert [ring.positions(7, r, 3, "contiguous").tolist() for r in range(3)] == [
        [0, 1, 2], [3, 4], [5, 6]]
    assert ring.positions(7, 1, 3, "striped").tolist() == [1, 4]
    assert ring.positions(1, 3, 4, "striped").tolist() == []
    assert ring.default_layout(True) == "zigzag" and ring.default_layout(False) == "contiguous"


@pytest.mark.parametrize("layout", ring.LAYOUTS)
def test_every_position_is_held_once_and_shards_come_back(layout):
    for world in range(1, 6):
        for length in list(range(0, 23)) + [37, 50]:
            held = [ring.positions(length, r, world, layout) for r in range(world)]
            assert sorted(torch.cat(held).tolist()) == list(range(length))
            for r in range(world):
                assert held[r].numel() == ring.local_length(length, r, world, layout)
                assert torch.all(held[r][1:] > held[r][:-1])  # local order: by position
            x = torch.randn(2, 3, length, 4)
            shards = [ring.shard(x, r, world, layout) for r in range(world)]
            assert all(s.is_contiguous() for s in shards)
            assert torch.equal(ring.unshard(shards, layout), x)


@pytest.mark.parametrize("layout", ring.LAYOUTS)
@pytest.mark.parametrize("causal", [False, True])
def test_the_blocks_cover_the_global_mask_exactly_once(layout, causal):
    # Every (query, key) pair the whole sequence's mask lets through is computed by exactly one
    # block, under that block's own mask (bottom-right aligned, the op's), and no other pair.
    for world in (1, 2, 3, 4):
        for length in (1, 3, 7, 8, 37):
            pos = [ring.positions(length, r, world, layout) for r in range(world)]
            for r in range(world):
                for s in range(world):
                    seen = torch.zeros(len(pos[r]), len(pos[s]), dtype=torch.long)
                    for q0, q1, k0, k1, block_causal in ring.blocks(length, r, s, world, layout,
                                                                    causal):
                        assert 0 <= q0 < q1 <= len(pos[r]) and 0 <= k0 < k1 <= len(pos[s])
                        i = torch.arange(q1 - q0)[:, None]
                        j = torch.arange(k1 - k0)[None, :]
                        visible = j <= i + (k1 - k0) - (q1 - q0) if block_causal else j >= 0
                        seen[q0:q1, k0:k1] += visible.long()
                    want = pos[r][:, None] >= pos[s][None, :] if causal else \
                        torch.ones_like(seen, dtype=torch.bool)
                    assert torch.equal(seen, want.long()), (world, length, r, s)


def test_a_striped_block_has_rows_that_see_no_key():
    # Rank 0's first query (position 0) sees no key of rank 1: the op's row 0 is fully masked.
    assert ring.blocks(8, 0, 1, 2, "striped", True) == [(0, 4, 0, 3, True)]
    assert ring.blocks(2, 0, 1, 2, "striped", True) == []  # one row each: nothing visible


# ------------------------------------------------------------------------------------------
# The merge: chapter 09's laws, on tensors
# ------------------------------------------------------------------------------------------

def bits(t):
    return t.contiguous().view(torch.int32)


def test_merge_returns_the_other_operand_exactly_for_the_identity():
    o = torch.tensor([[[1.5, -0.0, 3e-38, -7.25]]])
    lse = torch.tensor([[2.5]])
    empty_o, empty_lse = torch.zeros_like(o), torch.full_like(lse, -math.inf)
    for got in (ring.merge(o, lse, empty_o, empty_lse), ring.merge(empty_o, empty_lse, o, lse)):
        assert torch.equal(bits(got[0]), bits(o)) and torch.equal(bits(got[1]), bits(lse))


def test_merge_of_two_identities_is_the_identity_never_nan():
    o, lse = ring.merge(torch.zeros(1, 2, 3), torch.full((1, 2), -math.inf),
                        torch.zeros(1, 2, 3), torch.full((1, 2), -math.inf))
    assert not torch.isnan(o).any() and torch.equal(o, torch.zeros(1, 2, 3))
    assert torch.equal(lse, torch.full((1, 2), -math.inf))


def test_merge_is_commutative_bit_for_bit_and_equals_the_logsumexp():
    g = torch.Generator().manual_seed(5)
    o_a, o_b = torch.randn(3, 64, 8, generator=g), torch.randn(3, 64, 8, generator=g)
    lse_a, lse_b = torch.randn(3, 64, generator=g) * 30, torch.randn(3, 64, generator=g) * 30
    lse_b[:, :8] = lse_a[:, :8]  # ties
    lse_b[:, 8:12] = -math.inf
    lse_a[:, 12:16] = -math.inf
    ab, ba = ring.merge(o_a, lse_a, o_b, lse_b), ring.merge(o_b, lse_b, o_a, lse_a)
    assert torch.equal(bits(ab[0]), bits(ba[0])) and torch.equal(bits(ab[1]), bits(ba[1]))
    want_lse = torch.logaddexp(lse_a.double(), lse_b.double())
    w_a = torch.exp(lse_a.double() - want_lse).unsqueeze(-1)
    w_b = torch.exp(lse_b.double() - want_lse).unsqueeze(-1)
    # A few u of float per weight and per blend (|O| < 6 here), and u |lse| for the lse.
    assert (ab[0].double() - (w_a * o_a.double() + w_b * o_b.double())).abs().max() < 1e-5
    assert (ab[1].double() - want_lse).abs().max() < 1e-5 * want_lse.abs().max()


# ------------------------------------------------------------------------------------------
# Arguments refused before any communication, and a ring of one rank in this process
# ------------------------------------------------------------------------------------------

def test_bad_arguments_are_refused_before_any_communication():
    q = torch.randn(1, 2, 5, 16)
    with pytest.raises(ValueError, match="layout 'spiral' is not one of"):
        ring.ring_attention(q, q, q, layout="spiral")
    with pytest.raises(ValueError, match="scale must be positive"):
        ring.ring_attention(q, q, q, scale=-1.0)
    with pytest.raises(ValueError, match="dimensions"):
        ring.ring_attention(q[0], q, q)
    if not dist.is_initialized():
        with pytest.raises(ValueError, match="not initialized"):
            ring.ring_attention(q, q, q)


@pytest.fixture
def one_rank(tmp_path):
    with one_rank_group(tmp_path, "gloo"):
        yield


def test_a_ring_of_one_rank_is_the_op_on_the_whole_sequence(one_rank):
    for layout in ring.LAYOUTS:
        for causal in (False, True):
            q, k, v, d_o = adversarial(1, 2, 2, 37, 16, seed=11)
            o, lse = ring.ring_attention(q, k, v, causal=causal, layout=layout, return_lse=True)
            case = dict(name=f"P=1 {layout} causal {causal}", q=q, k=k, v=v, d_o=d_o,
                        causal=causal, layout=layout)
            assert check_case(case, 1, {"o": o, "lse": lse}, "cpu") == []
