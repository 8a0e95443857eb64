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
#include "common/attention_inputs.hpp"
#include "common/backend.hpp"
#include "common/compare.hpp"
#include "common/dtype.hpp"
#include "common/hd.hpp"
#include "common/reference_attention.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"

namespace wb::ch09 {

/// Keys of a K/V tile of the split kernel (one lane each in its score phase); the splits cut
/// a sequence's keys at multiples of it.
inline constexpr int kTileKeys = 32;
/// Query rows of one block of the split kernel: up to 16 rows of a KV head's group.
inline constexpr int kBlockRows = 16;
/// Threads of one block of the split kernels (4 warps): the traffic formulas count what each
/// thread reads of a paged cache's table.
inline constexpr int kBlockThreads = 128;
/// The most query rows of one block of the streaming kernel (stream_kv): each lane holds its
/// columns of every row's output in registers, 16 per row in fp16.
inline constexpr int kStreamMaxRows = 4;
/// Query rows of one block of the tensor-core rung (mma_kv): one m16 tile of mma.sync, zeros
/// past a group's last row.
inline constexpr int kMmaRows = 16;
/// The 16-byte vectors of one key's row each lane of stream_kv loads (of K and of V): two, so
/// that a key takes half as many lanes and its score half as many shuffles to sum.
inline constexpr int kStreamVecs = 2;
/// The merges on a path inside one block of stream_kv before its partial is written: the
/// states of all its warps' key slots at once, eq. (4): one weight each.
inline constexpr int kStreamBlockMerges = 1;
/// The fewest K/V tiles a split should hold, eq. (7): per query row and split the partials
/// cost d + 1 floats written and read back (and the logsumexp read once more), 8 d + 12 bytes,
/// against the split's 2 x 4 x 32 x d elements of K and V: under 2 % in fp16 for one row.
inline constexpr int kMinTilesPerSplit = 4;
/// The most splits a program asks for: the grid's splits x row tiles stays an int, and the
/// partials (splits per row) stay a workspace, not a copy of the cache.
inline constexpr int kMaxSplits = 65536;

// ------------------------------------------------------------------------------------------
// The merge of partial results, shared by the CPU step and the kernels
// ------------------------------------------------------------------------------------------

// [lse_merge]
/// The merged logsumexp of two partials and the weights of their O's, eq. (2):
///   lse = hi + log(1 + e^{lo - hi}),  w_hi = 1 / (1 + e^{lo - hi}),  w_lo = e^{lo - hi} w_hi
/// with hi the larger logsumexp: one exp, every exponent <= 0, and merge(a, b), merge(b, a)
/// compute the same bits (the operands are ordered first, as chapter 03's md_merge does). An
/// operand whose lse is -inf holds no key: the other comes back exactly, weight 1, never
/// e^{-inf - (-inf)} = NaN.
struct LseMerge {
  float lse;
  float w_a;  ///< the weight of the first operand's O
  float w_b;  ///< the weight of the second's
};

__host__ __device__ inline LseMerge lse_merge(float lse_a, float lse_b) {
  const bool a_hi = lse_a >= lse_b;
  const float hi = a_hi ? lse_a : lse_b, lo = a_hi ? lse_b : lse_a;
  if (lo == -INFINITY) return {hi, a_hi ? 1.f : 0.f, a_hi ? 0.f : 1.f};  // eq. (3)
  const float e = expf(lo - hi);                                         // <= 1
  const float w_hi = 1.f / (1.f + e);
  const float w_lo = e * w_hi;
  return {hi + log1pf(e), a_hi ? w_hi : w_lo, a_hi ? w_lo : w_hi};
}
// [lse_merge]

// [combine_weight]
/// The weight e^{lse_s - lse} of a split's O in the merged row, eq. (4); 0 when the row saw
/// no key at all (lse = -inf, every lse_s = -inf too).
__host__ __device__ inline float combine_weight(float lse_s, float lse) {
  return lse == -INFINITY ? 0.f : expf(lse_s - lse);
}
// [combine_weight]

/// Query head h of a group of g reads KV head h / g, eq. (5).
__host__ __device__ inline int kv_head(int h, int group) {
  return h / group;
}

// [cache_rows]
/// Where key j of KV head kv of sequence b lies in K (and in V), as an element offset, eq. (9):
/// contiguous (batch, hkv, lk, d): ((b hkv + kv) lk + j) d; paged (pages, hkv, page_keys, d):
/// ((table[b P + j / page_keys] hkv + kv) page_keys + j % page_keys) d, P = pages per
/// sequence. A page holds whole K/V tiles of 32 keys (kPageKeyMultiple), so the rows of a tile
/// that starts at a multiple of 32 are consecutive either way: a kernel looks a tile up once.
struct CacheRows {
  const int* table;  ///< (batch, P), or nullptr: contiguous
  int page_keys, pages_per_sequence;
  int hkv, lk, d;
  __host__ __device__ std::size_t operator()(int b, int kv, int j) const {
    if (table == nullptr) return ((std::size_t(b) * hkv + kv) * lk + j) * d;
    const int page = table[std::size_t(b) * pages_per_sequence + j / page_keys];
    return ((std::size_t(page) * hkv + kv) * page_keys + j % page_keys) * d;
  }
};
// [cache_rows]
static_assert(kTileKeys == kPageKeyMultiple, "a page holds whole K/V tiles");

/// The contiguous cache of `shape`, and a paged one through `table` (pages of page_keys keys).
inline CacheRows contiguous_rows(const DecodeShape& shape) {
  return {nullptr, 1, 0, shape.hkv, shape.lk, shape.d};
}
inline CacheRows paged_rows(const int* table, int page_keys, const DecodeShape& shape) {
  return {table, page_keys, pages_per_sequence(shape.lk, page_keys), shape.hkv, shape.lk, shape.d};
}

/// The cache of `a` as its kernels address it (the device's table).
inline CacheRows cache_rows(const DecodeArgs& a) {
  return a.block_table == nullptr ? contiguous_rows(a.shape)
                                  : paged_rows(a.block_table, a.page_keys, a.shape);
}

/// A paged copy of a contiguous cache (DecodeArgs::block_table): K and V as
/// (pages, hkv, page_keys, d) and the table, (batch, pages per sequence).
struct PagedCache {
  std::vector<float> k, v;
  std::vector<int> table;
  int page_keys = 0;
  int pages = 0;
};

/// Pages of `page_keys` keys for every sequence, taken from a pool of batch x P + `spare`
/// pages in a random order (the seed's), as an allocator hands them out. The slots no key
/// fills (past lk in a sequence's last page, the spare pages) hold NaN: a kernel that reads
/// one where it should not gets a NaN in its output.
PagedCache page_cache(const AttentionInputs& in, const DecodeShape& shape, int page_keys, int spare,
                      std::uint64_t seed);

/// Points `a`, whose k and v hold `paged`'s pool, at its table (`device_table`, the table on
/// a's backend).
inline void use_paged_cache(DecodeArgs& a, const PagedCache& paged, const int* device_table) {
  a.block_table = device_table;
  a.block_table_host = paged.table.data();
  a.page_keys = paged.page_keys;
  a.pages = paged.pages;
}

/// The contiguous cache back from a paged one, eq. (9) on the CPU: in's q with the paged K, V
/// gathered into (batch, hkv, lk, d).
AttentionInputs unpage_cache(const AttentionInputs& in, const PagedCache& paged,
                             const DecodeShape& shape);

// ------------------------------------------------------------------------------------------
// CPU step: split-KV attention, any split, any merge order
// ------------------------------------------------------------------------------------------

/// A row's partial result over a range of keys, eq. (1): O normalized by its own
/// denominator, and the logsumexp that remembers that denominator.
struct Partial {
  float lse = -INFINITY;
  std::vector<float> o;  ///< d values; zeros for the identity
};

/// The identity of the merge, eq. (3): a range with no visible key.
inline Partial identity_partial(int d) {
  return {-INFINITY, std::vector<float>(std::size_t(d), 0.f)};
}

// [merge_partials]
/// merge(a, b), eq. (2).
inline Partial merge_partials(const Partial& a, const Partial& b) {
  const LseMerge w = lse_merge(a.lse, b.lse);
  Partial out{w.lse, std::vector<float>(a.o.size())};
  for (std::size_t c = 0; c < a.o.size(); ++c) out.o[c] = w.w_a * a.o[c] + w.w_b * b.o[c];
  return out;
}
// [merge_partials]

/// All of a row's partials at once, eq. (4): what the combine kernel computes.
inline Partial combine_partials(const std::vector<Partial>& parts, int d) {
  float m = -INFINITY;
  for (const Partial& p : parts) m = std::max(m, p.lse);
  Partial out = identity_partial(d);
  if (m == -INFINITY) return out;  // no split saw a key
  float sum = 0.f;
  for (const Partial& p : parts) sum += std::exp(p.lse - m);
  out.lse = m + std::log(sum);
  for (const Partial& p : parts) {
    const float w = combine_weight(p.lse, out.lse);
    for (int c = 0; c < d; ++c) out.o[std::size_t(c)] += w * p.o[std::size_t(c)];
  }
  return out;
}

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

/// The fp64 reference (common/reference_attention.hpp) of every sequence, stitched together.
struct DecodeReference {
  std::vector<double> o;         ///< (batch, hq, lq, d)
  std::vector<double> o_weight;  ///< (batch, hq, lq, d): sum_j p_j |v_j|, O's error unit
  std::vector<double> lse;       ///< (batch, hq, lq)
  double score_error = 0.0;      ///< the largest of the sequences' score error bounds
  double max_abs_lse = 0.0;      ///< the largest |logsumexp| of a row that sees a key
  /// A bound on any partial's |logsumexp_s|: between the range's largest score and that plus
  /// log(keys), so at most max |score| + log(lk), and at most max_abs_lse.
  double max_abs_partial_lse = 0.0;
};

inline DecodeReference decode_reference(const AttentionInputs& in, const DecodeShape& shape,
                                        const std::vector<int>& lengths, DecodeOptions opt) {
  DecodeReference r{std::vector<double>(shape.q_elems(), 0.0),
                    std::vector<double>(shape.q_elems(), 0.0),
                    std::vector<double>(shape.rows(), -INFINITY)};
  for_each_sequence(
      in, shape, lengths, [&](int b, int, const AttentionInputs& seq, AttentionShape s) {
        const ref::Attention a = ref::attention(seq, s, opt.scale, opt.causal, false);
        const auto at = std::ptrdiff_t(std::size_t(b) * a.o.size());
        std::copy(a.o.begin(), a.o.end(), r.o.begin() + at);
        std::copy(a.o_weight.begin(), a.o_weight.end(), r.o_weight.begin() + at);
        std::copy(a.lse.begin(), a.lse.end(),
                  r.lse.begin() + std::ptrdiff_t(std::size_t(b) * a.lse.size()));
        r.score_error = std::max(r.score_error, a.score_error);
        r.max_abs_lse = std::max(r.max_abs_lse, a.max_abs_lse);
        double max_abs_score = 0.0;  // over the keys a row sees, eq. (6)
        for (int row = 0; row < s.bh * s.lq; ++row)
          for (int j = 0; j < s.lk; ++j) {
            if (opt.causal && !ch04::causal_visible(row % s.lq, j, s.lq, s.lk)) continue;
            double dot = 0.0;
            for (int t = 0; t < s.d; ++t)
              dot += double(seq.q[std::size_t(row) * s.d + t]) *
                     seq.k[(std::size_t(row / s.lq) * s.lk + j) * s.d + t];
            max_abs_score = std::max(max_abs_score, std::fabs(opt.scale * dot));
          }
        r.max_abs_partial_lse = std::max(
            {r.max_abs_partial_lse, a.max_abs_lse, max_abs_score + std::log(double(s.lk))});
      });
  return r;
}

/// The stated floor of split-KV attention's O against fp64, in units of o_weight, for
/// `splits` partials merged along paths of at most `depth` merges (a tree: up to splits - 1;
/// eq. (4) on the CPU: 1; the combine kernel: combine_depth). Chapter 06's output_floor for the
/// partials themselves (each in units of its own range's weights, which the merge weights turn
/// into the row's); then the weights e^{lse_s - lse}: their relative error is the absolute
/// error of lse_s - lse, that is lse_floor for the partial's logsumexp and as much for the
/// merged one (both up to `max_abs_partial_lse` in size); each merge on a path rounds
/// lo - hi (up to kExpArgRange where the weight is not negligible), an exp, a log1p, the add to
/// hi (|lse| u) and the O update (two products and a sum): (2 A + 2 x 88 + 16) u; and a sum of
/// up to `splits` weighted terms, splits u.
inline double split_floor(double score_error, int lk, double max_abs_partial_lse, int depth,
                          int splits) {
  const double a = max_abs_partial_lse;
  return ref::output_floor(score_error, lk) + 2.0 * ref::lse_floor(score_error, lk, a) +
         (double(depth) * (2.0 * a + 2.0 * ref::kExpArgRange + 16.0) + double(splits)) * kFloatEps;
}

/// The merges on a path of the combine kernel: each lane merges its ceil(splits / 32) splits in
/// turn, then 5 butterfly exchanges; its weights are one exp each.
inline int combine_depth(int splits) {
  return (splits + 31) / 32 + 5;
}

/// The stated floor of split-KV attention's logsumexp against fp64 (absolute): chapter 06's
/// lse_floor for a partial, then each of up to `depth` merges on a path rounding lo - hi, an
/// exp, a log and the add, (A + 88 + 8) u, and a sum of up to `splits` terms, splits u.
inline double split_lse_floor(double score_error, int lk, double max_abs_partial_lse, int depth,
                              int splits) {
  const double a = max_abs_partial_lse;
  return ref::lse_floor(score_error, lk, a) +
         (double(depth) * (a + ref::kExpArgRange + 8.0) + double(splits)) * kFloatEps;
}

// ------------------------------------------------------------------------------------------
// The number of splits, eq. (7)
// ------------------------------------------------------------------------------------------

// [choose_splits]
/// How many key ranges each (KV head, row tile) gets. `base_blocks` blocks exist without a
/// split (batch x hkv x row tiles); `sms` x `blocks_per_sm` run at once. Splitting multiplies
/// the blocks: take as many splits as still fit in that one wave (floor, so that no second,
/// nearly empty wave follows), but no more than leave kMinTilesPerSplit tiles to each split of
/// the longest sequence, and at least 1.
inline int choose_splits(int sms, int blocks_per_sm, long base_blocks, int lk) {
  const long wave = long(sms) * blocks_per_sm;
  const long fill = wave / std::max(1L, base_blocks);
  const int tiles = (lk + kTileKeys - 1) / kTileKeys;
  const long by_tiles = (tiles + kMinTilesPerSplit - 1) / kMinTilesPerSplit;
  return int(std::max(1L, std::min(fill, by_tiles)));
}
// [choose_splits]

/// Query rows of one block of the streaming kernel for `s`: the group's g lq rows rounded up to
/// a power of two, at most kStreamMaxRows (its register arrays are sized by it at compile time).
__host__ __device__ inline int stream_rows(int group_rows) {
  int r = 1;
  while (r < group_rows && r < kStreamMaxRows) r *= 2;
  return r;
}

/// Lanes that share one key in the streaming kernel: each loads kStreamVecs vectors of
/// `width` elements of the key's row, so ceil(d / (kStreamVecs width)) of them, rounded up to a
/// power of two that divides the warp; the warp holds 32 / key_lanes keys at once.
__host__ __device__ inline int stream_key_lanes(int d, int width) {
  int lanes = 1;
  while (lanes * kStreamVecs * width < d) lanes *= 2;
  return lanes;
}

/// Blocks of a split kernel per split: batch x hkv x ceil(g lq / block_rows), block_rows the
/// query rows of one block (the last rung's by default).
inline long base_blocks(const DecodeShape& s, int block_rows) {
  return long(s.batch) * s.hkv * ((long(s.group()) * s.lq + block_rows - 1) / block_rows);
}
inline long base_blocks(const DecodeShape& s) {
  return base_blocks(s, stream_rows(s.group() * s.lq));
}

// ------------------------------------------------------------------------------------------
// Kernel ladder (launchers in decode_kernels.cuh)
// ------------------------------------------------------------------------------------------

/// The SMs of a device and how many blocks of a kernel each runs at once.
struct Wave {
  int sms;
  int blocks_per_sm;
};

/// The launchers of the ladder's rungs. Of `a`: q (batch, hq, lq, d), k, v (batch, hkv, lk, d)
/// of a.dtype; lengths (batch) ints or nullptr; o of a.dtype and lse float, (batch, hq, lq);
/// the partial buffers of a.splits splits; device pointers of backend B.
template <Backend B>
struct Kernels {
  /// One block per (KV head, row tile) walks its sequence's whole cache: chapter 06's loop,
  /// with the group's query rows sharing each K/V tile. Writes o and lse.
  static void one_split(const DecodeArgs& a);
  /// a.splits blocks per (KV head, 16 group rows), each over its range of keys through shared
  /// tiles, writing the partials (decode_kernels.cuh).
  static void split_partials(const DecodeArgs& a);
  /// a.splits blocks per (KV head, up to 4 group rows), each warp streaming its own keys of the
  /// block's range into registers, writing the partials (stream_kernel.cuh).
  static void stream_partials(const DecodeArgs& a);
  /// a.splits blocks per (KV head, 16 group rows) on tensor cores, the 4 warps splitting each
  /// K/V tile's keys, writing the partials (mma_kernel.cuh). fp16 or bf16, d = 64 or 128.
  static void mma_partials(const DecodeArgs& a);
  /// The combine kernel: merges each row's partials into o and lse, eq. (4).
  static void combine(const DecodeArgs& a);
  /// Where the streaming kernel's blocks for `shape` and `dtype` run at once: this backend's
  /// device (sim: an H100, common/kernel.cuh's residency, registers not counted).
  static Wave stream_wave(const DecodeShape& shape, Dtype dtype);

  /// The split kernel's partials, then the combine.
  static void split_kv(const DecodeArgs& a) {
    split_partials(a);
    combine(a);
  }
  /// The streaming kernel's partials, then the combine.
  static void stream_kv(const DecodeArgs& a) {
    stream_partials(a);
    combine(a);
  }
  /// The tensor-core kernel's partials, then the combine.
  static void mma_kv(const DecodeArgs& a) {
    mma_partials(a);
    combine(a);
  }
};

/// The split count eq. (7) gives for `shape` in `dtype` on backend B's device: the wave of
/// the ladder's last rung, stream_kv (the other split rung takes the same count).
template <Backend B>
int default_splits(const DecodeShape& shape, Dtype dtype) {
  const Wave w = Kernels<B>::stream_wave(shape, dtype);
  return choose_splits(w.sms, w.blocks_per_sm, base_blocks(shape), shape.lk);
}

/// The entries of a paged cache's block table (ints) one block of a split kernel reads: per
/// K/V tile of 32 keys its range holds, and per key. Every thread that loads a key's row
/// looks its page up itself (eq. 9), so a lookup is a read by each of those threads.
struct TableReads {
  int per_tile = 0, per_key = 0;
};

/// The traffic of a split kernel (flash_decoding.cpp) with `splits` splits (writing partials)
/// or, for splits = 0, of one_split (writing O and logsumexp), per block of up to `block_rows`
/// group rows of a KV head: its Q rows once; K and V once per key of its range it loads
/// (block_keys: its tiles, cut at the causal mask); its rows of O (floats, or the element type)
/// and logsumexp once; the sequence's length (one int) once when a.lengths is given; on a
/// paged cache (a.block_table), `table`'s entries. Reads a.lengths_host.
Traffic split_traffic(const DecodeArgs& a, int splits, int block_rows, TableReads table);

/// The combine kernel: per row, the splits' logsumexps (every lane of its warp reads them, one
/// request each: 4 bytes), each split's O row once, O (element type) and logsumexp written.
Traffic combine_traffic(const DecodeArgs& a);

/// one_split's and split_kv's table reads: every thread looks up each K/V tile once.
inline constexpr TableReads kTileLookups{kBlockThreads, 0};

/// one_split's traffic: split_traffic with one split of 16-row blocks writing O and logsumexp.
inline Traffic one_split_traffic(const DecodeArgs& a) {
  return split_traffic(a, 0, kBlockRows, kTileLookups);
}

/// split_kv's traffic: the split kernel at a.splits splits, then the combine.
Traffic split_kv_traffic(const DecodeArgs& a);

/// stream_kv's traffic: the streaming kernel (blocks of stream_rows group rows) at a.splits
/// splits, a lane looking a key's page up for each 16-byte vector of its K row it loads (and
/// the V vector beside it), then the combine.
Traffic stream_kv_traffic(const DecodeArgs& a);

/// mma_kv's traffic: the tensor-core kernel at a.splits splits (blocks of kMmaRows group rows,
/// each reading its Q rows and its range's keys once, as split_kv's blocks of 16; every thread
/// looks up each 32 keys twice, for K and for V), then the combine.
Traffic mma_kv_traffic(const DecodeArgs& a);

/// The rungs' limits: any head dimension up to 128 (the lanes' output columns), fp32 and the
/// 16-bit types (widened on load), the causal mask, batch x hkv <= 65535 (grid.y).
inline RungLimits decode_limits(unsigned outputs) {
  return attention_limits({Dtype::fp32, Dtype::fp16, Dtype::bf16}, ch04::kMaxHeadDim, {},
                          ch04::kMaxBatchHeads, /*causal=*/true, outputs);
}

/// stream_kv's limits: decode_limits with d a multiple of 8, so that every K and V row starts
/// on a 16-byte boundary (a row is whole 16-byte vectors of fp16 or bf16; of fp32 when d is a
/// multiple of 4, 8 taken for all three types alike).
inline RungLimits stream_limits(unsigned outputs) {
  RungLimits l = decode_limits(outputs);
  for (int d = 8; d <= ch04::kMaxHeadDim; d += 8) l.head_dims.push_back(d);
  return l;
}

/// The ladder in order, each rung one idea better than the one before.
/// one_split's facts: its single range of keys per sequence, whatever the split count.
inline RungFacts one_split_facts() {
  RungFacts f;
  f.one_range = true;
  return f;
}

/// The facts of a rung whose blocks merge states (a key slot's, stream_kv; a warp's, mma_kv)
/// before writing their partial, kStreamBlockMerges merges on a path; with `rounds_p`, P~ is
/// rounded to the 16-bit type for P~ V (tensor cores).
inline RungFacts block_merge_facts(bool rounds_p) {
  RungFacts f;
  f.block_merges = kStreamBlockMerges;
  f.rounds_p = rounds_p;
  return f;
}

template <Backend B>
Ladder<DecodeArgs> kernel_ladder() {
  const unsigned partials = kWritesO | kWritesLse | kWritesPartials;
  return {{"one_split",
           "chapter 06's loop for decoding: one block per (KV head, 16 group rows) walks the "
           "whole cache; the query heads of a group share each K/V tile",
           decode_limits(kWritesO | kWritesLse), &Kernels<B>::one_split, &one_split_traffic,
           one_split_facts()},
          {"split_kv",
           "the keys split across blocks too: a partial (O, logsumexp) per range, merged by a "
           "combine kernel with chapter 03's monoid",
           decode_limits(partials), &Kernels<B>::split_kv, &split_kv_traffic},
          {"stream_kv",
           "each warp streams its own keys from global memory into registers, 16-byte loads "
           "several keys deep, no shared tiles or barriers in the loop; lanes and warps merge "
           "by the same monoid",
           stream_limits(partials), &Kernels<B>::stream_kv, &stream_kv_traffic,
           block_merge_facts(/*rounds_p=*/false)},
          {"mma_kv",
           "a block's 16 group rows on tensor cores: mma.sync m16n8k16 over K/V tiles that "
           "cp.async double-buffers (chapter 08's pieces), the 4 warps splitting each tile's "
           "keys and merging by the monoid",
           attention_limits({Dtype::fp16, Dtype::bf16}, 0, {64, 128}, ch04::kMaxBatchHeads,
                            /*causal=*/true, partials),
           &Kernels<B>::mma_kv, &mma_kv_traffic, block_merge_facts(/*rounds_p=*/true)}};
}

}  // namespace wb::ch09
