// Chapter 07, rung 3 (strategy 3): a block per row, no row cache. Rung 2 for rows that shared
// memory cannot hold: the normalization reads x a second time (from L2 if the row is still
// there).
//
// Computes: y = (x - mean) * rstd * gamma + beta row-wise, with the per-row mean and rstd, as
//           rung 2; T float, __half or __nv_bfloat16, computed in float.
// Changed since rung 2: no row cache: x read twice, for rows of any length.
// Launch shape: one block of 256 threads per row; the warps' states in static shared memory.
// Vectors: 16-byte Vec<T> accesses where can_vectorize, scalar ones otherwise.
// Limits: rows in [1, 2^31 - 1]; cols in [1, 2^24] (a Welford count exact in a float).
// Memory traffic per element: 2 reads + 1 write; gamma and beta once per row; mean and rstd one
//           float each per row (x_read_twice).
// Test: ctest --test-dir build -R 07_welford_layernorm --output-on-failure
#pragma once

#include "common/kernel.cuh"
#include "common/row_facts.hpp"
#include "common/vector_types.cuh"

#include "chapters/07_welford_layernorm/layernorm.hpp"
#include "chapters/07_welford_layernorm/layernorm_elements.cuh"
#include "chapters/07_welford_layernorm/layernorm_ladder.hpp"
#include "chapters/07_welford_layernorm/welford.hpp"
#include "chapters/07_welford_layernorm/welford_all_reduce.cuh"

namespace wb::ch07 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

// [block_uncached]
// x, y: (rows, cols) of T, row-major; gamma, beta: (cols) or nullptr; mean, rstd: (rows).
// Block b owns row b; the normalization reads the row from x again.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kBlockThreads)
    block_uncached_kernel(const T* __restrict__ x, const T* __restrict__ gamma,
                          const T* __restrict__ beta, T* __restrict__ y, float* __restrict__ mean,
                          float* __restrict__ rstd, int cols, float eps) {
  __shared__ Welford scratch[kBlockWarps];
  const size_t offset = static_cast<size_t>(blockIdx.x) * cols;

  const Welford s = fold_slice<T, kVec>(x + offset, cols, nullptr);   // eqs. (7)-(9), read 1
  const RowStats row = block_row_stats(s, scratch, eps, mean, rstd);  // eqs. (10)-(13), (3)-(4)
  normalize_slice<T, kVec>(x + offset, y + offset, cols, row, gamma, beta);  // read 2
}
// [block_uncached]

// The arguments are within the rung's limits, checked before the launch by run_rung.
void launch_block_uncached(const LayerNormArgs& a) {
  const RowPlan plan = block_uncached_plan(a.cols, a.dtype, can_vectorize(a));
  with_element_type_and_vectors(a.dtype, plan.vectorized(), [&](auto t, auto vec) {
    using T = decltype(t);
    launch<block_uncached_kernel<T, decltype(vec)::value>>(
        dim3(a.rows), dim3(kBlockThreads), 0, static_cast<const T*>(a.x),
        static_cast<const T*>(a.gamma), static_cast<const T*>(a.beta), static_cast<T*>(a.y), a.mean,
        a.rstd, a.cols, a.eps);
  });
}

}  // namespace

WB_ROW_RUNG(LayerNormArgs, block_uncached,
            "no row cache: x read twice, for rows shared memory cannot hold", layernorm_limits(),
            &launch_block_uncached, &x_read_twice)

}  // namespace wb::ch07
