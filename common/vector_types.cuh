// The kernels' side of common/dtype.hpp: float in registers, T in memory (T = float, __half
// or __nv_bfloat16), 16-byte vectors of T, and a Dtype turned into T for a launch.
//
// Include after (or instead of) common/kernel.cuh, in a kernel file. Everything here has
// internal linkage, like the chapters' kernels: a kernel file is compiled once per backend,
// and __half names CUDA's type in one translation unit and the simulator's in the other.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>

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
// 16-bit values held in registers
// ------------------------------------------------------------------------------------------

// [keep_narrow]
/// A kernel that holds a row of 16-bit values in registers (two to a 32-bit register, as a
/// vector load leaves them) and widens each value twice, once for the statistics and once for
/// the output, calls this between the two. It tells the compiler that the registers change here,
/// though no instruction runs, so the floats widened before cannot be reused after: the compiler
/// widens again (one instruction per value) instead of keeping every widened float alive beside
/// the packed pair, which takes the row's registers from N / 2 to 3 N / 2. Chapter 07's
/// warp_per_row with 64 halves a lane (nvcc 13, sm_90): 125-127 registers with the row held as
/// floats, 72 (fp16) and 106 (bf16) with it held as loaded but without this call, 56 with it,
/// so 9 blocks of 4 warps fit on an SM instead of 4. Results are unchanged; for floats, and in
/// the simulator (no registers to allocate), it does nothing.
template <typename T, int N>
__device__ __forceinline__ void keep_narrow(T (&v)[N]) {
#if defined(__CUDACC__)
  if constexpr (sizeof(T) == 2 && N % 2 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 2) {
      std::uint32_t pair;
      std::memcpy(&pair, &v[i], sizeof pair);
      asm volatile("" : "+r"(pair));  // an empty asm that "writes" the pair: a compiler barrier
      std::memcpy(&v[i], &pair, sizeof pair);
    }
  }
#else
  (void)v;
#endif
}
// [keep_narrow]

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

/// with_element_type, and whether a row's accesses are 16-byte vectors (a plan's vectorized())
/// as a compile-time flag: f(T{}, std::true_type{}) where `vectors`, else
/// f(T{}, std::false_type{}). In f, `decltype(vec)::value` names the flag.
template <typename F>
void with_element_type_and_vectors(Dtype dtype, bool vectors, F&& f) {
  with_element_type(dtype, [&](auto tag) {
    if (vectors) return f(tag, std::true_type{});
    f(tag, std::false_type{});
  });
}

}  // namespace
}  // namespace wb
