// Chapter 03, rung 3: the row in registers. Rung 2 with each lane keeping the entries it read:
// x is read once instead of twice, and each lane's (m, d) comes from eq. (1) directly, one exp
// per entry. 16-byte vector accesses where the row allows, and fp16 and bf16 elements.
//
// Computes: y = softmax(x) row-wise, x and y of one element type T (float, __half,
//           __nv_bfloat16), computed in float: each lane summarizes its entries as one block's
//           (m, d) (eq. 1 of block_merge.md, md_stats.cuh's values_stats), the warp merges the
//           pairs (eq. 2), then every lane normalizes the entries it holds and rounds them to
//           T. A fully -inf row gives zeros.
// Changed since rung 2: the row stays in registers between the statistics and the
//           normalization (2 accesses per element instead of 3); 16-byte vectors; 16-bit types.
// Launch shape: one warp per row, 4 warps (128 threads) per block, ceil(rows / 4) blocks; each
//           lane holds cols_per_lane = next_pow2(ceil(cols / 32)) values (1, 2, 4, ..., 32, and
//           64 for 16-bit types: a template parameter; warp_registers_plan in fast_plans.hpp).
// Vectors: when can_vectorize() (both pointers 16-byte aligned, cols a multiple of 16 /
//           sizeof(T)) and each lane holds whole vectors, every access is one 16-byte Vec<T>
//           (common/vector_types.cuh); otherwise one element at a time.
// Limits: rows in [1, 2^31 - 1]; cols in [1, 1024] on fp32 rows, [1, 2048] on 16-bit ones
//           (rows of 4 KiB, common/row_lanes.hpp).
// Memory traffic per element: 1 read + 1 write.
// Test: ctest --test-dir build -R 03_block_merge --output-on-failure
#pragma once

#include <stdexcept>
#include <string>

#include "common/kernel.cuh"
#include "common/row_facts.hpp"
#include "common/vector_types.cuh"

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/03_block_merge/block_merge.hpp"
#include "chapters/03_block_merge/fast_plans.hpp"
#include "chapters/03_block_merge/md_merge.hpp"
#include "chapters/03_block_merge/md_stats.cuh"
#include "chapters/03_block_merge/md_warp_merge.cuh"

namespace wb::ch03 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

constexpr int kRowsPerBlock = 4;  // a warp per row
constexpr int kBlock = kRowsPerBlock * kWarpSize;

// [warp_registers]
// x, y: (rows, cols), row-major. Warp w of block b owns row 4 b + w. With kVec, lane l holds
// the vectors starting at columns kWidth (l + 32 j), j < kColsPerLane / kWidth; else the
// columns l + 32 i, i < kColsPerLane: the warp's accesses are contiguous either way. Entries
// past the row's end are held as -inf: no mass (eq. 3). cols <= 32 kColsPerLane.
template <typename T, int kColsPerLane, bool kVec>
__global__ void __launch_bounds__(kBlock)
    warp_registers_kernel(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
  static_assert(kColsPerLane >= 1 && kColsPerLane <= kMaxColsPerLane<T>, "registers per lane");
  constexpr int kWidth = kVec ? Vec<T>::kWidth : 1;  // elements per access
  static_assert(kColsPerLane % kWidth == 0, "whole vectors per lane");
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int row =
      static_cast<int>(blockIdx.x) * kRowsPerBlock + static_cast<int>(threadIdx.x) / kWarpSize;
  // A warp past the last row still runs its shuffles, holding no entries.
  const bool live = row < rows;
  const T* xr = x + static_cast<size_t>(live ? row : 0) * cols;
  T* yr = y + static_cast<size_t>(live ? row : 0) * cols;

  float v[kColsPerLane];  // this lane's entries: the one read of x
#pragma unroll
  for (int j = 0; j < kColsPerLane / kWidth; ++j) {
    const int c = kWidth * (lane + j * kWarpSize);
    if constexpr (kVec) {  // cols % kWidth == 0: a vector is wholly in or out of the row
      if (live && c < cols) {
        const Vec<T> q = load_vec(xr, c);
#pragma unroll
        for (int k = 0; k < kWidth; ++k) v[kWidth * j + k] = to_float(q.v[k]);
      } else {
#pragma unroll
        for (int k = 0; k < kWidth; ++k) v[kWidth * j + k] = -INFINITY;
      }
    } else {
      v[j] = live && c < cols ? to_float(xr[c]) : -INFINITY;
    }
  }
  MD md = values_stats<kColsPerLane>(v);  // eq. (1): this lane's block
  md = warp_merge(md);                    // eqs. (2), (4): the whole row's (m, d)
  if (!live) return;                      // after the last shuffle

  const float shift = ch01::exp_shift(md.m);  // normalize from the registers
  const float inv_d = ch01::inverse_or_zero(md.d);
#pragma unroll
  for (int j = 0; j < kColsPerLane / kWidth; ++j) {
    const int c = kWidth * (lane + j * kWarpSize);
    if (c >= cols) continue;
    if constexpr (kVec) {
      Vec<T> q;
#pragma unroll
      for (int k = 0; k < kWidth; ++k)
        q.v[k] = from_float<T>(expf(v[kWidth * j + k] - shift) * inv_d);
      store_vec(yr, c, q);
    } else {
      yr[c] = from_float<T>(expf(v[j] - shift) * inv_d);
    }
  }
}
// [warp_registers]

template <typename T, int kColsPerLane, bool kVec>
void launch_registers(const RowArgs& a) {
  launch<warp_registers_kernel<T, kColsPerLane, kVec>>(dim3(ceil_div(a.rows, kRowsPerBlock)),
                                                       dim3(kBlock), 0, static_cast<const T*>(a.x),
                                                       static_cast<T*>(a.y), a.rows, a.cols);
}

// The instantiation for `cols_per_lane` values per lane, the buckets 1, 2, 4, ..., 32 (64 for
// 16-bit types) tried in turn (a template needs the count at compile time); with kVec, only
// those holding whole vectors per lane exist (a float4 per lane from 65 columns on, 8 halves
// from 129).
template <typename T, bool kVec, int kColsPerLane = 1>
void launch_bucket(int cols_per_lane, const RowArgs& a) {
  if constexpr (kColsPerLane > kMaxColsPerLane<T>) {
    throw std::logic_error("warp_registers: no kernel for " + std::to_string(cols_per_lane) +
                           " values per lane" + (kVec ? " in vectors" : ""));
  } else {
    if constexpr (!kVec || kColsPerLane % Vec<T>::kWidth == 0) {
      if (cols_per_lane == kColsPerLane) return launch_registers<T, kColsPerLane, kVec>(a);
    }
    launch_bucket<T, kVec, 2 * kColsPerLane>(cols_per_lane, a);
  }
}

void launch_warp_registers(const RowArgs& a) {
  const RowPlan plan =
      warp_registers_plan(a.cols, a.dtype, can_vectorize(a.x, a.y, a.cols, a.dtype));
  with_element_type(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (plan.vectorized()) return launch_bucket<T, true>(plan.cols_per_lane, a);
    launch_bucket<T, false>(plan.cols_per_lane, a);
  });
}

}  // namespace

WB_ROW_RUNG(RowArgs, warp_registers,
            "the row kept in registers: x read once; 16-byte vectors, 16-bit types",
            warp_row_limits(kFastDtypes), &launch_warp_registers, &row_in_registers)

}  // namespace wb::ch03
