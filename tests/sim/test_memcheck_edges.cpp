// memcheck and initcheck at the edges: vector accesses straddling the end of a global buffer,
// of the dynamic shared memory or of a static __shared__ array (reported byte by byte), and
// shared memory an earlier block wrote (unwritten again in each block). Built, as
// test_memcheck.cpp, only as an instrumented binary (test_sim_access), suite "memcheck".
#include <doctest/doctest.h>

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

// ---- Vector accesses straddling the end of a buffer or of shared memory ----
//
// An access is checked over every one of its bytes: a 16-byte float4 whose first 12 bytes lie
// in a buffer and last 4 past it is as wrong as one wholly past it (on a GPU it reads the
// next allocation or faults). Aligned vectors straddle an end when the buffer's size is not a
// multiple of the vector's, so the planted launches size the buffer, the dynamic shared memory
// or the __shared__ array at kVectors whole vectors less `past` bytes (1 .. sizeof(V) - 1):
// the last vector has exactly `past` bytes beyond the end. The message counts them.

constexpr int kVectors = 4;  // threads of the planted launches: the last one straddles

constexpr int kVectorCopyLine = __LINE__ + 4;
// Thread t copies vector t of `in` to vector t of `out` (one load and one store of sizeof(V)).
template <typename V>
__global__ void vector_copy_kernel(const V* in, V* out) {
  out[threadIdx.x] = in[threadIdx.x];
}

constexpr int kDynamicVectorStoreLine = __LINE__ + 10;
constexpr int kDynamicVectorLoadLine = __LINE__ + 15;
// The block's dynamic shared memory (`bytes` of it) as vectors V. store != 0: thread t stores
// in[t] to vector t. store == 0: the block writes every byte first (so that initcheck has
// nothing to say), then thread t loads vector t into out[t].
template <typename V>
__global__ void dynamic_vector_kernel(const V* in, V* out, int bytes, int store) {
  V* tile = wb::dynamic_shared<V>();
  const unsigned t = threadIdx.x;
  if (store != 0) {
    tile[t] = in[t];
    return;
  }
  unsigned char* raw = wb::dynamic_shared<unsigned char>();
  for (int i = static_cast<int>(t); i < bytes; i += static_cast<int>(blockDim.x)) raw[i] = 7;
  __syncthreads();
  out[t] = tile[t];
}

constexpr int kStaticVectorStoreLine = __LINE__ + 10;
constexpr int kStaticVectorLoadLine = __LINE__ + 14;
// A static __shared__ array of kBytes, 16-byte aligned, as vectors V; `store` as in
// dynamic_vector_kernel. (A byte array: an array of V could not end inside a vector.)
template <typename V, int kBytes>
__global__ void static_vector_kernel(const V* in, V* out, int store) {
  __shared__ __align__(16) unsigned char tile[kBytes];
  V* vectors = reinterpret_cast<V*>(tile);
  const unsigned t = threadIdx.x;
  if (store != 0) {
    vectors[t] = in[t];
    return;
  }
  for (int i = static_cast<int>(t); i < kBytes; i += static_cast<int>(blockDim.x)) tile[i] = 7;
  __syncthreads();
  out[t] = vectors[t];
}

// ---- Shared memory a block finds: what the block before it wrote does not count ----

constexpr int kReuseThreads = 32;
constexpr int kReuseBlocks = 8;

constexpr int kDynamicReuseLine = __LINE__ + 8;
// Every block but `reader` writes its slot of the block's dynamic shared memory; every block
// then reads it. On a GPU the reader finds whatever an earlier block on its SM left there.
__global__ void dynamic_reuse_kernel(float* out, int reader) {
  float* tile = wb::dynamic_shared<float>();
  const unsigned t = threadIdx.x;
  if (static_cast<int>(blockIdx.x) != reader) tile[t] = static_cast<float>(blockIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = tile[t];
}

constexpr int kStaticReuseLine = __LINE__ + 8;
// dynamic_reuse_kernel with a static __shared__ array, which the simulator keeps in one place
// for every block of every launch: its bytes must count as unwritten again in each block.
__global__ void static_reuse_kernel(float* out, int reader) {
  __shared__ float tile[kReuseThreads];
  const unsigned t = threadIdx.x;
  if (static_cast<int>(blockIdx.x) != reader) tile[t] = static_cast<float>(blockIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = tile[t];
}

std::string at_line(int line) { return "tests/sim/test_memcheck_edges.cpp:" + std::to_string(line); }

/// Requires `what` to be memcheck's report of thread kVectors - 1 (the last vector's), a `store`
/// or load of sizeof(V) bytes of which `past` lie past the end of `region`, at `line`.
template <typename V>
void check_straddle(const std::string& what, bool store, int past, const std::string& region,
                    int line) {
  INFO(what);
  CHECK(what.find("thread (" + std::to_string(kVectors - 1) + ",0,0)") != std::string::npos);
  CHECK(what.find(std::string("memcheck: invalid ") + (store ? "write" : "read") + " of " +
                  std::to_string(sizeof(V)) + " bytes") != std::string::npos);
  CHECK(what.find(std::to_string(past) + " of its bytes lie past the end of " + region) !=
        std::string::npos);
  CHECK(what.find(at_line(line)) != std::string::npos);
}

/// Every straddle of V over the end of a device buffer, loaded (`in` short) and stored (`out`
/// short); the same launch over whole vectors copies them.
template <typename V>
void check_global_straddles() {
  constexpr int kBytes = kVectors * static_cast<int>(sizeof(V));
  std::vector<unsigned char> host(kBytes);
  for (int i = 0; i < kBytes; ++i) host[i] = static_cast<unsigned char>(i);
  for (int past = 1; past < static_cast<int>(sizeof(V)); ++past) {
    CAPTURE(past);
    const std::vector<unsigned char> short_host(host.begin(), host.end() - past);
    DeviceBuffer<unsigned char> whole(Backend::sim, host), shorter(Backend::sim, short_host);
    DeviceBuffer<unsigned char> out(Backend::sim, kBytes);
    wb::sim::label_device_buffer(shorter.data(), "shorter");
    const auto* whole_v = reinterpret_cast<const V*>(whole.data());
    auto* out_v = reinterpret_cast<V*>(out.data());
    auto* shorter_v = reinterpret_cast<V*>(shorter.data());
    const std::string region =
        "device buffer shorter (" + std::to_string(kBytes - past) + " bytes at ";
    // The whole vectors of the short buffer, and nothing past it, are fine.
    wb::launch<vector_copy_kernel<V>>(dim3(1), dim3(kVectors - 1), 0, shorter_v, out_v);
    const std::vector<unsigned char> copied = out.download();
    const auto whole_bytes = static_cast<std::ptrdiff_t>((kVectors - 1) * sizeof(V));
    CHECK(std::equal(short_host.begin(), short_host.begin() + whole_bytes, copied.begin()));
    std::string what = wb::test::fault_of(Kind::memory_access, [&] {
      wb::launch<vector_copy_kernel<V>>(dim3(1), dim3(kVectors), 0, shorter_v, out_v);
    });
    check_straddle<V>(what, false, past, region, kVectorCopyLine);
    what = wb::test::fault_of(Kind::memory_access, [&] {
      wb::launch<vector_copy_kernel<V>>(dim3(1), dim3(kVectors), 0, whole_v, shorter_v);
    });
    check_straddle<V>(what, true, past, region, kVectorCopyLine);
  }
}

/// Every straddle of V over the end of the block's dynamic shared memory, stored and loaded.
template <typename V>
void check_dynamic_straddles() {
  constexpr int kBytes = kVectors * static_cast<int>(sizeof(V));
  DeviceBuffer<V> in(Backend::sim, std::vector<V>(kVectors, V{})), out(Backend::sim, kVectors);
  for (int past = 1; past < static_cast<int>(sizeof(V)); ++past) {
    CAPTURE(past);
    const int bytes = kBytes - past;
    const std::string region = "the block's dynamic shared memory (" + std::to_string(bytes) +
                               " bytes)";
    for (int store : {1, 0}) {
      wb::launch<dynamic_vector_kernel<V>>(dim3(1), dim3(kVectors - 1), bytes, in.data(),
                                           out.data(), bytes, store);
      const std::string what = wb::test::fault_of(Kind::memory_access, [&] {
        wb::launch<dynamic_vector_kernel<V>>(dim3(1), dim3(kVectors), bytes, in.data(),
                                             out.data(), bytes, store);
      });
      check_straddle<V>(what, store != 0, past, region,
                        store != 0 ? kDynamicVectorStoreLine : kDynamicVectorLoadLine);
    }
  }
}

/// A straddle of V by `kPast` bytes over the end of a static __shared__ array, stored and loaded.
template <typename V, int kPast>
void check_static_straddle() {
  CAPTURE(kPast);
  constexpr int kBytes = kVectors * static_cast<int>(sizeof(V)) - kPast;
  DeviceBuffer<V> in(Backend::sim, std::vector<V>(kVectors, V{})), out(Backend::sim, kVectors);
  const std::string region = "::tile (" + std::to_string(kBytes) + " bytes)";
  for (int store : {1, 0}) {
    wb::launch<static_vector_kernel<V, kBytes>>(dim3(1), dim3(kVectors - 1), 0, in.data(),
                                                out.data(), store);
    const std::string what = wb::test::fault_of(Kind::memory_access, [&] {
      wb::launch<static_vector_kernel<V, kBytes>>(dim3(1), dim3(kVectors), 0, in.data(),
                                                  out.data(), store);
    });
    check_straddle<V>(what, store != 0, kPast, "__shared__ array",
                      store != 0 ? kStaticVectorStoreLine : kStaticVectorLoadLine);
    CHECK(what.find(region) != std::string::npos);
  }
}

/// check_static_straddle for every `past` of V: 1 .. sizeof(V) - 1 (one array size each).
template <typename V, int... kPastLessOne>
void check_static_straddles(std::integer_sequence<int, kPastLessOne...>) {
  (check_static_straddle<V, kPastLessOne + 1>(), ...);
}

/// Runs `launch` with its blocks in `order` and returns initcheck's report; the order is the
/// default again afterwards, also when the report is missing (fault_of's FAIL throws).
template <typename Launch>
std::string reuse_report(wb::sim::BlockOrder order, Launch launch) {
  struct Restore {
    ~Restore() { wb::sim::set_block_order(wb::sim::BlockOrder::forward); }
  } restore;
  wb::sim::set_block_order(order);
  return wb::test::fault_of(Kind::uninitialized_read, launch);
}

/// For each block that does not run first, in either order: a launch (`launch(out, reader)`)
/// in which that block only reads its shared memory, after blocks that wrote it, is reported,
/// naming that block.
template <typename Launch>
void check_every_block_reuse(Launch launch, int line) {
  DeviceBuffer<float> out(Backend::sim, kReuseBlocks * kReuseThreads);
  launch(out.data(), -1);  // every block writes before it reads: clean
  CHECK(out.download()[kReuseBlocks * kReuseThreads - 1] == kReuseBlocks - 1);
  for (wb::sim::BlockOrder order : {wb::sim::BlockOrder::forward, wb::sim::BlockOrder::reverse}) {
    const bool forward = order == wb::sim::BlockOrder::forward;
    for (int n = 1; n < kReuseBlocks; ++n) {  // the n-th block to run; the first is trivial
      const int reader = forward ? n : kReuseBlocks - 1 - n;
      CAPTURE(forward);
      CAPTURE(reader);
      const std::string what = reuse_report(order, [&] { launch(out.data(), reader); });
      INFO(what);
      // (The thread is whichever the scheduler resumes first after the barrier.)
      const std::string block = "block (" + std::to_string(reader) + ",0,0), thread (";
      CHECK(what.find(block) != std::string::npos);
      CHECK(what.find("initcheck: read of 4 bytes") != std::string::npos);
      CHECK(what.find("that nothing has written") != std::string::npos);
      CHECK(what.find("since the block started") != std::string::npos);
      CHECK(what.find(at_line(line)) != std::string::npos);
    }
  }
}

}  // namespace

TEST_SUITE("memcheck") {

TEST_CASE("a vector straddling the end of a global buffer is reported, byte by byte") {
  // Every position of the end inside the vector: 1 .. sizeof(V) - 1 bytes past it.
  check_global_straddles<float4>();
  check_global_straddles<int4>();
  check_global_straddles<float2>();
  check_global_straddles<int2>();
}

TEST_CASE("a vector straddling the end of the dynamic shared memory is reported, byte by byte") {
  check_dynamic_straddles<float4>();
  check_dynamic_straddles<int4>();
  check_dynamic_straddles<float2>();
  check_dynamic_straddles<int2>();
}

TEST_CASE("a vector straddling the end of a static __shared__ array is reported, byte by byte") {
  // One array size per straddle, so one kernel each: float4 and float2 only (int4 and int2
  // are the same bytes, covered above).
  check_static_straddles<float4>(std::make_integer_sequence<int, 15>());
  check_static_straddles<float2>(std::make_integer_sequence<int, 7>());
}

TEST_CASE("dynamic shared memory earlier blocks wrote is unwritten in each block") {
  // Not only the first block: block 1, block 5 of 8 and every other one finds its shared
  // memory unwritten, whichever order the blocks run in.
  const std::size_t bytes = kReuseThreads * sizeof(float);
  check_every_block_reuse(
      [&](float* out, int reader) {
        wb::launch<dynamic_reuse_kernel>(dim3(kReuseBlocks), dim3(kReuseThreads), bytes, out,
                                         reader);
      },
      kDynamicReuseLine);
}

TEST_CASE("a static __shared__ array earlier blocks wrote is unwritten in each block") {
  check_every_block_reuse(
      [&](float* out, int reader) {
        wb::launch<static_reuse_kernel>(dim3(kReuseBlocks), dim3(kReuseThreads), 0, out, reader);
      },
      kStaticReuseLine);
}

}  // TEST_SUITE("memcheck")
