// doctest's main for every test binary of the workbook.
//
// `--wb-require-gpu` marks a run of the `cuda` suite: with no usable GPU it prints why and
// exits with 77, which CTest reports as skipped (SKIP_RETURN_CODE), never as passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstring>
#include <iostream>
#include <vector>

#include "common/backend.hpp"

namespace {
constexpr int kSkipped = 77;
}

int main(int argc, char** argv) {
  std::vector<char*> args;
  bool require_gpu = false;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--wb-require-gpu") == 0) {
      require_gpu = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  if (require_gpu && !wb::cuda_available()) {
    std::cout << "SKIPPED: " << wb::cuda_device_description() << '\n';
    return kSkipped;
  }
  doctest::Context context(static_cast<int>(args.size()), args.data());
  return context.run();
}
