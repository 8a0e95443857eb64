// Chapter 07, rung 2 (strategy 2): a block per row, the row cached in shared memory. Past 4 KiB
// a row needs more threads than a warp and more storage than registers: 256 threads fold
// strided slices of the row with Welford's update (16-byte vectors each by two passes, joined
// by Chan's combine: vector_stats in layernorm_elements.cuh), keeping what they read in dynamic
// shared memory, the block all-reduces the states, and each thread normalizes from the cache.
//
// Computes: y = (x - mean) * rstd * gamma + beta row-wise, with the per-row mean and rstd, as
//           rung 1 (eqs. 1, 7-13 of welford_layernorm.md); T float, __half or __nv_bfloat16,
//           computed in float.
// Changed since rung 1: a block of 256 threads per row instead of a group of lanes; the row in
//           shared memory instead of registers; the warps' states joined through shared memory
//           (welford_all_reduce.cuh).
// Launch shape: one block of 256 threads per row; the row, as T, in dynamic shared memory
//           (cached_shared_bytes(cols, sizeof(T)), opted in above 48 KiB).
// Vectors: 16-byte Vec<T> accesses where can_vectorize, scalar ones otherwise.
// Limits: rows in [1, 2^31 - 1]; cols up to what the device's shared memory holds (58088 fp32
//           or 116176 16-bit values on an H100 or the simulator): cached_limits.
// Memory traffic per element: 1 read + 1 write; gamma and beta once per row; mean and rstd one
//           float each per row (x_read_once).
// Test: ctest --test-dir build -R 07_welford_layernorm --output-on-failure
#pragma once

#include <cstddef>

#include "common/kernel.cuh"
#include "common/row_facts.hpp"
#include "common/shared_memory.cuh"
#include "common/vector_types.cuh"

#include "chapters/07_welford_layernorm/layernorm.hpp"
#include "chapters/07_welford_layernorm/layernorm_elements.cuh"
#include "chapters/07_welford_layernorm/layernorm_ladder.hpp"
#include "chapters/07_welford_layernorm/welford.hpp"
#include "chapters/07_welford_layernorm/welford_all_reduce.cuh"

namespace wb::ch07 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

// [block_cached]
// x, y: (rows, cols) of T, row-major; gamma, beta: (cols) or nullptr; mean, rstd: (rows).
// Block b owns row b. Dynamic shared memory: cached_shared_bytes(cols, sizeof(T)), the warp
// states (kCachedScratchBytes) then the row as T. Each thread reads back only the values it
// cached itself, so the row cache needs no barrier of its own.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kBlockThreads)
    block_cached_kernel(const T* __restrict__ x, const T* __restrict__ gamma,
                        const T* __restrict__ beta, T* __restrict__ y, float* __restrict__ mean,
                        float* __restrict__ rstd, int cols, float eps) {
  unsigned char* shared = dynamic_shared<unsigned char>();
  Welford* scratch = reinterpret_cast<Welford*>(shared);
  T* cache = reinterpret_cast<T*>(shared + kCachedScratchBytes);
  const size_t offset = static_cast<size_t>(blockIdx.x) * cols;

  const Welford s = fold_slice<T, kVec>(x + offset, cols, cache);       // eqs. (7)-(9), x read once
  const RowStats row = block_row_stats(s, scratch, eps, mean, rstd);    // eqs. (10)-(13), (3)-(4)
  normalize_slice<T, kVec>(cache, y + offset, cols, row, gamma, beta);  // eq. (1)
}
// [block_cached]

// The arguments are within the rung's limits, checked before the launch by run_rung. The row in
// dynamic shared memory, opted in above 48 KiB.
void launch_block_cached(const LayerNormArgs& a) {
  const RowPlan plan = block_cached_plan(a.cols, a.dtype, can_vectorize(a));
  with_element_type_and_vectors(a.dtype, plan.vectorized(), [&](auto t, auto vec) {
    using T = decltype(t);
    launch_opted_in<block_cached_kernel<T, decltype(vec)::value>>(
        dim3(a.rows), dim3(kBlockThreads), cached_shared_bytes(a.cols, sizeof(T)),
        static_cast<const T*>(a.x), static_cast<const T*>(a.gamma), static_cast<const T*>(a.beta),
        static_cast<T*>(a.y), a.mean, a.rstd, a.cols, a.eps);
  });
}

}  // namespace

// The chapter's one question to the device (layernorm_ladder.hpp), asked here where its answer
// sets this rung's limits.
template <>
std::size_t Kernels<kThisBackend>::max_dynamic_shared_bytes() {
  return max_dynamic_shared_bytes_optin();
}

WB_ROW_RUNG(LayerNormArgs, block_cached,
            "256 threads per row, the row cached in shared memory: x read once",
            cached_limits(Kernels<kThisBackend>::max_dynamic_shared_bytes()), &launch_block_cached,
            &x_read_once)

}  // namespace wb::ch07
