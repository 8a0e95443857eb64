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

using Kind = wb::sim::Fault::Kind;
using wb::test::check_says;
using wb::test::fault_of;

int line_of(const char* marker);  // defined at the end of the file

/// The call site a message cites: this file at the line of `marker` (a comment at a barrier or
/// collective).
std::string site(const char* marker) {
  return "test_faults.cpp:" + std::to_string(line_of(marker));
}

/// The message of the Fault of kind `Expected` that `Kernel` raises, launched on `Blocks`
/// blocks of `Threads` threads with a buffer of `Threads` Outs to write (the planted kernels
/// index it by threadIdx.x).
template <Kind Expected, auto Kernel, typename Out, unsigned Blocks, unsigned Threads>
std::string planted_fault() {
  std::vector<Out> out(Threads);
  return fault_of(Expected,
                  [&] { wb::launch<Kernel>(dim3(Blocks), dim3(Threads), 0, out.data()); });
}

/// A planted bug's Fault, and what its message says: the kernel, block and thread (first), the
/// call sites, the cause.
struct Planted {
  std::string (*fault)();
  std::vector<std::string> says;
};

}  // namespace

TEST_CASE("each planted bug is reported in one line naming the kernel, block, thread and cause" *
          doctest::test_suite("faults")) {
  const Planted bugs[] = {
      // A syncthreads skipped by threads that exit early: blocks 0 and 1 are fine; in block 2
      // thread 100 is the first to exit at the barrier.
      {planted_fault<Kind::barrier_divergence, early_exit_barrier_kernel, float, 4, 128>,
       {"kernel early_exit_barrier_kernel, block (2,0,0), thread (100,0,0)",
        site("the barrier the early threads skip"), "100 of the block's 128 threads"}},
      // A syncthreads reached after threads exited, reported at the first arrival with the
      // cause: which thread will never come. (Waiting until no thread can run would report the
      // same barrier as a deadlock, but not why.)
      {planted_fault<Kind::barrier_divergence, first_threads_exit_kernel, float, 1, 128>,
       {"kernel first_threads_exit_kernel, block (0,0,0), thread (28,0,0)",
        site("the barrier the first threads never reach"),
        "thread (0,0,0) has already exited without reaching it"}},
      // Syncthreads at two different lines: a divergent barrier.
      {planted_fault<Kind::barrier_divergence, divergent_barrier_kernel, float, 1, 64>,
       {"kernel divergent_barrier_kernel, block (0,0,0), thread (32,0,0)", site("first barrier"),
        site("second barrier")}},
      // A warp collective that a lane never reaches: a deadlock.
      {planted_fault<Kind::warp_collective, shuffle_deadlock_kernel, int, 1, 64>,
       {"kernel shuffle_deadlock_kernel, block (0,0,0), thread (0,0,0)", site("the stuck shuffle"),
        "lane 5 (thread (5,0,0)) waits at __syncthreads()"}},
      // Collectives misused: a shuffle that reads an exited lane, or a lane outside its mask; a
      // mask that leaves out the caller; lanes that disagree about the mask; a shuffle width
      // that is not a power of 2.
      {planted_fault<Kind::warp_collective, read_exited_lane_kernel, int, 1, 32>,
       {"kernel read_exited_lane_kernel, block (0,0,0), thread (4,0,0)",
        "reads lane 5, which has exited"}},
      {planted_fault<Kind::warp_collective, source_outside_mask_kernel, int, 1, 32>,
       {"kernel source_outside_mask_kernel, block (0,0,0), thread (0,0,0)",
        "reads lane 20, which is not in the mask 0x0000ffff"}},
      {planted_fault<Kind::warp_collective, mask_without_caller_kernel, unsigned, 1, 32>,
       {"kernel mask_without_caller_kernel, block (0,0,0), thread (3,0,0)",
        "does not include the calling lane 3"}},
      {planted_fault<Kind::warp_collective, mismatched_masks_kernel, int, 1, 32>,
       {"kernel mismatched_masks_kernel, block (0,0,0), thread (16,0,0)", "mask 0xffff0000"}},
      {planted_fault<Kind::warp_collective, bad_width_kernel, int, 1, 32>,
       {"kernel bad_width_kernel, block (0,0,0), thread (0,0,0)", "width 12"}},
      // An exception escaping a kernel thread.
      {planted_fault<Kind::kernel_exception, throwing_kernel, int, 1, 32>,
       {"kernel throwing_kernel, block (0,0,0), thread (7,0,0)", "thrown in the kernel"}},
  };
  for (const Planted& bug : bugs) {
    SUBCASE(bug.says[0].c_str()) {  // named by its kernel, block and thread
      const std::string m = bug.fault();
      CAPTURE(m);
      CHECK(m.find('\n') == std::string::npos);
      check_says(m, bug.says);
    }
  }
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
  for (int round = 0; round < 3; ++round) {  // abandoned fibers are reused cleanly
    planted_fault<Kind::barrier_divergence, early_exit_barrier_kernel, float, 4, 128>();
    planted_fault<Kind::warp_collective, shuffle_deadlock_kernel, int, 1, 64>();
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
