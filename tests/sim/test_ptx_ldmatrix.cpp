// ldmatrix in the simulator: each lane's registers against the PTX ISA's layout, plain and
// .trans, and the attention products chapter 08 builds on them. The other PTX wrappers:
// test_ptx.cpp (mma.m16n8k16), test_ptx_cp_async.cpp; faults: test_ptx_faults.cpp.
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

// ---- ldmatrix ----------------------------------------------------------------------------------

namespace {

using wb::test::Aligned;
using wb::test::to16;

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

/// Stores a warp's 16 x (8 Tiles) accumulators, Tiles m16n8 tiles side by side, to out (rows
/// `ld` floats apart): lane l = 4 g + t holds rows g and g + 8, columns 2t and 2t + 1 of each.
template <int Tiles>
__device__ void store_accumulators(const float (&acc)[Tiles][4], float* out, int ld) {
  const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
  for (int n = 0; n < Tiles; ++n) {
    out[g * ld + 8 * n + 2 * t] = acc[n][0];
    out[g * ld + 8 * n + 2 * t + 1] = acc[n][1];
    out[(g + 8) * ld + 8 * n + 2 * t] = acc[n][2];
    out[(g + 8) * ld + 8 * n + 2 * t + 1] = acc[n][3];
  }
}

enum PlantedLdmatrix : int { kLdmNone = 0, kLdmSwapKB = 1, kLdmVWithoutTrans = 2 };
template <typename T, int D, int N>
__global__ void attention_tiles_kernel(const T* q, const T* k, const T* v, float* s, float* o,
                                       int planted) {
  static_assert(D % 16 == 0 && N % 16 == 0, "whole 16x16 fragments");
  constexpr int kLd = D + 8, kChunksPerRow = D / 8;
  T* q_tile = wb::dynamic_shared<T>();
  T* k_tile = q_tile + kQueries * kLd;
  T* v_tile = k_tile + N * kLd;
  const int lane = static_cast<int>(threadIdx.x);
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
  store_accumulators(acc_s, s, N);

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
  store_accumulators(acc_o, o, D);
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
