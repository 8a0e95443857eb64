// The instrumentation's entry points: the functions GCC's -fsanitize=thread calls for every
// load, store and atomic of the code it compiles, answered by the simulator instead of
// ThreadSanitizer's runtime. Linked (library wb_sim_hooks) only into instrumented twins,
// whose kernel libraries are compiled with
//   -fsanitize=thread --param tsan-instrument-func-entry-exit=0
// and linked *without* -fsanitize=thread. This file itself is compiled without it.
//
// Each hook passes its return address, which lies in the instrumented code right after the
// access: that is how a fault or a profile line finds its source line. Atomics are performed
// here (sequentially consistent, which is at least what CUDA's relaxed atomics promise) and
// checked as a read and a write.
#include <cstddef>
#include <cstdint>

#include "common/sim/access_runtime.hpp"

namespace {

using wb::sim::detail::on_access;

inline void read(const void* p, std::size_t n, const void* pc) { on_access(p, n, false, pc); }
inline void write(const void* p, std::size_t n, const void* pc) { on_access(p, n, true, pc); }

}  // namespace

#define WB_HERE __builtin_return_address(0)

extern "C" {

void __tsan_init() { wb::sim::detail::set_instrumented(); }
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void** p, void*) { write(p, sizeof(void*), WB_HERE); }
void __tsan_vptr_read(void** p) { read(p, sizeof(void*), WB_HERE); }

#define WB_SIZED_HOOKS(n)                                                                   \
  void __tsan_read##n(void* p) { read(p, n, WB_HERE); }                                    \
  void __tsan_write##n(void* p) { write(p, n, WB_HERE); }                                  \
  void __tsan_unaligned_read##n(void* p) { read(p, n, WB_HERE); }                          \
  void __tsan_unaligned_write##n(void* p) { write(p, n, WB_HERE); }                        \
  void __tsan_volatile_read##n(void* p) { read(p, n, WB_HERE); }                           \
  void __tsan_volatile_write##n(void* p) { write(p, n, WB_HERE); }                         \
  void __tsan_unaligned_volatile_read##n(void* p) { read(p, n, WB_HERE); }                 \
  void __tsan_unaligned_volatile_write##n(void* p) { write(p, n, WB_HERE); }               \
  void __tsan_read##n##_pc(void* p, void* pc) { read(p, n, pc); }                          \
  void __tsan_write##n##_pc(void* p, void* pc) { write(p, n, pc); }
WB_SIZED_HOOKS(1)
WB_SIZED_HOOKS(2)
WB_SIZED_HOOKS(4)
WB_SIZED_HOOKS(8)
WB_SIZED_HOOKS(16)
#undef WB_SIZED_HOOKS

void __tsan_read_range(void* p, unsigned long n) { read(p, n, WB_HERE); }
void __tsan_write_range(void* p, unsigned long n) { write(p, n, WB_HERE); }

void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

#define WB_ATOMIC_HOOKS(bits, T)                                                            \
  T __tsan_atomic##bits##_load(const volatile T* p, int) {                                  \
    read(const_cast<const T*>(p), sizeof(T), WB_HERE);                                      \
    return __atomic_load_n(p, __ATOMIC_SEQ_CST);                                            \
  }                                                                                         \
  void __tsan_atomic##bits##_store(volatile T* p, T v, int) {                               \
    write(const_cast<T*>(p), sizeof(T), WB_HERE);                                           \
    __atomic_store_n(p, v, __ATOMIC_SEQ_CST);                                               \
  }                                                                                         \
  T __tsan_atomic##bits##_exchange(volatile T* p, T v, int) {                               \
    read(const_cast<T*>(p), sizeof(T), WB_HERE);                                            \
    write(const_cast<T*>(p), sizeof(T), WB_HERE);                                           \
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);                                     \
  }                                                                                         \
  WB_ATOMIC_FETCH(bits, T, add)                                                             \
  WB_ATOMIC_FETCH(bits, T, sub)                                                             \
  WB_ATOMIC_FETCH(bits, T, and)                                                             \
  WB_ATOMIC_FETCH(bits, T, or)                                                              \
  WB_ATOMIC_FETCH(bits, T, xor)                                                             \
  WB_ATOMIC_FETCH(bits, T, nand)                                                            \
  int __tsan_atomic##bits##_compare_exchange_strong(volatile T* p, T* expected, T v, int,   \
                                                    int) {                                  \
    read(const_cast<T*>(p), sizeof(T), WB_HERE);                                            \
    write(const_cast<T*>(p), sizeof(T), WB_HERE);                                           \
    return __atomic_compare_exchange_n(p, expected, v, false, __ATOMIC_SEQ_CST,             \
                                       __ATOMIC_SEQ_CST);                                   \
  }                                                                                         \
  int __tsan_atomic##bits##_compare_exchange_weak(volatile T* p, T* expected, T v, int mo,    \
                                                  int fmo) {                                \
    return __tsan_atomic##bits##_compare_exchange_strong(p, expected, v, mo, fmo);          \
  }                                                                                         \
  T __tsan_atomic##bits##_compare_exchange_val(volatile T* p, T expected, T v, int, int) {  \
    read(const_cast<T*>(p), sizeof(T), WB_HERE);                                            \
    write(const_cast<T*>(p), sizeof(T), WB_HERE);                                           \
    __atomic_compare_exchange_n(p, &expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
    return expected;                                                                        \
  }
#define WB_ATOMIC_FETCH(bits, T, op)                                                        \
  T __tsan_atomic##bits##_fetch_##op(volatile T* p, T v, int) {                             \
    read(const_cast<T*>(p), sizeof(T), WB_HERE);                                            \
    write(const_cast<T*>(p), sizeof(T), WB_HERE);                                           \
    return __atomic_fetch_##op(p, v, __ATOMIC_SEQ_CST);                                     \
  }
WB_ATOMIC_HOOKS(8, std::uint8_t)
WB_ATOMIC_HOOKS(16, std::uint16_t)
WB_ATOMIC_HOOKS(32, std::uint32_t)
WB_ATOMIC_HOOKS(64, std::uint64_t)
#undef WB_ATOMIC_FETCH
#undef WB_ATOMIC_HOOKS

}  // extern "C"
