// WMMA in the simulator: 16x16x16 products against fp64, the layouts, the documented element
// mapping, element-wise x[] work between load and store, several warps. Faults and race
// mode: test_wmma_faults.cpp.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/half.hpp"
#include "common/kernel.cuh"
#include "tests/sim/ptx_support.hpp"
#include "tests/sim/wmma_support.hpp"

namespace {

using namespace nvcuda;
using wb::test::Aligned;
using wb::test::to16;
constexpr int kTile = 16;

/// Element (r, c) of a matrix stored with leading dimension ld.
std::size_t at(int r, int c, int ld, bool col_major) {
  return col_major ? static_cast<std::size_t>(c) * ld + r : static_cast<std::size_t>(r) * ld + c;
}

// d: (warps * 16 * 16) row-major or column-major per `d_col`, one tile per warp of every block:
// D = A B + C with A (16, 16 * k_tiles), B (16 * k_tiles, 16) stored with leading dimensions
// lda and ldb (in elements) and layouts LA, LB; C (16, 16) row-major. Each warp of each block
// uses its own tiles (block-major, then warp), the k loop accumulates in one fragment.
template <typename T, typename LA, typename LB>
__global__ void gemm_kernel(const T* a, const T* b, const float* c, float* d, int k_tiles, int lda,
                            int ldb, int d_col) {
  constexpr bool a_col = std::is_same_v<LA, wmma::col_major>;
  constexpr bool b_col = std::is_same_v<LB, wmma::col_major>;
  const int tile = static_cast<int>(blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32);
  const T* a_tile = a + static_cast<std::size_t>(tile) * (a_col ? 16 * k_tiles * lda : 16 * lda);
  const T* b_tile = b + static_cast<std::size_t>(tile) * (b_col ? 16 * ldb : 16 * k_tiles * ldb);
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LA> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(acc, c + tile * 256, 16, wmma::mem_row_major);
  for (int kt = 0; kt < k_tiles; ++kt) {
    // Tile kt of A's row block and of B's column block.
    wmma::load_matrix_sync(fa, a_tile + (a_col ? kt * 16 * lda : kt * 16), lda);
    wmma::load_matrix_sync(fb, b_tile + (b_col ? kt * 16 : kt * 16 * ldb), ldb);
    wmma::mma_sync(acc, fa, fb, acc);
  }
  wmma::store_matrix_sync(d + tile * 256, acc, 16,
                          d_col ? wmma::mem_col_major : wmma::mem_row_major);
}

/// Runs gemm_kernel on random inputs for `tiles` tiles (blocks x warps) and checks every
/// element against fp64 and against the documented float k-order sum.
template <typename T, typename LA, typename LB>
void check_gemm(int blocks, int warps, int k_tiles, bool d_col) {
  constexpr bool a_col = std::is_same_v<LA, wmma::col_major>;
  constexpr bool b_col = std::is_same_v<LB, wmma::col_major>;
  const int tiles = blocks * warps, k = 16 * k_tiles;
  // Leading dimensions larger than the tiles (padding), multiples of 16 bytes.
  const int lda = (a_col ? 16 : k) + 8, ldb = (b_col ? k : 16) + 8;
  const std::size_t a_size = static_cast<std::size_t>(tiles) * (a_col ? k * lda : 16 * lda);
  const std::size_t b_size = static_cast<std::size_t>(tiles) * (b_col ? 16 * ldb : k * ldb);
  Aligned<T> a(a_size), b(b_size);
  Aligned<float> c(static_cast<std::size_t>(tiles) * 256), d(static_cast<std::size_t>(tiles) * 256);
  std::mt19937 rng(7 + static_cast<unsigned>(tiles * 31 + k_tiles));
  std::normal_distribution<float> randn(0.0f, 1.0f);
  // Mixed signs and magnitudes (a few x20 outliers), so cancellation and rounding happen.
  auto value = [&](std::size_t i) { return randn(rng) * (i % 37 == 0 ? 20.0f : 1.0f); };
  for (std::size_t i = 0; i < a_size; ++i) a[i] = to16<T>(value(i));
  for (std::size_t i = 0; i < b_size; ++i) b[i] = to16<T>(value(i));
  for (std::size_t i = 0; i < c.size; ++i) c[i] = 4.0f * randn(rng);
  wb::launch<gemm_kernel<T, LA, LB>>(dim3(blocks), dim3(32 * warps), 0, a.p, b.p, c.p, d.p, k_tiles,
                                     lda, ldb, d_col ? 1 : 0);
  // D(m, n) is C(m, n) plus k exact products added one at a time in float (check_product_sum).
  // A GPU's tensor cores add in another order and may truncate: allow twice its bound when
  // comparing with a GPU.
  CAPTURE(a_col);
  CAPTURE(b_col);
  CAPTURE(d_col);
  for (int t = 0; t < tiles; ++t) {
    const T* at_ = a.p + static_cast<std::size_t>(t) * (a_col ? k * lda : 16 * lda);
    const T* bt_ = b.p + static_cast<std::size_t>(t) * (b_col ? 16 * ldb : k * ldb);
    const float* ct = c.p + static_cast<std::size_t>(t) * 256;
    const float* dt = d.p + static_cast<std::size_t>(t) * 256;
    for (int m = 0; m < kTile; ++m) {
      for (int n = 0; n < kTile; ++n) {
        CAPTURE(t);
        CAPTURE(m);
        CAPTURE(n);
        const auto factors = [&](int kk) {
          return std::pair{static_cast<float>(at_[at(m, kk, lda, a_col)]),
                           static_cast<float>(bt_[at(kk, n, ldb, b_col)])};
        };
        wb::test::check_product_sum(dt[at(m, n, 16, d_col)], ct[m * 16 + n], k, factors);
      }
    }
  }
}

/// check_gemm on one tile (k = 16) with A and B in every pairing of layouts, D in A's.
template <typename T>
void check_gemm_layouts() {
  check_gemm<T, wmma::row_major, wmma::col_major>(1, 1, 1, false);
  check_gemm<T, wmma::col_major, wmma::row_major>(1, 1, 1, true);
  check_gemm<T, wmma::row_major, wmma::row_major>(1, 1, 1, false);
  check_gemm<T, wmma::col_major, wmma::col_major>(1, 1, 1, true);
}

}  // namespace

TEST_CASE("mma_sync multiplies 16x16x16 tiles within the float summation bound" *
          doctest::test_suite("wmma")) {
  SUBCASE("half") {
    check_gemm_layouts<__half>();
  }
  SUBCASE("bfloat16") {
    check_gemm_layouts<__nv_bfloat16>();
  }
}

TEST_CASE("several warps and blocks accumulate over a k loop, each on its own tiles" *
          doctest::test_suite("wmma")) {
  SUBCASE("half, 3 blocks of 4 warps, k = 64") {
    check_gemm<__half, wmma::row_major, wmma::col_major>(3, 4, 4, false);
  }
  SUBCASE("bfloat16, 2 blocks of 3 warps, k = 48") {
    check_gemm<__nv_bfloat16, wmma::row_major, wmma::row_major>(2, 3, 3, true);
  }
}

namespace {

// out: (32 * 8) each lane's accumulator elements after load; the tile is also scaled by
// `scale` element-wise in x[] (as FlashAttention rescales its accumulator) and stored to y.
__global__ void accumulator_roundtrip_kernel(const float* x, float scale, float* out, float* y) {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(acc, x, 16, wmma::mem_row_major);
  for (int i = 0; i < acc.num_elements; ++i) out[threadIdx.x * 8 + i] = acc.x[i];
  if (scale != 1.0f) {  // (multiplying by 1 would quiet the signalling NaN of the bit test)
    for (int i = 0; i < acc.num_elements; ++i) acc.x[i] *= scale;
  }
  wmma::store_matrix_sync(y, acc, 16, wmma::mem_row_major);
}

// out: (32 * 16) each lane's A and B fragment elements (as float) loaded from x (row-major
// A, col-major B: both read the same memory) and y the filled accumulator stored.
__global__ void ab_mapping_kernel(const __half* x, float* a_out, float* b_out, float* y) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(a, x, 16);
  wmma::load_matrix_sync(b, x, 16);
  for (int i = 0; i < a.num_elements; ++i) a_out[threadIdx.x * 16 + i] = __half2float(a.x[i]);
  for (int i = 0; i < b.num_elements; ++i) b_out[threadIdx.x * 16 + i] = __half2float(b.x[i]);
  wmma::fill_fragment(acc, 2.5f);
  wmma::store_matrix_sync(y, acc, 16, wmma::mem_col_major);
}

}  // namespace

TEST_CASE("x[] follows the documented mapping and load, x[] scaling, store round-trips" *
          doctest::test_suite("wmma")) {
  Aligned<float> x(256), y(256);
  // Distinct values, plus bit patterns a float conversion would change: -0 and a NaN payload.
  for (int i = 0; i < 256; ++i) x[i] = static_cast<float>(i) - 100.5f;
  std::uint32_t nan_bits = 0x7fa00001u;  // a signalling NaN's payload
  std::memcpy(&x[17], &nan_bits, 4);
  x[18] = -0.0f;
  std::vector<float> out(32 * 8);
  wb::launch<accumulator_roundtrip_kernel>(dim3(1), dim3(32), 0, x.p, 1.0f, out.data(), y.p);
  for (unsigned lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) {
      const wb::sim::WmmaCoord rc = wb::sim::wmma_coord(wb::sim::WmmaUse::accumulator, lane, i);
      const float v = out[lane * 8 + i], ref = x[rc.row * 16 + rc.col];
      CHECK(std::memcmp(&v, &ref, 4) == 0);
    }
  }
  CHECK(std::memcmp(x.p, y.p, 256 * sizeof(float)) == 0);  // bit for bit, NaN payload too
  wb::launch<accumulator_roundtrip_kernel>(dim3(1), dim3(32), 0, x.p, 0.5f, out.data(), y.p);
  for (int i = 0; i < 256; ++i) {
    if (i != 17) CHECK(y[i] == 0.5f * x[i]);
  }

  Aligned<__half> h(256);
  for (int i = 0; i < 256; ++i) h[i] = __float2half(static_cast<float>(i));  // exact
  std::vector<float> a_out(32 * 16), b_out(32 * 16);
  wb::launch<ab_mapping_kernel>(dim3(1), dim3(32), 0, h.p, a_out.data(), b_out.data(), y.p);
  for (unsigned lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 16; ++i) {
      const wb::sim::WmmaCoord ra = wb::sim::wmma_coord(wb::sim::WmmaUse::matrix_a, lane, i);
      const wb::sim::WmmaCoord rb = wb::sim::wmma_coord(wb::sim::WmmaUse::matrix_b, lane, i);
      CHECK(a_out[lane * 16 + i] == static_cast<float>(ra.row * 16 + ra.col));  // A row-major
      CHECK(b_out[lane * 16 + i] == static_cast<float>(rb.col * 16 + rb.row));  // B col-major
    }
  }
  for (int i = 0; i < 256; ++i) CHECK(y[i] == 2.5f);
  // Every element of each kind is held exactly once (x[8 + j] repeats x[j]).
  for (auto use :
       {wb::sim::WmmaUse::matrix_a, wb::sim::WmmaUse::matrix_b, wb::sim::WmmaUse::accumulator}) {
    std::vector<int> held(256, 0);
    for (unsigned lane = 0; lane < 32; ++lane) {
      for (int i = 0; i < 8; ++i) {
        const wb::sim::WmmaCoord rc = wb::sim::wmma_coord(use, lane, i);
        ++held[rc.row * 16 + rc.col];
      }
    }
    for (int count : held) CHECK(count == 1);
  }
}
