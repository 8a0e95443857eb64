"""flash_workbook.ring on CUDA tensors over NCCL (CTest distributed/ring-cuda, labels
distributed and cuda): a ring of one rank, all a one-GPU machine can run, in this process,
forward and backward in bfloat16 and float32, against the single-process
flash_workbook.attention on the whole sequence and the fp64 attention on the CPU (bounds in
ring_checks.py; with one rank the causal zigzag layout still splits the sequence into two
chunks, three op calls and a merge). Skipped, visibly, where torch sees no GPU or has no NCCL.
Alone: pytest tests/distributed -k cuda.
"""
import pytest
import torch
import torch.distributed as dist

import flash_workbook.ring as ring
from ring_checks import adversarial, check_case
from ring_launch import one_rank_group

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and dist.is_available() and dist.is_nccl_available()),
    reason="torch sees no CUDA GPU here (or has no NCCL): the ring's NCCL case needs one")


@pytest.fixture
def nccl_rank(tmp_path):
    torch.cuda.set_device(0)
    with one_rank_group(tmp_path, "nccl"):
        yield


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_cuda_ring_of_one_rank_over_nccl_equals_attention(nccl_rank, dtype):
    problems = []
    for causal in (False, True):
        for length, heads, kv_heads, d in ((203, 4, 2, 64), (1000, 2, 2, 128)):
            q, k, v, d_o = adversarial(1, heads, kv_heads, length, d, seed=length + d,
                                       dtype=dtype)
            qd, kd, vd = (t.cuda().requires_grad_() for t in (q, k, v))
            o, lse = ring.ring_attention(qd, kd, vd, causal=causal, return_lse=True)
            assert o.device.type == "cuda" and o.dtype == dtype
            (o.float() * d_o.cuda().float()).sum().backward()
            got = {"o": o.detach().cpu(), "lse": lse.cpu(), "dq": qd.grad.cpu(),
                   "dk": kd.grad.cpu(), "dv": vd.grad.cpu()}
            case = dict(name=f"cuda {dtype} L={length} d={d} causal={causal}", q=q, k=k, v=v,
                        d_o=d_o, causal=causal, layout=ring.default_layout(causal))
            problems += check_case(case, 1, got, "cuda", device="cuda")
    assert not problems, "\n".join(problems)
