// The PTX wrappers of common/ptx.cuh in the simulator: mma.m16n8k16 against a plain matmul with
// fragments gathered by hand from the PTX ISA's layout, ldmatrix's registers lane by lane and
// the attention products built on them, cp.async's groups landing at their waits; and the misuse
// only a result can show (fragment registers out of order, a missing wait or commit). Faults
// and race mode: test_ptx_faults.cpp.
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
#include "tests/sim/wmma_support.hpp"

namespace {

using wb::test::Aligned;

template <typename T>
T to16(float x) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half(x);
  } else {
    return __float2bfloat16(x);
  }
}

template <typename T>
std::uint16_t bits_of(T x) {
  std::uint16_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

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

/// Runs mma_chain_kernel on (m, k) x (k, n) and checks D: against the fp64 matmul exactly when
/// the inputs are small integers, else within the float summation bound and bit for bit against
/// the documented order (C, then the k products added one at a time).
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
  // Bound: D(i, j) is C plus k exact products added one at a time in float, so |D - exact| <=
  // gamma_k (|C| + sum |a b|), gamma_k = k u / (1 - k u), u = 2^-24 (Higham, recursive sum).
  const double u = std::ldexp(1.0, -24), gamma = k * u / (1 - k * u);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      const float cv = c[static_cast<std::size_t>(i) * n + j];
      double exact = cv, magnitude = std::fabs(cv);
      float in_order = cv;
      for (int kk = 0; kk < k; ++kk) {
        const float x = static_cast<float>(a[static_cast<std::size_t>(i) * k + kk]);
        const float y = static_cast<float>(b[static_cast<std::size_t>(kk) * n + j]);
        exact += static_cast<double>(x) * y;
        magnitude += std::fabs(static_cast<double>(x) * y);
        in_order += x * y;  // an exact product, one rounding per addition
      }
      const float got = d[static_cast<std::size_t>(i) * n + j];
      CAPTURE(i);
      CAPTURE(j);
      REQUIRE(std::isfinite(got));
      if (integers) {
        REQUIRE(static_cast<double>(got) == exact);
      } else {
        REQUIRE(std::fabs(got - exact) <= gamma * magnitude);
        REQUIRE(got == in_order);  // the documented order, bit for bit
      }
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

// ---- ldmatrix ----------------------------------------------------------------------------------

namespace {

constexpr int kLdmRows = 32;  // the 32 row addresses of an .x4: 4 matrices of 8 rows
constexpr int kLdmLd = 24;    // elements per shared row: 48 bytes, a row 16-byte aligned
constexpr int kLdmCol0 = 8;   // the rows read start at column 8 (16 bytes into a row)

/// Element (row, col) of the layout tile: distinct 16-bit patterns.
__host__ __device__ std::uint16_t layout_value(int row, int col) {
  return static_cast<std::uint16_t>(row * 32 + col + 1);
}

/// The tile row lane l hands to ldmatrix: a permutation, so matrix j's rows are scattered over
/// the tile as a swizzled layout's are.
__host__ __device__ int layout_row_of(int lane) {
  return (5 * lane + 3) % kLdmRows;
}

// out: (32 lanes, 4 registers): each lane's ldmatrix_x4 (trans = 0) or ldmatrix_x4_trans
// registers, from a shared tile of 32 rows, kLdmLd elements apart, in a static __shared__ array
// or the launch's dynamic shared memory (kLdmRows * kLdmLd * 2 bytes).
template <bool Dynamic>
__global__ void ldmatrix_layout_kernel(std::uint32_t* out, int trans) {
  __shared__ __align__(16) std::uint16_t static_tile[kLdmRows * kLdmLd];
  std::uint16_t* tile = Dynamic ? wb::dynamic_shared<std::uint16_t>() : static_tile;
  const int lane = static_cast<int>(threadIdx.x);
  for (int i = lane; i < kLdmRows * kLdmLd; i += 32) tile[i] = layout_value(i / kLdmLd, i % kLdmLd);
  __syncwarp();
  const std::uint16_t* row = tile + layout_row_of(lane) * kLdmLd + kLdmCol0;
  std::uint32_t r[4];
  if (trans != 0) {
    wb::ptx::ldmatrix_x4_trans(r, row);
  } else {
    wb::ptx::ldmatrix_x4(r, row);
  }
  for (int j = 0; j < 4; ++j) out[lane * 4 + j] = r[j];
}

/// Checks every lane's registers against common/ptx.cuh's header: r[j] of lane l is matrix j's
/// (row g, columns 2t, 2t + 1), or with .trans its (rows 2t, 2t + 1, column g); matrix j's row i
/// is the row lane 8 j + i handed in.
void check_ldmatrix_layout(const std::vector<std::uint32_t>& out, bool trans) {
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int j = 0; j < 4; ++j) {
      const auto matrix_row = [&](int i) { return layout_row_of(8 * j + i); };
      const std::uint32_t lo = trans ? layout_value(matrix_row(2 * t), kLdmCol0 + g)
                                     : layout_value(matrix_row(g), kLdmCol0 + 2 * t);
      const std::uint32_t hi = trans ? layout_value(matrix_row(2 * t + 1), kLdmCol0 + g)
                                     : layout_value(matrix_row(g), kLdmCol0 + 2 * t + 1);
      CAPTURE(lane);
      CAPTURE(j);
      CHECK(out[lane * 4 + j] == (lo | hi << 16));
    }
  }
}

}  // namespace

TEST_CASE("ldmatrix_x4 and its trans deal each lane the documented elements" *
          doctest::test_suite("ptx")) {
  std::vector<std::uint32_t> out(32 * 4);
  const std::size_t bytes = kLdmRows * kLdmLd * sizeof(std::uint16_t);
  SUBCASE("static shared memory") {
    wb::launch<ldmatrix_layout_kernel<false>>(dim3(1), dim3(32), 0, out.data(), 0);
    check_ldmatrix_layout(out, false);
    wb::launch<ldmatrix_layout_kernel<false>>(dim3(1), dim3(32), 0, out.data(), 1);
    check_ldmatrix_layout(out, true);
  }
  SUBCASE("dynamic shared memory") {
    wb::launch<ldmatrix_layout_kernel<true>>(dim3(1), dim3(32), bytes, out.data(), 0);
    check_ldmatrix_layout(out, false);
    wb::launch<ldmatrix_layout_kernel<true>>(dim3(1), dim3(32), bytes, out.data(), 1);
    check_ldmatrix_layout(out, true);
  }
}

namespace {

constexpr int kQueries = 16;  // one warp's query rows

// s: (16, N) = Q K^T and o: (16, D) = P V, P = S rounded to T, as an attention kernel computes
// them (without the softmax): Q (16, D), K (N, D), V (N, D) row-major in global memory, copied by
// cp.async into dynamic shared tiles whose rows are D + 8 elements apart (padded), then
//   A of Q and B of K^T by ldmatrix_x4 (K row-major is K^T column-major: B's k pairs adjacent),
//   A of P from S's accumulators by pack_pair (two 16x8 accumulators side by side hold P's
//   16x16 A fragment, register for register),
//   B of V by ldmatrix_x4_trans (V row-major: B's k pairs are a column pair, .trans gathers it).
// One warp; dynamic shared memory (16 + 2 N) (D + 8) elements. `planted` misuses ldmatrix as a
// kernel with a wrong fragment would: K's two B fragments swapped, or V's loaded without .trans.
enum PlantedLdmatrix : int { kLdmNone = 0, kLdmSwapKB = 1, kLdmVWithoutTrans = 2 };
template <typename T, int D, int N>
__global__ void attention_tiles_kernel(const T* q, const T* k, const T* v, float* s, float* o,
                                       int planted) {
  static_assert(D % 16 == 0 && N % 16 == 0, "whole 16x16 fragments");
  constexpr int kLd = D + 8, kChunksPerRow = D / 8;
  T* q_tile = wb::dynamic_shared<T>();
  T* k_tile = q_tile + kQueries * kLd;
  T* v_tile = k_tile + N * kLd;
  const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
  for (int c = lane; c < (kQueries + 2 * N) * kChunksPerRow; c += 32) {
    const int row = c / kChunksPerRow, col = c % kChunksPerRow * 8;
    if (row < kQueries) {
      wb::ptx::cp_async_16(q_tile + row * kLd + col, q + row * D + col, true);
    } else if (row < kQueries + N) {
      const int key = row - kQueries;
      wb::ptx::cp_async_16(k_tile + key * kLd + col, k + key * D + col, true);
    } else {
      const int key = row - kQueries - N;
      wb::ptx::cp_async_16(v_tile + key * kLd + col, v + key * D + col, true);
    }
  }
  wb::ptx::cp_async_commit();
  wb::ptx::cp_async_wait<0>();
  __syncthreads();  // every lane's copies landed: visible to the warp's ldmatrix

  // S = Q K^T: n tiles of 8 keys, k over D.
  float acc_s[N / 8][4] = {};
  for (int col0 = 0; col0 < D; col0 += 16) {
    std::uint32_t a[4];
    // Matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) = a[0..3].
    wb::ptx::ldmatrix_x4(a,
                         q_tile + (lane % 8 + 8 * (lane / 8 % 2)) * kLd + col0 + 8 * (lane / 16));
    for (int key0 = 0; key0 < N; key0 += 16) {
      // Matrices (keys 0-7, cols 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15) = b0, b1.
      std::uint32_t r[4];
      const int key = key0 + lane % 8 + 8 * (lane / 16), col = col0 + 8 * (lane / 8 % 2);
      wb::ptx::ldmatrix_x4(r, k_tile + key * kLd + col);
      if (planted == kLdmSwapKB) {
        std::swap(r[0], r[2]);
        std::swap(r[1], r[3]);
      }
      const std::uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
      wb::ptx::mma_m16n8k16<T>(acc_s[key0 / 8], a, b0, acc_s[key0 / 8]);
      wb::ptx::mma_m16n8k16<T>(acc_s[key0 / 8 + 1], a, b1, acc_s[key0 / 8 + 1]);
    }
  }
  for (int n = 0; n < N / 8; ++n) {
    s[g * N + 8 * n + 2 * t] = acc_s[n][0];
    s[g * N + 8 * n + 2 * t + 1] = acc_s[n][1];
    s[(g + 8) * N + 8 * n + 2 * t] = acc_s[n][2];
    s[(g + 8) * N + 8 * n + 2 * t + 1] = acc_s[n][3];
  }

  // O = P V: n tiles of 8 head columns, k over the N keys.
  float acc_o[D / 8][4] = {};
  for (int key0 = 0; key0 < N; key0 += 16) {
    const float(&lo)[4] = acc_s[key0 / 8];      // keys key0 .. key0 + 7
    const float(&hi)[4] = acc_s[key0 / 8 + 1];  // keys key0 + 8 .. key0 + 15
    const std::uint32_t a[4] = {
        wb::ptx::pack_pair<T>(lo[0], lo[1]),  // P(g, 2t..2t+1)
        wb::ptx::pack_pair<T>(lo[2], lo[3]),  // P(g+8, 2t..2t+1)
        wb::ptx::pack_pair<T>(hi[0], hi[1]),  // P(g, 2t+8..2t+9)
        wb::ptx::pack_pair<T>(hi[2], hi[3]),  // P(g+8, 2t+8..2t+9)
    };
    for (int col0 = 0; col0 < D; col0 += 16) {
      // Matrices (keys 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15), transposed.
      std::uint32_t r[4];
      const int key = key0 + lane % 8 + 8 * (lane / 8 % 2), col = col0 + 8 * (lane / 16);
      if (planted == kLdmVWithoutTrans) {
        wb::ptx::ldmatrix_x4(r, v_tile + key * kLd + col);
      } else {
        wb::ptx::ldmatrix_x4_trans(r, v_tile + key * kLd + col);
      }
      const std::uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
      wb::ptx::mma_m16n8k16<T>(acc_o[col0 / 8], a, b0, acc_o[col0 / 8]);
      wb::ptx::mma_m16n8k16<T>(acc_o[col0 / 8 + 1], a, b1, acc_o[col0 / 8 + 1]);
    }
  }
  for (int n = 0; n < D / 8; ++n) {
    o[g * D + 8 * n + 2 * t] = acc_o[n][0];
    o[g * D + 8 * n + 2 * t + 1] = acc_o[n][1];
    o[(g + 8) * D + 8 * n + 2 * t] = acc_o[n][2];
    o[(g + 8) * D + 8 * n + 2 * t + 1] = acc_o[n][3];
  }
}

/// How many elements of S and of O differ from the exact matmuls.
struct TileMismatches {
  int s = 0, o = 0;
};

template <typename T>
TileMismatches attention_tiles_mismatches(int planted) {
  constexpr int D = 32, N = 48;
  Aligned<T> q(kQueries * D), k(N * D), v(N * D);
  Aligned<float> s(kQueries * N), o(kQueries * D);
  std::mt19937 rng(2024);
  std::uniform_int_distribution<int> small(-2, 2);
  // |q k| <= 4 over D = 32 columns: |S| <= 128, an integer both 16-bit types hold, so P = S
  // exactly; |P v| <= 256 over N = 48 keys: |O| <= 12288. Every sum is exact in float.
  for (std::size_t i = 0; i < q.size; ++i) q[i] = to16<T>(static_cast<float>(small(rng)));
  for (std::size_t i = 0; i < k.size; ++i) k[i] = to16<T>(static_cast<float>(small(rng)));
  for (std::size_t i = 0; i < v.size; ++i) v[i] = to16<T>(static_cast<float>(small(rng)));
  const std::size_t bytes = (kQueries + 2 * N) * (D + 8) * sizeof(T);
  wb::launch<attention_tiles_kernel<T, D, N>>(dim3(1), dim3(32), bytes, q.p, k.p, v.p, s.p, o.p,
                                              planted);
  TileMismatches m;
  std::vector<double> p(kQueries * N);  // the exact S, which P equals
  for (int i = 0; i < kQueries; ++i) {
    for (int j = 0; j < N; ++j) {
      double sum = 0.0;
      for (int c = 0; c < D; ++c) {
        sum += static_cast<double>(static_cast<float>(q[i * D + c])) *
               static_cast<float>(k[j * D + c]);
      }
      p[i * N + j] = sum;
      m.s += static_cast<double>(s[i * N + j]) != sum;
    }
  }
  for (int i = 0; i < kQueries; ++i) {
    for (int c = 0; c < D; ++c) {
      double sum = 0.0;
      for (int j = 0; j < N; ++j) sum += p[i * N + j] * static_cast<float>(v[j * D + c]);
      m.o += static_cast<double>(o[i * D + c]) != sum;
    }
  }
  return m;
}

template <typename T>
void check_attention_tiles() {
  const TileMismatches exact = attention_tiles_mismatches<T>(kLdmNone);
  CHECK(exact.s == 0);
  CHECK(exact.o == 0);
  // The planted misuse: nothing faults (the simulator cannot know which fragment was meant),
  // the products come out wrong, which the comparison with the matmul shows.
  const TileMismatches swapped = attention_tiles_mismatches<T>(kLdmSwapKB);
  CHECK(swapped.s > 0);
  const TileMismatches untransposed = attention_tiles_mismatches<T>(kLdmVWithoutTrans);
  CHECK(untransposed.s == 0);
  CHECK(untransposed.o > 0);
}

}  // namespace

TEST_CASE(
    "S = Q K^T and O = P V from ldmatrix fragments equal the plain matmuls, and a wrong "
    "fragment (K's B fragments swapped, V without .trans) does not" *
    doctest::test_suite("ptx")) {
  SUBCASE("half") {
    check_attention_tiles<__half>();
  }
  SUBCASE("bfloat16") {
    check_attention_tiles<__nv_bfloat16>();
  }
}

// ---- cp.async ----------------------------------------------------------------------------------

namespace {

constexpr int kChunkFloats = 4;  // one 16-byte copy
constexpr float kOld = -7.0f;    // what a chunk holds before any copy is issued there

// What the simulator puts in a copy's destination from its issue until its wait: 0xff bytes, a
// NaN, since a GPU may have landed all of the copy, some or none (common/sim/ptx.hpp).
bool in_flight(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits == 0xffffffffu;
}

// Thread t of one warp copies 16-byte chunk t of src into chunk t of a shared tile (zeros when
// t % 3 == 0: full = false), then reads its own chunk: into `before` right after issuing, into
// `after` once cp_async_wait<0> ran (`wait` = 1) or not (`wait` = 0: the missing wait).
// `commit` = 0 leaves the copy in the open group, which no wait covers. before, after: (32, 4).
__global__ void cp_async_landing_kernel(const float* src, float* before, float* after, int commit,
                                        int wait) {
  __shared__ __align__(16) float tile[32 * kChunkFloats];
  const int t = static_cast<int>(threadIdx.x);
  float* mine = tile + t * kChunkFloats;
  for (int i = 0; i < kChunkFloats; ++i) mine[i] = kOld;
  wb::ptx::cp_async_16(mine, src + t * kChunkFloats, t % 3 != 0);
  if (commit != 0) wb::ptx::cp_async_commit();
  for (int i = 0; i < kChunkFloats; ++i) before[t * kChunkFloats + i] = mine[i];
  if (wait != 0) wb::ptx::cp_async_wait<0>();
  for (int i = 0; i < kChunkFloats; ++i) after[t * kChunkFloats + i] = mine[i];
}

// Block 0 issues a copy per thread and ends without waiting; block 1 issues none and waits, then
// reads the chunk block 0's copy was headed for: out: (32, 4). A block's copies are its own (a
// GPU's land in the shared memory of the block that issued them), so block 1 reads old bytes.
__global__ void cp_async_block_end_kernel(const float* src, float* out) {
  __shared__ __align__(16) float tile[32 * kChunkFloats];
  const int t = static_cast<int>(threadIdx.x);
  float* mine = tile + t * kChunkFloats;
  for (int i = 0; i < kChunkFloats; ++i) mine[i] = kOld;
  if (blockIdx.x == 0) {
    wb::ptx::cp_async_16(mine, src + t * kChunkFloats, true);
    wb::ptx::cp_async_commit();
  } else {
    wb::ptx::cp_async_wait<0>();
    for (int i = 0; i < kChunkFloats; ++i) out[t * kChunkFloats + i] = mine[i];
  }
}

// The double-buffered loop of a pipelined kernel: tile i + 1's copies are issued into the other
// buffer before tile i is used, and cp_async_wait<1> lands only tile i's group. Thread t copies
// chunk t of each tile. used: (tiles, 32, 4), tile i as read after that wait; other: (tiles, 32,
// 4), what the other buffer held at that moment. src: (tiles, 32, 4).
__global__ void double_buffer_kernel(const float* src, int tiles, float* used, float* other) {
  __shared__ __align__(16) float buffer[2][32 * kChunkFloats];
  const int t = static_cast<int>(threadIdx.x), tile_floats = 32 * kChunkFloats;
  for (int i = 0; i < kChunkFloats; ++i) buffer[0][t * kChunkFloats + i] = kOld;
  for (int i = 0; i < kChunkFloats; ++i) buffer[1][t * kChunkFloats + i] = kOld;
  wb::ptx::cp_async_16(buffer[0] + t * kChunkFloats, src + t * kChunkFloats, true);
  wb::ptx::cp_async_commit();
  for (int i = 0; i < tiles; ++i) {
    if (i + 1 < tiles) {
      wb::ptx::cp_async_16(buffer[(i + 1) % 2] + t * kChunkFloats,
                           src + (i + 1) * tile_floats + t * kChunkFloats, true);
    }
    wb::ptx::cp_async_commit();  // an empty group on the last tile keeps wait<1> uniform
    wb::ptx::cp_async_wait<1>();
    for (int j = 0; j < kChunkFloats; ++j) {
      used[i * tile_floats + t * kChunkFloats + j] = buffer[i % 2][t * kChunkFloats + j];
      other[i * tile_floats + t * kChunkFloats + j] = buffer[(i + 1) % 2][t * kChunkFloats + j];
    }
  }
}

std::vector<float> arange(int n, float first) {
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = first + static_cast<float>(i);
  return x;
}

}  // namespace

TEST_CASE("cp_async copies land at the wait that covers their group and not before" *
          doctest::test_suite("ptx")) {
  Aligned<float> src(32 * kChunkFloats);
  const std::vector<float> values = arange(32 * kChunkFloats, 1.0f);
  std::memcpy(src.p, values.data(), values.size() * sizeof(float));
  std::vector<float> before(32 * kChunkFloats), after(32 * kChunkFloats);
  const auto landed = [&](int i) { return i / kChunkFloats % 3 != 0 ? values[i] : 0.0f; };
  SUBCASE("committed and waited for: the bytes of src, zeros when not full") {
    wb::launch<cp_async_landing_kernel>(dim3(1), dim3(32), 0, src.p, before.data(), after.data(), 1,
                                        1);
    for (int i = 0; i < 32 * kChunkFloats; ++i) {
      CAPTURE(i);
      CHECK(in_flight(before[i]));
      CHECK(after[i] == landed(i));
    }
  }
  SUBCASE("a missing wait reads NaN") {
    // The planted misuse: on a GPU the copy may or may not have landed; here the destination is
    // NaN until the wait, so the misuse shows up every time instead of once in a while.
    wb::launch<cp_async_landing_kernel>(dim3(1), dim3(32), 0, src.p, before.data(), after.data(), 1,
                                        0);
    for (int i = 0; i < 32 * kChunkFloats; ++i) CHECK(in_flight(after[i]));
  }
  SUBCASE("a missing commit leaves the copy out of every wait") {
    // wait_group covers committed groups only: on a GPU an uncommitted copy lands whenever it
    // does, here never before its commit.
    wb::launch<cp_async_landing_kernel>(dim3(1), dim3(32), 0, src.p, before.data(), after.data(), 0,
                                        1);
    for (int i = 0; i < 32 * kChunkFloats; ++i) CHECK(in_flight(after[i]));
  }
  SUBCASE("copies left in flight when a block ends do not land in the next block") {
    wb::launch<cp_async_block_end_kernel>(dim3(2), dim3(32), 0, src.p, after.data());
    for (int i = 0; i < 32 * kChunkFloats; ++i) CHECK(after[i] == kOld);
  }
}

TEST_CASE("a double buffer waited with cp_async_wait of 1 lands only the older group" *
          doctest::test_suite("ptx")) {
  constexpr int kTiles = 4, kTileFloats = 32 * kChunkFloats;
  Aligned<float> src(kTiles * kTileFloats);
  const std::vector<float> values = arange(kTiles * kTileFloats, 100.0f);
  std::memcpy(src.p, values.data(), values.size() * sizeof(float));
  std::vector<float> used(kTiles * kTileFloats), other(kTiles * kTileFloats);
  wb::launch<double_buffer_kernel>(dim3(1), dim3(32), 0, src.p, kTiles, used.data(), other.data());
  for (int i = 0; i < kTiles; ++i) {
    for (int e = 0; e < kTileFloats; ++e) {
      CAPTURE(i);
      CAPTURE(e);
      CHECK(used[i * kTileFloats + e] == values[i * kTileFloats + e]);
      // Tile i + 1 is still in flight: its buffer is NaN. After the last tile nothing is: the
      // buffer holds tile i - 1.
      if (i + 1 < kTiles) {
        CHECK(in_flight(other[i * kTileFloats + e]));
      } else {
        CHECK(other[i * kTileFloats + e] == values[(i - 1) * kTileFloats + e]);
      }
    }
  }
}
