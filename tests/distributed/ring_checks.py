"""The ring's results against an fp64 reference of the whole sequence, and the bounds they are
held to, each with its reason.

The rule is the torch tests' (FlashAttention's): at most twice the error of the single-process
flash_workbook.attention on the whole sequence, on the same backend, plus what the ring adds on
top of it: rounding in float32 (u = 2^-24) of its merges and of its sums of the blocks' partial
gradients, and the rounding of each block's result to the inputs' dtype (u_b: u for float32,
2^-8 for bfloat16).

  O:    err_ring <= 2 err_single + 8 m u_b max|V| + 2 u_b max|O_ref|
        m: the merges of a row (the blocks it meets, less one: P - 1 for contiguous and
        striped, up to 2P - 1 for a causal zigzag row, which meets every chunk before its own).
        Each merge perturbs its two weights and the blend by a few u, each block's O is rounded
        to the dtype once (u_b), and the operands are convex combinations of V's rows, so
        |O_a|, |O_b| <= max|V|; the final O is rounded to the dtype once more.
  lse:  err_ring <= 2 err_single + 4 m u max(1, max|lse_ref|)
        each merge rounds hi + log1p(e) once (u |lse|), and log1p(e) <= log 2 by a few u.
  dQ, dK, dV:  err_ring <= 2 err_single + max(2 u_b n S + F)
        S: per element, the sum over the blocks the ring adds of |that block's partial
        gradient| in fp64 (for dQ the key blocks' columns, for dK and dV the query blocks'
        rows, each query head of a KV head's group apart under grouped-query attention); n: how
        many partial sums an element receives. The ring adds them in its own order, each
        addition rounding by u times the running sum, at most S, and each partial comes rounded
        to the dtype (u_b |partial|).
        F: the ring's own O and lse errors, measured per element and row (and held to the bounds
        above), carried into the backward, which takes the merged O and lse: D = rowsum(dO O)
        moves by at most dD_i = sum_c |dO_ic| err_O_ic and P = exp(S - lse) by the factor
        e^{err_lse_i} ~ 1 + err_lse_i, so dS = P (dP - D) moves by at most
        E_ij = P_ij (dD_i + err_lse_i |dP_ij - D_i|), and dQ = scale dS K, dK = scale dS^T Q,
        dV = P^T dO by scale E |K|, scale E^T |Q| and (err_lse P)^T |dO|. The single op's O and
        lse carry errors of their own on the same path, which err_single holds. F is measured,
        not assumed: an outlier query row (x20) whose P is nearly one-hot multiplies a rounding
        of its D by |q_i|, ten times the single op's error in dK on one of these inputs, with
        every block right.
"""
import math

import torch

import flash_workbook as fw
import flash_workbook.ring as ring

UNIT_ROUNDOFF = {torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}


def adversarial(b, h, hkv, length, d, seed, dtype=torch.float32):
    """q, k, v, d_o: randn with a few outliers x20 and offsets (k + 2 shifts every score of a
    row alike, v + 4 moves O away from 0), seeded."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for heads, offset in ((h, 0.0), (hkv, 2.0), (hkv, 4.0), (h, 0.0)):
        x = torch.randn(b, heads, length, d, generator=g, dtype=torch.float64)
        flat = x.view(-1)
        spots = torch.randint(0, flat.numel(), (max(1, flat.numel() // 500),), generator=g)
        flat[spots] *= 20.0
        out.append((x + offset).to(dtype))
    return out


def expand(t, heads):
    return t.repeat_interleave(heads // t.shape[1], dim=1)


def causal_mask(length):
    """True where masked: key position > query position (Lq = Lk, the whole sequence)."""
    pos = torch.arange(length)
    return pos[None, :] > pos[:, None]


def reference(q, k, v, d_o, causal, scale):
    """The fp64 attention of the whole sequence: O, lse, dq, dk, dv."""
    q, k, v = (t.double().requires_grad_() for t in (q, k, v))
    heads = q.shape[1]
    s = q @ expand(k, heads).transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(causal_mask(q.shape[2]), -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    o = torch.softmax(s, dim=-1) @ expand(v, heads)
    (o * d_o.double()).sum().backward()
    return o.detach(), lse.detach(), q.grad, k.grad, v.grad


def single(q, k, v, d_o, causal, scale, backend, device="cpu"):
    """flash_workbook.attention on the whole sequence, in the inputs' dtype, on `device`: O,
    lse, dq, dk, dv, back on the CPU."""
    q, k, v = (t.detach().to(device, copy=True).requires_grad_() for t in (q, k, v))
    o, lse = fw.attention(q, k, v, causal=causal, scale=scale, backend=backend, return_lse=True)
    (o.float() * d_o.to(device).float()).sum().backward()
    return tuple(t.detach().cpu() for t in (o, lse, q.grad, k.grad, v.grad))


def key_groups(length, world, layout, causal):
    """The position sets the ring treats as blocks: the chunks (contiguous, zigzag; a causal
    zigzag row meets each chunk apart) or the ranks' positions (striped, and an uncausal
    zigzag, whose two chunks go through one op call)."""
    if layout == "striped" or (layout == "zigzag" and not causal):
        return [ring.positions(length, r, world, layout) for r in range(world)]
    count = world if layout == "contiguous" else 2 * world
    sizes = ring.chunk_sizes(length, count)
    starts = [sum(sizes[:c]) for c in range(count)]
    return [torch.arange(starts[c], starts[c] + sizes[c]) for c in range(count)]


def merges_per_row(length, world, layout, causal):
    """The most merges any row meets: the blocks covering it, less one."""
    most = 0
    for r in range(world):
        count = torch.zeros(ring.local_length(length, r, world, layout), dtype=torch.long)
        for s in range(world):
            for q0, q1, *_ in ring.blocks(length, r, s, world, layout, causal):
                count[q0:q1] += 1
        most = max(most, int(count.max()) if count.numel() else 0)
    return max(most - 1, 0)


def _probabilities(q, k, v, causal, scale):
    """K and V with their heads repeated for grouped-query attention, P and O, in q's dtype."""
    heads = q.shape[1]
    ke, ve = expand(k, heads), expand(v, heads)
    s = q @ ke.transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(causal_mask(q.shape[2]), -math.inf)
    p = torch.softmax(s, dim=-1)
    return ke, ve, p, p @ ve


def partial_sums(q, k, v, d_o, causal, scale, groups):
    """S for dq, dk, dv: per element, the sum over the blocks (`groups` of positions) of
    |the block's partial gradient|, in fp64 from the reference's P, dP and D."""
    q, k, v, d_o = (t.double() for t in (q, k, v, d_o))
    heads = q.shape[1]
    ke, ve, p, o = _probabilities(q, k, v, causal, scale)
    d_s = p * (d_o @ ve.transpose(-1, -2) - (d_o * o).sum(-1, keepdim=True))
    s_dq = sum((scale * d_s[..., g] @ ke[:, :, g]).abs() for g in groups)
    fold = lambda t: t.view(t.shape[0], k.shape[1], heads // k.shape[1], *t.shape[2:]).sum(2)
    s_dk = fold(sum((scale * d_s[:, :, g, :].transpose(-1, -2) @ q[:, :, g]).abs()
                    for g in groups))
    s_dv = fold(sum((p[:, :, g, :].transpose(-1, -2) @ d_o[:, :, g]).abs() for g in groups))
    return s_dq, s_dk, s_dv


def carried(q, k, v, d_o, causal, scale, o_err, lse_err):
    """F for dq, dk, dv (see above) from the ring's per-element O error and per-row lse error,
    in fp64: how far they move the gradients to first order."""
    q, k, v, d_o = (t.double() for t in (q, k, v, d_o))
    heads = q.shape[1]
    ke, ve, p, o = _probabilities(q, k, v, causal, scale)
    d_p = d_o @ ve.transpose(-1, -2) - (d_o * o).sum(-1, keepdim=True)
    d_d = (d_o.abs() * o_err).sum(-1, keepdim=True)
    e = p * (d_d + lse_err.unsqueeze(-1) * d_p.abs())
    fold = lambda t: t.view(t.shape[0], k.shape[1], heads // k.shape[1], *t.shape[2:]).sum(2)
    return (scale * e @ ke.abs(), fold(scale * e.transpose(-1, -2) @ q.abs()),
            fold((p * lse_err.unsqueeze(-1)).transpose(-1, -2) @ d_o.abs()))


def max_err(got, ref):
    err = (got.double() - ref.double()).abs()
    if not torch.isfinite(got).all():
        return math.inf
    return err.max().item() if err.numel() else 0.0


def check_case(case, world, got, backend=None, device="cpu"):
    """Problems (a list of lines; empty when the ring holds every bound) of the ring's global
    results `got` (o, lse and, when the case asked, dq, dk, dv; on the CPU) for `case`, whose
    single-process counterpart runs on `backend` and `device`."""
    q, k, v, d_o = case["q"], case["k"], case["v"], case["d_o"]
    causal, layout, length = case["causal"], case["layout"], q.shape[2]
    scale = case.get("scale") or 1.0 / math.sqrt(q.shape[-1])
    ref = reference(q, k, v, d_o, causal, scale)
    one = single(q, k, v, d_o, causal, scale, backend, device)
    u, u_b = UNIT_ROUNDOFF[torch.float32], UNIT_ROUNDOFF[q.dtype]
    m = merges_per_row(length, world, layout, causal)
    problems = []

    def hold(name, err, err_single, extra):
        bound = 2 * err_single + extra
        if not err <= bound:
            problems.append(f"{case['name']}: {name} error {err:.3g} > 2 x single's "
                            f"{err_single:.3g} + {extra:.3g}")

    o_extra = 8 * m * u_b * v.double().abs().max().item() + 2 * u_b * ref[0].abs().max().item()
    hold("O", max_err(got["o"], ref[0]), max_err(one[0], ref[0]), o_extra)
    finite = torch.isfinite(ref[1])
    if not torch.equal(torch.isfinite(got["lse"]), finite):
        problems.append(f"{case['name']}: lse finite where the reference is not, or back")
    lse_scale = max(1.0, ref[1][finite].abs().max().item() if finite.any() else 1.0)
    hold("lse", max_err(got["lse"][finite], ref[1][finite]),
         max_err(one[1][finite], ref[1][finite]), 4 * m * u * lse_scale)
    if "dq" in got:
        groups = key_groups(length, world, layout, causal)
        fold = q.shape[1] // k.shape[1]
        sums = partial_sums(q, k, v, d_o, causal, scale, groups)
        o_err = (got["o"].double() - ref[0]).abs()
        lse_err = torch.where(finite, got["lse"].double() - ref[1], torch.zeros_like(ref[1]))
        moved = carried(q, k, v, d_o, causal, scale, o_err, lse_err.abs())
        for i, name in enumerate(("dq", "dk", "dv")):
            n = len(groups) * (1 if name == "dq" else fold)
            extra = 2 * u_b * n * sums[i] + moved[i]
            hold(name, max_err(got[name], ref[2 + i]), max_err(one[2 + i], ref[2 + i]),
                 extra.max().item())
    return problems
