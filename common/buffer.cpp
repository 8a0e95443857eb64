#include "common/buffer.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#if WB_HAVE_CUDA
#include "common/cuda_check.hpp"
#endif

// The simulator's memcheck and initcheck (common/sim/access_runtime.hpp) learn of device
// buffers here. Weak references: wb_common does not link wb_sim (kernel libraries do), and a
// program without kernels has no simulator to tell.
namespace wb::sim::detail {
void note_device_alloc(const void* ptr, std::size_t bytes) __attribute__((weak));
void note_device_free(const void* ptr) __attribute__((weak));
void note_device_write(const void* ptr, std::size_t bytes) __attribute__((weak));
}  // namespace wb::sim::detail

namespace wb {

namespace {
template <typename F, typename... A>
void tell_simulator(F* note, A... args) {
  if (note != nullptr) note(args...);
}
#if !WB_HAVE_CUDA
[[noreturn]] void no_cuda() {
  throw std::runtime_error("the cuda backend is not compiled in (no nvcc at configure time)");
}
#endif
void check_kernel_backend(Backend backend) {
  if (backend == Backend::cpu) throw std::logic_error("a DeviceBuffer needs the sim or cuda backend");
}
}  // namespace

void throw_size_mismatch(std::size_t expected, std::size_t got) {
  throw std::length_error("DeviceBuffer holds " + std::to_string(expected) +
                          " elements, the host vector " + std::to_string(got));
}

namespace detail {

void* device_alloc(Backend backend, std::size_t bytes) {
  check_kernel_backend(backend);
  const std::size_t requested = bytes;
  if (bytes == 0) bytes = 1;  // a valid, unique pointer for empty buffers on both backends
  // A new buffer holds 0xff bytes, a NaN in every floating type, on both backends: an output
  // element a kernel forgets to write fails its comparison, where memory as allocated (often the
  // freed buffer of the rung before, holding the right answer) could let it pass.
  if (backend == Backend::cuda) {
#if WB_HAVE_CUDA
    void* ptr = nullptr;
    WB_CUDA_CHECK(cudaMalloc(&ptr, bytes));
    WB_CUDA_CHECK(cudaMemset(ptr, 0xff, bytes));
    return ptr;
#else
    no_cuda();
#endif
  }
  // 256-byte alignment, as cudaMalloc guarantees, so vectorized loads behave the same.
  void* ptr = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (ptr == nullptr) throw std::bad_alloc();
  std::memset(ptr, 0xff, bytes);
  // memcheck and initcheck in instrumented builds see exactly the requested bytes, unwritten
  // (the 0xff bytes above are no kernel's writes).
  tell_simulator(sim::detail::note_device_alloc, ptr, requested);
  return ptr;
}

void device_free(Backend backend, void* ptr) noexcept {
  if (ptr == nullptr) return;
  if (backend == Backend::cuda) {
#if WB_HAVE_CUDA
    cudaFree(ptr);  // no throw from a destructor; a sticky error resurfaces at the next check
#endif
    return;
  }
  tell_simulator(sim::detail::note_device_free, ptr);
  std::free(ptr);
}

namespace {
// cudaMemcpy in `kind`'s direction on cuda, memcpy on the simulator's heap.
void copy_bytes(Backend backend, void* dst, const void* src, std::size_t bytes, bool to_device) {
  if (bytes == 0) return;
  if (backend == Backend::cuda) {
#if WB_HAVE_CUDA
    WB_CUDA_CHECK(
        cudaMemcpy(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost));
    return;
#else
    (void)to_device;
    no_cuda();
#endif
  }
  if (to_device) tell_simulator(sim::detail::note_device_write, dst, bytes);
  std::memcpy(dst, src, bytes);
}
}  // namespace

void copy_to_device(Backend backend, void* dst, const void* src, std::size_t bytes) {
  copy_bytes(backend, dst, src, bytes, true);
}

void copy_to_host(Backend backend, void* dst, const void* src, std::size_t bytes) {
  copy_bytes(backend, dst, src, bytes, false);
}

void device_fill(Backend backend, void* dst, std::size_t bytes, unsigned char value) {
  if (bytes == 0) return;
  if (backend == Backend::cuda) {
#if WB_HAVE_CUDA
    WB_CUDA_CHECK(cudaMemset(dst, value, bytes));
    return;
#else
    no_cuda();
#endif
  }
  tell_simulator(sim::detail::note_device_write, dst, bytes);
  std::memset(dst, value, bytes);
}

}  // namespace detail
}  // namespace wb
