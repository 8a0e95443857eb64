// Chapter 03's (m, d) statistics on the device, in the pieces several rungs share unchanged:
// eq. (1) for values already in registers (values_stats: rungs 3 to 6; vector_stats for a
// loaded 16-byte vector: rungs 5 and 6), the merge of a block's pairs (block_merge: rungs 1, 5
// and 6) over md_warp_merge.cuh's warp_merge, and the block rungs' normalization of a thread's
// slice of the row (normalize_slice: rungs 5 and 6, from x or from the cached row). The
// exercise's butterfly, warp_all_merge, is rung 2's own (rungs/2_warp_per_row_online.cuh):
// its stub replaces that one file, so no other kernel includes it.
// Only templates: the rung files include it, and the build compiles it there, not on its own
// (wb_add_chapter's translation units are the kernel files no other includes).
// Test: ctest --test-dir build -R 03_block_merge --output-on-failure
#pragma once

#include "common/kernel.cuh"
#include "common/vector_types.cuh"

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/03_block_merge/fast_plans.hpp"
#include "chapters/03_block_merge/md_merge.hpp"
#include "chapters/03_block_merge/md_warp_merge.cuh"

namespace wb::ch03 {
namespace {  // internal linkage, as the kernels that use them

// [md_block_merge]
// Every thread passes its pair and gets the merge of the whole block's pairs: each warp merges
// its lanes' pairs, lane 0 writes the warp's, then every warp merges the kWarps pairs itself
// (no broadcast needed). scratch: kWarps pairs of shared memory, one per warp.
template <int kWarps>
__device__ MD block_merge(MD md, MD* scratch) {
  static_assert(kWarps <= kWarpSize, "the warps' pairs are merged by one warp");
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  md = warp_merge(md);
  if (lane == 0) scratch[threadIdx.x / kWarpSize] = md;
  __syncthreads();  // every warp's pair is written before any is read
  md = warp_merge(lane < kWarps ? scratch[lane] : md_identity());  // eq. (3) past the warps
  __syncthreads();  // everyone has read scratch before it could be reused
  return md;
}
// [md_block_merge]

// [fast_values_stats]
// Eq. (1) for n values already in registers: the max, then the sum, one exp per value (the
// online update, eq. 4 of chapter 02, spends two, but it must not look at a value twice;
// registers can). All -inf values give the identity (-inf, 0).
template <int n>
__device__ __forceinline__ MD values_stats(const float* v) {
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < n; ++i) m = fmaxf(m, v[i]);
  const float shift = ch01::exp_shift(m);
  float d = 0.f;
#pragma unroll
  for (int i = 0; i < n; ++i) d += expf(v[i] - shift);
  return {m, d};
}
// [fast_values_stats]

// Eq. (1) for the values of one 16-byte vector as it was loaded, widened to float (exactly).
template <typename T>
__device__ __forceinline__ MD vector_stats(const Vec<T>& q) {
  float v[Vec<T>::kWidth];
#pragma unroll
  for (int k = 0; k < Vec<T>::kWidth; ++k) v[k] = to_float(q.v[k]);
  return values_stats<Vec<T>::kWidth>(v);
}

// The second pass of a block rung: thread t's entries of the row (the vectors starting at
// columns kWidth (t + 256 k) with kVec, else the columns t + 256 k) read from `src`, normalized
// with the row's (m, d), eq. (3) of chapter 01, and stored to yr rounded to T.
template <typename T, bool kVec>
__device__ void normalize_slice(const T* src, T* yr, int cols, MD md) {
  constexpr int kWidth = kVec ? Vec<T>::kWidth : 1;
  const float shift = ch01::exp_shift(md.m);
  const float inv_d = ch01::inverse_or_zero(md.d);
  for (int c = kWidth * static_cast<int>(threadIdx.x); c < cols; c += kWidth * kBlockVecThreads) {
    if constexpr (kVec) {
      Vec<T> q = load_vec(src, c);
#pragma unroll
      for (int k = 0; k < kWidth; ++k)
        q.v[k] = from_float<T>(expf(to_float(q.v[k]) - shift) * inv_d);
      store_vec(yr, c, q);
    } else {
      yr[c] = from_float<T>(expf(to_float(src[c]) - shift) * inv_d);
    }
  }
}

}  // namespace
}  // namespace wb::ch03
