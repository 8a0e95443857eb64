// The 16-bit float types: every conversion bit for bit against references written
// independently of common/half.hpp, the arithmetic's single rounding, and the types in kernels
// (loads, stores and shuffles of 2- and 4-byte values).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/half.hpp"
#include "common/kernel.cuh"

namespace {

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// Reference: a binary16 pattern's value from its definition, in double arithmetic.
double half_value(std::uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
  const double s = sign != 0 ? -1.0 : 1.0;
  if (exp == 0x1f) return frac != 0 ? std::nan("") : s * HUGE_VAL;
  if (exp == 0) return s * std::ldexp(frac, -24);  // subnormal: frac * 2^-14 * 2^-10
  return s * std::ldexp(1024 + frac, exp - 25);
}

/// Reference: float -> binary16 as cuda_fp16.hpp's host path spells it (bit manipulation with
/// a remainder, a different algorithm from common/half.hpp's).
std::uint16_t cuda_float2half_rn(float f) {
  const std::uint32_t x = bits_of(f);
  std::uint32_t u = x & 0x7fffffffu, remainder, result;
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  if (u >= 0x7f800000u) {
    remainder = 0;
    result = u == 0x7f800000u ? (sign | 0x7c00u) : 0x7fffu;
  } else if (u > 0x477fefffu) {  // overflows
    remainder = 0x80000000u;
    result = sign | 0x7bffu;
  } else if (u >= 0x38800000u) {  // normal
    remainder = u << 19;
    u -= 0x38000000u;
    result = sign | (u >> 13);
  } else if (u < 0x33000001u) {  // zero
    remainder = u;
    result = sign;
  } else {  // subnormal
    const std::uint32_t exponent = u >> 23, shift = 0x7eu - exponent;
    const std::uint32_t mantissa = (u & 0x7fffffu) | 0x800000u;
    remainder = mantissa << (32 - shift);
    result = (sign | (mantissa >> shift)) & 0xffffu;
  }
  if (remainder > 0x80000000u || (remainder == 0x80000000u && (result & 1u) != 0)) ++result;
  return static_cast<std::uint16_t>(result);
}

/// Reference: float -> bfloat16, the top 16 bits rounded on the bottom 16 (cuda_bf16.hpp).
std::uint16_t cuda_float2bfloat16_rn(float f) {
  const std::uint32_t x = bits_of(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  std::uint32_t r = x >> 16;
  const std::uint32_t remainder = x << 16;
  if (remainder > 0x80000000u || (remainder == 0x80000000u && (r & 1u) != 0)) ++r;
  return static_cast<std::uint16_t>(r);
}

/// The float patterns a conversion test walks: a stride through all 2^32 (about 1M) and every
/// pattern near the boundaries of the 16-bit formats (max, min normal, min subnormal, ties).
std::vector<std::uint32_t> float_patterns() {
  std::vector<std::uint32_t> p;
  for (std::uint64_t u = 0; u < (std::uint64_t{1} << 32); u += 4099)
    p.push_back(static_cast<std::uint32_t>(u));
  const float centers[] = {65504.0f,  65520.0f,    0x1p-14f,  0x1p-24f,  0x1p-25f,  1.0f,
                           0x1.01p0f, 0x1.fep127f, 0x1p-126f, 0x1p-133f, 0x1p-134f, 0x1p-149f};
  for (float c : centers) {
    for (float s : {c, -c}) {
      const std::uint32_t b = bits_of(s);
      for (std::uint32_t d = 0; d < 4096; ++d) {
        p.push_back(b + d);
        p.push_back(b - d);
      }
    }
  }
  for (std::uint32_t d = 0; d < 4096; ++d) {  // tiny values, of both signs
    p.push_back(d);
    p.push_back(0x80000000u | d);
  }
  return p;
}

}  // namespace

TEST_CASE("every half bit pattern widens exactly and narrows back unchanged" *
          doctest::test_suite("half")) {
  for (std::uint32_t i = 0; i < 0x10000u; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const float f = wb::half_bits_to_float(h);
    const double ref = half_value(h);
    CAPTURE(h);
    if (std::isnan(ref)) {
      REQUIRE(bits_of(f) == 0x7fffffffu);                   // cuda_fp16.hpp's canonical float NaN
      REQUIRE(wb::to_half_bits(f) == 0x7fffu);              // and the canonical half NaN back
      REQUIRE(__half_as_ushort(__ushort_as_half(h)) == h);  // the type keeps the bits
      continue;
    }
    REQUIRE(static_cast<double>(f) == ref);
    REQUIRE(std::signbit(f) == ((h & 0x8000u) != 0));
    REQUIRE(wb::to_half_bits(f) == h);
    // The simulator's __half converts through the same functions.
    const __half sh = __ushort_as_half(h);
    REQUIRE(bits_of(__half2float(sh)) == bits_of(f));
    REQUIRE(__half_as_ushort(__float2half(f)) == h);
    REQUIRE(__half_as_ushort(__float2half_rn(f)) == h);
  }
}

TEST_CASE("every bfloat16 bit pattern widens exactly and narrows back unchanged" *
          doctest::test_suite("half")) {
  for (std::uint32_t i = 0; i < 0x10000u; ++i) {
    const auto b = static_cast<std::uint16_t>(i);
    const float f = wb::bf16_bits_to_float(b);
    CAPTURE(b);
    REQUIRE(bits_of(f) == i << 16);  // bfloat16 is a float's top half, NaN payloads included
    const bool nan = (b & 0x7fffu) > 0x7f80u;
    REQUIRE(wb::to_bf16_bits(f) == (nan ? 0x7fffu : b));
    REQUIRE(bits_of(__bfloat162float(__ushort_as_bfloat16(b))) == bits_of(f));
    REQUIRE(__bfloat16_as_ushort(__float2bfloat16_rn(f)) == (nan ? 0x7fffu : b));
  }
}

TEST_CASE("float to half rounds like the CUDA headers on a million patterns" *
          doctest::test_suite("half")) {
  for (std::uint32_t u : float_patterns()) {
    const float f = float_of(u);
    CAPTURE(u);
    REQUIRE(wb::to_half_bits(f) == cuda_float2half_rn(f));
    REQUIRE(wb::to_bf16_bits(f) == cuda_float2bfloat16_rn(f));
  }
}

TEST_CASE("float to half at the edges: max, overflow, subnormals, ties to even, NaN" *
          doctest::test_suite("half")) {
  struct Case {
    float x;
    std::uint16_t half, bf16;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Expected bits worked out by hand from the formats (half: 1+5+10, bf16: 1+8+7).
  const Case cases[] = {
      {0.0f, 0x0000, 0x0000},
      {-0.0f, 0x8000, 0x8000},
      {1.0f, 0x3c00, 0x3f80},
      {-2.0f, 0xc000, 0xc000},
      {65504.0f, 0x7bff, 0x4780},         // half max; bf16 rounds it up to 65536
      {65519.996f, 0x7bff, 0x4780},       // just under max + half an ulp
      {65520.0f, 0x7c00, 0x4780},         // max + half an ulp: tie to even = infinity
      {-1.0e5f, 0xfc00, 0xc7c3},          // half overflow to -inf
      {0x1.fefffep127f, 0x7c00, 0x7f7f},  // bf16 max region, under the tie
      {std::numeric_limits<float>::max(), 0x7c00, 0x7f80},  // bf16 overflow to infinity
      {inf, 0x7c00, 0x7f80},
      {-inf, 0xfc00, 0xff80},
      {nan, 0x7fff, 0x7fff},
      {-nan, 0x7fff, 0x7fff},
      {0x1p-14f, 0x0400, 0x3880},         // half min normal
      {0x1p-24f, 0x0001, 0x3380},         // half min subnormal
      {0x1p-25f, 0x0000, 0x3300},         // tie between 0 and 2^-24: even is 0
      {0x1.000002p-25f, 0x0001, 0x3300},  // just over the tie
      {0x1.8p-24f, 0x0002, 0x33c0},       // 1.5 * 2^-24: tie, even is 2
      {0x1.ffcp-15f, 0x0400, 0x3880},     // tie between 0x03ff and 0x0400: even
      {0x1.002p0f, 0x3c00, 0x3f80},       // 1 + 2^-11: tie, even is 1
      {0x1.006p0f, 0x3c02, 0x3f80},       // 1 + 3 * 2^-11: tie, even is 0x3c02
      {0x1.002002p0f, 0x3c01, 0x3f80},    // 1 + 2^-11 + 2^-23: over the tie
      {0x1.01p0f, 0x3c04, 0x3f80},        // 1 + 2^-8: bf16 tie, even is 1
      {0x1.03p0f, 0x3c0c, 0x3f82},        // 1 + 3 * 2^-8: bf16 tie, even is 0x3f82
      {2049.0f, 0x6800, 0x4500},          // half tie at 2048 + 1: even is 2048
      {2051.0f, 0x6802, 0x4500},
      {0x1p-133f, 0x0000, 0x0001},    // bf16 min subnormal
      {0x1p-134f, 0x0000, 0x0000},    // its half: tie, even is 0
      {0x1.8p-133f, 0x0000, 0x0002},  // 1.5 bf16 min subnormals: tie, even is 2
      {1e-10f, 0x0000, 0x2edc},
  };
  for (const Case& c : cases) {
    CAPTURE(c.x);
    CHECK(wb::to_half_bits(c.x) == c.half);
    CHECK(wb::to_bf16_bits(c.x) == c.bf16);
    CHECK(__half_as_ushort(__float2half(c.x)) == c.half);
    CHECK(__bfloat16_as_ushort(__float2bfloat16(c.x)) == c.bf16);
  }
  // Integers and doubles round once, directly: through double 2^60 + 2^52 + 1 would become
  // the tie 2^60 + 2^52 and round to even (2^60), but the nearest bfloat16 is 2^60 + 2^53.
  CHECK(__bfloat16_as_ushort(__nv_bfloat16((1LL << 60) + (1LL << 52) + 1)) == 0x5d81);
  CHECK(__half_as_ushort(__half(2049)) == 0x6800);
  CHECK(__half_as_ushort(__half(70000u)) == 0x7c00);
  // 1 + 2^-11 + 2^-40 as a double: over the tie, though float would round it onto the tie.
  CHECK(__half_as_ushort(__double2half(1.0 + 0x1p-11 + 0x1p-40)) == 0x3c01);
}

TEST_CASE("half and bfloat16 arithmetic rounds once, like the GPU's instructions" *
          doctest::test_suite("half")) {
  // The GPU's add.f16, mul.f16, ... (and bf16) round the exact result once. The reference
  // rounds a + b, a - b, a * b (exact in double) and a / b (double has at least 2p + 2
  // significand bits, so rounding its quotient again is still the correct rounding).
  std::mt19937 rng(20240601);
  std::uniform_int_distribution<int> pattern(0, 0xffff);
  for (int i = 0; i < 200000; ++i) {
    const auto ha = static_cast<std::uint16_t>(pattern(rng));
    const auto hb = static_cast<std::uint16_t>(pattern(rng));
    const double a = wb::half_bits_to_float(ha), b = wb::half_bits_to_float(hb);
    const __half x = __ushort_as_half(ha), y = __ushort_as_half(hb);
    using wb::fp16_detail::Binary16;
    using wb::fp16_detail::round_to_bits;
    CAPTURE(ha);
    CAPTURE(hb);
    REQUIRE(__half_as_ushort(x + y) == round_to_bits<Binary16>(a + b));
    REQUIRE(__half_as_ushort(x - y) == round_to_bits<Binary16>(a - b));
    REQUIRE(__half_as_ushort(x * y) == round_to_bits<Binary16>(a * b));
    REQUIRE(__half_as_ushort(x / y) == round_to_bits<Binary16>(a / b));
    const __nv_bfloat16 u = __ushort_as_bfloat16(ha), v = __ushort_as_bfloat16(hb);
    const double c = wb::bf16_bits_to_float(ha), d = wb::bf16_bits_to_float(hb);
    using wb::fp16_detail::Bfloat16;
    REQUIRE(__bfloat16_as_ushort(u + v) == round_to_bits<Bfloat16>(c + d));
    REQUIRE(__bfloat16_as_ushort(u * v) == round_to_bits<Bfloat16>(c * d));
    REQUIRE((x < y) == (a < b));
    REQUIRE((x == y) == (a == b));
    REQUIRE((x != y) == (a != b));
  }
}

TEST_CASE("hmax and hmin follow CUDA for NaN and signed zeros" * doctest::test_suite("half")) {
  const __half nan = __ushort_as_half(0x7e00), one = __float2half(1.0f);
  const __half pz = __ushort_as_half(0x0000), nz = __ushort_as_half(0x8000);
  CHECK(__half_as_ushort(__hmax(nan, one)) == 0x3c00);  // a NaN operand gives the other one
  CHECK(__half_as_ushort(__hmin(one, nan)) == 0x3c00);
  CHECK(__half_as_ushort(__hmax(nan, nan)) == 0x7fff);  // two NaNs: the canonical NaN
  CHECK(__half_as_ushort(__hmax(pz, nz)) == 0x0000);    // +0 > -0
  CHECK(__half_as_ushort(__hmax(nz, pz)) == 0x0000);
  CHECK(__half_as_ushort(__hmin(pz, nz)) == 0x8000);
  CHECK(__half_as_ushort(__hmax(__float2half(-3.0f), __float2half(2.0f))) == 0x4000);
  CHECK(__hisnan(nan));
  CHECK(__hisinf(__ushort_as_half(0xfc00)) == -1);
  CHECK(__half_as_ushort(-one) == 0xbc00);
  CHECK(__half_as_ushort(__habs(__float2half(-0.5f))) == 0x3800);
  const __nv_bfloat162 p = __floats2bfloat162_rn(1.0f, -2.0f);
  CHECK(__low2float(p) == 1.0f);
  CHECK(__high2float(__hmax2(p, __float2bfloat162_rn(0.0f))) == 0.0f);
  const float2 f = __half22float2(__floats2half2_rn(0.25f, 3.0f));
  CHECK(f.x == 0.25f);
  CHECK(f.y == 3.0f);
  CHECK(__bfloat1622float2(__float22bfloat162_rn(make_float2(5.0f, 6.0f))).y == 6.0f);
}

namespace {

// y: (blockDim.x) __half2, x scaled by `scale` in half2 arithmetic, then each lane's pair
// swapped with its xor-1 neighbour's (a 4-byte shuffle) and its low half broadcast from lane 0
// (a 2-byte shuffle) into z: (blockDim.x) __half.
__global__ void half2_kernel(const __half2* x, __half2 scale, __half2* y, __half* z) {
  const int i = threadIdx.x;
  const __half2 v = x[i] * scale;
  y[i] = __shfl_xor_sync(0xffffffffu, v, 1);
  z[i] = __shfl_sync(0xffffffffu, __low2half(v), 0);
}

// y: (blockDim.x) float, each lane's bfloat16 input widened, summed over the warp in float.
__global__ void bf16_sum_kernel(const __nv_bfloat16* x, float* y) {
  float s = __bfloat162float(x[threadIdx.x]);
  for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
  y[threadIdx.x] = s;
}

}  // namespace

TEST_CASE("kernels load, compute on, shuffle and store 16-bit values" *
          doctest::test_suite("half")) {
  std::vector<__half2> x(wb::kWarpSize), y(wb::kWarpSize);
  std::vector<__half> z(wb::kWarpSize);
  for (int i = 0; i < wb::kWarpSize; ++i) x[i] = __floats2half2_rn(0.5f * i, -1.0f * i);
  wb::launch<half2_kernel>(dim3(1), dim3(wb::kWarpSize), 0, x.data(), __float2half2_rn(3.0f), y.data(),
                           z.data());
  for (int i = 0; i < wb::kWarpSize; ++i) {
    const int j = i ^ 1;  // values up to 96: exact in half
    CHECK(__low2float(y[i]) == 1.5f * j);
    CHECK(__high2float(y[i]) == -3.0f * j);
    CHECK(__half2float(z[i]) == 0.0f);
  }
  std::vector<__nv_bfloat16> b(wb::kWarpSize);
  std::vector<float> sums(wb::kWarpSize);
  for (int i = 0; i < wb::kWarpSize; ++i) b[i] = __float2bfloat16(static_cast<float>(i));
  wb::launch<bf16_sum_kernel>(dim3(1), dim3(wb::kWarpSize), 0, b.data(), sums.data());
  for (float s : sums) CHECK(s == 31.0f * 32.0f / 2.0f);  // small integers: exact
}
