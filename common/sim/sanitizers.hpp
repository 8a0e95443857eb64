// The sanitizer hooks the simulator calls, as weak symbols: they resolve to the runtime of
// whichever sanitizer the program is linked with and are null otherwise. So one wb_sim
// library, compiled without -fsanitize=thread, serves both ordinary binaries and the race
// (ThreadSanitizer) variants of the test programs.
#pragma once

#include <cstddef>

extern "C" {
// AddressSanitizer (sanitizer/common_interface_defs.h, sanitizer/asan_interface.h).
void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, std::size_t size)
    __attribute__((weak));
void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old,
                                     std::size_t* size_old) __attribute__((weak));
void __asan_unpoison_memory_region(const volatile void* addr, std::size_t size)
    __attribute__((weak));
// Any sanitizer: called after a report, before the program dies.
void __sanitizer_set_death_callback(void (*callback)()) __attribute__((weak));
// ThreadSanitizer (sanitizer/tsan_interface.h).
void* __tsan_get_current_fiber() __attribute__((weak));
void* __tsan_create_fiber(unsigned flags) __attribute__((weak));
void __tsan_destroy_fiber(void* fiber) __attribute__((weak));
void __tsan_switch_to_fiber(void* fiber, unsigned flags) __attribute__((weak));
void __tsan_set_fiber_name(void* fiber, const char* name) __attribute__((weak));
void __tsan_acquire(void* addr) __attribute__((weak));
void __tsan_release(void* addr) __attribute__((weak));
// Accesses made on the simulator's behalf by code ThreadSanitizer does not instrument (the
// async proxy's copies, common/sim/hopper.cpp).
void __tsan_read_range(void* addr, unsigned long size) __attribute__((weak));
void __tsan_write_range(void* addr, unsigned long size) __attribute__((weak));
// The running fiber's memory accesses are not checked between begin and end (its
// synchronization still is): the simulator's own bookkeeping in uninstrumented code.
void __tsan_ignore_thread_begin() __attribute__((weak));
void __tsan_ignore_thread_end() __attribute__((weak));
}

namespace wb::sim::detail {

/// __tsan_switch_to_fiber_no_sync: a switch creates no happens-before edge.
inline constexpr unsigned kTsanSwitchNoSync = 1u << 0;

inline bool asan_active() { return __sanitizer_start_switch_fiber != nullptr; }
inline bool tsan_active() { return __tsan_switch_to_fiber != nullptr; }

}  // namespace wb::sim::detail
