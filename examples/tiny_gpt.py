"""A tiny character-level GPT trained on the workbook's own pages, its attention the workbook's.

    PYTHONPATH=python /usr/bin/python3 examples/tiny_gpt.py --steps 300 --csv loss.csv
    PYTHONPATH=python python3 examples/tiny_gpt.py --device cuda --dtype bfloat16 --compile inductor

Trains the same model (2 layers, 4 heads of 16, context 64, same initial weights, same batches)
three times on the CPU in float32: with flash_workbook.attention (chapter 06's FA2 step forward,
chapter 10's backward), and twice with a plain math attention, softmax(q k^T / sqrt(d)) v, once
as written and once with the keys in reverse order (the same function, summed in another
order). The two math runs measure how far float32 rounding alone moves a training run; the
workbook's run must stay within twice that distance of the first, plus a floor of 1e-4 in the
loss (FlashAttention's own rule, applied to the loss curve). Then it generates greedily from
the trained model twice, recomputing the whole context each token and with a KV cache through
flash_workbook.decode (chapter 09), and checks that both give the same tokens. Writes each
step's three losses to --csv.

On a GPU (--device cuda) the same runs in --dtype bfloat16 or float32 with heads of 64 (the
head dimension the tensor-core rungs take): the workbook's attention is the CUDA kernels
(chapters 08 and 11 forward, chapter 10 backward) and the reference is PyTorch's
F.scaled_dot_product_attention; the second reference is still the math attention with its keys
reversed. --compile BACKEND (torch 2.4 and later) trains the torch.compile'd model.
"""
import argparse
import csv
import glob
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import flash_workbook as fw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def corpus():
    """The chapter pages, concatenated: the text the repository ships."""
    text = ""
    for path in sorted(glob.glob(os.path.join(ROOT, "chapters", "*", "*.md"))):
        with open(path, encoding="utf-8") as f:
            text += f.read()
    return text


def math_attention(q, k, v, reverse_keys=False):
    """softmax(q k^T / sqrt(d) + causal mask) v in q's dtype; reverse_keys sums over the keys in
    the opposite order (the same values, another rounding)."""
    if reverse_keys:
        k, v = k.flip(2), v.flip(2)
    lq, lk = q.shape[2], k.shape[2]
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    i = torch.arange(lq, device=q.device)[:, None]
    j = torch.arange(lk, device=q.device)[None, :]
    if reverse_keys:
        j = lk - 1 - j
    s = s.masked_fill(j > i + lk - lq, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def sdpa_attention(q, k, v):
    """PyTorch's own fused attention, the reference on a GPU (Lq = Lk in training)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Block(nn.Module):
    def __init__(self, width, heads, attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def split(self, t):  # (B, T, width) -> (B, heads, T, head_dim)
        b, n, w = t.shape
        return t.view(b, n, self.heads, w // self.heads).transpose(1, 2).contiguous()

    def forward(self, x, cache=None):
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = self.split(q), self.split(k), self.split(v)
        if cache is not None:  # generation: the keys so far and this step's, then decode
            if cache:
                k = torch.cat([cache[0][0], k], dim=2)
                v = torch.cat([cache[0][1], v], dim=2)
            cache[:] = [(k, v)]
            o = fw.decode(q, k, v, causal=True)
        else:
            o = self.attention(q, k, v)
        b, h, n, d = o.shape
        x = x + self.proj(o.transpose(1, 2).reshape(b, n, h * d))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab, context, attention, width=64, heads=4, layers=2):
        super().__init__()
        self.context = context
        self.embed, self.position = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads, attention) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(width), nn.Linear(width, vocab)

    def forward(self, tokens, start=0, caches=None):
        positions = torch.arange(start, start + tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.position(positions)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return self.head(self.ln(x))


def train(attention, data, vocab, steps, seed, context=64, batch=16, device="cpu",
          dtype=torch.float32, width=64, compile_backend=""):
    torch.manual_seed(seed)
    model = TinyGPT(vocab, context, attention, width=width).to(device=device, dtype=dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    step_model = torch.compile(model, backend=compile_backend) if compile_backend else model
    g = torch.Generator().manual_seed(seed + 1)
    losses = []
    for _ in range(steps):
        starts = torch.randint(0, len(data) - context - 1, (batch,), generator=g)
        x = torch.stack([data[s:s + context] for s in starts]).to(device)
        y = torch.stack([data[s + 1:s + context + 1] for s in starts]).to(device)
        loss = F.cross_entropy(step_model(x).float().reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, losses


@torch.no_grad()
def generate(model, prompt, tokens, use_cache):
    out = list(prompt)
    device = next(model.parameters()).device
    if use_cache:
        caches = [[] for _ in model.blocks]
        logits = model(torch.tensor([out], device=device), 0, caches)
        for _ in range(tokens):
            out.append(int(logits[0, -1].argmax()))
            logits = model(torch.tensor([[out[-1]]], device=device), len(out) - 1, caches)
    else:
        for _ in range(tokens):
            logits = model(torch.tensor([out], device=device))
            out.append(int(logits[0, -1].argmax()))
    return out[len(prompt):]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--csv", default="")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--compile", default="", metavar="BACKEND",
                   help="train the torch.compile'd model (torch 2.4 and later), e.g. inductor")
    a = p.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch sees no CUDA GPU")
    if a.compile and not fw.LIBRARY_API:
        p.error(f"--compile: torch {torch.__version__} cannot trace the ops (2.4 and later)")
    text = corpus()
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text])
    vocab = len(chars)
    on_gpu = a.device == "cuda"
    run = dict(device=a.device, dtype=getattr(torch, a.dtype), width=256 if on_gpu else 64,
               compile_backend=a.compile)
    workbook = lambda q, k, v: fw.attention(q, k, v, causal=True)  # noqa: E731
    model, wb_losses = train(workbook, data, vocab, a.steps, a.seed, **run)
    reference, ref_name = (sdpa_attention, "sdpa") if on_gpu else (math_attention, "math")
    _, math_losses = train(reference, data, vocab, a.steps, a.seed, **run)
    _, reversed_losses = train(lambda q, k, v: math_attention(q, k, v, True), data, vocab,
                               a.steps, a.seed, **run)
    baseline = max(abs(x - y) for x, y in zip(math_losses, reversed_losses))
    distance = max(abs(x - y) for x, y in zip(wb_losses, math_losses))
    bound = 2 * baseline + 1e-4
    print(f"{a.steps} steps on {len(text)} characters ({vocab} symbols): loss "
          f"{math_losses[0]:.3f} -> {wb_losses[-1]:.3f} (workbook), {math_losses[-1]:.3f} "
          f"({ref_name}); {a.device}, {a.dtype}{', compiled: ' + a.compile if a.compile else ''}")
    print(f"largest loss difference: workbook vs {ref_name} {distance:.2e}, {ref_name} vs math "
          f"with the keys reversed {baseline:.2e}; bound 2 x that + 1e-4 = {bound:.2e}")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["step", "workbook", ref_name, "math_keys_reversed"])
            for i, row in enumerate(zip(wb_losses, math_losses, reversed_losses)):
                w.writerow([i + 1] + [f"{x:.9g}" for x in row])  # a float32 exactly
    prompt = [chars.index(c) for c in "FlashAttention "]
    plain = generate(model, prompt, 40, use_cache=False)
    cached = generate(model, prompt, 40, use_cache=True)
    print("greedy:", repr("".join(chars[t] for t in plain)))
    same = plain == cached
    print("with a KV cache through decode:", "the same tokens" if same else "DIFFERENT tokens")
    return 0 if distance <= bound and same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
