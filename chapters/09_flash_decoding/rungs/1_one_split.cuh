// Chapter 09, rung 1: one split. Chapter 06's loop for decoding: one block per (KV head, 16
// group rows) walks its sequence's whole cache, the query heads of a group sharing each K/V tile.
//
// Computes: O = softmax(scale Q K^T + causal mask) V and logsumexp per query row, for
//           Q: (batch, hq, lq, d) against a KV cache K, V: (batch, hkv, lk, d), or paged (eq. 9
//           of flash_decoding.md), sequence b using its first lengths[b] keys; query head h reads
//           KV head h / (hq / hkv) (eq. 5). A row that sees no key gives O = 0, logsumexp = -inf.
// Changed since chapter 06: the query rows of a block are a KV head's group (g heads x lq rows),
//           so every K/V tile loaded serves g query heads; the cache may be paged.
// Launch shape: split_kernel.cuh's, with one split: grid (ceil(g lq / 16), batch x hkv), block
//           (32, 4), chapter 06's tiles for 16 rows in dynamic shared memory.
// Limits: decode_limits (decode_ladder.hpp): 1 <= d <= 128, fp32, fp16, bf16, the causal mask.
// Memory traffic: one_split_traffic: Q once per block, K and V once per key of a sequence (cut
//           at the causal mask), O and the logsumexp written once.
// Test: ctest --test-dir build -R 09_flash_decoding --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include "chapters/09_flash_decoding/decode_ladder.hpp"
#include "chapters/09_flash_decoding/split_kernel.cuh"

namespace wb::ch09 {
namespace {

// The split kernel with one split, writing O (of the element type) and the logsumexp.
void launch_one_split(const DecodeArgs& a) {
  with_element_type(a.dtype, [&](auto tag) { launch_split<decltype(tag), false>(a, 1); });
}

}  // namespace

WB_RUNG(DecodeArgs, one_split,
        "chapter 06's loop for decoding: one block per (KV head, 16 group rows) walks the "
        "whole cache; the query heads of a group share each K/V tile",
        decode_limits(kWritesO | kWritesLse), &launch_one_split, &one_split_traffic,
        one_range_facts())

}  // namespace wb::ch09
