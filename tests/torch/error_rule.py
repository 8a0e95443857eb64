"""The error rule every torch test holds the ops to, FlashAttention's own: an output's (or a
gradient's) largest error against the fp64 result of the same inputs may be at most twice the
error of PyTorch's own computation in the inputs' dtype, plus a floor of 2u max|reference| (u
the dtype's unit roundoff: the kernels round a probability or statistic and the output to the
dtype once each)."""
import math

import torch

UNIT_ROUNDOFF = {torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}


def check_close(got, ref64, pt, dtype, what, weight=0.0):
    """got and pt (PyTorch's own result in dtype) against the fp64 reference ref64. `weight`:
    the size of the terms whose roundings make the error, where the result can cancel far
    below them (dQ with a single key: dS = P (dP - D) is 0 exactly, and the kernels' dP and D,
    summed in other orders, differ by a rounding of |dO| |V|): the floor is 2u times the larger
    of max|ref64| and `weight`."""
    err = (got.double() - ref64).abs().max().item()
    pt_err = (pt.double() - ref64).abs().max().item()
    floor = 2 * UNIT_ROUNDOFF[dtype] * max(ref64.abs().max().item(), weight, 1e-30)
    assert math.isfinite(err), f"{what}: non-finite output"
    assert err <= 2 * pt_err + floor, (
        f"{what}: error {err:.3g} > 2 x PyTorch's {pt_err:.3g} + floor {floor:.3g}")
