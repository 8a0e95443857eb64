// The PTX wrappers of common/ptx.cuh for the simulator: mma.sync.m16n8k16, ldmatrix .x4 (and
// .trans), cp.async with its groups. Same names and arguments as the nvcc side, plus the call
// site (default arguments) for fault messages.
//
// mma and ldmatrix are warp-wide like WMMA (wmma.hpp): all 32 lanes must execute the same call
// (same line, same variant), or the launch faults; each lane hands its registers (or, for
// ldmatrix, its row address) to the warp's register file in wb_sim, and the last lane to arrive
// does the warp's work. The register layouts are the PTX ISA's (common/ptx.cuh's header;
// ptx_runtime.hpp has them as functions).
//
// cp.async: a copy is queued for its thread when issued and performed by that thread when a
// cp_async_wait<N>() covers its group (all but the N newest committed groups), not before:
// shared memory keeps its old bytes until then, so a kernel that reads without waiting reads
// stale data (or unwritten bytes, which an instrumented run reports), and a kernel that waits
// but does not __syncthreads before other threads read is a race in race mode, as on a GPU.
// Copies still queued when the block ends are dropped (a GPU would complete them, but no
// thread could read them without a wait).
#pragma once

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

/// ldmatrix's body: every lane hands in its row address; the last lane reads the 32 rows of
/// 16 bytes (here, in the kernel's translation unit, so memcheck, initcheck and race mode see
/// the reads) and the runtime deals them out as fragments.
inline void ldmatrix(std::uint32_t (&r)[4], const void* row, bool trans, Site site) {
  const auto address = reinterpret_cast<std::uintptr_t>(row);
  const std::uint32_t mine[2] = {static_cast<std::uint32_t>(address),
                                 static_cast<std::uint32_t>(address >> 32)};
  ldmatrix_check_row(row, site);
  wmma_put(kWmmaSlotA, mine, 2);
  const AlignedCall call{trans ? "ldmatrix.x4.trans" : "ldmatrix.x4", nullptr, 0, trans ? 1 : 0};
  if (warp_aligned(call, site)) {
    const void* rows[kLdmatrixRows];
    ldmatrix_row_addresses(rows);
    std::uint16_t elements[kLdmatrixRows][kLdmatrixRowElements];
    begin_tile_elements();  // checked one by one, counted as the warp's request below
    for (int l = 0; l < kLdmatrixRows; ++l) {
      const auto* p = static_cast<const std::uint16_t*>(rows[l]);
      for (int e = 0; e < kLdmatrixRowElements; ++e) elements[l][e] = p[e];
    }
    end_tile_elements();
    on_ldmatrix(rows, site);
    ldmatrix_deal(elements, trans);
  }
  wmma_get(kWmmaSlotOut, r, 4);
}

}  // namespace wb::sim::detail

namespace wb::ptx {

/// Four 8x8 matrices of 16-bit elements from shared memory (common/ptx.cuh).
inline void ldmatrix_x4(std::uint32_t (&r)[4], const void* row, const char* file = __builtin_FILE(),
                        int line = __builtin_LINE()) {
  wb::sim::detail::ldmatrix(r, row, false, wb::sim::detail::Site{file, line});
}

/// ldmatrix_x4 with each matrix transposed.
inline void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* row,
                              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  wb::sim::detail::ldmatrix(r, row, true, wb::sim::detail::Site{file, line});
}

/// Queues a 16-byte copy from `src` (global) to `dst` (shared); zeros when !full.
inline void cp_async_16(void* dst, const void* src, bool full, const char* file = __builtin_FILE(),
                        int line = __builtin_LINE()) {
  wb::sim::detail::cp_async_issue(dst, src, full, wb::sim::detail::Site{file, line});
}

/// Closes this thread's group of the copies queued since the last commit.
inline void cp_async_commit() { wb::sim::detail::cp_async_commit(); }

/// Performs this thread's queued copies of every committed group but the N newest.
template <int N>
void cp_async_wait() {
  static_assert(N >= 0 && N <= 7, "cp.async.wait_group takes 0 to 7");
  using wb::sim::detail::CpAsyncCopy;
  struct alignas(16) Chunk {
    std::uint32_t w[4];
  };
  CpAsyncCopy copy;
  while (wb::sim::detail::cp_async_next_landing(N, copy)) {
    auto* dst = static_cast<Chunk*>(copy.dst);
    *dst = copy.full ? *static_cast<const Chunk*>(copy.src) : Chunk{};
  }
}

}  // namespace wb::ptx
