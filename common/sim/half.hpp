// CUDA's 16-bit floating-point types for the simulator: what cuda_fp16.h and cuda_bf16.h
// give a kernel, with the same names, layout and rounding.
//
// __half and __nv_bfloat16 are 2-byte, 2-aligned PODs holding the bit pattern; __half2 and
// __nv_bfloat162 are 4-byte, 4-aligned pairs {x, y}. Every conversion rounds through
// common/half.hpp (round to nearest even, subnormals kept, overflow to infinity, NaN to the
// canonical 0x7fff), so a value converted here has the bits the GPU's cvt.rn gives. The
// arithmetic operators compute in double and round once: for + - * / of two 16-bit values
// that is the correctly rounded result of the GPU's half and bfloat16 instructions, because
// double has at least 2p + 2 significand bits (p = 11 and 8) and the range for every product.
// (cuda_fp16.hpp's host code computes in float, which gives the same bits for __half; for
// bfloat16 products in float's subnormal range float would round twice.)
//
// Not provided (a compile error, not a silent difference): conversions from __half to integer
// types other than through float, __hfma and the other fused or approximate half math
// (hexp, hrsqrt, ...), comparisons of __half2 pairs, and half atomics.
#pragma once

#include <cstdint>

#include "common/half.hpp"
#include "common/sim/types.hpp"

namespace wb::sim::detail {
using Binary16 = wb::fp16_detail::Binary16;
using Bfloat16 = wb::fp16_detail::Bfloat16;
}  // namespace wb::sim::detail

// clang-format off
typedef struct alignas(2) { unsigned short x; } __half_raw;
typedef struct alignas(4) { unsigned short x, y; } __half2_raw;
typedef struct alignas(2) { unsigned short x; } __nv_bfloat16_raw;
typedef struct alignas(4) { unsigned short x, y; } __nv_bfloat162_raw;
// clang-format on

// The scalar type, for __half (binary16) and __nv_bfloat16: the bits, constructors that round
// from every arithmetic type (as CUDA's do), and the implicit widening to float.
#define WB_SIM_FP16_SCALAR(T, RAW, FORMAT, TO_FLOAT)                                     \
  struct alignas(2) T {                                                                  \
    T() = default;                                                                       \
    constexpr T(const RAW& r) : __x(r.x) {}                                              \
    T(float f) : __x(wb::fp16_detail::round_to_bits<FORMAT>(f)) {}                       \
    T(double f) : __x(wb::fp16_detail::round_to_bits<FORMAT>(f)) {}                      \
    T(short v) : __x(wb::fp16_detail::round_integer_to_bits<FORMAT>(v)) {}               \
    T(unsigned short v) : __x(wb::fp16_detail::round_unsigned_to_bits<FORMAT>(v)) {}     \
    T(int v) : __x(wb::fp16_detail::round_integer_to_bits<FORMAT>(v)) {}                 \
    T(unsigned int v) : __x(wb::fp16_detail::round_unsigned_to_bits<FORMAT>(v)) {}       \
    T(long v) : __x(wb::fp16_detail::round_integer_to_bits<FORMAT>(v)) {}                \
    T(unsigned long v) : __x(wb::fp16_detail::round_unsigned_to_bits<FORMAT>(v)) {}      \
    T(long long v) : __x(wb::fp16_detail::round_integer_to_bits<FORMAT>(v)) {}           \
    T(unsigned long long v) : __x(wb::fp16_detail::round_unsigned_to_bits<FORMAT>(v)) {} \
    T& operator=(const RAW& r) {                                                         \
      __x = r.x;                                                                         \
      return *this;                                                                      \
    }                                                                                    \
    T& operator=(float f) { return *this = T(f); }                                       \
    T& operator=(double f) { return *this = T(f); }                                      \
    operator RAW() const { return RAW{__x}; }                                            \
    operator float() const { return TO_FLOAT(__x); }                                     \
                                                                                         \
   protected:                                                                            \
    unsigned short __x;                                                                  \
  }

WB_SIM_FP16_SCALAR(__half, __half_raw, wb::sim::detail::Binary16, wb::half_bits_to_float);
WB_SIM_FP16_SCALAR(__nv_bfloat16, __nv_bfloat16_raw, wb::sim::detail::Bfloat16,
                   wb::bf16_bits_to_float);
#undef WB_SIM_FP16_SCALAR

namespace wb::sim::detail {
/// The raw struct and the format of each 16-bit scalar type.
template <typename T>
struct Fp16Traits;
template <>
struct Fp16Traits<__half> {
  using raw = __half_raw;
  using format = Binary16;
};
template <>
struct Fp16Traits<__nv_bfloat16> {
  using raw = __nv_bfloat16_raw;
  using format = Bfloat16;
};
/// The bit pattern of a 16-bit value.
template <typename T>
unsigned short bits_of(T a) {
  return static_cast<typename Fp16Traits<T>::raw>(a).x;
}
/// The 16-bit value with bit pattern `bits`.
template <typename T>
T from_bits(unsigned bits) {
  return T(typename Fp16Traits<T>::raw{static_cast<unsigned short>(bits)});
}
}  // namespace wb::sim::detail

// The pair type: two scalars {x, y}, 4-byte aligned (one 32-bit register on the GPU).
#define WB_SIM_FP16_PAIR(T2, T, RAW2)                                                     \
  struct alignas(4) T2 {                                                                  \
    T x;                                                                                  \
    T y;                                                                                  \
    T2() = default;                                                                       \
    constexpr T2(const T& a, const T& b) : x(a), y(b) {}                                  \
    T2(const RAW2& r)                                                                     \
        : x(wb::sim::detail::from_bits<T>(r.x)), y(wb::sim::detail::from_bits<T>(r.y)) {} \
    operator RAW2() const {                                                               \
      return RAW2{wb::sim::detail::bits_of(x), wb::sim::detail::bits_of(y)};              \
    }                                                                                     \
  }

WB_SIM_FP16_PAIR(__half2, __half, __half2_raw);
WB_SIM_FP16_PAIR(__nv_bfloat162, __nv_bfloat16, __nv_bfloat162_raw);
#undef WB_SIM_FP16_PAIR

static_assert(sizeof(__half) == 2 && alignof(__half) == 2, "__half is 2 bytes, 2-aligned");
static_assert(sizeof(__half2) == 4 && alignof(__half2) == 4, "__half2 is 4 bytes, 4-aligned");
static_assert(sizeof(__nv_bfloat16) == 2 && alignof(__nv_bfloat16) == 2, "bf16: 2 bytes");
static_assert(sizeof(__nv_bfloat162) == 4 && alignof(__nv_bfloat162) == 4, "bf16x2: 4 bytes");
static_assert(std::is_trivially_copyable_v<__half> && std::is_trivially_copyable_v<__half2> &&
                  std::is_trivially_copyable_v<__nv_bfloat16> &&
                  std::is_trivially_copyable_v<__nv_bfloat162>,
              "16-bit types are PODs: loads, stores and shuffles copy their bytes");

// ---- Conversions ------------------------------------------------------------------------------

inline __half __float2half(float a) {
  return __half(a);
}
inline __half __float2half_rn(float a) {
  return __half(a);
}
inline __half __double2half(double a) {
  return __half(a);
}
inline float __half2float(__half a) {
  return static_cast<float>(a);
}
inline __half2 __float2half2_rn(float a) {
  return __half2(__half(a), __half(a));
}
inline __half2 __floats2half2_rn(float a, float b) {
  return __half2(__half(a), __half(b));
}
inline __half2 __float22half2_rn(float2 a) {
  return __half2(__half(a.x), __half(a.y));
}
inline float2 __half22float2(__half2 a) {
  return make_float2(a.x, a.y);
}
inline __half2 make_half2(__half x, __half y) {
  return __half2(x, y);
}
inline __half2 __halves2half2(__half x, __half y) {
  return __half2(x, y);
}
inline __half2 __half2half2(__half a) {
  return __half2(a, a);
}
inline __half __low2half(__half2 a) {
  return a.x;
}
inline __half __high2half(__half2 a) {
  return a.y;
}
inline float __low2float(__half2 a) {
  return a.x;
}
inline float __high2float(__half2 a) {
  return a.y;
}
inline unsigned short __half_as_ushort(__half h) {
  return static_cast<__half_raw>(h).x;
}
inline short __half_as_short(__half h) {
  return static_cast<short>(__half_as_ushort(h));
}
inline __half __ushort_as_half(unsigned short i) {
  return __half(__half_raw{i});
}
inline __half __short_as_half(short i) {
  return __ushort_as_half(static_cast<unsigned short>(i));
}

inline __nv_bfloat16 __float2bfloat16(float a) {
  return __nv_bfloat16(a);
}
inline __nv_bfloat16 __float2bfloat16_rn(float a) {
  return __nv_bfloat16(a);
}
inline __nv_bfloat16 __double2bfloat16(double a) {
  return __nv_bfloat16(a);
}
inline float __bfloat162float(__nv_bfloat16 a) {
  return static_cast<float>(a);
}
inline __nv_bfloat162 __float2bfloat162_rn(float a) {
  return __nv_bfloat162(__nv_bfloat16(a), __nv_bfloat16(a));
}
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return __nv_bfloat162(__nv_bfloat16(a), __nv_bfloat16(b));
}
inline __nv_bfloat162 __float22bfloat162_rn(float2 a) {
  return __nv_bfloat162(__nv_bfloat16(a.x), __nv_bfloat16(a.y));
}
inline float2 __bfloat1622float2(__nv_bfloat162 a) {
  return make_float2(a.x, a.y);
}
inline __nv_bfloat162 make_bfloat162(__nv_bfloat16 x, __nv_bfloat16 y) {
  return __nv_bfloat162(x, y);
}
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 x, __nv_bfloat16 y) {
  return __nv_bfloat162(x, y);
}
inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a) {
  return __nv_bfloat162(a, a);
}
inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 a) {
  return a.x;
}
inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 a) {
  return a.y;
}
inline float __low2float(__nv_bfloat162 a) {
  return a.x;
}
inline float __high2float(__nv_bfloat162 a) {
  return a.y;
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) {
  return static_cast<__nv_bfloat16_raw>(h).x;
}
inline short __bfloat16_as_short(__nv_bfloat16 h) {
  return static_cast<short>(__bfloat16_as_ushort(h));
}
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short i) {
  return __nv_bfloat16(__nv_bfloat16_raw{i});
}
inline __nv_bfloat16 __short_as_bfloat16(short i) {
  return __ushort_as_bfloat16(static_cast<unsigned short>(i));
}

// ---- Arithmetic, comparison, min/max -----------------------------------------------------------
// The same overload set for both types, as cuda_fp16.hpp and cuda_bf16.hpp declare it: the
// operators take two values of the type (mixing with float is ambiguous there and here).

namespace wb::sim::detail {
template <typename T>
bool is_nan16(T a) {
  return (bits_of(a) & 0x7fffu) > Fp16Traits<T>::format::kInf;
}
/// __hmax/__hmin as CUDA defines them: a NaN operand gives the other one, two NaNs give the
/// canonical NaN, and +0 is larger than -0.
template <typename T>
T max16(T a, T b, bool want_max) {
  const bool a_nan = is_nan16(a), b_nan = is_nan16(b);
  if (a_nan && b_nan) return from_bits<T>(Fp16Traits<T>::format::kCanonicalNaN);
  if (a_nan) return b;
  if (b_nan) return a;
  const float fa = a, fb = b;
  if (fa == fb) {  // equal, or +0 and -0: the sign bit decides
    const bool a_neg = (bits_of(a) & 0x8000u) != 0;
    return (a_neg == want_max) ? b : a;
  }
  return (fa > fb) == want_max ? a : b;
}
}  // namespace wb::sim::detail

#define WB_SIM_FP16_MATH(T, T2)                                                  \
  inline T __hadd(T a, T b) {                                                    \
    return T(static_cast<double>(a) + static_cast<double>(b));                   \
  }                                                                              \
  inline T __hsub(T a, T b) {                                                    \
    return T(static_cast<double>(a) - static_cast<double>(b));                   \
  }                                                                              \
  inline T __hmul(T a, T b) {                                                    \
    return T(static_cast<double>(a) * static_cast<double>(b));                   \
  }                                                                              \
  inline T __hdiv(T a, T b) {                                                    \
    return T(static_cast<double>(a) / static_cast<double>(b));                   \
  }                                                                              \
  inline T __hneg(T a) {                                                         \
    return wb::sim::detail::from_bits<T>(wb::sim::detail::bits_of(a) ^ 0x8000u); \
  }                                                                              \
  inline T __habs(T a) {                                                         \
    return wb::sim::detail::from_bits<T>(wb::sim::detail::bits_of(a) & 0x7fffu); \
  }                                                                              \
  inline T __hmax(T a, T b) {                                                    \
    return wb::sim::detail::max16(a, b, true);                                   \
  }                                                                              \
  inline T __hmin(T a, T b) {                                                    \
    return wb::sim::detail::max16(a, b, false);                                  \
  }                                                                              \
  inline bool __hisnan(T a) {                                                    \
    return wb::sim::detail::is_nan16(a);                                         \
  }                                                                              \
  inline int __hisinf(T a) {                                                     \
    const float f = a;                                                           \
    return f == __builtin_inff() ? 1 : (f == -__builtin_inff() ? -1 : 0);        \
  }                                                                              \
  inline bool __heq(T a, T b) {                                                  \
    return static_cast<float>(a) == static_cast<float>(b);                       \
  }                                                                              \
  inline bool __hne(T a, T b) {                                                  \
    return !__hisnan(a) && !__hisnan(b) && !__heq(a, b);                         \
  }                                                                              \
  inline bool __hneu(T a, T b) {                                                 \
    return !__heq(a, b);                                                         \
  }                                                                              \
  inline bool __hlt(T a, T b) {                                                  \
    return static_cast<float>(a) < static_cast<float>(b);                        \
  }                                                                              \
  inline bool __hle(T a, T b) {                                                  \
    return static_cast<float>(a) <= static_cast<float>(b);                       \
  }                                                                              \
  inline bool __hgt(T a, T b) {                                                  \
    return static_cast<float>(a) > static_cast<float>(b);                        \
  }                                                                              \
  inline bool __hge(T a, T b) {                                                  \
    return static_cast<float>(a) >= static_cast<float>(b);                       \
  }                                                                              \
  inline T operator+(const T& a, const T& b) {                                   \
    return __hadd(a, b);                                                         \
  }                                                                              \
  inline T operator-(const T& a, const T& b) {                                   \
    return __hsub(a, b);                                                         \
  }                                                                              \
  inline T operator*(const T& a, const T& b) {                                   \
    return __hmul(a, b);                                                         \
  }                                                                              \
  inline T operator/(const T& a, const T& b) {                                   \
    return __hdiv(a, b);                                                         \
  }                                                                              \
  inline T& operator+=(T& a, const T& b) {                                       \
    return a = __hadd(a, b);                                                     \
  }                                                                              \
  inline T& operator-=(T& a, const T& b) {                                       \
    return a = __hsub(a, b);                                                     \
  }                                                                              \
  inline T& operator*=(T& a, const T& b) {                                       \
    return a = __hmul(a, b);                                                     \
  }                                                                              \
  inline T& operator/=(T& a, const T& b) {                                       \
    return a = __hdiv(a, b);                                                     \
  }                                                                              \
  inline T operator+(const T& a) {                                               \
    return a;                                                                    \
  }                                                                              \
  inline T operator-(const T& a) {                                               \
    return __hneg(a);                                                            \
  }                                                                              \
  inline bool operator==(const T& a, const T& b) {                               \
    return __heq(a, b);                                                          \
  }                                                                              \
  inline bool operator!=(const T& a, const T& b) {                               \
    return __hneu(a, b);                                                         \
  }                                                                              \
  inline bool operator<(const T& a, const T& b) {                                \
    return __hlt(a, b);                                                          \
  }                                                                              \
  inline bool operator<=(const T& a, const T& b) {                               \
    return __hle(a, b);                                                          \
  }                                                                              \
  inline bool operator>(const T& a, const T& b) {                                \
    return __hgt(a, b);                                                          \
  }                                                                              \
  inline bool operator>=(const T& a, const T& b) {                               \
    return __hge(a, b);                                                          \
  }                                                                              \
  inline T2 __hadd2(T2 a, T2 b) {                                                \
    return T2(__hadd(a.x, b.x), __hadd(a.y, b.y));                               \
  }                                                                              \
  inline T2 __hsub2(T2 a, T2 b) {                                                \
    return T2(__hsub(a.x, b.x), __hsub(a.y, b.y));                               \
  }                                                                              \
  inline T2 __hmul2(T2 a, T2 b) {                                                \
    return T2(__hmul(a.x, b.x), __hmul(a.y, b.y));                               \
  }                                                                              \
  inline T2 __h2div(T2 a, T2 b) {                                                \
    return T2(__hdiv(a.x, b.x), __hdiv(a.y, b.y));                               \
  }                                                                              \
  inline T2 __hneg2(T2 a) {                                                      \
    return T2(__hneg(a.x), __hneg(a.y));                                         \
  }                                                                              \
  inline T2 __habs2(T2 a) {                                                      \
    return T2(__habs(a.x), __habs(a.y));                                         \
  }                                                                              \
  inline T2 __hmax2(T2 a, T2 b) {                                                \
    return T2(__hmax(a.x, b.x), __hmax(a.y, b.y));                               \
  }                                                                              \
  inline T2 __hmin2(T2 a, T2 b) {                                                \
    return T2(__hmin(a.x, b.x), __hmin(a.y, b.y));                               \
  }                                                                              \
  inline T2 operator+(const T2& a, const T2& b) {                                \
    return __hadd2(a, b);                                                        \
  }                                                                              \
  inline T2 operator-(const T2& a, const T2& b) {                                \
    return __hsub2(a, b);                                                        \
  }                                                                              \
  inline T2 operator*(const T2& a, const T2& b) {                                \
    return __hmul2(a, b);                                                        \
  }                                                                              \
  inline T2 operator/(const T2& a, const T2& b) {                                \
    return __h2div(a, b);                                                        \
  }                                                                              \
  inline T2& operator+=(T2& a, const T2& b) {                                    \
    return a = __hadd2(a, b);                                                    \
  }                                                                              \
  inline T2& operator-=(T2& a, const T2& b) {                                    \
    return a = __hsub2(a, b);                                                    \
  }                                                                              \
  inline T2& operator*=(T2& a, const T2& b) {                                    \
    return a = __hmul2(a, b);                                                    \
  }                                                                              \
  inline T2& operator/=(T2& a, const T2& b) {                                    \
    return a = __h2div(a, b);                                                    \
  }                                                                              \
  inline T2 operator+(const T2& a) {                                             \
    return a;                                                                    \
  }                                                                              \
  inline T2 operator-(const T2& a) {                                             \
    return __hneg2(a);                                                           \
  }

WB_SIM_FP16_MATH(__half, __half2)
WB_SIM_FP16_MATH(__nv_bfloat16, __nv_bfloat162)
#undef WB_SIM_FP16_MATH
