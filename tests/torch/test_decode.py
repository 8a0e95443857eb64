"""flash_workbook.decode against fp64 (CTest torch/ops, label torch): chapter 09's
Flash-Decoding, a few query rows against a KV cache, contiguous or paged, with per-sequence
lengths and grouped-query heads; the rule of error_rule.py (at most twice PyTorch's own
error in the dtype plus 2u max|reference|)."""

import pytest
import torch

import flash_workbook as fw
from error_rule import check_close



def reference(q, k, v, lengths, causal, scale, dtype):
    """Each sequence b against its first lengths[b] keys, in fp64 (dtype float64) or in float32
    with each op rounded to dtype (PyTorch's own); a row that sees no key is 0."""
    work = torch.float64 if dtype == torch.float64 else torch.float32
    r = lambda t: t.to(dtype).to(work)
    batch, heads, rows, _ = q.shape
    group = heads // k.shape[1]
    out = torch.zeros(q.shape, dtype=work)
    for b in range(batch):
        n = lengths[b]
        if n == 0:
            continue
        kb = k[b, :, :n].to(work).repeat_interleave(group, dim=0)
        vb = v[b, :, :n].to(work).repeat_interleave(group, dim=0)
        s = r(q[b].to(work) @ kb.transpose(-1, -2) * scale)
        if causal:
            i = torch.arange(rows)[:, None]
            j = torch.arange(n)[None, :]
            s = s.masked_fill(j > i + n - rows, float("-inf"))
        p = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)
        out[b] = r(r(p) @ vb)
    return out




def cache(batch, hq, hkv, rows, lk, d, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, hq, rows, d, generator=g).to(dtype)
    k = torch.randn(batch, hkv, lk, d, generator=g).to(dtype)
    v = torch.randn(batch, hkv, lk, d, generator=g).to(dtype)
    return q, k, v


def paged(k, page_keys, seed):
    """k (batch, hkv, lk, d) as a shuffled pool of pages and its block table."""
    batch, hkv, lk, d = k.shape
    per_seq = lk // page_keys
    pool = k.reshape(batch, hkv, per_seq, page_keys, d).permute(0, 2, 1, 3, 4).reshape(
        batch * per_seq, hkv, page_keys, d)
    order = torch.randperm(batch * per_seq, generator=torch.Generator().manual_seed(seed))
    shuffled = torch.empty_like(pool)
    shuffled[order] = pool  # page i of the flat list lands at order[i]
    table = order.reshape(batch, per_seq).to(torch.int32)
    return shuffled.contiguous(), table.contiguous()


@pytest.mark.parametrize("backend", ["cpu", "sim"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["contiguous", "paged"])
@pytest.mark.parametrize("causal", [False, True])
def test_decode_against_fp64(backend, dtype, layout, causal):
    # 3 sequences of 8 query heads over 2 KV heads, 2 rows each, lengths 0, 97 and 256 of a
    # 256-key cache (an empty one: its rows are 0), d = 64.
    q, k, v = cache(3, 8, 2, 2, 256, 64, dtype, seed=31)
    lengths = torch.tensor([0, 97, 256], dtype=torch.int32)
    scale = 1 / 8
    if layout == "paged":
        k_in, table = paged(k, 64, seed=1)
        v_in, _ = paged(v, 64, seed=1)
    else:
        k_in, v_in, table = k, v, None
    o, lse = fw.decode(q, k_in, v_in, cache_lengths=lengths, block_table=table, causal=causal,
                       backend=backend, return_lse=True)
    ref = reference(q, k, v, [0, 97, 256], causal, scale, torch.float64)
    pt = reference(q, k, v, [0, 97, 256], causal, scale, dtype)
    check_close(o, ref, pt, dtype, f"decode ({backend}, {dtype}, {layout}, causal {causal})")
    assert torch.all(o[0] == 0) and torch.all(lse[0] == float("-inf"))
    assert torch.all(torch.isfinite(lse[1:]))


def test_every_decode_rung_by_name_on_the_simulator():
    names = [r.name for r in fw.rungs("decode")]
    assert names == ["one_split", "split_kv", "stream_kv", "mma_kv"]
    q, k, v = cache(2, 4, 1, 1, 300, 64, torch.float16, seed=37)
    lengths = torch.tensor([300, 41], dtype=torch.int32)
    ref = reference(q, k, v, [300, 41], False, 1 / 8, torch.float64)
    pt = reference(q, k, v, [300, 41], False, 1 / 8, torch.float16)
    for name in names:
        for splits in (1, 3):
            o = fw.decode(q, k, v, cache_lengths=lengths, rung=name, backend="sim", splits=splits)
            check_close(o, ref, pt, torch.float16, f"rung {name}, {splits} splits")


def test_decode_refusals():
    q, k, v = cache(2, 4, 2, 1, 128, 64, torch.float16, seed=41)
    table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    pages48 = torch.zeros(4, 2, 48, 64, dtype=torch.float16)
    pages64 = torch.zeros(4, 2, 64, 64, dtype=torch.float16)
    before = [t.clone() for t in (q, k, v)]
    for call, words in [
        (lambda: fw.decode(q, k[:, :1].contiguous().expand(2, 3, 128, 64).contiguous(), v), "match"),
        (lambda: fw.decode(q, k, v, cache_lengths=torch.tensor([1, 129], dtype=torch.int32)),
         "not in"),
        (lambda: fw.decode(q, k, v, cache_lengths=torch.tensor([1, 2])), "int32"),
        (lambda: fw.decode(q, pages48, pages48, block_table=table), "multiple of 32"),
        (lambda: fw.decode(q, pages64, pages64, block_table=table + 3), "not one of"),
        (lambda: fw.decode(q, k[:1].contiguous(), v[:1].contiguous()), "block_table"),
        (lambda: fw.decode(q, k, v, rung="no_such", backend="sim"), "no decode rung is named"),
        (lambda: fw.decode(q, k, v, splits=0), "at least 1"),
    ]:
        with pytest.raises(ValueError, match=words):
            call()
    for t, b in zip((q, k, v), before):
        assert torch.equal(t, b)
