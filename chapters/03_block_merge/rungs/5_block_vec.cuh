// Chapter 03, rung 5: a block per row with vector loads, for rows of any length. Rung 1 with
// 16-byte accesses: each vector is one block of kWidth entries, summarized by eq. (1) and
// merged into the thread's pair; fp16 and bf16 elements.
//
// Computes: y = softmax(x) row-wise, x and y of one element type T (float, __half,
//           __nv_bfloat16), computed in float: each thread folds its vectors (or, on rows that
//           take none, its entries with chapter 02's update) into (m, d), the block merges the
//           threads' pairs (eq. 2), then every thread normalizes its entries, reading x again,
//           and rounds them to T. A fully -inf row gives zeros.
// Changed since rung 4: a block of 256 threads per row, so rows past a warp's registers run
//           too; x read twice (the second time from L2 where it can).
// Launch shape: one block of 256 threads per row; rows blocks.
// Vectors: when can_vectorize() (both pointers 16-byte aligned, cols a multiple of 16 /
//           sizeof(T)) every access is one 16-byte Vec<T> (common/vector_types.cuh);
//           otherwise one element at a time.
// Limits: rows in [1, 2^31 - 1]; cols in [1, 2^30].
// Memory traffic per element: 2 reads + 1 write.
// Test: ctest --test-dir build -R 03_block_merge --output-on-failure
#pragma once

#include "common/kernel.cuh"
#include "common/row_facts.hpp"
#include "common/vector_types.cuh"

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/02_online_softmax/online_update.hpp"
#include "chapters/03_block_merge/block_merge.hpp"
#include "chapters/03_block_merge/fast_plans.hpp"
#include "chapters/03_block_merge/md_merge.hpp"
#include "chapters/03_block_merge/md_stats.cuh"

namespace wb::ch03 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

// [block_vec]
// x, y: (rows, cols), row-major. Block b owns row b; thread t reads the vectors starting at
// columns kWidth (t + 256 k) (kVec) or the columns t + 256 k.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kBlockVecThreads)
    block_vec_kernel(const T* __restrict__ x, T* __restrict__ y, int cols) {
  constexpr int kWarps = kBlockVecThreads / kWarpSize;
  constexpr int kWidth = kVec ? Vec<T>::kWidth : 1;
  constexpr int kStride = kWidth * kBlockVecThreads;
  __shared__ MD scratch[kWarps];
  const T* xr = x + static_cast<size_t>(blockIdx.x) * cols;
  T* yr = y + static_cast<size_t>(blockIdx.x) * cols;
  const int first = kWidth * static_cast<int>(threadIdx.x);

  MD md = md_identity();  // pass 1: read x, fold (m, d)
  for (int c = first; c < cols; c += kStride) {
    if constexpr (kVec)
      md = md_merge(md, vector_stats(load_vec(xr, c)));  // eqs. (1), (2): the vector is a block
    else
      md = ch02::online_update(md, to_float(xr[c]));  // chapter 02's update, one entry
  }
  md = block_merge<kWarps>(md, scratch);  // eqs. (2), (4): the whole row's (m, d)

  normalize_slice<T, kVec>(xr, yr, cols, md);  // pass 2: x again, from global memory (L2 if it can)
}
// [block_vec]

void launch_block_vec(const RowArgs& a) {
  const RowPlan plan = block_vec_plan(a.cols, a.dtype, can_vectorize(a.x, a.y, a.cols, a.dtype));
  with_element_type_and_vectors(a.dtype, plan.vectorized(), [&](auto t, auto vec) {
    using T = decltype(t);
    launch<block_vec_kernel<T, decltype(vec)::value>>(dim3(a.rows), dim3(kBlockVecThreads), 0,
                                                      static_cast<const T*>(a.x),
                                                      static_cast<T*>(a.y), a.cols);
  });
}

}  // namespace

WB_ROW_RUNG(RowArgs, block_vec,
            "a block per row for any length, each 16-byte vector one block of eq. (1)",
            fast_row_limits(), &launch_block_vec, &two_passes)

}  // namespace wb::ch03
