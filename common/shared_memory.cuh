// Dynamic shared memory beyond the default 48 KiB, on both kernel backends: how much one
// block may opt in to on this backend's device, and the opt-in itself.
//
// A launch may use up to 48 KiB of dynamic shared memory as is; more needs the kernel's
// opt-in first, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
// bytes), up to the device's cudaDevAttrMaxSharedMemoryPerBlockOptin (227 KiB on sm_90,
// 163 KiB on sm_80). The simulator enforces the same rules with sm_90's numbers, so a kernel
// that forgets to opt in fails there exactly as it would on the GPU. Include after (or
// instead of) common/kernel.cuh, in a kernel file.
#pragma once

#include <cstddef>

#include "common/kernel.cuh"
#include "common/shared_memory.hpp"

namespace wb {

/// The most dynamic shared memory one block may opt in to: the current device's
/// cudaDevAttrMaxSharedMemoryPerBlockOptin on `cuda`, sm_90's 227 KiB on `sim`. A kernel with
/// static __shared__ arrays may opt in to that much less.
inline std::size_t max_dynamic_shared_bytes_optin() {
#if defined(__CUDACC__)
  int device = 0;
  WB_CUDA_CHECK(cudaGetDevice(&device));
  int bytes = 0;
  WB_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return static_cast<std::size_t>(bytes);
#else
  return sim::kMaxDynamicSharedBytesOptIn;
#endif
}

/// Lets later launches of `Kernel` use up to `bytes` of dynamic shared memory (the opt-in);
/// throws when `bytes` exceeds what the device allows.
template <auto Kernel>
void allow_dynamic_shared_bytes(std::size_t bytes) {
#if defined(__CUDACC__)
  WB_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes)));
#else
  sim::set_max_dynamic_shared_bytes(Kernel, bytes, sim::kernel_name<Kernel>());
#endif
}

/// Launches `Kernel` with `bytes` of dynamic shared memory, opting in first where that is more
/// than the 48 KiB a launch may use as is.
template <auto Kernel, typename... Args>
void launch_opted_in(dim3 grid, dim3 block, std::size_t bytes, Args... args) {
  if (bytes > kDefaultDynamicSharedBytes) allow_dynamic_shared_bytes<Kernel>(bytes);
  launch<Kernel>(grid, block, bytes, args...);
}

}  // namespace wb
