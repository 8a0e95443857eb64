"""flash_workbook.softmax and flash_workbook.layer_norm against fp64 (CTest torch/ops, label
torch), on every rung by name in the simulator and the CPU steps, with FlashAttention's rule of
error_rule.py: at most twice PyTorch's own error in the dtype plus a floor of
2u max|reference| (u the dtype's unit roundoff: one rounding of the output, one of the row's
statistics as they scale it)."""
import pytest
import torch

import flash_workbook as fw
from error_rule import check_close

# Odd row lengths: 1, a warp's 32 plus one, a block's thread count off, a row past the register
# and shared-memory plans of chapter 03's dispatcher.
COLS = [1, 33, 1000, 5000]


def rows_input(rows, cols, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, cols, generator=g) * 3).to(dtype)


def in_dtype(f, dtype):
    """PyTorch's own result in `dtype`: float32 math, the result rounded (CPU torch 1.13 has no
    fp16 softmax)."""
    return lambda *a: f(*[t.float() if isinstance(t, torch.Tensor) else t for t in a]).to(dtype)




@pytest.mark.parametrize("backend", ["cpu", "sim"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cols", COLS)
def test_softmax_against_fp64(backend, dtype, cols):
    x = rows_input(3, cols, dtype, seed=cols).reshape(1, 3, cols)
    y = fw.softmax(x, backend=backend)
    assert y.dtype == dtype and y.shape == x.shape
    ref = torch.softmax(x.double(), dim=-1)
    check_close(y, ref, in_dtype(lambda t: torch.softmax(t, -1), dtype)(x), dtype,
                f"softmax ({backend}, {dtype}, cols {cols})")


def test_every_softmax_rung_by_name_on_the_simulator():
    # rung=None runs the ladder's last rung that takes the rows: the same values as naming it.
    x = rows_input(5, 300, torch.float16, seed=5)
    last = fw.rungs("softmax")[-1].name
    assert torch.equal(fw.softmax(x, backend="sim"), fw.softmax(x, rung=last, backend="sim"))
    for r in fw.rungs("softmax"):
        dtype = torch.float32 if r.limits.endswith("fp32") else torch.float16
        x = rows_input(5, 300, dtype, seed=5)
        y = fw.softmax(x, rung=r.name, backend="sim")
        ref = torch.softmax(x.double(), dim=-1)
        check_close(y, ref, in_dtype(lambda t: torch.softmax(t, -1), dtype)(x), dtype,
                    f"rung {r.name}")


@pytest.mark.parametrize("backend", ["cpu", "sim"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cols", COLS[1:])
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm_against_fp64(backend, dtype, cols, affine):
    x = rows_input(4, cols, dtype, seed=cols + 1) + 100  # an offset: the naive variance's trap
    g = torch.Generator().manual_seed(2)
    w = (torch.rand(cols, generator=g) + 0.5).to(dtype) if affine else None
    b = torch.randn(cols, generator=g).to(dtype) if affine else None
    y, mean, rstd = fw.layer_norm(x, (cols,), w, b, eps=1e-5, backend=backend, return_stats=True)
    assert y.dtype == dtype and mean.dtype == torch.float32 and mean.shape == (4,)
    f64 = lambda t: None if t is None else t.double()
    ref = torch.nn.functional.layer_norm(x.double(), (cols,), f64(w), f64(b), 1e-5)
    pt = in_dtype(lambda t, ww, bb: torch.nn.functional.layer_norm(t, (cols,), ww, bb, 1e-5),
                  dtype)(x, w, b)
    check_close(y, ref, pt, dtype, f"layer_norm ({backend}, {dtype}, cols {cols})")
    assert (mean.double() - x.double().mean(-1)).abs().max().item() <= 1e-4 * 101
    var = x.double().var(-1, unbiased=False)
    assert ((rstd.double() - (var + 1e-5).rsqrt()).abs() / (var + 1e-5).rsqrt()).max() <= 1e-3


def test_every_layer_norm_rung_by_name_on_the_simulator():
    for r in fw.rungs("layer_norm"):
        x = rows_input(6, 700, torch.float32, seed=7)
        y = fw.layer_norm(x, 700, rung=r.name, backend="sim")
        ref = torch.nn.functional.layer_norm(x.double(), (700,))
        check_close(y, ref, torch.nn.functional.layer_norm(x, (700,)), torch.float32,
                    f"rung {r.name}")


def test_the_row_ops_refuse_in_one_value_error_and_have_no_backward():
    x = rows_input(2, 8, torch.float32, seed=9)
    before = x.clone()
    for call, words in [
        (lambda: fw.softmax(x, dim=0), "the last dimension"),
        (lambda: fw.softmax(x.t()), "not contiguous"),
        (lambda: fw.softmax(x.double()), "float32, float16"),
        (lambda: fw.softmax(x, rung="no_such_rung", backend="sim"), "no softmax rung is named"),
        (lambda: fw.softmax(x, backend="cuda"), "needs CUDA tensors"),
        (lambda: fw.layer_norm(x, (2, 8)), "last dimension alone"),
        (lambda: fw.layer_norm(x, 8, torch.ones(7)), "weight must be"),
        (lambda: fw.layer_norm(x, 8, eps=0.0), "eps"),
        (lambda: fw.softmax(torch.empty(0, 8)), "empty"),
    ]:
        with pytest.raises(ValueError, match=words):
            call()
    assert torch.equal(x, before)
    for op in (lambda t: fw.softmax(t), lambda t: fw.layer_norm(t, 8)):
        t = x.clone().requires_grad_()
        with pytest.raises(RuntimeError, match="has no backward in the workbook"):
            op(t).sum().backward()
