"""flash_workbook.attention against an fp64 reference (CTest torch/ops, label torch).

The rule is FlashAttention's own: an output's (or a gradient's) largest error against the fp64
attention of the same inputs may be at most twice the error of PyTorch's own attention in the
inputs' dtype, plus a floor of 2u max|reference| (u the dtype's unit roundoff: the kernels round
P and O to the dtype once each, where PyTorch's math rounds S, P and O). PyTorch's attention in a
16-bit dtype is computed as its GPU kernels would: each op in float32, its result rounded to the
dtype (Debian's CPU torch 1.13 has no fp16 matmul).
"""
import math

import pytest
import torch

import flash_workbook as fw
from error_rule import check_close

# Odd lengths: 1, 17, 97, 203 (partial tiles of every rung's 64 and 128 rows and keys), lq != lk
# both ways.
LENGTHS = [(1, 1), (17, 97), (203, 17), (97, 203)]


def causal_mask(lq, lk):
    """Bottom-right aligned: row i sees key j <= i + lk - lq (True where masked)."""
    i = torch.arange(lq)[:, None]
    j = torch.arange(lk)[None, :]
    return j > i + lk - lq


def math_attention(q, k, v, causal, scale, dtype):
    """softmax(scale q k^T + mask) v, each op in float32 (or float64) and rounded to `dtype`."""
    r = lambda t: t.to(dtype).to(torch.float64 if dtype == torch.float64 else torch.float32)
    work = torch.float64 if dtype == torch.float64 else torch.float32
    s = r(q.to(work) @ k.to(work).transpose(-1, -2) * scale)
    if causal:
        s = s.masked_fill(causal_mask(q.shape[2], k.shape[2]), float("-inf"))
    p = torch.softmax(s, dim=-1)
    p = torch.nan_to_num(p, nan=0.0)  # a fully masked row: O = 0, as the workbook's convention
    return r(r(p) @ v.to(work))


def inputs(b, h, hkv, lq, lk, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, lq, d, generator=g).to(dtype)
    k = torch.randn(b, hkv, lk, d, generator=g).to(dtype)
    v = torch.randn(b, hkv, lk, d, generator=g).to(dtype)
    return q, k, v


def expand(t, heads):
    return t.repeat_interleave(heads // t.shape[1], dim=1)




@pytest.mark.parametrize("backend", ["cpu", "sim"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("lq,lk", LENGTHS)
@pytest.mark.parametrize("causal", [False, True])
def test_forward_against_fp64(backend, dtype, lq, lk, causal):
    d = 64 if (lq + lk) % 2 else 128  # both head dimensions the 16-bit rungs take
    q, k, v = inputs(1, 2, 2, lq, lk, d, dtype, seed=lq * 1000 + lk)
    scale = 1.0 / math.sqrt(d)
    o, lse = fw.attention(q, k, v, causal=causal, backend=backend, return_lse=True)
    assert o.dtype == dtype and o.shape == q.shape and lse.dtype == torch.float32
    ref = math_attention(q.double(), k.double(), v.double(), causal, scale, torch.float64)
    pt = math_attention(q, k, v, causal, scale, dtype)
    check_close(o, ref, pt, dtype, f"O ({backend}, {dtype}, lq {lq}, lk {lk})")
    s = q.double() @ k.double().transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(causal_mask(lq, lk), float("-inf"))
    lse_ref = torch.logsumexp(s, dim=-1)
    seen = torch.isfinite(lse_ref)
    assert torch.equal(torch.isfinite(lse), seen)
    # lse in float: the row max is exact and the sum's relative error a few u of float.
    assert (lse.double()[seen] - lse_ref[seen]).abs().max().item() <= 1e-5 * max(
        1.0, lse_ref[seen].abs().max().item())


@pytest.mark.parametrize("backend", ["cpu", "sim"])
def test_fully_masked_rows_are_zero_with_minus_inf_logsumexp(backend):
    # Causal with lq > lk: the first lq - lk rows of every head see no key.
    q, k, v = inputs(1, 2, 2, 40, 9, 64, torch.float16, seed=7)
    o, lse = fw.attention(q, k, v, causal=True, backend=backend, return_lse=True)
    assert torch.all(o[:, :, :31] == 0)
    assert torch.all(lse[:, :, :31] == float("-inf"))
    assert torch.all(torch.isfinite(lse[:, :, 31:]))


@pytest.mark.parametrize("backend", ["cpu", "sim"])
def test_grouped_query_attention(backend):
    q, k, v = inputs(2, 4, 1, 17, 33, 64, torch.bfloat16, seed=3)
    o = fw.attention(q, k, v, causal=True, backend=backend)
    ref = math_attention(q.double(), expand(k, 4).double(), expand(v, 4).double(), True,
                         1 / 8, torch.float64)
    pt = math_attention(q, expand(k, 4), expand(v, 4), True, 1 / 8, torch.bfloat16)
    check_close(o, ref, pt, torch.bfloat16, "GQA O")


@pytest.mark.parametrize("backend,dtype", [("cpu", torch.float32), ("sim", torch.float32),
                                           ("cpu", torch.float16), ("sim", torch.float16),
                                           ("sim", torch.bfloat16)])
@pytest.mark.parametrize("causal", [False, True])
def test_gradients_against_fp64_autograd(backend, dtype, causal):
    # Chapter 10's backward through autograd; GQA (4 query heads over 2 KV heads) sums the
    # repeated heads' gradients; lq != lk; d = 64.
    q, k, v = inputs(1, 4, 2, 33, 47, 64, dtype, seed=11)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    o = fw.attention(q, k, v, causal=causal, backend=backend)
    grad = torch.randn(o.shape, generator=torch.Generator().manual_seed(5)).to(dtype)
    o.backward(grad)

    def grads(work_dtype):
        leaves = [t.detach().to(torch.float64 if work_dtype == torch.float64 else dtype)
                  .requires_grad_() for t in (q, k, v)]
        out = math_attention(leaves[0], expand(leaves[1], 4), expand(leaves[2], 4), causal,
                             1 / 8, work_dtype)
        out.backward(grad.to(out.dtype))
        return [t.grad for t in leaves]

    ref = grads(torch.float64)
    # PyTorch's own gradients in dtype: autograd through the float32 ops whose results the
    # forward rounds to dtype (the roundings are the forward's; the backward runs in float32).
    pt = [g.to(dtype) for g in grads(dtype)]
    for got, r, p, name in zip((q.grad, k.grad, v.grad), ref, pt, "qkv"):
        check_close(got, r, p, dtype, f"d{name} ({backend}, {dtype}, causal {causal})")


def test_every_forward_rung_by_name_on_the_simulator():
    names = [r.name for r in fw.rungs("attention")]
    assert names[-1] == "fa3_intra_warpgroup" and "fa2_swizzle" in names and "fa2" in names
    for r in fw.rungs("attention"):
        dtype = torch.float32 if "fp32" in r.limits else torch.float16
        q, k, v = inputs(1, 1, 1, 70, 130, 64, dtype, seed=13)
        o = fw.attention(q, k, v, causal=True, rung=r.name, backend="sim")
        ref = math_attention(q.double(), k.double(), v.double(), True, 1 / 8, torch.float64)
        pt = math_attention(q, k, v, True, 1 / 8, dtype)
        check_close(o, ref, pt, dtype, f"rung {r.name}")


def test_every_backward_rung_by_name_on_the_simulator():
    for r in fw.rungs("attention_backward"):
        dtype = torch.float32 if "fp32" in r.limits else torch.float16
        q, k, v = inputs(1, 1, 1, 40, 70, 64, dtype, seed=17)
        q.requires_grad_()
        if r.requires == "the P a standard forward stored":  # the ops' forward keeps none:
            with pytest.raises(ValueError, match=r.name + " reads the P a standard forward kept"):
                fw.attention(q, k, v, causal=True, backend="sim", backward_rung=r.name)
            assert q.grad is None  # refused before the forward ran
            continue
        o = fw.attention(q, k, v, causal=True, backend="sim", backward_rung=r.name)
        o.sum().backward()
        leaf = q.detach().double().requires_grad_()
        math_attention(leaf, k.double(), v.double(), True, 1 / 8, torch.float64).sum().backward()
        qp = q.detach().requires_grad_()
        math_attention(qp, k, v, True, 1 / 8, dtype).sum().backward()
        check_close(q.grad, leaf.grad, qp.grad.to(dtype), dtype, f"backward rung {r.name}")


REFUSALS = [
    (lambda q, k, v: fw.attention(q[0], k[0], v[0]), "3 dimensions"),
    (lambda q, k, v: fw.attention(q.double(), k.double(), v.double()), "float32, float16"),
    (lambda q, k, v: fw.attention(q, k.half(), v), "one dtype"),
    (lambda q, k, v: fw.attention(q, k[:, :, :5].contiguous(), v), "must match"),
    (lambda q, k, v: fw.attention(q, k[..., :32].contiguous(), v[..., :32].contiguous()),
     "head_dim must match"),
    (lambda q, k, v: fw.attention(q.transpose(2, 3).contiguous().transpose(2, 3), k, v),
     "not contiguous"),
    (lambda q, k, v: fw.attention(q, k, v, rung="fa2_nonexistent", backend="sim"),
     "no attention rung is named"),
    (lambda q, k, v: fw.attention(q, k, v, backend="tpu"), "not one of"),
    (lambda q, k, v: fw.attention(q, k, v, backend="cuda"), "needs CUDA tensors"),
    (lambda q, k, v: fw.attention(q, k, v, scale=0.0), "must be positive"),
    (lambda q, k, v: fw.attention(q, k[:, :3].contiguous(), v[:, :3].contiguous()), "divide"),
    (lambda q, k, v: fw.attention(q, k, v, rung="fa2_swizzle", backend="cpu"),
     "runs the CPU step"),
    # The backward's rung, checked with the forward: not after it has run.
    (lambda q, k, v: fw.attention(q, k, v, backend="sim", backward_rung="fa2_nonexistent"),
     "no attention_backward rung is named"),
    (lambda q, k, v: fw.attention(q, k, v, backward_rung="fa2_backward"),
     "runs chapter 10's CPU step"),
]


def test_each_refusal_is_one_value_error_and_the_inputs_are_untouched():
    q, k, v = inputs(1, 4, 4, 9, 11, 64, torch.float32, seed=19)
    before = [t.clone() for t in (q, k, v)]
    for call, words in REFUSALS:
        with pytest.raises(ValueError, match=words):
            call(q, k, v)
    # A head dimension no 16-bit rung takes, and fp32 into a 16-bit rung.
    qh, kh, vh = inputs(1, 1, 1, 9, 11, 96, torch.float16, seed=23)
    with pytest.raises(ValueError, match="no attention rung takes fp16 at head_dim 96"):
        fw.attention(qh, kh, vh, backend="sim")
    with pytest.raises(ValueError, match="fa3_tma"):
        fw.attention(q, k, v, rung="fa3_tma", backend="sim")
    with pytest.raises(ValueError, match="no op"):
        fw.rungs("softmax_backward")
    for t, b in zip((q, k, v), before):
        assert torch.equal(t, b)
