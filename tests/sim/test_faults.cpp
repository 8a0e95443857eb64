// Planted bugs: each kernel breaks one CUDA rule, and the simulator must report it as a
// wb::sim::Fault whose message names the kernel, the block and the thread (never hang).
#include <doctest/doctest.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/sim/fault_of.hpp"
#include "common/kernel.cuh"

namespace {

constexpr unsigned kFull = 0xffffffffu;

// Planted: in block 2, threads 100.. return early and never reach the barrier.
__global__ void early_exit_barrier_kernel(float* out) {
  if (blockIdx.x == 2 && threadIdx.x >= 100) return;
  out[threadIdx.x] = 1.0f;
  __syncthreads();  // the barrier the early threads skip
}

// Planted: the block's first 28 threads exit before any thread reaches the barrier (threads
// run in order), so the barrier's first arrival can already know it will never complete.
__global__ void first_threads_exit_kernel(float* out) {
  if (threadIdx.x < 28) return;
  out[threadIdx.x] = 1.0f;
  __syncthreads();  // the barrier the first threads never reach
}

// Planted: the first warp waits at one barrier, the rest at another (divergent barrier).
__global__ void divergent_barrier_kernel(float* out) {
  if (threadIdx.x < 32) {
    __syncthreads();  // first barrier
  } else {
    out[threadIdx.x] = 2.0f;
    __syncthreads();  // second barrier
  }
}

// Planted: lane 5 skips the shuffle and waits at __syncthreads, which the other lanes can
// never reach: a deadlock between a warp collective and a block barrier.
__global__ void shuffle_deadlock_kernel(int* out) {
  int v = static_cast<int>(threadIdx.x);
  if (threadIdx.x % 32 != 5) v = __shfl_xor_sync(kFull, v, 1);  // the stuck shuffle
  __syncthreads();
  out[threadIdx.x] = v;
}

// Planted: lane 5 exits, and lane 4 reads it (xor 1): the value is undefined.
__global__ void read_exited_lane_kernel(int* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_xor_sync(kFull, static_cast<int>(threadIdx.x), 1);
}

// Planted: a shuffle over the lower half reads lane 20, outside the mask.
__global__ void source_outside_mask_kernel(int* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_sync(0x0000ffffu, 1, 20);
}

// Planted: lane 3 calls a collective with a mask that does not include itself.
__global__ void mask_without_caller_kernel(unsigned* out) {
  const unsigned mask = threadIdx.x == 3 ? 0x1u : kFull;
  out[threadIdx.x] = __ballot_sync(mask, 1);
}

// Planted: lanes disagree about the mask of one collective.
__global__ void mismatched_masks_kernel(int* out) {
  const unsigned mask = threadIdx.x < 16 ? kFull : 0xffff0000u;
  out[threadIdx.x] = __shfl_down_sync(mask, 1, 1);
}

// Planted: a shuffle width that is not a power of 2.
__global__ void bad_width_kernel(int* out) { out[threadIdx.x] = __shfl_sync(kFull, 1, 0, 12); }

__global__ void fill_kernel(float* out, float value) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = value;
}

// Planted: an exception from host code called by a kernel.
__global__ void throwing_kernel(int* out) {
  if (threadIdx.x == 7) throw std::runtime_error("thrown in the kernel");
  out[threadIdx.x] = 1;
}

using wb::test::fault_of;

/// The message is one line naming the kernel, the block and the thread.
void check_names(const std::string& message, const char* kernel, const char* block,
                 const char* thread) {
  CAPTURE(message);
  CHECK(message.find('\n') == std::string::npos);
  CHECK(message.find(std::string("kernel ") + kernel) != std::string::npos);
  CHECK(message.find(std::string("block ") + block) != std::string::npos);
  CHECK(message.find(std::string("thread ") + thread) != std::string::npos);
}

/// The message cites this test file at `line` (a barrier's or collective's call site).
void check_site(const std::string& message, int line) {
  CAPTURE(message);
  CHECK(message.find("test_faults.cpp:" + std::to_string(line)) != std::string::npos);
}

int line_of(const char* marker);  // defined at the end of the file

}  // namespace

TEST_CASE("a syncthreads skipped by threads that exit early is reported" *
          doctest::test_suite("faults")) {
  std::vector<float> out(128);
  const std::string m = fault_of(wb::sim::Fault::Kind::barrier_divergence, [&] {
    wb::launch<early_exit_barrier_kernel>(dim3(4), dim3(128), 0, out.data());
  });
  // Blocks 0 and 1 are fine; in block 2 thread 100 is the first to exit at the barrier.
  check_names(m, "early_exit_barrier_kernel", "(2,0,0)", "(100,0,0)");
  check_site(m, line_of("the barrier the early threads skip"));
  CHECK(m.find("100 of the block's 128 threads") != std::string::npos);
}

TEST_CASE("a syncthreads reached after threads exited names a thread that exited" *
          doctest::test_suite("faults")) {
  // Reported at the first arrival, with the cause: which thread will never come. (Waiting
  // until no thread can run would report the same barrier as a deadlock, but not why.)
  std::vector<float> out(128);
  const std::string m = fault_of(wb::sim::Fault::Kind::barrier_divergence, [&] {
    wb::launch<first_threads_exit_kernel>(dim3(1), dim3(128), 0, out.data());
  });
  CAPTURE(m);
  CHECK(m.find("first_threads_exit_kernel") != std::string::npos);
  CHECK(m.find("has already exited without reaching it") != std::string::npos);
  check_site(m, line_of("the barrier the first threads never reach"));
}

TEST_CASE("syncthreads at two different lines is reported as a divergent barrier" *
          doctest::test_suite("faults")) {
  std::vector<float> out(64);
  const std::string m = fault_of(wb::sim::Fault::Kind::barrier_divergence, [&] {
    wb::launch<divergent_barrier_kernel>(dim3(1), dim3(64), 0, out.data());
  });
  check_names(m, "divergent_barrier_kernel", "(0,0,0)", "(32,0,0)");
  check_site(m, line_of("first barrier"));
  check_site(m, line_of("second barrier"));
}

TEST_CASE("a warp collective that a lane never reaches is reported as a deadlock" *
          doctest::test_suite("faults")) {
  std::vector<int> out(64);
  const std::string m = fault_of(wb::sim::Fault::Kind::warp_collective, [&] {
    wb::launch<shuffle_deadlock_kernel>(dim3(1), dim3(64), 0, out.data());
  });
  check_names(m, "shuffle_deadlock_kernel", "(0,0,0)", "(0,0,0)");
  check_site(m, line_of("the stuck shuffle"));
  CHECK(m.find("lane 5 (thread (5,0,0)) waits at __syncthreads()") != std::string::npos);
}

TEST_CASE("a shuffle that reads an exited lane is reported" * doctest::test_suite("faults")) {
  std::vector<int> out(32);
  const std::string m = fault_of(wb::sim::Fault::Kind::warp_collective, [&] {
    wb::launch<read_exited_lane_kernel>(dim3(1), dim3(32), 0, out.data());
  });
  check_names(m, "read_exited_lane_kernel", "(0,0,0)", "(4,0,0)");
  CHECK(m.find("reads lane 5, which has exited") != std::string::npos);
}

TEST_CASE("a shuffle that reads a lane outside its mask is reported" *
          doctest::test_suite("faults")) {
  std::vector<int> out(32);
  const std::string m = fault_of(wb::sim::Fault::Kind::warp_collective, [&] {
    wb::launch<source_outside_mask_kernel>(dim3(1), dim3(32), 0, out.data());
  });
  check_names(m, "source_outside_mask_kernel", "(0,0,0)", "(0,0,0)");
  CHECK(m.find("reads lane 20, which is not in the mask 0x0000ffff") != std::string::npos);
}

TEST_CASE("a collective whose mask leaves out the caller is reported" *
          doctest::test_suite("faults")) {
  std::vector<unsigned> out(32);
  const std::string m = fault_of(wb::sim::Fault::Kind::warp_collective, [&] {
    wb::launch<mask_without_caller_kernel>(dim3(1), dim3(32), 0, out.data());
  });
  check_names(m, "mask_without_caller_kernel", "(0,0,0)", "(3,0,0)");
  CHECK(m.find("does not include the calling lane 3") != std::string::npos);
}

TEST_CASE("lanes that disagree about a collective's mask are reported" *
          doctest::test_suite("faults")) {
  std::vector<int> out(32);
  const std::string m = fault_of(wb::sim::Fault::Kind::warp_collective, [&] {
    wb::launch<mismatched_masks_kernel>(dim3(1), dim3(32), 0, out.data());
  });
  check_names(m, "mismatched_masks_kernel", "(0,0,0)", "(16,0,0)");
  CHECK(m.find("mask 0xffff0000") != std::string::npos);
}

TEST_CASE("a shuffle width that is not a power of 2 is reported" *
          doctest::test_suite("faults")) {
  std::vector<int> out(32);
  const std::string m = fault_of(wb::sim::Fault::Kind::warp_collective, [&] {
    wb::launch<bad_width_kernel>(dim3(1), dim3(32), 0, out.data());
  });
  check_names(m, "bad_width_kernel", "(0,0,0)", "(0,0,0)");
  CHECK(m.find("width 12") != std::string::npos);
}

TEST_CASE("an exception escaping a kernel thread is reported" * doctest::test_suite("faults")) {
  std::vector<int> out(32);
  const std::string m = fault_of(wb::sim::Fault::Kind::kernel_exception, [&] {
    wb::launch<throwing_kernel>(dim3(1), dim3(32), 0, out.data());
  });
  check_names(m, "throwing_kernel", "(0,0,0)", "(7,0,0)");
  CHECK(m.find("thrown in the kernel") != std::string::npos);
}

TEST_CASE("an oversize block or grid fails like an invalid CUDA launch" *
          doctest::test_suite("faults")) {
  std::vector<float> out(2048);
  struct Case {
    const char* what;
    dim3 grid, block;
  };
  const Case cases[] = {
      {"1025 threads", dim3(1), dim3(1025)},
      {"32x32x2 threads", dim3(1), dim3(32, 32, 2)},
      {"blockDim.z of 65", dim3(1), dim3(1, 1, 65)},
      {"an empty block", dim3(1), dim3(0)},
      {"gridDim.y of 65536", dim3(1, 65536), dim3(1)},
      {"an empty grid", dim3(0), dim3(32)},
  };
  for (const Case& c : cases) {
    SUBCASE(c.what) {
      const std::string m = fault_of(wb::sim::Fault::Kind::launch_configuration, [&] {
        wb::launch<fill_kernel>(c.grid, c.block, 0, out.data(), 1.0f);
      });
      CAPTURE(m);
      CHECK(m.find("kernel fill_kernel") != std::string::npos);
      CHECK(m.find("invalid configuration argument") != std::string::npos);
      CHECK(out[0] == 0.0f);  // nothing ran
    }
  }
}

TEST_CASE("more dynamic shared memory than the kernel may use fails the launch" *
          doctest::test_suite("faults")) {
  std::vector<float> out(32);
  constexpr std::size_t kDefault = wb::sim::kDefaultMaxDynamicSharedBytes;  // 48 KiB
  SUBCASE("one byte over the 48 KiB default") {
    const std::string m = fault_of(wb::sim::Fault::Kind::shared_memory, [&] {
      wb::launch<fill_kernel>(dim3(1), dim3(32), kDefault + 1, out.data(), 1.0f);
    });
    CAPTURE(m);
    CHECK(m.find("kernel fill_kernel") != std::string::npos);
    CHECK(m.find("49153 bytes of dynamic shared memory") != std::string::npos);
  }
  SUBCASE("one byte over an opted-in limit") {
    wb::sim::set_max_dynamic_shared_bytes(fill_kernel, 100 * 1024);
    wb::launch<fill_kernel>(dim3(1), dim3(32), 100 * 1024, out.data(), 1.0f);  // allowed
    const std::string m = fault_of(wb::sim::Fault::Kind::shared_memory, [&] {
      wb::launch<fill_kernel>(dim3(1), dim3(32), 100 * 1024 + 1, out.data(), 1.0f);
    });
    CHECK(m.find("limit of 102400 bytes") != std::string::npos);
    wb::sim::set_max_dynamic_shared_bytes(fill_kernel, kDefault);
  }
  SUBCASE("an opt-in above the device's 227 KiB") {
    fault_of(wb::sim::Fault::Kind::invalid_argument, [&] {
      wb::sim::set_max_dynamic_shared_bytes(fill_kernel, 227 * 1024 + 1);
    });
  }
}

TEST_CASE("the simulator keeps working after a fault" * doctest::test_suite("faults")) {
  std::vector<float> out(1024 * 3, 0.0f);
  std::vector<int> ints(64);
  for (int round = 0; round < 3; ++round) {  // abandoned fibers are reused cleanly
    fault_of(wb::sim::Fault::Kind::barrier_divergence, [&] {
      wb::launch<early_exit_barrier_kernel>(dim3(4), dim3(128), 0, out.data());
    });
    fault_of(wb::sim::Fault::Kind::warp_collective, [&] {
      wb::launch<shuffle_deadlock_kernel>(dim3(1), dim3(64), 0, ints.data());
    });
    wb::launch<fill_kernel>(dim3(3), dim3(1024), 0, out.data(), static_cast<float>(round));
    for (float v : out) REQUIRE(v == static_cast<float>(round));
  }
}

namespace {
// The line of this file holding `marker` (a comment at a planted call site).
int line_of(const char* marker) {
  const std::string text = [] {
    std::FILE* f = std::fopen(__FILE__, "r");
    REQUIRE(f != nullptr);
    std::string s;
    for (int c; (c = std::fgetc(f)) != EOF;) s.push_back(static_cast<char>(c));
    std::fclose(f);
    return s;
  }();
  const std::size_t at = text.find(std::string("// ") + marker);
  REQUIRE(at != std::string::npos);
  int line = 1;
  for (std::size_t i = 0; i < at; ++i) line += text[i] == '\n';
  return line;
}
}  // namespace
