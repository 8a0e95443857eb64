// Warp collectives: shuffles of every kind and width, votes, __syncwarp, and masks.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "common/kernel.cuh"

namespace {

constexpr unsigned kFull = 0xffffffffu;

enum Kind { kIdx, kUp, kDown, kXor };

// out: (blockDim.x), each lane's shuffle result of value(lane) = 1000 * warp + lane.
// Lanes outside `mask` do not call the shuffle and write -1.
__global__ void shuffle_kernel(int kind, int arg, int width, unsigned mask, int* out) {
  const int lane = threadIdx.x % 32;
  const int value = 1000 * static_cast<int>(threadIdx.x / 32) + lane;
  int r = -1;
  if (mask >> lane & 1u) {
    switch (kind) {
      case kIdx: r = __shfl_sync(mask, value, arg, width); break;
      case kUp: r = __shfl_up_sync(mask, value, static_cast<unsigned>(arg), width); break;
      case kDown: r = __shfl_down_sync(mask, value, static_cast<unsigned>(arg), width); break;
      default: r = __shfl_xor_sync(mask, value, arg, width); break;
    }
  }
  out[threadIdx.x] = r;
}

/// The source lane of a shuffle, in the words of the CUDA Programming Guide (independent of
/// the simulator's PTX-based formula): segments of `width` lanes; idx reads lane srcLane
/// modulo width of the caller's segment; up/down keep the caller's value when the source lies
/// outside the segment; xor may read an earlier segment but not a later one.
int expected_source(int kind, int lane, int arg, int width) {
  const int segment = lane / width * width;
  switch (kind) {
    case kIdx: return segment + arg % width;
    case kUp: return lane % width >= arg ? lane - arg : lane;
    case kDown: return lane % width + arg < width ? lane + arg : lane;
    default: {
      const int j = lane ^ arg;
      return j / width <= lane / width ? j : lane;
    }
  }
}

// out: (64), 64-bit and float payloads through the same shuffles.
__global__ void wide_shuffle_kernel(double* d, long long* ll, float* f) {
  const int lane = threadIdx.x;
  d[lane] = __shfl_down_sync(kFull, 0.5 * lane, 3);
  ll[lane] = __shfl_xor_sync(kFull, (1LL << 40) + lane, 5);
  f[lane] = __shfl_sync(kFull, 0.25f * lane, 31 - lane);
}

// sum: (blocks of warps), the sum over each warp's existing lanes by xor butterflies over a
// full mask, in a block whose last warp is partial (lanes that do not exist never take part).
__global__ void partial_warp_sum_kernel(int* sum) {
  const unsigned lanes_in_warp = __popc(__ballot_sync(kFull, 1));
  int v = static_cast<int>(threadIdx.x);
  for (int offset = static_cast<int>(lanes_in_warp) / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(kFull, v, offset, static_cast<int>(lanes_in_warp));
  }
  if (threadIdx.x % 32 == 0) sum[threadIdx.x / 32] = v;
}

// votes: (3 * 32) per warp-half: ballot, any and all of `lane % modulus == 0` over `mask`.
__global__ void vote_kernel(int modulus, unsigned mask, unsigned* votes) {
  const int lane = threadIdx.x % 32;
  if (!(mask >> lane & 1u)) return;  // lanes outside the mask exit: they do not take part
  const int p = lane % modulus == 0;
  votes[lane] = __ballot_sync(mask, p);
  votes[32 + lane] = static_cast<unsigned>(__any_sync(mask, p));
  votes[64 + lane] = static_cast<unsigned>(__all_sync(mask, p));
}

// out: (32). The two halves of the warp shuffle concurrently with their own masks.
__global__ void disjoint_masks_kernel(int* out) {
  const int lane = threadIdx.x;
  int r;
  if (lane < 16) {
    r = __shfl_sync(0x0000ffffu, lane * 10, 15 - lane);
  } else {
    r = __shfl_down_sync(0xffff0000u, lane * 10, 1, 16);  // width 16: the upper segment
  }
  out[lane] = r;
}

// out: (64). Lanes exchange values through shared memory, ordered by __syncwarp.
__global__ void syncwarp_exchange_kernel(int* out) {
  __shared__ int slot[64];
  const int t = threadIdx.x;
  int v = t;
  for (int round = 0; round < 5; ++round) {
    slot[t] = v;
    __syncwarp();
    v = slot[(t / 32) * 32 + (t + 1) % 32];  // the next lane of the same warp
    __syncwarp();
  }
  out[t] = v;
}

}  // namespace

TEST_CASE("shuffles of every kind and width match the CUDA rules" *
          doctest::test_suite("shuffles")) {
  const char* names[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync"};
  constexpr int kBlockThreads = 64;  // two warps: results must stay within each warp
  for (int kind : {kIdx, kUp, kDown, kXor}) {
    SUBCASE(names[kind]) {
      for (int width : {1, 2, 4, 8, 16, 32}) {
        // idx takes any source lane (reduced modulo width); up/down take deltas; xor lane masks.
        for (int arg = 0; arg < 32; ++arg) {
          CAPTURE(width);
          CAPTURE(arg);
          std::vector<int> out(kBlockThreads, -2);
          wb::launch<shuffle_kernel>(dim3(1), dim3(kBlockThreads), 0, kind, arg, width, kFull,
                                     out.data());
          for (int t = 0; t < kBlockThreads; ++t) {
            const int src = expected_source(kind, t % 32, arg, width);
            REQUIRE(out[t] == 1000 * (t / 32) + src);
          }
        }
      }
    }
  }
}

TEST_CASE("shuffles over a partial mask read only lanes of the mask" *
          doctest::test_suite("shuffles")) {
  // Mask: the upper 16 lanes. idx with srcLane 16..31 and xor with lane masks below 16 keep
  // every source inside the mask; lanes outside it do not call the shuffle (-1).
  const unsigned mask = 0xffff0000u;
  SUBCASE("idx") {
    for (int src = 16; src < 32; ++src) {
      CAPTURE(src);
      std::vector<int> out(32);
      wb::launch<shuffle_kernel>(dim3(1), dim3(32), 0, int{kIdx}, src, 32, mask, out.data());
      for (int t = 0; t < 32; ++t) REQUIRE(out[t] == (t < 16 ? -1 : src));
    }
  }
  SUBCASE("xor") {
    for (int m = 0; m < 16; ++m) {
      CAPTURE(m);
      std::vector<int> out(32);
      wb::launch<shuffle_kernel>(dim3(1), dim3(32), 0, int{kXor}, m, 32, mask, out.data());
      for (int t = 0; t < 32; ++t) REQUIRE(out[t] == (t < 16 ? -1 : (t ^ m)));
    }
  }
}

TEST_CASE("shuffles carry 64-bit and float values unchanged" * doctest::test_suite("shuffles")) {
  std::vector<double> d(32);
  std::vector<long long> ll(32);
  std::vector<float> f(32);
  wb::launch<wide_shuffle_kernel>(dim3(1), dim3(32), 0, d.data(), ll.data(), f.data());
  for (int lane = 0; lane < 32; ++lane) {
    CHECK(d[lane] == 0.5 * (lane + 3 < 32 ? lane + 3 : lane));  // exact: binary fractions
    CHECK(ll[lane] == (1LL << 40) + (lane ^ 5));
    CHECK(f[lane] == 0.25f * (31 - lane));
  }
}

TEST_CASE("a full-mask reduction in a partial warp uses only the lanes that exist" *
          doctest::test_suite("shuffles")) {
  // 48 threads: warp 0 has 32 lanes, warp 1 has 16 (a power of 2, so the butterfly of width
  // 16 covers it exactly). Integer sums: exact.
  std::vector<int> sum(2, -1);
  wb::launch<partial_warp_sum_kernel>(dim3(1), dim3(48), 0, sum.data());
  CHECK(sum[0] == 31 * 32 / 2);
  CHECK(sum[1] == (32 + 47) * 16 / 2);
}

TEST_CASE("two halves of a warp run independent collectives with disjoint masks" *
          doctest::test_suite("shuffles")) {
  std::vector<int> out(32);
  wb::launch<disjoint_masks_kernel>(dim3(1), dim3(32), 0, out.data());
  for (int lane = 0; lane < 16; ++lane) CHECK(out[lane] == (15 - lane) * 10);
  for (int lane = 16; lane < 32; ++lane) CHECK(out[lane] == (lane < 31 ? lane + 1 : lane) * 10);
}

TEST_CASE("ballot and any and all vote over the lanes of the mask" *
          doctest::test_suite("votes")) {
  struct Case {
    int modulus;
    unsigned mask;
  };
  for (const Case& c : {Case{1, kFull}, Case{3, kFull}, Case{64, kFull}, Case{2, 0x00ff00ffu},
                        Case{5, 0xf0000000u}, Case{1, 0x80000001u}}) {
    CAPTURE(c.modulus);
    CAPTURE(c.mask);
    std::vector<unsigned> votes(96, 7u);
    wb::launch<vote_kernel>(dim3(1), dim3(32), 0, c.modulus, c.mask, votes.data());
    unsigned ballot = 0;
    for (int lane = 0; lane < 32; ++lane) {
      if ((c.mask >> lane & 1u) && lane % c.modulus == 0) ballot |= 1u << lane;
    }
    for (int lane = 0; lane < 32; ++lane) {
      if (!(c.mask >> lane & 1u)) {
        REQUIRE(votes[lane] == 7u);  // did not take part
        continue;
      }
      REQUIRE(votes[lane] == ballot);
      REQUIRE(votes[32 + lane] == (ballot != 0 ? 1u : 0u));
      REQUIRE(votes[64 + lane] == (ballot == c.mask ? 1u : 0u));
    }
  }
}

TEST_CASE("syncwarp orders a warp's exchange through shared memory" *
          doctest::test_suite("shuffles")) {
  std::vector<int> out(64);
  wb::launch<syncwarp_exchange_kernel>(dim3(2), dim3(64), 0, out.data());
  for (int t = 0; t < 64; ++t) CHECK(out[t] == (t / 32) * 32 + (t + 5) % 32);  // 5 rounds
}
