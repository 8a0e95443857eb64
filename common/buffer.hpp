// RAII buffers for kernel inputs and outputs on either kernel backend.
//
// Host data lives in std::vector. A DeviceBuffer owns memory that a kernel of its backend
// can read: cudaMalloc'd memory for `cuda`, ordinary heap memory for `sim` (the simulator's
// "device" is the CPU, so AddressSanitizer guards it like any allocation).
#pragma once

#include <cstddef>
#include <vector>

#include "common/backend.hpp"

namespace wb {

namespace detail {
void* device_alloc(Backend backend, std::size_t bytes);
void device_free(Backend backend, void* ptr) noexcept;
void copy_to_device(Backend backend, void* dst, const void* src, std::size_t bytes);
void copy_to_host(Backend backend, void* dst, const void* src, std::size_t bytes);
void device_fill(Backend backend, void* dst, std::size_t bytes, unsigned char value);
}  // namespace detail

/// `count` elements of T in the memory of `backend` (sim or cuda). Move-only.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer(Backend backend, std::size_t count)
      : backend_(backend), count_(count),
        data_(static_cast<T*>(detail::device_alloc(backend, count * sizeof(T)))) {}

  /// Allocates and uploads `host`.
  DeviceBuffer(Backend backend, const std::vector<T>& host) : DeviceBuffer(backend, host.size()) {
    upload(host);
  }

  ~DeviceBuffer() { detail::device_free(backend_, data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : backend_(other.backend_), count_(other.count_), data_(other.data_) {
    other.data_ = nullptr;
    other.count_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }
  Backend backend() const { return backend_; }

  void upload(const std::vector<T>& host) {
    check_size(host.size());
    detail::copy_to_device(backend_, data_, host.data(), bytes());
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    detail::copy_to_host(backend_, host.data(), data_, bytes());
    return host;
  }
  void fill_zero() { detail::device_fill(backend_, data_, bytes(), 0); }
  /// Back to the 0xff bytes a new buffer holds (a NaN in every floating type): an output a
  /// kernel leaves unwritten then reads as NaN, not as what the kernel run before it wrote.
  void poison() { detail::device_fill(backend_, data_, bytes(), 0xff); }

 private:
  void check_size(std::size_t n) const;

  Backend backend_;
  std::size_t count_;
  T* data_;
};

void throw_size_mismatch(std::size_t expected, std::size_t got);

template <typename T>
void DeviceBuffer<T>::check_size(std::size_t n) const {
  if (n != count_) throw_size_mismatch(count_, n);
}

}  // namespace wb
