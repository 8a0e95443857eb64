// The CUDA dialect every chapter kernel file includes first.
//
// A chapter's `.cuh` is compiled twice, unmodified:
//   - by nvcc (the `cuda` backend), where this header brings in the CUDA runtime;
//   - by the host C++ compiler (the `sim` backend), where common/sim supplies threadIdx,
//     __syncthreads, the shuffles, atomics and intrinsics with CUDA semantics on the CPU.
// This is the only place that tells the two apart; kernels never test `__CUDACC__`.
#pragma once

#include <cstddef>

#include "common/backend.hpp"
#include "common/warp.hpp"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include "common/cuda_check.hpp"
#else
#include "common/sim/sim.hpp"
#endif

namespace wb {

#if defined(__CUDACC__)
/// The backend this translation unit's kernels are compiled for.
inline constexpr Backend kThisBackend = Backend::cuda;
#else
inline constexpr Backend kThisBackend = Backend::sim;
#endif

/// ceil(a / b) for positive integers: the number of tiles of size b that cover a. Written
/// without a + b - 1, which overflows int for a near 2^31.
__host__ __device__ constexpr int ceil_div(int a, int b) { return a / b + (a % b != 0); }

/// Adds a to p[0] and b to p[1] in global memory (p 8-byte aligned), each element atomically:
/// one vector reduction (`red.global.add.v2.f32`, CUDA's float2 atomicAdd) on sm_90 and
/// later, two scalar ones before sm_90 and in the simulator. As on the GPU, the pair is not
/// one atomic: another thread may see one element added and not yet the other.
__device__ __forceinline__ void atomic_add_pair(float* p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(p), make_float2(a, b));
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}

/// The launch's dynamic shared memory (the third launch parameter), viewed as T[].
/// CUDA spells it `extern __shared__ T name[]`, which the simulator cannot bind per launch,
/// so kernels ask for it through this one function.
template <typename T>
__device__ __forceinline__ T* dynamic_shared() {
#if defined(__CUDACC__)
  extern __shared__ __align__(16) unsigned char wb_dynamic_shared_bytes[];
  return reinterpret_cast<T*>(wb_dynamic_shared_bytes);
#else
  return reinterpret_cast<T*>(sim::dynamic_shared_bytes());
#endif
}

/// Launches `Kernel` on this translation unit's backend and checks the launch:
///   wb::launch<my_kernel>(grid, block, shared_bytes, args...);
/// On `cuda` it is `my_kernel<<<grid, block, shared_bytes>>>(args...)` followed by a launch
/// error check; on `sim` it runs every block and thread on the CPU before returning, and
/// throws wb::sim::Fault naming the kernel, block and thread when the kernel breaks a rule.
template <auto Kernel, typename... Args>
void launch(dim3 grid, dim3 block, std::size_t shared_bytes, Args... args) {
#if defined(__CUDACC__)
  Kernel<<<grid, block, shared_bytes>>>(args...);
  WB_CUDA_CHECK(cudaGetLastError());
#else
  sim::launch(sim::kernel_name<Kernel>(), Kernel, grid, block, shared_bytes, args...);
#endif
}

/// Where a kernel's blocks can run at once: the device's SMs and how many blocks of this
/// kernel (at `threads` threads and `shared_bytes` of dynamic shared memory) each SM holds
/// together. What a launcher needs to size a grid to whole waves (chapter 09's split count).
struct Residency {
  int sms;
  int blocks_per_sm;
};

/// On `cuda` the current device's SM count and the occupancy API's answer for `Kernel`; on
/// `sim` an NVIDIA H100 SXM's (132 SMs, 2048 threads, 32 blocks and 228 KiB of shared memory
/// per SM, 1 KiB of it reserved per block), registers not counted: the split a learner
/// without a GPU sees is the one an H100 would run, give or take the register limit.
template <auto Kernel>
Residency residency(int threads, std::size_t shared_bytes) {
#if defined(__CUDACC__)
  int device = 0, sms = 0, blocks = 0;
  WB_CUDA_CHECK(cudaGetDevice(&device));
  WB_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  WB_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, Kernel, threads, shared_bytes));
  return {sms, blocks};
#else
  constexpr int kSms = 132, kThreadsPerSm = 2048, kBlocksPerSm = 32;
  constexpr std::size_t kSharedPerSm = 228 * 1024, kReservedPerBlock = 1024;
  const int by_threads = kThreadsPerSm / threads;
  const int by_shared = static_cast<int>(kSharedPerSm / (shared_bytes + kReservedPerBlock));
  int blocks = by_threads < by_shared ? by_threads : by_shared;
  if (blocks > kBlocksPerSm) blocks = kBlocksPerSm;
  return {kSms, blocks};
#endif
}

/// Waits for the backend's queued work (a no-op on `sim`, which runs launches to completion).
inline void synchronize() {
#if defined(__CUDACC__)
  WB_CUDA_CHECK(cudaDeviceSynchronize());
#endif
}

}  // namespace wb
