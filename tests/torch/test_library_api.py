"""With torch >= 2.4 the ops are registered with torch.library (register_fake, register_autograd):
torch.library.opcheck passes on every op (its schema, fake tensors, autograd registration and
AOT dispatch), and torch.compile traces attention in one graph, forward and backward, with the
values and gradients eager gives. On an older torch (Debian 12's 1.13, where CI runs) these
tests are skipped with the reason; the autograd.Function path is what test_attention.py tests
there."""
import os
import sys

import pytest
import torch

import flash_workbook as fw

pytestmark = pytest.mark.skipif(
    not fw.LIBRARY_API,
    reason=f"torch {torch.__version__} has no torch.library.register_fake / register_autograd "
           "(2.4 and later); the ops' autograd.Function path serves it (test_attention.py)")

ops = torch.ops.flash_workbook


def qkv(b, h, lq, lk, d, dtype=torch.float32, grad=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, n, d, generator=g, dtype=dtype).requires_grad_(grad)
            for n in (lq, lk, lk)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("backend,dtype", [("", torch.float32), ("sim", torch.float16)])
def test_opcheck_attention_forward_with_its_autograd(causal, backend, dtype):
    q, k, v = qkv(1, 2, 17, 33, 64, dtype, grad=True)
    rung = "" if backend == "" else "fa2_swizzle"
    torch.library.opcheck(ops.attention_forward.default,
                          (q, k, v, causal, 0.125, rung, backend, ""))


def test_opcheck_attention_backward():
    q, k, v = qkv(1, 2, 9, 20, 32)
    o, lse = ops.attention_forward(q, k, v, True, 0.2, "", "", "")
    d_o = torch.randn_like(o)
    torch.library.opcheck(ops.attention_backward.default,
                          (d_o, q, k, v, o, lse, True, 0.2, "", ""))


def test_opcheck_decode_softmax_and_layer_norm():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, 3, 64, generator=g)
    k, v = torch.randn(2, 2, 70, 64, generator=g), torch.randn(2, 2, 70, 64, generator=g)
    lengths = torch.tensor([70, 41], dtype=torch.int32)
    torch.library.opcheck(ops.decode.default, (q, k, v, lengths, None, True, 0.125, 0, "", ""))
    x = torch.randn(5, 7, 300, generator=g)
    torch.library.opcheck(ops.softmax.default, (x, "", ""))
    w, b = torch.randn(300, generator=g), torch.randn(300, generator=g)
    torch.library.opcheck(ops.layer_norm.default, (x, w, b, 1e-5, "", ""))


def test_the_row_ops_and_decode_refuse_a_backward_by_name():
    x = torch.randn(3, 40, requires_grad=True)
    with pytest.raises(RuntimeError, match="softmax has no backward in the workbook"):
        fw.softmax(x).sum().backward()
    with pytest.raises(RuntimeError, match="layer_norm has no backward in the workbook"):
        fw.layer_norm(x, (40,)).sum().backward()
    q, k, v = qkv(1, 2, 1, 50, 64, grad=True)
    with pytest.raises(RuntimeError, match="decode has no backward in the workbook"):
        fw.decode(q, k, v).sum().backward()


def test_compile_traces_attention_in_one_graph_with_eager_values_and_gradients():
    """aot_eager: Dynamo and AOT autograd trace through the fake kernels and the registered
    backward (fullgraph: no graph break), then run the ops themselves; the values and gradients
    must be eager's bit for bit, the same kernels on the same inputs."""
    def step(q, k, v):
        return fw.attention(q, k, v, causal=True).square().sum()

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    q, k, v = qkv(2, 4, 33, 65, 64, grad=True, seed=3)
    eager_loss = step(q, k, v)
    eager_grads = torch.autograd.grad(eager_loss, (q, k, v))
    loss = compiled(q, k, v)
    grads = torch.autograd.grad(loss, (q, k, v))
    assert torch.equal(loss, eager_loss)
    for g, e in zip(grads, eager_grads):
        assert torch.equal(g, e)


def test_compile_traces_the_example_model_for_a_training_step():
    """examples/tiny_gpt.py's model, compiled (aot_eager, fullgraph), takes the training step
    eager takes: the same loss and the same gradients of every parameter, bit for bit."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "examples"))
    import tiny_gpt

    attention = lambda q, k, v: fw.attention(q, k, v, causal=True)  # noqa: E731
    torch.manual_seed(0)
    model = tiny_gpt.TinyGPT(50, 32, attention)
    tokens = torch.randint(0, 50, (4, 32), generator=torch.Generator().manual_seed(1))

    def loss_of(m):
        logits = m(tokens[:, :-1])
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 50), tokens[:, 1:].reshape(-1))

    eager = loss_of(model)
    eager_grads = torch.autograd.grad(eager, list(model.parameters()))
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    loss = loss_of(compiled)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    assert torch.equal(loss, eager)
    for g, e in zip(grads, eager_grads):
        assert torch.equal(g, e)
