// Backends: where a chapter's step runs.
//   cpu  - the chapter's CPU implementation (plain loops or Eigen).
//   sim  - the chapter's CUDA kernels, unmodified, compiled by the host compiler against
//          common/sim and executed on the CPU with CUDA semantics.
//   cuda - the same kernels compiled by nvcc, run on an NVIDIA GPU.
#pragma once

#include <string>
#include <string_view>

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
bool cuda_compiled();

/// True when the `cuda` backend exists and a CUDA device can be used right now.
bool cuda_available();

/// A one-line description of why `cuda_available()` is false, or the device's name.
std::string cuda_device_description();

}  // namespace wb
