// Hopper's asynchronous instructions (sm_90a), one small wrapper each, as common/ptx.cuh has
// Ampere's: under nvcc the wrapper is the inline `asm` (common/hopper_nvcc.cuh, compiled for
// sm_90a only: `-gencode arch=compute_90a,code=sm_90a`), in the simulator (common/sim/hopper.hpp)
// an emulation with the PTX ISA's semantics that makes each misuse a wrong value or a report.
//
// mbarrier: a 64-bit object in shared memory that counts arrivals and transaction bytes; each
// time both reach zero its *phase* completes and its phase bit flips (PTX ISA, "Parallel
// Synchronization and Communication Instructions: mbarrier").
//   mbarrier_init(bar, arrivals)            mbarrier.init: phase 0, `arrivals` expected per phase
//   mbarrier_arrive(bar)                    mbarrier.arrive: one arrival on the current phase
//   mbarrier_arrive_expect_tx(bar, bytes)   mbarrier.arrive.expect_tx: the phase also waits for
//                                           `bytes` more bytes of asynchronous copies, then arrive
//   mbarrier_test_wait_parity(bar, parity)  mbarrier.test_wait.parity: has the phase of parity
//                                           `parity` completed? (never blocks)
//   mbarrier_try_wait_parity(bar, parity)   mbarrier.try_wait.parity: the same, but the thread may
//                                           sleep a while first (false: not yet, ask again)
//   mbarrier_wait_parity(bar, parity)       a loop of try_wait until it completes
// One thread initializes a barrier, then fences (fence_proxy_async(), so that TMA's
// complete_tx sees the initialized barrier) and the block synchronizes (__syncthreads()) before
// any other thread or copy uses it. A wait names the phase by its parity: the k-th phase (from 0) has parity k % 2, and
// "completed" means the barrier has moved past it. A producer/consumer ring of s stages waits
// on stage i % s with parity (i / s) % 2.
//
// TMA (the Tensor Memory Accelerator): one thread copies a whole box of a 2-D or 3-D tensor
// between global and shared memory, described by a tensor map the host encoded
// (encode_tensor_map: element type, sizes, strides, box, swizzle; coordinates past the tensor's
// edge read as zeros and are not written).
//   tma_load_2d(dst, map, x, y, bar)        cp.async.bulk.tensor.2d.shared::cluster.global.tile
//   tma_load_3d(dst, map, x, y, z, bar)       .mbarrier::complete_tx::bytes: the box at element
//                                           (x, y[, z]) into `dst`; it completes `bar`'s
//                                           transaction count by the box's bytes when it lands
//   tma_store_2d(map, x, y, src)            cp.async.bulk.tensor.2d.global.shared::cta.tile
//   tma_store_3d(map, x, y, z, src)           .bulk_group: the box in `src` to global memory
//   tma_store_commit()                      cp.async.bulk.commit_group
//   tma_store_wait<N>()                     cp.async.bulk.wait_group.read N: all but the N newest
//                                           store groups have read their shared memory
//   fence_proxy_async()                     fence.proxy.async.shared::cta: this thread's ordinary
//                                           stores to shared memory become visible to the async
//                                           proxy (wgmma's and TMA stores' reads)
//
// Named barriers: bar.sync / bar.arrive over `threads` threads (a multiple of 32) on barrier
// `id` (0-15; __syncthreads is barrier 0 over the whole block).
//   named_barrier_sync(id, threads)         wait until `threads` threads arrived, then go on
//   named_barrier_arrive(id, threads)       arrive and go on (a producer's "ready" signal)
//
// setmaxnreg: a warpgroup gives registers back to the SM or takes more (warp specialization:
// the producer keeps few, the consumers many).
//   setmaxnreg_dec<N>(), setmaxnreg_inc<N>()  setmaxnreg.{dec,inc}.sync.aligned.u32 N: N a
//                                           multiple of 8 in 24-256, the same in all 128 threads
//
// wgmma: the warpgroup's (4 warps, 128 threads, warp 4k to 4k + 3) asynchronous tensor-core
// product, D (64 x N, float) = A (64 x 16, T) B (16 x N, T) + D, T = __half or __nv_bfloat16.
// A and B are read from shared memory through *matrix descriptors* (make_smem_descriptor), or A
// from registers.
//   wgmma_fence()                           wgmma.fence.sync.aligned: registers written before
//                                           it are what the following wgmma reads
//   wgmma_ss<T, N, MajorA, MajorB>(d, a, b, accumulate)
//                                           wgmma.mma_async.sync.aligned.m64nNk16.f32.T.T with A
//                                           and B descriptors; accumulate = false: D = A B
//   wgmma_rs<T, N, MajorB>(d, a, b, accumulate)  the same, A from registers (a[4], the layout
//                                           of mma.m16n8k16's A, warp w holding rows 16w..16w+15)
//   wgmma_commit_group()                    closes the group of the wgmmas issued since the last
//   wgmma_wait_group<N>()                   waits until at most N groups are in flight; only then
//                                           may the accumulators be read, or the shared memory the
//                                           finished groups read be overwritten
//   wgmma_fence_operand(d)                  after the wait, before d is read (nvcc: keeps the
//                                           compiler from moving d's reads above the wait)
// Accumulator layout (PTX ISA, "Register Fragments and Shared Memory Matrix Layouts" of wgmma):
// thread lane l of warp w of the warpgroup, g = l / 4, t = l % 4, holds for i = 0 .. N/8 - 1
//   d[4i + 0], d[4i + 1] = D(16w + g,     8i + 2t), D(16w + g,     8i + 2t + 1)
//   d[4i + 2], d[4i + 3] = D(16w + g + 8, 8i + 2t), D(16w + g + 8, 8i + 2t + 1)
// which is mma.m16n8k16's C layout repeated N/8 times: the register A layout of rows
// 16w..16w+15 pairs these same elements, so a P computed in d feeds the next wgmma as A.
//
// Shared-memory operands (PTX ISA, "Matrix Descriptor Format" and "Shared Memory Matrix
// Layout"): 16-bit elements in "core matrices" of 8 rows of 16 bytes. K-major (Major::k): a row
// runs along k (A row-major, B column-major); MN-major (Major::mn): along m or n. Without swizzle
// a core matrix is 128 contiguous bytes placed by the descriptor's two offsets; with a 32-, 64-
// or 128-byte swizzle the operand is built of atoms of 8 rows of 32, 64 or 128 bytes, and 16-byte
// chunk c of row r is stored at chunk c ^ (r % 8 / (8 / (swizzle / 16))) (for 128 bytes:
// c ^ (r % 8)), so that the 8 rows of a core matrix fall in 8 different banks; the swizzle acts
// on the shared address, so a swizzled tile starts on a boundary of its 8-row pattern (1024
// bytes for 128). Which offset steps along what:
//     layout              leading_bytes (LBO) steps          stride_bytes (SBO) steps
//     K-major, none       core matrices along k              core matrices along m|n
//     K-major, swizzled   unused (k16 stays in one row)      8-row atoms along m|n
//     MN-major, none      core matrices along k              core matrices along m|n
//     MN-major, swizzled  atoms along m|n                    8-row groups along k
// (common/sim/wgmma_layout.hpp has the addresses as functions). The same swizzle in a tensor
// map makes TMA write exactly that layout from a row-major box.
#pragma once

#include <cstdint>

#include "common/kernel.cuh"

namespace wb::ptx {

/// Which dimension of a wgmma operand is contiguous in shared memory: k (K-major: A row-major,
/// B column-major, "no transpose") or m/n (MN-major, "transposed"; 16-bit types only).
enum class Major { k = 0, mn = 1 };

/// A swizzle mode, shared by TMA boxes and wgmma descriptors: how 16-byte chunks of each row
/// are permuted (none, or within rows of 32, 64 or 128 bytes).
enum class Swizzle { none, b32, b64, b128 };

/// The swizzle's row length in bytes (16 for none: one core-matrix row).
__host__ __device__ constexpr unsigned swizzle_bytes(Swizzle s) {
  return s == Swizzle::b128 ? 128u : s == Swizzle::b64 ? 64u : s == Swizzle::b32 ? 32u : 16u;
}

/// The descriptor's 2-bit swizzle field (bits 62-63): 0 none, 1 128 bytes, 2 64, 3 32.
__host__ __device__ constexpr std::uint64_t descriptor_swizzle_bits(Swizzle s) {
  return s == Swizzle::b128 ? 1u : s == Swizzle::b64 ? 2u : s == Swizzle::b32 ? 3u : 0u;
}

/// A wgmma matrix descriptor (PTX ISA, "Matrix Descriptor Format"): bits 0-13 the start address
/// >> 4, 16-29 the leading dimension byte offset >> 4, 32-45 the stride dimension byte offset
/// >> 4, 49-51 the base offset (0: the tile starts on its swizzle pattern's boundary), 62-63 the
/// swizzle. `shared_address`: the operand's first byte in the shared window.
__host__ __device__ constexpr std::uint64_t encode_smem_descriptor(unsigned shared_address,
                                                                   Swizzle swizzle,
                                                                   unsigned leading_bytes,
                                                                   unsigned stride_bytes) {
  const auto field = [](unsigned bytes) { return std::uint64_t{(bytes & 0x3ffffu) >> 4}; };
  return field(shared_address) | field(leading_bytes) << 16 | field(stride_bytes) << 32 |
         descriptor_swizzle_bits(swizzle) << 62;
}

/// A descriptor whose start is `bytes` further on (a k step within a swizzled row: 32 bytes per
/// k16 of 16-bit elements): the start field is the low bits, as CUTLASS and FA3 advance it.
__host__ __device__ constexpr std::uint64_t advance_descriptor(std::uint64_t desc, unsigned bytes) {
  return desc + (bytes >> 4);
}

}  // namespace wb::ptx

#if defined(__CUDACC__)
#include "common/hopper_nvcc.cuh"
#else
#include "common/sim/hopper.hpp"
#endif
