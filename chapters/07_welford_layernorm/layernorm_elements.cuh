// Chapter 07 kernels' per-element pieces, shared by the strategies (rungs/): gamma and beta (1
// and 0 where absent), eq. (1) for a 16-byte vector or one element stored as T, and a block
// thread's strided slice of the row folded with Welford's update (a vector's values by two passes
// and one Chan combine) and normalized. Nothing here
// crosses lanes: the block strategies' all-reduce is welford_all_reduce.cuh, the warp
// strategy's its own (rungs/1_warp_per_row.cuh, the chapter's exercise).
// Only templates: the rung files include it, and the build compiles it there, not on its own
// (wb_add_chapter's translation units are the kernel files no other includes).
// Test: ctest --test-dir build -R 07_welford_layernorm --output-on-failure
#pragma once

#include "common/kernel.cuh"
#include "common/vector_types.cuh"

#include "chapters/07_welford_layernorm/layernorm.hpp"
#include "chapters/07_welford_layernorm/layernorm_ladder.hpp"
#include "chapters/07_welford_layernorm/welford.hpp"

namespace wb::ch07 {
namespace {  // internal linkage, as the kernels that use them

template <typename T>
__device__ __forceinline__ float gamma_at(const T* gamma, int c) {
  return gamma != nullptr ? to_float(gamma[c]) : 1.f;
}
template <typename T>
__device__ __forceinline__ float beta_at(const T* beta, int c) {
  return beta != nullptr ? to_float(beta[c]) : 0.f;
}

// [normalize_store]
// Eq. (1) for the kWidth columns c .. c + kWidth of a row, v their values as read (T, widened
// here, exactly), stored to yr as T: one 16-byte vector (gamma and beta loaded as vectors too)
// when kWidth > 1, c then a multiple of kWidth and the pointers aligned; one element when
// kWidth == 1. The store's from_float is the one rounding a 16-bit output adds, eq. (14).
template <typename T, int kWidth>
__device__ __forceinline__ void normalize_store(const T* v, T* yr, int c, float mean, float rstd,
                                                const T* gamma, const T* beta) {
  if constexpr (kWidth == 1) {
    yr[c] = from_float<T>(
        layernorm_y(to_float(v[0]), mean, rstd, gamma_at(gamma, c), beta_at(beta, c)));
  } else {
    static_assert(kWidth == Vec<T>::kWidth, "whole vectors");
    Vec<T> g{}, b{}, q;
    if (gamma != nullptr) g = load_vec(gamma, c);
    if (beta != nullptr) b = load_vec(beta, c);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      const float gk = gamma != nullptr ? to_float(g.v[k]) : 1.f;
      const float bk = beta != nullptr ? to_float(b.v[k]) : 0.f;
      q.v[k] = from_float<T>(layernorm_y(to_float(v[k]), mean, rstd, gk, bk));
    }
    store_vec(yr, c, q);
  }
}
// [normalize_store]

// [vector_stats]
// The statistics of one 16-byte vector's kWidth values (4 floats or 8 halves), eqs. (2)-(3) by
// two passes over registers: the mean is the pairwise float sum of the values times 1 / kWidth
// (a power of 2: exact), scaled before they are summed, so that no sum passes the largest
// value (a row of 3e38 has mean 3e38, as Welford's update gives, not inf); m2 the sum of the
// squared deviations from it. No division: the vector joins the thread's run by one Chan
// combine (eqs. 10-13), one quotient n_b / n per vector, where Welford's update (eqs. 7-9) took
// a reciprocal 1 / n_k per value.
template <typename T>
__device__ __forceinline__ Welford vector_stats(const Vec<T>& q) {
  constexpr int kWidth = Vec<T>::kWidth;
  static_assert((kWidth & (kWidth - 1)) == 0, "1 / kWidth is exact");
  float x[kWidth];
#pragma unroll
  for (int k = 0; k < kWidth; ++k) x[k] = to_float(q.v[k]);
  float sum[kWidth];
#pragma unroll
  for (int k = 0; k < kWidth; ++k) sum[k] = x[k] * (1.f / kWidth);
#pragma unroll
  for (int half = kWidth / 2; half > 0; half /= 2)  // pairwise: log2(kWidth) levels
#pragma unroll
    for (int k = 0; k < half; ++k) sum[k] += sum[k + half];
  const float mean = sum[0];
  float m2 = 0.f;
#pragma unroll
  for (int k = 0; k < kWidth; ++k) m2 = fmaf(x[k] - mean, x[k] - mean, m2);
  return {mean, m2, static_cast<float>(kWidth)};
}
// [vector_stats]

// Thread t's Welford state over columns t, t + 256, ... (or the vectors of kWidth starting at
// kWidth t, kWidth (t + 256), ..., each vector's statistics joined by Chan's combine), each
// element also stored to `cache`, as it was read, when `cache` is not null.
template <typename T, bool kVec>
__device__ Welford fold_slice(const T* xr, int cols, T* cache) {
  constexpr int kWidth = kVec ? Vec<T>::kWidth : 1;
  Welford s = welford_identity();
  for (int c = kWidth * static_cast<int>(threadIdx.x); c < cols; c += kWidth * kBlockThreads) {
    if constexpr (kVec) {
      const Vec<T> q = load_vec(xr, c);
      if (cache != nullptr) store_vec(cache, c, q);
      s = welford_combine(s, vector_stats(q));  // eqs. (10)-(13): the first vector exactly
    } else {
      const T e = xr[c];
      if (cache != nullptr) cache[c] = e;
      s = welford_update(s, to_float(e));
    }
  }
  return s;
}

// Eq. (1) over thread t's slice with the row's statistics, reading the values from `src` (the
// cache or x itself).
template <typename T, bool kVec>
__device__ void normalize_slice(const T* src, T* yr, int cols, RowStats row, const T* gamma,
                                const T* beta) {
  constexpr int kWidth = kVec ? Vec<T>::kWidth : 1;
  for (int c = kWidth * static_cast<int>(threadIdx.x); c < cols; c += kWidth * kBlockThreads) {
    if constexpr (kVec) {
      const Vec<T> q = load_vec(src, c);
      normalize_store<T, kWidth>(q.v, yr, c, row.mean, row.rstd, gamma, beta);
    } else {
      normalize_store<T, 1>(&src[c], yr, c, row.mean, row.rstd, gamma, beta);
    }
  }
}

}  // namespace
}  // namespace wb::ch07
