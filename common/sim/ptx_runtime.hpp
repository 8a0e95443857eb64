// The simulator's side of the PTX wrappers (common/sim/ptx.hpp): the m16n8k16 product and
// ldmatrix's dealing of rows into fragments over the warp's register file (shared with WMMA,
// wmma_runtime.hpp), and the per-thread queues of cp.async. Compiled into wb_sim, which race
// mode does not instrument: moving registers between lanes is invisible to ThreadSanitizer,
// while every memory access stays in the kernel's translation unit.
#pragma once

#include <cstdint>

#include "common/sim/runtime.hpp"
#include "common/sim/wmma_runtime.hpp"

namespace wb::sim {

/// The operands of mma.m16n8k16 and the element a lane's register holds.
enum class MmaOperand { a, b, c };

/// Where half `half` (0: low, 1: high; always 0 for C) of register `reg` of lane `lane` lies
/// in its matrix: A is 16x16 (m, k), B 16x8 (k, n), C and D 16x8 (m, n). With g = lane / 4,
/// t = lane % 4 (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"):
///   A: row g + 8 (reg % 2), column 2t + half + 8 (reg / 2)
///   B: row 2t + half + 8 reg, column g
///   C: row g + 8 (reg / 2), column 2t + reg % 2
WmmaCoord mma_coord(MmaOperand operand, unsigned lane, int reg, int half);

namespace detail {

/// The lane that completed mma.m16n8k16: D = A B + C for the warp, from every lane's A (4
/// registers), B (2) and C (4 floats) slots into its out slot (4 floats). Products are exact in
/// float; each D(m, n) is C(m, n) plus the 16 products added in k order, rounding after each
/// addition (as wmma_mma).
void ptx_mma(WmmaType ab, Site site);

/// ldmatrix .x4: 32 row addresses (lane l: row l % 8 of matrix l / 8), 8 elements each. Each
/// lane's slot A holds its row's address (2 words) and the row it read (4 words).
inline constexpr int kLdmatrixRows = 32;
inline constexpr int kLdmatrixSlotWords = 6;
/// Faults unless `row` is 16-byte aligned, as ldmatrix requires.
void ldmatrix_check_row(const void* row, Site site);
/// The row addresses the warp's lanes handed in (slot A of each).
void ldmatrix_row_addresses(const void* (&rows)[kLdmatrixRows]);
/// Deals the 32 rows the lanes read out: register j of lane l is matrix j's (row l / 4, columns
/// 2 (l % 4) and + 1), or with `trans` its (rows 2 (l % 4) and + 1, column l / 4); into every
/// lane's out slot.
void ldmatrix_deal(bool trans);

/// One queued cp.async of 16 bytes: its destination and the bytes it will write there.
struct CpAsyncCopy {
  void* dst = nullptr;
  std::uint32_t data[4] = {};
};
/// Faults unless dst and, when `full`, src are 16-byte aligned, as cp.async requires.
void cp_async_check(const void* dst, const void* src, bool full, Site site);
/// Queues a copy of `data` to `dst` for the running thread, in its open (uncommitted) group.
void cp_async_issue(void* dst, const std::uint32_t (&data)[4]);
/// Closes the running thread's open group.
void cp_async_commit();
/// Takes the running thread's oldest queued copy if its group is committed and older than the
/// `keep` newest committed groups; false when there is none.
bool cp_async_next_landing(int keep, CpAsyncCopy& copy);
/// A block starts: every thread's queue is empty again.
void cp_async_block_begin();

}  // namespace detail
}  // namespace wb::sim
