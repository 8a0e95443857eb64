// Chapter 03 fast kernels: the last rungs of the softmax ladder. The row in registers, 16-byte
// vector loads, fp32, fp16 and bf16 elements, and a dispatcher.
//
// Computes: y = softmax(x) row-wise, x and y of one element type T (float, __half,
//           __nv_bfloat16), computed in float: each thread summarizes its entries as one
//           block's (m, d) (eq. 1 of block_merge.md), the pairs are merged with md_merge
//           (eq. 2), then every thread normalizes its entries and rounds them to T. A fully
//           -inf row gives zeros.
// Changed since the previous rungs (block_merge_kernels.cuh): warp_registers keeps the row in
//           registers, so x is read once (2 accesses per element instead of 3); lane_groups
//           gives short rows fewer lanes, several rows per warp, so that every lane holds a
//           whole vector; block_cached keeps a long row in shared memory, so x is read once
//           there too. All move 16 bytes per access where the row is aligned (4 floats, 8
//           halves), and take 16-bit inputs and outputs.
// Launch shapes:
//   warp_registers  one warp per row, 4 warps (128 threads) per block, ceil(rows / 4) blocks;
//                   each lane holds cols_per_lane = next_pow2(ceil(cols / 32)) floats
//                   (1, 2, 4, ..., 32, and 64 for 16-bit types: a template parameter)
//   lane_groups     the same kernel with groups of G = 1, 2, 4, 8, 16 or 32 lanes per row
//                   holding 16-byte vectors (row_lanes in common/row_lanes.hpp): 128 / G
//                   rows per block; rows that take no vectors run warp_registers' plan
//   block_vec       one block of 256 threads per row; rows blocks; 64 bytes of dynamic
//                   shared memory (the warps' (m, d) pairs)
//   block_cached    the same, plus the row: cols elements of dynamic shared memory, opted in
//                   above 48 KiB up to the device's limit (227 KiB on an H100)
//   fast_softmax    the dispatcher: plan_fast_softmax in block_merge.hpp
// Vectors: when can_vectorize() (both pointers 16-byte aligned, cols a multiple of 16 /
//           sizeof(T)) every access is one 16-byte Vec<T> (common/vector_types.cuh);
//           otherwise one element at a time.
// Limits: rows in [1, 2^31 - 1]; cols in [1, 1024] for warp_registers and lane_groups on
//           fp32 rows, [1, 2048] on 16-bit ones (rows of 4 KiB), a row
//           of at most the opt-in limit less 64 bytes for block_cached, in [1, 2^30] for
//           block_vec and fast_softmax: their RungLimits in kernel_ladder() (block_merge.hpp),
//           checked before launch.
// Memory traffic per element: warp_registers, lane_groups, block_cached 1 read + 1 write;
//           block_vec 2 reads + 1 write; fast_softmax that of the rung it picks (dispatched in
//           block_merge.hpp).
// Test: ctest --test-dir build -R 03_block_merge --output-on-failure
#pragma once

#include <stdexcept>
#include <string>

#include "common/kernel.cuh"
#include "common/shared_memory.cuh"
#include "common/vector_types.cuh"

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/02_online_softmax/online_update.hpp"
#include "chapters/03_block_merge/block_merge.hpp"
#include "chapters/03_block_merge/md_merge.hpp"
#include "chapters/03_block_merge/md_warp_merge.cuh"

namespace wb::ch03 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

// ==========================================================================================
// The block's merge, over md_warp_merge.cuh's warp_merge (the butterfly of
// block_merge_kernels.cuh's warp_all_merge: that file is an exercise, so this one does not
// include it)
// ==========================================================================================

// Every thread passes its pair and gets the merge of the block's. scratch: kWarps pairs.
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

// ==========================================================================================
// Rungs 3 and 4: the row in registers. warp_registers is warp_per_row_online with each lane
// keeping its entries: one read of x instead of two, and each lane's (m, d) in one exp each.
// lane_groups gives a short row a group of fewer lanes, several rows per warp.
// ==========================================================================================

constexpr int kWarpRegistersRows = 4;  // warps per block
constexpr int kWarpRegistersBlock = kWarpRegistersRows * kWarpSize;

// [warp_registers]
// x, y: (rows, cols), row-major. A group of kGroup lanes owns a row (kGroup = 32: a warp), the
// block's 128 / kGroup rows in order. With kVec, lane l of a group holds the vectors starting
// at columns kWidth (l + kGroup j), j < kColsPerLane / kWidth; else the columns l + kGroup i,
// i < kColsPerLane: a group's accesses are contiguous either way. Entries past the row's end
// are held as -inf: no mass (eq. 3). cols <= kGroup kColsPerLane.
template <typename T, int kColsPerLane, bool kVec, int kGroup>
__global__ void __launch_bounds__(kWarpRegistersBlock)
    warp_registers_kernel(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
  static_assert(kColsPerLane >= 1 && kColsPerLane <= kMaxColsPerLane<T>, "registers per lane");
  constexpr int kWidth = kVec ? Vec<T>::kWidth : 1;  // elements per access
  static_assert(kColsPerLane % kWidth == 0, "whole vectors per lane");
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  const int row = static_cast<int>(blockIdx.x) * (kWarpRegistersBlock / kGroup) +
                  static_cast<int>(threadIdx.x) / kGroup;
  // A group past the last row still takes part in its warp's shuffles, holding no entries.
  const bool live = row < rows;
  const T* xr = x + static_cast<size_t>(live ? row : 0) * cols;
  T* yr = y + static_cast<size_t>(live ? row : 0) * cols;

  float v[kColsPerLane];  // this lane's entries: the one read of x
#pragma unroll
  for (int j = 0; j < kColsPerLane / kWidth; ++j) {
    const int c = kWidth * (lane + j * kGroup);
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
  md = warp_merge<kGroup>(md);            // eqs. (2), (4): the whole row's (m, d)
  if (!live) return;                      // after the last shuffle

  const float shift = ch01::exp_shift(md.m);  // normalize from the registers
  const float inv_d = ch01::inverse_or_zero(md.d);
#pragma unroll
  for (int j = 0; j < kColsPerLane / kWidth; ++j) {
    const int c = kWidth * (lane + j * kGroup);
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
// Rungs 5 and 6: block per row with vector loads. block_vec is block_per_row_online with
// 16-byte accesses: each vector is one block of kWidth entries, summarized by eq. (1) and
// merged. block_cached keeps the row it read in shared memory and normalizes from there.
// ==========================================================================================

// [block_vec]
// x, y: (rows, cols), row-major. Block b owns row b; thread t reads the vectors starting at
// columns kWidth (t + 256 k) (kVec) or the columns t + 256 k. Dynamic shared memory: the 8
// warps' (m, d) pairs, then (kCached) the row as read, cols elements of T.
template <typename T, bool kVec, bool kCached>
__global__ void __launch_bounds__(kBlockVecThreads)
    block_vec_kernel(const T* __restrict__ x, T* __restrict__ y, int cols) {
  constexpr int kWarps = kBlockVecThreads / kWarpSize;
  constexpr int kWidth = kVec ? Vec<T>::kWidth : 1;
  constexpr int kStride = kWidth * kBlockVecThreads;
  MD* scratch = dynamic_shared<MD>();
  T* cache = reinterpret_cast<T*>(scratch + kWarps);  // 16-byte aligned (kCachedScratchBytes)
  const T* xr = x + static_cast<size_t>(blockIdx.x) * cols;
  T* yr = y + static_cast<size_t>(blockIdx.x) * cols;
  const int first = kWidth * static_cast<int>(threadIdx.x);

  MD md = md_identity();  // pass 1: read x (the one read, with kCached), fold (m, d)
  for (int c = first; c < cols; c += kStride) {
    if constexpr (kVec) {
      const Vec<T> q = load_vec(xr, c);
      if constexpr (kCached) store_vec(cache, c, q);
      float v[kWidth];
#pragma unroll
      for (int k = 0; k < kWidth; ++k) v[k] = to_float(q.v[k]);
      md = md_merge(md, values_stats<kWidth>(v));  // eqs. (1), (2): the vector is a block
    } else {
      const T e = xr[c];
      if constexpr (kCached) cache[c] = e;
      md = ch02::online_update(md, to_float(e));  // chapter 02's update, one entry
    }
  }
  // eqs. (2), (4): the whole row's (m, d). Its barriers also make each thread's cached
  // entries visible (a thread reads back only its own anyway: the same columns in pass 2).
  md = block_merge<kWarps>(md, scratch);

  // pass 2: x again, from the cache, or from global memory (L2 when it can)
  const T* src = kCached ? cache : xr;
  const float shift = ch01::exp_shift(md.m);
  const float inv_d = ch01::inverse_or_zero(md.d);
  for (int c = first; c < cols; c += kStride) {
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
// [block_vec]

// ==========================================================================================
// Launch helpers: the dtype and the plan become template arguments
// ==========================================================================================

template <typename T, int kColsPerLane, bool kVec, int kGroup>
void launch_registers(const void* x, void* y, int rows, int cols) {
  launch<warp_registers_kernel<T, kColsPerLane, kVec, kGroup>>(
      dim3(ceil_div(rows, kWarpRegistersBlock / kGroup)), dim3(kWarpRegistersBlock), 0,
      static_cast<const T*>(x), static_cast<T*>(y), rows, cols);
}

// Whole-warp groups: the instantiation for `cols_per_lane` values per lane, the buckets 1, 2,
// 4, ..., 32 (64 for 16-bit types) tried in turn (a template needs the count at compile time); with
// kVec, only those holding whole vectors per lane exist (a float4 per lane from 65 columns on, 8
// halves from 129).
template <typename T, bool kVec, int kColsPerLane = 1>
void launch_warp_bucket(int cols_per_lane, const void* x, void* y, int rows, int cols) {
  if constexpr (kColsPerLane > kMaxColsPerLane<T>) {
    throw std::logic_error("warp_registers: no kernel for " + std::to_string(cols_per_lane) +
                           " values per lane" + (kVec ? " in vectors" : ""));
  } else {
    if constexpr (!kVec || kColsPerLane % Vec<T>::kWidth == 0) {
      if (cols_per_lane == kColsPerLane)
        return launch_registers<T, kColsPerLane, kVec, kWarpSize>(x, y, rows, cols);
    }
    launch_warp_bucket<T, kVec, 2 * kColsPerLane>(cols_per_lane, x, y, rows, cols);
  }
}

// Narrow groups (lane_groups' aligned rows of at most 16 vectors): one 16-byte vector per lane.
template <typename T>
void launch_narrow_group(int group_width, const void* x, void* y, int rows, int cols) {
  constexpr int kPerLane = Vec<T>::kWidth;
  switch (group_width) {
    case 1:
      return launch_registers<T, kPerLane, true, 1>(x, y, rows, cols);
    case 2:
      return launch_registers<T, kPerLane, true, 2>(x, y, rows, cols);
    case 4:
      return launch_registers<T, kPerLane, true, 4>(x, y, rows, cols);
    case 8:
      return launch_registers<T, kPerLane, true, 8>(x, y, rows, cols);
    case 16:
      return launch_registers<T, kPerLane, true, 16>(x, y, rows, cols);
    default:
      break;
  }
  throw std::logic_error("lane_groups: no kernel for groups of " + std::to_string(group_width) +
                         " lanes");
}

template <typename T, bool kVec>
void launch_register_plan(const FastPlan& plan, const void* x, void* y, int rows, int cols) {
  if constexpr (kVec) {
    if (plan.group_width < kWarpSize)
      return launch_narrow_group<T>(plan.group_width, x, y, rows, cols);
  }
  launch_warp_bucket<T, kVec>(plan.cols_per_lane, x, y, rows, cols);
}

// block_vec or block_cached (kCached: the row in dynamic shared memory, opted in above 48 KiB).
template <typename T, bool kVec, bool kCached>
void launch_block(const void* x, void* y, int rows, int cols) {
  constexpr auto kKernel = block_vec_kernel<T, kVec, kCached>;
  const std::size_t bytes = kCached ? cached_shared_bytes(cols, sizeof(T)) : kCachedScratchBytes;
  if (bytes > kDefaultDynamicSharedBytes) allow_dynamic_shared_bytes<kKernel>(bytes);
  launch<kKernel>(dim3(rows), dim3(kBlockVecThreads), bytes, static_cast<const T*>(x),
                  static_cast<T*>(y), cols);
}

// Runs `plan` on `a`, with T the C++ type of a.dtype.
void run_plan(const FastPlan& plan, const RowArgs& a) {
  with_element_type(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    const bool vec = plan.vectorized;
    switch (plan.path) {
      case FastPath::warp_registers:
        if (vec) return launch_register_plan<T, true>(plan, a.x, a.y, a.rows, a.cols);
        return launch_register_plan<T, false>(plan, a.x, a.y, a.rows, a.cols);
      case FastPath::block_vec:
        if (vec) return launch_block<T, true, false>(a.x, a.y, a.rows, a.cols);
        return launch_block<T, false, false>(a.x, a.y, a.rows, a.cols);
      case FastPath::block_cached:
        if (vec) return launch_block<T, true, true>(a.x, a.y, a.rows, a.cols);
        return launch_block<T, false, true>(a.x, a.y, a.rows, a.cols);
    }
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
void Kernels<kThisBackend>::lane_groups(const RowArgs& a) {
  run_plan(lane_groups_plan(a.x, a.y, a.cols, a.dtype), a);
}

template <>
void Kernels<kThisBackend>::block_vec(const RowArgs& a) {
  run_plan(block_vec_plan(a.x, a.y, a.cols, a.dtype), a);
}

template <>
void Kernels<kThisBackend>::block_cached(const RowArgs& a) {
  run_plan(block_cached_plan(a.x, a.y, a.cols, a.dtype), a);
}

template <>
std::size_t Kernels<kThisBackend>::max_dynamic_shared_bytes() {
  return max_dynamic_shared_bytes_optin();
}

template <>
void Kernels<kThisBackend>::fast_softmax(const RowArgs& a) {
  run_plan(plan_fast_softmax(a.x, a.y, a.cols, a.dtype, max_dynamic_shared_bytes()), a);
}

}  // namespace wb::ch03
