// doctest's main for test_hopper: tests/main.cpp's, with the `cuda` suite's condition made
// Hopper's. The Hopper kernels are sm_90a code alone, which runs on a GPU of compute capability
// 9.0 and no other (the architecture-specific `a` features are not carried forward to later
// GPUs), so `--wb-require-sm90a`, which marks a run of the `cuda` suite, prints why and exits
// with 77 (reported as skipped by CTest, never as passed) with no GPU or another one.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "common/backend.hpp"

#if WB_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

constexpr int kSkipped = 77;

/// Why this machine cannot run the sm_90a kernels, or "" when it can.
std::string why_no_sm90a() {
  if (!wb::cuda_available()) return wb::cuda_device_description();
#if WB_HAVE_CUDA
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, device) != cudaSuccess)
    return "the CUDA device's compute capability could not be read";
  if (prop.major == 9 && prop.minor == 0) return "";
  return wb::cuda_device_description() +
         " is not compute capability 9.0: the Hopper kernels are built for sm_90a alone";
#else
  return "";  // not reached: without nvcc no device is available
#endif
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args;
  bool require_sm90a = false;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--wb-require-sm90a") == 0) {
      require_sm90a = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  if (require_sm90a) {
    const std::string why = why_no_sm90a();
    if (!why.empty()) {
      std::cout << "SKIPPED: " << why << '\n';
      return kSkipped;
    }
  }
  doctest::Context context(static_cast<int>(args.size()), args.data());
  return context.run();
}
