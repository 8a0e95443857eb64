// Chapter 05, rung 1: standard attention, Algorithm 0 of the FA1 paper, in three launches.
//
// Computes: O = softmax(scale Q K^T) V for Q: (bh, lq, d), K, V: (bh, lk, d), the way a
//           framework does without fusion: S = scale Q K^T written to global memory,
//           chapter 01's softmax (its warp_shuffle rung) reads S and writes P, and O = P V
//           reads P. Both matmuls are one tiled kernel. P is an output; S lives in a scratch
//           buffer of the call.
// Changed since the previous chapter: nothing new. This is the rung FlashAttention is
//           measured against: its lq x lk matrices are the N^2 term of Theorem 2
//           (fa1_subsum.md, "IO complexity"), counted here rather than asserted.
// Launch shapes:
//   matmul_tile_kernel  (matmul_tile.cuh) grid (ceil(cols / 64), ceil(rows / 64), bh); block
//                       (32, 8). A block computes a 64 x 64 tile of the product, the depth
//                       in chunks of 32 through static shared memory (16.1 KiB); thread
//                       (x, y) owns rows y + 8 r (r < 8) and columns x + 32 c (c < 2).
//   softmax             chapter 01's warp_shuffle: one block of 256 threads per row of S.
// Limits: 1 <= lq, lk <= 65535 x 64 (the matmul's grid.y); 1 <= d <= 128; bh <= 65535
//           (grid.z); bh x lq rows <= 2^31 - 1 (the softmax's grid): the rung's limits
//           (its record, at the end of this file), checked before every launch.
// Memory traffic per head, T(n) = ceil(n / 64) (standard_traffic, below): Q read T(lk)
//           times, K T(lq) times; S written once and read 3 times; P written once and read
//           T(d) times; V read T(lq) times; O written once.
// Test: ctest --test-dir build -R 05_fa1_subsum --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include <cstdint>
#include <string>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/05_fa1_subsum/fa1.hpp"
#include "chapters/05_fa1_subsum/matmul_tile.cuh"
#include "common/buffer.hpp"

namespace wb::ch05 {
namespace {  // the launcher has internal linkage: one copy per backend's translation unit

void launch_standard(const AttentionArgs& a) {
  const AttentionShape& s = a.shape;  // within matmul_baseline_limits: rows() fits an int
  // S, one lq x lk matrix per head: the memory (and the traffic) that FlashAttention saves.
  DeviceBuffer<float> scores(kThisBackend, s.p_elems());
  const float* q = static_cast<const float*>(a.q);
  matmul<Stored::plain, Stored::transposed>(q, static_cast<const float*>(a.k), scores.data(), s.lq,
                                            s.lk, s.d, a.scale, s.bh);
  ch01::Rungs<kThisBackend>::warp_shuffle().launch(
      RowArgs{scores.data(), a.p, static_cast<int>(s.rows()), s.lk, Dtype::fp32});
  matmul<Stored::plain, Stored::plain>(a.p, static_cast<const float*>(a.v),
                                       static_cast<float*>(a.o), s.lq, s.d, s.lk, 1.f, s.bh);
}

// [standard_traffic]
/// The baseline's traffic, Algorithm 0 of the FA1 paper in three launches, per head with
/// T(n) = ceil(n / kMatmulTile): S = scale Q K^T reads Q once per 64 keys and K once per 64
/// queries and writes S; chapter 01's softmax reads S three times and writes P; O = P V reads P
/// once per 64 columns of O and V once per 64 queries and writes O. The lq x lk terms are
/// Theorem 2's N^2: S written, read 3 times, P written, read once (for d <= 64).
Traffic standard_traffic(const AttentionArgs& a) {
  const std::uint64_t lq = static_cast<std::uint64_t>(a.shape.lq);
  const std::uint64_t lk = static_cast<std::uint64_t>(a.shape.lk);
  const std::uint64_t f = sizeof(float);
  const std::uint64_t s = lq * lk * f;  // S or P of one head
  const std::uint64_t q_or_o = head_rows_bytes(a, lq), k_or_v = head_rows_bytes(a, lk);
  const std::uint64_t bh = static_cast<std::uint64_t>(a.shape.bh);
  const std::uint64_t t_lq = matmul_tiles(a.shape.lq), t_lk = matmul_tiles(a.shape.lk);
  const std::uint64_t loaded = q_or_o * t_lk + k_or_v * t_lq                   // S = scale Q K^T
                               + 3 * s                                         // the softmax
                               + s * matmul_tiles(a.shape.d) + k_or_v * t_lq;  // O = P V
  return {bh * loaded, bh * (2 * s + q_or_o),
          "per head, T(n) = ceil(n / " + std::to_string(kMatmulTile) +
              "): S = scale Q K^T reads Q T(lk) times and K T(lq) times, writes S; the softmax "
              "reads S 3 times, writes P; O = P V reads P T(d) times and V T(lq) times, writes O"};
}
// [standard_traffic]

}  // namespace

// Three launches, grid.z = bh for the two matmuls (its CUDA limit 65535).
WB_RUNG(AttentionArgs, standard,
        "the baseline, Algorithm 0: S = scale Q K^T stored, chapter 01's softmax S -> P, "
        "O = P V, three launches",
        matmul_baseline_limits(attention_limits({Dtype::fp32}, ch04::kMaxHeadDim, {}, 65535,
                                                /*causal=*/false, kWritesO | kWritesP)),
        &launch_standard, &standard_traffic)

}  // namespace wb::ch05
