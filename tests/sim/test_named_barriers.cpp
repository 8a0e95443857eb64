// Hopper's named barriers (bar.sync and bar.arrive on ids 1-15 over a thread count) and
// setmaxnreg, as common/hopper.cuh declares them and common/sim emulates them:
//   named_barriers             - a producer warpgroup and a consumer warpgroup, FA3's ping-pong of
//                                two consumer warpgroups, groups of warps smaller than the block,
//                                setmaxnreg in a warp-specialized block; and each misuse planted
//                                and reported naming the kernel, the thread and this file's line.
//                                The race twin runs this suite too: no report may appear.
//   race_planted_named_barrier - (race twin only) a consumer that arrives where it must wait:
//                                ThreadSanitizer must report its read (tests/sim/CMakeLists.txt).
// Threads run in the simulator's sweep order (linear index) until they block, so a kernel whose
// consumer has the lower thread indices reads before its producer writes unless the barrier
// holds it back: the tests place the waiting side first wherever that is what they prove.
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "common/hopper.cuh"
#include "tests/sim/fault_of.hpp"

namespace {

constexpr unsigned kWarp = 32;
constexpr unsigned kGroup = 128;  // a warpgroup: warps 4k to 4k + 3
constexpr unsigned kTwoGroups = 2 * kGroup;

// The producer/consumer exchange's barrier ids (FA3 names its own alike).
constexpr unsigned kFull = 1;   // "the buffer holds this round": the consumer waits on it
constexpr unsigned kEmpty = 2;  // "the consumer has read it": the producer waits on it
constexpr int kRound = 1000;    // round r's value for slot s is r * kRound + s

// out: (gridDim.x, rounds, kGroup), what consumer thread t read in round r: the value producer
// thread kGroup - 1 - t (another warp's) stored for it, r * kRound + t. Warpgroup `producer`
// produces, the other consumes, through a buffer of kGroup ints in dynamic shared memory (0xff
// bytes, -1, until written).
__global__ void producer_consumer_kernel(int rounds, unsigned producer, int* out) {
  int* buffer = wb::dynamic_shared<int>();
  const unsigned group = threadIdx.x / kGroup, t = threadIdx.x % kGroup;
  for (int r = 0; r < rounds; ++r) {
    if (group == producer) {
      if (r > 0) wb::ptx::named_barrier_sync(kEmpty, kTwoGroups);  // round r - 1 was read
      const unsigned slot = kGroup - 1 - t;
      buffer[slot] = r * kRound + static_cast<int>(slot);
      wb::ptx::named_barrier_arrive(kFull, kTwoGroups);
    } else {
      wb::ptx::named_barrier_sync(kFull, kTwoGroups);
      out[(blockIdx.x * rounds + r) * kGroup + t] = buffer[t];
      if (r + 1 < rounds) wb::ptx::named_barrier_arrive(kEmpty, kTwoGroups);
    }
  }
}

// FA3's producer finishes before its consumers: warps 0-1 store, bar.arrive and exit, then
// warps 2-3 wait on the same barrier and read. Arrivals of threads that have exited since still
// count, and their warps arrived whole.
// out: (gridDim.x, kHalfBlock), what thread kHalfBlock + t read: slot t, which holds t.
constexpr unsigned kHalfBlock = 2 * kWarp;
__global__ void arrive_then_exit_kernel(int* out) {
  int* buffer = wb::dynamic_shared<int>();  // (kHalfBlock)
  if (threadIdx.x < kHalfBlock) {
    const unsigned slot = kHalfBlock - 1 - threadIdx.x;
    buffer[slot] = static_cast<int>(slot);
    wb::ptx::named_barrier_arrive(6, 2 * kHalfBlock);
    return;
  }
  const unsigned t = threadIdx.x - kHalfBlock;
  wb::ptx::named_barrier_sync(6, 2 * kHalfBlock);
  out[blockIdx.x * kHalfBlock + t] = buffer[t];
}

// FA3's ping-pong of two consumer warpgroups (its warp_scheduler_barrier_sync and _arrive):
// warpgroup g waits on barrier 1 + g for its turn, works, and arrives on the other's barrier.
// Warpgroup 0 arrives once on its own barrier first (FA3's mma_init), so it goes first. Warpgroup
// 1's last arrival leaves barrier 1 with 128 of its 256 threads when the block ends, as in FA3.
// log: (gridDim.x, 2 * rounds), the warpgroup that held each turn.
// seen: (gridDim.x, 2, rounds, kGroup), the turn each thread of warpgroup g read in its round r.
__global__ void ping_pong_kernel(int rounds, int* log, int* seen) {
  __shared__ int turn;
  const unsigned group = threadIdx.x / kGroup, t = threadIdx.x % kGroup;
  const unsigned mine = 1 + group, other = 2 - group;
  const unsigned whole_group = 3 + group;  // the warpgroup's own barrier, over its 128 threads
  if (threadIdx.x == 0) turn = 0;
  __syncthreads();
  if (group == 0) wb::ptx::named_barrier_arrive(mine, kTwoGroups);  // warpgroup 0 goes first
  for (int r = 0; r < rounds; ++r) {
    wb::ptx::named_barrier_sync(mine, kTwoGroups);  // this warpgroup's turn
    const int now = turn;
    seen[((blockIdx.x * 2 + group) * rounds + r) * kGroup + t] = now;
    wb::ptx::named_barrier_sync(whole_group, kGroup);  // all of it read `turn` before it moves
    if (t == 0) {
      log[blockIdx.x * 2 * rounds + now] = static_cast<int>(group);
      turn = now + 1;
    }
    wb::ptx::named_barrier_arrive(other, kTwoGroups);  // the other warpgroup's turn
  }
}

// Two groups of warps that synchronize apart, each on its own id over its own count and a
// different number of times: warps 0-2 (96 threads) on barrier 5, warps 3-4 (64) on barrier 9.
// Each iteration k every thread writes k * kRound + threadIdx.x to its slot, waits, adds its
// mirror's slot in its group, and waits again before the next write.
// out: (gridDim.x, kFirst + kSecond), each thread's sum.
constexpr unsigned kFirst = 96, kSecond = 64;
constexpr int kFirstIterations = 3, kSecondIterations = 5;
__global__ void two_groups_kernel(int* out) {
  int* slots = wb::dynamic_shared<int>();  // (kFirst + kSecond)
  const bool first = threadIdx.x < kFirst;
  const unsigned base = first ? 0 : kFirst, size = first ? kFirst : kSecond;
  const unsigned id = first ? 5 : 9;
  const unsigned i = threadIdx.x - base;
  int sum = 0;
  for (int k = 0; k < (first ? kFirstIterations : kSecondIterations); ++k) {
    slots[threadIdx.x] = k * kRound + static_cast<int>(threadIdx.x);
    wb::ptx::named_barrier_sync(id, size);
    sum += slots[base + size - 1 - i];
    wb::ptx::named_barrier_sync(id, size);
  }
  __syncthreads();  // barrier 0, over the whole block, still works beside them
  out[blockIdx.x * (kFirst + kSecond) + threadIdx.x] = sum;
}

// FA3's register split: warpgroup 0 (the producer) gives registers back, the others (the
// consumers) take more; then all go on to a block barrier and their stores.
// out: (blockDim.x), threadIdx.x.
template <int Producer, int Consumer>
__global__ void register_split_kernel(int* out) {
  if (threadIdx.x / kGroup == 0) {
    wb::ptx::setmaxnreg_dec<Producer>();
  } else {
    wb::ptx::setmaxnreg_inc<Consumer>();
  }
  __syncthreads();
  out[threadIdx.x] = static_cast<int>(threadIdx.x);
}

// ---- Planted misuse: each kernel breaks one rule (out: (blockDim.x), written after it) ----------

// Planted: a barrier id outside 1-15 (barrier 0 is __syncthreads'; there are 16).
__global__ void bad_id_kernel(unsigned id, bool wait, int* out) {
  if (wait) {
    wb::ptx::named_barrier_sync(id, 2 * kWarp);  // bar.sync with the bad id
  } else {
    wb::ptx::named_barrier_arrive(id, 2 * kWarp);  // bar.arrive with the bad id
  }
  out[threadIdx.x] = 1;
}

// Planted: a thread count that is no multiple of 32, or more threads than the block has.
__global__ void bad_count_kernel(unsigned threads, int* out) {
  wb::ptx::named_barrier_sync(1, threads);  // the bad thread count
  out[threadIdx.x] = 1;
}

// Planted: warp 0 arrives for 64 threads, warps 1-2 wait for 96, at the same barrier.
__global__ void mismatched_counts_kernel(int* out) {
  if (threadIdx.x < kWarp) {
    wb::ptx::named_barrier_arrive(3, 2 * kWarp);  // arrives counting 64
  } else {
    wb::ptx::named_barrier_sync(3, 3 * kWarp);  // waits counting 96
  }
  out[threadIdx.x] = 1;
}

// Planted: barrier 4 counts 128 threads, but only warps 0-1 come; warps 2-3 go on and exit.
__global__ void short_barrier_kernel(int* out) {
  if (threadIdx.x < 2 * kWarp) wb::ptx::named_barrier_sync(4, 4 * kWarp);  // 64 short
  out[threadIdx.x] = 1;
}

// Planted: lanes 0-15 of each of the two warps reach barrier 5 (32 threads: its count), lanes
// 16-31 go on to __syncthreads.
__global__ void half_warp_kernel(int* out) {
  if (threadIdx.x % kWarp < kWarp / 2) wb::ptx::named_barrier_sync(5, kWarp);  // half warps
  __syncthreads();
  out[threadIdx.x] = 1;
}

// Planted: a setmaxnreg count that is no multiple of 8 in 24-256 (nvcc's static_assert rejects
// it; the simulator reports it when it runs).
template <int Registers>
__global__ void bad_register_count_kernel(int* out) {
  wb::ptx::setmaxnreg_inc<Registers>();  // the bad register count
  out[threadIdx.x] = 1;
}

// Planted: warp 2 of the warpgroup skips setmaxnreg: it exits (`wait` false), or waits at the
// block barrier (true) that the other three warps reach only after setmaxnreg.
__global__ void warp_skips_setmaxnreg_kernel(bool wait, int* out) {
  if (threadIdx.x / kWarp != 2) wb::ptx::setmaxnreg_dec<40>();  // warp 2 skips this
  if (wait) {
    __syncthreads();  // where warp 2 waits
  }
  out[threadIdx.x] = 1;
}

// Planted: warp 2 asks for 48 registers at the same setmaxnreg, the other warps for 40.
template <int Registers>
__device__ void give_back_registers() {
  wb::ptx::setmaxnreg_dec<Registers>();  // one site, two counts
}
__global__ void mixed_register_counts_kernel(int* out) {
  if (threadIdx.x / kWarp == 2) {
    give_back_registers<48>();
  } else {
    give_back_registers<40>();
  }
  out[threadIdx.x] = 1;
}

// Planted: setmaxnreg in a block whose last warpgroup is not whole (96 or 192 threads).
__global__ void partial_warpgroup_kernel(int* out) {
  wb::ptx::setmaxnreg_dec<40>();  // in a partial warpgroup
  out[threadIdx.x] = 1;
}

using Kind = wb::sim::Fault::Kind;
using wb::test::check_says;
using wb::test::fault_of;

/// The call site a message cites: this file at the line holding the comment `marker` (put
/// there at a planted call).
std::string site(const char* marker) {
  std::ifstream source(__FILE__);
  REQUIRE(source.is_open());
  const std::string comment = std::string("// ") + marker;
  int line = 1;
  for (std::string text; std::getline(source, text); ++line) {
    if (text.size() >= comment.size() &&
        text.compare(text.size() - comment.size(), comment.size(), comment) == 0) {
      return "test_named_barriers.cpp:" + std::to_string(line);
    }
  }
  FAIL("no line of this file ends with " << comment);
  return "";
}

/// The message of the Fault of kind `expected` that `Kernel` raises on one block of `threads`
/// threads, given `args` and then the out buffer.
template <auto Kernel, typename... Args>
std::string planted(Kind expected, unsigned threads, Args... args) {
  std::vector<int> out(threads, 0);
  const std::string m = fault_of(
      expected, [&] { wb::launch<Kernel>(dim3(1), dim3(threads), 0, args..., out.data()); });
  CHECK(m.find('\n') == std::string::npos);  // one line
  return m;
}

std::vector<int> expected_ping_pong_log(int rounds) {
  std::vector<int> log(2 * rounds);
  for (int k = 0; k < 2 * rounds; ++k) log[k] = k % 2;
  return log;
}

}  // namespace

TEST_CASE("a consumer warpgroup sees a producer warpgroup's stores after bar.arrive and bar.sync" *
          doctest::test_suite("named_barriers")) {
  // The consumer first in the sweep (producer 1): only bar.sync keeps it from reading -1. The
  // producer first (producer 0): only the kEmpty wait keeps it from overwriting a round the
  // consumer has not read. Several blocks: each starts with fresh barriers.
  constexpr int kBlocks = 2;
  for (unsigned producer : {1u, 0u}) {
    for (int rounds : {1, 2, 7}) {
      CAPTURE(producer);
      CAPTURE(rounds);
      std::vector<int> out(kBlocks * rounds * kGroup, -2);
      wb::launch<producer_consumer_kernel>(dim3(kBlocks), dim3(kTwoGroups), kGroup * sizeof(int),
                                           rounds, producer, out.data());
      for (int b = 0; b < kBlocks; ++b) {
        for (int r = 0; r < rounds; ++r) {
          for (unsigned t = 0; t < kGroup; ++t) {
            CAPTURE(b);
            CAPTURE(r);
            CAPTURE(t);
            REQUIRE(out[(b * rounds + r) * kGroup + t] == r * kRound + static_cast<int>(t));
          }
        }
      }
    }
  }
}

TEST_CASE("warps that arrive and exit before the named barrier completes have arrived" *
          doctest::test_suite("named_barriers")) {
  constexpr int kBlocks = 2;
  std::vector<int> out(kBlocks * kHalfBlock, -2);
  wb::launch<arrive_then_exit_kernel>(dim3(kBlocks), dim3(2 * kHalfBlock), kHalfBlock * sizeof(int),
                                      out.data());
  for (unsigned i = 0; i < out.size(); ++i) {
    CAPTURE(i);
    REQUIRE(out[i] == static_cast<int>(i % kHalfBlock));
  }
}

TEST_CASE("two consumer warpgroups take turns on two named barriers as in FA3's ping-pong" *
          doctest::test_suite("named_barriers")) {
  constexpr int kBlocks = 3;  // the dangling arrival of one block must not reach the next
  for (int rounds : {1, 4, 9}) {
    CAPTURE(rounds);
    std::vector<int> log(kBlocks * 2 * rounds, -1), seen(kBlocks * 2 * rounds * kGroup, -1);
    wb::launch<ping_pong_kernel>(dim3(kBlocks), dim3(kTwoGroups), 0, rounds, log.data(),
                                 seen.data());
    const std::vector<int> alternating = expected_ping_pong_log(rounds);
    for (int b = 0; b < kBlocks; ++b) {
      CAPTURE(b);
      // Turn k belongs to warpgroup k % 2: 0, 1, 0, 1, ...
      CHECK(std::vector<int>(log.begin() + b * 2 * rounds, log.begin() + (b + 1) * 2 * rounds) ==
            alternating);
      // Every thread of warpgroup g ran its round r at turn 2r + g, none before or after.
      for (int g = 0; g < 2; ++g) {
        for (int r = 0; r < rounds; ++r) {
          for (unsigned t = 0; t < kGroup; ++t) {
            CAPTURE(g);
            CAPTURE(r);
            CAPTURE(t);
            REQUIRE(seen[((b * 2 + g) * rounds + r) * kGroup + t] == 2 * r + g);
          }
        }
      }
    }
  }
}

TEST_CASE("groups of warps smaller than the block synchronize apart on their own barriers" *
          doctest::test_suite("named_barriers")) {
  constexpr int kBlocks = 2;
  constexpr unsigned kThreads = kFirst + kSecond;
  std::vector<int> out(kBlocks * kThreads, -1);
  wb::launch<two_groups_kernel>(dim3(kBlocks), dim3(kThreads), kThreads * sizeof(int), out.data());
  for (int b = 0; b < kBlocks; ++b) {
    for (unsigned x = 0; x < kThreads; ++x) {
      // The mirror of thread x in its group wrote k * kRound + mirror in each iteration k.
      const bool first = x < kFirst;
      const unsigned base = first ? 0 : kFirst, size = first ? kFirst : kSecond;
      const int mirror = static_cast<int>(base + size - 1 - (x - base));
      int expected = 0;
      for (int k = 0; k < (first ? kFirstIterations : kSecondIterations); ++k) {
        expected += k * kRound + mirror;
      }
      CAPTURE(b);
      CAPTURE(x);
      REQUIRE(out[b * kThreads + x] == expected);
    }
  }
}

TEST_CASE("a named barrier id outside 1 to 15 is reported" *
          doctest::test_suite("named_barriers")) {
  SUBCASE("bar.sync 0: __syncthreads' own barrier") {
    check_says(planted<bad_id_kernel>(Kind::invalid_argument, 64, 0u, true),
               {"kernel bad_id_kernel, block (0,0,0), thread (0,0,0)", "bar.sync 0 at",
                site("bar.sync with the bad id"), "a named barrier is 1 to 15"});
  }
  SUBCASE("bar.arrive 16: past the sixteen barriers") {
    check_says(planted<bad_id_kernel>(Kind::invalid_argument, 64, 16u, false),
               {"kernel bad_id_kernel, block (0,0,0), thread (0,0,0)", "bar.arrive 16 at",
                site("bar.arrive with the bad id"), "a named barrier is 1 to 15"});
  }
}

TEST_CASE("a named barrier count that is no multiple of 32 or exceeds the block is reported" *
          doctest::test_suite("named_barriers")) {
  for (unsigned threads : {48u, 0u, 96u}) {  // 96: more than the block's 64 threads
    CAPTURE(threads);
    check_says(planted<bad_count_kernel>(Kind::invalid_argument, 64, threads),
               {"kernel bad_count_kernel, block (0,0,0), thread (0,0,0)",
                "bar.sync 1, " + std::to_string(threads) + " at", site("the bad thread count"),
                "a multiple of 32 from 32 to the block's 2 warps"});
  }
}

TEST_CASE("arrivals at one named barrier with different thread counts are reported" *
          doctest::test_suite("named_barriers")) {
  // Warp 0 arrives first (sweep order); thread 32 is the first to name another count.
  check_says(planted<mismatched_counts_kernel>(Kind::barrier_divergence, 96),
             {"kernel mismatched_counts_kernel, block (0,0,0), thread (32,0,0)",
              "bar.sync 3, 96 at", site("waits counting 96"),
              "the 64 threads thread (0,0,0) waits for there at", site("arrives counting 64"),
              "every arrival at a named barrier must name the same thread count"});
}

TEST_CASE("a named barrier that too few threads reach is reported as a deadlock within seconds" *
          doctest::test_suite("named_barriers")) {
  const auto start = std::chrono::steady_clock::now();
  const std::string m = planted<short_barrier_kernel>(Kind::barrier_divergence, 128);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  check_says(m, {"kernel short_barrier_kernel, block (0,0,0), thread (0,0,0)", "bar.sync 4, 128 at",
                 site("64 short"), "can never complete: 64 of its 128 threads arrived"});
  // Reported as soon as no thread can run (one sweep), not by a timeout: 5 s is far above it
  // even under ThreadSanitizer on a loaded machine.
  CHECK(seconds < 5.0);
}

TEST_CASE("a named barrier reached by half a warp is reported as an aligned violation" *
          doctest::test_suite("named_barriers")) {
  // Thread 47 completes the count of 32 with lanes 0-15 of warps 0 and 1.
  check_says(planted<half_warp_kernel>(Kind::barrier_divergence, 64),
             {"kernel half_warp_kernel, block (0,0,0), thread (47,0,0)", "bar.sync 5, 32 at",
              site("half warps"), "completed with 16 of warp 0's lanes, without lane 16",
              "bar.sync and bar.arrive are .aligned"});
}

TEST_CASE("warpgroups that give back and take registers with setmaxnreg go on" *
          doctest::test_suite("named_barriers")) {
  const auto run = [](auto launch, unsigned threads) {
    std::vector<int> out(threads, -1);
    launch(out.data());
    for (unsigned t = 0; t < threads; ++t) REQUIRE(out[t] == static_cast<int>(t));
  };
  SUBCASE("a producer and a consumer warpgroup with 40 and 232 registers") {
    run(
        [](int* out) {
          wb::launch<register_split_kernel<40, 232>>(dim3(2), dim3(kTwoGroups), 0, out);
        },
        kTwoGroups);
  }
  SUBCASE("a producer and two consumer warpgroups with 24 and 240 registers") {
    run(
        [](int* out) {
          wb::launch<register_split_kernel<24, 240>>(dim3(2), dim3(3 * kGroup), 0, out);
        },
        3 * kGroup);
  }
}

TEST_CASE("a setmaxnreg count that is no multiple of 8 in 24 to 256 is reported" *
          doctest::test_suite("named_barriers")) {
  const std::string limit = "setmaxnreg takes a multiple of 8 from 24 to 256";
  const std::string at = site("the bad register count");
  SUBCASE("100: no multiple of 8") {
    check_says(planted<bad_register_count_kernel<100>>(Kind::invalid_argument, kGroup),
               {"kernel bad_register_count_kernel<100>, block (0,0,0), thread (0,0,0)",
                "setmaxnreg.inc at", at, "100 registers", limit});
  }
  SUBCASE("16: below 24") {
    check_says(planted<bad_register_count_kernel<16>>(Kind::invalid_argument, kGroup),
               {"kernel bad_register_count_kernel<16>, block (0,0,0), thread (0,0,0)",
                "setmaxnreg.inc at", at, "16 registers", limit});
  }
  SUBCASE("264: above 256") {
    check_says(planted<bad_register_count_kernel<264>>(Kind::invalid_argument, kGroup),
               {"kernel bad_register_count_kernel<264>, block (0,0,0), thread (0,0,0)",
                "setmaxnreg.inc at", at, "264 registers", limit});
  }
}

TEST_CASE("a setmaxnreg that one warp of the warpgroup skips is reported" *
          doctest::test_suite("named_barriers")) {
  const std::string at = site("warp 2 skips this");
  SUBCASE("the warp exits") {
    // Warps 0-1 wait at setmaxnreg when thread 64, warp 2's first, exits.
    check_says(planted<warp_skips_setmaxnreg_kernel>(Kind::warp_collective, kGroup, false),
               {"kernel warp_skips_setmaxnreg_kernel, block (0,0,0), thread (64,0,0)",
                "exits without reaching setmaxnreg.dec at", at, "64 threads of its warpgroup wait",
                "all 128 threads of the warpgroup must execute them"});
  }
  SUBCASE("the warp waits at a barrier the others reach only after setmaxnreg") {
    check_says(planted<warp_skips_setmaxnreg_kernel>(Kind::warp_collective, kGroup, true),
               {"kernel warp_skips_setmaxnreg_kernel, block (0,0,0), thread (0,0,0)",
                "setmaxnreg.dec at", at + " can never complete",
                "warp 2 of the warpgroup (thread (64,0,0)) waits at __syncthreads() at",
                site("where warp 2 waits"), "all 4 warps must execute them"});
  }
}

TEST_CASE("a setmaxnreg whose warps ask for different counts is reported" *
          doctest::test_suite("named_barriers")) {
  // Thread 127 arrives last and compares: thread 64 (warp 2) asked for 48.
  check_says(
      planted<mixed_register_counts_kernel>(Kind::warp_collective, kGroup),
      {"kernel mixed_register_counts_kernel, block (0,0,0), thread (127,0,0)", "setmaxnreg.dec at",
       site("one site, two counts"), "thread 64 asks for 48 registers, thread 127 for 40",
       "the whole warpgroup must ask for the same count"});
}

TEST_CASE("a setmaxnreg in a block that is no whole number of warpgroups is reported" *
          doctest::test_suite("named_barriers")) {
  // 96 threads: thread 0 already has no whole warpgroup. 192: warpgroup 0 passes, and thread
  // 128, the first of the partial second one, is reported.
  for (unsigned threads : {96u, 192u}) {
    CAPTURE(threads);
    const std::string first = threads == 96 ? "thread (0,0,0)" : "thread (128,0,0)";
    check_says(planted<partial_warpgroup_kernel>(Kind::warp_collective, threads),
               {"kernel partial_warpgroup_kernel, block (0,0,0), " + first, "setmaxnreg.dec at",
                site("in a partial warpgroup"), "needs a whole warpgroup of 128 threads",
                "the block has " + std::to_string(threads) + " threads"});
  }
}

// The planted race exists only in the race twin: without ThreadSanitizer the kernel computes
// the right values (the simulator's sweep happens to run the producer first), which is exactly
// the bug race mode is for.
#if defined(WB_SIM_RACE_MODE)
namespace {

// Planted: the consumer arrives on kFull (bar.arrive) where it must wait (bar.sync). The barrier
// completes all the same, but an arrival only publishes what its thread wrote; it does not wait,
// and it sees nothing the producer wrote: the read races with the producer's store.
// out: (kGroup).
__global__ void consumer_arrives_instead_of_waiting_kernel(int* out) {
  int* buffer = wb::dynamic_shared<int>();
  const unsigned group = threadIdx.x / kGroup, t = threadIdx.x % kGroup;
  if (group == 0) {
    const unsigned slot = kGroup - 1 - t;
    buffer[slot] = static_cast<int>(slot);  // planted race: write
    wb::ptx::named_barrier_arrive(kFull, kTwoGroups);
  } else {
    wb::ptx::named_barrier_arrive(kFull, kTwoGroups);  // planted: should be named_barrier_sync
    out[t] = buffer[t];                                // planted race: read
  }
}

}  // namespace

TEST_CASE("a consumer that arrives instead of waiting on the named barrier races" *
          doctest::test_suite("race_planted_named_barrier")) {
  std::vector<int> out(kGroup);
  wb::launch<consumer_arrives_instead_of_waiting_kernel>(dim3(1), dim3(kTwoGroups),
                                                         kGroup * sizeof(int), out.data());
}
#endif  // WB_SIM_RACE_MODE
