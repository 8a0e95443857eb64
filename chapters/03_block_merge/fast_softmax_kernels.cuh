// Chapter 03 fast kernels: the last rungs of the softmax ladder. The row in registers, 16-byte
// vector loads, fp32, fp16 and bf16 elements, and a dispatcher.
//
// Computes: y = softmax(x) row-wise, x and y of one element type T (float, __half,
//           __nv_bfloat16), computed in float: each thread summarizes its entries as one
//           block's (m, d) (eq. 1 of block_merge.md), the pairs are merged with md_merge
//           (eq. 2), then every thread normalizes its entries and rounds them to T. A fully
//           -inf row gives zeros.
// Changed since the previous rungs (block_merge_kernels.cuh): warp_registers keeps the row in
//           registers, so x is read once (2 accesses per element instead of 3); both rungs move
//           16 bytes per access where the row is aligned (4 floats, 8 halves), and take 16-bit
//           inputs and outputs.
// Launch shapes:
//   warp_registers  one warp per row, 4 warps (128 threads) per block, ceil(rows / 4) blocks;
//                   each lane holds cols_per_lane = next_pow2(ceil(cols / 32)) floats
//                   (1, 2, 4, ..., 32: a template parameter)
//   block_vec       one block of 256 threads per row; rows blocks
//   fast_softmax    the dispatcher: plan_fast_softmax(x, y, cols, dtype) in block_merge.hpp
// Vectors: when can_vectorize() (both pointers 16-byte aligned, cols a multiple of 16 /
//           sizeof(T)) every access is one 16-byte Vec<T> (common/vector_types.cuh);
//           otherwise one element at a time.
// Limits: rows in [1, 2^31 - 4]; cols in [1, 1024] for warp_registers, in [1, 2^30] for
//           block_vec and fast_softmax: their RungLimits in kernel_ladder() (block_merge.hpp),
//           checked before launch.
// Memory traffic per element: warp_registers 1 read + 1 write; block_vec 2 reads + 1 write;
//           fast_softmax that of the rung it picks (dispatched in block_merge.hpp).
// Test: ctest --test-dir build -R 03_block_merge --output-on-failure
#pragma once

#include <stdexcept>
#include <string>

#include "common/kernel.cuh"
#include "common/vector_types.cuh"

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/02_online_softmax/online_update.hpp"
#include "chapters/03_block_merge/block_merge.hpp"
#include "chapters/03_block_merge/md_merge.hpp"

namespace wb::ch03 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

constexpr unsigned kFullMask = 0xffffffffu;

// ==========================================================================================
// The merges: the butterfly of block_merge_kernels.cuh's warp_all_merge and its block
// version, over md_merge (that file is an exercise, so this one does not include it)
// ==========================================================================================

// Every lane passes its pair and gets the merge of the warp's 32 pairs: 5 butterfly steps,
// lanes l and l ^ lane_mask computing md_merge(a, b) and md_merge(b, a), the same bits
// (eq. 5), so all lanes agree.
__device__ MD warp_merge(MD md) {
  for (int lane_mask = kLanes / 2; lane_mask > 0; lane_mask /= 2)
    md = md_merge(md, {__shfl_xor_sync(kFullMask, md.m, lane_mask),
                       __shfl_xor_sync(kFullMask, md.d, lane_mask)});  // eq. (2)
  return md;
}

// Every thread passes its pair and gets the merge of the block's. scratch: kWarps pairs.
template <int kWarps>
__device__ MD block_merge(MD md, MD* scratch) {
  static_assert(kWarps <= kLanes, "the warps' pairs are merged by one warp");
  const int lane = static_cast<int>(threadIdx.x) % kLanes;
  md = warp_merge(md);
  if (lane == 0) scratch[threadIdx.x / kLanes] = md;
  __syncthreads();  // every warp's pair is written before any is read
  md = warp_merge(lane < kWarps ? scratch[lane] : md_identity());  // eq. (3) past the warps
  __syncthreads();  // everyone has read scratch before it could be reused
  return md;
}

// [fast_values_stats]
// Eq. (1) for n values already in registers: the max, then the sum, one exp per value (the
// online update, eq. 1 of chapter 02, spends two, but it must not look at a value twice;
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

// ==========================================================================================
// Rung 3: warp per row, the row in registers. Same as warp_per_row_online, but each lane
// keeps its entries: one read of x instead of two, and each lane's (m, d) in one exp each.
// ==========================================================================================

constexpr int kWarpRegistersRows = 4;  // rows (warps) per block
constexpr int kWarpRegistersBlock = kWarpRegistersRows * kLanes;

// [warp_registers]
// x, y: (rows, cols), row-major. Warp w of block b owns row b * 4 + w. With kVec, lane l
// holds the vectors starting at columns kWidth (l + 32 j), j < kColsPerLane / kWidth; else
// the columns l + 32 i, i < kColsPerLane: a warp's accesses are contiguous either way.
// Entries past the row's end are held as -inf: no mass (eq. 3). cols <= 32 kColsPerLane.
template <typename T, int kColsPerLane, bool kVec>
__global__ void __launch_bounds__(kWarpRegistersBlock)
    warp_registers_kernel(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
  static_assert(kColsPerLane >= 1 && kColsPerLane <= kMaxColsPerLane, "registers per lane");
  constexpr int kWidth = kVec ? Vec<T>::kWidth : 1;  // elements per access
  static_assert(kColsPerLane % kWidth == 0, "whole vectors per lane");
  const int lane = static_cast<int>(threadIdx.x) % kLanes;
  const int row =
      static_cast<int>(blockIdx.x) * kWarpRegistersRows + static_cast<int>(threadIdx.x) / kLanes;
  if (row >= rows) return;  // the whole warp leaves: its 32 lanes share the row
  const T* xr = x + static_cast<size_t>(row) * cols;
  T* yr = y + static_cast<size_t>(row) * cols;

  float v[kColsPerLane];  // this lane's entries: the one read of x
#pragma unroll
  for (int j = 0; j < kColsPerLane / kWidth; ++j) {
    const int c = kWidth * (lane + j * kLanes);
    if constexpr (kVec) {  // cols % kWidth == 0: a vector is wholly in or out of the row
      if (c < cols) {
        const Vec<T> q = load_vec(xr, c);
#pragma unroll
        for (int k = 0; k < kWidth; ++k) v[kWidth * j + k] = to_float(q.v[k]);
      } else {
#pragma unroll
        for (int k = 0; k < kWidth; ++k) v[kWidth * j + k] = -INFINITY;
      }
    } else {
      v[j] = c < cols ? to_float(xr[c]) : -INFINITY;
    }
  }
  MD md = values_stats<kColsPerLane>(v);  // eq. (1): this lane's block
  md = warp_merge(md);                    // eqs. (2), (4): the whole row's (m, d)

  const float shift = ch01::exp_shift(md.m);  // normalize from the registers
  const float inv_d = ch01::inverse_or_zero(md.d);
#pragma unroll
  for (int j = 0; j < kColsPerLane / kWidth; ++j) {
    const int c = kWidth * (lane + j * kLanes);
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

// ==========================================================================================
// Rung 4: block per row with vector loads. Same as block_per_row_online, with 16-byte
// accesses: each vector is one block of kWidth entries, summarized by eq. (1) and merged.
// ==========================================================================================

constexpr int kBlockVecThreads = 256;

// [block_vec]
// x, y: (rows, cols), row-major. Block b owns row b; thread t reads the vectors starting at
// columns kWidth (t + 256 k) (kVec) or the columns t + 256 k.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kBlockVecThreads)
    block_vec_kernel(const T* __restrict__ x, T* __restrict__ y, int cols) {
  constexpr int kWarps = kBlockVecThreads / kLanes;
  constexpr int kWidth = kVec ? Vec<T>::kWidth : 1;
  constexpr int kStride = kWidth * kBlockVecThreads;
  __shared__ MD scratch[kWarps];
  const T* xr = x + static_cast<size_t>(blockIdx.x) * cols;
  T* yr = y + static_cast<size_t>(blockIdx.x) * cols;
  const int first = kWidth * static_cast<int>(threadIdx.x);

  MD md = md_identity();  // pass 1: read x, fold (m, d)
  for (int c = first; c < cols; c += kStride) {
    if constexpr (kVec) {
      const Vec<T> q = load_vec(xr, c);
      float v[kWidth];
#pragma unroll
      for (int k = 0; k < kWidth; ++k) v[k] = to_float(q.v[k]);
      md = md_merge(md, values_stats<kWidth>(v));  // eqs. (1), (2): the vector is a block
    } else {
      md = ch02::online_update(md, to_float(xr[c]));  // chapter 02's update, one entry
    }
  }
  md = block_merge<kWarps>(md, scratch);  // eqs. (2), (4): the whole row's (m, d)

  const float shift = ch01::exp_shift(md.m);  // pass 2: read x again (from L2 when it can)
  const float inv_d = ch01::inverse_or_zero(md.d);
  for (int c = first; c < cols; c += kStride) {
    if constexpr (kVec) {
      Vec<T> q = load_vec(xr, c);
#pragma unroll
      for (int k = 0; k < kWidth; ++k)
        q.v[k] = from_float<T>(expf(to_float(q.v[k]) - shift) * inv_d);
      store_vec(yr, c, q);
    } else {
      yr[c] = from_float<T>(expf(to_float(xr[c]) - shift) * inv_d);
    }
  }
}
// [block_vec]

// ==========================================================================================
// Launch helpers: the dtype and the plan become template arguments
// ==========================================================================================

// The instantiation for `cols_per_lane` values per lane: the buckets 1, 2, 4, ..., 32 tried
// in turn (a template needs the count at compile time); with kVec, only those holding whole
// vectors per lane exist (a float4 per lane from 65 columns on, 8 halves from 129).
template <typename T, bool kVec, int kColsPerLane = 1>
void launch_warp_bucket(int cols_per_lane, const void* x, void* y, int rows, int cols) {
  if constexpr (kColsPerLane > kMaxColsPerLane) {
    throw std::logic_error("warp_registers: no kernel for " + std::to_string(cols_per_lane) +
                           " values per lane" + (kVec ? " in vectors" : ""));
  } else {
    if constexpr (!kVec || kColsPerLane % Vec<T>::kWidth == 0) {
      if (cols_per_lane == kColsPerLane)
        return launch<warp_registers_kernel<T, kColsPerLane, kVec>>(
            dim3(ceil_div(rows, kWarpRegistersRows)), dim3(kWarpRegistersBlock), 0,
            static_cast<const T*>(x), static_cast<T*>(y), rows, cols);
    }
    launch_warp_bucket<T, kVec, 2 * kColsPerLane>(cols_per_lane, x, y, rows, cols);
  }
}

template <typename T>
void launch_warp_plan(const FastPlan& plan, const void* x, void* y, int rows, int cols) {
  if (plan.vectorized) return launch_warp_bucket<T, true>(plan.cols_per_lane, x, y, rows, cols);
  launch_warp_bucket<T, false>(plan.cols_per_lane, x, y, rows, cols);
}

template <typename T>
void launch_block_plan(const FastPlan& plan, const void* x, void* y, int rows, int cols) {
  const auto xt = static_cast<const T*>(x);
  const auto yt = static_cast<T*>(y);
  if (plan.vectorized)
    return launch<block_vec_kernel<T, true>>(dim3(rows), dim3(kBlockVecThreads), 0, xt, yt, cols);
  launch<block_vec_kernel<T, false>>(dim3(rows), dim3(kBlockVecThreads), 0, xt, yt, cols);
}

// Runs `plan` on `a`, with T the C++ type of a.dtype.
void run_plan(const FastPlan& plan, const RowArgs& a) {
  with_element_type(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (plan.path == FastPath::warp_registers)
      return launch_warp_plan<T>(plan, a.x, a.y, a.rows, a.cols);
    launch_block_plan<T>(plan, a.x, a.y, a.rows, a.cols);
  });
}

}  // namespace

// ==========================================================================================
// Launchers
// ==========================================================================================

template <>
void Kernels<kThisBackend>::warp_registers(const RowArgs& a) {
  run_plan(warp_registers_plan(a.x, a.y, a.cols, a.dtype), a);
}

template <>
void Kernels<kThisBackend>::block_vec(const RowArgs& a) {
  run_plan(block_vec_plan(a.x, a.y, a.cols, a.dtype), a);
}

template <>
void Kernels<kThisBackend>::fast_softmax(const RowArgs& a) {
  run_plan(plan_fast_softmax(a.x, a.y, a.cols, a.dtype), a);
}

}  // namespace wb::ch03
