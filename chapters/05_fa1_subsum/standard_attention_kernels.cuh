// Chapter 05 baseline: standard attention, Algorithm 0 of the FA1 paper, in three launches.
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
//           (matmul_baseline_limits in fa1.hpp), checked before every launch.
// Memory traffic per head, T(n) = ceil(n / 64) (standard_traffic in fa1.hpp): Q read T(lk)
//           times, K T(lq) times; S written once and read 3 times; P written once and read
//           T(d) times; V read T(lq) times; O written once.
// Test: ctest --test-dir build -R 05_fa1_subsum --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/05_fa1_subsum/fa1.hpp"
#include "chapters/05_fa1_subsum/matmul_tile.cuh"
#include "common/buffer.hpp"

namespace wb::ch05 {

// ==========================================================================================
// Launcher
// ==========================================================================================

template <>
void Kernels<kThisBackend>::standard(const AttentionArgs& a) {
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

}  // namespace wb::ch05
