// 16-bit floating point on the host: IEEE binary16 ("half", CUDA's __half) and bfloat16
// (CUDA's __nv_bfloat16) as bit patterns, converted to and from float.
//
// Tests make half inputs from float on the CPU and read half outputs back with these; the
// simulator's __half and __nv_bfloat16 (common/sim/half.hpp) convert with the same two
// functions in `fp16_detail`, so the CPU, the simulator and the GPU agree bit for bit:
//   - narrowing rounds to nearest, ties to even (cvt.rn, __float2half_rn, __float2bfloat16_rn),
//     keeps subnormals, overflows to infinity, and turns every NaN into the canonical NaN
//     0x7fff (what the CUDA headers' conversions produce);
//   - widening is exact; a half NaN becomes the canonical float NaN 0x7fffffff, as
//     cuda_fp16.hpp's __half2float does, and a bfloat16 NaN keeps its bits (bits << 16).
// No CUDA or simulator header is needed.
#pragma once

#include <cstdint>
#include <cstring>

namespace wb {
namespace fp16_detail {

/// A 16-bit binary format with `kExpBits` exponent bits and `kFracBits` fraction bits:
/// binary16 is <5, 10>, bfloat16 is <8, 7>.
template <int kExpBits, int kFracBits>
struct Format {
  static_assert(1 + kExpBits + kFracBits == 16, "a 16-bit format");
  static constexpr int kFrac = kFracBits;
  static constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  static constexpr int kMinExp = 1 - kBias;  // exponent of the smallest normal number
  static constexpr std::uint16_t kSign = 0x8000u;
  static constexpr std::uint16_t kInf =
      static_cast<std::uint16_t>(((1u << kExpBits) - 1u) << kFracBits);
  static constexpr std::uint16_t kCanonicalNaN = 0x7fffu;  // all exponent and fraction bits set
};
using Binary16 = Format<5, 10>;
using Bfloat16 = Format<8, 7>;

/// Rounds sign * m * 2^em (m > 0) to the nearest value of format F, ties to even: the one
/// rounding every half and bfloat16 conversion in the workbook goes through.
template <typename F>
std::uint16_t round_scaled(bool negative, std::uint64_t m, int em) {
  constexpr int kFracBits = F::kFrac;
  const std::uint16_t sign = negative ? F::kSign : 0;
  const int e = 63 - __builtin_clzll(m) + em;  // floor(log2 |v|)
  // The result is N * 2^q: q is the spacing of the format's numbers around |v|, fixed below
  // the smallest normal exponent (the subnormals).
  const int q = (e > F::kMinExp ? e : F::kMinExp) - kFracBits;
  const int shift = q - em;  // bits of m below the spacing
  std::uint64_t n = 0;
  if (shift <= 0) {
    n = m << -shift;  // exact: fewer than kFracBits + 1 significant bits
  } else if (shift <= 64) {
    const std::uint64_t rest = shift == 64 ? m : m & ((std::uint64_t{1} << shift) - 1);
    const std::uint64_t tie = std::uint64_t{1} << (shift - 1);
    n = shift == 64 ? 0 : m >> shift;
    if (rest > tie || (rest == tie && (n & 1u) != 0)) ++n;  // to nearest, ties to even
  }  // else |v| < 2^(q-1), under half a spacing: zero
  // Encoding: a subnormal is N itself; a normal is ((e - kMinExp) << kFracBits) + N with N's
  // leading bit included, which also carries a round-up into the next binade (or infinity).
  const std::uint64_t exp_field = static_cast<std::uint64_t>(q + kFracBits - F::kMinExp);
  const std::uint64_t bits = (exp_field << kFracBits) + n;
  if (bits >= F::kInf) return static_cast<std::uint16_t>(sign | F::kInf);  // overflow
  return static_cast<std::uint16_t>(sign | bits);
}

/// `v` (any double, so any float exactly) rounded to format F; NaN gives the canonical NaN.
template <typename F>
std::uint16_t round_to_bits(double v) {
  std::uint64_t u;
  std::memcpy(&u, &v, sizeof u);
  const bool negative = (u >> 63) != 0;
  const int biased = static_cast<int>((u >> 52) & 0x7ffu);
  const std::uint64_t frac = u & ((std::uint64_t{1} << 52) - 1);
  if (biased == 0x7ff) {
    return frac != 0 ? F::kCanonicalNaN
                     : static_cast<std::uint16_t>((negative ? F::kSign : 0) | F::kInf);
  }
  if (biased == 0 && frac == 0) return negative ? F::kSign : 0;
  if (biased == 0) return round_scaled<F>(negative, frac, -1074);  // double subnormal
  return round_scaled<F>(negative, frac | (std::uint64_t{1} << 52), biased - 1075);
}

/// An integer rounded to format F (CUDA's __int2half_rn, __ll2bfloat16_rn, ...): one
/// rounding, where going through double would round twice for |i| > 2^53.
template <typename F>
std::uint16_t round_integer_to_bits(long long i) {
  if (i == 0) return 0;
  const bool negative = i < 0;
  const std::uint64_t m =
      negative ? 0 - static_cast<std::uint64_t>(i) : static_cast<std::uint64_t>(i);
  return round_scaled<F>(negative, m, 0);
}
template <typename F>
std::uint16_t round_unsigned_to_bits(unsigned long long u) {
  return u == 0 ? 0 : round_scaled<F>(false, u, 0);
}

/// The exact float value of a binary16 bit pattern (NaN: the canonical float NaN).
inline float binary16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t frac = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0x1f) {
    bits = frac != 0 ? 0x7fffffffu : (sign | 0x7f800000u);
  } else if (exp != 0) {
    bits = sign | ((exp + 127 - 15) << 23) | (frac << 13);
  } else if (frac == 0) {
    bits = sign;
  } else {  // subnormal: normalize, float has the range for it
    std::uint32_t e = 127 - 15 + 1;
    while ((frac & 0x400u) == 0) {
      frac <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((frac & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

/// The exact float value of a bfloat16 bit pattern: bfloat16 is the top half of a float.
inline float bfloat16_to_float(std::uint16_t b) {
  const std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace fp16_detail

/// The binary16 (__half) bit pattern nearest to x, ties to even (as __float2half_rn).
inline std::uint16_t to_half_bits(float x) {
  return fp16_detail::round_to_bits<fp16_detail::Binary16>(x);
}
/// The float value of a binary16 bit pattern, exactly (as __half2float).
inline float half_bits_to_float(std::uint16_t h) {
  return fp16_detail::binary16_to_float(h);
}
/// The bfloat16 (__nv_bfloat16) bit pattern nearest to x, ties to even (as
/// __float2bfloat16_rn).
inline std::uint16_t to_bf16_bits(float x) {
  return fp16_detail::round_to_bits<fp16_detail::Bfloat16>(x);
}
/// The float value of a bfloat16 bit pattern, exactly (as __bfloat162float).
inline float bf16_bits_to_float(std::uint16_t b) {
  return fp16_detail::bfloat16_to_float(b);
}

/// x rounded to the nearest half and back: the value a kernel sees after a half store.
inline float round_to_half(float x) {
  return half_bits_to_float(to_half_bits(x));
}
/// x rounded to the nearest bfloat16 and back.
inline float round_to_bf16(float x) {
  return bf16_bits_to_float(to_bf16_bits(x));
}

}  // namespace wb
