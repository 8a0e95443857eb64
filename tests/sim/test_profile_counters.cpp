// Profile mode's counters proven on planted kernels whose traffic is known by hand: sectors
// per request of a row-major against a column-major walk, bank conflicts of a strided shared
// read against the padded one, of 4-, 8- and 16-byte accesses at every stride (served in
// phases of 128 bytes: 32, 16 or 8 lanes), of ldmatrix over unpadded, padded and swizzled
// rows, and bytes that double when a tile is read twice. Suite "profile" of the instrumented
// binary test_sim_access.
#include <doctest/doctest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "common/buffer.hpp"
#include "common/kernel.cuh"
#include "common/ptx.cuh"
#include "common/sim/access.hpp"
#include "tests/sim/profile_support.hpp"

namespace {

using wb::Backend;
using wb::DeviceBuffer;
using wb::sim::AccessCounts;
using wb::sim::LaunchProfile;
using wb::test::profile_of;

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

// Lane l of one warp stores in[l] to element l * stride of the dynamic shared memory, viewed as
// V[], and after __syncwarp loads it back into out[l]: one shared store request and one load
// request, each lane sizeof(V) bytes at l * stride * sizeof(V).
template <typename V>
__global__ void strided_vector_kernel(const V* in, V* out, int stride) {
  V* tile = wb::dynamic_shared<V>();
  const int l = static_cast<int>(threadIdx.x);
  tile[l * stride] = in[l];
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

constexpr int kTileCols = 64;  // 16-bit elements per tile row: 128 bytes, every bank once
enum TileRows : int { kUnpadded = 0, kPadded = 1, kSwizzled = 2 };

/// Where element (row, col) of a tile of kTileCols 16-bit columns lies: rows 128 bytes apart
/// (unpadded), 144 (padded by one 16-byte chunk), or 128 with 16-byte chunk c of row r stored
/// at chunk c ^ (r % 8) (swizzled).
__host__ __device__ int tile_offset(int rows, int row, int col) {
  if (rows == kPadded) return row * (kTileCols + 8) + col;
  if (rows == kSwizzled) return row * kTileCols + (col / 8 ^ row % 8) * 8 + col % 8;
  return row * kTileCols + col;
}

// One warp reads a 16 x kTileCols shared tile as four 16x16 A fragments, one ldmatrix_x4 each
// (lane l: row l % 8 + 8 (l / 8 % 2), columns from 8 (l / 16)), in the layout `rows`; element
// (row, col) holds row * kTileCols + col whatever the layout. out: (4 fragments, 32 lanes, 4).
__global__ void ldmatrix_banks_kernel(std::uint32_t* out, int rows) {
  __shared__ __align__(16) std::uint16_t tile[16 * (kTileCols + 8)];
  const int lane = static_cast<int>(threadIdx.x);
  for (int i = lane; i < 16 * kTileCols; i += 32) {
    tile[tile_offset(rows, i / kTileCols, i % kTileCols)] = static_cast<std::uint16_t>(i);
  }
  __syncwarp();
  for (int f = 0; f < kTileCols / 16; ++f) {
    const int row = lane % 8 + 8 * (lane / 8 % 2), col = 16 * f + 8 * (lane / 16);
    std::uint32_t r[4];
    wb::ptx::ldmatrix_x4(r, tile + tile_offset(rows, row, col));
    for (int j = 0; j < 4; ++j) out[(f * 32 + lane) * 4 + j] = r[j];
  }
}

constexpr int kCpAsyncLine = __LINE__ + 6;
// Thread t of one warp copies 16-byte chunk t of `in` into shared memory by cp.async, waits,
// and after __syncwarp stores its neighbour's chunk to `out`.
__global__ void cp_async_copy_kernel(const float4* in, float4* out) {
  __shared__ __align__(16) float4 tile[kN];
  const int t = static_cast<int>(threadIdx.x);
  wb::ptx::cp_async_16(tile + t, in + t, true);
  wb::ptx::cp_async_commit();
  wb::ptx::cp_async_wait<0>();
  __syncwarp();
  out[t] = tile[(t + 1) % kN];
}


/// The hardware's rule for one warp-wide shared request whose lane l accesses element l * stride
/// of a V[]: the lanes are served in phases of 128 bytes, 128 / sizeof(V) lanes each (32 of 4
/// bytes, 16 of 8, 8 of 16: the half-warps of 8-byte and the quarter-warps of 16-byte
/// accesses). In a phase of L lanes, element l * stride starts at bank
/// (sizeof(V) / 4) (l * stride mod L): the L lanes fall on L / gcd(stride, L) distinct bank
/// groups, gcd(stride, L) distinct elements on each, and that is the phase's wavefronts. So a
/// request takes 32 / L phases of gcd(stride, L) wavefronts; without conflicts, one each.
/// (stride >= 1: stride 0, one address for every lane, is a broadcast, which Volta and later
/// GPUs serve in fewer phases than this; the simulator does not model that.)
struct BankRule {
  std::uint64_t wavefronts, ideal;
};
BankRule bank_rule(std::size_t bytes, int stride) {
  const int lanes = static_cast<int>(128 / bytes), phases = 32 / lanes;
  return {static_cast<std::uint64_t>(phases * std::gcd(stride, lanes)),
          static_cast<std::uint64_t>(phases)};
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

/// Profiles strided_vector_kernel<V> at every stride 1 .. 64 against bank_rule, loads and stores.
template <typename V>
void check_bank_rule() {
  constexpr int kMaxStride = 64;
  DeviceBuffer<V> in(Backend::sim, std::vector<V>(kN, V{})), out(Backend::sim, kN);
  const std::size_t shared_bytes = kN * kMaxStride * sizeof(V);  // 32 KiB for 16-byte V
  for (int stride = 1; stride <= kMaxStride; ++stride) {
    CAPTURE(sizeof(V));
    CAPTURE(stride);
    const LaunchProfile p = profile_of([&] {
      wb::launch<strided_vector_kernel<V>>(dim3(1), dim3(kN), shared_bytes, in.data(), out.data(),
                                           stride);
    });
    const BankRule rule = bank_rule(sizeof(V), stride);
    for (const AccessCounts* c : {&p.counts.shared_store, &p.counts.shared_load}) {
      CHECK(c->requests == 1);
      CHECK(c->bytes == kN * sizeof(V));
      CHECK(c->units == rule.wavefronts);
      CHECK(c->ideal_units == rule.ideal);
    }
  }
}

TEST_CASE("shared accesses of 4, 8 and 16 bytes are served in phases of 128 bytes") {
  // 32 lanes of 4 bytes, 16 of 8 (half-warps), 8 of 16 (quarter-warps) per phase. Phases of 64
  // bytes (8 lanes of 8 bytes, 4 of 16) would double every ideal count and most wavefront
  // counts: consecutive float2 would take 4 wavefronts, not 2; float2 128 bytes apart (stride
  // 16) would still take 32, but as an 8-way conflict over 4 phases, not 16-way over 2.
  check_bank_rule<float>();
  check_bank_rule<float2>();
  check_bank_rule<float4>();
  // The rule at the strides docs/simulator.md names.
  CHECK(bank_rule(8, 1).wavefronts == 2);    // consecutive float2: conflict-free
  CHECK(bank_rule(16, 1).wavefronts == 4);   // consecutive float4: conflict-free
  CHECK(bank_rule(8, 16).wavefronts == 32);  // float2 rows 128 bytes apart: 16-way
  CHECK(bank_rule(16, 8).wavefronts == 32);  // float4 rows 128 bytes apart: 8-way
  CHECK(bank_rule(16, 2).wavefronts == 8);   // every other float4: 2-way
}

TEST_CASE("a traced shared request gives each lane the 128-byte phase that serves it") {
  DeviceBuffer<float4> in4(Backend::sim, std::vector<float4>(kN, float4{})), out4(Backend::sim, kN);
  DeviceBuffer<float2> in2(Backend::sim, std::vector<float2>(kN, float2{})), out2(Backend::sim, kN);
  const auto traced = [](auto launch) {
    wb::sim::start_profile(/*trace_global=*/true);
    launch();
    std::vector<LaunchProfile> p = wb::sim::stop_profile();
    REQUIRE(p.size() == 1);
    return p[0].shared_trace;
  };
  const auto check_phases = [](const std::vector<wb::sim::SharedAccess>& trace,
                               std::uint32_t bytes) {
    REQUIRE(trace.size() == 2 * kN);  // the store request and the load request
    for (const wb::sim::SharedAccess& a : trace) {
      CAPTURE(a.lane);
      CHECK(a.bytes == bytes);
      CHECK(a.phase == a.lane * bytes / 128);
    }
  };
  check_phases(traced([&] {
                 wb::launch<strided_vector_kernel<float4>>(dim3(1), dim3(kN), kN * sizeof(float4),
                                                           in4.data(), out4.data(), 1);
               }),
               16);
  check_phases(traced([&] {
                 wb::launch<strided_vector_kernel<float2>>(dim3(1), dim3(kN), kN * sizeof(float2),
                                                           in2.data(), out2.data(), 1);
               }),
               8);
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

TEST_CASE("ldmatrix over rows 128 bytes apart is an 8-way conflict but padded or swizzled is not") {
  constexpr int kFragments = kTileCols / 16;
  DeviceBuffer<std::uint32_t> out(Backend::sim, kFragments * 32 * 4);
  const auto read = [&](int rows) {
    return profile_of(
        [&] { wb::launch<ldmatrix_banks_kernel>(dim3(1), dim3(32), 0, out.data(), rows); });
  };
  const LaunchProfile unpadded = read(kUnpadded);
  const std::vector<std::uint32_t> registers = out.download();
  const LaunchProfile padded = read(kPadded);
  CHECK(out.download() == registers);  // the same fragments from every layout
  const LaunchProfile swizzled = read(kSwizzled);
  CHECK(out.download() == registers);
  for (const LaunchProfile* p : {&unpadded, &padded, &swizzled}) {
    // One request per ldmatrix_x4 (its element reads are not counted again): 32 rows of 16
    // bytes, served one 8x8 matrix (128 bytes, 8 rows) per phase, 4 phases.
    CHECK(p->counts.shared_load.requests == kFragments);
    CHECK(p->counts.shared_load.bytes == kFragments * 32 * 16);
    CHECK(p->counts.shared_load.ideal_units == kFragments * 4);
  }
  // Unpadded: a matrix's 8 rows start 128 bytes apart, in the same 4 banks: 8 wavefronts each.
  CHECK(unpadded.counts.shared_load.units == kFragments * 4 * 8);
  // Padded: rows 144 bytes apart start 4 banks further each, 8 rows cover the 32 banks once.
  CHECK(padded.counts.shared_load.units == kFragments * 4);
  // Swizzled: the 8 rows (r % 8 = 0..7) hold a column's chunk at 8 different chunks of a row.
  CHECK(swizzled.counts.shared_load.units == kFragments * 4);
  // The requests are the ldmatrix line's, in the per-line table too.
  bool found = false;
  for (const auto& line : unpadded.lines) {
    if (line.counts.shared_load.requests == 0) continue;
    found = true;
    CHECK(line.where.find("tests/sim/test_profile_counters.cpp:") == 0);
    CHECK(line.counts.shared_load.units == unpadded.counts.shared_load.units);
  }
  CHECK(found);
}

TEST_CASE("a warp's cp_async is one global request counted at its own line") {
  std::vector<float4> host(kN, make_float4(1.0f, 2.0f, 3.0f, 4.0f));
  DeviceBuffer<float4> in(Backend::sim, host), out(Backend::sim, kN);
  const LaunchProfile p = profile_of(
      [&] { wb::launch<cp_async_copy_kernel>(dim3(1), dim3(kN), 0, in.data(), out.data()); });
  CHECK(p.counts.global_load.bytes == kN * 16);
  CHECK(p.counts.global_load.requests == 1);
  CHECK(p.counts.global_load.units == kN * 16 / 32);  // 512 contiguous bytes: 16 sectors
  // The copies land at the wait: one request of 16-byte stores, 8 lanes per phase, no conflict.
  CHECK(p.counts.shared_store.bytes == kN * 16);
  CHECK(p.counts.shared_store.units == p.counts.shared_store.ideal_units);
  const std::string line = "tests/sim/test_profile_counters.cpp:" + std::to_string(kCpAsyncLine);
  bool found = false;
  for (const auto& l : p.lines) {
    if (l.counts.global_load.bytes == 0) continue;
    found = true;
    CHECK(l.where == line);
  }
  CHECK(found);
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
