#include "common/backend.hpp"

#if WB_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace wb {

bool cuda_compiled() { return WB_HAVE_CUDA != 0; }

bool cuda_available() {
#if WB_HAVE_CUDA
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
#else
  return false;
#endif
}

std::string cuda_device_description() {
#if WB_HAVE_CUDA
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess)
    return std::string("no usable CUDA GPU (CUDA runtime: ") + cudaGetErrorString(status) + ")";
  if (count == 0) return "no CUDA device found";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "CUDA device 0 (properties unknown)";
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) +
         ", " + std::to_string(prop.multiProcessorCount) + " SMs)";
#else
  return "the cuda backend is not compiled in (configured without nvcc)";
#endif
}

std::string why_no_sm90a() {
  if (!cuda_available()) return cuda_device_description();
#if WB_HAVE_CUDA
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, device) != cudaSuccess)
    return "the CUDA device's compute capability could not be read";
  if (prop.major == 9 && prop.minor == 0) return "";
  return cuda_device_description() +
         " is not compute capability 9.0: the Hopper kernels are built for sm_90a alone";
#else
  return "";  // not reached: without nvcc no device is available
#endif
}

}  // namespace wb
