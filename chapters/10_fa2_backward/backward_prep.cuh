// Chapter 10: the backward's small kernels, shared by its rungs (this file compiles to nothing
// by itself; each kernel file includes it): the D kernel of eq. (3), which also zeroes the float
// dQ the main kernels add into, and the 16-bit rungs' final conversion of that dQ.
#pragma once

#include "common/kernel.cuh"
#include "common/vector_types.cuh"

#include "chapters/04_fused_qk_softmax/attention_tiles.cuh"
#include "common/rung_args.hpp"
#include "common/tile_shape.cuh"

namespace wb::ch10 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

constexpr int kPrepRows = 8;  // rows of the D kernel's block, a warp each

// D_i = rowsum(dO_i * O_i), eq. (3), in float, and dQ_i = 0 (the main kernel adds into it).
// o, d_o: (rows, d) of T; d_row: (rows); dq: (rows, d) float.
template <typename T>
__global__ void __launch_bounds__(kPrepRows* kWarpSize)
    backward_prep_kernel(const T* __restrict__ o, const T* __restrict__ d_o,
                         float* __restrict__ d_row, float* __restrict__ dq, int rows, int d) {
  const int row = blockIdx.x * kPrepRows + threadIdx.y;
  if (row >= rows) return;  // whole warps leave together
  const std::size_t base = std::size_t(row) * d;
  float sum = 0.f;
  for (int c = threadIdx.x; c < d; c += kWarpSize) {
    sum = fmaf(to_float(d_o[base + c]), to_float(o[base + c]), sum);
    dq[base + c] = 0.f;
  }
  sum = warp_sum(sum);
  if (threadIdx.x == 0) d_row[row] = sum;
}

template <typename T>
void launch_backward_prep(const T* o, const T* d_o, float* d_row, float* dq, int rows, int d) {
  launch<backward_prep_kernel<T>>(dim3(ceil_div(rows, kPrepRows)),
                                  dim3(kWarpSize, kPrepRows), 0, o, d_o, d_row, dq, rows, d);
}

// dq = dq_accum rounded once to T. n elements.
template <typename T>
__global__ void __launch_bounds__(256)
    dq_convert_kernel(const float* __restrict__ dq_accum, T* __restrict__ dq, std::size_t n) {
  const std::size_t e = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e < n) dq[e] = from_float<T>(dq_accum[e]);
}

template <typename T>
void launch_dq_convert(const float* dq_accum, T* dq, std::size_t n) {
  constexpr int kThreads = 256;
  launch<dq_convert_kernel<T>>(dim3(unsigned((n + kThreads - 1) / kThreads)), dim3(kThreads), 0,
                               dq_accum, dq, n);
}

/// A 16-bit rung's launches, once with_tile_shape (common/tile_shape.cuh) has found the element
/// type T and head dimension D the arguments take (its refusals naming `rung` and, unless
/// 16-byte aligned, the buffers `rows`): the D kernel (dQ's float scratch zeroed), then
/// main(T{}, std::integral_constant<int, D>{}) (the rung's kernel, adding into that scratch),
/// then dQ rounded once to T.
template <typename Main>
void launch_16bit_backward(const AttentionBackwardArgs& a, const char* rung,
                           std::initializer_list<const void*> rows, const char* rows_named,
                           Main&& main) {
  with_tile_shape(rung, a.dtype, a.shape.d, rows, rows_named, [&](auto t, auto d) {
    using T = decltype(t);
    const AttentionShape& s = a.shape;
    launch_backward_prep(static_cast<const T*>(a.o), static_cast<const T*>(a.d_o), a.d_row,
                         a.dq_accum, s.bh * s.lq, s.d);
    main(t, d);
    launch_dq_convert(a.dq_accum, static_cast<T*>(a.dq), s.q_elems());
  });
}

}  // namespace
}  // namespace wb::ch10
