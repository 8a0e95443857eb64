// WMMA misuse in the simulator: the faults a kernel's WMMA calls are reported with (a lane
// missing, a diverged warp, a deadlock, arguments that break CUDA's rules), and race mode
// on a store_matrix_sync read back without __syncwarp. The products: test_wmma.cpp.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/sim/fault_of.hpp"
#include "common/half.hpp"
#include "common/kernel.cuh"
#include "tests/sim/wmma_support.hpp"

// ---- Faults ---------------------------------------------------------------------------------

namespace {

using namespace nvcuda;
using wb::test::Aligned;

using wb::test::fault_of;

bool has(const std::string& message, const std::string& part) {
  return message.find(part) != std::string::npos;
}

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major>;
using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

constexpr int kMissingLaneLine = __LINE__ + 8;
// Planted: lane 5 returns before mma_sync, which needs the whole warp.
__global__ void missing_lane_kernel(const __half* x, float* y) {
  FragA a;
  FragB b;
  Acc acc;
  wmma::fill_fragment(acc, 0.0f);
  if (threadIdx.x % 32 == 5) return;
  wmma::load_matrix_sync(a, x, 16);
  wmma::load_matrix_sync(b, x, 16);
  wmma::mma_sync(acc, a, b, acc);
  wmma::store_matrix_sync(y, acc, 16, wmma::mem_row_major);
}

constexpr int kDivergedLine = __LINE__ + 5;
// Planted: the two half-warps load at two different lines (the warp diverged).
__global__ void diverged_kernel(const __half* x) {
  FragA a;
  if (threadIdx.x < 16) {
    wmma::load_matrix_sync(a, x, 16);
  } else {
    wmma::load_matrix_sync(a, x, 16);
  }
}

// Planted: lane 7 waits at __syncthreads while the rest of the warp waits at mma_sync.
__global__ void deadlock_kernel(float* y) {
  FragA a;
  FragB b;
  Acc acc;
  wmma::fill_fragment(a, 1.0f);
  wmma::fill_fragment(b, 1.0f);
  wmma::fill_fragment(acc, 0.0f);
  if (threadIdx.x != 7) wmma::mma_sync(acc, a, b, acc);
  __syncthreads();
  wmma::store_matrix_sync(y, acc, 16, wmma::mem_row_major);
}

// Planted: every lane passes its own row as the tile pointer.
__global__ void per_lane_pointer_kernel(const __half* x) {
  FragA a;
  wmma::load_matrix_sync(a, x + (threadIdx.x % 2) * 16 * 16, 16);
}

// Planted: a tile pointer 16 bytes off the required 32-byte alignment, and a bad ldm.
__global__ void misaligned_kernel(const __half* x, unsigned ldm) {
  FragA a;
  wmma::load_matrix_sync(a, x, ldm);
}

// Planted: one lane changes one copy of a duplicated __half element.
__global__ void inconsistent_copies_kernel(const __half* x, float* y) {
  FragA a;
  FragB b;
  Acc acc;
  wmma::load_matrix_sync(a, x, 16);
  wmma::load_matrix_sync(b, x, 16);
  wmma::fill_fragment(acc, 0.0f);
  if (threadIdx.x == 3) a.x[9] = __float2half(-1.0f);
  wmma::mma_sync(acc, a, b, acc);
  wmma::store_matrix_sync(y, acc, 16, wmma::mem_row_major);
}

}  // namespace

TEST_CASE("a lane missing from mma_sync is reported with its thread and the line" *
          doctest::test_suite("wmma")) {
  Aligned<__half> x(512);
  Aligned<float> y(256);
  for (int i = 0; i < 512; ++i) x[i] = __float2half(1.0f);
  const std::string m = fault_of(wb::sim::Fault::Kind::warp_collective, [&] {
    wb::launch<missing_lane_kernel>(dim3(2), dim3(64), 0, x.p, y.p);
  });
  CAPTURE(m);
  CHECK(has(m, "kernel missing_lane_kernel, block (0,0,0), thread (0,0,0)"));
  CHECK(has(m, "load_matrix_sync at tests/sim/test_wmma_faults.cpp:" + std::to_string(kMissingLaneLine)));
  CHECK(has(m, "needs all 32 lanes of the warp"));
  CHECK(has(m, "lane 5, which has exited (thread (5,0,0))"));
}

TEST_CASE("WMMA calls from a diverged warp, a deadlock, or a partial warp are reported" *
          doctest::test_suite("wmma")) {
  Aligned<__half> x(512);
  Aligned<float> y(256);
  for (int i = 0; i < 512; ++i) x[i] = __float2half(0.5f);
  SUBCASE("diverged") {
    const std::string m = fault_of(wb::sim::Fault::Kind::warp_collective,
                                   [&] { wb::launch<diverged_kernel>(dim3(1), dim3(32), 0, x.p); });
    CAPTURE(m);
    CHECK(has(m, "thread (16,0,0): load_matrix_sync at tests/sim/test_wmma_faults.cpp:" +
                     std::to_string(kDivergedLine + 2)));
    CHECK(has(m, "which waits at load_matrix_sync at tests/sim/test_wmma_faults.cpp:" +
                     std::to_string(kDivergedLine)));
    CHECK(has(m, "the warp diverged"));
  }
  SUBCASE("deadlock with a barrier") {
    const std::string m = fault_of(wb::sim::Fault::Kind::warp_collective,
                                   [&] { wb::launch<deadlock_kernel>(dim3(1), dim3(32), 0, y.p); });
    CAPTURE(m);
    CHECK(has(m, "mma_sync(mask 0xffffffff)"));
    CHECK(has(m, "lane 7 (thread (7,0,0)) waits at __syncthreads()"));
  }
  SUBCASE("a partial warp") {
    // A block of 16 threads is one partial warp: lanes 16-31 do not exist.
    const std::string p = fault_of(wb::sim::Fault::Kind::warp_collective, [&] {
      wb::launch<per_lane_pointer_kernel>(dim3(1), dim3(16), 0, x.p);
    });
    CAPTURE(p);
    CHECK(has(p, "lane 16, which does not exist (this warp has 16 threads)"));
  }
}

TEST_CASE("WMMA arguments that break CUDA's rules are reported" * doctest::test_suite("wmma")) {
  Aligned<__half> x(1024);
  Aligned<float> y(256);
  for (int i = 0; i < 1024; ++i) x[i] = __float2half(0.25f);
  SUBCASE("lanes pass different pointers") {
    const std::string m = fault_of(wb::sim::Fault::Kind::warp_collective, [&] {
      wb::launch<per_lane_pointer_kernel>(dim3(1), dim3(32), 0, x.p);
    });
    CAPTURE(m);
    CHECK(has(m, "thread (1,0,0): load_matrix_sync"));
    CHECK(has(m, "every lane of the warp must pass the same arguments"));
  }
  SUBCASE("a pointer that is not 32-byte aligned") {
    const std::string m = fault_of(wb::sim::Fault::Kind::invalid_argument, [&] {
      wb::launch<misaligned_kernel>(dim3(1), dim3(32), 0, x.p + 8, 16u);
    });
    CAPTURE(m);
    CHECK(has(m, "is not 256-bit (32-byte) aligned"));
  }
  SUBCASE("an ldm that is not a multiple of 16 bytes") {
    const std::string m = fault_of(wb::sim::Fault::Kind::invalid_argument, [&] {
      wb::launch<misaligned_kernel>(dim3(1), dim3(32), 0, x.p, 20u);
    });
    CAPTURE(m);
    CHECK(has(m, "ldm 20 is not a multiple of 16 bytes (8 elements of 2 bytes)"));
  }
  SUBCASE("two copies of one element that differ") {
    const std::string m = fault_of(wb::sim::Fault::Kind::invalid_argument, [&] {
      wb::launch<inconsistent_copies_kernel>(dim3(1), dim3(32), 0, x.p, y.p);
    });
    CAPTURE(m);
    CHECK(has(m, "thread (3,0,0): mma_sync at tests/sim/test_wmma_faults.cpp:"));
    CHECK(has(m, "lane 3's __half fragment holds A(0,7) twice, as x[1] = 0.25 and x[9] = -1"));
  }
}

// ---- Race mode --------------------------------------------------------------------------------

namespace {

// y: (16 * 16). A warp stores its accumulator to shared memory, then each lane reads back a
// column with ordinary loads: __syncwarp orders the store before the reads (`sync` = 1).
// Without it, the store gives no memory ordering: a race on the GPU and in race mode.
__global__ void store_then_read_kernel(float* y, int sync) {
  __shared__ __align__(32) float tile[16 * 16];
  Acc acc;
  wmma::fill_fragment(acc, 3.0f);
  wmma::store_matrix_sync(tile, acc, 16, wmma::mem_row_major);
  if (sync != 0) __syncwarp();
  const int lane = threadIdx.x;
  if (lane < 16) {
    for (int r = 0; r < 16; ++r) y[r * 16 + lane] = tile[r * 16 + lane];  // planted race: read
  }
}

}  // namespace

TEST_CASE("a store_matrix_sync read back after syncwarp is race-free" *
          doctest::test_suite("wmma")) {
  std::vector<float> y(256);
  wb::launch<store_then_read_kernel>(dim3(2), dim3(32), 0, y.data(), 1);
  for (float v : y) CHECK(v == 3.0f);
}

#if defined(WB_SIM_RACE_MODE)
TEST_CASE("store_matrix_sync gives no memory ordering without syncwarp" *
          doctest::test_suite("race_planted_wmma")) {
  std::vector<float> y(256);
  wb::launch<store_then_read_kernel>(dim3(1), dim3(32), 0, y.data(), 0);
}
#endif  // WB_SIM_RACE_MODE
