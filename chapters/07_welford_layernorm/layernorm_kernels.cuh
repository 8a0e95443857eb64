// Chapter 07 kernels: LayerNorm with Welford statistics, three strategies and a dispatcher.
//
// Computes: y = (x - mean) * rstd * gamma + beta row-wise, eq. (1) of welford_layernorm.md,
//           with mean and m2 from Welford's update per thread (eqs. 7-9) and Chan's combine
//           across threads (eqs. 10-13), rstd = 1 / sqrt(m2 / cols + eps); also writes the
//           per-row mean and rstd (what a backward pass needs). x, gamma, beta and y are of
//           one element type T (float, __half, __nv_bfloat16), mean and rstd float; every
//           kernel computes in float: T is widened on load (exactly), y rounded once on store.
// Changed since the previous chapter: softmax's (m, d) merge (chapter 03) becomes the
//           Welford combine, and the row is read once where it fits in registers or shared
//           memory; chapters 04-06 are attention, this chapter goes back to a row operation.
// Launch shapes:
//   warp_per_row    blocks of 128 threads; a group of G lanes per row (G = 1..32, a power of
//                   2), 128 / G rows per block, ceil(rows / (128 / G)) blocks; the row in
//                   registers, up to 32 floats or 64 16-bit values per lane
//   block_cached    one block of 256 threads per row; the row, as T, in dynamic shared memory
//                   (cached_shared_bytes(cols, sizeof(T)), opted in above 48 KiB)
//   block_uncached  one block of 256 threads per row; x read twice, no row cache
//   layernorm       the dispatcher: choose_strategy(cols, device limit, sizeof(T)),
//                   layernorm_ladder.hpp
// All three use 16-byte vector loads and stores (Vec<T>, common/vector_types.cuh: 4 floats or
// 8 halves) when cols is a multiple of the width and every pointer is 16-byte aligned
// (can_vectorize), scalar accesses otherwise.
// Limits: rows in [1, 2^31 - 1]; cols in [1, 1024] for warp_per_row (fp32; [1, 2048] for
//   16-bit rows), up to the device's
//   shared memory (58088 fp32 or 116176 16-bit values on an H100 or the simulator) for
//   block_cached, up to 2^24 for block_uncached: each rung's limits in kernel_ladder
//   (layernorm_ladder.hpp), checked before launch by run_rung with one line naming the limit.
// Memory traffic per element: 1 read + 1 write (warp_per_row, block_cached), 2 reads + 1 write
//   (block_uncached); gamma and beta are read once per row, from cache after the first rows;
//   mean and rstd one float each per row; the dispatcher that of the strategy it picks
//   (x_read_once, x_read_twice, dispatched in layernorm_ladder.hpp).
// Test: ctest --test-dir build -R 07_welford_layernorm --output-on-failure
#pragma once

#include <stdexcept>
#include <string>

#include "common/kernel.cuh"
#include "common/shared_memory.cuh"
#include "common/vector_types.cuh"

#include "chapters/07_welford_layernorm/layernorm.hpp"
#include "chapters/07_welford_layernorm/layernorm_elements.cuh"
#include "chapters/07_welford_layernorm/layernorm_ladder.hpp"
#include "chapters/07_welford_layernorm/welford.hpp"

namespace wb::ch07 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

// ==========================================================================================
// The group all-reduce of Welford states (the per-element pieces: layernorm_elements.cuh)
// ==========================================================================================

// [group_all_reduce]
// Butterfly all-reduce of Welford states over each group of kGroupWidth lanes (a power of 2,
// aligned within the warp): after log2(kGroupWidth) exchanges every lane of the group holds
// the state of the whole group, eqs. (10)-(13) applied along a binary tree. Every lane of the
// warp must call it (full mask), lanes with no values passing welford_identity().
// Chan's combine is commutative in exact arithmetic but not bit for bit, so the lower lane's
// state always goes first: both partners compute the same combine(lower, upper), and every
// lane ends with the same bits (the same mean and rstd for every element of the row).
template <int kGroupWidth>
__device__ Welford group_all_reduce(Welford s) {
  static_assert(kGroupWidth >= 1 && kGroupWidth <= kWarpSize && (kGroupWidth & (kGroupWidth - 1)) == 0,
                "a group is a power-of-2 slice of a warp");
  // [exercise]
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  for (int lane_mask = kGroupWidth / 2; lane_mask > 0; lane_mask /= 2) {
    Welford other;
    other.mean = __shfl_xor_sync(kAllLanes, s.mean, lane_mask, kGroupWidth);
    other.m2 = __shfl_xor_sync(kAllLanes, s.m2, lane_mask, kGroupWidth);
    other.count = __shfl_xor_sync(kAllLanes, s.count, lane_mask, kGroupWidth);
    const bool upper = (lane & lane_mask) != 0;
    s = upper ? welford_combine(other, s) : welford_combine(s, other);
  }
  // [exercise]
  return s;
}
// [group_all_reduce]

// ==========================================================================================
// Strategy 1: warp per row. A group of kGroupWidth lanes serves one row held in registers:
// each lane folds its values with Welford's update, the group all-reduces the states, and
// each lane normalizes the values it still holds. One read of x, no shared memory.
// ==========================================================================================

// [warp_per_row]
// x, y: (rows, cols) of T, row-major; gamma, beta: (cols) or nullptr; mean, rstd: (rows).
// Lane l of a group holds columns l, l + G, l + 2G, ... (scalar) or the vectors starting at
// kWidth (l + j G) (kVec: 4 floats or 8 halves each), so a group's loads are contiguous
// (coalesced). Requires cols <= kColsPerLane * kGroupWidth.
template <typename T, int kColsPerLane, int kGroupWidth, bool kVec>
__global__ void __launch_bounds__(kWarpBlockThreads)
    warp_per_row_kernel(const T* __restrict__ x, const T* __restrict__ gamma,
                        const T* __restrict__ beta, T* __restrict__ y, float* __restrict__ mean,
                        float* __restrict__ rstd, int rows, int cols, float eps) {
  constexpr int kWidth = kVec ? Vec<T>::kWidth : 1;  // elements per access
  static_assert(kColsPerLane >= 1 && kColsPerLane <= kMaxColsPerLane<T>, "registers per lane");
  static_assert(kColsPerLane % kWidth == 0, "whole vectors per lane");
  static_assert(kWarpBlockThreads % kWarpSize == 0, "whole warps");
  constexpr int kRowsPerBlock = kWarpBlockThreads / kGroupWidth;
  const int lane = static_cast<int>(threadIdx.x) % kGroupWidth;  // lane within the group
  const int row =
      static_cast<int>(blockIdx.x) * kRowsPerBlock + static_cast<int>(threadIdx.x) / kGroupWidth;
  // A group past the last row still runs: every lane of the warp takes part in the shuffles.
  const bool live = row < rows;
  const size_t offset = static_cast<size_t>(live ? row : 0) * cols;
  const T* xr = x + offset;

  // The row's values this lane holds, in registers as they were read: a 16-bit value is
  // widened where it is used, which is exact, so with vectors the row takes half the registers
  // it would as floats (64 halves a lane in 32 registers) and more warps fit on an SM.
  alignas(kVecBytes) T v[kColsPerLane] = {};
  Welford s = welford_identity();
#pragma unroll
  for (int j = 0; j < kColsPerLane / kWidth; ++j) {
    const int c = kWidth * (lane + j * kGroupWidth);
    if (live && c < cols) {  // cols % kWidth == 0: a vector is wholly in or out
      if constexpr (kVec) {
        const Vec<T> q = load_vec(xr, c);
#pragma unroll
        for (int k = 0; k < kWidth; ++k) v[kWidth * j + k] = q.v[k];
      } else {
        v[j] = xr[c];
      }
      // A lane's live values are a prefix of its slots (c grows with j), so slot i is the
      // run's value i + 1 and 1 / n_k is a constant of the unrolled loop: no division, and
      // no reciprocal either, on the chain of means.
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        const int i = kWidth * j + k;
        s = welford_update(s, to_float(v[i]), 1.f / static_cast<float>(i + 1));  // (7)-(9)
      }
    }
  }
  if constexpr (kVec) keep_narrow(v);  // widened again to normalize (common/vector_types.cuh)
  s = group_all_reduce<kGroupWidth>(s);                      // eqs. (10)-(13)
  if (!live) return;                                         // after the last shuffle
  const float row_rstd = rstd_of(welford_variance(s), eps);  // eqs. (3)-(4)
  if (lane == 0) {
    mean[row] = s.mean;
    rstd[row] = row_rstd;
  }
  T* yr = y + offset;
#pragma unroll
  for (int j = 0; j < kColsPerLane / kWidth; ++j) {
    const int c = kWidth * (lane + j * kGroupWidth);
    if (c < cols)
      normalize_store<T, kWidth>(&v[kWidth * j], yr, c, s.mean, row_rstd, gamma, beta);  // (1)
  }
}
// [warp_per_row]

// ==========================================================================================
// Strategies 2 and 3: block per row. 256 threads fold strided slices of the row (fold_slice,
// layernorm_elements.cuh), the warps all-reduce their states by shuffles, and one more
// all-reduce joins the 8 warp states.
// ==========================================================================================

// [block_all_reduce]
// Every thread passes its state and gets the whole block's. scratch: kBlockWarps states of
// shared memory. Lanes past kBlockWarps in the second round hold the identity, which the
// combine passes through exactly; every warp computes the same bits.
__device__ Welford block_all_reduce(Welford s, Welford* scratch) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  s = group_all_reduce<kWarpSize>(s);
  if (lane == 0) scratch[warp] = s;
  __syncthreads();  // all warp states are written
  s = group_all_reduce<kWarpSize>(lane < kBlockWarps ? scratch[lane] : welford_identity());
  __syncthreads();  // everyone has read scratch before anyone could write it again
  return s;
}
// [block_all_reduce]

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

  Welford s = fold_slice<T, kVec>(x + offset, cols, cache);  // eqs. (7)-(9), the one read of x
  s = block_all_reduce(s, scratch);                          // eqs. (10)-(13)
  const float row_rstd = rstd_of(welford_variance(s), eps);
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = s.mean;
    rstd[blockIdx.x] = row_rstd;
  }
  normalize_slice<T, kVec>(cache, y + offset, cols, s.mean, row_rstd, gamma, beta);  // eq. (1)
}
// [block_cached]

// [block_uncached]
// Same as block_cached, but without the row cache: the normalization reads x a second time
// (from L2 if the row is still there). For rows longer than shared memory holds.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kBlockThreads)
    block_uncached_kernel(const T* __restrict__ x, const T* __restrict__ gamma,
                          const T* __restrict__ beta, T* __restrict__ y, float* __restrict__ mean,
                          float* __restrict__ rstd, int cols, float eps) {
  __shared__ Welford scratch[kBlockWarps];
  const size_t offset = static_cast<size_t>(blockIdx.x) * cols;

  Welford s = fold_slice<T, kVec>(x + offset, cols, nullptr);  // eqs. (7)-(9), read 1
  s = block_all_reduce(s, scratch);                            // eqs. (10)-(13)
  const float row_rstd = rstd_of(welford_variance(s), eps);
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = s.mean;
    rstd[blockIdx.x] = row_rstd;
  }
  normalize_slice<T, kVec>(x + offset, y + offset, cols, s.mean, row_rstd, gamma, beta);  // read 2
}
// [block_uncached]

// ==========================================================================================
// Launch helpers: the element type and the shape become template arguments
// ==========================================================================================

template <typename T, int kColsPerLane, int kGroupWidth, bool kVec>
void launch_warp(const LayerNormArgs& a) {
  constexpr int kRowsPerBlock = kWarpBlockThreads / kGroupWidth;
  launch<warp_per_row_kernel<T, kColsPerLane, kGroupWidth, kVec>>(
      dim3(ceil_div(a.rows, kRowsPerBlock)), dim3(kWarpBlockThreads), 0, static_cast<const T*>(a.x),
      static_cast<const T*>(a.gamma), static_cast<const T*>(a.beta), static_cast<T*>(a.y), a.mean,
      a.rstd, a.rows, a.cols, a.eps);
}

// Narrow groups (rows of at most 16 accesses): several rows per warp, one access per lane, a
// 16-byte vector with kVec (4 floats, 8 halves), else one value.
template <typename T, bool kVec>
void launch_warp_narrow(const LayerNormArgs& a, int group_width) {
  constexpr int kPerLane = kVec ? Vec<T>::kWidth : 1;
  switch (group_width) {
    case 1:
      return launch_warp<T, kPerLane, 1, kVec>(a);
    case 2:
      return launch_warp<T, kPerLane, 2, kVec>(a);
    case 4:
      return launch_warp<T, kPerLane, 4, kVec>(a);
    case 8:
      return launch_warp<T, kPerLane, 8, kVec>(a);
    case 16:
      return launch_warp<T, kPerLane, 16, kVec>(a);
    default:
      break;
  }
  throw std::logic_error("warp_per_row: no kernel for groups of " + std::to_string(group_width) +
                         " lanes");
}

// Whole-warp groups: one instantiation per power-of-2 count of values per lane; vectors need
// whole vectors per lane (4 or more values for fp32, 8 or more for 16-bit types).
template <typename T, bool kVec>
void launch_warp_full(const LayerNormArgs& a, int cols_per_lane) {
  switch (cols_per_lane) {
    case 8:
      return launch_warp<T, 8, kWarpSize, kVec>(a);
    case 16:
      return launch_warp<T, 16, kWarpSize, kVec>(a);
    case 32:
      return launch_warp<T, 32, kWarpSize, kVec>(a);
    default:
      break;
  }
  if constexpr (kMaxColsPerLane<T> >= 64) {  // 16-bit rows of 1025 to 2048 values
    if (cols_per_lane == 64) return launch_warp<T, 64, kWarpSize, kVec>(a);
  }
  if constexpr (!kVec || Vec<T>::kWidth <= 4) {
    if (cols_per_lane == 4) return launch_warp<T, 4, kWarpSize, kVec>(a);
  }
  if constexpr (!kVec) {
    if (cols_per_lane == 1) return launch_warp<T, 1, kWarpSize, false>(a);
    if (cols_per_lane == 2) return launch_warp<T, 2, kWarpSize, false>(a);
  }
  throw std::logic_error("warp_per_row: no kernel for " + std::to_string(cols_per_lane) +
                         " values per lane" + (kVec ? " in vectors" : ""));
}

// Strategy 2 (kCached: the row in dynamic shared memory, opted in above 48 KiB) or 3.
template <typename T, bool kVec, bool kCached>
void launch_block(const LayerNormArgs& a) {
  constexpr auto kKernel = kCached ? block_cached_kernel<T, kVec> : block_uncached_kernel<T, kVec>;
  const std::size_t bytes = kCached ? cached_shared_bytes(a.cols, sizeof(T)) : 0;
  if (bytes > kDefaultDynamicSharedBytes) allow_dynamic_shared_bytes<kKernel>(bytes);
  launch<kKernel>(dim3(a.rows), dim3(kBlockThreads), bytes, static_cast<const T*>(a.x),
                  static_cast<const T*>(a.gamma), static_cast<const T*>(a.beta),
                  static_cast<T*>(a.y), a.mean, a.rstd, a.cols, a.eps);
}

// The same on a's element type, with vectors wherever can_vectorize(a).
template <bool kCached>
void launch_block_strategy(const LayerNormArgs& a) {
  const bool vec = can_vectorize(a);
  with_element_type(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (vec) return launch_block<T, true, kCached>(a);
    launch_block<T, false, kCached>(a);
  });
}

}  // namespace

// ==========================================================================================
// Launchers: the arguments are within the rung's limits (kernel_ladder in
// layernorm_ladder.hpp), checked before the launch by run_rung
// ==========================================================================================

template <>
std::size_t Kernels<kThisBackend>::max_dynamic_shared_bytes() {
  return max_dynamic_shared_bytes_optin();
}

template <>
void Kernels<kThisBackend>::warp_per_row(const LayerNormArgs& a) {
  const bool vec = can_vectorize(a);
  const RowLanes shape = warp_shape(a.cols, vec ? vec_width(a.dtype) : 1);
  with_element_type(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (shape.group_width < kWarpSize) {
      if (vec) return launch_warp_narrow<T, true>(a, shape.group_width);
      return launch_warp_narrow<T, false>(a, shape.group_width);
    }
    if (vec) return launch_warp_full<T, true>(a, shape.cols_per_lane);
    launch_warp_full<T, false>(a, shape.cols_per_lane);
  });
}

template <>
void Kernels<kThisBackend>::block_cached(const LayerNormArgs& a) {
  launch_block_strategy<true>(a);
}

template <>
void Kernels<kThisBackend>::block_uncached(const LayerNormArgs& a) {
  launch_block_strategy<false>(a);
}

template <>
Strategy Kernels<kThisBackend>::layernorm(const LayerNormArgs& a) {
  const Strategy s = choose_strategy(a.cols, max_dynamic_shared_bytes(), dtype_bytes(a.dtype));
  switch (s) {
    case Strategy::warp_per_row:
      warp_per_row(a);
      break;
    case Strategy::block_cached:
      block_cached(a);
      break;
    case Strategy::block_uncached:
      block_uncached(a);
      break;
  }
  return s;
}

}  // namespace wb::ch07
