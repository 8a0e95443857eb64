// mbarrier in the simulator: phases and their parity, polling, and the waits that can never
// complete, reported as deadlocks naming the line. TMA copies on mbarriers: test_tma.cpp.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "common/hopper.cuh"
#include "common/kernel.cuh"
#include "tests/sim/fault_of.hpp"

namespace {

using Kind = wb::sim::Fault::Kind;
using wb::test::check_says;
using wb::test::fault_of;

constexpr int kPhases = 3;

// Every thread of the block arrives on one barrier and waits for each of kPhases phases.
// tokens: (kPhases, blockDim.x), what each arrival returned; seen: (kPhases, 2), thread 0's
// test_wait of parity 0 and 1 right after phase p completed.
__global__ void phases_kernel(std::uint64_t* tokens, int* seen) {
  __shared__ std::uint64_t bar;
  const unsigned t = threadIdx.x;
  if (t == 0) wb::ptx::mbarrier_init(&bar, blockDim.x);
  __syncthreads();
  for (int p = 0; p < kPhases; ++p) {
    tokens[p * blockDim.x + t] = wb::ptx::mbarrier_arrive(&bar);
    wb::ptx::mbarrier_wait_parity(&bar, p % 2);
    if (t == 0) {
      seen[p * 2 + 0] = wb::ptx::mbarrier_test_wait_parity(&bar, 0);
      seen[p * 2 + 1] = wb::ptx::mbarrier_test_wait_parity(&bar, 1);
    }
    __syncthreads();  // nobody arrives on phase p + 1 before thread 0 looked at phase p
  }
}

TEST_CASE("an mbarrier phase completes at its last arrival and flips its parity" *
          doctest::test_suite("mbarrier")) {
  constexpr unsigned kThreads = 64;
  std::vector<std::uint64_t> tokens(kPhases * kThreads, 99);
  std::vector<int> seen(kPhases * 2, -1);
  wb::launch<phases_kernel>(dim3(1), dim3(kThreads), 0, tokens.data(), seen.data());
  for (int p = 0; p < kPhases; ++p) {
    CAPTURE(p);
    for (unsigned t = 0; t < kThreads; ++t) CHECK(tokens[p * kThreads + t] == std::uint64_t(p));
    // After phase p the current phase is p + 1: the phase of parity p % 2 has completed, the
    // one of the other parity (the current one) has not.
    CHECK(seen[p * 2 + p % 2] == 1);
    CHECK(seen[p * 2 + 1 - p % 2] == 0);
  }
}

// Warp 0's lane 0 polls test_wait until warp 1 (the 32 arrivals the barrier expects) has
// arrived. polls: (1), how many times it saw the phase incomplete; arrived: (1), how many
// arrivals it had counted when it saw the phase complete.
__global__ void polling_kernel(int* polls, int* arrived_when_done) {
  __shared__ std::uint64_t bar;
  __shared__ int arrived;
  if (threadIdx.x == 0) {
    wb::ptx::mbarrier_init(&bar, 32);
    arrived = 0;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int n = 0;
    while (!wb::ptx::mbarrier_test_wait_parity(&bar, 0)) ++n;
    polls[0] = n;
    arrived_when_done[0] = arrived;  // the completed phase orders every arrival before this
  } else if (threadIdx.x >= 32) {
    atomicAdd(&arrived, 1);  // the arrivals are unordered among themselves
    wb::ptx::mbarrier_arrive(&bar);
  }
}

TEST_CASE("a thread polling an mbarrier lets the others run until the phase completes" *
          doctest::test_suite("mbarrier")) {
  int polls = -1, arrived = -1;
  wb::launch<polling_kernel>(dim3(1), dim3(64), 0, &polls, &arrived);
  CHECK(polls >= 1);  // it saw the phase incomplete, yet did not spin forever
  CHECK(arrived == 32);
}

// Faults: `bug` 1 waits for a second phase nobody arrives on (parity 1: a ring's wrong parity),
// 2 leaves one of two arrivals out, 3 uses a barrier nobody initialized, 4 arrives once too
// often on a phase that still waits for bytes, 5 asks for an impossible parity.
__global__ void mbarrier_fault_kernel(int bug) {
  __shared__ std::uint64_t bar;
  __shared__ std::uint64_t never_initialized;
  const unsigned t = threadIdx.x;
  if (t == 0) wb::ptx::mbarrier_init(&bar, bug == 2 ? 2 : 1);
  __syncthreads();
  if (bug == 3) {
    if (t == 0) wb::ptx::mbarrier_arrive(&never_initialized);
    return;
  }
  if (bug == 4) {
    if (t == 0) {
      wb::ptx::mbarrier_arrive_expect_tx(&bar, 64);
      wb::ptx::mbarrier_arrive(&bar);
    }
    return;
  }
  if (t == 0) wb::ptx::mbarrier_arrive(&bar);
  wb::ptx::mbarrier_wait_parity(&bar, bug == 5 ? 2 : 0);
  if (bug == 1) wb::ptx::mbarrier_wait_parity(&bar, 1);
}

TEST_CASE("an mbarrier wait that can never complete is a deadlock naming its line" *
          doctest::test_suite("mbarrier")) {
  const auto run = [](int bug) { wb::launch<mbarrier_fault_kernel>(dim3(1), dim3(64), 0, bug); };
  SUBCASE("the correct kernel passes") { run(0); }
  SUBCASE("a wait for a phase nobody arrives on") {
    const auto start = std::chrono::steady_clock::now();
    check_says(fault_of(Kind::barrier_divergence, [&] { run(1); }),
               {"mbarrier_fault_kernel", "deadlock", "mbarrier_wait_parity at tests/sim/test_mbarrier.cpp:",
                "phase 1 (parity 1)", "still expects 1 of its 1 arrivals"});
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  }
  SUBCASE("one arrival short") {
    check_says(fault_of(Kind::barrier_divergence, [&] { run(2); }),
               {"deadlock", "test_mbarrier.cpp:", "phase 0 (parity 0)",
                "still expects 1 of its 2 arrivals"});
  }
  SUBCASE("a barrier nobody initialized") {
    check_says(fault_of(Kind::invalid_argument, [&] { run(3); }),
               {"mbarrier_arrive at tests/sim/test_mbarrier.cpp:", "never initialized"});
  }
  SUBCASE("an arrival more than the phase expects") {
    check_says(fault_of(Kind::invalid_argument, [&] { run(4); }),
               {"mbarrier_arrive at", "one arrival too many"});
  }
  SUBCASE("a parity that is not 0 or 1") {
    check_says(fault_of(Kind::invalid_argument, [&] { run(5); }), {"parity 2"});
  }
}

}  // namespace
