// Chapter 10, rung 1: the standard backward, Algorithm 3 of the FA1 paper, in five launches.
//
// Computes: dQ, dK, dV from Q, K, V, dO (bh, l, d) and the P (bh, lq, lk) that a standard
//           forward stored (chapter 05's `standard` rung writes it): dV = P^T dO (eq. 1),
//           dP = dO V^T (eq. 2) written to global memory, the softmax's backward row by row,
//           D = rowsum(P * dP) by its definition (eq. 3) and dS = P * (dP - D) (eq. 4) written
//           over dP, then dQ = scale dS K and dK = scale dS^T Q (eq. 5). The four products
//           are chapter 05's tiled matmul with an operand read transposed where the equation
//           has one. A masked key has P = 0, so dS = 0: the mask needs no code here.
// Changed since the previous chapter: nothing new. This is the rung the FA2 backward is
//           measured against: P read, dP and dS written and read are its lq x lk terms, the
//           backward's share of Theorem 2's N^2 (fa2_backward.md, "Counted traffic").
// Launch shapes:
//   matmul_tile_kernel       (chapters/05_fa1_subsum/matmul_tile.cuh) grid (ceil(cols / 64),
//                            ceil(rows / 64), bh), block (32, 8), a 64 x 64 tile of the
//                            product per block.
//   softmax_backward_kernel  grid ceil(bh lq / 8), block (32, 8): a warp per row of dP.
// Limits: 1 <= lq, lk <= 65535 x 64 (the matmul's grid.y); 1 <= d <= 128; bh <= 65535
//           (grid.z); bh x lq <= 2^31 - 1 (the softmax backward's int rows): the rung's limits
//           (its record, at the end of this file); fp32; the forward's P given.
// Memory traffic per head, T(n) = ceil(n / 64) (standard_backward_traffic, below):
//           P read T(d) + 2 times, dP written once and read twice, dS written once and read
//           2 T(d) times; dO read 2 T(lk) times, Q T(lk), K and V T(lq) times; dQ, dK, dV
//           written once.
// Test: ctest --test-dir build -R 10_fa2_backward --output-on-failure
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/kernel.cuh"

#include "chapters/04_fused_qk_softmax/attention_tiles.cuh"
#include "chapters/05_fa1_subsum/matmul_tile.cuh"
#include "chapters/10_fa2_backward/backward_ladder.hpp"
#include "chapters/10_fa2_backward/fa2_backward.hpp"
#include "common/buffer.hpp"

namespace wb::ch10 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

constexpr int kSoftmaxRows = 8;  // rows of the softmax backward's block, a warp each

// [softmax_backward]
// The softmax's backward for row blockIdx.x * 8 + threadIdx.y of p and dp (rows, cols): D =
// sum_j P_j dP_j (eq. 3 by its definition), then dS_j = P_j (dP_j - D) (eq. 4) over dP. Two
// sweeps of the row, as a row longer than the block's registers needs: P and dP read twice.
__global__ void __launch_bounds__(kSoftmaxRows* kWarpSize)
    softmax_backward_kernel(const float* __restrict__ p, float* __restrict__ dp_ds, int rows,
                            int cols) {
  const int row = blockIdx.x * kSoftmaxRows + threadIdx.y;
  if (row >= rows) return;  // whole warps leave together
  const float* p_row = p + std::size_t(row) * cols;
  float* ds_row = dp_ds + std::size_t(row) * cols;
  float d = 0.f;
  for (int j = threadIdx.x; j < cols; j += kWarpSize) d = fmaf(p_row[j], ds_row[j], d);
  d = warp_sum(d);  // every lane holds D
  for (int j = threadIdx.x; j < cols; j += kWarpSize) ds_row[j] = p_row[j] * (ds_row[j] - d);
}
// [softmax_backward]

void launch_standard_backward(const AttentionBackwardArgs& a) {
  using ch05::matmul;
  using ch05::Stored;
  const AttentionShape& s = a.shape;
  if (a.p == nullptr)
    throw std::invalid_argument(
        "standard_backward reads the P a standard forward stored, and none was given");
  const float* q = static_cast<const float*>(a.q);
  const float* k = static_cast<const float*>(a.k);
  const float* v = static_cast<const float*>(a.v);
  const float* d_o = static_cast<const float*>(a.d_o);
  // dP, then dS over it: the lq x lk matrix per head that the FA2 backward never stores.
  DeviceBuffer<float> dp_ds(kThisBackend, s.p_elems());
  matmul<Stored::transposed, Stored::plain>(a.p, d_o, static_cast<float*>(a.dv), s.lk, s.d, s.lq,
                                            1.f, s.bh);  // dV = P^T dO, eq. (1)
  matmul<Stored::plain, Stored::transposed>(d_o, v, dp_ds.data(), s.lq, s.lk, s.d, 1.f,
                                            s.bh);  // dP = dO V^T, eq. (2)
  const int rows = static_cast<int>(s.rows());
  launch<softmax_backward_kernel>(dim3(ceil_div(rows, kSoftmaxRows)),
                                  dim3(kWarpSize, kSoftmaxRows), 0, a.p, dp_ds.data(), rows,
                                  s.lk);  // eqs. (3), (4)
  matmul<Stored::plain, Stored::plain>(dp_ds.data(), k, static_cast<float*>(a.dq), s.lq, s.d, s.lk,
                                       a.scale, s.bh);  // dQ = scale dS K, eq. (5)
  matmul<Stored::transposed, Stored::plain>(dp_ds.data(), q, static_cast<float*>(a.dk), s.lk, s.d,
                                            s.lq, a.scale, s.bh);  // dK = scale dS^T Q
}

// [standard_backward_traffic]
/// The baseline's traffic per head, T(n) = ceil(n / 64) (chapter 05's matmul_tiles; the matmul
/// reads a T(cols) times and b T(rows) times): dV = P^T dO reads P T(d) and dO T(lk) times;
/// dP = dO V^T reads dO T(lk) and V T(lq) times and writes dP; the softmax's backward reads
/// P and dP twice each and writes dS; dQ = scale dS K reads dS T(d) and K T(lq) times; dK =
/// scale dS^T Q reads dS T(d) and Q T(lk) times. The lq x lk terms, 3 T(d) + 4 reads and 2
/// writes (7 and 2 for d <= 64), are the N^2 of Theorem 2 that the FA2 backward removes.
Traffic standard_backward_traffic(const AttentionBackwardArgs& a) {
  const AttentionShape& s = a.shape;
  const std::uint64_t n2 = std::uint64_t(s.lq) * s.lk * sizeof(float);   // P, dP or dS of a head
  const std::uint64_t q_rows = head_rows_bytes(a, std::uint64_t(s.lq));  // Q, dO or dQ
  const std::uint64_t k_rows = head_rows_bytes(a, std::uint64_t(s.lk));  // K, V, dK or dV
  const std::uint64_t t_d = ch05::matmul_tiles(s.d), t_lq = ch05::matmul_tiles(s.lq),
                      t_lk = ch05::matmul_tiles(s.lk);
  const std::uint64_t loaded = n2 * t_d + q_rows * t_lk         // dV = P^T dO
                               + q_rows * t_lk + k_rows * t_lq  // dP = dO V^T
                               + 4 * n2                         // D and dS
                               + n2 * t_d + k_rows * t_lq       // dQ = scale dS K
                               + n2 * t_d + q_rows * t_lk;      // dK = scale dS^T Q
  const std::uint64_t stored = 2 * n2 + q_rows + 2 * k_rows;
  const std::uint64_t bh = std::uint64_t(s.bh);
  return {bh * loaded, bh * stored,
          "per head, T(n) = ceil(n / " + std::to_string(ch05::kMatmulTile) +
              "): P read T(d) + 2 times; dP written, read twice; dS written, read 2 T(d) "
              "times; dO read 2 T(lk), Q T(lk), K and V T(lq) times; dQ, dK, dV written"};
}
// [standard_backward_traffic]

/// Its facts: it reads the P a standard forward stored (its CPU step and floors are the
/// standard backward's).
RungFacts standard_backward_facts() {
  RungFacts facts;
  facts.reads_stored_p = true;
  return facts;
}

}  // namespace

WB_RUNG(AttentionBackwardArgs, standard_backward,
        "the baseline, Algorithm 3: the forward's P read, dP and dS stored, four matmuls and the "
        "softmax's backward, five launches",
        ch05::matmul_baseline_limits(fp32_backward_limits()), &launch_standard_backward,
        &standard_backward_traffic, standard_backward_facts())

}  // namespace wb::ch10
