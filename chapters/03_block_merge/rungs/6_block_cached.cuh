// Chapter 03, rung 6: a block per row with the row cached in shared memory. Rung 5, but each
// thread also stores what it reads in dynamic shared memory and normalizes from there: x is
// read once, as in the register rungs, for rows of up to the device's shared memory.
//
// Computes: y = softmax(x) row-wise, x and y of one element type T (float, __half,
//           __nv_bfloat16), computed in float, as rung 5. A fully -inf row gives zeros.
// Changed since rung 5: the second pass reads the row from shared memory, not global memory.
// Launch shape: one block of 256 threads per row; rows blocks; dynamic shared memory
//           cached_shared_bytes(cols, sizeof(T)): the 8 warps' (m, d) pairs, then the row as
//           read, opted in above 48 KiB up to the device's limit (227 KiB on an H100).
// Vectors: when can_vectorize(), as rung 5.
// Limits: rows in [1, 2^31 - 1]; a row of at most the opt-in limit less 64 bytes, cols in
//           [1, 2^30].
// Memory traffic per element: 1 read + 1 write.
// Test: ctest --test-dir build -R 03_block_merge --output-on-failure
#pragma once

#include <cstddef>

#include "common/kernel.cuh"
#include "common/row_facts.hpp"
#include "common/shared_memory.cuh"
#include "common/vector_types.cuh"

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/02_online_softmax/online_update.hpp"
#include "chapters/03_block_merge/block_merge.hpp"
#include "chapters/03_block_merge/fast_plans.hpp"
#include "chapters/03_block_merge/md_merge.hpp"
#include "chapters/03_block_merge/md_stats.cuh"

namespace wb::ch03 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

// [block_cached]
// x, y: (rows, cols), row-major. Block b owns row b; thread t reads the vectors starting at
// columns kWidth (t + 256 k) (kVec) or the columns t + 256 k. Dynamic shared memory: the 8
// warps' (m, d) pairs, then the row as read, cols elements of T.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kBlockVecThreads)
    block_cached_kernel(const T* __restrict__ x, T* __restrict__ y, int cols) {
  constexpr int kWarps = kBlockVecThreads / kWarpSize;
  constexpr int kWidth = kVec ? Vec<T>::kWidth : 1;
  constexpr int kStride = kWidth * kBlockVecThreads;
  MD* scratch = dynamic_shared<MD>();
  T* cache = reinterpret_cast<T*>(scratch + kWarps);  // 16-byte aligned (kCachedScratchBytes)
  const T* xr = x + static_cast<size_t>(blockIdx.x) * cols;
  T* yr = y + static_cast<size_t>(blockIdx.x) * cols;
  const int first = kWidth * static_cast<int>(threadIdx.x);

  MD md = md_identity();  // pass 1: the one read of x, kept in the cache; fold (m, d)
  for (int c = first; c < cols; c += kStride) {
    if constexpr (kVec) {
      const Vec<T> q = load_vec(xr, c);
      store_vec(cache, c, q);
      md = md_merge(md, vector_stats(q));  // eqs. (1), (2): the vector is a block
    } else {
      const T e = xr[c];
      cache[c] = e;
      md = ch02::online_update(md, to_float(e));  // chapter 02's update, one entry
    }
  }
  // eqs. (2), (4): the whole row's (m, d). Its barriers also make each thread's cached
  // entries visible (a thread reads back only its own anyway: the same columns in pass 2).
  md = block_merge<kWarps>(md, scratch);

  normalize_slice<T, kVec>(cache, yr, cols, md);  // pass 2: x again, from the cache
}
// [block_cached]

// The row in dynamic shared memory, opted in above 48 KiB.
void launch_block_cached(const RowArgs& a) {
  const RowPlan plan = block_cached_plan(a.cols, a.dtype, can_vectorize(a.x, a.y, a.cols, a.dtype));
  with_element_type_and_vectors(a.dtype, plan.vectorized(), [&](auto t, auto vec) {
    using T = decltype(t);
    launch_opted_in<block_cached_kernel<T, decltype(vec)::value>>(
        dim3(a.rows), dim3(kBlockVecThreads), cached_shared_bytes(a.cols, sizeof(T)),
        static_cast<const T*>(a.x), static_cast<T*>(a.y), a.cols);
  });
}

}  // namespace

// The chapter's one question to the device (block_merge.hpp), asked here where its answer
// sets this rung's limits.
template <>
std::size_t Kernels<kThisBackend>::max_dynamic_shared_bytes() {
  return max_dynamic_shared_bytes_optin();
}

WB_ROW_RUNG(RowArgs, block_cached,
            "block_vec with the row cached in shared memory (opted in up to the device's limit): x "
            "read once",
            fast_row_limits(Kernels<kThisBackend>::max_dynamic_shared_bytes() -
                            kCachedScratchBytes),
            &launch_block_cached, &row_in_shared)

}  // namespace wb::ch03
