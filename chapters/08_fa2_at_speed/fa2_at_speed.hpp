// Chapter 08: FlashAttention-2 at speed. The same FA2 as chapter 06 (its CPU step is this
// chapter's), made fast one idea per rung; every rung is a file of its own, proven equal to the
// rung before (rungs 2 to 4 are one kernel, mma_kernel.cuh, with the fragments each reads). The
// ideas (fa2_at_speed.md derives each):
//   rungs/1_fa2_tensor_core.cuh  chapter 06's tensor-core kernel (wmma, S~ and P~ through shared
//                  memory), where the ladder starts
//   rungs/2_fa2_mma.cuh  mma.sync.m16n8k16 with S~ kept in registers: S's accumulator fragment
//                  is P~'s A fragment after a rounding, no shared memory between the products
//                  eq. (1)
//   rungs/3_fa2_ldmatrix.cuh  fragments from shared memory by ldmatrix .x4 (.trans for V) eq. (2)
//   rungs/4_fa2_swizzle.cuh  tiles stored with 16-byte chunks XOR-swizzled instead of padded
//                  rows  eq. (3)
//   rungs/5_fa2_cp_async.cuh  K/V tile j + 1 copied by cp.async while tile j is computed  eq. (4)
//   rungs/6_fa2_scheduled.cuh  FA2's schedule: Br = 128 rows over 8 warps, exp2 with scale
//                  log2(e) folded in, the causal mask on diagonal tiles only, heaviest blocks
//                  first  eqs. (5), (6)
//   rungs/7_fa2_register_blocked.cuh  Br = 128 rows over 4 warps of 32: every K or V fragment
//                  read from shared memory feeds two mma instead of one; Q's fragments are read
//                  from shared memory at each tile (registers hold the second row tile's O)
//                  eq. (7)
// What the rungs share: the tiles' layouts (tile_layout.hpp), the tile and fragment loads
// (fast_tiles.cuh), the warp's products, online softmax, re-pack of eq. (1) and epilogue
// (warp_tile.cuh), what every kernel does around its loop (fast_block.cuh), the kernel of rungs
// 2 to 4, whose fragments are its template parameter (mma_kernel.cuh), the double-buffered loop
// of rungs 5 to 7 (kv_pipeline.cuh), the launch of a kernel (fast_launch.cuh), and their limits,
// traffic and facts (below).
#pragma once

#include <cstdint>

#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "chapters/08_fa2_at_speed/tile_layout.hpp"
#include "common/backend.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"

namespace wb::ch08 {

// ------------------------------------------------------------------------------------------
// The bank map: one ldmatrix in each layout of eq. (3) (bank_map_kernel.cuh)
// ------------------------------------------------------------------------------------------

/// The layouts of the bank-map launch (Kernels::ldmatrix_bank_map), on a tile of kBankMapColumns.
enum class BankLayout { unpadded, padded, swizzled };
inline constexpr int kBankMapColumns = 64;
inline constexpr int kBankMapRows = 16;  // one A fragment's rows

/// The shared-memory bank (of 32, 4 bytes wide) that element (row, col) of a 16-bit tile with
/// Layout starts in.
template <typename Layout>
int first_bank(int row, int col) {
  constexpr int kElementBytes = 2, kBankBytes = 4, kBanks = 32;
  return Layout::offset(row, col) * kElementBytes / kBankBytes % kBanks;
}

/// The chapter's launch that is not a rung.
template <Backend B>
struct Kernels {
  /// bank_map_kernel.cuh: one warp stores a 16 x 64 fp16 tile whose element (r, c) holds
  /// r * 64 + c in `layout`, then loads the A fragment of its first 16 columns by one ldmatrix
  /// .x4 (eq. 2) into `fragments` (32 lanes x 4 registers, device memory): the launch whose
  /// bank use `ch08 --profile` records for the page's bank map.
  static void ldmatrix_bank_map(BankLayout layout, std::uint32_t* fragments);
};

// ------------------------------------------------------------------------------------------
// The kernel ladder: one rung per file of rungs/ (its kernel, launcher and record)
// ------------------------------------------------------------------------------------------
//
// Every rung of this chapter takes fp16 or bf16, d = 64 or 128, q, k, v and o 16-byte aligned
// (its launcher checks). Of its AttentionArgs: q (bh, lq, d); k, v (bh, lk, d); o (bh, lq, d)
// in `a.dtype`; lse (bh, lq) float; tiles_visited nullptr or (bh, ceil(lq / Br)) ints, the K/V
// tiles each block loaded.

/// What every rung of this chapter takes (the 16-byte alignment is checked by its launcher).
inline RungLimits fast_limits() {
  return attention_limits({Dtype::fp16, Dtype::bf16}, 0, {64, 128}, ch04::kMaxBatchHeads,
                          /*causal=*/true, kWritesO | kWritesLse);
}

/// What a rung with the scale folded into exp2 takes (eq. 5): fast_limits and a positive scale.
inline RungLimits folded_scale_limits() {
  RungLimits l = fast_limits();
  l.positive_scale = true;
  return l;
}

/// What every rung of this chapter moves: chapter 06's per-Q-tile traffic with kBr query rows
/// and Bc = kKeys keys (Q once, K and V once per visited tile, O and logsumexp once).
template <int kBr>
Traffic fast_traffic(const AttentionArgs& a) {
  return ch06::fa2_tiles_traffic(a, kBr, kKeys);
}

/// The tiles of a rung with kBr query rows per block, by kKeys keys, whatever the head
/// dimension (its record's facts: the CPU step runs with them in the tests; they decide which
/// K/V tiles the causal mask skips).
template <int kBr>
TileShape fast_tiles(int) {
  return {kBr, kKeys};
}

/// The facts of a rung with kBr query rows per block: its tiles; P~ rounded to the 16-bit type
/// for P~ V (eq. 1); every shared-memory request conflict-free (eqs. 2, 3: padded rows or the
/// swizzle).
template <int kBr>
RungFacts fast_facts() {
  RungFacts f;
  f.tiles = &fast_tiles<kBr>;
  f.rounds_p = true;
  f.conflict_free = true;
  return f;
}

}  // namespace wb::ch08

// The ladder, rungs/1_fa2_tensor_core.cuh to rungs/7_fa2_register_blocked.cuh in order: the
// build lists the files as Rungs<B> and kernel_ladder<B>() (a generated header); each file
// defines its Rungs<B>::name() with its kernel and launcher.
#include "chapters/08_fa2_at_speed/ladder.hpp"
