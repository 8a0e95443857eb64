// Profile mode's counters proven on planted kernels whose traffic is known by hand: sectors
// per request of a row-major against a column-major walk, bank conflicts of a strided shared
// read against the padded one, and bytes that double when a tile is read twice. Suite
// "profile" of the instrumented binary test_sim_access.
#include <doctest/doctest.h>

#include <vector>

#include "common/buffer.hpp"
#include "common/kernel.cuh"
#include "common/sim/access.hpp"

namespace {

using wb::Backend;
using wb::DeviceBuffer;
using wb::sim::AccessCounts;
using wb::sim::LaunchProfile;

constexpr int kN = 32;  // a 32 x 32 fp32 matrix, one warp

// Lane l reads row r's column l (row-major walk: a warp reads 128 contiguous bytes), or
// column r's row l (column-major walk over the same row-major matrix: 32 rows apart).
__global__ void walk_kernel(const float* a, float* sums, int column_major) {
  const int l = static_cast<int>(threadIdx.x);
  float sum = 0.0f;
  for (int r = 0; r < kN; ++r) sum += column_major ? a[l * kN + r] : a[r * kN + l];
  sums[l] = sum;
}

// Lane l reads word l * stride of a shared array: stride 32 puts all 32 lanes in bank 0.
__global__ void strided_shared_kernel(float* out, int stride) {
  __shared__ float tile[kN * (kN + 1)];
  const int l = static_cast<int>(threadIdx.x);
  for (int r = 0; r < kN; ++r) tile[l * stride + r] = static_cast<float>(r);  // fills the rows
  __syncwarp();
  out[l] = tile[l * stride];
}

// Reads its 16-byte vectors `passes` times (a barrier between passes, so no compiler can keep
// the first pass's values: each pass is a read of global memory, as a kernel that needs its
// input twice and cannot hold it makes).
__global__ void vector_passes_kernel(const float4* in, float4* out, int passes) {
  const int l = static_cast<int>(threadIdx.x);
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int p = 0; p < passes; ++p) {
    __syncthreads();
    const float4 v = in[l];
    acc.x += v.x;
    acc.y += v.y;
    acc.z += v.z;
    acc.w += v.w;
  }
  out[l] = acc;
}

template <typename Launch>
LaunchProfile profile_of(Launch launch) {
  wb::sim::start_profile();
  launch();
  std::vector<LaunchProfile> p = wb::sim::stop_profile();
  REQUIRE(p.size() == 1);
  return p[0];
}

double per_request(const AccessCounts& c) {
  return static_cast<double>(c.units) / static_cast<double>(c.requests);
}

}  // namespace

TEST_SUITE("profile") {

TEST_CASE("a column-major walk needs 8x the sectors per request of the row-major walk") {
  DeviceBuffer<float> a(Backend::sim, std::vector<float>(kN * kN, 1.0f));
  DeviceBuffer<float> sums(Backend::sim, kN);
  wb::sim::label_device_buffer(a.data(), "a");
  const auto walk = [&](int column_major) {
    return profile_of([&] {
      wb::launch<walk_kernel>(dim3(1), dim3(kN), 0, a.data(), sums.data(), column_major);
    });
  };
  const LaunchProfile rows = walk(0), columns = walk(1);
  // Every element once, 4 bytes, in kN requests of the warp: the same bytes both ways.
  CHECK(rows.counts.global_load.bytes == kN * kN * 4);
  CHECK(columns.counts.global_load.bytes == kN * kN * 4);
  CHECK(rows.counts.global_load.requests == kN);
  CHECK(per_request(rows.counts.global_load) == 4.0);      // 128 bytes: 4 sectors
  CHECK(per_request(columns.counts.global_load) == 32.0);  // 32 rows: 32 sectors
  // The stores of the sums: one request of 32 floats.
  CHECK(rows.counts.global_store.bytes == kN * 4);
  CHECK(rows.counts.global_store.units == 4);
  REQUIRE(rows.buffers.size() == 2);
  CHECK(rows.buffers[0].name == "a");
  CHECK(rows.buffers[0].loaded == kN * kN * 4);
  CHECK(rows.buffers[1].stored == kN * 4);
  // The line that moves the bytes is the loop's load.
  REQUIRE(!rows.lines.empty());
  CHECK(rows.lines[0].where.find("tests/sim/test_profile_counters.cpp:") == 0);
  CHECK(rows.lines[0].counts.global_load.bytes == kN * kN * 4);
}

TEST_CASE("a stride of 32 floats is a 32-way bank conflict, 33 is conflict-free") {
  DeviceBuffer<float> out(Backend::sim, kN);
  const auto read = [&](int stride) {
    return profile_of(
        [&] { wb::launch<strided_shared_kernel>(dim3(1), dim3(kN), 0, out.data(), stride); });
  };
  const LaunchProfile conflicted = read(kN), padded = read(kN + 1);
  // The final read is the one request of the read line; the fill adds kN requests of stores.
  CHECK(conflicted.counts.shared_load.requests == 1);
  CHECK(conflicted.counts.shared_load.units == 32);
  CHECK(conflicted.counts.shared_load.ideal_units == 1);
  CHECK(padded.counts.shared_load.units == 1);
  CHECK(padded.counts.shared_store.units == padded.counts.shared_store.requests);
  CHECK(conflicted.counts.shared_store.units == 32 * conflicted.counts.shared_store.requests);
}

TEST_CASE("16-byte vectors are one request each, and reading twice counts twice the bytes") {
  std::vector<float4> host(kN, make_float4(1.0f, 2.0f, 3.0f, 4.0f));
  DeviceBuffer<float4> in(Backend::sim, host), out(Backend::sim, kN);
  const auto run = [&](int passes) {
    return profile_of([&] {
      wb::launch<vector_passes_kernel>(dim3(1), dim3(kN), 0, in.data(), out.data(), passes);
    });
  };
  const LaunchProfile once = run(1), twice = run(2);
  CHECK(once.counts.global_load.bytes == kN * 16);
  CHECK(once.counts.global_load.requests == 1);
  CHECK(once.counts.global_load.units == kN * 16 / 32);  // 512 contiguous bytes: 16 sectors
  CHECK(twice.counts.global_load.bytes == 2 * once.counts.global_load.bytes);
  CHECK(twice.counts.global_store.bytes == once.counts.global_store.bytes);
}

TEST_CASE("profile mode counts block barriers") {
  std::vector<float4> host(kN, make_float4(1.0f, 2.0f, 3.0f, 4.0f));
  DeviceBuffer<float4> in(Backend::sim, host), out(Backend::sim, 3 * kN);
  const LaunchProfile p = profile_of([&] {
    wb::launch<vector_passes_kernel>(dim3(3), dim3(kN), 0, in.data(), out.data(), 2);
  });
  CHECK(p.barriers == 3 * 2);  // two per block
  CHECK(p.kernel.find("vector_passes_kernel") != std::string::npos);
  CHECK(p.grid.x == 3);
}

}  // TEST_SUITE("profile")
