"""What is counted: the formulas of common/bench.cpp, so both sides divide the same numbers,
and the rows of the CSV (the columns of common/bench.hpp's csv_header, in its order)."""

import datetime
import statistics

COLUMNS = ["op", "source", "chapter", "kernel", "dtype", "shape", "median_ms", "min_ms",
           "max_ms", "reps", "throughput", "unit", "gbps", "fraction_of_copy", "copy_gbps",
           "device", "date"]

WARMUP = 10  # common/bench.hpp kBenchWarmup: the same for the programs and for torch
ELEM_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


def softmax_bytes(rows, cols, elem):
    return 2.0 * rows * cols * elem  # read x, write y


def layernorm_bytes(rows, cols, elem):
    return 2.0 * rows * cols * elem + 2.0 * cols * elem + 2.0 * rows * 4  # x y, gamma beta, mean rstd


def attention_flops(bh, lq, lk, d, causal):
    full = 4.0 * bh * lq * lk * d  # Q K^T and P V, 2 Lq Lk D each
    return full / 2.0 if causal else full


def backward_flops(bh, lq, lk, d, causal):
    """FlashAttention's count for the backward: 2.5 times the forward's (five products of
    2 Lq Lk D each against the forward's two)."""
    return 2.5 * attention_flops(bh, lq, lk, d, causal)


def attention_bytes(bh, lq, lk, d, elem):
    return bh * (2.0 * lq * d + 2.0 * lk * d) * elem + bh * lq * 4.0  # Q O K V, lse


def gb_per_s(nbytes, ms):
    return nbytes / (ms * 1e-3) / 1e9 if ms > 0 else 0.0


def tflop_per_s(flops, ms):
    return flops / (ms * 1e-3) / 1e12 if ms > 0 else 0.0


def shape_string(rows, cols):
    return f"{rows}x{cols}"


def attention_shape_string(bh, lq, lk, d, causal):
    return f"bh{bh} lq{lq} lk{lk} d{d} {'causal' if causal else 'full'}"


def decode_bytes(hq, hkv, lq, lk, d, elem):
    """Decoding reads the cache: K and V of the hkv KV heads once, Q read and O written once
    (ch09's --bench)."""
    return elem * (2.0 * hkv * lk * d + 2.0 * hq * lq * d)


def decode_shape_string(batch, hq, hkv, lq, lk, d):
    return f"b{batch} hq{hq} hkv{hkv} lq{lq} lk{lk} d{d}"


def self_check():
    """The formulas against the values tests/test_bench.cpp checks on the C++ side."""
    assert layernorm_bytes(10, 7, 4) == 696.0
    assert layernorm_bytes(10, 7, 2) == 388.0
    assert attention_flops(1, 3, 5, 7, False) == 420.0
    assert attention_flops(16, 4096, 4096, 64, True) == 2.0 * 16 * 4096 * 4096 * 64
    assert backward_flops(1, 3, 5, 7, False) == 1050.0
    assert attention_bytes(2, 3, 5, 7, 2) == 472.0
    assert softmax_bytes(49152, 32768, 4) == 12884901888.0
    assert gb_per_s(1e9, 1000.0) == 1.0 and tflop_per_s(5e11, 1.0) == 500.0
    assert attention_shape_string(16, 4096, 4096, 64, True) == "bh16 lq4096 lk4096 d64 causal"


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def summarize(samples):
    s = sorted(samples)
    return statistics.median(s), s[0], s[-1]


def make_row(op, source, chapter, kernel, dtype, shape, samples, nbytes, flops, copy_gbps,
             device, date):
    median, lo, hi = summarize(samples)
    gbps = gb_per_s(nbytes, median)
    thr, unit = (tflop_per_s(flops, median), "TFLOP/s") if flops > 0 else (gbps, "GB/s")
    return {"op": op, "source": source, "chapter": chapter, "kernel": kernel, "dtype": dtype,
            "shape": shape, "median_ms": f"{median:.6g}", "min_ms": f"{lo:.6g}",
            "max_ms": f"{hi:.6g}", "reps": str(len(samples)), "throughput": f"{thr:.6g}",
            "unit": unit, "gbps": f"{gbps:.6g}",
            "fraction_of_copy": f"{gbps / copy_gbps:.4f}" if copy_gbps > 0 else "0.0000",
            "copy_gbps": f"{copy_gbps:.6g}", "device": device, "date": date}


