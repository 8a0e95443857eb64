// The simulator's built-in variables: 3-D thread and block indices, warps and lanes, many
// blocks, partial warps and the largest block.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "common/kernel.cuh"

namespace {

/// Linear id of the thread in the grid: blocks in (x, y, z) order, threads likewise.
__device__ unsigned global_linear_id() {
  const unsigned block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  const unsigned thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  return block * threads + thread;
}

// slot: (threads in grid, 8), one row per thread: its indices, written by that thread only.
__global__ void write_indices_kernel(unsigned* slot) {
  unsigned* row = slot + 8 * global_linear_id();
  row[0] = global_linear_id() + 1;  // + 1: an unwritten row stays 0
  row[1] = threadIdx.x;
  row[2] = threadIdx.y;
  row[3] = threadIdx.z;
  row[4] = blockIdx.x;
  row[5] = blockIdx.y;
  row[6] = blockIdx.z;
  row[7] = static_cast<unsigned>(warpSize);
}

// lane_of: (threads in block), each thread's lane as the warp's ballot sees it (its bit's
// position among the lanes that exist), and warp_of: its warp, counted by a ballot per warp.
__global__ void lanes_kernel(unsigned* lane_of, unsigned* warp_size_of) {
  const unsigned linear = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const unsigned lanes = __ballot_sync(0xffffffffu, 1);  // one bit per lane that exists
  const unsigned below = __ballot_sync(0xffffffffu, 1) & ((1u << (linear % 32)) - 1u);
  lane_of[linear] = static_cast<unsigned>(__popc(below));
  warp_size_of[linear] = static_cast<unsigned>(__popc(lanes));
}

// sum: (1), the sum of 0..n-1 over a block of n threads by a shared-memory tree.
template <int kThreads>
__global__ void block_sum_kernel(long long* sum) {
  __shared__ long long partial[kThreads];
  const int t = threadIdx.x;
  partial[t] = t;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    __syncthreads();
  }
  if (t == 0) *sum = partial[0];
}

// out: (blocks), each block's own id, computed by its threads together through shared memory.
__global__ void many_blocks_kernel(unsigned* out) {
  __shared__ unsigned ids[32];
  ids[threadIdx.x] = blockIdx.x + threadIdx.x;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned s = 0;
    for (unsigned i = 0; i < 32; ++i) s += ids[i] - i;  // 32 * blockIdx.x
    out[blockIdx.x] = s / 32;
  }
}

// position: (blocks), the place in the launch's order at which each block ran, from a counter
// every block's first thread increments.
__global__ void run_order_kernel(unsigned* counter, unsigned* position) {
  if (threadIdx.x != 0) return;
  const unsigned block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  position[block] = atomicAdd(counter, 1u);
}

}  // namespace

TEST_CASE("every thread of a 3-D grid writes its indices into its own slot" *
          doctest::test_suite("indices")) {
  struct Shape {
    dim3 grid, block;
  };
  const Shape shapes[] = {
      {dim3(3, 2, 2), dim3(8, 4, 2)},   // 3-D blocks, full warps
      {dim3(2, 3, 1), dim3(7, 3, 5)},   // 105 threads: partial last warp
      {dim3(1, 1, 1), dim3(1024, 1, 1)},  // the largest block
      {dim3(4, 1, 3), dim3(1, 1, 64)},  // z-only block at its limit of 64
      {dim3(70000, 1, 1), dim3(1, 1, 1)},  // more blocks than gridDim.y allows
  };
  for (const Shape& s : shapes) {
    CAPTURE(s.grid.x);
    CAPTURE(s.grid.y);
    CAPTURE(s.grid.z);
    CAPTURE(s.block.x);
    CAPTURE(s.block.y);
    CAPTURE(s.block.z);
    const std::size_t threads = std::size_t{s.block.x} * s.block.y * s.block.z;
    const std::size_t blocks = std::size_t{s.grid.x} * s.grid.y * s.grid.z;
    std::vector<unsigned> slot(8 * threads * blocks, 0);
    wb::launch<write_indices_kernel>(s.grid, s.block, 0, slot.data());
    std::size_t wrong = 0;
    for (unsigned bz = 0; bz < s.grid.z; ++bz)
      for (unsigned by = 0; by < s.grid.y; ++by)
        for (unsigned bx = 0; bx < s.grid.x; ++bx)
          for (unsigned tz = 0; tz < s.block.z; ++tz)
            for (unsigned ty = 0; ty < s.block.y; ++ty)
              for (unsigned tx = 0; tx < s.block.x; ++tx) {
                const std::size_t b = (std::size_t{bz} * s.grid.y + by) * s.grid.x + bx;
                const std::size_t t = (std::size_t{tz} * s.block.y + ty) * s.block.x + tx;
                const std::size_t id = b * threads + t;
                const unsigned* row = &slot[8 * id];
                const unsigned expected[8] = {static_cast<unsigned>(id + 1), tx, ty, tz, bx, by, bz,
                                              32};
                for (int k = 0; k < 8; ++k) wrong += row[k] != expected[k];
              }
    CHECK(wrong == 0);  // every slot written, by the right thread, exactly
  }
}

TEST_CASE("warps are 32 consecutive linear thread ids and the last one may be partial" *
          doctest::test_suite("indices")) {
  const dim3 blocks[] = {dim3(32, 1, 1), dim3(33, 1, 1), dim3(8, 4, 3), dim3(5, 5, 5)};
  for (const dim3& block : blocks) {
    CAPTURE(block.x);
    CAPTURE(block.y);
    CAPTURE(block.z);
    const unsigned n = block.x * block.y * block.z;
    std::vector<unsigned> lane(n), warp_size(n);
    wb::launch<lanes_kernel>(dim3(1), block, 0, lane.data(), warp_size.data());
    for (unsigned i = 0; i < n; ++i) {
      const unsigned expected_size = std::min(32u, n - i / 32 * 32);
      REQUIRE(lane[i] == i % 32);  // x fastest, then y, then z
      REQUIRE(warp_size[i] == expected_size);
    }
  }
}

TEST_CASE("a block of 1024 threads reduces through shared memory" *
          doctest::test_suite("indices")) {
  long long sum = -1;
  wb::launch<block_sum_kernel<1024>>(dim3(1), dim3(1024), 0, &sum);
  CHECK(sum == 1023LL * 1024 / 2);  // integers: exact
}

TEST_CASE("thousands of blocks run one after another with their own shared memory" *
          doctest::test_suite("indices")) {
  constexpr unsigned kBlocks = 5000;
  std::vector<unsigned> out(kBlocks, 0);
  wb::launch<many_blocks_kernel>(dim3(kBlocks), dim3(32), 0, out.data());
  std::vector<unsigned> expected(kBlocks);
  std::iota(expected.begin(), expected.end(), 0u);
  CHECK(out == expected);
}

TEST_CASE("blocks run in blockIdx order, x fastest, or in its reverse after set_block_order" *
          doctest::test_suite("indices")) {
  const dim3 grid(3, 2, 2);
  constexpr unsigned kBlocks = 12;
  REQUIRE(wb::sim::block_order() == wb::sim::BlockOrder::forward);  // the default
  for (wb::sim::BlockOrder order : {wb::sim::BlockOrder::forward, wb::sim::BlockOrder::reverse}) {
    wb::sim::set_block_order(order);
    unsigned counter = 0;
    std::vector<unsigned> position(kBlocks, kBlocks);
    wb::launch<run_order_kernel>(grid, dim3(32), 0, &counter, position.data());
    std::vector<unsigned> expected(kBlocks);
    for (unsigned b = 0; b < kBlocks; ++b)
      expected[b] = order == wb::sim::BlockOrder::forward ? b : kBlocks - 1 - b;
    CHECK(position == expected);
  }
  wb::sim::set_block_order(wb::sim::BlockOrder::forward);
}
