// Chapter 09: where the cache's keys lie, contiguous or paged (eq. 9 of flash_decoding.md), and
// which KV head a query head reads (eq. 5). Shared by the CPU step, the kernels and the tests.
//
// query head h reads KV head h / g, g = hq / hkv (grouped-query attention)            eq. (5)
// paged cache: key j of sequence b in page table[b][j / page_keys], slot j % page_keys  eq. (9)
#pragma once

#include <cstddef>
#include <vector>

#include "chapters/09_flash_decoding/decode_plan.hpp"
#include "common/attention_inputs.hpp"
#include "common/hd.hpp"
#include "common/rung_args.hpp"

namespace wb::ch09 {

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

}  // namespace wb::ch09
