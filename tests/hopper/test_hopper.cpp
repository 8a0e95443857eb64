// The Hopper wrappers of common/hopper.cuh in their own test kernel (tests/hopper/
// warpgroup_gemm.cuh: C = A B^T on one warpgroup, fed by TMA through an mbarrier ring), on the
// simulator (suite `hopper`) and on an sm_90a GPU (suite `cuda`), against a double reference:
// fp16 and bf16; n = 64, 128 and 256; k = 64 (one tile) and 256 (the ring of 2 stages twice
// round, so every mbarrier's phase flips and its parity is waited on both ways); A from shared
// memory (wgmma_ss) and from registers (wgmma_rs); B K-major and MN-major. And what the launcher
// and encode_tensor_map refuse.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "common/backend.hpp"
#include "common/buffer.hpp"
#include "common/dtype.hpp"
#include "common/inputs.hpp"
#include "tests/hopper/warpgroup_gemm.hpp"

using namespace wb;

namespace {

constexpr int kRows = 64;  // A's and C's rows: one wgmma's M
constexpr std::uint64_t kSeed = 90;

struct GemmCase {
  Dtype dtype;
  int n, k;
  bool a_from_registers, b_mn_major;

  std::string name() const {
    return std::string(to_string(dtype)) + " n " + std::to_string(n) + " k " + std::to_string(k) +
           (a_from_registers ? " wgmma_rs" : " wgmma_ss") +
           (b_mn_major ? " B MN-major" : " B K-major");
  }
};

std::vector<GemmCase> gemm_cases() {
  std::vector<GemmCase> cases;
  for (Dtype dtype : {Dtype::fp16, Dtype::bf16})
    for (int n : {64, 128, 256})
      for (int k : {64, 256})
        for (bool a_from_registers : {false, true})
          for (bool b_mn_major : {false, true})
            cases.push_back({dtype, n, k, a_from_registers, b_mn_major});
  return cases;
}

/// C = A B^T on backend B, against the exact product. Inputs: randn rounded to the 16-bit type,
/// a value of its own almost everywhere, so that an element read from the wrong place (a
/// swizzle, a descriptor stride, a fragment register out of order) changes the sums.
///
/// The bound: each product of two 16-bit values is exact in float (11 + 11 significand bits of
/// fp16, 8 + 8 of bf16, within float's 24), so the only error is in the additions: summed in
/// order with one rounding each, |C - exact| <= gamma_k sum |a b|, gamma_k = k u / (1 - k u),
/// u = 2^-24 (Higham, recursive summation; tests/sim/ptx_support.hpp's check_product_sum). The
/// simulator adds in that order (k ascending, one rounding per addition), which is checked bit
/// for bit there. The tensor cores' order and roundings are unspecified: they add blocks of at
/// least 4 exact products with one truncation each (at most 2u; Fasi, Higham, Mikaitis and
/// Pranesh, "Numerical behavior of NVIDIA tensor cores", 2021), at most k / 2 u in all, within
/// the same bound.
template <Backend B>
void check_gemm(const GemmCase& c) {
  const std::vector<float> a = round_elements(randn(std::size_t(kRows) * c.k, kSeed), c.dtype);
  const std::vector<float> b = round_elements(randn(std::size_t(c.n) * c.k, kSeed + 1), c.dtype);
  std::vector<float> b_given = b;  // as the kernel reads it: (n, k), or MN-major (k, n)
  if (c.b_mn_major)
    for (int j = 0; j < c.n; ++j)
      for (int kk = 0; kk < c.k; ++kk)
        b_given[std::size_t(kk) * c.n + j] = b[std::size_t(j) * c.k + kk];
  DeviceBuffer<unsigned char> a_dev(B, encode_elements(a, c.dtype));
  DeviceBuffer<unsigned char> b_dev(B, encode_elements(b_given, c.dtype));
  DeviceBuffer<float> c_dev(B, std::size_t(kRows) * c.n);  // 0xff bytes: unwritten reads NaN
  test::warpgroup_gemm<B>({a_dev.data(), b_dev.data(), c_dev.data(), c.n, c.k, c.dtype,
                           c.a_from_registers, c.b_mn_major});
  const std::vector<float> got = c_dev.download();

  const double u = std::ldexp(1.0, -24), gamma = c.k * u / (1 - c.k * u);
  int outside = 0, out_of_order = 0;
  std::string first;
  for (int i = 0; i < kRows; ++i) {
    for (int j = 0; j < c.n; ++j) {
      double exact = 0.0, magnitude = 0.0;
      float in_order = 0.f;
      for (int kk = 0; kk < c.k; ++kk) {
        const float x = a[std::size_t(i) * c.k + kk], y = b[std::size_t(j) * c.k + kk];
        exact += double(x) * y;
        magnitude += std::fabs(double(x) * y);
        in_order += x * y;  // an exact product, one rounding per addition
      }
      const float v = got[std::size_t(i) * c.n + j];
      const bool within = std::isfinite(v) && std::fabs(v - exact) <= gamma * magnitude;
      const bool ordered = B != Backend::sim || v == in_order;
      if (within && ordered) continue;
      outside += !within;
      out_of_order += !ordered;
      if (first.empty())
        first = "C(" + std::to_string(i) + ", " + std::to_string(j) + ") = " + std::to_string(v) +
                ", exact " + std::to_string(exact) + ", bound " +
                std::to_string(gamma * magnitude) + ", in order " + std::to_string(in_order);
    }
  }
  INFO(first);
  CHECK(outside == 0);
  CHECK(out_of_order == 0);
}

template <Backend B>
void every_case_equals_the_product() {
  for (const GemmCase& c : gemm_cases()) {
    SUBCASE(c.name().c_str()) {
      check_gemm<B>(c);
    }
  }
}

template <Backend B>
void refuses_what_it_cannot_take() {
  DeviceBuffer<unsigned char> a(B, std::size_t(kRows) * 256 * 2 + 16);
  DeviceBuffer<float> c(B, std::size_t(kRows) * 256);
  const test::WarpgroupGemmArgs ok{a.data(), a.data(), c.data(), 64, 64, Dtype::fp16, false, false};
  test::WarpgroupGemmArgs bad = ok;
  bad.n = 96;
  CHECK_THROWS_WITH_AS(test::warpgroup_gemm<B>(bad), doctest::Contains("n = 96"),
                       std::invalid_argument);
  bad = ok;
  bad.k = 100;
  CHECK_THROWS_WITH_AS(test::warpgroup_gemm<B>(bad), doctest::Contains("k = 100"),
                       std::invalid_argument);
  bad = ok;
  bad.dtype = Dtype::fp32;
  CHECK_THROWS_AS(test::warpgroup_gemm<B>(bad), std::invalid_argument);

  // encode_tensor_map: a (64, 64) fp16 tensor in boxes of 64 x 64 is fine; each change below
  // breaks one limit cuTensorMapEncodeTiled documents.
  struct Map {
    const char* breaks;
    std::size_t offset;  // bytes added to the global address
    int rank;
    std::uint64_t sizes[3], strides[2];
    std::uint32_t box[3];
    bool swizzled;
  };
  // clang-format off
  const Map maps[] = {
      {nullptr, 0, 2, {64, 64, 1}, {128, 0}, {64, 64, 1}, true},
      {"a global address that is not 16-byte aligned", 2, 2, {64, 64, 1}, {128, 0}, {64, 64, 1}, true},
      {"rank 1 (the wrappers copy 2-D and 3-D boxes)", 0, 1, {64, 64, 1}, {128, 0}, {64, 64, 1}, true},
      {"a size of 0", 0, 2, {64, 0, 1}, {128, 0}, {64, 64, 1}, true},
      {"a stride that is not a multiple of 16", 0, 2, {64, 64, 1}, {120, 0}, {64, 64, 1}, true},
      {"a box size of 257", 0, 3, {64, 64, 300}, {128, 8192}, {64, 64, 257}, true},
      {"a box size of 0", 0, 2, {64, 64, 1}, {128, 0}, {64, 0, 1}, true},
      {"an inner box of 8 bytes (not whole 16-byte chunks)", 0, 2, {64, 64, 1}, {128, 0}, {4, 64, 1}, false},
      {"an inner box of 144 bytes under the 128-byte swizzle", 0, 2, {72, 64, 1}, {144, 0}, {72, 64, 1}, true},
  };
  // clang-format on
  for (const Map& m : maps) {
    const auto* global = static_cast<const unsigned char*>(a.data()) + m.offset;
    if (m.breaks == nullptr) {
      CHECK_NOTHROW(
          test::encode_fp16_tensor_map<B>(global, m.rank, m.sizes, m.strides, m.box, m.swizzled));
    } else {
      INFO("a map with ", m.breaks);
      CHECK_THROWS_AS(
          test::encode_fp16_tensor_map<B>(global, m.rank, m.sizes, m.strides, m.box, m.swizzled),
          std::invalid_argument);
    }
  }
}

/// body(std::integral_constant<Backend, Backend::cuda>{}) in a build with nvcc; without it the
/// call is discarded at compile time (no cuda kernels are linked) and the case stays empty:
/// main.cpp skips the cuda suite before it runs.
template <typename Body>
void on_cuda(Body&& body) {
  if constexpr (kCudaCompiled) body(std::integral_constant<Backend, Backend::cuda>{});
}

}  // namespace

TEST_CASE("sim: the warpgroup GEMM equals the exact product within its bound" *
          doctest::test_suite("hopper")) {
  every_case_equals_the_product<Backend::sim>();
}

TEST_CASE("sim: the warpgroup GEMM and encode_tensor_map refuse what they cannot take" *
          doctest::test_suite("hopper")) {
  refuses_what_it_cannot_take<Backend::sim>();
}

TEST_CASE("cuda: the warpgroup GEMM equals the exact product within its bound" *
          doctest::test_suite("cuda")) {
  on_cuda([](auto b) { every_case_equals_the_product<decltype(b)::value>(); });
}

TEST_CASE("cuda: the warpgroup GEMM and encode_tensor_map refuse what they cannot take" *
          doctest::test_suite("cuda")) {
  on_cuda([](auto b) { refuses_what_it_cannot_take<decltype(b)::value>(); });
}
