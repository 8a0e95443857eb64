// The PTX wrappers of common/ptx.cuh for the simulator: mma.sync.m16n8k16, ldmatrix .x4 (and
// .trans), cp.async with its groups. Same names and arguments as the nvcc side, plus the call
// site (default arguments) for fault messages.
//
// mma and ldmatrix are warp-wide like WMMA (wmma.hpp): all 32 lanes must execute the same call
// (same line, same variant), or the launch faults; each lane hands its registers (for ldmatrix,
// its row address and the row's 16 bytes) to the warp's register file in wb_sim, and the last
// lane to arrive does the warp's work. The register layouts are the PTX ISA's (common/ptx.cuh's
// header; ptx_runtime.hpp has them as functions). Like WMMA, ldmatrix synchronizes registers,
// not memory: rows other lanes wrote need a __syncwarp or __syncthreads first.
//
// Memory is read where a GPU's sanitizers would blame it: each lane reads its own ldmatrix row,
// and a cp.async reads its source when it is issued, in the issuing thread, inlined into the
// kernel's call. So memcheck, initcheck and race mode name the lane and the kernel's line that
// handed over the address, and profiles count a cp.async's global bytes at its own line.
//
// cp.async: a copy is queued for its thread when issued and written to shared memory by that
// thread when a cp_async_wait<N>() covers its group (all but the N newest committed groups), not
// before. In between, its destination holds 0xff bytes (NaN as float, __half or bf16): a GPU may
// land the copy at any moment of that window, so nothing read there is defined. A kernel that
// reads without waiting reads NaN (and bytes no instrumented code wrote, which an instrumented
// run reports); one that refills a buffer while another thread still reads it, with no barrier
// between the reads and the issue, hands that thread NaN, and race mode reports the issue's write
// (it writes the 0xff bytes where ThreadSanitizer sees them); one that waits but does not
// __syncthreads before other threads read is a race at the wait's write, as on a GPU. Copies
// still queued when the block ends are dropped (a GPU would complete them, but no thread could
// read them without a wait).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "common/sim/access_runtime.hpp"
#include "common/sim/half.hpp"
#include "common/sim/ptx_runtime.hpp"
#include "common/sim/runtime.hpp"

namespace wb::ptx {

/// d = a b + c over the warp's m16n8k16 product (common/ptx.cuh); d may be c.
template <typename T>
void mma_m16n8k16(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2],
                  const float (&c)[4], const char* file = __builtin_FILE(),
                  int line = __builtin_LINE()) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>,
                "mma_m16n8k16 takes __half or __nv_bfloat16");
  using namespace wb::sim::detail;
  const Site site{file, line};
  std::uint32_t c_bits[4];
  __builtin_memcpy(c_bits, c, sizeof c_bits);
  wmma_put(kWmmaSlotA, a, 4);
  wmma_put(kWmmaSlotB, b, 2);
  wmma_put(kWmmaSlotC, c_bits, 4);
  const AlignedCall call{"mma.sync.m16n8k16", nullptr, 0, -1};
  if (warp_aligned(call, site))
    ptx_mma(std::is_same_v<T, __half> ? wb::sim::WmmaType::f16 : wb::sim::WmmaType::bf16, site);
  std::uint32_t d_bits[4];
  wmma_get(kWmmaSlotOut, d_bits, 4);
  __builtin_memcpy(d, d_bits, sizeof d_bits);
}

}  // namespace wb::ptx

namespace wb::sim::detail {

/// 16 bytes: an ldmatrix row, a cp.async chunk.
struct alignas(16) Chunk16 {
  std::uint32_t w[4];
};

/// This lane's ldmatrix row into words[0..3], read by this lane (its own access: memcheck and
/// initcheck name it); checked, not counted: on_ldmatrix counts the warp's request.
[[gnu::always_inline]] inline void ldmatrix_row(const void* row, std::uint32_t* words) {
  begin_tile_elements();
  const Chunk16 chunk = *static_cast<const Chunk16*>(row);
  end_tile_elements();
  for (int i = 0; i < 4; ++i) words[i] = chunk.w[i];
}

/// ldmatrix's body: every lane hands in its row address and the row it read; the last lane
/// counts the warp's request and the runtime deals the rows out as fragments.
[[gnu::always_inline]] inline void ldmatrix(std::uint32_t (&r)[4], const void* row, bool trans,
                                            Site site) {
  ldmatrix_check_row(row, site);
  const auto address = reinterpret_cast<std::uintptr_t>(row);
  std::uint32_t mine[kLdmatrixSlotWords];  // the row's address, then its 16 bytes
  mine[0] = static_cast<std::uint32_t>(address);
  mine[1] = static_cast<std::uint32_t>(address >> 32);
  ldmatrix_row(row, mine + 2);
  wmma_put(kWmmaSlotA, mine, kLdmatrixSlotWords);
  const AlignedCall call{trans ? "ldmatrix.x4.trans" : "ldmatrix.x4", nullptr, 0, trans ? 1 : 0};
  if (warp_aligned(call, site)) {
    const void* rows[kLdmatrixRows];
    ldmatrix_row_addresses(rows);
    on_ldmatrix(rows, site);
    ldmatrix_deal(trans);
  }
  wmma_get(kWmmaSlotOut, r, 4);
}

}  // namespace wb::sim::detail

namespace wb::ptx {

/// Four 8x8 matrices of 16-bit elements from shared memory (common/ptx.cuh).
[[gnu::always_inline]] inline void ldmatrix_x4(std::uint32_t (&r)[4], const void* row,
                                               const char* file = __builtin_FILE(),
                                               int line = __builtin_LINE()) {
  wb::sim::detail::ldmatrix(r, row, false, wb::sim::detail::Site{file, line});
}

/// ldmatrix_x4 with each matrix transposed.
[[gnu::always_inline]] inline void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* row,
                                                     const char* file = __builtin_FILE(),
                                                     int line = __builtin_LINE()) {
  wb::sim::detail::ldmatrix(r, row, true, wb::sim::detail::Site{file, line});
}

/// Queues a 16-byte copy from `src` (global) to `dst` (shared); zeros when !full. The source is
/// read now, by this thread at this line (a GPU reads it at some point before the wait; a kernel
/// may not change it in between).
[[gnu::always_inline]] inline void cp_async_16(void* dst, const void* src, bool full,
                                               const char* file = __builtin_FILE(),
                                               int line = __builtin_LINE()) {
  using namespace wb::sim::detail;
  cp_async_check(dst, src, full, Site{file, line});
  const Chunk16 chunk = full ? *static_cast<const Chunk16*>(src) : Chunk16{};
  cp_async_issue(dst, chunk.w);  // the destination is 0xff bytes until the copy lands
#if defined(WB_SIM_RACE_MODE)
  // The same 0xff bytes again, where ThreadSanitizer sees them: a GPU writes the destination at
  // some moment between the issue and the wait, so race mode writes it at both ends. A copy into
  // a buffer that another thread still reads with no barrier in between is a race at the issue.
  auto* words = static_cast<std::uint32_t*>(dst);
  for (int i = 0; i < 4; ++i) words[i] = 0xffffffffu;
#endif
}

/// Closes this thread's group of the copies queued since the last commit.
inline void cp_async_commit() {
  wb::sim::detail::cp_async_commit();
}

/// 2^x as ex2.approx.ftz.f32 (common/ptx.cuh): exp2f with the instruction's flushes to zero, a
/// subnormal x read as 0 and a subnormal result written as 0. The GPU's approximation is a few
/// ulp of float from this; the kernels' tolerances are set by the 16-bit rounding of P~ after
/// it, 2^13 times coarser.
inline float exp2_approx(float x) {
  if (std::fpclassify(x) == FP_SUBNORMAL) x = 0.f;
  const float y = std::exp2(x);
  return std::fpclassify(y) == FP_SUBNORMAL ? 0.f : y;
}

/// Writes this thread's queued copies of every committed group but the N newest.
template <int N>
[[gnu::always_inline]] inline void cp_async_wait() {
  static_assert(N >= 0 && N <= 7, "cp.async.wait_group takes 0 to 7");
  using namespace wb::sim::detail;
  CpAsyncCopy copy;
  while (cp_async_next_landing(N, copy)) {
    Chunk16 chunk;
    for (int i = 0; i < 4; ++i) chunk.w[i] = copy.data[i];
    *static_cast<Chunk16*>(copy.dst) = chunk;
  }
}

}  // namespace wb::ptx
