// Chapter 09: the paged cache's copies (eq. 9), and the traffic formulas of the split,
// streaming and combine kernels (split_kernel.cuh, rungs/3_stream_kv.cuh, combine_kernel.cuh),
// which the profile suite holds against the simulator's counts.
#include "chapters/09_flash_decoding/decode_ladder.hpp"
#include "chapters/09_flash_decoding/flash_decoding.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>

namespace wb::ch09 {
namespace {

/// The keys sequence b uses, as the kernels clamp them.
int length_of(const DecodeArgs& a, int b) {
  if (a.lengths_host == nullptr) return a.shape.lk;
  return std::max(0, std::min(a.lengths_host[b], a.shape.lk));
}

/// Whether query row i (of a sequence of `len` keys) sees a key of `keys`, eq. (6): then its
/// l > 0 and the split's O row is written and read back.
bool sees_a_key(KeyRange keys, int i, int len, const DecodeShape& s, bool causal) {
  return keys.j1 > keys.j0 && (!causal || keys.j0 <= i + (len - s.lq));
}

/// Every key's row of K and V (k_from, v_from) from layout `from` (eq. 9) into k, v in layout
/// `to`.
void copy_keys(const DecodeShape& shape, const CacheRows& from, const std::vector<float>& k_from,
               const std::vector<float>& v_from, const CacheRows& to, std::vector<float>& k,
               std::vector<float>& v) {
  for (int b = 0; b < shape.batch; ++b)
    for (int kv = 0; kv < shape.hkv; ++kv)
      for (int j = 0; j < shape.lk; ++j) {
        const auto f = std::ptrdiff_t(from(b, kv, j)), t = std::ptrdiff_t(to(b, kv, j));
        std::copy(k_from.begin() + f, k_from.begin() + f + shape.d, k.begin() + t);
        std::copy(v_from.begin() + f, v_from.begin() + f + shape.d, v.begin() + t);
      }
}

}  // namespace

PagedCache page_cache(const AttentionInputs& in, const DecodeShape& shape, int page_keys, int spare,
                      std::uint64_t seed) {
  const int per_sequence = pages_per_sequence(shape.lk, page_keys);
  PagedCache p;
  p.page_keys = page_keys;
  p.pages = shape.batch * per_sequence + spare;
  std::vector<int> pool(std::size_t(p.pages));
  std::iota(pool.begin(), pool.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(pool.begin(), pool.end(), rng);
  p.table.assign(pool.begin(), pool.begin() + std::ptrdiff_t(shape.batch) * per_sequence);
  const std::size_t elems = std::size_t(p.pages) * shape.hkv * std::size_t(page_keys) * shape.d;
  p.k.assign(elems, NAN);
  p.v.assign(elems, NAN);
  copy_keys(shape, contiguous_rows(shape), in.k, in.v, paged_rows(p.table.data(), page_keys, shape),
            p.k, p.v);
  return p;
}

AttentionInputs unpage_cache(const AttentionInputs& in, const PagedCache& paged,
                             const DecodeShape& shape) {
  AttentionInputs out{in.q, std::vector<float>(shape.kv_elems()),
                      std::vector<float>(shape.kv_elems())};
  copy_keys(shape, paged_rows(paged.table.data(), paged.page_keys, shape), paged.k, paged.v,
            contiguous_rows(shape), out.k, out.v);
  return out;
}

namespace {

/// `table`'s reads in words, e.g. "128 times per 32 keys".
std::string lookups(const TableReads& table) {
  std::string words;
  if (table.per_tile > 0) words = std::to_string(table.per_tile) + " times per 32 keys";
  if (table.per_key > 0)
    words += (words.empty() ? "" : " and ") + std::to_string(table.per_key) + " times per key";
  return words;
}

}  // namespace

Traffic split_traffic(const DecodeArgs& a, int splits, int block_rows, TableReads table) {
  const DecodeShape& s = a.shape;
  const bool partial = splits > 0;
  const int n_splits = partial ? splits : 1;
  const std::uint64_t e = dtype_bytes(a.dtype), d = std::uint64_t(s.d);
  const int group_rows = s.group() * s.lq;
  Traffic t{0, 0, ""};
  for (int b = 0; b < s.batch; ++b) {
    const int len = length_of(a, b);
    for (int r0 = 0; r0 < group_rows; r0 += block_rows) {
      const int rows = std::min(block_rows, group_rows - r0);
      for (int sp = 0; sp < n_splits; ++sp) {
        const KeyRange keys = block_keys(len, n_splits, sp, r0, rows, s.lq, a.causal);
        const std::uint64_t n_keys = std::uint64_t(keys.j1 - keys.j0);
        std::uint64_t loaded = rows * d * e + 2 * n_keys * d * e;
        if (a.lengths != nullptr) loaded += sizeof(int);
        if (a.block_table != nullptr) {  // keys.j0 is a tile's first key: whole tiles and one short
          const std::uint64_t tiles = (n_keys + kTileKeys - 1) / kTileKeys;
          loaded += sizeof(int) *
                    (tiles * std::uint64_t(table.per_tile) + n_keys * std::uint64_t(table.per_key));
        }
        std::uint64_t stored = rows * sizeof(float);  // logsumexp
        for (int r = r0; r < r0 + rows; ++r)
          if (!partial || sees_a_key(keys, r % s.lq, len, s, a.causal))
            stored += d * (partial ? sizeof(float) : e);
        t.loaded += loaded * std::uint64_t(s.hkv);  // every KV head of the sequence alike
        t.stored += stored * std::uint64_t(s.hkv);
      }
    }
  }
  t.formula = "per block (KV head, " + std::to_string(block_rows) + " group rows" +
              (partial ? ", split" : "") +
              "): its Q rows once, K and V once per key of its range (" +
              (a.causal ? "up to the tile of its last row's last visible key" : "all") + "), " +
              (partial ? "a float O row where the split saw a key" : "its O rows") +
              " and logsumexp written" + (a.lengths != nullptr ? ", its length read once" : "") +
              (a.block_table == nullptr ? "" : ", the block table read " + lookups(table));
  return t;
}

Traffic combine_traffic(const DecodeArgs& a) {
  const DecodeShape& s = a.shape;
  const std::uint64_t d = std::uint64_t(s.d);
  Traffic t{0, 0, ""};
  for (int b = 0; b < s.batch; ++b) {
    const int len = length_of(a, b);
    for (int i = 0; i < s.lq; ++i) {
      std::uint64_t o_rows = 0;  // the splits this row saw a key in
      for (int sp = 0; sp < a.splits; ++sp) {
        const KeyRange keys{split_begin(len, a.splits, sp), split_begin(len, a.splits, sp + 1)};
        o_rows += sees_a_key(keys, i, len, s, a.causal);
      }
      const std::uint64_t heads = std::uint64_t(s.hq);  // every head of the sequence alike
      t.loaded +=
          heads * (2 * std::uint64_t(a.splits) * sizeof(float) + o_rows * d * sizeof(float));
      t.stored += heads * (d * dtype_bytes(a.dtype) + sizeof(float));
    }
  }
  t.formula =
      "per row: every split's logsumexp twice, the O row of each split that saw a key "
      "once; O and logsumexp written";
  return t;
}

namespace {

/// A split kernel's traffic, then the combine's.
Traffic with_combine(const DecodeArgs& a, const Traffic& split) {
  const Traffic combine = combine_traffic(a);
  return {split.loaded + combine.loaded, split.stored + combine.stored,
          "split: " + split.formula + "; combine: " + combine.formula};
}

}  // namespace

Traffic split_kv_traffic(const DecodeArgs& a) {
  return with_combine(a, split_traffic(a, a.splits, kBlockRows, kTileLookups));
}

Traffic mma_kv_traffic(const DecodeArgs& a) {
  return with_combine(a, split_traffic(a, a.splits, kMmaRows, {2 * kBlockThreads, 0}));
}

Traffic stream_kv_traffic(const DecodeArgs& a) {
  const DecodeShape& s = a.shape;
  // A lookup per 16-byte vector of a key's K row (d a multiple of 8: whole vectors).
  const int vectors = s.d * int(dtype_bytes(a.dtype)) / 16;
  return with_combine(a, split_traffic(a, a.splits, stream_rows(s.group() * s.lq), {0, vectors}));
}

}  // namespace wb::ch09
