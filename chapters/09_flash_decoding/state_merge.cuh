// Chapter 09: a block's running states merged into its split's partial (O_s, logsumexp_s), eq.
// (4) on (m, l, SS): chapter 03's monoid, which the combine applies across blocks, applied
// within one. Shared by the streaming kernel (a state per key slot) and the tensor-core kernel
// (a state per warp). Device code only (this file compiles to nothing by itself).
// Test: ctest --test-dir build -R 09_flash_decoding --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include <cstddef>

#include "chapters/05_fa1_subsum/fa1.hpp"
#include "chapters/06_fa2_rescaled/fa2.hpp"

namespace wb::ch09 {
namespace {  // device code with internal linkage: one copy per backend's translation unit

// [block_partial]
// states: n_states x R states in shared memory, state t of row r at (t R + r) ld (ld >= d + 2):
// its m, its l, then its SS (d floats); followed by n_states R + R floats of scratch. Every thread
// of the block calls this after writing its states (it opens with the barrier that publishes them):
// thread t < n_states weighs state t of each row, e^{m_t - M} (M the row's largest m); then thread
// c < d sums column c of SS, and l, with those weights, and writes row r's partial of split s: O_s
// = SS / l where l > 0 (a split that saw no key is the merge's identity: the combine reads only its
// logsumexp), logsumexp_s = M + log l. row0: the first of the block's `rows` rows among all (batch,
// head, query) rows; the block has at least d and n_states threads.
__device__ inline void write_block_partial(float* states, int n_states, int R, int rows, int d,
                                           int ld, std::size_t row0, int splits, int s,
                                           float* __restrict__ o_partial,
                                           float* __restrict__ lse_partial) {
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  __syncthreads();                                           // every state is written
  float* weights = states + std::size_t(n_states) * R * ld;  // (n_states x R)
  float* row_max = weights + n_states * R;                   // (R)
  if (tid < n_states)
    for (int r = 0; r < rows; ++r) {
      float m_row = -INFINITY;
      for (int t = 0; t < n_states; ++t) m_row = fmaxf(m_row, states[(t * R + r) * ld]);
      weights[tid * R + r] = ch05::rescale(states[(tid * R + r) * ld], m_row);
      if (tid == 0) row_max[r] = m_row;
    }
  __syncthreads();  // the weights are written
  if (tid >= d) return;
  for (int r = 0; r < rows; ++r) {
    float l_row = 0.f, o = 0.f;
    for (int t = 0; t < n_states; ++t) {
      const float* st = states + (t * R + r) * ld;
      const float weight = weights[t * R + r];
      l_row = fmaf(st[1], weight, l_row);
      o = fmaf(st[2 + tid], weight, o);
    }
    const std::size_t at = (row0 + r) * splits + s;
    if (tid == 0) lse_partial[at] = ch06::logsumexp(row_max[r], l_row);
    if (l_row > 0.f) o_partial[at * d + tid] = o * (1.f / l_row);
  }
}
// [block_partial]

/// The floats write_block_partial reads: n_states x R states of ld floats, their weights and
/// each row's largest m.
__host__ __device__ constexpr std::size_t block_partial_floats(int n_states, int R, int ld) {
  return std::size_t(n_states) * R * ld + std::size_t(n_states) * R + R;
}

}  // namespace
}  // namespace wb::ch09
