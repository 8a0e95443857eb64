// Element types of the fast kernels' inputs and outputs, on the host: fp32, fp16 (CUDA's
// __half) and bf16 (__nv_bfloat16). The kernels compute in float whatever the type; 16-bit
// elements are widened on load (exactly) and rounded to nearest even on store.
//
// The host never sees __half or __nv_bfloat16 (they belong to the CUDA headers or the
// simulator): it holds 16-bit elements as their bit patterns, as bytes, and converts with
// common/half.hpp, bit for bit as the GPU does. The kernels' side of the same types (the
// 16-byte vectors, the conversions, Dtype to a C++ type) is common/vector_types.cuh.
// Used by chapter 03's fast softmax rungs and chapter 07's LayerNorm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/half.hpp"

namespace wb {

/// Element type of x and y (and LayerNorm's gamma and beta).
enum class Dtype { fp32, fp16, bf16 };

inline const char* to_string(Dtype t) {
  constexpr const char* kNames[] = {"fp32", "fp16", "bf16"};  // in the enum's order
  return kNames[static_cast<int>(t)];
}

/// Bytes per element: 4 for fp32, 2 for fp16 and bf16.
inline std::size_t dtype_bytes(Dtype t) {
  return t == Dtype::fp32 ? 4 : 2;
}

/// The types a program's `--dtype fp32|fp16|bf16|all` names ("all": the three, fp32 first).
inline std::vector<Dtype> dtypes_of_option(const std::string& option) {
  if (option == "fp32") return {Dtype::fp32};
  if (option == "fp16") return {Dtype::fp16};
  if (option == "bf16") return {Dtype::bf16};
  return {Dtype::fp32, Dtype::fp16, Dtype::bf16};
}

/// One vector access moves 16 bytes (ld.global.v4.b32): 4 floats or 8 halves.
inline constexpr int kVecBytes = 16;
/// Elements of `t` in one 16-byte vector.
inline int vec_width(Dtype t) {
  return kVecBytes / static_cast<int>(dtype_bytes(t));
}
/// Whether p may be the address of a vector access: 16-byte aligned (nullptr, an absent
/// operand, counts as aligned).
inline bool aligned_for_vec(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % kVecBytes == 0;
}

/// The rounding of a float result to `dtype` on store, half an ulp:
/// |round(v) - v| <= half_ulp max(|v|, tiny). half_ulp is 2^-11 for fp16 and 2^-8 for bf16, 0
/// for fp32 (a float result is the output). Below `tiny` the spacing stops shrinking: fp16's
/// smallest normal 2^-14, under which its spacing is a fixed 2^-24; float's FLT_MIN for bf16
/// (whose exponent range is float's) and fp32. Tests add it to a float bound.
struct OutputRounding {
  double half_ulp;
  double tiny;
};
inline OutputRounding output_rounding(Dtype t) {
  const double float_min = std::numeric_limits<float>::min();  // FLT_MIN = 2^-126
  switch (t) {
    case Dtype::fp16:
      return {1.0 / 2048, 1.0 / 16384};  // 2^-11, 2^-14
    case Dtype::bf16:
      return {1.0 / 256, float_min};  // 2^-8
    case Dtype::fp32:
      break;
  }
  return {0.0, float_min};
}

/// x as the bytes of `dtype` elements (16-bit types rounded to nearest even, as the GPU's
/// conversions do): what a kernel reads.
inline std::vector<unsigned char> encode_elements(const std::vector<float>& x, Dtype dtype) {
  std::vector<unsigned char> bytes(x.size() * dtype_bytes(dtype));
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (dtype == Dtype::fp32) {
      std::memcpy(&bytes[4 * i], &x[i], 4);
    } else {
      const std::uint16_t bits = dtype == Dtype::fp16 ? to_half_bits(x[i]) : to_bf16_bits(x[i]);
      std::memcpy(&bytes[2 * i], &bits, 2);
    }
  }
  return bytes;
}

/// `count` elements of `dtype` at `bytes`, widened to float (exactly).
inline std::vector<float> decode_elements(const unsigned char* bytes, std::size_t count,
                                          Dtype dtype) {
  std::vector<float> y(count);
  for (std::size_t i = 0; i < count; ++i) {
    if (dtype == Dtype::fp32) {
      std::memcpy(&y[i], bytes + 4 * i, 4);
    } else {
      std::uint16_t bits;
      std::memcpy(&bits, bytes + 2 * i, 2);
      y[i] = dtype == Dtype::fp16 ? half_bits_to_float(bits) : bf16_bits_to_float(bits);
    }
  }
  return y;
}

/// x rounded to `dtype` and back: the values a kernel sees.
inline std::vector<float> round_elements(const std::vector<float>& x, Dtype dtype) {
  const std::vector<unsigned char> bytes = encode_elements(x, dtype);
  return decode_elements(bytes.data(), x.size(), dtype);
}

}  // namespace wb
