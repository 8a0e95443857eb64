// The PTX wrappers of common/ptx.cuh in the simulator: mma.m16n8k16 against a plain matmul with
// fragments gathered by hand from the PTX ISA's layout, and the misuse only a result can show
// (fragment registers out of order). ldmatrix: test_ptx_ldmatrix.cpp; cp.async (its groups
// landing at their waits, a missing wait or commit): test_ptx_cp_async.cpp; faults and race
// mode: test_ptx_faults.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/kernel.cuh"
#include "common/ptx.cuh"
#include "tests/sim/ptx_support.hpp"
#include "tests/sim/wmma_support.hpp"

namespace {

using wb::test::Aligned;
using wb::test::bits_of;
using wb::test::to16;

// ---- mma.m16n8k16 ----------------------------------------------------------------------------

constexpr int kM = 16, kN = 8, kK = 16;  // one mma.m16n8k16

/// The planted misuse of mma_by_hand_kernel: fragment registers handed over out of order.
enum Planted : int { kNone = 0, kSwapA12 = 1, kSwapB01 = 2, kSwapC12 = 3 };

// d: (16, 8) row-major, D = A B + C for one warp, with A (16, 16), B (16, 8) as (k, n) and C
// (16, 8), all row-major. The fragments are gathered here by the PTX ISA's layout, written out
// from common/ptx.cuh's header rather than taken from the simulator: g = lane / 4, t = lane % 4.
// `planted` exchanges two registers of one operand, as a kernel with the order wrong would.
template <typename T>
__global__ void mma_by_hand_kernel(const T* a, const T* b, const float* c, float* d, int planted) {
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  std::uint32_t fa[4] = {
      wb::ptx::load_pair(a + g * kK + 2 * t),            // A(g, 2t..2t+1)
      wb::ptx::load_pair(a + (g + 8) * kK + 2 * t),      // A(g+8, 2t..2t+1)
      wb::ptx::load_pair(a + g * kK + 2 * t + 8),        // A(g, 2t+8..2t+9)
      wb::ptx::load_pair(a + (g + 8) * kK + 2 * t + 8),  // A(g+8, 2t+8..2t+9)
  };
  // B's k pairs are a column pair of the row-major (k, n) matrix: two 16-bit loads.
  std::uint32_t fb[2] = {
      wb::ptx::load_pair(b + 2 * t * kN + g, b + (2 * t + 1) * kN + g),        // B(2t..2t+1, g)
      wb::ptx::load_pair(b + (2 * t + 8) * kN + g, b + (2 * t + 9) * kN + g),  // B(2t+8.., g)
  };
  float acc[4] = {c[g * kN + 2 * t], c[g * kN + 2 * t + 1], c[(g + 8) * kN + 2 * t],
                  c[(g + 8) * kN + 2 * t + 1]};
  if (planted == kSwapA12) {
    const std::uint32_t x = fa[1];
    fa[1] = fa[2];
    fa[2] = x;
  } else if (planted == kSwapB01) {
    const std::uint32_t x = fb[0];
    fb[0] = fb[1];
    fb[1] = x;
  } else if (planted == kSwapC12) {
    const float x = acc[1];
    acc[1] = acc[2];
    acc[2] = x;
  }
  wb::ptx::mma_m16n8k16<T>(acc, fa, fb, acc);  // d aliases c, as kernels accumulate
  d[g * kN + 2 * t] = acc[0];
  d[g * kN + 2 * t + 1] = acc[1];
  d[(g + 8) * kN + 2 * t] = acc[2];
  d[(g + 8) * kN + 2 * t + 1] = acc[3];
}

/// `count` distinct integers from `first` on, in a seeded random order.
std::vector<int> shuffled(int count, int first, unsigned seed) {
  std::vector<int> v(count);
  for (int i = 0; i < count; ++i) v[i] = first + i;
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  return v;
}

/// The inputs of one m16n8k16 product: every element distinct, small integers (C: quarter
/// integers) that both 16-bit types hold exactly, in random order so that no row or column is
/// a function of its index and a layout error cannot cancel out. |A| <= 128, |B| <= 64: every
/// partial sum is below 2^18 in magnitude with two fraction bits, exact in float, so D equals the
/// fp64 matmul exactly whatever the order of the additions.
template <typename T>
struct SmallProduct {
  std::vector<int> a_values = shuffled(kM * kK, -128, 1), b_values = shuffled(kK * kN, -64, 2);
  std::vector<int> c_values = shuffled(kM * kN, -64, 3);
  Aligned<T> a{kM * kK}, b{kK * kN};
  Aligned<float> c{kM * kN}, d{kM * kN};
  std::vector<double> reference = std::vector<double>(kM * kN);

  SmallProduct() {
    for (int i = 0; i < kM * kK; ++i) a[i] = to16<T>(static_cast<float>(a_values[i]));
    for (int i = 0; i < kK * kN; ++i) b[i] = to16<T>(static_cast<float>(b_values[i]));
    for (int i = 0; i < kM * kN; ++i) c[i] = static_cast<float>(c_values[i]) + 0.25f;
    for (int m = 0; m < kM; ++m) {
      for (int n = 0; n < kN; ++n) {
        double sum = c[m * kN + n];
        for (int k = 0; k < kK; ++k)
          sum += static_cast<double>(a_values[m * kK + k]) * b_values[k * kN + n];
        reference[m * kN + n] = sum;
      }
    }
  }

  /// Runs the kernel with `planted` and returns how many elements of D differ from the matmul.
  int mismatches(int planted) {
    wb::launch<mma_by_hand_kernel<T>>(dim3(1), dim3(32), 0, a.p, b.p, c.p, d.p, planted);
    int wrong = 0;
    for (int i = 0; i < kM * kN; ++i) wrong += static_cast<double>(d[i]) != reference[i];
    return wrong;
  }
};

template <typename T>
void check_small_product() {
  SmallProduct<T> p;
  // The inputs are what the test says: distinct and exactly held.
  for (int i = 0; i < kM * kK; ++i) REQUIRE(static_cast<float>(p.a[i]) == p.a_values[i]);
  for (int i = 0; i < kK * kN; ++i) REQUIRE(static_cast<float>(p.b[i]) == p.b_values[i]);
  CHECK(p.mismatches(kNone) == 0);
  for (int i = 0; i < kM * kN; ++i) {
    CAPTURE(i);
    CHECK(static_cast<double>(p.d[i]) == p.reference[i]);
  }
}

}  // namespace

TEST_CASE("mma_m16n8k16 with fragments gathered by the PTX layout equals the matmul exactly" *
          doctest::test_suite("ptx")) {
  SUBCASE("half") {
    check_small_product<__half>();
  }
  SUBCASE("bfloat16") {
    check_small_product<__nv_bfloat16>();
  }
}

TEST_CASE("fragment registers handed to mma_m16n8k16 out of order give a wrong product" *
          doctest::test_suite("ptx")) {
  // The planted misuse of a kernel: the simulator has no way to know the intended order, so
  // what makes it visible is the product itself, which a test against the matmul then fails.
  SmallProduct<__half> p;
  REQUIRE(p.mismatches(kNone) == 0);
  SUBCASE("a[1] and a[2] swapped") {
    // A(g + 8, 2t..) and A(g, 2t + 8..) trade places: with these inputs every element of D
    // comes out wrong.
    CHECK(p.mismatches(kSwapA12) == kM * kN);
  }
  SUBCASE("b[0] and b[1] swapped") {
    // B's rows 2t.. and 2t + 8.. trade places: again every element of D.
    CHECK(p.mismatches(kSwapB01) == kM * kN);
  }
  SUBCASE("c[1] and c[2] swapped") {
    // Only the two accumulator elements of each lane that changed places are wrong.
    CHECK(p.mismatches(kSwapC12) == kM * kN / 2);
  }
}

namespace {

// d: (m, n) row-major, D = A B + C with A (m, k), B (k, n) as (k, n) and C (m, n), all
// row-major; m = 16 * warps, one 16-row block per warp, its n / 8 column tiles each
// accumulated over k / 16 chained mma calls (the k loop of an attention or GEMM kernel).
template <typename T>
__global__ void mma_chain_kernel(const T* a, const T* b, const float* c, float* d, int n, int k) {
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  const int row0 = static_cast<int>(threadIdx.x / 32) * kM;
  for (int n0 = 0; n0 < n; n0 += kN) {
    const int r0 = (row0 + g) * n + n0 + 2 * t, r1 = (row0 + g + 8) * n + n0 + 2 * t;
    float acc[4] = {c[r0], c[r0 + 1], c[r1], c[r1 + 1]};
    for (int k0 = 0; k0 < k; k0 += kK) {
      const T* at = a + static_cast<std::size_t>(row0) * k + k0;  // A's 16x16 block
      const T* bt = b + static_cast<std::size_t>(k0) * n + n0;    // B's 16x8 block
      const std::uint32_t fa[4] = {
          wb::ptx::load_pair(at + g * k + 2 * t),
          wb::ptx::load_pair(at + (g + 8) * k + 2 * t),
          wb::ptx::load_pair(at + g * k + 2 * t + 8),
          wb::ptx::load_pair(at + (g + 8) * k + 2 * t + 8),
      };
      const std::uint32_t fb[2] = {
          wb::ptx::load_pair(bt + 2 * t * n + g, bt + (2 * t + 1) * n + g),
          wb::ptx::load_pair(bt + (2 * t + 8) * n + g, bt + (2 * t + 9) * n + g),
      };
      wb::ptx::mma_m16n8k16<T>(acc, fa, fb, acc);
    }
    d[r0] = acc[0];
    d[r0 + 1] = acc[1];
    d[r1] = acc[2];
    d[r1 + 1] = acc[3];
  }
}

/// Runs mma_chain_kernel on (m, k) x (k, n) and checks D within the float summation bound and
/// bit for bit against the documented order (C, then the k products added one at a time:
/// check_product_sum), and against the fp64 matmul exactly when the inputs are small integers.
template <typename T>
void check_chain(int warps, int n, int k, bool integers) {
  const int m = kM * warps;
  Aligned<T> a(static_cast<std::size_t>(m) * k), b(static_cast<std::size_t>(k) * n);
  Aligned<float> c(static_cast<std::size_t>(m) * n), d(static_cast<std::size_t>(m) * n);
  std::mt19937 rng(static_cast<unsigned>(m * 131 + n * 17 + k));
  std::uniform_int_distribution<int> small(-8, 8);
  std::normal_distribution<float> randn(0.0f, 1.0f);
  // Integers: |a b| <= 64 and k <= 64 keep every partial sum below 2^13, exact in float. Random:
  // mixed signs and a few x20 outliers, so the additions round and cancel.
  auto value = [&](std::size_t i) {
    return integers ? static_cast<float>(small(rng)) : randn(rng) * (i % 37 == 0 ? 20.0f : 1.0f);
  };
  for (std::size_t i = 0; i < a.size; ++i) a[i] = to16<T>(value(i));
  for (std::size_t i = 0; i < b.size; ++i) b[i] = to16<T>(value(i));
  for (std::size_t i = 0; i < c.size; ++i)
    c[i] = integers ? static_cast<float>(small(rng)) : 4.0f * randn(rng);
  wb::launch<mma_chain_kernel<T>>(dim3(1), dim3(32 * warps), 0, a.p, b.p, c.p, d.p, n, k);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      CAPTURE(i);
      CAPTURE(j);
      const std::size_t ij = static_cast<std::size_t>(i) * n + j;
      const auto factors = [&](int kk) {
        return std::pair{static_cast<float>(a[static_cast<std::size_t>(i) * k + kk]),
                         static_cast<float>(b[static_cast<std::size_t>(kk) * n + j])};
      };
      const double exact = wb::test::check_product_sum(d[ij], c[ij], k, factors);
      if (integers) REQUIRE(static_cast<double>(d[ij]) == exact);  // every partial sum exact
    }
  }
}

}  // namespace

TEST_CASE("chained mma_m16n8k16 over k multiplies a 64x64 by a 64x32 matrix" *
          doctest::test_suite("ptx")) {
  SUBCASE("half, small integers, exact") {
    check_chain<__half>(4, 32, 64, true);
  }
  SUBCASE("bfloat16, small integers, exact") {
    check_chain<__nv_bfloat16>(4, 32, 64, true);
  }
  SUBCASE("half, random, within the float summation bound") {
    check_chain<__half>(4, 32, 64, false);
  }
  SUBCASE("bfloat16, random, within the float summation bound") {
    check_chain<__nv_bfloat16>(4, 32, 64, false);
  }
}

TEST_CASE("pack_pair and load_pair put the lower-numbered element in the low half" *
          doctest::test_suite("ptx")) {
  // 1 and -2: half 0x3c00 and 0xc000, bfloat16 0x3f80 and 0xc000.
  CHECK(wb::ptx::pack_pair<__half>(1.0f, -2.0f) == 0xc0003c00u);
  CHECK(wb::ptx::pack_pair<__nv_bfloat16>(1.0f, -2.0f) == 0xc0003f80u);
  // Rounded to nearest even on the way: 1 + 2^-11 is halfway between two halves.
  CHECK(wb::ptx::pack_pair<__half>(1.0f + std::ldexp(1.0f, -11), 0.0f) == 0x00003c00u);
  alignas(4) const __half row[4] = {to16<__half>(1.0f), to16<__half>(-2.0f), to16<__half>(3.0f),
                                    to16<__half>(0.5f)};
  CHECK(wb::ptx::load_pair(row) == 0xc0003c00u);
  CHECK(wb::ptx::load_pair(row + 3, row + 2) == (std::uint32_t{bits_of(row[2])} << 16 | 0x3800u));
}

TEST_CASE("exp2_approx is 2^x with the instruction's flushes to zero" *
          doctest::test_suite("ptx")) {
  using wb::ptx::exp2_approx;
  CHECK(exp2_approx(0.0f) == 1.0f);
  CHECK(exp2_approx(-3.0f) == 0.125f);
  CHECK(exp2_approx(-126.0f) == std::ldexp(1.0f, -126));  // the smallest normal float
  CHECK(exp2_approx(-127.0f) == 0.0f);                    // subnormal: flushed (.ftz)
  CHECK(exp2_approx(std::ldexp(1.0f, -140)) == 1.0f);     // a subnormal x reads as 0
  CHECK(exp2_approx(-INFINITY) == 0.0f);                  // a masked score's probability
  CHECK(exp2_approx(INFINITY) == INFINITY);
  CHECK(std::isnan(exp2_approx(NAN)));
}
