// memcheck and initcheck in the instrumented simulator: each planted bug is reported as a
// Fault naming the kernel, block, thread, address, what the access missed and the kernel's
// source line; the same kernels without the bug pass. Built only as an instrumented binary
// (test_sim_access, tests/sim/CMakeLists.txt), suite "memcheck". Vector accesses that straddle
// an end, and shared memory earlier blocks wrote: test_memcheck_edges.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/buffer.hpp"
#include "common/kernel.cuh"
#include "common/ptx.cuh"
#include "common/sim/access.hpp"
#include "tests/sim/fault_of.hpp"

namespace {

using wb::Backend;
using wb::DeviceBuffer;
using Kind = wb::sim::Fault::Kind;
using wb::test::check_says;
using wb::test::fault_of;

constexpr int kThreads = 64;

// The planted lines, recorded where they are written, so the tests can require them.
constexpr int kCopyLine = __LINE__ + 4;
// out[i] = in[i + shift]: shift 1 reads one element past `in` in the last thread.
__global__ void shifted_copy_kernel(const float* in, float* out, int n, int shift) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = in[i + shift];
}

constexpr int kStoreLine = __LINE__ + 4;
// out[i + shift] = 1: shift 1 writes one element past `out` in the last thread.
__global__ void shifted_store_kernel(float* out, int n, int shift) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i + shift] = 1.0f;
}

constexpr int kStaticLine = __LINE__ + 6;
// A static __shared__ tile of kThreads floats read at threadIdx.x + shift.
__global__ void static_tile_kernel(float* out, int shift) {
  __shared__ float tile[kThreads];
  tile[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = tile[(threadIdx.x + static_cast<unsigned>(shift)) % (kThreads + 1)];
}

constexpr int kDynamicLine = __LINE__ + 6;
// The launch's dynamic shared memory (kThreads floats) written at threadIdx.x + shift.
__global__ void dynamic_tile_kernel(float* out, int shift) {
  float* tile = wb::dynamic_shared<float>();
  tile[threadIdx.x] = 0.0f;
  __syncthreads();
  tile[threadIdx.x + static_cast<unsigned>(shift)] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x];
}

constexpr int kAccumulateLine = __LINE__ + 4;
// y[i] += x[i]: reads y, so y must hold values before the launch.
__global__ void accumulate_kernel(const float* x, float* y, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] += x[i];
}

constexpr int kSharedUnwrittenLine = __LINE__ + 8;
// Each thread writes tile[t] for t < written, then reads its right neighbour's slot:
// written < kThreads leaves a slot that is read but never written.
__global__ void neighbour_kernel(float* out, int written) {
  float* tile = wb::dynamic_shared<float>();
  const unsigned t = threadIdx.x;
  if (static_cast<int>(t) < written) tile[t] = static_cast<float>(t);
  __syncthreads();
  out[t] = tile[(t + 1) % kThreads];
}

constexpr int kCpAsyncReadLine = __LINE__ + 12;
// Thread t copies 16-byte chunk t of `in` into the launch's dynamic shared memory by cp.async
// and, after __syncthreads, reads its neighbour's chunk. `wait` = 0 leaves out cp_async_wait:
// no copy has landed when the neighbour's chunk is read (the simulator performs a copy at the
// wait that covers it), so the read is of bytes nothing has written.
__global__ void cp_async_read_kernel(const float4* in, float4* out, int wait) {
  float4* tile = wb::dynamic_shared<float4>();
  const unsigned t = threadIdx.x;
  wb::ptx::cp_async_16(tile + t, in + t, true);
  wb::ptx::cp_async_commit();
  if (wait != 0) wb::ptx::cp_async_wait<0>();
  __syncthreads();
  out[t] = tile[(t + 1) % kThreads];
}

constexpr int kLdmatrixRowLine = __LINE__ + 9;
// Lane l hands ldmatrix row l of a 32-row tile of 8 16-bit elements in the launch's dynamic
// shared memory (512 bytes); lane `bad` hands row 32 instead, one past the end.
__global__ void ldmatrix_rows_kernel(std::uint32_t* out, int bad) {
  auto* tile = wb::dynamic_shared<std::uint16_t>();
  const int lane = static_cast<int>(threadIdx.x);
  for (int i = lane; i < 32 * 8; i += 32) tile[i] = static_cast<std::uint16_t>(i);
  __syncwarp();
  std::uint32_t r[4];
  wb::ptx::ldmatrix_x4(r, tile + (lane == bad ? 32 : lane) * 8);
  out[lane] = r[0];
}

constexpr int kCpAsyncSourceLine = __LINE__ + 6;
// Thread t copies chunk t + shift of `in` (n chunks) into chunk t of dynamic shared memory by
// cp.async: shift 1 reads one chunk past `in` in the last thread.
__global__ void cp_async_shifted_kernel(const float4* in, float4* out, int shift) {
  float4* tile = wb::dynamic_shared<float4>();
  const unsigned t = threadIdx.x;
  wb::ptx::cp_async_16(tile + t, in + t + shift, true);
  wb::ptx::cp_async_commit();
  wb::ptx::cp_async_wait<0>();
  out[t] = tile[t];
}

constexpr int kLdmatrixGlobalLine = __LINE__ + 5;
// ldmatrix's rows taken from a device buffer (global memory) instead of shared memory: on a
// GPU the address would be converted into the shared window it is not in.
__global__ void ldmatrix_global_kernel(const std::uint16_t* rows, std::uint32_t* out) {
  std::uint32_t r[4];
  wb::ptx::ldmatrix_x4(r, rows + threadIdx.x * 8);
  out[threadIdx.x] = r[0];
}

constexpr int kCpAsyncSpacesLine = __LINE__ + 6;
// cp.async with its spaces swapped: `swap` 1 copies from shared memory into shared memory,
// 2 from global memory into global memory.
__global__ void cp_async_spaces_kernel(const float4* in, float4* out, int swap) {
  float4* tile = wb::dynamic_shared<float4>();
  const unsigned t = threadIdx.x;
  wb::ptx::cp_async_16(swap == 2 ? out + t : tile + t, swap == 1 ? tile + t : in + t, true);
  wb::ptx::cp_async_commit();
  wb::ptx::cp_async_wait<0>();
}

std::string at_line(int line) { return "tests/sim/test_memcheck.cpp:" + std::to_string(line); }

}  // namespace

TEST_SUITE("memcheck") {

TEST_CASE("this binary is instrumented") { CHECK(wb::sim::instrumented()); }

TEST_CASE("a read one element past a global buffer names the buffer, thread and line") {
  const int n = 2 * kThreads - 5;  // the last block is partial
  DeviceBuffer<float> in(Backend::sim, std::vector<float>(n, 1.0f));
  DeviceBuffer<float> out(Backend::sim, n);
  wb::sim::label_device_buffer(in.data(), "in");
  const auto copy = [&](int shift) {
    wb::launch<shifted_copy_kernel>(dim3(2), dim3(kThreads), 0, in.data(), out.data(), n, shift);
  };
  copy(0);
  check_says(fault_of(Kind::memory_access, [&] { copy(1); }),
             {"kernel shifted_copy_kernel, block (1,0,0), thread (58,0,0)",
              "memcheck: invalid read of 4 bytes", "0 bytes past the end of device buffer in (",
              at_line(kCopyLine)});
}

TEST_CASE("a write one element past a global buffer is reported") {
  const int n = kThreads + 7;
  DeviceBuffer<float> out(Backend::sim, n);
  const auto store = [&](int shift) {
    wb::launch<shifted_store_kernel>(dim3(2), dim3(kThreads), 0, out.data(), n, shift);
  };
  store(0);
  check_says(fault_of(Kind::memory_access, [&] { store(1); }),
             {"thread (6,0,0)", "memcheck: invalid write of 4 bytes",
              "0 bytes past the end of device buffer #", at_line(kStoreLine)});
}

TEST_CASE("a read one element past a static __shared__ array is reported") {
  DeviceBuffer<float> out(Backend::sim, kThreads);
  const auto read_tile = [&](int shift) {
    wb::launch<static_tile_kernel>(dim3(1), dim3(kThreads), 0, out.data(), shift);
  };
  read_tile(0);
  // Thread 1 reads tile[(1 + 64) % 65] = tile[0]; thread 0 reads tile[64], one past the end.
  check_says(fault_of(Kind::memory_access, [&] { read_tile(kThreads); }),
             {"thread (0,0,0)", "0 bytes past the end of the __shared__ array",
              "static_tile_kernel(float*, int)::tile (256 bytes)", at_line(kStaticLine)});
}

TEST_CASE("a write one element past the dynamic shared memory is reported") {
  DeviceBuffer<float> out(Backend::sim, kThreads);
  const std::size_t bytes = kThreads * sizeof(float);
  const auto write_tile = [&](int shift) {
    wb::launch<dynamic_tile_kernel>(dim3(1), dim3(kThreads), bytes, out.data(), shift);
  };
  write_tile(0);
  check_says(fault_of(Kind::memory_access, [&] { write_tile(1); }),
             {"thread (63,0,0)", "memcheck: invalid write of 4 bytes",
              "0 bytes past the end of the block's dynamic shared memory (256 bytes)",
              at_line(kDynamicLine)});
}

TEST_CASE("initcheck: reading an output buffer nothing wrote is reported") {
  const int n = 100;
  DeviceBuffer<float> x(Backend::sim, std::vector<float>(n, 2.0f));
  DeviceBuffer<float> y(Backend::sim, n);
  wb::sim::label_device_buffer(y.data(), "y");
  const auto accumulate = [&] {
    wb::launch<accumulate_kernel>(dim3(2), dim3(kThreads), 0, x.data(), y.data(), n);
  };
  check_says(fault_of(Kind::uninitialized_read, accumulate),
             {"thread (0,0,0)", "initcheck: read of 4 bytes",
              "(offset 0) that nothing has written, in device buffer y",
              at_line(kAccumulateLine)});
  // Written first (a fill counts, as cudaMemset does), the same launch is clean.
  y.fill_zero();
  accumulate();
  CHECK(y.download()[n - 1] == 2.0f);
}

TEST_CASE("initcheck: reading shared memory no thread of the block wrote is reported") {
  DeviceBuffer<float> out(Backend::sim, kThreads);
  const auto write_and_read = [&](int blocks, int written) {
    wb::launch<neighbour_kernel>(dim3(blocks), dim3(kThreads), kThreads * sizeof(float),
                                 out.data(), written);
  };
  SUBCASE("a slot no thread wrote") {
    write_and_read(2, kThreads);
    // Thread 62 reads slot 63, which only thread 63 would have written.
    check_says(fault_of(Kind::uninitialized_read, [&] { write_and_read(2, kThreads - 1); }),
               {"block (0,0,0), thread (62,0,0)",
                "(offset 252) that nothing has written, in the block's dynamic shared memory",
                at_line(kSharedUnwrittenLine)});
  }
  SUBCASE("what an earlier block wrote does not count for the next block") {
    // Block 0 writes every slot; block 1 skips slot 63. Real shared memory holds the previous
    // block's bytes, which is exactly the stale value a missing write would read.
    const auto earlier_block_wrote = [&] {
      write_and_read(1, kThreads);
      write_and_read(1, kThreads - 1);
    };
    check_says(fault_of(Kind::uninitialized_read, earlier_block_wrote), {"thread (62,0,0)"});
  }
}

TEST_CASE("initcheck: a cp_async chunk read without cp_async_wait is reported") {
  std::vector<float4> host(kThreads);
  for (int i = 0; i < kThreads; ++i) host[i] = make_float4(1.0f * i, 2.0f, 3.0f, 4.0f);
  DeviceBuffer<float4> in(Backend::sim, host), out(Backend::sim, kThreads);
  const auto copy_and_read = [&](int wait) {
    wb::launch<cp_async_read_kernel>(dim3(2), dim3(kThreads), kThreads * sizeof(float4),
                                     in.data(), out.data(), wait);
  };
  copy_and_read(1);
  CHECK(out.download()[0].x == 1.0f);  // waited for: thread 0 reads thread 1's chunk
  // The first thread to run on after the barrier, 63, reads thread 0's chunk.
  check_says(fault_of(Kind::uninitialized_read, [&] { copy_and_read(0); }),
             {"block (0,0,0), thread (63,0,0)", "initcheck: read of",
              "(offset 0) that nothing has written, in the block's dynamic shared memory",
              at_line(kCpAsyncReadLine)});
}

TEST_CASE("an ldmatrix row past shared memory names the lane that handed it over") {
  DeviceBuffer<std::uint32_t> out(Backend::sim, 32);
  const auto load_rows = [&](int bad) {
    wb::launch<ldmatrix_rows_kernel>(dim3(1), dim3(32), 32 * 8 * sizeof(std::uint16_t),
                                     out.data(), bad);
  };
  load_rows(-1);
  CHECK(out.download()[1] == (2u | 3u << 16));  // lane 1: matrix 0's row 0, columns 2 and 3
  check_says(fault_of(Kind::memory_access, [&] { load_rows(9); }),
             {"block (0,0,0), thread (9,0,0)", "memcheck: invalid read of",
              "0 bytes past the end of the block's dynamic shared memory (512 bytes)",
              at_line(kLdmatrixRowLine)});
}

TEST_CASE("a cp_async source past its buffer names the thread and the line that issued it") {
  std::vector<float4> host(kThreads, make_float4(1.0f, 2.0f, 3.0f, 4.0f));
  DeviceBuffer<float4> in(Backend::sim, host), out(Backend::sim, kThreads);
  wb::sim::label_device_buffer(in.data(), "in");
  const auto copy = [&](int shift) {
    wb::launch<cp_async_shifted_kernel>(dim3(1), dim3(kThreads), kThreads * sizeof(float4),
                                        in.data(), out.data(), shift);
  };
  copy(0);
  CHECK(out.download()[kThreads - 1].w == 4.0f);
  check_says(fault_of(Kind::memory_access, [&] { copy(1); }),
             {"thread (63,0,0)", "memcheck: invalid read of",
              "0 bytes past the end of device buffer in (", at_line(kCpAsyncSourceLine)});
}

TEST_CASE("ldmatrix and cp.async addresses in the wrong space are reported") {
  DeviceBuffer<std::uint16_t> rows(Backend::sim, std::vector<std::uint16_t>(32 * 8, 1));
  DeviceBuffer<std::uint32_t> words(Backend::sim, 32);
  const auto load_global = [&] {
    wb::launch<ldmatrix_global_kernel>(dim3(1), dim3(32), 0, rows.data(), words.data());
  };
  check_says(fault_of(Kind::memory_access, load_global),
             {"memcheck: ldmatrix at " + at_line(kLdmatrixGlobalLine), "row address",
              "is in global memory, where it must be in shared memory"});
  std::vector<float4> host(kThreads, make_float4(1.0f, 2.0f, 3.0f, 4.0f));
  DeviceBuffer<float4> in(Backend::sim, host), out(Backend::sim, kThreads);
  const auto copy = [&](int swap) {
    wb::launch<cp_async_spaces_kernel>(dim3(1), dim3(kThreads), kThreads * sizeof(float4),
                                       in.data(), out.data(), swap);
  };
  copy(0);
  check_says(fault_of(Kind::memory_access, [&] { copy(1); }),
             {"cp.async at " + at_line(kCpAsyncSpacesLine) + ": source address",
              "is in shared memory, where it must be in global memory"});
  check_says(fault_of(Kind::memory_access, [&] { copy(2); }),
             {"destination address", "is in global memory, where it must be in shared memory"});
}

TEST_CASE("a freed buffer is no longer device memory") {
  const int n = kThreads;
  DeviceBuffer<float> out(Backend::sim, n);
  const float* dangling = nullptr;
  {
    DeviceBuffer<float> in(Backend::sim, std::vector<float>(n, 1.0f));
    dangling = in.data();
  }
  const auto read_freed = [&] {
    wb::launch<shifted_copy_kernel>(dim3(1), dim3(kThreads), 0, dangling, out.data(), n, 0);
  };
  check_says(fault_of(Kind::memory_access, read_freed), {"memcheck: invalid read of 4 bytes"});
}

}  // TEST_SUITE("memcheck")
