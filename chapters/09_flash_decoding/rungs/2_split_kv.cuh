// Chapter 09, rung 2: split KV. The keys split across blocks too: every (KV head, 16 group rows)
// gets a.splits blocks, each over a range of keys, writing a partial (O_s, logsumexp_s) in float
// (eq. 1), and the combine kernel merges each row's partials (eq. 4): chapter 03's monoid,
// carried to (logsumexp, O).
//
// Computes: what rung 1 computes, for any split count (even_splits: runs of whole K/V tiles).
// Changed since rung 1: splits x as many blocks, so that a long cache fills the GPU where one
//           block per (KV head, row tile) would leave most SMs idle (eq. 7 picks the count);
//           the partials go through global memory and a second launch merges them.
// Launch shape: split_kernel.cuh's with a.splits splits: grid (splits x ceil(g lq / 16), batch x
//           hkv), block (32, 4); then combine_kernel.cuh's: a warp per row.
// Limits: decode_limits (decode_ladder.hpp): 1 <= d <= 128, fp32, fp16, bf16, the causal mask.
// Memory traffic: split_kv_traffic: the split kernel's (a split's O row written only where it
//           saw a key), then the combine's (that O row read back, each logsumexp read twice).
// Test: ctest --test-dir build -R 09_flash_decoding --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include "chapters/09_flash_decoding/decode_ladder.hpp"
#include "chapters/09_flash_decoding/split_kernel.cuh"

namespace wb::ch09 {
namespace {

// The split kernel over a.splits ranges, writing the partials, then their combine.
void launch_split_kv(const DecodeArgs& a) {
  with_element_type(a.dtype, [&](auto tag) { launch_split<decltype(tag), true>(a, a.splits); });
  Kernels<kThisBackend>::combine(a);
}

}  // namespace

WB_RUNG(DecodeArgs, split_kv,
        "the keys split across blocks too: a partial (O, logsumexp) per range, merged by a "
        "combine kernel with chapter 03's monoid",
        decode_limits(kSplitOutputs), &launch_split_kv, &split_kv_traffic)

}  // namespace wb::ch09
