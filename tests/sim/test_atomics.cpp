// Atomics under contention: every thread of many blocks updates one word.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "common/kernel.cuh"

namespace {

constexpr unsigned kBlocks = 24;
constexpr unsigned kThreads = 256;
constexpr unsigned kAll = kBlocks * kThreads;  // 6144 updates per word

__device__ unsigned grid_thread_id() { return blockIdx.x * blockDim.x + threadIdx.x; }

struct Words {
  int add_one;
  int add_id;
  unsigned long long add_ull;
  float add_float;
  double add_double;
  int max_id;
  int min_signed;
  unsigned max_unsigned;
  unsigned inc_wrap;
  int cas_counter;
  float cas_max;  // a float maximum built from atomicCAS, as kernels do
  int sub;
  unsigned and_bits, or_bits, xor_bits;
};

__global__ void contention_kernel(Words* w) {
  const unsigned id = grid_thread_id();
  atomicAdd(&w->add_one, 1);
  atomicAdd(&w->add_id, static_cast<int>(id));
  atomicAdd(&w->add_ull, 1ull << 32);
  atomicAdd(&w->add_float, 1.0f);
  atomicAdd(&w->add_double, 0.5);
  atomicMax(&w->max_id, static_cast<int>(id));
  atomicMin(&w->min_signed, -static_cast<int>(id));
  atomicMax(&w->max_unsigned, id * 3u);
  atomicInc(&w->inc_wrap, 99u);
  // The first read of a word others update is atomic too (atomicAdd of 0): a plain read would
  // be a data race under the CUDA memory model, which race mode reports.
  int old = atomicAdd(&w->cas_counter, 0);  // a CAS loop: retry until nobody changed the word
  for (int seen; (seen = atomicCAS(&w->cas_counter, old, old + 1)) != old;) old = seen;
  const float value = static_cast<float>((id * 7919u) % kAll);
  int current = atomicAdd(reinterpret_cast<int*>(&w->cas_max), 0);
  while (value > __int_as_float(current)) {
    const int seen = atomicCAS(reinterpret_cast<int*>(&w->cas_max), current, __float_as_int(value));
    if (seen == current) break;
    current = seen;
  }
  atomicSub(&w->sub, 2);
  atomicAnd(&w->and_bits, ~(1u << (id % 32)));
  atomicOr(&w->or_bits, 1u << (id % 32));
  atomicXor(&w->xor_bits, 1u << (id % 32));
}

// previous: (kAll), what each thread's atomicExch returned; *word ends with the last one.
__global__ void exchange_kernel(int* word, int* previous) {
  const unsigned id = grid_thread_id();
  previous[id] = atomicExch(word, static_cast<int>(id));
}

}  // namespace

TEST_CASE("atomics from every thread of many blocks give exact totals" *
          doctest::test_suite("atomics")) {
  Words w{};
  w.cas_max = -1.0f;
  w.and_bits = ~0u;
  wb::launch<contention_kernel>(dim3(kBlocks), dim3(kThreads), 0, &w);
  CHECK(w.add_one == static_cast<int>(kAll));
  CHECK(w.add_id == static_cast<int>(kAll * (kAll - 1) / 2));
  CHECK(w.add_ull == (static_cast<unsigned long long>(kAll) << 32));
  // Sums of 1.0f and 0.5 stay exact: every partial sum is an integer (or half) below 2^24.
  CHECK(w.add_float == static_cast<float>(kAll));
  CHECK(w.add_double == 0.5 * kAll);
  CHECK(w.max_id == static_cast<int>(kAll - 1));
  CHECK(w.min_signed == -static_cast<int>(kAll - 1));
  CHECK(w.max_unsigned == (kAll - 1) * 3u);
  CHECK(w.inc_wrap == kAll % 100);  // atomicInc(.., 99) counts 0..99 and wraps to 0
  CHECK(w.cas_counter == static_cast<int>(kAll));
  CHECK(w.cas_max == static_cast<float>(kAll - 1));  // 7919 is prime to kAll: all values seen
  CHECK(w.sub == -2 * static_cast<int>(kAll));
  CHECK(w.and_bits == 0u);
  CHECK(w.or_bits == ~0u);
  CHECK(w.xor_bits == 0u);  // kAll / 32 = 192 flips per bit: even
}

TEST_CASE("atomicExch hands every value on exactly once" * doctest::test_suite("atomics")) {
  // The order of exchanges is unspecified on a GPU, so check only what any order gives: the
  // returned values plus the final one are the initial value and every id, each once.
  int word = -1;
  std::vector<int> previous(kAll);
  wb::launch<exchange_kernel>(dim3(kBlocks), dim3(kThreads), 0, &word, previous.data());
  previous.push_back(word);
  std::sort(previous.begin(), previous.end());
  for (unsigned i = 0; i <= kAll; ++i) REQUIRE(previous[i] == static_cast<int>(i) - 1);
}
