// CUDA runtime error checks that name the file, the line and CUDA's own message.
#pragma once

#include <stdexcept>
#include <string>

#include <cuda_runtime_api.h>

namespace wb {

/// Thrown by WB_CUDA_CHECK; what() reads "file:line: call failed: <CUDA message>".
struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void cuda_check(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) {
    throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call +
                    " failed: " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
  }
}

}  // namespace wb

#define WB_CUDA_CHECK(call) ::wb::cuda_check((call), #call, __FILE__, __LINE__)
