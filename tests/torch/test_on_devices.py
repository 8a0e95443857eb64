"""The ops on the kernels' device: CUDA tensors through the nvcc-compiled kernels where torch
sees a GPU (the `cuda` cases, skipped visibly without one), and the same test code on CPU
tensors through the simulated kernels (the `sim` cases, on smaller shapes), so that it runs
on every machine. Each output is held to error_rule.py against the fp64 result of the same
inputs, computed on the CPU: every op, the gradients, every rung by name, opcheck (torch 2.4
and later) and, on a GPU, the example model compiled with inductor for a training step."""
import math
import os
import sys

import pytest
import torch

import flash_workbook as fw
from error_rule import check_close
from test_attention import causal_mask, expand, inputs, math_attention
from test_decode import cache, paged, reference
from test_rows import in_dtype, rows_input

GPU = torch.cuda.is_available()
DEVICES = [
    pytest.param(("cpu", "sim"), id="sim"),
    pytest.param(("cuda", "cuda"), id="cuda",
                 marks=pytest.mark.skipif(not GPU, reason="torch sees no CUDA GPU here")),
]
LENGTHS = {"sim": [(17, 97)], "cuda": [(1, 1), (17, 97), (203, 17), (97, 203), (1000, 1000)]}


def on(device, *tensors):
    """Copies of `tensors` on `device`, leaves of their own (the CPU originals stay the
    references' inputs)."""
    return [t.detach().to(device, copy=True) for t in tensors]


def dq_weight(q, k, v, d_o, causal, scale):
    """The size of the terms of dQ, in fp64 (chapter 10's dq_weight, common/
    reference_attention_backward.hpp): max over (i, c) of scale sum_j G_ij |K_jc|, with
    G_ij = P_ij (sum_c |dO_ic| |V_jc| + sum_c |dO_ic| sum_j' P_ij' |V_j'c|), the bounds on
    |dP_ij| and |D_i| whose roundings dS = P (dP - D) carries. The 16-bit rungs round dS to the
    dtype before dQ = scale dS K, so their error is u of this even where dQ cancels to 0."""
    q, k, v, d_o = (t.double() for t in (q, k, v, d_o))
    s = scale * q @ k.transpose(-1, -2)
    if causal:
        s = s.masked_fill(causal_mask(q.shape[2], k.shape[2]), float("-inf"))
    p = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)
    a = d_o.abs() @ v.abs().transpose(-1, -2)
    b = (d_o.abs() * (p @ v.abs())).sum(-1, keepdim=True)
    return (scale * (p * (a + b)) @ k.abs()).max().item()


@pytest.mark.parametrize("where", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_forward_and_gradients_against_fp64(where, dtype, causal):
    device, backend = where
    for lq, lk in LENGTHS[backend]:
        for d in (64, 128):
            q, k, v = inputs(1, 4, 2, lq, lk, d, dtype, seed=lq + lk + d)  # GQA: 2 KV heads
            scale = 1.0 / math.sqrt(d)
            qd, kd, vd = on(device, q, k, v)
            qd.requires_grad_()
            o = fw.attention(qd, kd, vd, causal=causal, backend=backend)
            assert o.device.type == device and o.dtype == dtype
            ke, ve = expand(k, 4), expand(v, 4)
            ref = math_attention(q.double(), ke.double(), ve.double(), causal, scale,
                                 torch.float64)
            pt = math_attention(q, ke, ve, causal, scale, dtype)
            what = f"O ({backend}, {dtype}, lq {lq}, lk {lk}, d {d}, causal {causal})"
            check_close(o.cpu(), ref, pt, dtype, what)
            d_o = torch.randn(o.shape, generator=torch.Generator().manual_seed(7)).to(dtype)
            (o.float() * d_o.to(device).float()).sum().backward()
            leaf = q.double().requires_grad_()
            (math_attention(leaf, ke.double(), ve.double(), causal, scale, torch.float64) *
             d_o.double()).sum().backward()
            qp = q.float().requires_grad_()
            (math_attention(qp, ke, ve, causal, scale, dtype) * d_o.float()).sum().backward()
            check_close(qd.grad.cpu(), leaf.grad, qp.grad.to(dtype), dtype, "dQ of " + what,
                        weight=dq_weight(q, ke, ve, d_o, causal, scale))


@pytest.mark.parametrize("where", DEVICES)
def test_every_forward_rung_by_name(where):
    device, backend = where
    for r in fw.rungs("attention"):
        if r.requires and backend == "cuda" and torch.cuda.get_device_capability() != (9, 0):
            continue  # sm_90a code: an H100 or H200 runs it (its refusal: test_attention.py)
        dtype = torch.float32 if "fp32" in r.limits else torch.float16
        q, k, v = inputs(1, 2, 2, 40, 70, 64, dtype, seed=11)
        o = fw.attention(*on(device, q, k, v), causal=True, rung=r.name, backend=backend)
        ref = math_attention(q.double(), k.double(), v.double(), True, 1 / 8, torch.float64)
        check_close(o.cpu(), ref, math_attention(q, k, v, True, 1 / 8, dtype), dtype,
                    f"rung {r.name} ({backend})")


@pytest.mark.parametrize("where", DEVICES)
@pytest.mark.parametrize("paged_cache", [False, True])
def test_decode_against_fp64(where, paged_cache):
    device, backend = where
    dtype = torch.float16
    q, k, v = cache(2, 8, 2, 3, 256, 64, dtype, seed=5)
    lengths = torch.tensor([256, 97], dtype=torch.int32)
    if paged_cache:
        kc, table = paged(k, 64, seed=6)
        vc, _ = paged(v, 64, seed=6)
        args = dict(block_table=table.to(device))
    else:
        kc, vc, args = k, v, {}
    o = fw.decode(*on(device, q, kc, vc), cache_lengths=lengths.to(device), causal=True,
                  backend=backend, **args)
    ref = reference(q.double(), k.double(), v.double(), lengths, True, 1 / 8, torch.float64)
    pt = reference(q, k, v, lengths, True, 1 / 8, dtype)
    check_close(o.cpu(), ref, pt, dtype, f"decode ({backend}, paged {paged_cache})")


@pytest.mark.parametrize("where", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_and_layer_norm_against_fp64(where, dtype):
    device, backend = where
    for cols in (33, 1000):
        x = rows_input(5, cols, dtype, seed=cols)
        y = fw.softmax(x.to(device), backend=backend)
        check_close(y.cpu(), torch.softmax(x.double(), -1),
                    in_dtype(lambda t: torch.softmax(t, -1), dtype)(x), dtype,
                    f"softmax ({backend}, {dtype}, cols {cols})")
        w, b = rows_input(1, cols, dtype, seed=1)[0], rows_input(1, cols, dtype, seed=2)[0]
        y = fw.layer_norm(*on(device, x), (cols,), *on(device, w, b), backend=backend)
        ln = torch.nn.functional.layer_norm
        check_close(y.cpu(), ln(x.double(), (cols,), w.double(), b.double()),
                    in_dtype(lambda t, g, c: ln(t, (cols,), g, c), dtype)(x, w, b), dtype,
                    f"layer_norm ({backend}, {dtype}, cols {cols})")


@pytest.mark.skipif(not fw.LIBRARY_API, reason=f"torch {torch.__version__}: opcheck is 2.4's")
@pytest.mark.parametrize("where", DEVICES)
def test_opcheck_on_the_device(where):
    device, backend = where
    q, k, v = on(device, *inputs(1, 2, 2, 17, 33, 64, torch.float16, seed=3))
    for t in (q, k, v):
        t.requires_grad_()
    torch.library.opcheck(torch.ops.flash_workbook.attention_forward.default,
                          (q, k, v, True, 0.125, "", backend, ""))


@pytest.mark.skipif(not (GPU and fw.LIBRARY_API),
                    reason="a GPU and torch 2.4 or later (inductor compiles for the GPU)")
def test_the_example_model_compiled_with_inductor_takes_eagers_step():
    """The example's model in bfloat16 on the GPU (heads of 64), compiled by inductor: the loss
    and every gradient within inductor's own reordering of the model's other ops. The bound:
    the distance eager's model moves when its attention is PyTorch's SDPA instead of the
    workbook's, twice, plus bf16's 2u of the largest gradient (error_rule.py's rule)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "examples"))
    import tiny_gpt

    def grads_of(attention, compile_backend=""):
        torch.manual_seed(0)
        model = tiny_gpt.TinyGPT(50, 64, attention, width=256).to("cuda", torch.bfloat16)
        run = torch.compile(model, backend=compile_backend) if compile_backend else model
        tokens = torch.randint(0, 50, (4, 65), generator=torch.Generator().manual_seed(1))
        tokens = tokens.cuda()
        loss = torch.nn.functional.cross_entropy(run(tokens[:, :-1]).float().reshape(-1, 50),
                                                 tokens[:, 1:].reshape(-1))
        return [loss] + list(torch.autograd.grad(loss, list(model.parameters())))

    workbook = lambda q, k, v: fw.attention(q, k, v, causal=True)  # noqa: E731
    eager = grads_of(workbook)
    compiled = grads_of(workbook, "inductor")
    sdpa = grads_of(tiny_gpt.sdpa_attention)
    for e, c, s in zip(eager, compiled, sdpa):
        floor = 2 * 2.0 ** -8 * e.abs().max().item()
        assert (c - e).abs().max().item() <= 2 * (s - e).abs().max().item() + floor
