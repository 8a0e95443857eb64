// Chapter 10: what the backward's rungs share besides their kernels (those are in
// backward_prep.cuh): the limits of the fp32 rungs and of the 16-bit ones, the tensor-core
// rungs' tiles, and the traffic of a backward that gives a block to each K/V tile.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "chapters/04_fused_qk_softmax/fused_softmax.hpp"
#include "chapters/10_fa2_backward/fa2_backward.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"

namespace wb::ch10 {

/// The fp32 rungs' limits (standard_backward adds its matmul's): any d up to chapter 04's limit,
/// the causal mask, bh on grid.y; the rows of D and dQ (bh x lq) counted in an int.
inline RungLimits fp32_backward_limits() {
  RungLimits l = attention_limits({Dtype::fp32}, ch04::kMaxHeadDim, {}, ch04::kMaxBatchHeads,
                                  /*causal=*/true, 0);
  l.max_rows = INT_MAX;
  return l;
}

/// The 16-bit rungs' limits: their tiles take d = 64 or 128; otherwise as the fp32 rungs'.
inline RungLimits tensor_core_backward_limits() {
  RungLimits l = attention_limits({Dtype::fp16, Dtype::bf16}, 0, {64, 128}, ch04::kMaxBatchHeads,
                                  /*causal=*/true, 0);
  l.max_rows = INT_MAX;
  return l;
}

/// The tensor-core rungs' tiles, Br query rows by Bc keys whatever d.
inline TileShape backward_tensor_core_tiles(int) {
  return {kTensorCoreRows, kTensorCoreKeys};
}

/// The traffic of a backward whose main kernel gives a block to each (K/V tile of bc keys,
/// head) and walks the Q tiles of br rows it sees (eq. 7). The D kernel: O and dO read once, D
/// written (a float per row) and the float dQ zeroed (written once). Per block: its K and V
/// rows read once and its dK, dV rows written once; per Q tile: the tile's Q and dO rows and
/// their lse and D read, and every dQ element of the tile added into by one float atomic,
/// which the simulator runs as a load and a compare-and-swap (8 bytes read, 4 written; the
/// GPU's RED.ADD is one read-modify-write at L2). With `convert`, the float dQ read once more
/// and written in the element type.
inline Traffic backward_tiles_traffic(const AttentionBackwardArgs& a, int br, int bc,
                                      bool convert) {
  const AttentionShape& s = a.shape;
  const std::uint64_t bh = std::uint64_t(s.bh), f = sizeof(float);
  const std::uint64_t q_floats = std::uint64_t(s.lq) * s.d * f;
  Traffic t{0, 0,
            "D kernel: O, dO read once, D and dQ (zeroed, float) written once; per K/V tile of " +
                std::to_string(bc) +
                " keys and head: K, V read and dK, dV written once; per Q "
                "tile of " +
                std::to_string(br) +
                " rows it visits: Q, dO, lse, D read once, dQ added into by float atomics" +
                (convert ? "; dQ read once and written in the element type" : "")};
  t.loaded += bh * 2 * head_rows_bytes(a, std::uint64_t(s.lq));
  t.stored += bh * (std::uint64_t(s.lq) * f + q_floats);
  for (int j0 = 0; j0 < s.lk; j0 += bc) {
    const std::uint64_t keys = std::uint64_t(std::min(bc, s.lk - j0));
    std::uint64_t loaded = 2 * head_rows_bytes(a, keys), stored = 2 * head_rows_bytes(a, keys);
    for (int it = first_q_tile(j0, s.lq, s.lk, br, a.causal); it * br < s.lq; ++it) {
      const std::uint64_t rows = std::uint64_t(std::min(br, s.lq - it * br));
      loaded += 2 * head_rows_bytes(a, rows) + 2 * rows * f + 2 * rows * s.d * f;
      stored += rows * s.d * f;
    }
    t.loaded += bh * loaded;
    t.stored += bh * stored;
  }
  if (convert) {
    t.loaded += bh * q_floats;
    t.stored += bh * head_rows_bytes(a, std::uint64_t(s.lq));
  }
  return t;
}

/// fa2_backward_tensor_core and fa2_backward_mma: Bc = Br = 64, 16-bit elements, dQ converted
/// at the end.
inline Traffic fa2_backward_tensor_core_traffic(const AttentionBackwardArgs& a) {
  return backward_tiles_traffic(a, kTensorCoreRows, kTensorCoreKeys, /*convert=*/true);
}

}  // namespace wb::ch10
