"""The plan of a run: which chapter programs time which op, on which shapes, with which
commands. Nothing here knows the chapters: each program's ladder comes from
`chNN --list --csv -` (common/rung_list.cpp), whose `op` column says what the program times
and whose limits say which element types, row lengths and head dimensions its rungs take."""

import csv
import io
import os
import subprocess

from .counting import (ELEM_BYTES, attention_bytes, attention_flops, attention_shape_string,
                       backward_flops,
                       decode_bytes, decode_shape_string, layernorm_bytes, softmax_bytes,
                       shape_string)

OPS = ("softmax", "layernorm", "attention", "decode", "attention_backward")  # the ops planned here
TORCH_NAMES = {"softmax": "torch.softmax", "layernorm": "F.layer_norm"}


def find_programs(programs_file):
    """chNN -> path, from the build's chapter_programs.txt (one program path per line)."""
    if not os.path.isfile(programs_file):
        raise SystemExit(f"bench_vs_torch: error: {programs_file} not found; build the workbook "
                         "first (cmake --build build) or pass --programs")
    programs = {}
    with open(programs_file) as f:
        for line in f:
            path = line.strip()
            if path:
                programs[os.path.basename(path)] = path
    return programs


def run_program(argv):
    """(stdout, None) or (None, why)."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    if out.returncode != 0:
        return None, f"`{' '.join(argv)}` exited with {out.returncode}: {out.stderr.strip()[:200]}"
    return out.stdout, None


class Program:
    """A chapter program and its ladder, as `--list --csv -` describes it."""

    def __init__(self, name, path, rungs, offers_bench):
        self.name, self.path, self.rungs, self.offers_bench = name, path, rungs, offers_bench
        self.op = rungs[0]["op"] if rungs else None
        self.dtypes = sorted({t for r in rungs for t in r["dtypes"].split(";")})
        # --dtype exists where some rung takes more than fp32 (common/dtype.hpp's option).
        self.takes_dtype_option = self.dtypes != ["fp32"]

    def rungs_taking(self, dtype, cols=None, d=None, causal=False):
        out = []
        for r in self.rungs:
            if dtype not in r["dtypes"].split(";"):
                continue
            if cols is not None and not row_fits(r, cols, dtype):
                continue
            if d is not None:
                dims = [int(h) for h in r["head_dims"].split(";") if h]
                if (dims and d not in dims) or (not dims and d > int(r["max_head_dim"])):
                    continue
                if causal and r["causal"] != "1":
                    continue
            out.append(r["name"])
        return out


def row_fits(rung, cols, dtype):
    """RungLimits::max_cols_of: the element limit, and the byte limit of a cached row."""
    max_cols = int(rung["max_cols"])
    row_bytes = int(rung["max_row_bytes"])
    if row_bytes > 0:
        max_cols = min(max_cols, row_bytes // ELEM_BYTES[dtype])
    return cols <= max_cols


def load_programs(programs, notes):
    """{chNN: Program} for every built program whose --list works."""
    loaded = {}
    for name, path in sorted(programs.items()):
        if not os.path.isfile(path):
            notes.append(f"{name}: {path} is listed but not built; skipped")
            continue
        listing, why = run_program([path, "--list", "--csv", "-"])
        helptext, _ = run_program([path, "--help"])
        if listing is None:
            notes.append(f"{name}: no ladder ({why}); skipped")
            continue
        rungs = list(csv.DictReader(io.StringIO(listing)))
        loaded[name] = Program(name, path, rungs, bool(helptext) and "--bench" in helptext)
    return loaded


class Job:
    """One shape of one op: the workbook commands and the torch calls timed on it."""

    def __init__(self, op, dtype, shape, nbytes, flops, commands, torch_calls, params):
        self.op, self.dtype, self.shape = op, dtype, shape
        self.nbytes, self.flops = nbytes, flops
        self.commands = commands        # [(chNN, argv)]
        self.torch_calls = torch_calls  # [(kernel name, description)]
        self.params = params


def bench_programs(loaded, op, notes):
    progs = [p for p in loaded.values() if p.op == op]
    for p in progs:
        if not p.offers_bench:
            notes.append(f"{p.name}: its {op} ladder has no --bench; skipped")
    return [p for p in progs if p.offers_bench]


def command(p, common, shape_args, dtype):
    return (p.name, [p.path] + common + shape_args + (["--dtype", dtype] if p.takes_dtype_option else []))


def row_jobs(args, loaded, common, notes):
    jobs = []
    for op in ("softmax", "layernorm"):
        if op not in args.ops:
            continue
        progs = bench_programs(loaded, op, notes)
        for dtype in args.dtypes:
            for cols in args.cols:
                commands = [command(p, common, ["--rows", str(args.rows), "--cols", str(cols)], dtype)
                            for p in progs if p.rungs_taking(dtype, cols=cols)]
                name = TORCH_NAMES[op]
                desc = (f"{name}(x, dim=-1)" if op == "softmax" else
                        f"{name}(x, ({cols},), gamma, beta, eps=1e-5)")
                nbytes = (softmax_bytes if op == "softmax" else layernorm_bytes)(
                    args.rows, cols, ELEM_BYTES[dtype])
                jobs.append(Job(op, dtype, shape_string(args.rows, cols), nbytes, 0.0, commands,
                                [(name, f"{desc}, x ({args.rows}, {cols}) {dtype}")],
                                {"rows": args.rows, "cols": cols}))
    return jobs


def square_attention_jobs(op, dtypes, seqlens, args, loaded, common, notes, nbytes, flops, calls):
    """`op` on BH heads of lq = lk = seqlen, every dtype, head dimension, mask and length, the
    same shapes for the programs and for torch: nbytes(seqlen, d, elem) and
    flops(seqlen, d, causal) count the work, calls(seqlen, d, causal, dtype) the torch calls."""
    if op not in args.ops:
        return []
    progs, jobs = bench_programs(loaded, op, notes), []
    for dtype in dtypes:
        for d in args.head_dims:
            for causal in (False, True):
                for seqlen in seqlens:
                    shape_args = (["--bh", str(args.bh), "--lq", str(seqlen), "--lk", str(seqlen),
                                   "--d", str(d)] + (["--causal"] if causal else []))
                    commands = [command(p, common, shape_args, dtype) for p in progs
                                if p.rungs_taking(dtype, d=d, causal=causal)]
                    jobs.append(Job(op, dtype,
                                    attention_shape_string(args.bh, seqlen, seqlen, d, causal),
                                    nbytes(seqlen, d, ELEM_BYTES[dtype]),
                                    flops(seqlen, d, causal), commands,
                                    calls(seqlen, d, causal, dtype),
                                    {"bh": args.bh, "seqlen": seqlen, "d": d, "causal": causal}))
    return jobs


def attention_jobs(args, loaded, common, notes):
    bh = args.bh
    return square_attention_jobs(
        "attention", args.attention_dtypes, args.seqlens, args, loaded, common, notes,
        lambda n, d, elem: attention_bytes(bh, n, n, d, elem),
        lambda n, d, causal: attention_flops(bh, n, n, d, causal),
        lambda n, d, causal, dtype: [
            (f"sdpa {b}", f"F.scaled_dot_product_attention(q, k, v, is_causal={causal}) "
             f"under sdpa_kernel(SDPBackend.{b.upper()}_ATTENTION), q k v (1, {bh}, {n}, {d}) {dtype}")
            for b in ("flash", "cudnn")])


def backward_jobs(args, loaded, common, notes):
    """Attention's backward (chapter 10): dQ, dK, dV of BH heads at every --backward-seqlens,
    against torch.autograd.grad of scaled_dot_product_attention's output (flash backend, which
    takes fp16 and bf16 only; efficient, which also takes fp32; cuDNN). Counted in FLOPs only."""
    bh = args.bh
    return square_attention_jobs(
        "attention_backward", args.backward_dtypes, args.backward_seqlens, args, loaded, common,
        notes, lambda n, d, elem: 0.0,
        lambda n, d, causal: backward_flops(bh, n, n, d, causal),
        lambda n, d, causal, dtype: [
            (f"sdpa {b} backward",
             f"torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal={causal}), "
             f"(q, k, v), dO) under sdpa_kernel(SDPBackend.{b.upper()}_ATTENTION), "
             f"q k v (1, {bh}, {n}, {d}) {dtype}")
            for b in ("flash", "efficient", "cudnn")])


def decode_jobs(args, loaded, common, notes):
    """One query row (or a few) per head against a KV cache of every length: --decode-bh query
    heads of batch 1 over bh / g KV heads for each group size g of --decode-groups (g = 1:
    multi-head attention; g > 1: grouped-query, torch's sdpa with enable_gqa=True), no mask,
    the cache full."""
    if "decode" not in args.ops:
        return []
    progs, jobs, bh = bench_programs(loaded, "decode", notes), [], args.decode_bh
    for g in args.decode_groups:
        if bh % g:
            notes.append(f"decode: {bh} heads do not group by {g}; skipped")
            continue
        hkv = bh // g
        for dtype in args.attention_dtypes:
            for d in args.head_dims:
                for lq in args.decode_lq:
                    for lk in args.decode_lengths:
                        shape_args = ["--batch", "1", "--hq", str(bh), "--hkv", str(hkv),
                                      "--lq", str(lq), "--lk", str(lk), "--d", str(d), "--full"]
                        commands = [command(p, common, shape_args, dtype) for p in progs
                                    if p.rungs_taking(dtype, d=d)]
                        gqa = ", enable_gqa=True" if g > 1 else ""
                        calls = [(f"sdpa {b}", f"F.scaled_dot_product_attention(q, k, v{gqa}) "
                                  f"under sdpa_kernel(SDPBackend.{b.upper()}_ATTENTION), "
                                  f"q (1, {bh}, {lq}, {d}), k v (1, {hkv}, {lk}, {d}) {dtype}")
                                 for b in ("flash", "cudnn")]
                        jobs.append(Job("decode", dtype, decode_shape_string(1, bh, hkv, lq, lk, d),
                                        decode_bytes(bh, hkv, lq, lk, d, ELEM_BYTES[dtype]), 0.0,
                                        commands, calls,
                                        {"bh": bh, "hkv": hkv, "lq": lq, "lk": lk, "d": d}))
    return jobs


def plan(args, loaded, notes):
    common = ["--bench", "--reps", str(args.reps), "--csv", "{csv}"]
    return (row_jobs(args, loaded, common, notes) + attention_jobs(args, loaded, common, notes) +
            decode_jobs(args, loaded, common, notes) + backward_jobs(args, loaded, common, notes))
