// Aligned storage for the WMMA tests (tests/sim/test_wmma.cpp, test_wmma_faults.cpp).
#pragma once

#include <cstddef>
#include <cstdlib>

namespace wb::test {

/// 256-byte aligned storage, as cudaMalloc and wb::DeviceBuffer give (WMMA needs 32 bytes).
template <typename T>
struct Aligned {
  explicit Aligned(std::size_t n)
      : p(static_cast<T*>(std::aligned_alloc(256, (n * sizeof(T) + 255) / 256 * 256))), size(n) {}
  ~Aligned() { std::free(p); }
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
  T& operator[](std::size_t i) { return p[i]; }
  T* p;
  std::size_t size;
};

}  // namespace wb::test
