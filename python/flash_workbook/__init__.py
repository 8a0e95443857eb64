"""The FlashAttention workbook's kernels as PyTorch ops.

    import flash_workbook as fw
    o = fw.attention(q, k, v, causal=True)                  # (B, H, L, D), like SDPA
    o, lse = fw.attention(q, k, v, return_lse=True)
    o = fw.attention(q, k, v, rung="fa2_swizzle", backend="sim")
    o = fw.decode(q, k_cache, v_cache, cache_lengths=lengths)    # chapter 09, a few rows
    o = fw.decode(q, k_pages, v_pages, block_table=table)        # a paged cache
    y = fw.softmax(x)                                       # over the last dimension
    y = fw.layer_norm(x, (x.shape[-1],), weight, bias, eps=1e-5)
    for r in fw.rungs("attention"): print(r.name, "|", r.change, "|", r.limits)

The ops live in the C++ library the workbook's build makes whenever a torch is importable
(python/ops/torch_ops.cpp, registered as torch.ops.flash_workbook.*); this package loads it from
FLASH_WORKBOOK_LIBRARY, or from build/python/ of the repository it sits in.

Where an op runs: CUDA tensors run the nvcc-compiled kernels on their GPU; CPU tensors run the
chapter's CPU step (backend "cpu", the default) or the kernels themselves in the workbook's CUDA
simulator (backend "sim"), so that a learner without a GPU calls the real kernel code.
`rung=None` picks the ladder's last rung that takes the inputs; a name runs that rung.

Autograd: attention's backward runs chapter 10's (its CPU step, or a rung of its ladder on the
same backend). With torch >= 2.4 the ops are registered with torch.library (register_fake,
register_autograd), so autograd, torch.library.opcheck and torch.compile see the ops
themselves; an older torch (Debian 12's 1.13) gets the same gradients through
autograd.Function wrappers. decode, softmax and layer_norm have no backward: asking for one
raises RuntimeError.

Bad input (a wrong device, dtype, rank or shape, a non-contiguous tensor, a head dimension or
length a rung does not take, an unknown rung or backend) raises ValueError naming the limit,
before anything runs; the inputs are never written.
"""
import math
import os
from collections import namedtuple

import torch

__all__ = ["attention", "decode", "softmax", "layer_norm", "rungs", "Rung", "library_path",
           "LIBRARY_API"]

Rung = namedtuple("Rung", ["name", "change", "limits", "requires"])


def library_path():
    """The built op library this package loads."""
    path = os.environ.get("FLASH_WORKBOOK_LIBRARY")
    if path:
        return path
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(root, "build", "python", "libwb_torch_ops.so")


def _load():
    path = library_path()
    if not os.path.exists(path):
        raise ImportError(
            f"flash_workbook: no op library at {path}: build the workbook (./wb test or ./wb run) "
            "with a torch importable by /usr/bin/python3, or set FLASH_WORKBOOK_LIBRARY")
    torch.ops.load_library(path)


_load()
_ops = torch.ops.flash_workbook


def rungs(op="attention"):
    """Every rung of `op` ("attention", "attention_backward", "decode", "softmax" or
    "layer_norm"), in
    ladder order: its name, the one idea it adds, its limits and what else it requires ("" when
    nothing: "sm_90a on the GPU", "the P a standard forward stored"), from the rung records."""
    return [Rung(*line.split("\t")) for line in _ops.rungs(op)]


def _check_tensor(t, name):
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"flash_workbook: {name} is a {type(t).__name__}, not a tensor")
    if t.dim() != 4:
        raise ValueError(f"flash_workbook: {name} has {t.dim()} dimensions: attention takes "
                         "(batch, heads, length, head_dim)")


# torch >= 2.4 registers the ops' shapes (register_fake: torch.compile traces a model through
# them) and their gradients (register_autograd: autograd, opcheck and compile see the op itself).
# An older torch (Debian 12's 1.13) gets the same gradients from autograd.Function wrappers.
LIBRARY_API = hasattr(torch.library, "register_fake") and hasattr(torch.library, "register_autograd")


def _attention_setup(ctx, inputs, output):
    q, k, v, causal, scale, _rung, backend, backward_rung = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.args = (causal, scale, backward_rung, backend)
    ctx.mark_non_differentiable(lse)


def _attention_backward(ctx, d_o, _d_lse):
    """Chapter 10's backward (its CPU step, or a rung on the forward's backend) from the O and
    logsumexp the forward kept."""
    q, k, v, o, lse = ctx.saved_tensors
    causal, scale, backward_rung, backend = ctx.args
    dq, dk, dv = _ops.attention_backward(d_o.contiguous(), q, k, v, o, lse, causal, scale,
                                         backward_rung, backend)
    return dq, dk, dv, None, None, None, None, None


def _no_backward(op):
    def backward(ctx, *grads):
        raise RuntimeError(f"flash_workbook: {op} has no backward in the workbook (its chapters "
                           "derive the forward only); use torch's for training")
    return backward


if LIBRARY_API:
    def _fake_attention_forward(q, k, v, causal, scale, rung, backend, backward_rung):
        return torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)

    def _fake_attention_backward(d_o, q, k, v, o, lse, causal, scale, rung, backend):
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def _fake_decode(q, k, v, lengths, block_table, causal, scale, splits, rung, backend):
        return torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)

    def _fake_softmax(x, rung, backend):
        return torch.empty_like(x)

    def _fake_layer_norm(x, weight, bias, eps, rung, backend):
        rows = x.numel() // x.shape[-1]
        return (torch.empty_like(x), x.new_empty((rows,), dtype=torch.float32),
                x.new_empty((rows,), dtype=torch.float32))

    for _name, _fake in (("attention_forward", _fake_attention_forward),
                         ("attention_backward", _fake_attention_backward),
                         ("decode", _fake_decode), ("softmax", _fake_softmax),
                         ("layer_norm", _fake_layer_norm)):
        torch.library.register_fake(f"flash_workbook::{_name}", _fake)
    torch.library.register_autograd("flash_workbook::attention_forward", _attention_backward,
                                    setup_context=_attention_setup)
    for _name in ("decode", "softmax", "layer_norm"):
        torch.library.register_autograd(f"flash_workbook::{_name}", _no_backward(_name),
                                        setup_context=lambda ctx, inputs, output: None)


class _Attention(torch.autograd.Function):
    """The forward op and chapter 10's backward, for a torch without register_autograd."""

    @staticmethod
    def forward(ctx, *inputs):
        output = _ops.attention_forward(*inputs)
        _attention_setup(ctx, inputs, output)
        return output

    backward = staticmethod(_attention_backward)


def attention(q, k, v, causal=False, scale=None, rung=None, backend=None, backward_rung=None,
              return_lse=False):
    """softmax(scale q k^T + mask) v over (batch, heads, length, head_dim) tensors, as
    F.scaled_dot_product_attention; k and v may have fewer heads than q, a divisor of q's
    (grouped-query attention: each KV head serves heads / kv_heads query heads).

    causal: the mask aligned bottom-right, as FlashAttention's (query row i sees key
      j <= i + Lk - Lq; a row that sees no key gives O = 0 and logsumexp = -inf), which is
      SDPA's is_causal when Lq = Lk.
    scale: the softmax scale, 1 / sqrt(head_dim) by default; must be positive.
    rung, backward_rung: a rung of the forward or backward ladder by name (rungs() lists
      them), or None for the last that takes the inputs.
    backend: "cpu" (the CPU step) or "sim" (the kernels in the simulator) for CPU tensors,
      "cuda" for CUDA tensors; None picks "cpu" or "cuda" by the tensors' device.
    return_lse: also return the (batch, heads, Lq) float32 logsumexp of each row.
    """
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        _check_tensor(t, name)
    heads, kv_heads = q.shape[1], k.shape[1]
    if v.shape[1] != kv_heads:
        raise ValueError(f"flash_workbook: k has {kv_heads} heads and v {v.shape[1]}")
    if kv_heads == 0 or heads % kv_heads != 0:
        raise ValueError(f"flash_workbook: q has {heads} heads and k, v {kv_heads}: the KV heads "
                         "must divide the query heads")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    if not scale > 0:
        raise ValueError(f"flash_workbook: scale = {scale}: the softmax scale must be positive")
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        if not t.is_contiguous():
            raise ValueError(f"flash_workbook: {name} is not contiguous: the kernels read "
                             "(batch, heads, length, head_dim) row-major (call .contiguous())")
    if kv_heads != heads:  # each KV head repeated for its group; autograd sums its gradients
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
    args = (q, k, v, bool(causal), float(scale), rung or "", backend or "", backward_rung or "")
    o, lse = _ops.attention_forward(*args) if LIBRARY_API else _Attention.apply(*args)
    return (o, lse) if return_lse else o


def decode(q, k_cache, v_cache, cache_lengths=None, block_table=None, causal=False, scale=None,
           splits=None, rung=None, backend=None, return_lse=False):
    """Flash-Decoding (chapter 09): q (batch, heads, rows, head_dim), a few query rows per
    sequence, against a KV cache with kv_heads dividing heads (grouped-query attention), either
    contiguous, k_cache and v_cache (batch, kv_heads, cache_len, head_dim), or paged,
    (pages, kv_heads, page_keys, head_dim) with block_table (batch, pages per sequence) int32:
    page block_table[b][p] holds keys [p page_keys, (p + 1) page_keys) of sequence b.

    cache_lengths: (batch) int32, the keys each sequence uses (None: all); causal: bottom-right
      per sequence, row i sees key j <= i + length - rows; splits: key ranges per sequence (None:
      one per 4 K/V tiles of 32 keys, at most 16); rung, backend, return_lse: as attention's.
    No backward: decoding serves inference."""
    for t, name in ((q, "q"), (k_cache, "k_cache"), (v_cache, "v_cache")):
        _check_tensor(t, name)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    if not scale > 0:
        raise ValueError(f"flash_workbook: scale = {scale}: the softmax scale must be positive")
    if splits is not None and splits < 1:
        raise ValueError(f"flash_workbook: splits = {splits}: at least 1")
    run = lambda q_, k_, v_: _ops.decode(q_, k_, v_, cache_lengths, block_table, bool(causal),
                                         float(scale), int(splits or 0), rung or "", backend or "")
    o, lse = _run_without_backward("decode", run, q, k_cache, v_cache)
    return (o, lse) if return_lse else o


class _NoBackward(torch.autograd.Function):
    """A forward (decode, softmax, layer_norm) whose backward the workbook does not derive, for a torch without
    register_autograd: asking for it is an error naming the op, not a silent zero."""

    @staticmethod
    def forward(ctx, op, run, x, *params):
        ctx.op = op
        return run(x, *params)

    @staticmethod
    def backward(ctx, *grads):
        _no_backward(ctx.op)(ctx, *grads)


def _run_without_backward(op, run, x, *params):
    """run(x, *params); its backward, asked for, raises (register_autograd's, or _NoBackward)."""
    needs_grad = any(isinstance(t, torch.Tensor) and t.requires_grad for t in (x,) + params)
    if needs_grad and not LIBRARY_API:
        return _NoBackward.apply(op, run, x, *params)
    return run(x, *params)


def softmax(x, dim=-1, rung=None, backend=None):
    """softmax over dimension `dim` (the last, -1, or equal to it) of a contiguous float32,
    float16 or bfloat16 tensor: chapter 03's dispatcher (rung None), a rung of chapters 01 and
    03 by name, or chapter 03's CPU step (backend "cpu"). No backward."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"flash_workbook: x is a {type(x).__name__}, not a tensor")
    if dim not in (-1, x.dim() - 1):
        raise ValueError(f"flash_workbook: softmax over dimension {dim} of a {x.dim()}-dimensional "
                         "tensor: the kernels take rows, the last dimension (move it there)")
    return _run_without_backward("softmax", lambda t: _ops.softmax(t, rung or "", backend or ""), x)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5, rung=None, backend=None,
               return_stats=False):
    """LayerNorm over the last dimension, as F.layer_norm with normalized_shape = (x.shape[-1],):
    chapter 07's dispatcher (rung None), one of its rungs by name, or its Welford CPU step
    (backend "cpu"). return_stats: also the rows' float32 mean and 1 / sqrt(var + eps). No
    backward."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"flash_workbook: x is a {type(x).__name__}, not a tensor")
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if x.dim() == 0 or shape != (x.shape[-1],):
        raise ValueError(f"flash_workbook: normalized_shape {shape} for x {tuple(x.shape)}: the "
                         "kernels normalize the last dimension alone")
    run = lambda t, w, b: _ops.layer_norm(t, w, b, float(eps), rung or "", backend or "")
    y, mean, rstd = _run_without_backward("layer_norm", run, x, weight, bias)
    rows = x.shape[:-1]
    return (y, mean.view(rows), rstd.view(rows)) if return_stats else y
