// The 16-bit conversions the tensor-core tests (tests/sim/test_ptx*.cpp, test_wmma.cpp) build
// their operands and compare their bits with, and the check of a product's float sums.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
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

/// One element of a tensor-core product, D = C + sum over kk < k of x(kk) y(kk), from 16-bit
/// factors (`factors(kk)`: the pair x(kk), y(kk) as floats): each product exact, added to C one
/// at a time in float, so `got` is that in-order sum bit for bit, and within the bound of the
/// order, |D - exact| <= gamma_k (|C| + sum |x y|), gamma_k = k u / (1 - k u), u = 2^-24
/// (Higham, recursive summation). Returns the exact sum.
template <typename Factors>
double check_product_sum(float got, float c, int k, Factors&& factors) {
  const double u = std::ldexp(1.0, -24), gamma = k * u / (1 - k * u);
  double exact = c, magnitude = std::fabs(c);
  float in_order = c;
  for (int kk = 0; kk < k; ++kk) {
    const auto [x, y] = factors(kk);
    exact += static_cast<double>(x) * y;
    magnitude += std::fabs(static_cast<double>(x) * y);
    in_order += x * y;  // an exact product, one rounding per addition
  }
  REQUIRE(std::isfinite(got));
  REQUIRE(std::fabs(got - exact) <= gamma * magnitude);
  REQUIRE(got == in_order);  // the documented order, bit for bit
  return exact;
}

}  // namespace wb::test
