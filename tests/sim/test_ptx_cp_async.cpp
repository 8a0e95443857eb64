// cp.async in the simulator: copies land at the wait that covers their group and not before,
// and a double buffer waited with cp_async_wait<1> lands only the older group. The other PTX
// wrappers: test_ptx.cpp, test_ptx_ldmatrix.cpp; faults: test_ptx_faults.cpp.
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

// ---- cp.async ----------------------------------------------------------------------------------

namespace {

using wb::test::Aligned;

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
