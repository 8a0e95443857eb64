// The Hopper instructions under memcheck, initcheck and profile mode (the instrumented binary
// test_sim_access): a TMA box is one global request whose bytes and sectors are the rows it
// reads inside the tensor; wgmma's operand reads are shared requests served a core matrix (8
// rows of 16 bytes) per phase, conflict-free in every canonical layout; a box past its buffer,
// an operand nothing wrote and an mbarrier in global memory are reported with the line.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/buffer.hpp"
#include "common/hopper.cuh"
#include "common/kernel.cuh"
#include "common/sim/access.hpp"
#include "tests/sim/profile_support.hpp"
#include "tests/sim/fault_of.hpp"

namespace {

using Kind = wb::sim::Fault::Kind;
using wb::Backend;
using wb::DeviceBuffer;
using wb::ptx::Swizzle;
using wb::ptx::TensorMap;
using wb::sim::LaunchProfile;
using wb::test::profile_of;
using wb::test::check_says;
using wb::test::fault_of;

constexpr int kBoxCols = 32, kBoxRows = 8;  // 128-byte rows of floats
constexpr int kBoxFloats = kBoxCols * kBoxRows;

TensorMap map_of(const float* data, int cols, int rows) {
  TensorMap m;
  const std::uint64_t sizes[2] = {std::uint64_t(cols), std::uint64_t(rows)};
  const std::uint64_t strides[1] = {cols * sizeof(float)};
  const std::uint32_t box[2] = {kBoxCols, kBoxRows};
  wb::ptx::encode_tensor_map(m, data, 2, sizes, strides, box, Swizzle::b128);
  return m;
}

constexpr int kTmaLine = __LINE__ + 9;  // the tma_load_2d below
// One warp: thread 0 loads the box at (x, y); every thread copies its part of it to out
// (kBoxFloats).
__global__ void tma_box_kernel(const __grid_constant__ TensorMap map, int x, int y, float* out) {
  __shared__ std::uint64_t full;
  float* box = wb::dynamic_shared<float>();
  if (threadIdx.x == 0) {
    wb::ptx::mbarrier_init(&full, 1);
    wb::ptx::mbarrier_arrive_expect_tx(&full, kBoxFloats * sizeof(float));
    wb::ptx::tma_load_2d(box, &map, x, y, &full);
  }
  __syncthreads();
  wb::ptx::mbarrier_wait_parity(&full, 0);
  for (int i = threadIdx.x; i < kBoxFloats; i += 32) out[i] = box[i];
}

// An mbarrier in global memory: bar points into a device buffer.
__global__ void global_mbarrier_kernel(std::uint64_t* bar) {
  if (threadIdx.x == 0) wb::ptx::mbarrier_init(bar, 1);
}

constexpr int kN = 64;
constexpr int kWgmmaLine = __LINE__ + 21;  // the wgmma_ss below
// One warpgroup: A (64 x 16) and B (64 x 16), K-major with `swizzle`, in the dynamic shared
// memory, written by the threads unless `write` is 0; one wgmma; out: (128, kN / 2).
__global__ void wgmma_operands_kernel(Swizzle swizzle, int write, float* out) {
  __half* a = wb::dynamic_shared<__half>();
  __half* b = a + 64 * 64;  // both tiles are one 8-row pattern of 1024 bytes per 8 rows
  const unsigned row_bytes = wb::ptx::swizzle_bytes(swizzle);
  if (write != 0) {
    for (int i = threadIdx.x; i < 2 * 64 * 64; i += blockDim.x) a[i] = __float2half(1.0f);
  }
  wb::ptx::fence_proxy_async();
  __syncthreads();
  // K-major: core matrices of 8 rows; unswizzled, 128 contiguous bytes each, the two along k
  // 128 bytes apart (leading) and the 8-row groups 256 bytes apart (stride); swizzled, rows of
  // `row_bytes` and 8-row groups 8 rows apart.
  const unsigned leading = swizzle == Swizzle::none ? 128 : 0;
  const unsigned stride = swizzle == Swizzle::none ? 256 : 8 * row_bytes;
  const std::uint64_t da = wb::ptx::make_smem_descriptor(a, swizzle, leading, stride);
  const std::uint64_t db = wb::ptx::make_smem_descriptor(b, swizzle, leading, stride);
  float d[kN / 2];
  wb::ptx::wgmma_fence();
  wb::ptx::wgmma_ss<__half, kN>(d, da, db, false);
  wb::ptx::wgmma_commit_group();
  wb::ptx::wgmma_wait_group<0>();
  for (int j = 0; j < kN / 2; ++j) out[threadIdx.x * (kN / 2) + j] = d[j];
}

std::string at_line(int line) { return "tests/sim/test_hopper_access.cpp:" + std::to_string(line); }


/// The per-line counts of `line` of this file.
wb::sim::TrafficCounts line_counts(const LaunchProfile& p, int line) {
  for (const auto& l : p.lines) {
    if (l.where == at_line(line)) return l.counts;
  }
  FAIL("no traffic at line " << line);
  return {};
}

}  // namespace

TEST_SUITE("profile") {

TEST_CASE("a TMA box is one global request of the rows it reads inside the tensor") {
  constexpr int kCols = 64, kRows = 16;  // rows 256 bytes apart
  DeviceBuffer<float> in(Backend::sim, std::vector<float>(kCols * kRows, 1.0f));
  DeviceBuffer<float> out(Backend::sim, kBoxFloats);
  const TensorMap map = map_of(in.data(), kCols, kRows);
  const auto box_at = [&](int x, int y) {
    return profile_of([&] {
      wb::launch<tma_box_kernel>(dim3(1), dim3(32), kBoxFloats * sizeof(float), map, x, y,
                                 out.data());
    });
  };
  // Inside: 8 rows of 128 bytes, 4 sectors each.
  const wb::sim::AccessCounts inside = line_counts(box_at(32, 8), kTmaLine).global_load;
  CHECK(inside.requests == 1);
  CHECK(inside.bytes == kBoxRows * 128);
  CHECK(inside.units == kBoxRows * 4);
  // Half past the right edge and 3 rows past the bottom: 5 rows of 64 bytes are read, the rest
  // is zero fill that costs no global traffic.
  const wb::sim::AccessCounts edge = line_counts(box_at(48, 11), kTmaLine).global_load;
  CHECK(edge.requests == 1);
  CHECK(edge.bytes == 5 * 64);
  CHECK(edge.units == 5 * 2);
}

TEST_CASE("wgmma reads its shared operands a core matrix per phase without bank conflicts") {
  DeviceBuffer<float> out(Backend::sim, 128 * kN / 2);
  for (Swizzle s : {Swizzle::none, Swizzle::b32, Swizzle::b64, Swizzle::b128}) {
    CAPTURE(static_cast<int>(s));
    const LaunchProfile p = profile_of([&] {
      wb::launch<wgmma_operands_kernel>(dim3(1), dim3(128), 2 * 64 * 64 * sizeof(__half), s, 1,
                                        out.data());
    });
    const wb::sim::AccessCounts reads = line_counts(p, kWgmmaLine).shared_load;
    // A (64 rows) and B (kN rows) of 32 bytes (k16): 2 core matrices per 8 rows.
    constexpr int kPhases = (64 + kN) / 8 * 2;
    CHECK(reads.requests == 1);
    CHECK(reads.bytes == (64 + kN) * 32);
    CHECK(reads.ideal_units == kPhases);
    CHECK(reads.units == kPhases);  // each core matrix's 8 rows of 16 bytes: 8 bank groups
    CHECK(p.mma_flops == 2ull * 64 * kN * 16);
    for (float v : out.download()) CHECK(v == 16.0f);  // 16 products of ones
  }
}

}  // TEST_SUITE("profile")

TEST_SUITE("memcheck") {

TEST_CASE("a TMA box past the end of its buffer names the instruction's line") {
  constexpr int kCols = 64, kRows = 16;
  // The map claims 16 rows, the buffer holds 12: a box at row 8 reads 4 rows past its end.
  DeviceBuffer<float> in(Backend::sim, std::vector<float>(kCols * 12, 1.0f));
  DeviceBuffer<float> out(Backend::sim, kBoxFloats);
  const TensorMap map = map_of(in.data(), kCols, kRows);
  const auto box_at = [&](int y) {
    wb::launch<tma_box_kernel>(dim3(1), dim3(32), kBoxFloats * sizeof(float), map, 0, y,
                               out.data());
  };
  box_at(4);
  check_says(fault_of(Kind::memory_access, [&] { box_at(8); }),
             {"kernel tma_box_kernel", "thread (0,0,0)", "memcheck: tma_load_2d at " + at_line(kTmaLine)});
}

TEST_CASE("initcheck: a wgmma operand nothing wrote names the wgmma's line") {
  DeviceBuffer<float> out(Backend::sim, 128 * kN / 2);
  check_says(fault_of(Kind::uninitialized_read,
                      [&] {
                        wb::launch<wgmma_operands_kernel>(dim3(1), dim3(128),
                                                          2 * 64 * 64 * sizeof(__half),
                                                          Swizzle::b128, 0, out.data());
                      }),
             {"initcheck: wgmma at " + at_line(kWgmmaLine), "nothing has written",
              "dynamic shared memory"});
}

TEST_CASE("an mbarrier in global memory is reported") {
  DeviceBuffer<std::uint64_t> bar(Backend::sim, 1);
  check_says(fault_of(Kind::memory_access,
                      [&] { wb::launch<global_mbarrier_kernel>(dim3(1), dim3(32), 0, bar.data()); }),
             {"memcheck: mbarrier_init at tests/sim/test_hopper_access.cpp:", "global memory"});
}

}  // TEST_SUITE("memcheck")
