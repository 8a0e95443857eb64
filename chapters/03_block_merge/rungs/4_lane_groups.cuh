// Chapter 03, rung 4: lane groups. Rung 3 gives a short row the whole warp, most lanes holding
// nothing; here a row of at most 16 vectors takes a group of that many lanes (rounded up to a
// power of 2), each lane one whole 16-byte vector, and a warp serves 32 / G rows at once.
//
// Computes: y = softmax(x) row-wise, x and y of one element type T (float, __half,
//           __nv_bfloat16), computed in float: each lane summarizes its vector as one block's
//           (m, d) (eq. 1 of block_merge.md), the group merges its lanes' pairs (eq. 2), then
//           every lane normalizes its vector and rounds it to T. A fully -inf row gives zeros.
// Changed since rung 3: a group of G = 1, 2, 4, 8 or 16 lanes per row (row_lanes in
//           common/row_lanes.hpp), so every lane works at 32 to 256 columns; rows of 17
//           vectors or more, and rows that take no vectors, run rung 3's kernel (its record).
// Launch shape: blocks of 128 threads, 128 / G rows per block, ceil(rows / (128 / G)) blocks.
// Vectors: always (lane_groups_plan in fast_plans.hpp): a lane holds one 16-byte Vec<T>.
// Limits: rows in [1, 2^31 - 1]; cols in [1, 1024] on fp32 rows, [1, 2048] on 16-bit ones.
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

constexpr int kBlock = 4 * kWarpSize;  // 4 warps, 128 / kGroup rows

// [lane_groups]
// x, y: (rows, cols), row-major. A group of kGroup lanes owns a row, the block's 128 / kGroup
// rows in order; lane l of a group holds the vector starting at column kWidth l: the group's
// accesses are contiguous. A lane past the row's end holds -inf: no mass (eq. 3).
// cols <= kGroup kWidth.
template <typename T, int kGroup>
__global__ void __launch_bounds__(kBlock)
    lane_groups_kernel(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
  static_assert(kGroup >= 1 && kGroup < kWarpSize && (kGroup & (kGroup - 1)) == 0,
                "a group is a power-of-2 slice of a warp");
  constexpr int kWidth = Vec<T>::kWidth;  // elements per access, one access per lane
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  const int row =
      static_cast<int>(blockIdx.x) * (kBlock / kGroup) + static_cast<int>(threadIdx.x) / kGroup;
  // A group past the last row still takes part in its warp's shuffles, holding no entries.
  const bool live = row < rows;
  const T* xr = x + static_cast<size_t>(live ? row : 0) * cols;
  T* yr = y + static_cast<size_t>(live ? row : 0) * cols;

  float v[kWidth];  // this lane's vector: the one read of x
  const int c = kWidth * lane;
  if (live && c < cols) {  // cols % kWidth == 0: a vector is wholly in or out of the row
    const Vec<T> q = load_vec(xr, c);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) v[k] = to_float(q.v[k]);
  } else {
#pragma unroll
    for (int k = 0; k < kWidth; ++k) v[k] = -INFINITY;
  }
  MD md = values_stats<kWidth>(v);  // eq. (1): this lane's block
  md = warp_merge<kGroup>(md);      // eqs. (2), (4): the group's, the whole row's (m, d)
  if (!live || c >= cols) return;   // after the last shuffle; nothing to store past the row

  const float shift = ch01::exp_shift(md.m);  // normalize from the registers
  const float inv_d = ch01::inverse_or_zero(md.d);
  Vec<T> q;
#pragma unroll
  for (int k = 0; k < kWidth; ++k) q.v[k] = from_float<T>(expf(v[k] - shift) * inv_d);
  store_vec(yr, c, q);
}
// [lane_groups]

template <typename T, int kGroup>
void launch_group(const RowArgs& a) {
  launch<lane_groups_kernel<T, kGroup>>(dim3(ceil_div(a.rows, kBlock / kGroup)), dim3(kBlock), 0,
                                        static_cast<const T*>(a.x), static_cast<T*>(a.y), a.rows,
                                        a.cols);
}

void launch_lane_groups(const RowArgs& a) {
  const RowPlan plan = lane_groups_plan(a.cols, a.dtype, can_vectorize(a.x, a.y, a.cols, a.dtype));
  // The whole warp (rows of 17 vectors or more, or of scalars): rung 3's kernel.
  if (plan.threads == kWarpSize) return Rungs<kThisBackend>::warp_registers().launch(a);
  with_element_type(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    switch (plan.threads) {
      case 1:
        return launch_group<T, 1>(a);
      case 2:
        return launch_group<T, 2>(a);
      case 4:
        return launch_group<T, 4>(a);
      case 8:
        return launch_group<T, 8>(a);
      case 16:
        return launch_group<T, 16>(a);
      default:
        break;
    }
    throw std::logic_error("lane_groups: no kernel for groups of " + std::to_string(plan.threads) +
                           " lanes");
  });
}

}  // namespace

WB_ROW_RUNG(RowArgs, lane_groups,
            "short rows share a warp: a group of 1 to 16 lanes per row, each lane a whole 16-byte "
            "vector, so every lane works at 32 to 256 columns",
            warp_row_limits(kFastDtypes), &launch_lane_groups, &row_in_registers)

}  // namespace wb::ch03
