"""Ring attention (chapter 12): attention over a sequence split across the ranks of a
torch.distributed process group, on the workbook's ops.

    import flash_workbook.ring as ring
    q_r, k_r, v_r = (ring.shard(t, rank, world, "zigzag") for t in (q, k, v))  # this rank's
    o_r = ring.ring_attention(q_r, k_r, v_r, causal=True)  # its rows of attention(q, k, v)
    o = ring.unshard([o_0, o_1, ...], "zigzag")            # every rank's rows, back in order

Each of the P ranks holds the queries, keys and values of its positions (a layout, below). The
K/V shards travel a ring, rank r sending to r + 1 and receiving from r - 1: at step t
(0..P-1) rank r holds the K/V of rank (r - t) mod P, runs the workbook's attention of its
queries against them (the op, on any backend and rung) and merges the block's (O, lse) into
its running result by chapter 09's monoid (merge()). The next step's exchange is posted
before the step's compute and waited for after it, so the transfer hides behind the compute.
The backward sends each K/V block round again with float32 dK, dV accumulators: every rank
adds its block's gradients, and after the P-th exchange the accumulators arrive home; dQ
stays. Grouped-query K/V (fewer heads) travel as they are and are repeated per op call.

Layouts of a global sequence of L positions over P ranks (positions(), shard(), unshard()):
  "contiguous": P chunks in order (the first L mod P one longer); rank r holds chunk r.
  "zigzag": 2P chunks (the first L mod 2P one longer); rank r holds chunks r and 2P-1-r, in
    that order: with a causal mask every rank then sees about as many keys as any other.
  "striped": position p on rank p mod P, in order of position.
The default is "zigzag" with a causal mask and "contiguous" without one. A rank or chunk may
hold no position (L < 2P): it still relays the ring.

Launch one process per rank, each initializing the process group before the first call:
    torchrun --nproc-per-node 4 train.py    # env://: dist.init_process_group("gloo", timeout=t)
or torch.multiprocessing.spawn(fn, nprocs=P), fn(r) calling
    dist.init_process_group("gloo", init_method="file:///tmp/store", rank=r, world_size=P,
                            timeout=datetime.timedelta(seconds=30))
Backend "gloo" for CPU tensors, "nccl" for CUDA tensors (one GPU per rank,
torch.cuda.set_device(local rank) first); a world of one rank works on either, with no
exchange at all.

Errors: every rank checks every other's shapes (one all_gather of a small int64 tensor at the
start of each call); a disagreement (batch, heads, head_dim, dtype, mask, layout, scale, device,
or a shard length the layout does not give for L = the sum of the lengths) raises the same
ValueError on every rank, naming the rank and the field. A ValueError of the op (a bad backend
or rung) is raised on every rank alike, after the exchanges in flight are waited for, so the
next call starts from a clean ring. A rank that dies or leaves the ring makes the others raise
RingError (a RuntimeError) naming themselves, the step and the peers they exchange with, with
torch.distributed's message appended; the group is then broken (destroy it, or end the process).
Every wait is bounded by the process group's timeout, which the caller sets in
init_process_group(timeout=...): nothing here waits longer. (On gloo, a dead peer is reported
at once as "Connection closed by peer" or "Connection reset by peer", a silent one at the
timeout; NCCL waits on the GPU's stream, and its watchdog ends a process whose peer is gone.)
"""
import math
import struct

import torch
import torch.distributed as dist

import flash_workbook as fw

__all__ = ["ring_attention", "RingError", "LAYOUTS", "default_layout", "chunk_sizes",
           "rank_chunks", "positions", "local_length", "shard", "unshard", "blocks", "merge"]

LAYOUTS = ("contiguous", "zigzag", "striped")


class RingError(RuntimeError):
    """A rank died or left the ring (or the process group's timeout passed) during an exchange:
    raised on every surviving rank, naming it, the step and the peers."""


# ------------------------------------------------------------------------------------------
# Layouts: which global positions a rank holds, in its local order
# ------------------------------------------------------------------------------------------

def default_layout(causal):
    """"zigzag" for a causal mask (balanced work per rank), "contiguous" without one."""
    return "zigzag" if causal else "contiguous"


def _check_layout(length, rank, world, layout):
    if layout not in LAYOUTS:
        raise ValueError(f"flash_workbook.ring: layout {layout!r} is not one of {LAYOUTS}")
    if not (isinstance(world, int) and world >= 1 and isinstance(rank, int) and 0 <= rank < world):
        raise ValueError(f"flash_workbook.ring: rank {rank} of world size {world}: need "
                         "0 <= rank < world")
    if not (isinstance(length, int) and length >= 0):
        raise ValueError(f"flash_workbook.ring: sequence length {length}: need an int >= 0")


def chunk_sizes(length, count):
    """`count` chunk sizes of a sequence of `length`: base = length // count each, the first
    length % count chunks one more."""
    base, extra = divmod(length, count)
    return [base + (1 if c < extra else 0) for c in range(count)]


def rank_chunks(length, rank, world, layout):
    """The chunks a rank holds under "contiguous" or "zigzag", in its local order, as
    (chunk index, global start, local start, size); empty chunks included (size 0)."""
    _check_layout(length, rank, world, layout)
    if layout == "striped":
        raise ValueError("flash_workbook.ring: the striped layout has no chunks")
    count = world if layout == "contiguous" else 2 * world
    sizes = chunk_sizes(length, count)
    starts = [sum(sizes[:c]) for c in range(count)]
    held = [rank] if layout == "contiguous" else [rank, 2 * world - 1 - rank]
    out, local = [], 0
    for c in held:
        out.append((c, starts[c], local, sizes[c]))
        local += sizes[c]
    return out


def local_length(length, rank, world, layout):
    """How many positions of a sequence of `length` a rank holds."""
    _check_layout(length, rank, world, layout)
    if layout == "striped":
        return len(range(rank, length, world))
    return sum(size for _, _, _, size in rank_chunks(length, rank, world, layout))


def positions(length, rank, world, layout):
    """The global positions (int64) a rank holds, in its local order."""
    _check_layout(length, rank, world, layout)
    if layout == "striped":
        return torch.arange(rank, max(rank, length), world, dtype=torch.long)
    parts = [torch.arange(start, start + size, dtype=torch.long)
             for _, start, _, size in rank_chunks(length, rank, world, layout)]
    return torch.cat(parts)


def shard(x, rank, world, layout, dim=2):
    """A rank's positions of x (the global sequence along `dim`), contiguous, in local order."""
    idx = positions(x.shape[dim], rank, world, layout).to(x.device)
    return x.index_select(dim, idx).contiguous()


def unshard(shards, layout, dim=2):
    """The global tensor from every rank's shard (a list in rank order); L = the sum of their
    lengths along `dim`, each of which must be the one the layout gives."""
    world = len(shards)
    length = sum(s.shape[dim] for s in shards)
    for r, s in enumerate(shards):
        expect = local_length(length, r, world, layout)
        if s.shape[dim] != expect:
            raise ValueError(f"flash_workbook.ring: shard {r} holds {s.shape[dim]} positions "
                             f"where the {layout} layout of L = {length} over {world} ranks "
                             f"gives it {expect}")
    pos = torch.cat([positions(length, r, world, layout) for r in range(world)])
    order = torch.argsort(pos).to(shards[0].device)
    return torch.cat(list(shards), dim).index_select(dim, order)


# ------------------------------------------------------------------------------------------
# Masks: the blocks of one (query rank, key rank) pair the op computes
# ------------------------------------------------------------------------------------------

def blocks(length, q_rank, k_rank, world, layout, causal):
    """The op calls for the queries of `q_rank` against the keys of `k_rank`, as
    (q_start, q_stop, k_start, k_stop, causal) in the two ranks' local indices; pairs that see
    no key are left out (the merge's identity).

    Not causal: the whole shards, one call. Causal, contiguous or zigzag: the chunk pairs
    (qa, kb): b < a whole (not causal), b == a the diagonal square (causal), b > a left out.
    Causal, striped: local query i is position i P + r, key j is j P + s, so row i sees
    j <= i (s <= r) or j <= i - 1 (s > r): the op's bottom-right mask over the first
    lk = n_r (s <= r) or n_r - 1 (s > r) keys, which the layout keeps <= n_s."""
    n_q = local_length(length, q_rank, world, layout)
    n_k = local_length(length, k_rank, world, layout)
    if n_q == 0 or n_k == 0:
        return []
    if not causal:
        return [(0, n_q, 0, n_k, False)]
    if layout == "striped":
        lk = n_q if k_rank <= q_rank else n_q - 1
        assert lk <= n_k, "the striped layout keeps lk <= n_s"
        return [(0, n_q, 0, lk, True)] if lk > 0 else []
    out = []
    for a, _, qa0, qn in rank_chunks(length, q_rank, world, layout):
        for b, _, kb0, kn in rank_chunks(length, k_rank, world, layout):
            if qn == 0 or kn == 0 or b > a:
                continue
            out.append((qa0, qa0 + qn, kb0, kb0 + kn, b == a))
    return out


# ------------------------------------------------------------------------------------------
# The merge: chapter 09's monoid on (O, lse), vectorized
# ------------------------------------------------------------------------------------------

def merge(o_a, lse_a, o_b, lse_b):
    """Chapter 09's merge of two partials (O (..., rows, D), lse (..., rows)), per row:
        lse = hi + log1p(e),  e = exp(lo - hi),  w_hi = 1 / (1 + e),  w_lo = e w_hi
    with hi the larger lse: one exp, every exponent <= 0, and merge(a, b) equals merge(b, a)
    bit for bit. An operand with lse = -inf saw no key: the other comes back exactly (both
    -inf: a's, O = 0 and lse = -inf, never NaN)."""
    a_hi = lse_a >= lse_b
    hi = torch.where(a_hi, lse_a, lse_b)
    lo = torch.where(a_hi, lse_b, lse_a)
    lo_empty = lo == -math.inf
    e = torch.exp(torch.where(lo_empty, torch.zeros_like(lo), lo - hi))  # no -inf - -inf
    e = torch.where(lo_empty, torch.zeros_like(e), e)
    w_hi = 1.0 / (1.0 + e)
    w_lo = e * w_hi
    w_a = torch.where(a_hi, w_hi, w_lo).unsqueeze(-1)
    w_b = torch.where(a_hi, w_lo, w_hi).unsqueeze(-1)
    o = w_a * o_a + w_b * o_b
    o_hi = torch.where(a_hi.unsqueeze(-1), o_a, o_b)
    o = torch.where(lo_empty.unsqueeze(-1), o_hi, o)  # the identity: exactly the other
    lse = torch.where(lo_empty, hi, hi + torch.log1p(e))
    return o, lse


# ------------------------------------------------------------------------------------------
# The shape check every rank makes of every other (one all_gather)
# ------------------------------------------------------------------------------------------

_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
_OP_DTYPES = 3  # the ops take the first three
_DEVICES = ["cpu", "cuda"]
# One int64 row per rank: q's, k's and v's shapes, their dtypes, the mask, layout, device and
# the scale's bits.
_FIELDS = ["batch", "heads", "length", "head_dim", "k batch", "kv_heads", "k length",
           "k head_dim", "v batch", "v heads", "v length", "v head_dim", "dtype", "k dtype",
           "v dtype", "causal", "layout", "device", "scale"]
_SAME_EVERYWHERE = ["batch", "heads", "kv_heads", "head_dim", "dtype", "causal", "layout",
                    "device", "scale"]


def _code(value, table):
    return table.index(value) if value in table else len(table)


def _scale_bits(scale):
    return struct.unpack("<q", struct.pack("<d", float(scale)))[0]


def _show(field, value):
    if field in ("dtype", "k dtype", "v dtype"):
        return str(_DTYPES[value]).replace("torch.", "") if value < len(_DTYPES) else "a dtype " \
            "other than float32, float16, bfloat16 or float64"
    if field == "causal":
        return str(bool(value))
    if field == "layout":
        return LAYOUTS[value]
    if field == "device":
        return _DEVICES[value] if value < len(_DEVICES) else "another device"
    if field == "scale":
        return repr(struct.unpack("<d", struct.pack("<q", value))[0])
    return str(value)


def _metadata_row(q, k, v, causal, layout, scale):
    row = list(q.shape) + list(k.shape) + list(v.shape)
    row += [_code(t.dtype, _DTYPES) for t in (q, k, v)]
    row += [int(bool(causal)), LAYOUTS.index(layout), _code(q.device.type, _DEVICES),
            _scale_bits(scale)]
    return row


def _first_disagreement(table, layout):
    """The first problem in the gathered rows (a list per rank), or None: the same text on
    every rank, since every rank reads the same table."""
    rows = [dict(zip(_FIELDS, row)) for row in table]
    for r, m in enumerate(rows):
        for a, b in (("k batch", "batch"), ("k head_dim", "head_dim")):
            if m[a] != m[b]:
                return (f"rank {r}'s k has {b} {m[a]} and its q {m[b]}: q, k and v share batch "
                        "and head_dim")
        for f in ("batch", "heads", "length", "head_dim"):
            kf = {"heads": "kv_heads", "length": "k length"}.get(f, "k " + f)
            if m["v " + f] != m[kf]:
                return f"rank {r}'s k and v differ in {f}: {m[kf]} and {m['v ' + f]}"
        if m["k length"] != m["length"]:
            return (f"rank {r}'s k and v hold {m['k length']} positions and its q {m['length']}: "
                    "a rank holds q, k and v of the same positions")
        if m["kv_heads"] < 1 or m["heads"] % m["kv_heads"] != 0:
            return (f"rank {r}'s q has {m['heads']} heads and k, v {m['kv_heads']}: the KV heads "
                    "must divide the query heads")
        if not m["dtype"] == m["k dtype"] == m["v dtype"]:
            return (f"rank {r}'s q, k and v are {_show('dtype', m['dtype'])}, "
                    f"{_show('dtype', m['k dtype'])} and {_show('dtype', m['v dtype'])}: "
                    "they share a dtype")
        if m["dtype"] >= _OP_DTYPES:
            return (f"rank {r} holds {_show('dtype', m['dtype'])}: the ops take float32, float16 "
                    "or bfloat16")
    for r, m in enumerate(rows[1:], 1):
        for f in _SAME_EVERYWHERE:
            if m[f] != rows[0][f]:
                return (f"rank {r} holds {f} {_show(f, m[f])} where rank 0 holds "
                        f"{_show(f, rows[0][f])}: every rank must hold the same batch, heads, "
                        "head_dim, dtype and mask")
    world, length = len(rows), sum(m["length"] for m in rows)
    for r, m in enumerate(rows):
        expect = local_length(length, r, world, layout)
        if m["length"] != expect:
            return (f"rank {r} holds {m['length']} positions where the {layout} layout of "
                    f"L = {length} (the sum of the ranks' lengths) over {world} ranks gives it "
                    f"{expect}")
    return None


# ------------------------------------------------------------------------------------------
# The ring: its plan, the exchanges, forward and backward
# ------------------------------------------------------------------------------------------

class _Plan:
    """What every step needs: this rank, the ring, every rank's length, the op's arguments."""

    def __init__(self, group, rank, world, lengths, layout, causal, scale, rung, backward_rung,
                 backend, heads, kv_heads):
        self.group, self.rank, self.world, self.lengths = group, rank, world, lengths
        self.length = sum(lengths)
        self.layout, self.causal, self.scale = layout, causal, scale
        self.rung, self.backward_rung, self.backend = rung, backward_rung, backend
        self.heads, self.kv_heads = heads, kv_heads
        self.next, self.prev = (rank + 1) % world, (rank - 1) % world
        self.next_global, self.prev_global = _global_rank(group, self.next), _global_rank(
            group, self.prev)

    def origin(self, step):
        """The rank whose K/V this rank holds at `step`."""
        return (self.rank - step) % self.world

    def blocks(self, step):
        return blocks(self.length, self.rank, self.origin(step), self.world, self.layout,
                      self.causal)

    def failed(self, step, what, error):
        return RingError(
            f"flash_workbook.ring: rank {self.rank}, ring step {step} of 0..{self.world - 1} "
            f"({what}): the exchange with rank {self.next} (send) and rank {self.prev} "
            "(receive) failed: a rank died or left the ring, or the process group's timeout "
            f"passed (torch.distributed: {error})")


def _global_rank(group, rank):
    if group is None or group is dist.group.WORLD:
        return rank
    get = getattr(dist, "get_global_rank", None) or dist.distributed_c10d._get_global_rank
    return get(group, rank)


class _Exchange:
    """One ring exchange, posted now and waited later: `send` to the next rank, a buffer of
    `recv_shape` from the previous one (either may be empty: nothing posted for it)."""

    def __init__(self, plan, step, what, tag, send, recv_shape, dtype, device):
        self.plan, self.step, self.what = plan, step, what
        self.send = send
        self.recv = torch.empty(recv_shape, dtype=dtype, device=device)
        ops = []
        if send.numel() > 0:
            ops.append(dist.P2POp(dist.isend, send, plan.next_global, plan.group, tag))
        if self.recv.numel() > 0:
            ops.append(dist.P2POp(dist.irecv, self.recv, plan.prev_global, plan.group, tag))
        try:
            self.works = dist.batch_isend_irecv(ops) if ops else []
        except RuntimeError as error:
            raise plan.failed(step, what, error) from error

    def wait(self):
        try:
            for work in self.works:
                work.wait()
        except RuntimeError as error:
            raise self.plan.failed(self.step, self.what, error) from error
        return self.recv


def _drain(exchanges):
    """Waits for the exchanges still posted when a step raised (an op's ValueError, raised on
    every rank alike), errors ignored: every rank's posted sends and receives meet, and the next
    call starts from a clean ring."""
    for exchange in exchanges:
        try:
            exchange.wait()
        except RingError:
            pass


def _probe(plan, q):
    """The op on one row, for a rank with no position (it calls no op in the ring): the same
    ValueError as the other ranks' first op call for a bad backend, rung or dtype."""
    one = q.new_zeros((1, 1, 1, q.shape[3]))
    fw._ops.attention_forward(one, one, one, False, plan.scale, plan.rung, plan.backend,
                              plan.backward_rung)


def _kv_shape(plan, ref, rank):
    """The packed (2, batch, kv_heads, n, head_dim) K/V shape of `rank`'s shard."""
    return (2, ref.shape[0], plan.kv_heads, plan.lengths[rank], ref.shape[3])


def _expand(t, heads):
    """K or V with each KV head repeated for its query heads (grouped-query), contiguous."""
    if t.shape[1] != heads:
        t = t.repeat_interleave(heads // t.shape[1], dim=1)
    return t.contiguous()


def _block_forward(plan, q, kv, block):
    """One op call: the block's (O, lse) of queries [q0, q1) against keys [k0, k1)."""
    q0, q1, k0, k1, causal = block
    qb = q[:, :, q0:q1].contiguous()
    kb, vb = _expand(kv[0][:, :, k0:k1], plan.heads), _expand(kv[1][:, :, k0:k1], plan.heads)
    return fw._ops.attention_forward(qb, kb, vb, causal, plan.scale, plan.rung, plan.backend,
                                     plan.backward_rung)


def _block_backward(plan, d_o, q, kv, o, lse, block):
    """One op call of chapter 10's backward for the block, given the rows' global O and
    global merged lse (so the block's P = exp(S - lse) and D = rowsum(dO O) are the whole
    sequence's): its parts of dQ, dK, dV, the last two summed over each KV head's group."""
    q0, q1, k0, k1, causal = block
    rows = lambda t: t[:, :, q0:q1].contiguous()
    kb, vb = _expand(kv[0][:, :, k0:k1], plan.heads), _expand(kv[1][:, :, k0:k1], plan.heads)
    dq, dk, dv = fw._ops.attention_backward(rows(d_o), rows(q), kb, vb, rows(o), rows(lse),
                                            causal, plan.scale, plan.backward_rung, plan.backend)
    group = plan.heads // plan.kv_heads
    fold = lambda g: g.float().view(g.shape[0], plan.kv_heads, group, *g.shape[2:]).sum(2)
    return dq.float(), fold(dk), fold(dv)


def _ring_forward(plan, q, k, v):
    """This rank's O (float32) and lse after P steps, eq. (2) of chapter 09 per block."""
    batch, heads, n, d = q.shape
    o = torch.zeros((batch, heads, n, d), dtype=torch.float32, device=q.device)
    lse = torch.full((batch, heads, n), -math.inf, dtype=torch.float32, device=q.device)
    kv = torch.stack([k, v])
    exchange = None
    try:
        # [ring_step]
        for step in range(plan.world):
            exchange = None
            if step < plan.world - 1:  # post the next K/V before this step's compute: overlap
                exchange = _Exchange(plan, step, "forward K/V", 2 * step, kv,
                                     _kv_shape(plan, q, plan.origin(step + 1)), kv.dtype,
                                     kv.device)
            if step == 0 and n == 0:
                _probe(plan, q)
            for block in plan.blocks(step):
                q0, q1 = block[0], block[1]
                o_b, lse_b = _block_forward(plan, q, kv, block)
                o[:, :, q0:q1], lse[:, :, q0:q1] = merge(o[:, :, q0:q1], lse[:, :, q0:q1],
                                                         o_b.float(), lse_b)
            if exchange is not None:
                kv, exchange = exchange.wait(), None
        # [ring_step]
    except (ValueError, RuntimeError) as error:
        if exchange is not None and not isinstance(error, RingError):
            _drain([exchange])
        raise
    return o, lse


def _ring_backward(plan, d_o, q, k, v, o, lse):
    """dQ (stays), dK and dV (float32 accumulators travelling with their K/V block, home after
    the P-th exchange)."""
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    kv = torch.stack([k, v])
    kv_exchange, incoming = None, None  # incoming: this step's accumulators, from rank - 1
    try:
        for step in range(plan.world):
            origin = plan.origin(step)
            if step < plan.world - 1:
                kv_exchange = _Exchange(plan, step, "backward K/V", 2 * step, kv,
                                        _kv_shape(plan, q, plan.origin(step + 1)), kv.dtype,
                                        kv.device)
            dkv = torch.zeros(_kv_shape(plan, q, origin), dtype=torch.float32, device=q.device)
            for block in plan.blocks(step):
                q0, q1, k0, k1, _ = block
                dq_b, dk_b, dv_b = _block_backward(plan, d_o, q, kv, o, lse, block)
                dq[:, :, q0:q1] += dq_b
                dkv[0][:, :, k0:k1] += dk_b
                dkv[1][:, :, k0:k1] += dv_b
            if incoming is not None:  # the ranks before this one added theirs first
                dkv, incoming = incoming.wait() + dkv, None
            if plan.world == 1:
                return dq, dkv
            # At the last step the accumulators go to their owner, rank + 1, and this rank's
            # own arrive from rank - 1.
            incoming = _Exchange(plan, step, "backward dK/dV", 2 * step + 1, dkv,
                                 _kv_shape(plan, q, plan.origin(step + 1)), torch.float32,
                                 q.device)
            if kv_exchange is not None:
                kv, kv_exchange = kv_exchange.wait(), None
        return dq, incoming.wait()
    except (ValueError, RuntimeError) as error:
        if not isinstance(error, RingError):
            _drain([e for e in (kv_exchange, incoming) if e is not None])
        raise


class _RingAttention(torch.autograd.Function):
    """The ring's forward and backward (an autograd.Function: torch 1.13 and 2.x alike)."""

    @staticmethod
    def forward(ctx, q, k, v, plan):
        o, lse = _ring_forward(plan, q, k, v)
        o = o.to(q.dtype)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.plan = plan
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_o, _d_lse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dkv = _ring_backward(ctx.plan, d_o.to(q.dtype).contiguous(), q, k, v, o, lse)
        return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype), None


def ring_attention(q, k, v, causal=False, scale=None, layout=None, group=None, rung=None,
                   backward_rung=None, backend=None, return_lse=False):
    """This rank's rows of softmax(scale q k^T + mask) v over the whole sequence, the ranks of
    `group` each holding a shard: q (batch, heads, n_r, head_dim), k and v (batch, kv_heads,
    n_r, head_dim), kv_heads dividing heads (grouped-query: the small K/V travel), the
    positions `layout` gives rank r of L = the sum of the ranks' n_r.

    causal: query position p sees key position p' <= p (the whole sequence's mask).
    scale: the softmax scale, 1 / sqrt(head_dim) by default; must be positive.
    layout: "contiguous", "zigzag" or "striped" (see positions()); None picks "zigzag" when
      causal, else "contiguous".
    group: the torch.distributed process group (default the world): gloo for CPU tensors,
      NCCL for CUDA tensors; its timeout bounds every wait.
    rung, backward_rung, backend: as flash_workbook.attention's, for each block's op call.
    return_lse: also return the (batch, heads, n_r) float32 logsumexp of this rank's rows.
    Autograd: dq, dk, dv of this rank's shards (the ring runs backward too).
    """
    layout = default_layout(causal) if layout is None else layout
    if layout not in LAYOUTS:
        raise ValueError(f"flash_workbook.ring: layout {layout!r} is not one of {LAYOUTS}")
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        fw._check_tensor(t, name)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    if not scale > 0:
        raise ValueError(f"flash_workbook.ring: scale = {scale}: the softmax scale must be "
                         "positive")
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError("flash_workbook.ring: torch.distributed is not initialized: call "
                         "dist.init_process_group first (one process per rank)")
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    if rank < 0:
        raise ValueError("flash_workbook.ring: this process is not a rank of the group")
    comm = dist.get_backend(group)
    if q.device.type == "cuda" and comm == "gloo":
        raise ValueError("flash_workbook.ring: CUDA tensors on a gloo group: use NCCL "
                         "(init_process_group('nccl'))")
    if q.device.type == "cpu" and comm == "nccl":
        raise ValueError("flash_workbook.ring: CPU tensors on an NCCL group: use gloo "
                         "(init_process_group('gloo'))")
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    row = torch.tensor(_metadata_row(q, k, v, causal, layout, scale), dtype=torch.long,
                       device=q.device if comm == "nccl" else "cpu")
    table = [torch.empty_like(row) for _ in range(world)]
    try:
        dist.all_gather(table, row, group=group)
    except RuntimeError as error:
        raise RingError(f"flash_workbook.ring: rank {rank}, before ring step 0 (the all_gather "
                        f"of every rank's shapes among ranks 0..{world - 1}) failed: a rank "
                        "died or left the ring, or the process group's timeout passed "
                        f"(torch.distributed: {error})") from error
    table = [t.tolist() for t in table]
    problem = _first_disagreement(table, layout)
    if problem:
        raise ValueError("flash_workbook.ring: " + problem)
    plan = _Plan(group, rank, world, [t[_FIELDS.index("length")] for t in table], layout,
                 bool(causal), float(scale), rung or "", backward_rung or "", backend or "",
                 q.shape[1], k.shape[1])
    o, lse = _RingAttention.apply(q, k, v, plan)
    return (o, lse) if return_lse else o
