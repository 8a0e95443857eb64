// Chapter 07 kernels: LayerNorm with Welford statistics, three strategies and a dispatcher.
//
// Computes: y = (x - mean) * rstd * gamma + beta row-wise, eq. (1) of welford_layernorm.md,
//           with mean and m2 from Welford's update per thread (eqs. 7-9) and Chan's combine
//           across threads (eqs. 10-13), rstd = 1 / sqrt(m2 / cols + eps); also writes the
//           per-row mean and rstd (what a backward pass needs).
// Changed since the previous chapter: softmax's (m, d) merge (chapter 03) becomes the
//           Welford combine, and the row is read once where it fits in registers or shared
//           memory; chapters 04-06 are attention, this chapter goes back to a row operation.
// Launch shapes:
//   warp_per_row    blocks of 128 threads; a group of G lanes per row (G = 1..32, a power of
//                   2), 128 / G rows per block, ceil(rows / (128 / G)) blocks; the row in
//                   registers, up to 32 values per lane
//   block_cached    one block of 256 threads per row; the row in dynamic shared memory
//                   (cached_shared_bytes(cols), opted in above 48 KiB)
//   block_uncached  one block of 256 threads per row; x read twice, no row cache
//   layernorm       the dispatcher: choose_strategy(cols, device limit) in layernorm.hpp
// All three use float4 loads and stores when cols % 4 == 0 and every pointer is 16-byte
// aligned (can_vectorize), scalar accesses otherwise.
// Limits: rows in [1, 2^31 - 1]; cols in [1, 1024] for warp_per_row, up to the device's
//   shared memory (58088 on an H100 or the simulator) for block_cached, up to 2^24 for
//   block_uncached; checked, with std::invalid_argument naming the limit.
// Memory traffic per element: 1 read + 1 write (warp_per_row, block_cached), 2 reads + 1 write
//   (block_uncached); gamma and beta are read once per row, from cache after the first rows.
// Test: ctest --test-dir build -R 07_welford_layernorm --output-on-failure
#pragma once

#include <stdexcept>
#include <string>

#include "common/kernel.cuh"
#include "common/shared_memory.cuh"

#include "chapters/07_welford_layernorm/layernorm.hpp"
#include "chapters/07_welford_layernorm/welford.hpp"

namespace wb::ch07 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

constexpr unsigned kFullMask = 0xffffffffu;

// ==========================================================================================
// Shared pieces: the group all-reduce of Welford states, vector loads, the affine transform
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
  static_assert(kGroupWidth >= 1 && kGroupWidth <= kLanes && (kGroupWidth & (kGroupWidth - 1)) == 0,
                "a group is a power-of-2 slice of a warp");
  // [exercise]
  const int lane = static_cast<int>(threadIdx.x) % kLanes;
  for (int lane_mask = kGroupWidth / 2; lane_mask > 0; lane_mask /= 2) {
    Welford other;
    other.mean = __shfl_xor_sync(kFullMask, s.mean, lane_mask, kGroupWidth);
    other.m2 = __shfl_xor_sync(kFullMask, s.m2, lane_mask, kGroupWidth);
    other.count = __shfl_xor_sync(kFullMask, s.count, lane_mask, kGroupWidth);
    const bool upper = (lane & lane_mask) != 0;
    s = upper ? welford_combine(other, s) : welford_combine(s, other);
  }
  // [exercise]
  return s;
}
// [group_all_reduce]

// Four consecutive floats at p[c..c+3]; c is a multiple of 4 and p 16-byte aligned.
__device__ __forceinline__ float4 load4(const float* p, int c) {
  return *reinterpret_cast<const float4*>(p + c);
}
__device__ __forceinline__ void store4(float* p, int c, float4 v) {
  *reinterpret_cast<float4*>(p + c) = v;
}

__device__ __forceinline__ float gamma_at(const float* gamma, int c) {
  return gamma != nullptr ? gamma[c] : 1.f;
}
__device__ __forceinline__ float beta_at(const float* beta, int c) {
  return beta != nullptr ? beta[c] : 0.f;
}

// Eq. (1) for the four columns c..c+3.
__device__ __forceinline__ float4 layernorm_y4(float4 v, int c, float mean, float rstd,
                                               const float* gamma, const float* beta) {
  const float4 g = gamma != nullptr ? load4(gamma, c) : make_float4(1.f, 1.f, 1.f, 1.f);
  const float4 b = beta != nullptr ? load4(beta, c) : make_float4(0.f, 0.f, 0.f, 0.f);
  return make_float4(layernorm_y(v.x, mean, rstd, g.x, b.x), layernorm_y(v.y, mean, rstd, g.y, b.y),
                     layernorm_y(v.z, mean, rstd, g.z, b.z),
                     layernorm_y(v.w, mean, rstd, g.w, b.w));
}

__device__ __forceinline__ Welford welford_update4(Welford s, float4 v) {
  s = welford_update(s, v.x);
  s = welford_update(s, v.y);
  s = welford_update(s, v.z);
  return welford_update(s, v.w);
}

// ==========================================================================================
// Strategy 1: warp per row. A group of kGroupWidth lanes serves one row held in registers:
// each lane folds its values with Welford's update, the group all-reduces the states, and
// each lane normalizes the values it still holds. One read of x, no shared memory.
// ==========================================================================================

// [warp_per_row]
// x, y: (rows, cols), row-major; gamma, beta: (cols) or nullptr; mean, rstd: (rows).
// Lane l of a group holds columns l, l + G, l + 2G, ... (scalar) or the float4s starting at
// 4 (l + j G) (kVec4), so a group's loads are contiguous (coalesced).
// Requires cols <= kColsPerLane * kGroupWidth.
template <int kColsPerLane, int kGroupWidth, bool kVec4>
__global__ void __launch_bounds__(kWarpBlockThreads)
    warp_per_row_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                        const float* __restrict__ beta, float* __restrict__ y,
                        float* __restrict__ mean, float* __restrict__ rstd, int rows, int cols,
                        float eps) {
  static_assert(kColsPerLane >= 1 && kColsPerLane <= kMaxColsPerLane, "registers per lane");
  static_assert(!kVec4 || kColsPerLane % kVec == 0, "whole float4s per lane");
  static_assert(kWarpBlockThreads % kLanes == 0, "whole warps");
  constexpr int kRowsPerBlock = kWarpBlockThreads / kGroupWidth;
  const int lane = static_cast<int>(threadIdx.x) % kGroupWidth;  // lane within the group
  const int row =
      static_cast<int>(blockIdx.x) * kRowsPerBlock + static_cast<int>(threadIdx.x) / kGroupWidth;
  // A group past the last row still runs: every lane of the warp takes part in the shuffles.
  const bool live = row < rows;
  const size_t offset = static_cast<size_t>(live ? row : 0) * cols;
  const float* xr = x + offset;

  float v[kColsPerLane] = {};  // the row's values this lane holds, in registers
  Welford s = welford_identity();
  if constexpr (kVec4) {
#pragma unroll
    for (int j = 0; j < kColsPerLane / kVec; ++j) {
      const int c = kVec * (lane + j * kGroupWidth);
      if (live && c < cols) {  // cols % 4 == 0: a float4 is wholly in or out
        const float4 q = load4(xr, c);
        v[kVec * j] = q.x;
        v[kVec * j + 1] = q.y;
        v[kVec * j + 2] = q.z;
        v[kVec * j + 3] = q.w;
        s = welford_update4(s, q);  // eqs. (7)-(9)
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < kColsPerLane; ++i) {
      const int c = lane + i * kGroupWidth;
      if (live && c < cols) {
        v[i] = xr[c];
        s = welford_update(s, v[i]);  // eqs. (7)-(9)
      }
    }
  }
  s = group_all_reduce<kGroupWidth>(s);                      // eqs. (10)-(13)
  if (!live) return;                                         // after the last shuffle
  const float row_rstd = rstd_of(welford_variance(s), eps);  // eqs. (3)-(4)
  if (lane == 0) {
    mean[row] = s.mean;
    rstd[row] = row_rstd;
  }
  float* yr = y + offset;
  if constexpr (kVec4) {
#pragma unroll
    for (int j = 0; j < kColsPerLane / kVec; ++j) {
      const int c = kVec * (lane + j * kGroupWidth);
      if (c < cols) {
        const float4 q =
            make_float4(v[kVec * j], v[kVec * j + 1], v[kVec * j + 2], v[kVec * j + 3]);
        store4(yr, c, layernorm_y4(q, c, s.mean, row_rstd, gamma, beta));  // eq. (1)
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < kColsPerLane; ++i) {
      const int c = lane + i * kGroupWidth;
      if (c < cols)
        yr[c] = layernorm_y(v[i], s.mean, row_rstd, gamma_at(gamma, c), beta_at(beta, c));
    }
  }
}
// [warp_per_row]

// ==========================================================================================
// Strategies 2 and 3: block per row. 256 threads fold strided slices of the row, the warps
// all-reduce their states by shuffles, and one more all-reduce joins the 8 warp states.
// ==========================================================================================

// [block_all_reduce]
// Every thread passes its state and gets the whole block's. scratch: kBlockWarps states of
// shared memory. Lanes past kBlockWarps in the second round hold the identity, which the
// combine passes through exactly; every warp computes the same bits.
__device__ Welford block_all_reduce(Welford s, Welford* scratch) {
  const int lane = static_cast<int>(threadIdx.x) % kLanes;
  const int warp = static_cast<int>(threadIdx.x) / kLanes;
  s = group_all_reduce<kLanes>(s);
  if (lane == 0) scratch[warp] = s;
  __syncthreads();  // all warp states are written
  s = group_all_reduce<kLanes>(lane < kBlockWarps ? scratch[lane] : welford_identity());
  __syncthreads();  // everyone has read scratch before anyone could write it again
  return s;
}
// [block_all_reduce]

// Thread t's Welford state over columns t, t + 256, ... (or the float4s t, t + 256, ...),
// each value also stored to `cache` when it is not null.
template <bool kVec4>
__device__ Welford fold_slice(const float* xr, int cols, float* cache) {
  Welford s = welford_identity();
  if constexpr (kVec4) {
    for (int c = kVec * static_cast<int>(threadIdx.x); c < cols; c += kVec * kBlockThreads) {
      const float4 q = load4(xr, c);
      if (cache != nullptr) store4(cache, c, q);
      s = welford_update4(s, q);
    }
  } else {
    for (int c = static_cast<int>(threadIdx.x); c < cols; c += kBlockThreads) {
      const float v = xr[c];
      if (cache != nullptr) cache[c] = v;
      s = welford_update(s, v);
    }
  }
  return s;
}

// Eq. (1) over thread t's slice, reading the values from `src` (the cache or x itself).
template <bool kVec4>
__device__ void normalize_slice(const float* src, float* yr, int cols, float row_mean,
                                float row_rstd, const float* gamma, const float* beta) {
  if constexpr (kVec4) {
    for (int c = kVec * static_cast<int>(threadIdx.x); c < cols; c += kVec * kBlockThreads)
      store4(yr, c, layernorm_y4(load4(src, c), c, row_mean, row_rstd, gamma, beta));
  } else {
    for (int c = static_cast<int>(threadIdx.x); c < cols; c += kBlockThreads)
      yr[c] = layernorm_y(src[c], row_mean, row_rstd, gamma_at(gamma, c), beta_at(beta, c));
  }
}

// [block_cached]
// x, y: (rows, cols), row-major; gamma, beta: (cols) or nullptr; mean, rstd: (rows).
// Block b owns row b. Dynamic shared memory: cached_shared_bytes(cols), the warp states
// (kCachedScratchBytes) then the row. Each thread reads back only the values it cached
// itself, so the row cache needs no barrier of its own.
template <bool kVec4>
__global__ void __launch_bounds__(kBlockThreads)
    block_cached_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                        const float* __restrict__ beta, float* __restrict__ y,
                        float* __restrict__ mean, float* __restrict__ rstd, int cols, float eps) {
  unsigned char* shared = dynamic_shared<unsigned char>();
  Welford* scratch = reinterpret_cast<Welford*>(shared);
  float* cache = reinterpret_cast<float*>(shared + kCachedScratchBytes);
  const size_t offset = static_cast<size_t>(blockIdx.x) * cols;

  Welford s = fold_slice<kVec4>(x + offset, cols, cache);  // eqs. (7)-(9), the one read of x
  s = block_all_reduce(s, scratch);                        // eqs. (10)-(13)
  const float row_rstd = rstd_of(welford_variance(s), eps);
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = s.mean;
    rstd[blockIdx.x] = row_rstd;
  }
  normalize_slice<kVec4>(cache, y + offset, cols, s.mean, row_rstd, gamma, beta);  // eq. (1)
}
// [block_cached]

// [block_uncached]
// Same as block_cached, but without the row cache: the normalization reads x a second time
// (from L2 if the row is still there). For rows longer than shared memory holds.
template <bool kVec4>
__global__ void __launch_bounds__(kBlockThreads)
    block_uncached_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                          const float* __restrict__ beta, float* __restrict__ y,
                          float* __restrict__ mean, float* __restrict__ rstd, int cols, float eps) {
  __shared__ Welford scratch[kBlockWarps];
  const size_t offset = static_cast<size_t>(blockIdx.x) * cols;

  Welford s = fold_slice<kVec4>(x + offset, cols, nullptr);  // eqs. (7)-(9), read 1
  s = block_all_reduce(s, scratch);                          // eqs. (10)-(13)
  const float row_rstd = rstd_of(welford_variance(s), eps);
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = s.mean;
    rstd[blockIdx.x] = row_rstd;
  }
  normalize_slice<kVec4>(x + offset, y + offset, cols, s.mean, row_rstd, gamma, beta);  // read 2
}
// [block_uncached]

// ==========================================================================================
// Launch helpers
// ==========================================================================================

template <int kColsPerLane, int kGroupWidth, bool kVec4>
void launch_warp(const LayerNormArgs& a) {
  constexpr int kRowsPerBlock = kWarpBlockThreads / kGroupWidth;
  launch<warp_per_row_kernel<kColsPerLane, kGroupWidth, kVec4>>(
      dim3(ceil_div(a.rows, kRowsPerBlock)), dim3(kWarpBlockThreads), 0, a.x, a.gamma, a.beta, a.y,
      a.mean, a.rstd, a.rows, a.cols, a.eps);
}

// Whole-warp groups: one instantiation per power-of-2 count of values per lane.
template <bool kVec4>
void launch_warp_full(const LayerNormArgs& a, int cols_per_lane) {
  switch (cols_per_lane) {
    case 4:
      return launch_warp<4, kLanes, kVec4>(a);
    case 8:
      return launch_warp<8, kLanes, kVec4>(a);
    case 16:
      return launch_warp<16, kLanes, kVec4>(a);
    case 32:
      return launch_warp<32, kLanes, kVec4>(a);
    default:
      break;
  }
  if constexpr (!kVec4) {
    if (cols_per_lane == 1) return launch_warp<1, kLanes, false>(a);
    if (cols_per_lane == 2) return launch_warp<2, kLanes, false>(a);
  }
  throw std::logic_error("warp_per_row: no kernel for " + std::to_string(cols_per_lane) +
                         " values per lane");
}

template <auto Kernel>
void launch_block(const LayerNormArgs& a, std::size_t shared_bytes) {
  launch<Kernel>(dim3(a.rows), dim3(kBlockThreads), shared_bytes, a.x, a.gamma, a.beta, a.y, a.mean,
                 a.rstd, a.cols, a.eps);
}

template <bool kVec4>
void launch_cached(const LayerNormArgs& a) {
  constexpr auto kKernel = block_cached_kernel<kVec4>;
  const std::size_t bytes = cached_shared_bytes(a.cols);
  if (bytes > kDefaultDynamicSharedBytes) allow_dynamic_shared_bytes<kKernel>(bytes);
  launch_block<kKernel>(a, bytes);
}

}  // namespace

// ==========================================================================================
// Launchers
// ==========================================================================================

template <>
std::size_t Kernels<kThisBackend>::max_dynamic_shared_bytes() {
  return max_dynamic_shared_bytes_optin();
}

template <>
void Kernels<kThisBackend>::warp_per_row(const LayerNormArgs& a) {
  check_args(a);
  if (a.cols > kWarpMaxCols)
    throw std::invalid_argument("warp_per_row: cols = " + std::to_string(a.cols) +
                                " exceeds its limit of " + std::to_string(kWarpMaxCols) +
                                " (32 lanes x 32 registers)");
  const WarpShape shape = warp_shape(a.cols);
  if (shape.group_width < kLanes) {  // cols <= 16: several rows per warp, one value per lane
    switch (shape.group_width) {
      case 1:
        return launch_warp<1, 1, false>(a);
      case 2:
        return launch_warp<1, 2, false>(a);
      case 4:
        return launch_warp<1, 4, false>(a);
      case 8:
        return launch_warp<1, 8, false>(a);
      case 16:
        return launch_warp<1, 16, false>(a);
      default:
        break;
    }
    throw std::logic_error("warp_per_row: no kernel for groups of " +
                           std::to_string(shape.group_width) + " lanes");
  }
  if (can_vectorize(a) && shape.cols_per_lane % kVec == 0)
    return launch_warp_full<true>(a, shape.cols_per_lane);
  launch_warp_full<false>(a, shape.cols_per_lane);
}

template <>
void Kernels<kThisBackend>::block_cached(const LayerNormArgs& a) {
  check_args(a);
  const std::size_t limit = max_dynamic_shared_bytes();
  if (cached_shared_bytes(a.cols) > limit)
    throw std::invalid_argument("block_cached: cols = " + std::to_string(a.cols) + " needs " +
                                std::to_string(cached_shared_bytes(a.cols)) +
                                " bytes of shared memory, over this device's " +
                                std::to_string(limit) + " (at most " +
                                std::to_string(max_cached_cols(limit)) + " cols)");
  if (can_vectorize(a)) return launch_cached<true>(a);
  launch_cached<false>(a);
}

template <>
void Kernels<kThisBackend>::block_uncached(const LayerNormArgs& a) {
  check_args(a);
  if (can_vectorize(a)) return launch_block<block_uncached_kernel<true>>(a, 0);
  launch_block<block_uncached_kernel<false>>(a, 0);
}

template <>
Strategy Kernels<kThisBackend>::layernorm(const LayerNormArgs& a) {
  check_args(a);
  const Strategy s = choose_strategy(a.cols, max_dynamic_shared_bytes());
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
