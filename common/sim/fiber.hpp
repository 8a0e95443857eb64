// Fibers for the simulator: one stack and saved context per CUDA thread of a block.
//
// The scheduler (on the launching OS thread's own stack) resumes a fiber, which runs until it
// suspends itself; there is no preemption. Switching is a hand-written save/restore of the
// callee-saved registers on x86-64 and AArch64 (a few nanoseconds, no system call), with a
// ucontext fallback elsewhere. Every switch is announced to AddressSanitizer and
// ThreadSanitizer when the program runs under them (detected at run time, see sanitizers.hpp),
// so neither reports false positives on the foreign stacks.
#pragma once

#include <cstddef>
#include <vector>

namespace wb::sim::detail {

/// One fiber: an mmap'd stack with a guard page below it, and its saved context.
/// Fibers are pooled and reused by every block and launch; a fiber is restarted from the
/// top of its stack for each CUDA thread it runs.
class Fiber {
 public:
  /// `index` (the fiber's place in the pool) staggers where its stack starts, see fiber.cpp.
  Fiber(std::size_t stack_bytes, std::size_t index);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  /// Makes the next resume() run entry(arg) from the top of the stack.
  void restart(void (*entry)(void*), void* arg);
  /// Scheduler side: runs the fiber until it calls suspend(); returns then.
  void resume();
  /// Fiber side: returns to the scheduler. With `finished`, the fiber will not be resumed
  /// before the next restart() (its sanitizer state is released).
  void suspend(bool finished);
  /// The fiber was dropped while suspended mid-kernel (after a fault): restart() must
  /// clear the stale sanitizer state its stack still carries.
  void abandon() { abandoned_ = true; }
  /// The ThreadSanitizer fiber (nullptr when not running under TSan).
  void* tsan_fiber() const { return tsan_; }
  /// The usable stack, [stack_lo(), stack_hi()): a kernel thread's local memory.
  const char* stack_lo() const { return stack_lo_; }
  const char* stack_hi() const { return stack_lo_ + stack_bytes_; }
  /// Names the fiber in ThreadSanitizer reports (no-op without TSan).
  void set_name(const char* name);

  struct Start;  // what the first switch into a fresh stack runs

 private:
  void* sp_ = nullptr;  // saved stack pointer while switched out (asm switch)
  void* context_ = nullptr;  // ucontext_t* (fallback switch only)
  char* mapping_ = nullptr;
  std::size_t mapping_bytes_ = 0;
  char* stack_lo_ = nullptr;  // lowest usable byte, just above the guard page
  std::size_t stack_bytes_ = 0;
  char* top_ = nullptr;  // where a run starts: below the stack's end by a per-fiber offset
  void* tsan_ = nullptr;
  void* asan_fake_stack_ = nullptr;
  bool abandoned_ = false;
  char* finished_frames_ = nullptr;  // lowest address of the frames a finished run left behind
  void (*entry_)(void*) = nullptr;
  void* arg_ = nullptr;
  char name_[64] = {};

  friend void fiber_start(Fiber* fiber);
};

/// The fiber stack size: WB_SIM_STACK_KIB (KiB) from the environment, default 256 KiB.
std::size_t fiber_stack_bytes();

/// The pool of fibers: grows to the largest block seen, never shrinks.
std::vector<Fiber*>& fiber_pool(std::size_t at_least);

}  // namespace wb::sim::detail
