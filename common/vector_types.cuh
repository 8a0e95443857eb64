// The kernels' side of common/dtype.hpp: float in registers, T in memory (T = float, __half
// or __nv_bfloat16), 16-byte vectors of T, and a Dtype turned into T for a launch.
//
// Include after (or instead of) common/kernel.cuh, in a kernel file. Everything here has
// internal linkage, like the chapters' kernels: a kernel file is compiled once per backend,
// and __half names CUDA's type in one translation unit and the simulator's in the other.
#pragma once

#include <stdexcept>

#include "common/dtype.hpp"
#include "common/kernel.cuh"

namespace wb {
namespace {

// ------------------------------------------------------------------------------------------
// Elements: widening to float is exact; narrowing rounds to nearest even
// ------------------------------------------------------------------------------------------

__device__ __forceinline__ float to_float(float v) {
  return v;
}
__device__ __forceinline__ float to_float(__half v) {
  return __half2float(v);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

/// v rounded to T, to nearest even (the only rounding a 16-bit output adds).
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// ------------------------------------------------------------------------------------------
// 16-byte vectors
// ------------------------------------------------------------------------------------------

// [vec]
/// kVecBytes (16) bytes of T: 4 floats or 8 halves. Aligned to its size, so that copying one
/// is a single 128-bit access (ld.global.v4 / st.global.v4) on the GPU.
template <typename T>
struct alignas(kVecBytes) Vec {
  static constexpr int kWidth = kVecBytes / static_cast<int>(sizeof(T));
  T v[kWidth];
};
static_assert(sizeof(Vec<float>) == kVecBytes && sizeof(Vec<__half>) == kVecBytes &&
                  sizeof(Vec<__nv_bfloat16>) == kVecBytes,
              "a vector is exactly one 16-byte access");

/// The kWidth elements p[c .. c + kWidth), c a multiple of kWidth, p 16-byte aligned.
template <typename T>
__device__ __forceinline__ Vec<T> load_vec(const T* p, int c) {
  return *reinterpret_cast<const Vec<T>*>(p + c);
}
template <typename T>
__device__ __forceinline__ void store_vec(T* p, int c, const Vec<T>& q) {
  *reinterpret_cast<Vec<T>*>(p + c) = q;
}
// [vec]

// ------------------------------------------------------------------------------------------
// Launchers: the runtime Dtype becomes the template argument T
// ------------------------------------------------------------------------------------------

/// Calls f(T{}) with T the C++ element type of `dtype`: float, __half or __nv_bfloat16. In f,
/// `using T = decltype(tag);` names it.
template <typename F>
void with_element_type(Dtype dtype, F&& f) {
  switch (dtype) {
    case Dtype::fp32:
      return f(float{});
    case Dtype::fp16:
      return f(__half{});
    case Dtype::bf16:
      return f(__nv_bfloat16{});
  }
  throw std::invalid_argument("unknown element type");
}

}  // namespace
}  // namespace wb
