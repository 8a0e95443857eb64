// The Hopper wrappers' own test kernel (common/hopper.cuh): C = A B^T on one warpgroup, its
// operands brought by TMA through a ring of shared-memory stages guarded by mbarriers.
//
// Computes: C (64 x n, float, row-major) = A B^T, A (64 x k) row-major, B (n x k) row-major
//           (K-major) or given transposed, (k x n) row-major (MN-major, as attention's V);
//           __half or __nv_bfloat16, float accumulation.
// How: k in tiles of 64 elements, 128 bytes of 16-bit: one row of the 128-byte swizzle. The
//      producer warp's lane 0 loads tile i (A's 64 x 64 box, and B's n x 64 box or, MN-major,
//      its n / 64 boxes of 64 x 64) with tma_load_2d into stage i % kStages, completing that
//      stage's `full` mbarrier by the bytes; the consumer warpgroup waits on `full`, issues 4
//      wgmma k16 steps (A from the tile, wgmma_ss, or from registers loaded from it, wgmma_rs),
//      commits and waits for them, then each of its warps arrives on the stage's `empty`
//      mbarrier, which the producer waits on before it refills the stage. The accumulator is
//      written to C from wgmma's fragment layout.
// Launch shape: one block of 160 threads: warps 0-3 the consumer warpgroup, warp 4 the producer.
// Limits: n in {64, 128, 256}, k a positive multiple of 64, fp16 or bf16; cuda: sm_90a.
// Test: ctest --test-dir build -R hopper --output-on-failure
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/hopper.cuh"  // first: common/kernel.cuh
#include "common/ptx.cuh"     // register_bits
#include "common/shared_memory.cuh"
#include "tests/hopper/warpgroup_gemm.hpp"

namespace wb::test {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

using ptx::Major;
using ptx::Swizzle;
using ptx::TensorMap;

constexpr int kRows = 64;   // M of m64nNk16: the rows of A and C
constexpr int kTileK = 64;  // k per tile: 128 bytes of 16-bit elements
constexpr int kStepK = 16;  // k per wgmma
constexpr int kSteps = kTileK / kStepK;
constexpr int kStages = 2;         // TMA fills one stage while the tensor cores read the other
constexpr int kConsumerWarps = 4;  // one warpgroup
constexpr int kThreads = (kConsumerWarps + 1) * kWarpSize;  // with the producer warp
// A tile row is one 128-byte swizzle row; 8 rows are the swizzle's period, where tiles start.
constexpr unsigned kRowBytes = 128;
constexpr unsigned kSwizzleAtom = 8 * kRowBytes;
// MN-major B comes in boxes of 64 n (a row of 16-bit elements) by the tile's 64 k.
constexpr int kMnBlock = kRowBytes / 2;
constexpr unsigned kMnBlockBytes = kTileK * kRowBytes;

// Descriptors of the 128-byte-swizzled tiles (common/hopper.cuh; PTX ISA, "Shared Memory
// Matrix Layout"). K-major (A, and B as (n, k)): 8-row groups 1024 bytes apart (the stride byte
// offset); the leading byte offset is unused by a swizzled K-major operand ("assumed 1": 16
// bytes). MN-major B: 8-row groups of k 1024 bytes apart (stride), blocks of 64 n a box apart
// (leading). A k16 step is 32 bytes along a K-major row, 16 rows down an MN-major tile.
constexpr unsigned kUnusedLeadingBytes = 16;
constexpr unsigned kKMajorStepBytes = kStepK * 2;
constexpr unsigned kMnMajorStepBytes = kStepK * kRowBytes;

template <int N>
constexpr unsigned kStageBytes = (kRows + N) * kRowBytes;  // A's tile and B's

/// A stage's 1024-byte-aligned tiles and more: the ring and the slack to align it.
template <int N>
constexpr std::size_t shared_bytes() {
  return kSwizzleAtom + kStages * kStageBytes<N>;
}

/// Element (row, col) of a 128-byte-row tile under the 128-byte swizzle: 16-byte chunk c of row
/// r is stored at chunk c ^ (r % 8) (the tile starts on a 1024-byte boundary).
template <typename T>
__device__ __forceinline__ const unsigned char* swizzled(const unsigned char* tile, int row,
                                                         int col) {
  const unsigned byte = col * sizeof(T);
  return tile + row * kRowBytes + ((byte / 16) ^ (row % 8)) * 16 + byte % 16;
}

/// This thread's registers of A for k step `step` of a tile: wgmma_rs's A fragment, which is
/// mma.m16n8k16's A layout for warp w's rows 16w..16w+15 (g = lane / 4, t = lane % 4).
template <typename T>
__device__ __forceinline__ void load_a_fragment(std::uint32_t (&a)[4], const unsigned char* tile,
                                                int step) {
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int row = 16 * warp + lane / 4, col = kStepK * step + 2 * (lane % 4);
  a[0] = ptx::register_bits(swizzled<T>(tile, row, col));          // A(g, 2t..2t+1)
  a[1] = ptx::register_bits(swizzled<T>(tile, row + 8, col));      // A(g+8, 2t..2t+1)
  a[2] = ptx::register_bits(swizzled<T>(tile, row, col + 8));      // A(g, 2t+8..2t+9)
  a[3] = ptx::register_bits(swizzled<T>(tile, row + 8, col + 8));  // A(g+8, 2t+8..2t+9)
}

// a_map: A (64, k) in boxes of 64 x 64; b_map: B (n, k) in boxes of n x 64, or MN-major B^T
// (k, n) in boxes of 64 x 64; both with the 128-byte swizzle. c: (64, n), row-major.
template <typename T, int N, bool kARegisters, Major kMajorB>
__global__ void __launch_bounds__(kThreads, 1)
    warpgroup_gemm_kernel(const __grid_constant__ TensorMap a_map,
                          const __grid_constant__ TensorMap b_map, float* __restrict__ c, int k) {
  constexpr unsigned kABytes = kRows * kRowBytes;
  // full[s]: stage s holds its tile (1 arrival, the producer's, and the tile's bytes).
  // empty[s]: the consumers are done with it (1 arrival per consumer warp: after
  // wgmma_wait_group its lanes have read all they read of the stage, and __syncwarp orders them
  // before lane 0's arrival; 4 arrivals instead of 128, and no barrier across the warpgroup).
  __shared__ std::uint64_t full[kStages], empty[kStages];
  unsigned char* base = dynamic_shared<unsigned char>();
  // The generic address's alignment is the shared address's: the shared window is aligned far
  // beyond 1024 bytes (and the simulator's dynamic shared memory starts on 1024).
  unsigned char* ring =
      base + (kSwizzleAtom - reinterpret_cast<std::uintptr_t>(base) % kSwizzleAtom) % kSwizzleAtom;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int tiles = k / kTileK;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], kConsumerWarps);
    }
    ptx::fence_proxy_async();  // the initialized barriers, visible to TMA's complete_tx
  }
  __syncthreads();

  //! [producer]
  if (warp == kConsumerWarps) {  // the producer: lane 0 issues every copy
    if (lane == 0) {
      for (int i = 0; i < tiles; ++i) {
        const int s = i % kStages;
        // The stage's previous use (i / kStages - 1, counting from 0) must have been released.
        if (i >= kStages) ptx::mbarrier_wait_parity(&empty[s], (i / kStages - 1) % 2);
        unsigned char* a_tile = ring + s * kStageBytes<N>;
        unsigned char* b_tile = a_tile + kABytes;
        ptx::mbarrier_arrive_expect_tx(&full[s], kStageBytes<N>);
        ptx::tma_load_2d(a_tile, &a_map, i * kTileK, 0, &full[s]);
        if constexpr (kMajorB == Major::k) {
          ptx::tma_load_2d(b_tile, &b_map, i * kTileK, 0, &full[s]);
        } else {
          for (int j = 0; j < N / kMnBlock; ++j)
            ptx::tma_load_2d(b_tile + j * kMnBlockBytes, &b_map, j * kMnBlock, i * kTileK,
                             &full[s]);
        }
      }
    }
    return;
  }
  //! [producer]

  //! [consumer]
  // The consumer warpgroup. D starts as NaN: the first wgmma's scale-d = 0 must ignore it.
  float d[N / 2];
#pragma unroll
  for (int e = 0; e < N / 2; ++e) d[e] = NAN;
  for (int i = 0; i < tiles; ++i) {
    const int s = i % kStages;
    ptx::mbarrier_wait_parity(&full[s], (i / kStages) % 2);
    const unsigned char* a_tile = ring + s * kStageBytes<N>;
    const unsigned char* b_tile = a_tile + kABytes;
    const std::uint64_t b_desc =
        kMajorB == Major::k
            ? ptx::make_smem_descriptor(b_tile, Swizzle::b128, kUnusedLeadingBytes, kSwizzleAtom)
            : ptx::make_smem_descriptor(b_tile, Swizzle::b128, kMnBlockBytes, kSwizzleAtom);
    constexpr unsigned kBStepBytes = kMajorB == Major::k ? kKMajorStepBytes : kMnMajorStepBytes;
    if constexpr (kARegisters) {
      std::uint32_t a[kSteps][4];
#pragma unroll
      for (int step = 0; step < kSteps; ++step) load_a_fragment<T>(a[step], a_tile, step);
      ptx::wgmma_fence();  // the A registers just loaded, and D, are what the wgmmas read
#pragma unroll
      for (int step = 0; step < kSteps; ++step)
        ptx::wgmma_rs<T, N, kMajorB>(
            d, a[step], ptx::advance_descriptor(b_desc, step * kBStepBytes), i > 0 || step > 0);
    } else {
      const std::uint64_t a_desc =
          ptx::make_smem_descriptor(a_tile, Swizzle::b128, kUnusedLeadingBytes, kSwizzleAtom);
      ptx::wgmma_fence();  // D, written by the NaNs or the last group, is what the wgmmas read
#pragma unroll
      for (int step = 0; step < kSteps; ++step)
        ptx::wgmma_ss<T, N, Major::k, kMajorB>(
            d, ptx::advance_descriptor(a_desc, step * kKMajorStepBytes),
            ptx::advance_descriptor(b_desc, step * kBStepBytes), i > 0 || step > 0);
    }
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<0>();
    __syncwarp();
    if (lane == 0) ptx::mbarrier_arrive(&empty[s]);
  }
  //! [consumer]

  // D(16w + g (+8), 8i + 2t (+1)) = d[4i (+2) (+1)] (common/hopper.cuh), g = lane / 4,
  // t = lane % 4.
  const int row = 16 * warp + lane / 4, col = 2 * (lane % 4);
#pragma unroll
  for (int i = 0; i < N / 8; ++i) {
    float* c0 = c + row * N + 8 * i + col;
    float* c8 = c0 + 8 * N;
    c0[0] = d[4 * i];
    c0[1] = d[4 * i + 1];
    c8[0] = d[4 * i + 2];
    c8[1] = d[4 * i + 3];
  }
}

template <typename T, int N, bool kARegisters, Major kMajorB>
void launch_gemm(const WarpgroupGemmArgs& g) {
  const auto k = static_cast<std::uint64_t>(g.k);
  constexpr std::uint64_t kElement = sizeof(T);
  // Sizes innermost first, strides in bytes of dimension 1 (a row).
  TensorMap a_map{}, b_map{};
  const std::uint64_t a_sizes[] = {k, kRows}, a_strides[] = {k * kElement};
  const std::uint32_t a_box[] = {kTileK, kRows};
  ptx::encode_tensor_map(a_map, static_cast<const T*>(g.a), 2, a_sizes, a_strides, a_box,
                         Swizzle::b128);
  if constexpr (kMajorB == Major::k) {  // B (n, k): a box is the tile's n rows
    const std::uint64_t sizes[] = {k, N}, strides[] = {k * kElement};
    const std::uint32_t box[] = {kTileK, N};
    ptx::encode_tensor_map(b_map, static_cast<const T*>(g.b), 2, sizes, strides, box,
                           Swizzle::b128);
  } else {  // B^T (k, n): a box is 64 k rows of 64 n, one 128-byte swizzle row each
    const std::uint64_t sizes[] = {N, k}, strides[] = {N * kElement};
    const std::uint32_t box[] = {kMnBlock, kTileK};
    ptx::encode_tensor_map(b_map, static_cast<const T*>(g.b), 2, sizes, strides, box,
                           Swizzle::b128);
  }
  launch_opted_in<warpgroup_gemm_kernel<T, N, kARegisters, kMajorB>>(
      dim3(1), dim3(kThreads), shared_bytes<N>(), a_map, b_map, g.c, g.k);
}

template <typename T, int N>
void launch_variant(const WarpgroupGemmArgs& g) {
  if (g.a_from_registers) {
    g.b_mn_major ? launch_gemm<T, N, true, Major::mn>(g) : launch_gemm<T, N, true, Major::k>(g);
  } else {
    g.b_mn_major ? launch_gemm<T, N, false, Major::mn>(g) : launch_gemm<T, N, false, Major::k>(g);
  }
}

template <typename T>
void launch_n(const WarpgroupGemmArgs& g) {
  if (g.n == 64) launch_variant<T, 64>(g);
  if (g.n == 128) launch_variant<T, 128>(g);
  if (g.n == 256) launch_variant<T, 256>(g);
}

}  // namespace

template <>
void warpgroup_gemm<kThisBackend>(const WarpgroupGemmArgs& g) {
  if (g.n != 64 && g.n != 128 && g.n != 256)
    throw std::invalid_argument("warpgroup_gemm: n = " + std::to_string(g.n) +
                                ": the kernel takes n = 64, 128 or 256");
  if (g.k <= 0 || g.k % kTileK != 0)
    throw std::invalid_argument("warpgroup_gemm: k = " + std::to_string(g.k) +
                                ": the kernel takes whole tiles, k a positive multiple of 64");
  if (g.dtype == Dtype::fp16) {
    launch_n<__half>(g);
  } else if (g.dtype == Dtype::bf16) {
    launch_n<__nv_bfloat16>(g);
  } else {
    throw std::invalid_argument("warpgroup_gemm: wgmma takes fp16 or bf16 inputs");
  }
  synchronize();
}

template <>
void encode_fp16_tensor_map<kThisBackend>(const void* global, int rank, const std::uint64_t* sizes,
                                          const std::uint64_t* strides, const std::uint32_t* box,
                                          bool swizzled) {
  TensorMap map{};
  ptx::encode_tensor_map(map, static_cast<const __half*>(global), rank, sizes, strides, box,
                         swizzled ? Swizzle::b128 : Swizzle::none);
}

}  // namespace wb::test
