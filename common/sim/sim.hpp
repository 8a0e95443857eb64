// The CUDA dialect for host compilers: what a kernel file sees instead of cuda_runtime.h
// when it is compiled for the `sim` backend (common/kernel.cuh includes this header).
//
// Kernels compile unchanged: the execution-space keywords become nothing (or `static` for
// __shared__, `inline` for __forceinline__), threadIdx/blockIdx/blockDim/gridDim read the
// running fiber's state, and barriers, shuffles, votes and atomics have CUDA's semantics.
// Barriers and collectives record the file:line they are called from (default arguments
// __builtin_FILE()/__builtin_LINE()), so a fault names the line in the kernel source.
//
// What this header does not provide (a compile error, never a silent difference):
// `extern __shared__` arrays (use wb::dynamic_shared<T>() from common/kernel.cuh), texture
// and surface objects, cooperative groups, dynamic parallelism. The 16-bit float types
// (cuda_fp16.h, cuda_bf16.h) are in half.hpp, nvcuda::wmma (mma.h) in wmma.hpp.
#pragma once

// Standard headers that spell `__attribute__((__noinline__))` must be read before
// __noinline__ becomes a macro below (libstdc++'s <memory> does).
#include <math.h>  // the C math functions in the global namespace, as CUDA declares them

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#include "common/sim/half.hpp"
#include "common/sim/runtime.hpp"
#include "common/sim/types.hpp"
#include "common/sim/wmma.hpp"

// ---- Execution-space and storage keywords -------------------------------------------------

#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
// A kernel parameter whose address the kernel takes (a TMA tensor map): CUDA makes it the
// launch's own copy; each thread's copy of the parameters serves as well here.
#define __grid_constant__
// A GNU attribute, not alignas: CUDA code writes `__shared__ __align__(32) half tile[...]`,
// where alignas could not follow `static`.
#define __align__(n) __attribute__((aligned(n)))
// One array per kernel (a function-local static), shared by the threads of the running block;
// blocks run one after another, so one copy is enough. AddressSanitizer pads statics, so an
// overrun of a __shared__ array is reported.
#define __shared__ static
// __restrict__ is a GCC and Clang keyword already.

// ---- Built-in variables ---------------------------------------------------------------------

#define threadIdx (static_cast<const uint3&>(::wb_sim_current.thread))
#define blockIdx (static_cast<const uint3&>(::wb_sim_current.block))
#define blockDim (static_cast<const dim3&>(::wb_sim_current.block_dim))
#define gridDim (static_cast<const dim3&>(::wb_sim_current.grid_dim))
inline constexpr int warpSize = wb::kWarpSize;

// ---- Barriers -------------------------------------------------------------------------------

inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using namespace wb::sim::detail;
  block_barrier(BarrierOp::sync, 1, Site{file, line});
}
inline int __syncthreads_count(int predicate, const char* file = __builtin_FILE(),
                               int line = __builtin_LINE()) {
  using namespace wb::sim::detail;
  return block_barrier(BarrierOp::count, predicate, Site{file, line});
}
inline int __syncthreads_and(int predicate, const char* file = __builtin_FILE(),
                             int line = __builtin_LINE()) {
  using namespace wb::sim::detail;
  return block_barrier(BarrierOp::all, predicate, Site{file, line});
}
inline int __syncthreads_or(int predicate, const char* file = __builtin_FILE(),
                            int line = __builtin_LINE()) {
  using namespace wb::sim::detail;
  return block_barrier(BarrierOp::any, predicate, Site{file, line});
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
  wb::sim::detail::warp_barrier(mask, wb::sim::detail::Site{file, line});
}

/// Memory fences order this thread's accesses; the simulator runs one fiber at a time, so they
/// only need to keep the compiler from moving accesses across them.
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// ---- Warp shuffles and votes ------------------------------------------------------------------

namespace wb::sim::detail {
template <typename T>
T shuffle(ShuffleMode mode, unsigned mask, T var, int lane_or_delta, int width, const char* name,
          Site site) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8,
                "__shfl_*_sync takes a 1-, 2-, 4- or 8-byte value");
  std::uint64_t bits = 0;
  std::memcpy(&bits, &var, sizeof(T));
  bits = warp_shuffle(mode, mask, bits, lane_or_delta, width, name, site);
  T out;
  std::memcpy(static_cast<void*>(&out), &bits, sizeof(T));
  return out;
}
}  // namespace wb::sim::detail

/// The value of `var` held by lane `srcLane % width` of the caller's `width`-lane segment.
template <typename T>
T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize,
              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using namespace wb::sim::detail;
  return shuffle(ShuffleMode::idx, mask, var, srcLane, width, "__shfl_sync", Site{file, line});
}
/// The value of lane (lane - delta); a lane whose source falls before its segment keeps `var`.
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                 const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using namespace wb::sim::detail;
  return shuffle(ShuffleMode::up, mask, var, static_cast<int>(delta), width, "__shfl_up_sync",
                 Site{file, line});
}
/// The value of lane (lane + delta); a lane whose source falls past its segment keeps `var`.
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                   const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using namespace wb::sim::detail;
  return shuffle(ShuffleMode::down, mask, var, static_cast<int>(delta), width, "__shfl_down_sync",
                 Site{file, line});
}
/// The value of lane (lane ^ laneMask); a source in a later segment gives the caller's `var`.
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize,
                  const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using namespace wb::sim::detail;
  return shuffle(ShuffleMode::bfly, mask, var, laneMask, width, "__shfl_xor_sync",
                 Site{file, line});
}

inline unsigned __ballot_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  using namespace wb::sim::detail;
  return warp_vote(VoteOp::ballot, mask, predicate, Site{file, line});
}
inline int __any_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  using namespace wb::sim::detail;
  return static_cast<int>(warp_vote(VoteOp::any, mask, predicate, Site{file, line}));
}
inline int __all_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  using namespace wb::sim::detail;
  return static_cast<int>(warp_vote(VoteOp::all, mask, predicate, Site{file, line}));
}

// ---- Atomics ----------------------------------------------------------------------------------
// Relaxed read-modify-writes, as CUDA's atomics are; the GCC builtins also tell
// ThreadSanitizer that these accesses are atomic, so contention is not reported as a race.

namespace wb::sim::detail {
/// Atomically replaces *address by op(*address) and returns the old value (a CAS loop).
template <typename T, typename Op>
T atomic_update(T* address, Op op) {
  T old;
  __atomic_load(address, &old, __ATOMIC_RELAXED);
  T desired = op(old);
  while (!__atomic_compare_exchange(address, &old, &desired, false, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED)) {
    desired = op(old);
  }
  return old;
}
}  // namespace wb::sim::detail

// clang-format off
#define WB_SIM_FETCH_OP(name, builtin, T) \
  inline T name(T* address, T val) { return builtin(address, val, __ATOMIC_RELAXED); }
WB_SIM_FETCH_OP(atomicAdd, __atomic_fetch_add, int)
WB_SIM_FETCH_OP(atomicAdd, __atomic_fetch_add, unsigned int)
WB_SIM_FETCH_OP(atomicAdd, __atomic_fetch_add, unsigned long long)
WB_SIM_FETCH_OP(atomicSub, __atomic_fetch_sub, int)
WB_SIM_FETCH_OP(atomicSub, __atomic_fetch_sub, unsigned int)
WB_SIM_FETCH_OP(atomicAnd, __atomic_fetch_and, int)
WB_SIM_FETCH_OP(atomicAnd, __atomic_fetch_and, unsigned int)
WB_SIM_FETCH_OP(atomicAnd, __atomic_fetch_and, unsigned long long)
WB_SIM_FETCH_OP(atomicOr, __atomic_fetch_or, int)
WB_SIM_FETCH_OP(atomicOr, __atomic_fetch_or, unsigned int)
WB_SIM_FETCH_OP(atomicOr, __atomic_fetch_or, unsigned long long)
WB_SIM_FETCH_OP(atomicXor, __atomic_fetch_xor, int)
WB_SIM_FETCH_OP(atomicXor, __atomic_fetch_xor, unsigned int)
WB_SIM_FETCH_OP(atomicXor, __atomic_fetch_xor, unsigned long long)
WB_SIM_FETCH_OP(atomicExch, __atomic_exchange_n, int)
WB_SIM_FETCH_OP(atomicExch, __atomic_exchange_n, unsigned int)
WB_SIM_FETCH_OP(atomicExch, __atomic_exchange_n, unsigned long long)
#undef WB_SIM_FETCH_OP

#define WB_SIM_UPDATE_OP(name, T, expr) \
  inline T name(T* address, T val) { \
    return wb::sim::detail::atomic_update(address, [val](T old) -> T { return expr; }); \
  }
WB_SIM_UPDATE_OP(atomicAdd, float, old + val)
WB_SIM_UPDATE_OP(atomicAdd, double, old + val)
WB_SIM_UPDATE_OP(atomicExch, float, (static_cast<void>(old), val))
WB_SIM_UPDATE_OP(atomicMax, int, old > val ? old : val)
WB_SIM_UPDATE_OP(atomicMax, unsigned int, old > val ? old : val)
WB_SIM_UPDATE_OP(atomicMax, long long, old > val ? old : val)
WB_SIM_UPDATE_OP(atomicMax, unsigned long long, old > val ? old : val)
WB_SIM_UPDATE_OP(atomicMin, int, old < val ? old : val)
WB_SIM_UPDATE_OP(atomicMin, unsigned int, old < val ? old : val)
WB_SIM_UPDATE_OP(atomicMin, long long, old < val ? old : val)
WB_SIM_UPDATE_OP(atomicMin, unsigned long long, old < val ? old : val)
// atomicInc/atomicDec wrap at `val`, exactly as CUDA defines them.
WB_SIM_UPDATE_OP(atomicInc, unsigned int, old >= val ? 0u : old + 1u)
WB_SIM_UPDATE_OP(atomicDec, unsigned int, (old == 0u || old > val) ? val : old - 1u)
#undef WB_SIM_UPDATE_OP
// clang-format on

template <typename T>
T atomicCAS(T* address, T compare, T val) {
  static_assert(std::is_same_v<T, int> || std::is_same_v<T, unsigned int> ||
                    std::is_same_v<T, unsigned long long> || std::is_same_v<T, unsigned short>,
                "CUDA's atomicCAS takes int, unsigned int, unsigned long long or unsigned short");
  __atomic_compare_exchange_n(address, &compare, val, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;  // the old value whether or not the swap happened
}

// ---- Math and bit intrinsics -----------------------------------------------------------------
// The fast-math intrinsics (__expf, __fdividef, ...) are the accurate host functions here: the
// GPU's approximations differ in the last bits (see docs/simulator.md).

inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fadd_rn(float x, float y) { return x + y; }
inline float __fsub_rn(float x, float y) { return x - y; }
inline float __fmul_rn(float x, float y) { return x * y; }
inline float __fdiv_rn(float x, float y) { return x / y; }
inline float __fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }

// CUDA's min/max overloads for device code (the mixed ones convert as CUDA's do).
// clang-format off
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline unsigned int min(int a, unsigned int b) { return min(static_cast<unsigned int>(a), b); }
inline unsigned int max(int a, unsigned int b) { return max(static_cast<unsigned int>(a), b); }
inline unsigned int min(unsigned int a, int b) { return min(a, static_cast<unsigned int>(b)); }
inline unsigned int max(unsigned int a, int b) { return max(a, static_cast<unsigned int>(b)); }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(float a, double b) { return fmin(a, b); }
inline double max(float a, double b) { return fmax(a, b); }
inline double min(double a, float b) { return fmin(a, b); }
inline double max(double a, float b) { return fmax(a, b); }
inline unsigned int umin(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int umax(unsigned int a, unsigned int b) { return a > b ? a : b; }
// clang-format on

namespace wb::sim::detail {
template <typename To, typename From>
To bit_cast(From from) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast between types of different sizes");
  To to;
  std::memcpy(&to, &from, sizeof(To));
  return to;
}
}  // namespace wb::sim::detail

inline float __int_as_float(int x) { return wb::sim::detail::bit_cast<float>(x); }
inline int __float_as_int(float x) { return wb::sim::detail::bit_cast<int>(x); }
inline float __uint_as_float(unsigned int x) { return wb::sim::detail::bit_cast<float>(x); }
inline unsigned int __float_as_uint(float x) { return wb::sim::detail::bit_cast<unsigned>(x); }
inline double __longlong_as_double(long long x) { return wb::sim::detail::bit_cast<double>(x); }
inline long long __double_as_longlong(double x) {
  return wb::sim::detail::bit_cast<long long>(x);
}

inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __clzll(long long x) {
  return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x));
}
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned int __brev(unsigned int x) {
  unsigned int r = 0;
  for (int i = 0; i < 32; ++i, x >>= 1) r = (r << 1) | (x & 1u);
  return r;
}

/// Read-only data cache load: an ordinary load on the CPU.
template <typename T>
T __ldg(const T* p) {
  return *p;
}
