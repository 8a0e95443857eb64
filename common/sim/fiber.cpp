// Fibers: stacks, the context switch, and the sanitizer annotations around it.
#include "common/sim/fiber.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "common/sim/sanitizers.hpp"

#if defined(WB_SIM_FORCE_UCONTEXT) || !(defined(__x86_64__) || defined(__aarch64__))
#define WB_SIM_UCONTEXT 1
#include <ucontext.h>
#else
#define WB_SIM_UCONTEXT 0
#endif

namespace wb::sim::detail {
void fiber_start(Fiber* fiber);
}

#if !WB_SIM_UCONTEXT
// wb_sim_switch(save, to): saves the callee-saved registers on the current stack, stores the
// stack pointer in *save, loads `to` and restores the registers saved there. A fresh stack is
// prepared so that this "returns" into wb_sim_fiber_trampoline, which calls fn(arg) with fn
// and arg taken from two of the restored registers.
extern "C" void wb_sim_switch(void** save, void* to);
extern "C" void wb_sim_fiber_trampoline();

#if defined(__x86_64__)
// System V AMD64: rbx, rbp, r12-r15 are callee-saved. Fresh frame (low to high):
// r15 r14 r13=fn r12=arg rbx rbp=0 return=trampoline.
asm(R"(
    .text
    .p2align 4
    .globl wb_sim_switch
    .hidden wb_sim_switch
    .type wb_sim_switch, @function
wb_sim_switch:
    .cfi_startproc
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .cfi_endproc
    .size wb_sim_switch, .-wb_sim_switch

    .p2align 4
    .globl wb_sim_fiber_trampoline
    .hidden wb_sim_fiber_trampoline
    .type wb_sim_fiber_trampoline, @function
wb_sim_fiber_trampoline:
    .cfi_startproc
    .cfi_undefined rip
    movq %r12, %rdi
    callq *%r13
    ud2
    .cfi_endproc
    .size wb_sim_fiber_trampoline, .-wb_sim_fiber_trampoline
)");
namespace {
constexpr int kFrameWords = 7;
constexpr int kArgSlot = 3, kFnSlot = 2, kFramePointerSlot = 5, kReturnSlot = 6;
constexpr std::size_t kFrameBytes = 72;  // 7 words, placed so the trampoline's call is aligned
}  // namespace
#elif defined(__aarch64__)
// AAPCS64: x19-x29, x30 (link register), d8-d15 are callee-saved. Fresh frame:
// x19=arg x20=fn ... x29=0 x30=trampoline, then d8-d15.
asm(R"(
    .text
    .p2align 4
    .globl wb_sim_switch
    .hidden wb_sim_switch
    .type wb_sim_switch, %function
wb_sim_switch:
    .cfi_startproc
    sub sp, sp, #160
    stp x19, x20, [sp, #0]
    stp x21, x22, [sp, #16]
    stp x23, x24, [sp, #32]
    stp x25, x26, [sp, #48]
    stp x27, x28, [sp, #64]
    stp x29, x30, [sp, #80]
    stp d8, d9, [sp, #96]
    stp d10, d11, [sp, #112]
    stp d12, d13, [sp, #128]
    stp d14, d15, [sp, #144]
    mov x9, sp
    str x9, [x0]
    mov sp, x1
    ldp x19, x20, [sp, #0]
    ldp x21, x22, [sp, #16]
    ldp x23, x24, [sp, #32]
    ldp x25, x26, [sp, #48]
    ldp x27, x28, [sp, #64]
    ldp x29, x30, [sp, #80]
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    add sp, sp, #160
    ret
    .cfi_endproc
    .size wb_sim_switch, .-wb_sim_switch

    .p2align 4
    .globl wb_sim_fiber_trampoline
    .hidden wb_sim_fiber_trampoline
    .type wb_sim_fiber_trampoline, %function
wb_sim_fiber_trampoline:
    .cfi_startproc
    .cfi_undefined x30
    mov x0, x19
    blr x20
    brk #0
    .cfi_endproc
    .size wb_sim_fiber_trampoline, .-wb_sim_fiber_trampoline
)");
namespace {
constexpr int kFrameWords = 20;
constexpr int kArgSlot = 0, kFnSlot = 1, kFramePointerSlot = 10, kReturnSlot = 11;
constexpr std::size_t kFrameBytes = 160;
}  // namespace
#endif
#endif  // !WB_SIM_UCONTEXT

namespace wb::sim::detail {
namespace {

// The scheduler's side of every switch. Launches are serialized (runtime.cpp), so one set.
#if WB_SIM_UCONTEXT
ucontext_t g_scheduler_context;
#else
void* g_scheduler_sp = nullptr;
#endif
void* g_scheduler_tsan = nullptr;
void* g_scheduler_fake_stack = nullptr;
const void* g_scheduler_stack_bottom = nullptr;
std::size_t g_scheduler_stack_bytes = 0;

std::size_t page_bytes() {
  static const std::size_t bytes = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return bytes;
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "wb::sim: %s\n", what);
  std::abort();
}

#if WB_SIM_UCONTEXT
void ucontext_entry(unsigned hi, unsigned lo) {
  auto bits = (static_cast<std::uintptr_t>(hi) << 32) | static_cast<std::uintptr_t>(lo);
  fiber_start(reinterpret_cast<Fiber*>(bits));
}
#else
void trampoline_target(void* fiber) { fiber_start(static_cast<Fiber*>(fiber)); }
#endif

}  // namespace

std::size_t fiber_stack_bytes() {
  static const std::size_t bytes = [] {
    constexpr std::size_t kDefaultKib = 256;
    std::size_t kib = kDefaultKib;
    if (const char* env = std::getenv("WB_SIM_STACK_KIB")) {
      char* end = nullptr;
      unsigned long long v = std::strtoull(env, &end, 10);
      if (end == env || *end != '\0' || v < 16 || v > 1024 * 1024) {
        die("WB_SIM_STACK_KIB must be a number of KiB between 16 and 1048576");
      }
      kib = static_cast<std::size_t>(v);
    }
    return kib * 1024;
  }();
  return bytes;
}

Fiber::Fiber(std::size_t stack_bytes, std::size_t index) {
  const std::size_t page = page_bytes();
  // Stacks are equal-sized mappings, so without an offset every fiber's hot top frames would
  // sit at the same address modulo the stack size and compete for the same cache sets; a
  // block's barrier touches all of them in turn. Each fiber starts lower by its own multiple
  // of a cache line (up to 64 KiB, added to the mapping so the usable stack keeps its size).
  constexpr std::size_t kLine = 64, kColors = 1024;
  const std::size_t color = (index * 17 % kColors) * kLine;
  stack_bytes_ = (stack_bytes + kColors * kLine + page - 1) / page * page;
  mapping_bytes_ = stack_bytes_ + page;  // + one guard page below the stack
  void* m = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) die("cannot map a fiber stack (mmap failed)");
  mapping_ = static_cast<char*>(m);
  if (mprotect(mapping_, page, PROT_NONE) != 0) die("cannot protect a fiber stack's guard page");
  stack_lo_ = mapping_ + page;
  top_ = stack_lo_ + stack_bytes_ - color;
#if WB_SIM_UCONTEXT
  context_ = new ucontext_t;
#endif
  if (tsan_active()) tsan_ = __tsan_create_fiber(0);
}

Fiber::~Fiber() {
  if (tsan_ != nullptr) __tsan_destroy_fiber(tsan_);
#if WB_SIM_UCONTEXT
  delete static_cast<ucontext_t*>(context_);
#endif
  munmap(mapping_, mapping_bytes_);
}

void Fiber::set_name(const char* name) {
  if (tsan_ == nullptr) return;
  std::snprintf(name_, sizeof name_, "%s", name);
  __tsan_set_fiber_name(tsan_, name_);
}

void Fiber::restart(void (*entry)(void*), void* arg) {
  entry_ = entry;
  arg_ = arg;
  if (finished_frames_ != nullptr && __asan_unpoison_memory_region != nullptr) {
    // The frames that were live when the last run finished (this fiber's entry functions)
    // never returned, so AddressSanitizer still has their redzones poisoned: clear them.
    __asan_unpoison_memory_region(finished_frames_,
                                  static_cast<std::size_t>(top_ - finished_frames_));
  }
  finished_frames_ = nullptr;
  if (abandoned_) {
    // The stack still holds the frames of a kernel thread that never finished: clear
    // AddressSanitizer's poisoned redzones of those frames, and give ThreadSanitizer a fresh
    // fiber (the old one's shadow call stack would otherwise keep growing).
    if (__asan_unpoison_memory_region != nullptr) {
      __asan_unpoison_memory_region(stack_lo_, stack_bytes_);
    }
    asan_fake_stack_ = nullptr;
    if (tsan_ != nullptr) {
      __tsan_destroy_fiber(tsan_);
      tsan_ = __tsan_create_fiber(0);
      if (name_[0] != '\0') __tsan_set_fiber_name(tsan_, name_);
    }
    abandoned_ = false;
  }
#if WB_SIM_UCONTEXT
  auto* uc = static_cast<ucontext_t*>(context_);
  if (getcontext(uc) != 0) die("getcontext failed");
  uc->uc_stack.ss_sp = stack_lo_;
  uc->uc_stack.ss_size = static_cast<std::size_t>(top_ - stack_lo_);
  uc->uc_link = nullptr;
  auto bits = reinterpret_cast<std::uintptr_t>(this);
  makecontext(uc, reinterpret_cast<void (*)()>(ucontext_entry), 2,
              static_cast<unsigned>(bits >> 32), static_cast<unsigned>(bits & 0xffffffffu));
#else
  auto* frame = reinterpret_cast<void**>(top_ - kFrameBytes);  // top_ is 64-byte aligned
  for (int i = 0; i < kFrameWords; ++i) frame[i] = nullptr;
  frame[kArgSlot] = this;
  frame[kFnSlot] = reinterpret_cast<void*>(&trampoline_target);
  frame[kFramePointerSlot] = nullptr;  // ends gdb's and the unwinder's walk
  frame[kReturnSlot] = reinterpret_cast<void*>(&wb_sim_fiber_trampoline);
  sp_ = frame;
#endif
}

void Fiber::resume() {
  if (asan_active()) {
    __sanitizer_start_switch_fiber(&g_scheduler_fake_stack, stack_lo_, stack_bytes_);
  }
  if (tsan_ != nullptr) {
    if (g_scheduler_tsan == nullptr) g_scheduler_tsan = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(tsan_, kTsanSwitchNoSync);
  }
#if WB_SIM_UCONTEXT
  if (swapcontext(&g_scheduler_context, static_cast<ucontext_t*>(context_)) != 0) {
    die("swapcontext failed");
  }
#else
  wb_sim_switch(&g_scheduler_sp, sp_);
#endif
  if (asan_active()) __sanitizer_finish_switch_fiber(g_scheduler_fake_stack, nullptr, nullptr);
}

void Fiber::suspend(bool finished) {
  if (finished) {
    // Everything above this frame stays as it is until restart() clears it (with a margin
    // for the frames of the switch itself).
    constexpr std::size_t kMargin = 4096;
    auto* frame = static_cast<char*>(__builtin_frame_address(0));
    finished_frames_ = frame - kMargin > stack_lo_ ? frame - kMargin : stack_lo_;
  }
  if (asan_active()) {
    __sanitizer_start_switch_fiber(finished ? nullptr : &asan_fake_stack_,
                                   g_scheduler_stack_bottom, g_scheduler_stack_bytes);
  }
  if (tsan_ != nullptr) __tsan_switch_to_fiber(g_scheduler_tsan, kTsanSwitchNoSync);
#if WB_SIM_UCONTEXT
  if (swapcontext(static_cast<ucontext_t*>(context_), &g_scheduler_context) != 0) {
    die("swapcontext failed");
  }
#else
  wb_sim_switch(&sp_, g_scheduler_sp);
#endif
  if (asan_active()) __sanitizer_finish_switch_fiber(asan_fake_stack_, nullptr, nullptr);
}

void fiber_start(Fiber* fiber) {
  if (asan_active()) {
    __sanitizer_finish_switch_fiber(nullptr, &g_scheduler_stack_bottom, &g_scheduler_stack_bytes);
  }
  fiber->entry_(fiber->arg_);
  die("a fiber's entry function returned instead of suspending");
}

std::vector<Fiber*>& fiber_pool(std::size_t at_least) {
  // Never destroyed: fibers may still be referenced by sanitizer runtimes at exit.
  static auto* pool = new std::vector<Fiber*>;
  while (pool->size() < at_least) {
    pool->push_back(new Fiber(fiber_stack_bytes(), pool->size()));
  }
  return *pool;
}

}  // namespace wb::sim::detail
