// Chapter 07, rung 1 (strategy 1): a group of lanes per row, the row in registers. Each lane
// loads its values once, folds them with Welford's update (16-byte vectors each by two passes,
// joined by Chan's combine), the group all-reduces the states by shuffles (Chan's combine), and
// each lane normalizes the values it still holds.
//
// Computes: y = (x - mean) * rstd * gamma + beta row-wise, eq. (1) of welford_layernorm.md,
//           with mean and m2 per lane from Welford's update (eqs. 7-9; with 16-byte vectors,
//           each vector's two-pass statistics joined by Chan's combine) and Chan's combine
//           across lanes (eqs. 10-13), rstd = 1 / sqrt(m2 / cols + eps); also writes the
//           per-row mean and rstd (what a backward pass needs). x, gamma, beta and y are of
//           one element type T (float, __half, __nv_bfloat16), mean and rstd float; computed
//           in float: T is widened on load (exactly), y rounded once on store.
// Changed since the previous chapter: softmax's (m, d) merge (chapter 03) becomes the Welford
//           combine; chapters 04-06 are attention, this chapter goes back to a row operation.
// Launch shape: blocks of 128 threads; a group of G lanes per row (G = 1..32, a power of 2,
//           warp_shape in layernorm_ladder.hpp), 128 / G rows per block,
//           ceil(rows / (128 / G)) blocks; up to 32 floats or 64 16-bit values per lane.
// Vectors: 16-byte Vec<T> loads and stores (common/vector_types.cuh: 4 floats or 8 halves)
//           when cols is a multiple of the width and every pointer is 16-byte aligned
//           (can_vectorize), scalar accesses otherwise.
// Limits: rows in [1, 2^31 - 1]; cols in [1, 1024] (fp32; [1, 2048] for 16-bit rows: 4 KiB).
// Memory traffic per element: 1 read + 1 write; gamma and beta read once per row, from cache
//           after the first rows; mean and rstd one float each per row (x_read_once).
// Test: ctest --test-dir build -R 07_welford_layernorm --output-on-failure
#pragma once

#include <stdexcept>
#include <string>

#include "common/kernel.cuh"
#include "common/row_facts.hpp"
#include "common/vector_types.cuh"

#include "chapters/07_welford_layernorm/layernorm.hpp"
#include "chapters/07_welford_layernorm/layernorm_elements.cuh"
#include "chapters/07_welford_layernorm/layernorm_ladder.hpp"
#include "chapters/07_welford_layernorm/welford.hpp"

namespace wb::ch07 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

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
  static_assert(
      kGroupWidth >= 1 && kGroupWidth <= kWarpSize && (kGroupWidth & (kGroupWidth - 1)) == 0,
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
      // A lane's live values are a prefix of its slots (c grows with j), so slot j is the
      // run's access j + 1, and the quotients below are constants of the unrolled loop: no
      // division, and no reciprocal either, on the chain of means.
      if constexpr (kVec) {
        const Vec<T> q = load_vec(xr, c);
#pragma unroll
        for (int k = 0; k < kWidth; ++k) v[kWidth * j + k] = q.v[k];
        // The vector's own statistics by two passes, joined to the j vectors before it by
        // Chan's combine, n_b / n = 1 / (j + 1): a chain of one combine per vector, where
        // Welford's update made one step per value (eqs. 10-13).
        s = welford_combine_weighted(s, vector_stats(q), 1.f / static_cast<float>(j + 1));
      } else {
        v[j] = xr[c];
        s = welford_update(s, to_float(v[j]), 1.f / static_cast<float>(j + 1));  // (7)-(9)
      }
    }
  }
  if constexpr (kVec) keep_narrow(v);    // widened again to normalize (common/vector_types.cuh)
  s = group_all_reduce<kGroupWidth>(s);  // eqs. (10)-(13)
  if (!live) return;                     // after the last shuffle
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

// The arguments are within the rung's limits, checked before the launch by run_rung.
void launch_warp_per_row(const LayerNormArgs& a) {
  const RowPlan plan = warp_per_row_plan(a.cols, a.dtype, can_vectorize(a));
  with_element_type(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (plan.threads < kWarpSize) {
      if (plan.vectorized()) return launch_warp_narrow<T, true>(a, plan.threads);
      return launch_warp_narrow<T, false>(a, plan.threads);
    }
    if (plan.vectorized()) return launch_warp_full<T, true>(a, plan.cols_per_lane);
    launch_warp_full<T, false>(a, plan.cols_per_lane);
  });
}

}  // namespace

WB_ROW_RUNG(LayerNormArgs, warp_per_row,
            "the row in registers, Chan's combine by warp shuffles: x read once",
            warp_row_limits(kLayerNormDtypes), &launch_warp_per_row, &x_read_once)

}  // namespace wb::ch07
