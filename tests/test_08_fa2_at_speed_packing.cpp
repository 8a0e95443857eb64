// Chapter 08: the rounding of P~ (and of O) to 16 bits on the way into an mma fragment.
// ptx::pack_pair<T> (common/ptx.cuh) rounds two floats to __half or __nv_bfloat16 and packs
// them into one register, claiming round to nearest, ties to even (cvt.rn): here it is held
// bit for bit, as the simulator backend compiles it (common/sim's __floats2half2_rn and
// __floats2bfloat162_rn), against a rounding written below from the IEEE bit patterns alone
// (each 16-bit value decoded from its fields, the nearest found by search, a tie given to the
// even pattern), on every tie between two neighbours of each type (lower neighbour even and
// odd, subnormals and the tie past the largest finite value included), the floats on either
// side of each tie, every 16-bit value itself, a large seeded set of floats, and the specials:
// +-0, +-inf, NaN of any payload (a NaN stays a NaN), overflow (fp16's 65520 is inf, its
// 65519.99 is 65504). A truncating pack (round toward zero) fails on the ties with an odd lower
// neighbour and on every float above a midpoint.
#include <doctest/doctest.h>

// The CUDA dialect (common/sim for the host compiler) before any header that spells
// __host__ __device__, as in a kernel file.
#include "common/kernel.cuh"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/ptx.cuh"

namespace {

/// A 16-bit IEEE format with kExp exponent bits and kFrac fraction bits, described only by
/// those two numbers: binary16 is <5, 10>, bfloat16 <8, 7>.
template <int kExp, int kFrac>
struct Format16 {
  static constexpr int kBias = (1 << (kExp - 1)) - 1;
  static constexpr std::uint16_t kInfBits = static_cast<std::uint16_t>(((1u << kExp) - 1) << kFrac);
  static constexpr std::uint16_t kFracMask = static_cast<std::uint16_t>((1u << kFrac) - 1);

  /// The value of a non-negative pattern p <= kInfBits, exactly, from its fields: subnormal
  /// f 2^(1 - bias - frac), normal (2^frac + f) 2^(e - bias - frac). kInfBits decodes by the
  /// normal rule to 2^(emax + 1 - bias), the value one spacing past the largest finite one:
  /// the neighbour a rounding overflows to.
  static double value(std::uint16_t p) {
    const int e = p >> kFrac;
    const int f = p & kFracMask;
    if (e == 0) return std::ldexp(static_cast<double>(f), 1 - kBias - kFrac);
    return std::ldexp(static_cast<double>(f + (1 << kFrac)), e - kBias - kFrac);
  }

  /// value(p) for every p in [0, kInfBits]: increasing, as IEEE patterns of one sign are.
  static const std::vector<double>& values() {
    static const std::vector<double> table = [] {
      std::vector<double> t(std::size_t{kInfBits} + 1);
      for (std::uint32_t p = 0; p <= kInfBits; ++p) t[p] = value(static_cast<std::uint16_t>(p));
      return t;
    }();
    return table;
  }

  static bool is_nan(std::uint16_t h) {
    return (h & kInfBits) == kInfBits && (h & kFracMask) != 0;
  }

  /// x rounded to nearest, ties to even, as a bit pattern; x not NaN. The largest pattern p
  /// with value(p) <= |x| by bisection, then the nearer of p and p + 1: 2|x| against
  /// value(p) + value(p + 1), both exact in double (neighbours of at most 9 significant bits
  /// within a factor 2 of each other; |x| a float), and on equality the even pattern. p + 1 =
  /// kInfBits is the overflow: |x| at or past the midpoint above the largest finite value
  /// (fp16's 65520) rounds to inf.
  static std::uint16_t round_nearest_even(float x) {
    const std::uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
    const double a = std::fabs(static_cast<double>(x));
    const std::vector<double>& v = values();
    if (a >= v[kInfBits]) return static_cast<std::uint16_t>(sign | kInfBits);
    std::uint32_t lo = 0, hi = kInfBits;  // v[lo] <= a < v[hi]
    while (hi - lo > 1) {
      const std::uint32_t mid = (lo + hi) / 2;
      (v[mid] <= a ? lo : hi) = mid;
    }
    std::uint32_t p = lo;
    if (a != v[lo]) {
      const double twice = 2 * a, midpoint = v[lo] + v[hi];
      p = twice < midpoint ? lo : twice > midpoint ? hi : (lo % 2 == 0 ? lo : hi);
    }
    return static_cast<std::uint16_t>(sign | p);
  }

  /// The float halfway between patterns p and p + 1 (p < kInfBits): exact, one bit more than
  /// the 16-bit type holds, within float's range (bfloat16's last, 2^128 - 2^119, too).
  static float midpoint(std::uint16_t p) {
    return static_cast<float>((value(p) + value(static_cast<std::uint16_t>(p + 1))) / 2);
  }
};
using Half = Format16<5, 10>;
using Bf16 = Format16<8, 7>;

template <typename T>
std::uint32_t pack(float lo, float hi) {
  return wb::ptx::pack_pair<T>(lo, hi);
}

float from_bits(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

/// Every float of `xs` packed twice, in the low half (beside xs[n - 1 - i]) and in the high
/// half (beside xs[i] in the low): each half against the reference, NaN against NaN-ness. The
/// count of mismatches, the first one described in `first`.
template <typename T, typename F>
int mismatches(const std::vector<float>& xs, std::string& first) {
  int wrong = 0;
  const std::size_t n = xs.size();
  for (std::size_t i = 0; i < n; ++i) {
    const float lo = xs[i], hi = xs[n - 1 - i];
    const std::uint32_t bits = pack<T>(lo, hi);
    const std::uint16_t got[2] = {static_cast<std::uint16_t>(bits & 0xffffu),
                                  static_cast<std::uint16_t>(bits >> 16)};
    const float in[2] = {lo, hi};
    for (int h = 0; h < 2; ++h) {
      const bool ok = std::isnan(in[h]) ? F::is_nan(got[h])
                                        : got[h] == F::round_nearest_even(in[h]);
      if (ok) continue;
      if (wrong++ == 0) {
        std::uint32_t b;
        std::memcpy(&b, &in[h], sizeof b);
        char text[160];
        std::snprintf(text, sizeof text, "%.9g (float 0x%08x, %s half) packed as 0x%04x, nearest even 0x%04x",
                      static_cast<double>(in[h]), b, h == 0 ? "low" : "high", got[h],
                      std::isnan(in[h]) ? 0u : F::round_nearest_even(in[h]));
        first = text;
      }
    }
  }
  return wrong;
}

int half_mismatches(const std::vector<float>& xs, std::string& first) {
  return mismatches<__half, Half>(xs, first);
}
int bf16_mismatches(const std::vector<float>& xs, std::string& first) {
  return mismatches<__nv_bfloat16, Bf16>(xs, first);
}

/// Every tie between neighbours p and p + 1 of the format (p from 0 to the largest finite
/// value, the tie above it the overflow's), the floats just below and above it, and every
/// 16-bit value itself; each with both signs.
template <typename F>
std::vector<float> ties_and_values() {
  std::vector<float> xs;
  for (std::uint32_t p = 0; p < F::kInfBits; ++p) {
    const float m = F::midpoint(static_cast<std::uint16_t>(p));
    for (float x : {m, std::nextafter(m, 0.f), std::nextafter(m, std::numeric_limits<float>::infinity()),
                    static_cast<float>(F::value(static_cast<std::uint16_t>(p)))}) {
      xs.push_back(x);
      xs.push_back(-x);
    }
  }
  return xs;
}

/// Seeded floats: any bit pattern (every exponent, inf and NaN among them), and patterns with
/// the exponent in the format's range (from half its smallest subnormal to twice its largest
/// value: there every fraction bit below the format's decides the rounding).
template <typename F>
std::vector<float> seeded(int count, int min_exp, int max_exp) {
  std::mt19937_64 rng(808);
  std::vector<float> xs;
  for (int i = 0; i < count; ++i) {
    const std::uint32_t any = static_cast<std::uint32_t>(rng());
    xs.push_back(from_bits(any));
    const std::uint32_t e = static_cast<std::uint32_t>(
        127 + min_exp + static_cast<int>(rng() % static_cast<std::uint64_t>(max_exp - min_exp + 1)));
    xs.push_back(from_bits((any & 0x807fffffu) | (e << 23)));
  }
  return xs;
}

/// Zeros, infinities, NaNs with the payload high, low (below either format's fraction: a
/// truncation would make it inf) or full, with both signs.
std::vector<float> specials() {
  std::vector<float> xs;
  for (std::uint32_t b : {0x00000000u, 0x7f800000u, 0x7fc00000u, 0x7f800001u, 0x7f802000u,
                          0x7fbfffffu, 0x7fffffffu, 0x7f800fffu})
    for (std::uint32_t s : {0u, 0x80000000u}) xs.push_back(from_bits(b | s));
  return xs;
}

}  // namespace

TEST_SUITE("cpu") {
  TEST_CASE("the independent rounding knows the formats' edges") {
    // The reference itself on values whose rounding the formats' definitions fix.
    CHECK(Half::value(0x7bff) == 65504.0);
    CHECK(Half::value(0x0001) == std::ldexp(1.0, -24));
    CHECK(Half::round_nearest_even(65520.f) == 0x7c00);  // the tie above 65504: to even, inf
    CHECK(Half::round_nearest_even(std::nextafter(65520.f, 0.f)) == 0x7bff);
    CHECK(Half::round_nearest_even(std::ldexp(1.f, -25)) == 0x0000);  // tie with odd 0x0001
    CHECK(Half::round_nearest_even(3 * std::ldexp(1.f, -25)) == 0x0002);
    CHECK(Half::round_nearest_even(1.f + std::ldexp(1.f, -11)) == 0x3c00);  // 1 is even
    CHECK(Half::round_nearest_even(1.f + 3 * std::ldexp(1.f, -11)) == 0x3c02);
    CHECK(Half::round_nearest_even(-0.f) == 0x8000);
    CHECK(Bf16::round_nearest_even(std::numeric_limits<float>::max()) == 0x7f80);
    CHECK(Bf16::round_nearest_even(from_bits(0x3f808000u)) == 0x3f80);  // tie, even below
    CHECK(Bf16::round_nearest_even(from_bits(0x3f818000u)) == 0x3f82);  // tie, odd below
    CHECK(Bf16::round_nearest_even(from_bits(0x00008000u)) == 0x0000);  // subnormal tie
  }

  TEST_CASE("pack_pair rounds to nearest even bit for bit on every half tie and seeded floats") {
    std::string first;
    const std::vector<float> ties = ties_and_values<Half>();
    CHECK(ties.size() == 8 * 0x7c00u);
    CHECK_MESSAGE(half_mismatches(ties, first) == 0, first);
    // Half's exponents run from -25 (half its smallest subnormal, 2^-24) to 16 (past 65504).
    CHECK_MESSAGE(half_mismatches(seeded<Half>(1 << 18, -26, 16), first) == 0, first);
    CHECK_MESSAGE(half_mismatches(specials(), first) == 0, first);
    // Named values: overflow at the tie 65520 (to the even neighbour, past 65504: inf), just
    // under it 65504; the smallest subnormal; -0 keeps its sign; inf stays inf.
    CHECK(pack<__half>(65520.f, std::nextafter(65520.f, 0.f)) == 0x7bff7c00u);
    CHECK(pack<__half>(-65520.f, -1e10f) == 0xfc00fc00u);
    CHECK(pack<__half>(std::ldexp(1.f, -24), -0.f) == 0x80000001u);
    CHECK(pack<__half>(std::numeric_limits<float>::infinity(), 0.f) == 0x00007c00u);
  }

  TEST_CASE("pack_pair rounds to nearest even bit for bit on every bfloat16 tie and seeded floats") {
    std::string first;
    const std::vector<float> ties = ties_and_values<Bf16>();
    CHECK(ties.size() == 8 * 0x7f80u);
    CHECK_MESSAGE(bf16_mismatches(ties, first) == 0, first);
    // bfloat16 has float's exponents: subnormals from 2^-133, the largest 3.39e38.
    CHECK_MESSAGE(bf16_mismatches(seeded<Bf16>(1 << 18, -134, 127), first) == 0,
                  first);
    CHECK_MESSAGE(bf16_mismatches(specials(), first) == 0, first);
    // FLT_MAX is past the midpoint above bfloat16's largest (0x7f7f): inf. A tie with an odd
    // lower neighbour rounds up, with an even one down.
    CHECK(pack<__nv_bfloat16>(std::numeric_limits<float>::max(), from_bits(0x3f818000u)) ==
          0x3f827f80u);
    CHECK(pack<__nv_bfloat16>(from_bits(0x3f808000u), -0.f) == 0x80003f80u);
  }
}
