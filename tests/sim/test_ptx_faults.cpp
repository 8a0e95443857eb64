// PTX wrapper misuse in the simulator: the faults a kernel's mma, ldmatrix and cp.async calls
// are reported with (a partial or diverged warp, an address off its 16 bytes), and race mode on
// a cp.async chunk read by another thread without a barrier, or refilled while another thread
// still reads it. The products and the misuse a result shows: test_ptx.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/kernel.cuh"
#include "common/ptx.cuh"
#include "tests/sim/fault_of.hpp"
#include "tests/sim/wmma_support.hpp"

// ---- Faults -------------------------------------------------------------------------------------

namespace {

using Kind = wb::sim::Fault::Kind;
using wb::test::Aligned;
using wb::test::check_says;
using wb::test::fault_of;

constexpr int kChunkFloats = 4;  // one 16-byte copy

std::string at_line(int line) {
  return "tests/sim/test_ptx_faults.cpp:" + std::to_string(line);
}

constexpr int kPartialMmaLine = __LINE__ + 8;
// Planted: half of the warp skips the mma (a divergent branch around a warp-wide instruction).
__global__ void partial_mma_kernel(float* y) {
  const unsigned lane = threadIdx.x % 32;
  const std::uint32_t a[4] = {0u, 0u, 0u, 0u};
  const std::uint32_t b[2] = {0u, 0u};
  float acc[4] = {};
  if (lane >= 16) return;
  wb::ptx::mma_m16n8k16<__half>(acc, a, b, acc);
  y[lane] = acc[0];
}

constexpr int kDivergedMmaLine = __LINE__ + 7;
// Planted: the two half-warps call mma_m16n8k16 at two different lines.
__global__ void diverged_mma_kernel(float* y) {
  const std::uint32_t a[4] = {0u, 0u, 0u, 0u};
  const std::uint32_t b[2] = {0u, 0u};
  float acc[4] = {};
  if (threadIdx.x < 16) {
    wb::ptx::mma_m16n8k16<__nv_bfloat16>(acc, a, b, acc);
  } else {
    wb::ptx::mma_m16n8k16<__nv_bfloat16>(acc, a, b, acc);
  }
  y[threadIdx.x] = acc[0];
}

constexpr int kMisalignedLdmatrixLine = __LINE__ + 10;
// Planted: lane `bad` hands ldmatrix a row address `offset` bytes past a 16-byte boundary.
__global__ void misaligned_ldmatrix_kernel(std::uint32_t* out, int bad, int offset) {
  __shared__ __align__(16) std::uint16_t tile[32 * 16];
  const int lane = static_cast<int>(threadIdx.x);
  for (int i = lane; i < 32 * 16; i += 32) tile[i] = static_cast<std::uint16_t>(i);
  __syncwarp();
  const auto* row =
      reinterpret_cast<const unsigned char*>(tile + lane * 16) + (lane == bad ? offset : 0);
  std::uint32_t r[4];
  wb::ptx::ldmatrix_x4(r, row);
  out[lane] = r[0];
}

constexpr int kMisalignedCpAsyncLine = __LINE__ + 8;
// Planted: thread 5 copies to (dst_offset) or from (src_offset) an address off 16 bytes.
__global__ void misaligned_cp_async_kernel(const float* src, int dst_offset, int src_offset) {
  __shared__ __align__(16) float tile[32 * kChunkFloats];
  const int t = static_cast<int>(threadIdx.x);
  auto* dst = reinterpret_cast<unsigned char*>(tile + t * kChunkFloats) + (t == 5 ? dst_offset : 0);
  const auto* from =
      reinterpret_cast<const unsigned char*>(src + t * kChunkFloats) + (t == 5 ? src_offset : 0);
  wb::ptx::cp_async_16(dst, from, true);
  wb::ptx::cp_async_commit();
  wb::ptx::cp_async_wait<0>();
}

}  // namespace

TEST_CASE("mma_m16n8k16 from part of a warp or a diverged warp is reported" *
          doctest::test_suite("ptx")) {
  std::vector<float> y(32);
  SUBCASE("half of the warp returned") {
    const auto partial_mma = [&] {
      wb::launch<partial_mma_kernel>(dim3(1), dim3(32), 0, y.data());
    };
    check_says(fault_of(Kind::warp_collective, partial_mma),
               {"kernel partial_mma_kernel, block (0,0,0), thread (0,0,0)",
                "mma.sync.m16n8k16 at " + at_line(kPartialMmaLine),
                "needs all 32 lanes of the warp", "lane 16, which has exited (thread (16,0,0))"});
  }
  SUBCASE("the half-warps at two lines") {
    const auto diverged_mma = [&] {
      wb::launch<diverged_mma_kernel>(dim3(1), dim3(32), 0, y.data());
    };
    check_says(
        fault_of(Kind::warp_collective, diverged_mma),
        {"thread (16,0,0): mma.sync.m16n8k16 at " + at_line(kDivergedMmaLine + 2),
         "which waits at mma.sync.m16n8k16 at " + at_line(kDivergedMmaLine), "the warp diverged"});
  }
}

TEST_CASE("ldmatrix and cp_async addresses off 16 bytes are reported" *
          doctest::test_suite("ptx")) {
  std::vector<std::uint32_t> out(32);
  Aligned<float> src(32 * kChunkFloats + 4);
  for (std::size_t i = 0; i < src.size; ++i) src[i] = 1.0f;
  // Lane 9's row `offset` bytes off.
  const auto load_rows = [&](int offset) {
    wb::launch<misaligned_ldmatrix_kernel>(dim3(1), dim3(32), 0, out.data(), 9, offset);
  };
  // Thread 5's copy to or from an address off.
  const auto copy_chunks = [&](int dst_offset, int src_offset) {
    wb::launch<misaligned_cp_async_kernel>(dim3(1), dim3(32), 0, src.p, dst_offset, src_offset);
  };
  SUBCASE("an ldmatrix row 4 bytes off") {
    check_says(fault_of(Kind::invalid_argument, [&] { load_rows(4); }),
               {"thread (9,0,0): ldmatrix at " + at_line(kMisalignedLdmatrixLine),
                ": row address 0x", "is not 16-byte aligned"});
  }
  SUBCASE("an aligned ldmatrix of the same kernel runs") {
    load_rows(0);
    // Lane 0: matrix 0's row 0 (tile row 0), columns 0 and 1.
    CHECK(out[0] == (0u | 1u << 16));
  }
  SUBCASE("a cp_async destination 8 bytes off") {
    check_says(fault_of(Kind::invalid_argument, [&] { copy_chunks(8, 0); }),
               {"thread (5,0,0): cp.async at " + at_line(kMisalignedCpAsyncLine),
                ": destination address 0x", "is not 16-byte aligned"});
  }
  SUBCASE("a cp_async source 4 bytes off") {
    check_says(
        fault_of(Kind::invalid_argument, [&] { copy_chunks(0, 4); }),
        {"thread (5,0,0): cp.async at " + at_line(kMisalignedCpAsyncLine), ": source address 0x"});
  }
}

// ---- Race mode ------------------------------------------------------------------------------

namespace {

// Thread t copies chunk t of src into the launch's dynamic shared memory (32 chunks) and waits
// for its own copy, then reads its neighbour's chunk: out: (32, 4), chunk t + 1 (mod 32). A wait
// lands only the calling thread's copies, so the read needs __syncthreads (`sync` = 1) to see
// the neighbour's; without it, a race on a GPU and in race mode.
__global__ void cp_async_neighbour_kernel(const float* src, float* out, int sync) {
  float* tile = wb::dynamic_shared<float>();
  const int t = static_cast<int>(threadIdx.x), next = (t + 1) % 32;
  wb::ptx::cp_async_16(tile + t * kChunkFloats, src + t * kChunkFloats, true);
  wb::ptx::cp_async_commit();
  wb::ptx::cp_async_wait<0>();
  if (sync != 0) __syncthreads();
  for (int i = 0; i < kChunkFloats; ++i) {
    out[t * kChunkFloats + i] = tile[next * kChunkFloats + i];  // planted race: read
  }
}

// A double buffer over `tiles` tiles of 64 chunks, as a pipelined kernel runs it with two warps:
// thread t copies chunk t of every tile, and after the wait and the barrier reads chunk
// (t + 32) % 64, the other warp's, of the tile in use. The next iteration issues tile i + 2's
// copies into the buffer tile i is in, so a second barrier (`sync` = 1) must order every
// thread's read of tile i before any thread's issue. Without it, a thread of warp 0 refills the
// buffer while warp 1 has yet to read it: on a GPU it reads tile i or tile i + 2, whichever
// landed; a race. out: (tiles, 64, 4), what each thread read.
__global__ void cp_async_refill_kernel(const float* src, int tiles, float* out, int sync) {
  constexpr int kThreads = 64, kTileFloats = kThreads * kChunkFloats;
  float* buffer = wb::dynamic_shared<float>();  // two tiles
  const int t = static_cast<int>(threadIdx.x), other = (t + 32) % kThreads;
  wb::ptx::cp_async_16(buffer + t * kChunkFloats, src + t * kChunkFloats, true);
  wb::ptx::cp_async_commit();
  for (int i = 0; i < tiles; ++i) {
    if (i + 1 < tiles) {
      wb::ptx::cp_async_16(buffer + (i + 1) % 2 * kTileFloats + t * kChunkFloats,
                           src + (i + 1) * kTileFloats + t * kChunkFloats, true);  // planted race
    }
    wb::ptx::cp_async_commit();
    wb::ptx::cp_async_wait<1>();  // tile i's copy of this thread landed
    __syncthreads();              // ... and every thread's
    for (int j = 0; j < kChunkFloats; ++j)
      out[(i * kThreads + t) * kChunkFloats + j] =
          buffer[i % 2 * kTileFloats + other * kChunkFloats + j];
    if (sync != 0) __syncthreads();  // tile i read: its buffer may be refilled
  }
}

// Lane l writes row (l + 1) % 32 of a tile of 32 rows of 8 16-bit elements (element (r, c) =
// 8 r + c) in the launch's dynamic shared memory, then the warp reads the tile by ldmatrix_x4,
// lane l handing in row l. ldmatrix synchronizes registers, not memory: row l was written by
// lane l - 1, so the read needs __syncwarp (`sync` = 1), on a GPU too. out: (32, 4).
__global__ void ldmatrix_after_store_kernel(std::uint32_t* out, int sync) {
  auto* tile = wb::dynamic_shared<std::uint16_t>();
  const int lane = static_cast<int>(threadIdx.x), row = (lane + 1) % 32;
  for (int c = 0; c < 8; ++c) tile[row * 8 + c] = static_cast<std::uint16_t>(row * 8 + c);
  if (sync != 0) __syncwarp();
  std::uint32_t r[4];
  wb::ptx::ldmatrix_x4(r, tile + lane * 8);  // planted race: read
  for (int j = 0; j < 4; ++j) out[lane * 4 + j] = r[j];
}

constexpr std::size_t kChunksBytes = 32 * kChunkFloats * sizeof(float);
constexpr int kRefillThreads = 64, kRefillTiles = 4;
constexpr int kRefillFloats = kRefillTiles * kRefillThreads * kChunkFloats;
constexpr std::size_t kRefillBytes = 2 * kRefillThreads * kChunkFloats * sizeof(float);
constexpr std::size_t kRowsBytes = 32 * 8 * sizeof(std::uint16_t);

}  // namespace

TEST_CASE("a cp_async chunk read by another thread after wait and syncthreads is race-free" *
          doctest::test_suite("ptx")) {
  Aligned<float> src(32 * kChunkFloats);
  for (std::size_t i = 0; i < src.size; ++i) src[i] = static_cast<float>(i);
  std::vector<float> out(32 * kChunkFloats);
  wb::launch<cp_async_neighbour_kernel>(dim3(2), dim3(32), kChunksBytes, src.p, out.data(), 1);
  for (int t = 0; t < 32; ++t) {
    for (int i = 0; i < kChunkFloats; ++i) {
      CHECK(out[t * kChunkFloats + i] == static_cast<float>((t + 1) % 32 * kChunkFloats + i));
    }
  }
#if !defined(WB_SIM_RACE_MODE)
  // Without the barrier the plain simulator shows the stale bytes: thread 0 runs to its end
  // before thread 1 has issued, let alone waited for, its copy (the launch's shared memory
  // starts as 0xff bytes, a NaN as float).
  wb::launch<cp_async_neighbour_kernel>(dim3(1), dim3(32), kChunksBytes, src.p, out.data(), 0);
  CHECK(std::isnan(out[0]));
#endif
}

TEST_CASE("a double buffer refilled after a barrier behind every read is race-free" *
          doctest::test_suite("ptx")) {
  Aligned<float> src(kRefillFloats);
  for (std::size_t i = 0; i < src.size; ++i) src[i] = static_cast<float>(i);
  std::vector<float> out(kRefillFloats);
  wb::launch<cp_async_refill_kernel>(dim3(1), dim3(kRefillThreads), kRefillBytes, src.p,
                                     kRefillTiles, out.data(), 1);
  for (int i = 0; i < kRefillTiles; ++i) {
    for (int t = 0; t < kRefillThreads; ++t) {
      const int other = (t + 32) % kRefillThreads;
      for (int j = 0; j < kChunkFloats; ++j) {
        CHECK(out[(i * kRefillThreads + t) * kChunkFloats + j] ==
              static_cast<float>((i * kRefillThreads + other) * kChunkFloats + j));
      }
    }
  }
#if !defined(WB_SIM_RACE_MODE)
  // Without the second barrier the plain simulator hands warp 1 NaN: warp 0 runs on to the next
  // iteration's barrier, issuing its copies into the buffer of tile 0 (0xff bytes from the
  // issue to the wait), before warp 1 reads tile 0.
  wb::launch<cp_async_refill_kernel>(dim3(1), dim3(kRefillThreads), kRefillBytes, src.p,
                                     kRefillTiles, out.data(), 0);
  CHECK(std::isnan(out[32 * kChunkFloats]));  // thread 32 of tile 0, reading thread 0's chunk
#endif
}

TEST_CASE("ldmatrix of rows other lanes wrote after syncwarp is race-free" *
          doctest::test_suite("ptx")) {
  std::vector<std::uint32_t> out(32 * 4);
  wb::launch<ldmatrix_after_store_kernel>(dim3(1), dim3(32), kRowsBytes, out.data(), 1);
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int j = 0; j < 4; ++j) {
      const std::uint32_t lo = static_cast<std::uint32_t>((8 * j + g) * 8 + 2 * t);
      CHECK(out[lane * 4 + j] == (lo | (lo + 1) << 16));  // matrix j: (row g, columns 2t, 2t + 1)
    }
  }
#if !defined(WB_SIM_RACE_MODE)
  // Without __syncwarp the plain simulator shows the stale bytes: lane 0 reads row 0 before
  // lane 31 has written it.
  wb::launch<ldmatrix_after_store_kernel>(dim3(1), dim3(32), kRowsBytes, out.data(), 0);
  CHECK(out[0] == 0xffffffffu);
#endif
}

#if defined(WB_SIM_RACE_MODE)
TEST_CASE("a cp_async wait lands only the calling thread's copies" *
          doctest::test_suite("race_planted_cp_async")) {
  Aligned<float> src(32 * kChunkFloats);
  for (std::size_t i = 0; i < src.size; ++i) src[i] = 1.0f;
  std::vector<float> out(32 * kChunkFloats);
  wb::launch<cp_async_neighbour_kernel>(dim3(1), dim3(32), kChunksBytes, src.p, out.data(), 0);
}

TEST_CASE("a cp_async refill of a buffer another thread still reads is a race" *
          doctest::test_suite("race_planted_cp_async_refill")) {
  Aligned<float> src(kRefillFloats);
  for (std::size_t i = 0; i < src.size; ++i) src[i] = 1.0f;
  std::vector<float> out(kRefillFloats);
  wb::launch<cp_async_refill_kernel>(dim3(1), dim3(kRefillThreads), kRefillBytes, src.p,
                                     kRefillTiles, out.data(), 0);
}

TEST_CASE("ldmatrix gives no memory ordering without syncwarp" *
          doctest::test_suite("race_planted_ldmatrix")) {
  std::vector<std::uint32_t> out(32 * 4);
  wb::launch<ldmatrix_after_store_kernel>(dim3(1), dim3(32), kRowsBytes, out.data(), 0);
}
#endif  // WB_SIM_RACE_MODE
