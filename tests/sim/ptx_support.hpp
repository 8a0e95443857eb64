// The 16-bit conversions the PTX wrappers' tests (tests/sim/test_ptx*.cpp) build their operands
// and compare their bits with.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/kernel.cuh"

namespace wb::test {

/// x rounded to the 16-bit type T (__half or __nv_bfloat16).
template <typename T>
T to16(float x) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half(x);
  } else {
    return __float2bfloat16(x);
  }
}

/// The bits of a 16-bit value.
template <typename T>
std::uint16_t bits_of(T x) {
  std::uint16_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

}  // namespace wb::test
