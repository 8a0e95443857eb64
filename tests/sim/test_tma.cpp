// TMA in the simulator: boxes of 2-D and 3-D tensors land on an mbarrier's transaction count,
// swizzled as the tensor map says, zeros past the tensor's edge, NaN until a thread observes
// the phase complete; bulk stores write the box back, nothing past the edge. The planted
// misuses of a producer/consumer ring: wrong parities, an arrival short, expect_tx bytes that
// disagree with the box.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/hopper.cuh"
#include "common/kernel.cuh"
#include "tests/sim/fault_of.hpp"
#include "tests/sim/wmma_support.hpp"

namespace {

using Kind = wb::sim::Fault::Kind;
using wb::ptx::Swizzle;
using wb::ptx::TensorMap;
using wb::test::Aligned;
using wb::test::check_says;
using wb::test::fault_of;

bool poison(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits == 0xffffffffu;
}

// The element at (x, y, z) of a test tensor: distinct for every element.
float value_at(int x, int y, int z) { return static_cast<float>(z * 100000 + y * 1000 + x + 1); }

/// A (depth, rows, cols) float tensor of value_at, rows of `cols` floats.
struct Tensor {
  Tensor(int n_cols, int n_rows, int n_depth)
      : cols(n_cols), rows(n_rows), depth(n_depth), data(n_cols * n_rows * n_depth) {
    for (int z = 0; z < depth; ++z)
      for (int y = 0; y < rows; ++y)
        for (int x = 0; x < cols; ++x) data[(z * rows + y) * cols + x] = value_at(x, y, z);
  }
  TensorMap map(int box_cols, int box_rows, int box_depth, Swizzle swizzle) const {
    TensorMap m;
    const std::uint64_t sizes[3] = {std::uint64_t(cols), std::uint64_t(rows), std::uint64_t(depth)};
    const std::uint64_t strides[2] = {cols * sizeof(float), std::uint64_t(cols) * rows * sizeof(float)};
    const std::uint32_t box[3] = {std::uint32_t(box_cols), std::uint32_t(box_rows),
                                  std::uint32_t(box_depth)};
    wb::ptx::encode_tensor_map(m, data.p, depth > 1 ? 3 : 2, sizes, strides, box, swizzle);
    return m;
  }
  int cols, rows, depth;
  Aligned<float> data;
};

// One box at (x, y[, z]) by thread 0; out: the box's bytes as shared memory holds them, read
// by every thread (box_floats of them) after the wait, and before it when `wait` is 0.
__global__ void load_box_kernel(const __grid_constant__ TensorMap map, int rank, int x, int y,
                                int z, int box_floats, int wait, float* out) {
  __shared__ std::uint64_t full;
  float* box = wb::dynamic_shared<float>();
  if (threadIdx.x == 0) {
    wb::ptx::mbarrier_init(&full, 1);
    const unsigned bytes = static_cast<unsigned>(box_floats * sizeof(float));
    wb::ptx::mbarrier_arrive_expect_tx(&full, bytes);
    if (rank == 2) {
      wb::ptx::tma_load_2d(box, &map, x, y, &full);
    } else {
      wb::ptx::tma_load_3d(box, &map, x, y, z, &full);
    }
  }
  __syncthreads();
  if (wait != 0) wb::ptx::mbarrier_wait_parity(&full, 0);
  for (int i = threadIdx.x; i < box_floats; i += blockDim.x) out[i] = box[i];
}

/// Where element x of box row r lies, in floats from the box's start, for a box whose rows are
/// exactly the swizzle's bytes (or unswizzled): 16-byte chunk c of row r moves to chunk
/// c ^ (r % 8) for 128-byte rows, c ^ (r % 8 / 2) for 64, c ^ (r % 8 / 4) for 32.
int swizzled_index(int r, int x, int row_floats, Swizzle s) {
  constexpr int kChunkFloats = 4;
  const int chunk = x / kChunkFloats, in_chunk = x % kChunkFloats;
  int moved = chunk;
  if (s == Swizzle::b128) moved = chunk ^ (r % 8);
  if (s == Swizzle::b64) moved = chunk ^ (r % 8 / 2);
  if (s == Swizzle::b32) moved = chunk ^ (r % 8 / 4);
  return r * row_floats + moved * kChunkFloats + in_chunk;
}

TEST_CASE("a TMA box lands swizzled as its tensor map says with zeros past the edge" *
          doctest::test_suite("tma")) {
  const Tensor t(80, 40, 1);
  for (const auto& [swizzle, cols] : {std::pair{Swizzle::none, 24}, std::pair{Swizzle::b32, 8},
                                      std::pair{Swizzle::b64, 16}, std::pair{Swizzle::b128, 32}}) {
    for (const auto& [x0, y0] : {std::pair{8, 4}, std::pair{64, 32}, std::pair{-4, -3}}) {
      CAPTURE(static_cast<int>(swizzle));
      CAPTURE(x0);
      CAPTURE(y0);
      constexpr int kRows = 12;
      const int floats = cols * kRows;
      std::vector<float> out(floats, -1.f);
      wb::launch<load_box_kernel>(dim3(1), dim3(64), floats * sizeof(float),
                                  t.map(cols, kRows, 1, swizzle), 2, x0, y0, 0, floats, 1,
                                  out.data());
      for (int r = 0; r < kRows; ++r) {
        for (int x = 0; x < cols; ++x) {
          const int gx = x0 + x, gy = y0 + r;
          const bool inside = gx >= 0 && gx < t.cols && gy >= 0 && gy < t.rows;
          CAPTURE(r);
          CAPTURE(x);
          CHECK(out[swizzled_index(r, x, cols, swizzle)] == (inside ? value_at(gx, gy, 0) : 0.f));
        }
      }
    }
  }
}

TEST_CASE("a 3-D TMA box walks the tensor's third dimension by its stride" *
          doctest::test_suite("tma")) {
  const Tensor t(16, 10, 5);
  constexpr int kCols = 8, kRows = 4, kDepth = 3;
  std::vector<float> out(kCols * kRows * kDepth, -1.f);
  wb::launch<load_box_kernel>(dim3(1), dim3(32), out.size() * sizeof(float),
                              t.map(kCols, kRows, kDepth, Swizzle::none), 3, 4, 7, 3,
                              static_cast<int>(out.size()), 1, out.data());
  for (int z = 0; z < kDepth; ++z)
    for (int r = 0; r < kRows; ++r)
      for (int x = 0; x < kCols; ++x) {
        const int gy = 7 + r, gz = 3 + z;  // rows 10 and up, depth 5 and up: zeros
        const float want = gy < t.rows && gz < t.depth ? value_at(4 + x, gy, gz) : 0.f;
        CHECK(out[(z * kRows + r) * kCols + x] == want);
      }
}

// The unsynchronized reads (races by design) have a suite of their own, which race mode skips.
TEST_CASE("a TMA box holds NaN until a thread observes its phase complete" *
          doctest::test_suite("tma_planted")) {
  // The planted misuse: a read without the mbarrier wait. On a GPU it reads old bytes, new
  // ones or a mix, depending on timing; here always 0xff bytes.
  const Tensor t(32, 8, 1);
  std::vector<float> out(32 * 8, -1.f);
  wb::launch<load_box_kernel>(dim3(1), dim3(32), out.size() * sizeof(float),
                              t.map(32, 8, 1, Swizzle::b128), 2, 0, 0, 0,
                              static_cast<int>(out.size()), 0, out.data());
  for (float v : out) CHECK(poison(v));
}

TEST_CASE("a read of a TMA box without the mbarrier wait is a race in race mode" *
          doctest::test_suite("race_planted_tma")) {
  const Tensor t(32, 8, 1);
  std::vector<float> out(32 * 8, -1.f);
  wb::launch<load_box_kernel>(dim3(1), dim3(32), out.size() * sizeof(float),
                              t.map(32, 8, 1, Swizzle::b128), 2, 0, 0, 0,
                              static_cast<int>(out.size()), 0, out.data());
}

// The box of a tile written by ordinary stores, then a bulk store of it to (x, y) of `map`.
// Each thread writes tile floats i: value 0.5 + i, in the box's own (swizzled) layout. `fence`
// 0 plants the missing fence.proxy.async.
__global__ void store_box_kernel(const __grid_constant__ TensorMap map, int x, int y,
                                 int box_floats, int fence) {
  float* box = wb::dynamic_shared<float>();
  for (int i = threadIdx.x; i < box_floats; i += blockDim.x) box[i] = 0.5f + static_cast<float>(i);
  if (fence != 0) wb::ptx::fence_proxy_async();  // the stores above, visible to the copy's reads
  __syncthreads();
  if (threadIdx.x == 0) {
    wb::ptx::tma_store_2d(&map, x, y, box);
    wb::ptx::tma_store_commit();
    wb::ptx::tma_store_wait<0>();
  }
}

TEST_CASE("a TMA bulk store writes the box and nothing past the tensor's edge" *
          doctest::test_suite("tma")) {
  Tensor t(40, 20, 1);
  constexpr int kCols = 32, kRows = 8, kX = 16, kY = 16;  // columns 40 and up, rows 20 and up: out
  wb::launch<store_box_kernel>(dim3(1), dim3(64), kCols * kRows * sizeof(float),
                               t.map(kCols, kRows, 1, Swizzle::b128), kX, kY, kCols * kRows, 1);
  for (int gy = 0; gy < t.rows; ++gy) {
    for (int gx = 0; gx < t.cols; ++gx) {
      const int r = gy - kY, x = gx - kX;
      const bool stored = r >= 0 && r < kRows && x >= 0 && x < kCols;
      const float want = stored ? 0.5f + static_cast<float>(swizzled_index(r, x, kCols, Swizzle::b128))
                                : value_at(gx, gy, 0);
      CAPTURE(gx);
      CAPTURE(gy);
      CHECK(t.data.p[gy * t.cols + gx] == want);
    }
  }
}

TEST_CASE("a TMA bulk store of a tile written without fence_proxy_async is a race in race mode" *
          doctest::test_suite("race_planted_tma_store_fence")) {
  Tensor t(32, 8, 1);
  wb::launch<store_box_kernel>(dim3(1), dim3(64), 32 * 8 * sizeof(float),
                               t.map(32, 8, 1, Swizzle::b128), 0, 0, 32 * 8, 0);
}

TEST_CASE("encode_tensor_map refuses what cuTensorMapEncodeTiled refuses naming the limit" *
          doctest::test_suite("tma")) {
  Aligned<float> data(64 * 64);
  TensorMap m;
  const std::uint64_t sizes[2] = {64, 64};
  const auto encode = [&](std::uint64_t stride, std::uint32_t box_x, std::uint32_t box_y,
                          Swizzle s, const float* p) {
    const std::uint64_t strides[1] = {stride};
    const std::uint32_t box[2] = {box_x, box_y};
    try {
      wb::ptx::encode_tensor_map(m, p, 2, sizes, strides, box, s);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(encode(256, 32, 64, Swizzle::b128, data.p).empty());
  CHECK(encode(256, 64, 8, Swizzle::b128, data.p).find("more than the 128-byte swizzle") !=
        std::string::npos);
  CHECK(encode(256, 32, 300, Swizzle::none, data.p).find("outside 1 to 256") != std::string::npos);
  CHECK(encode(100, 32, 8, Swizzle::none, data.p).find("not a multiple of 16") != std::string::npos);
  CHECK(encode(256, 3, 8, Swizzle::none, data.p).find("not a multiple of 16") != std::string::npos);
  CHECK(encode(256, 32, 8, Swizzle::none, data.p + 1).find("16-byte aligned") != std::string::npos);
}

// ---- A tensor map's swizzle against a descriptor's -------------------------------------------

constexpr int kRowsAB = 64, kColsAB = 64;  // A and B (64 x 64 __half): rows of 128 bytes

// A and B by TMA with the map's swizzle into a 1024-byte-aligned window; one warpgroup's
// wgmma_ss of their first k16 columns through descriptors of `descriptor` swizzle: out (128,
// 32), D = A[:, 0:16] B[:, 0:16]^T by the accumulator layout.
__global__ void map_and_descriptor_kernel(const __grid_constant__ TensorMap a_map,
                                          const __grid_constant__ TensorMap b_map,
                                          Swizzle descriptor, float* out) {
  __shared__ std::uint64_t full;
  unsigned char* a = wb::dynamic_shared<unsigned char>();
  unsigned char* b = a + kRowsAB * kColsAB * sizeof(__half);
  if (threadIdx.x == 0) {
    wb::ptx::mbarrier_init(&full, 1);
    wb::ptx::mbarrier_arrive_expect_tx(&full, 2 * kRowsAB * kColsAB * sizeof(__half));
    wb::ptx::tma_load_2d(a, &a_map, 0, 0, &full);
    wb::ptx::tma_load_2d(b, &b_map, 0, 0, &full);
  }
  __syncthreads();
  wb::ptx::mbarrier_wait_parity(&full, 0);
  // K-major: 8-row groups 8 swizzle rows apart; the leading offset is unused when swizzled.
  const unsigned stride = 8 * wb::ptx::swizzle_bytes(descriptor);
  float d[kColsAB / 2];
  wb::ptx::wgmma_fence();
  wb::ptx::wgmma_ss<__half, kColsAB>(d, wb::ptx::make_smem_descriptor(a, descriptor, 16, stride),
                                     wb::ptx::make_smem_descriptor(b, descriptor, 16, stride),
                                     false);
  wb::ptx::wgmma_commit_group();
  wb::ptx::wgmma_wait_group<0>();
  for (int j = 0; j < kColsAB / 2; ++j) out[threadIdx.x * (kColsAB / 2) + j] = d[j];
}

TEST_CASE("a descriptor whose swizzle disagrees with the tensor map's multiplies the wrong elements" *
          doctest::test_suite("tma")) {
  // Small integers: every product and sum is exact in float, so a right layout gives D exactly.
  Aligned<__half> a(kRowsAB * kColsAB), b(kRowsAB * kColsAB);
  for (int i = 0; i < kRowsAB * kColsAB; ++i) {
    a.p[i] = __float2half(static_cast<float>(i % 7 - 3));
    b.p[i] = __float2half(static_cast<float>(i % 11 - 5));
  }
  const std::uint64_t sizes[2] = {kColsAB, kRowsAB}, strides[1] = {kColsAB * sizeof(__half)};
  const std::uint32_t box[2] = {kColsAB, kRowsAB};
  TensorMap a_map, b_map;
  wb::ptx::encode_tensor_map(a_map, a.p, 2, sizes, strides, box, Swizzle::b128);
  wb::ptx::encode_tensor_map(b_map, b.p, 2, sizes, strides, box, Swizzle::b128);
  const auto wrong_elements = [&](Swizzle descriptor) {
    std::vector<float> out(128 * kColsAB / 2);
    wb::launch<map_and_descriptor_kernel>(dim3(1), dim3(128),
                                          2 * kRowsAB * kColsAB * sizeof(__half), a_map, b_map,
                                          descriptor, out.data());
    int wrong = 0;
    for (int t = 0; t < 128; ++t) {
      for (int j = 0; j < kColsAB / 2; ++j) {
        // d[j] of thread t: row 16 (t / 32) + (t % 32) / 4 (+ 8), column 8 (j / 4) + 2 (t % 4)
        // (+ 1) (common/hopper.cuh).
        const int row = 16 * (t / 32) + t % 32 / 4 + 8 * (j % 4 / 2);
        const int col = 8 * (j / 4) + 2 * (t % 4) + j % 2;
        float want = 0;
        for (int k = 0; k < 16; ++k)
          want += __half2float(a.p[row * kColsAB + k]) * __half2float(b.p[col * kColsAB + k]);
        wrong += out[t * (kColsAB / 2) + j] != want;
      }
    }
    return wrong;
  };
  CHECK(wrong_elements(Swizzle::b128) == 0);
  // The planted misuse: the map writes a 128-byte swizzle, the descriptor reads a 64-byte one.
  // Both are legal, and nothing records how a tile was written, so the simulator cannot report
  // it; the product shows it.
  CHECK(wrong_elements(Swizzle::b64) > 1000);
}

// ---- A producer/consumer ring, and its planted misuses --------------------------------------

constexpr int kStages = 2, kTileRows = 8, kTileCols = 32;
constexpr unsigned kTileBytes = kTileRows * kTileCols * sizeof(float);

enum Bug : int {
  kNone,
  kConsumerParity,   // the consumer waits with the wrong parity: passes before the box lands
  kProducerParity,   // the producer waits for a release of a fresh stage: nobody ever gives it
  kFewerTxBytes,     // expect_tx announces less than the box brings
  kMoreTxBytes,      // expect_tx announces more than the box brings
  kArrivalShort,     // the empty barrier expects two arrivals, the consumer gives one
};

// Warp 0 consumes, lane 0 of warp 1 produces: tile i (rows 8i..8i+7 of `map`, 32 floats wide)
// goes through stage i % kStages; the consumer copies each tile to out (tiles, 8, 32).
__global__ void ring_kernel(const __grid_constant__ TensorMap map, int tiles, int bug, float* out) {
  __shared__ std::uint64_t full[kStages], empty[kStages];
  float* stage = wb::dynamic_shared<float>();
  constexpr int kTileFloats = kTileRows * kTileCols;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      wb::ptx::mbarrier_init(&full[s], 1);  // the producer's arrive.expect_tx, then the bytes
      wb::ptx::mbarrier_init(&empty[s], bug == kArrivalShort ? 2 : 1);  // the consumer's release
    }
  }
  __syncthreads();
  if (threadIdx.x == 32) {
    for (int i = 0; i < tiles; ++i) {
      const int s = i % kStages;
      // Round i / kStages of stage s: its first round needs no release (the phase "before"
      // phase 0 counts as complete), so wait for parity (round + 1) % 2.
      const unsigned round = static_cast<unsigned>(i / kStages);
      wb::ptx::mbarrier_wait_parity(&empty[s], bug == kProducerParity ? round % 2 : (round + 1) % 2);
      const unsigned bytes = bug == kFewerTxBytes ? kTileBytes / 2
                             : bug == kMoreTxBytes ? kTileBytes + 16
                                                   : kTileBytes;
      wb::ptx::mbarrier_arrive_expect_tx(&full[s], bytes);
      wb::ptx::tma_load_2d(stage + s * kTileFloats, &map, 0, i * kTileRows, &full[s]);
    }
  } else if (threadIdx.x < 32) {
    for (int i = 0; i < tiles; ++i) {
      const int s = i % kStages;
      const unsigned round = static_cast<unsigned>(i / kStages);
      wb::ptx::mbarrier_wait_parity(&full[s], bug == kConsumerParity ? (round + 1) % 2 : round % 2);
      for (int e = threadIdx.x; e < kTileFloats; e += 32)
        out[i * kTileFloats + e] = stage[s * kTileFloats + e];
      __syncwarp();  // every lane's reads, before lane 0 releases the stage for them all
      if (threadIdx.x == 0) wb::ptx::mbarrier_arrive(&empty[s]);
    }
  }
}

TEST_CASE("a TMA ring of two stages with full and empty mbarriers passes every tile through" *
          doctest::test_suite("tma")) {
  constexpr int kTiles = 7;
  const Tensor t(kTileCols, kTiles * kTileRows, 1);
  std::vector<float> out(kTiles * kTileRows * kTileCols, -1.f);
  const TensorMap map = t.map(kTileCols, kTileRows, 1, Swizzle::none);
  const auto run = [&](int bug) {
    wb::launch<ring_kernel>(dim3(1), dim3(64), kStages * kTileBytes, map, kTiles, bug, out.data());
  };
  SUBCASE("the correct ring") {
    run(kNone);
    for (std::size_t i = 0; i < out.size(); ++i) CHECK(out[i] == t.data.p[i]);
  }
  SUBCASE("the producer's wrong parity waits for a release that never comes") {
    check_says(fault_of(Kind::barrier_divergence, [&] { run(kProducerParity); }),
               {"ring_kernel", "thread (32,0,0)", "deadlock", "test_tma.cpp:",
                "phase 0 (parity 0)", "still expects 1 of its 1 arrivals"});
  }
  SUBCASE("expect_tx bytes fewer than the box") {
    check_says(fault_of(Kind::invalid_argument, [&] { run(kFewerTxBytes); }),
               {"tma_load_2d at tests/sim/test_tma.cpp:", "bring 1024 bytes", "expects 512"});
  }
  SUBCASE("expect_tx bytes more than the box") {
    check_says(fault_of(Kind::barrier_divergence, [&] { run(kMoreTxBytes); }),
               {"deadlock", "16 transaction bytes that no copy brings"});
  }
  SUBCASE("an empty barrier one arrival short") {
    check_says(fault_of(Kind::barrier_divergence, [&] { run(kArrivalShort); }),
               {"deadlock", "thread (32,0,0)", "still expects 1 of its 2 arrivals"});
  }
}

TEST_CASE("a consumer waiting with the wrong parity reads a TMA box before it lands" *
          doctest::test_suite("tma_planted")) {
  constexpr int kTiles = 4;
  const Tensor t(kTileCols, kTiles * kTileRows, 1);
  std::vector<float> out(kTiles * kTileRows * kTileCols, -1.f);
  // It reads the stage a round early, and then waits for the phase before the one it missed: a
  // phase of the same parity two phases back, which never comes again (on a GPU it may hang or
  // not, depending on timing; here it always does, after the NaN reads).
  check_says(fault_of(Kind::barrier_divergence,
                      [&] {
                        wb::launch<ring_kernel>(dim3(1), dim3(64), kStages * kTileBytes,
                                                t.map(kTileCols, kTileRows, 1, Swizzle::none),
                                                kTiles, int{kConsumerParity}, out.data());
                      }),
             {"deadlock", "thread (0,0,0)", "test_tma.cpp:"});
  int nan = 0;
  for (float v : out) nan += poison(v);
  CHECK(nan >= kTileRows * kTileCols);  // the first tile at least, read before its phase
}

}  // namespace
