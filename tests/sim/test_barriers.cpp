// __syncthreads and its reducing forms, static and dynamic shared memory.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "common/kernel.cuh"

namespace {

constexpr int kThreads = 128;

// out: (kThreads). Each iteration every thread writes its slot, the block synchronizes, every
// thread reads its right neighbour's slot, and synchronizes again before the next write.
__global__ void ring_kernel(int iterations, long long* out) {
  __shared__ int ring[kThreads];
  const int t = threadIdx.x;
  long long acc = 0;
  for (int i = 0; i < iterations; ++i) {
    ring[t] = i * kThreads + t;
    __syncthreads();
    acc += ring[(t + 1) % kThreads];
    __syncthreads();
  }
  out[t] = acc;
}

// counts: (3), __syncthreads_count / _and / _or of `threadIdx.x % modulus == 0`.
__global__ void reduce_predicate_kernel(int modulus, int* counts) {
  const int p = threadIdx.x % modulus == 0;
  const int count = __syncthreads_count(p);
  const int all = __syncthreads_and(p);
  const int any = __syncthreads_or(p);
  if (threadIdx.x == 0) {
    counts[0] = count;
    counts[1] = all;
    counts[2] = any;
  }
}

// x, y: (blocks, n). Each block reverses its row through dynamic shared memory of n floats.
__global__ void reverse_kernel(const float* x, float* y, int n) {
  float* row = wb::dynamic_shared<float>();
  const float* in = x + blockIdx.x * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) row[i] = in[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[blockIdx.x * n + i] = row[n - 1 - i];
}

// bytes: (n), the dynamic shared memory as a block finds it before writing.
__global__ void peek_shared_kernel(unsigned char* bytes, int n) {
  const unsigned char* shared = wb::dynamic_shared<unsigned char>();
  for (int i = threadIdx.x; i < n; i += blockDim.x) bytes[i] = shared[i];
}

// bytes: (gridDim.x, n), the dynamic shared memory as each block finds it; then the block
// overwrites all of it, as a kernel filling its tile would, for the blocks after it to find.
__global__ void peek_then_fill_shared_kernel(unsigned char* bytes, int n) {
  unsigned char* shared = wb::dynamic_shared<unsigned char>();
  for (int i = threadIdx.x; i < n; i += blockDim.x) bytes[blockIdx.x * n + i] = shared[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) shared[i] = static_cast<unsigned char>(i);
}

// ok: (1), 1 when the dynamic shared memory pointer is 16-byte aligned.
__global__ void alignment_kernel(int* ok) {
  const auto address = reinterpret_cast<std::uintptr_t>(wb::dynamic_shared<float4>());
  if (threadIdx.x == 0) *ok = address % 16 == 0;
}

}  // namespace

TEST_CASE("syncthreads inside a loop orders every iteration" * doctest::test_suite("barriers")) {
  for (int iterations : {1, 2, 50}) {
    CAPTURE(iterations);
    std::vector<long long> out(kThreads, -1);
    wb::launch<ring_kernel>(dim3(3), dim3(kThreads), 0, iterations, out.data());
    for (int t = 0; t < kThreads; ++t) {
      long long expected = 0;  // the neighbour's value of every iteration, summed
      for (int i = 0; i < iterations; ++i) expected += i * kThreads + (t + 1) % kThreads;
      REQUIRE(out[t] == expected);
    }
  }
}

TEST_CASE("syncthreads_count and syncthreads_and and syncthreads_or reduce a predicate" *
          doctest::test_suite("barriers")) {
  // With 100 threads: modulus 1 holds everywhere, 3 in 34 threads, 101 only in thread 0.
  struct Case {
    int modulus, count, all, any;
  };
  for (const Case& c : {Case{1, 100, 1, 1}, Case{3, 34, 0, 1}, Case{101, 1, 0, 1}}) {
    CAPTURE(c.modulus);
    int counts[3] = {-1, -1, -1};
    wb::launch<reduce_predicate_kernel>(dim3(2), dim3(100), 0, c.modulus, counts);
    CHECK(counts[0] == c.count);
    CHECK(counts[1] == c.all);
    CHECK(counts[2] == c.any);
  }
}

TEST_CASE("blocks exchange data through dynamic shared memory" * doctest::test_suite("barriers")) {
  for (int n : {1, 31, 1000, 12288}) {  // 12288 floats: exactly the 48 KiB default limit
    CAPTURE(n);
    constexpr int kBlocks = 3;
    std::vector<float> x(kBlocks * n), y(kBlocks * n, -1.0f);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
    wb::launch<reverse_kernel>(dim3(kBlocks), dim3(64), n * sizeof(float), x.data(), y.data(),
                               n);
    for (int b = 0; b < kBlocks; ++b) {
      for (int i = 0; i < n; ++i) REQUIRE(y[b * n + i] == x[b * n + n - 1 - i]);
    }
  }
}

TEST_CASE("dynamic shared memory above 48 KiB works after the kernel opts in" *
          doctest::test_suite("barriers")) {
  constexpr int n = 227 * 1024 / 4;  // the sm_90 opt-in maximum, in floats
  wb::sim::set_max_dynamic_shared_bytes(reverse_kernel, n * sizeof(float));
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i);
  wb::launch<reverse_kernel>(dim3(1), dim3(256), n * sizeof(float), x.data(), y.data(), n);
  for (int i = 0; i < n; ++i) REQUIRE(y[i] == x[n - 1 - i]);
  wb::sim::set_max_dynamic_shared_bytes(reverse_kernel, wb::sim::kDefaultMaxDynamicSharedBytes);
}

TEST_CASE("dynamic shared memory is 16-byte aligned and starts as 0xff bytes" *
          doctest::test_suite("barriers")) {
  // Real shared memory is uninitialized; the simulator fills it with 0xff (NaN as float) so a
  // kernel that reads before writing sees garbage, not a convenient zero.
  constexpr int n = 100;
  std::vector<unsigned char> bytes(n, 0);
  wb::launch<peek_shared_kernel>(dim3(2), dim3(32), n, bytes.data(), n);
  for (int i = 0; i < n; ++i) REQUIRE(bytes[i] == 0xff);
  int ok = 0;
  wb::launch<alignment_kernel>(dim3(1), dim3(1), 20, &ok);
  CHECK(ok == 1);
}

TEST_CASE("every block finds its dynamic shared memory as 0xff bytes, not the last block's" *
          doctest::test_suite("barriers")) {
  // On a GPU a block's shared memory holds what an earlier block on the SM left there; the
  // simulator refills it with 0xff before each block, so a kernel reading bytes its own block
  // did not write sees NaN in every block, not the previous block's plausible values.
  constexpr int n = 100, kBlocks = 6;
  for (wb::sim::BlockOrder order : {wb::sim::BlockOrder::forward, wb::sim::BlockOrder::reverse}) {
    wb::sim::set_block_order(order);
    std::vector<unsigned char> bytes(kBlocks * n, 0);
    wb::launch<peek_then_fill_shared_kernel>(dim3(kBlocks), dim3(32), n, bytes.data(), n);
    wb::sim::set_block_order(wb::sim::BlockOrder::forward);
    for (int i = 0; i < kBlocks * n; ++i) {
      CAPTURE(i / n);  // the block
      REQUIRE(bytes[i] == 0xff);
    }
  }
}
