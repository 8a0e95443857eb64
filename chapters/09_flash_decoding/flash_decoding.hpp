// Chapter 09: Flash-Decoding. A handful of query rows against a long KV cache: the keys are
// split into ranges, each range gives a partial result, and the partials are merged by
// chapter 03's monoid carried from (m, d) to (logsumexp, O). See flash_decoding.md.
//
// partial over a key range R:  lse_R = log sum_{j in R} e^{x_j},
//                              O_R = sum_{j in R} e^{x_j - lse_R} v_j                 eq. (1)
// merge: lse = log(e^{lse_a} + e^{lse_b}),  O = e^{lse_a - lse} O_a + e^{lse_b - lse} O_b
//                                                                                      eq. (2)
// identity: (lse, O) = (-inf, 0); associative and commutative: (e^lse, e^lse O) add  eq. (3)
// S partials at once: lse = M + log sum_s e^{lse_s - M}, M = max_s lse_s,
//                     O = sum_s e^{lse_s - lse} O_s                                    eq. (4)
// query head h reads KV head h / g, g = hq / hkv (grouped-query attention)            eq. (5)
// causal, per sequence of len keys: row i sees key j iff j <= i + (len - lq)          eq. (6)
// splits = max(1, min(floor(sms x blocks_per_sm / base_blocks), ceil(tiles / 4)))     eq. (7)
// paged cache: key j of sequence b in page table[b][j / page_keys], slot j % page_keys  eq. (9)
//
// This header is the CPU step; the chapter's other headers each do one job: the merge
// (lse_merge.hpp), the cache's layout (paged_cache.hpp), the kernels' shapes and split count
// (decode_plan.hpp), the fp64 reference and error floors (decode_reference.hpp), the kernel
// ladder's shared declarations (decode_ladder.hpp; a rung per file of rungs/).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/03_block_merge/block_merge.hpp"
#include "chapters/04_fused_qk_softmax/fused_softmax.hpp"
#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "chapters/09_flash_decoding/decode_plan.hpp"
#include "chapters/09_flash_decoding/lse_merge.hpp"
#include "chapters/09_flash_decoding/paged_cache.hpp"
#include "common/attention_inputs.hpp"
#include "common/compare.hpp"
#include "common/dtype.hpp"
#include "common/hd.hpp"
#include "common/rung_args.hpp"

namespace wb::ch09 {

/// The partial of one query row over keys [j0, j1) of its head, eq. (1), in float: the
/// scores, their max, the denominator and the weighted sum of V. Keys j > last_visible are
/// masked (the causal mask, eq. 6). q_row: d values; k, v: the head's keys, (lk, d).
inline Partial partial_attention(const float* q_row, const float* k, const float* v, int d, int j0,
                                 int j1, int last_visible, float scale) {
  j1 = std::min(j1, last_visible + 1);
  if (j1 <= j0) return identity_partial(d);
  std::vector<float> s(std::size_t(j1 - j0));
  float m = -INFINITY;
  for (int j = j0; j < j1; ++j) {
    float dot = 0.f;
    for (int t = 0; t < d; ++t) dot += q_row[t] * k[std::size_t(j) * d + t];
    s[std::size_t(j - j0)] = scale * dot;
    m = std::max(m, scale * dot);
  }
  Partial out = identity_partial(d);
  float l = 0.f;
  for (int j = j0; j < j1; ++j) {
    const float p = std::exp(s[std::size_t(j - j0)] - m);
    l += p;
    for (int t = 0; t < d; ++t) out.o[std::size_t(t)] += p * v[std::size_t(j) * d + t];
  }
  for (float& x : out.o) x /= l;
  out.lse = m + std::log(l);
  return out;
}

/// Where a sequence of `length` keys is cut: boundaries 0 = b_0 <= b_1 <= ... <= b_S = length
/// (a range may be empty).
using SplitRule = std::function<std::vector<int>(int length)>;

// [even_splits]
/// The kernels' split: the ceil(length / 32) K/V tiles of a sequence dealt out in runs of
/// ceil(tiles / splits), split s starting at key s x run x 32 (clamped to the length): the last
/// runs short or empty.
__host__ __device__ inline int split_begin(int length, int splits, int s) {
  const int tiles = (length + kTileKeys - 1) / kTileKeys;
  const long run = (long(tiles) + splits - 1) / splits;
  const long begin = long(s) * run * kTileKeys;
  return begin < length ? int(begin) : length;
}

inline std::vector<int> even_splits(int length, int splits) {
  std::vector<int> bounds(std::size_t(splits) + 1);
  for (int s = 0; s <= splits; ++s) bounds[std::size_t(s)] = split_begin(length, splits, s);
  return bounds;
}
// [even_splits]

/// The keys [j0, j1) a block of the split kernel loads: split s of a sequence of `length`
/// keys, cut after the K/V tile holding the last key its rows see under the causal mask:
/// eq. (6) for its largest row index i_max (rows of the group are (head, i), i = row % lq).
struct KeyRange {
  int j0, j1;
};
__host__ __device__ inline KeyRange block_keys(int length, int splits, int s, int r0, int rows,
                                               int lq, bool causal) {
  KeyRange k{split_begin(length, splits, s), split_begin(length, splits, s + 1)};
  if (causal) {
    const int i_first = r0 % lq;
    const int i_max = i_first + rows - 1 >= lq ? lq - 1 : i_first + rows - 1;
    const int last_key = i_max + (length - lq);  // eq. (6)
    const int tiles = last_key < k.j0 ? 0 : (last_key - k.j0) / kTileKeys + 1;
    if (k.j0 + tiles * kTileKeys < k.j1) k.j1 = k.j0 + tiles * kTileKeys;
  }
  return k;
}

/// The grid of the split kernels (split_kernel.cuh, rungs/3_stream_kv.cuh, rungs/4_mma_kv.cuh),
/// `splits` x row_tiles by batch x hkv blocks of R group rows each: block (x, y) takes split
/// x / row_tiles and the group rows [R (x % row_tiles), + R) of KV head y % hkv of sequence
/// y / hkv.
struct SplitGrid {
  DecodeShape shape;
  int splits;
  int row_tiles;  ///< ceil(g lq / R)
};

/// The grid for blocks of `block_rows` group rows.
inline SplitGrid split_grid(const DecodeShape& shape, int splits, int block_rows) {
  return {shape, splits, (shape.group() * shape.lq + block_rows - 1) / block_rows};
}

/// `splits` ranges cut at random points (any length, empty ones included), for the laws.
inline std::vector<int> random_splits(int length, int splits, std::mt19937_64& rng) {
  std::vector<int> bounds = {0, length};
  for (int s = 1; s < splits; ++s) bounds.push_back(int(rng() % std::uint64_t(length + 1)));
  std::sort(bounds.begin(), bounds.end());
  return bounds;
}

struct DecodeOptions {
  float scale;  ///< the softmax scale, usually default_scale(d)
  bool causal;  ///< eq. (6) per sequence
};

struct DecodeResult {
  std::vector<float> o;    ///< (batch, hq, lq, d)
  std::vector<float> lse;  ///< (batch, hq, lq)
};

/// How a row's partials are merged: by a tree of merge_partials (any order, any shape), or
/// all at once by eq. (4) when `tree` is null. `merge` is merge_partials unless a test plants
/// a broken one.
struct MergePlan {
  const ch03::MergeTree* tree = nullptr;
  std::function<Partial(const Partial&, const Partial&)> merge = merge_partials;
};

// [split_kv_cpu]
/// Split-KV attention: every query row's visible keys cut by `split` (applied to its
/// sequence's length), a partial per range, the partials merged by `plan`.
/// q: (batch, hq, lq, d); k, v: (batch, hkv, lk, d); lengths: (batch) in [0, lk], or empty
/// for all lk. The tree's leaves are the ranges, so every split must give it as many.
inline DecodeResult attention_split_kv(const AttentionInputs& in, const DecodeShape& shape,
                                       const std::vector<int>& lengths, DecodeOptions opt,
                                       const SplitRule& split, const MergePlan& plan = {}) {
  const int d = shape.d, g = shape.group();
  DecodeResult out{std::vector<float>(shape.q_elems()), std::vector<float>(shape.rows())};
  for (int b = 0; b < shape.batch; ++b) {
    const int len = lengths.empty() ? shape.lk : lengths[std::size_t(b)];
    const std::vector<int> bounds = split(len);
    for (int h = 0; h < shape.hq; ++h) {
      const std::size_t kv0 = (std::size_t(b) * shape.hkv + kv_head(h, g)) * shape.lk * d;
      for (int i = 0; i < shape.lq; ++i) {
        const std::size_t row = (std::size_t(b) * shape.hq + h) * shape.lq + i;
        const int last_visible = opt.causal ? i + (len - shape.lq) : len - 1;  // eq. (6)
        std::vector<Partial> parts;
        for (std::size_t s = 0; s + 1 < bounds.size(); ++s)
          parts.push_back(partial_attention(in.q.data() + row * d, in.k.data() + kv0,
                                            in.v.data() + kv0, d, bounds[s], bounds[s + 1],
                                            last_visible, opt.scale));
        const Partial r = plan.tree != nullptr ? ch03::reduce_tree(*plan.tree, parts, plan.merge,
                                                                   identity_partial(d))
                                               : combine_partials(parts, d);
        std::copy(r.o.begin(), r.o.end(), out.o.begin() + std::ptrdiff_t(row * d));
        out.lse[row] = r.lse;
      }
    }
  }
  return out;
}
// [split_kv_cpu]

// ------------------------------------------------------------------------------------------
// One sequence as chapter 06's attention: the previous step and the fp64 reference
// ------------------------------------------------------------------------------------------

/// Sequence b's queries and its first `len` keys as chapter 06's attention inputs, every query
/// head with its own copy of its KV head (eq. 5): Q (hq, lq, d), K, V (hq, len, d).
inline AttentionInputs sequence_inputs(const AttentionInputs& in, const DecodeShape& shape, int b,
                                       int len) {
  const std::size_t d = std::size_t(shape.d), q_rows = std::size_t(shape.hq) * shape.lq;
  AttentionInputs out;
  const auto q0 = in.q.begin() + std::ptrdiff_t(std::size_t(b) * q_rows * d);
  out.q.assign(q0, q0 + std::ptrdiff_t(q_rows * d));
  for (int h = 0; h < shape.hq; ++h) {
    const std::size_t kv0 = (std::size_t(b) * shape.hkv + kv_head(h, shape.group())) * shape.lk * d;
    const auto n = std::ptrdiff_t(std::size_t(len) * d);
    out.k.insert(out.k.end(), in.k.begin() + std::ptrdiff_t(kv0),
                 in.k.begin() + std::ptrdiff_t(kv0) + n);
    out.v.insert(out.v.end(), in.v.begin() + std::ptrdiff_t(kv0),
                 in.v.begin() + std::ptrdiff_t(kv0) + n);
  }
  return out;
}

/// Calls f(b, len, inputs, shape) for every sequence with at least one key, its inputs as
/// chapter 06's attention (sequence_inputs). A sequence of no keys has no such attention: every
/// row is fully masked (O = 0, logsumexp = -inf), which the callers fill in.
template <typename F>
void for_each_sequence(const AttentionInputs& in, const DecodeShape& shape,
                       const std::vector<int>& lengths, F&& f) {
  for (int b = 0; b < shape.batch; ++b) {
    const int len = lengths.empty() ? shape.lk : lengths[std::size_t(b)];
    if (len > 0)
      f(b, len, sequence_inputs(in, shape, b, len),
        AttentionShape{shape.hq, shape.lq, len, shape.d});
  }
}

/// The previous step: chapter 06's tiled FA2 on each sequence, with its kernel's tiles.
inline DecodeResult attention_fa2_per_sequence(const AttentionInputs& in, const DecodeShape& shape,
                                               const std::vector<int>& lengths, DecodeOptions opt) {
  DecodeResult out{std::vector<float>(shape.q_elems(), 0.f),
                   std::vector<float>(shape.rows(), -INFINITY)};
  for_each_sequence(in, shape, lengths,
                    [&](int b, int, const AttentionInputs& seq, AttentionShape s) {
                      const ch06::Fa2Result r = ch06::attention_fa2(
                          seq, s, {opt.scale, opt.causal, ch06::kKernelRows, ch06::kKernelKeys});
                      std::copy(r.o.begin(), r.o.end(),
                                out.o.begin() + std::ptrdiff_t(std::size_t(b) * r.o.size()));
                      std::copy(r.lse.begin(), r.lse.end(),
                                out.lse.begin() + std::ptrdiff_t(std::size_t(b) * r.lse.size()));
                    });
  return out;
}

}  // namespace wb::ch09
