// The Hopper wrappers of common/hopper.cuh for the simulator: mbarrier, TMA, named barriers,
// setmaxnreg, fence.proxy.async and wgmma. Same names and arguments as the nvcc side
// (common/hopper_nvcc.cuh), plus the call site (default arguments) for fault messages; the
// work is done in wb_sim (hopper_runtime.hpp, hopper.cpp), which docs/simulator.md describes.
//
// What the emulation makes visible:
//   - an mbarrier wait that can never complete (wrong parity, an arrival short, expect_tx bytes
//     no copy brings) is a deadlock report naming the kernel, block, thread and line, and why;
//   - a TMA box lands when a thread observes its mbarrier phase complete, not before: until then
//     its destination holds 0xff bytes (NaN), so a read without the wait reads NaN; a box that
//     brings more bytes than the phase expects is a fault;
//   - a wgmma's accumulators hold NaN from its issue until the wgmma_wait_group that covers it;
//     its shared-memory operands are read at that wait; a wgmma issued after a wait without a
//     wgmma_fence, or by fewer than the warpgroup's 4 warps, is a fault;
//   - race mode: the async proxy (TMA and wgmma) is a thread of its own to ThreadSanitizer, so
//     shared memory written by ordinary stores and read by wgmma or a TMA store without
//     fence_proxy_async between is reported as a race.
// TMA destinations and wgmma operands live in the block's dynamic shared memory here (the
// simulator's shared window); mbarriers may be anywhere in shared memory.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "common/sim/half.hpp"
#include "common/sim/hopper_runtime.hpp"
#include "common/sim/runtime.hpp"

namespace wb::ptx {

using wb::sim::detail::Site;

// ---- mbarrier ----------------------------------------------------------------------------------

inline void mbarrier_init(std::uint64_t* bar, unsigned arrivals,
                          const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  wb::sim::detail::mbarrier_init(bar, arrivals, Site{file, line});
}

inline std::uint64_t mbarrier_arrive(std::uint64_t* bar, const char* file = __builtin_FILE(),
                                     int line = __builtin_LINE()) {
  return wb::sim::detail::mbarrier_arrive(bar, 0, Site{file, line});
}

inline std::uint64_t mbarrier_arrive_expect_tx(std::uint64_t* bar, unsigned bytes,
                                               const char* file = __builtin_FILE(),
                                               int line = __builtin_LINE()) {
  return wb::sim::detail::mbarrier_arrive(bar, bytes, Site{file, line});
}

inline bool mbarrier_test_wait_parity(std::uint64_t* bar, unsigned parity,
                                      const char* file = __builtin_FILE(),
                                      int line = __builtin_LINE()) {
  return wb::sim::detail::mbarrier_wait(bar, parity, "mbarrier_test_wait_parity",
                                        Site{file, line});
}

inline bool mbarrier_try_wait_parity(std::uint64_t* bar, unsigned parity,
                                     const char* file = __builtin_FILE(),
                                     int line = __builtin_LINE()) {
  return wb::sim::detail::mbarrier_wait(bar, parity, "mbarrier_try_wait_parity",
                                        Site{file, line});
}

inline void mbarrier_wait_parity(std::uint64_t* bar, unsigned parity,
                                 const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  while (!wb::sim::detail::mbarrier_wait(bar, parity, "mbarrier_wait_parity", Site{file, line})) {
  }
}

// ---- TMA ---------------------------------------------------------------------------------------

/// A tensor map's 128 bytes, 64-byte aligned as CUtensorMap is; here they hold a SimTensorMap.
struct alignas(64) TensorMap {
  unsigned char bytes[128];
};
static_assert(sizeof(wb::sim::detail::SimTensorMap) <= sizeof(TensorMap),
              "the simulator's tensor map fits in a TensorMap");

/// The host's encoding of a tiled tensor map (cuTensorMapEncodeTiled): `sizes` in elements,
/// innermost first; `strides` in bytes for dimensions 1..rank-1; `box` in elements. Throws
/// std::invalid_argument naming the limit a bad argument breaks.
template <typename T>
void encode_tensor_map(TensorMap& map, const T* global, int rank, const std::uint64_t* sizes,
                       const std::uint64_t* strides, const std::uint32_t* box, Swizzle swizzle) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16> ||
                    std::is_same_v<T, float>,
                "encode_tensor_map takes __half, __nv_bfloat16 or float");
  wb::sim::detail::SimTensorMap m{};
  const unsigned swizzled = swizzle == Swizzle::none ? 0u : swizzle_bytes(swizzle);
  wb::sim::detail::encode_sim_tensor_map(m, global, sizeof(T), rank, sizes, strides, box,
                                         swizzled);
  std::memset(map.bytes, 0, sizeof map.bytes);
  std::memcpy(map.bytes, &m, sizeof m);
}

inline void tma_load_2d(void* dst, const TensorMap* map, int x, int y, std::uint64_t* bar,
                        const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  const int coords[2] = {x, y};
  wb::sim::detail::tma_load(dst, map, coords, 2, bar, Site{file, line});
}

inline void tma_load_3d(void* dst, const TensorMap* map, int x, int y, int z, std::uint64_t* bar,
                        const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  const int coords[3] = {x, y, z};
  wb::sim::detail::tma_load(dst, map, coords, 3, bar, Site{file, line});
}

inline void tma_store_2d(const TensorMap* map, int x, int y, const void* src,
                         const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  const int coords[2] = {x, y};
  wb::sim::detail::tma_store(map, coords, 2, src, Site{file, line});
}

inline void tma_store_3d(const TensorMap* map, int x, int y, int z, const void* src,
                         const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  const int coords[3] = {x, y, z};
  wb::sim::detail::tma_store(map, coords, 3, src, Site{file, line});
}

inline void tma_store_commit() { wb::sim::detail::tma_store_commit(); }

template <int N>
void tma_store_wait(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  static_assert(N >= 0 && N <= 63, "cp.async.bulk.wait_group takes 0 to 63");
  wb::sim::detail::tma_store_wait(N, Site{file, line});
}

inline void fence_proxy_async() { wb::sim::detail::fence_proxy_async(); }

// ---- Named barriers and setmaxnreg ----------------------------------------------------------------

inline void named_barrier_sync(unsigned id, unsigned threads, const char* file = __builtin_FILE(),
                               int line = __builtin_LINE()) {
  wb::sim::detail::named_barrier(id, threads, /*wait=*/true, Site{file, line});
}

inline void named_barrier_arrive(unsigned id, unsigned threads,
                                 const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  wb::sim::detail::named_barrier(id, threads, /*wait=*/false, Site{file, line});
}

template <int N>
void setmaxnreg_inc(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  wb::sim::detail::setmaxnreg(true, N, Site{file, line});
}

template <int N>
void setmaxnreg_dec(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  wb::sim::detail::setmaxnreg(false, N, Site{file, line});
}

// ---- wgmma -------------------------------------------------------------------------------------

inline std::uint64_t make_smem_descriptor(const void* tile, Swizzle swizzle,
                                          unsigned leading_bytes, unsigned stride_bytes,
                                          const char* file = __builtin_FILE(),
                                          int line = __builtin_LINE()) {
  return wb::sim::detail::make_smem_descriptor(
      tile, static_cast<unsigned>(descriptor_swizzle_bits(swizzle)), leading_bytes, stride_bytes,
      Site{file, line});
}

inline void wgmma_fence(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  wb::sim::detail::wgmma_fence(Site{file, line});
}

inline void wgmma_commit_group(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  wb::sim::detail::wgmma_commit_group(Site{file, line});
}

template <int N>
void wgmma_wait_group(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0 to 7");
  wb::sim::detail::wgmma_wait_group(N, Site{file, line});
}

/// Nothing to do here: the simulator's accumulators are memory, read and written in program
/// order (under nvcc it keeps the compiler from moving their reads across wgmma_wait_group).
template <int N>
void wgmma_fence_operand(float (&)[N]) {}

namespace detail {
template <typename T, int N>
constexpr void check_wgmma_shape() {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>,
                "wgmma here takes __half or __nv_bfloat16 operands");
  static_assert(N >= 8 && N <= 256 && N % 8 == 0,
                "wgmma m64nNk16: N is a multiple of 8 from 8 to 256");
}
template <typename T>
constexpr wb::sim::WmmaType wgmma_type() {
  return std::is_same_v<T, __half> ? wb::sim::WmmaType::f16 : wb::sim::WmmaType::bf16;
}
}  // namespace detail

/// D (64 x N) = A B (+ D when `accumulate`), A and B from shared memory (descriptors).
template <typename T, int N, Major A = Major::k, Major B = Major::k>
void wgmma_ss(float (&d)[N / 2], std::uint64_t a, std::uint64_t b, bool accumulate,
              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  detail::check_wgmma_shape<T, N>();
  wb::sim::detail::wgmma_mma_async(
      wb::sim::detail::WgmmaCall{detail::wgmma_type<T>(), N, a, b, nullptr, static_cast<int>(A),
                                 static_cast<int>(B), accumulate, d},
      Site{file, line});
}

/// The same with A from registers (4 per thread, mma.m16n8k16's A layout per warp).
template <typename T, int N, Major B = Major::k>
void wgmma_rs(float (&d)[N / 2], const std::uint32_t (&a)[4], std::uint64_t b, bool accumulate,
              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  detail::check_wgmma_shape<T, N>();
  wb::sim::detail::wgmma_mma_async(
      wb::sim::detail::WgmmaCall{detail::wgmma_type<T>(), N, 0, b, a, 0, static_cast<int>(B),
                                 accumulate, d},
      Site{file, line});
}

}  // namespace wb::ptx
