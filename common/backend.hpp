// Backends: where a chapter's step runs.
//   cpu  - the chapter's CPU implementation (plain loops or Eigen).
//   sim  - the chapter's CUDA kernels, unmodified, compiled by the host compiler against
//          common/sim and executed on the CPU with CUDA semantics.
//   cuda - the same kernels compiled by nvcc, run on an NVIDIA GPU.
#pragma once

#include <string>
#include <string_view>
#include <type_traits>

#ifndef WB_HAVE_CUDA
#define WB_HAVE_CUDA 0
#endif

namespace wb {

enum class Backend { cpu, sim, cuda };

inline const char* to_string(Backend b) {
  switch (b) {
    case Backend::cpu: return "cpu";
    case Backend::sim: return "sim";
    case Backend::cuda: return "cuda";
  }
  return "?";
}

/// True when this build compiled the kernels with nvcc (the `cuda` backend exists).
inline constexpr bool kCudaCompiled = WB_HAVE_CUDA != 0;
bool cuda_compiled();

/// True when the `cuda` backend exists and a CUDA device can be used right now.
bool cuda_available();

/// A one-line description of why `cuda_available()` is false, or the device's name.
std::string cuda_device_description();

/// Why this machine cannot run sm_90a code (Hopper's wgmma, TMA, setmaxnreg: a GPU of compute
/// capability 9.0 and no other, since the architecture-specific `a` features are not carried
/// forward to later GPUs), or "" when it can.
std::string why_no_sm90a();

/// Calls `f(std::integral_constant<Backend, B>{})` with B the kernel backend `backend` (sim or
/// cuda), so code written once for both can name `Kernels<B>`. Without nvcc the cuda branch
/// is discarded at compile time: such builds link with no cuda kernels. Does nothing for cpu.
///   with_kernel_backend(backend, [&](auto b) { run(kernel_ladder<decltype(b)::value>()); });
template <typename F>
void with_kernel_backend(Backend backend, F&& f) {
  if (backend == Backend::sim) f(std::integral_constant<Backend, Backend::sim>{});
  if constexpr (kCudaCompiled) {
    if (backend == Backend::cuda) f(std::integral_constant<Backend, Backend::cuda>{});
  }
}

/// `make(std::integral_constant<Backend, B>{})` for the kernel backend `backend`, or a
/// value-initialized result for cpu (and for cuda in builds without nvcc):
///   auto ladder = select_kernel_backend(backend, [](auto b) { return kernel_ladder<decltype(b)::value>(); });
template <typename Make>
auto select_kernel_backend(Backend backend, Make&& make) {
  decltype(make(std::integral_constant<Backend, Backend::sim>{})) result{};
  with_kernel_backend(backend, [&](auto b) { result = make(b); });
  return result;
}

}  // namespace wb
