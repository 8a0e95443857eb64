// Chapter 08: FlashAttention-2 at speed. The same FA2 as chapter 06 (its CPU step is this
// chapter's), made fast one idea per rung; every rung is a kernel of its own, proven equal to
// the rung before. The ideas (fa2_at_speed.md derives each):
//   fa2_mma        mma.sync.m16n8k16 with S~ kept in registers: S's accumulator fragment is
//                  P~'s A fragment after a rounding, no shared memory between the products  eq. (1)
//   fa2_ldmatrix   fragments from shared memory by ldmatrix .x4 (.trans for V)             eq. (2)
//   fa2_swizzle    tiles stored with 16-byte chunks XOR-swizzled instead of padded rows    eq. (3)
//   fa2_cp_async   K/V tile j + 1 copied by cp.async while tile j is computed               eq. (4)
//   fa2_scheduled  FA2's schedule: Br = 128 rows over 8 warps, exp2 with scale log2(e)
//                  folded in, the causal mask on diagonal tiles only, heaviest blocks first  eqs.
//                  (5), (6)
//   fa2_register_blocked  Br = 128 rows over 4 warps of 32: every K or V fragment read from
//                  shared memory feeds two mma instead of one; Q's fragments are read from
//                  shared memory at each tile (registers hold the second row tile's O)  eq. (7)
// The ladder starts from chapter 06's tensor-core kernel (wmma, S~ and P~ through shared memory).
#pragma once

#include <string>

#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "common/backend.hpp"
#include "common/hd.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"

namespace wb::ch08 {

// ------------------------------------------------------------------------------------------
// The rungs' recipes: each is the one before with one thing changed
// ------------------------------------------------------------------------------------------

/// Keys per K/V tile (Bc), every rung and head dimension: a warp's S~ row of 64 floats is 32
/// registers per lane, P~ V then takes 4 k-steps of 16 keys.
inline constexpr int kKeys = 64;
/// Query rows per warp: the m of mma.m16n8k16.
inline constexpr int kWarpRows = 16;

/// fa2_mma: one warp per 16 query rows, 4 warps (Br = 64); fragments read from shared memory
/// by plain 32-bit loads (two 16-bit loads for V's column pairs); rows padded by 16 bytes; K/V
/// tiles loaded through registers into one buffer.
struct MmaRecipe {
  static constexpr const char* kName = "fa2_mma";
  static constexpr bool kLdmatrix = false;   ///< fragments by ldmatrix (eq. 2)
  static constexpr bool kSwizzle = false;    ///< XOR-swizzled rows instead of padded (eq. 3)
  static constexpr bool kCpAsync = false;    ///< K/V by cp.async, two buffers (eq. 4)
  static constexpr int kWarps = 4;           ///< Br = 16 kWarps kRowTiles
  static constexpr bool kScheduled = false;  ///< exp2, diagonal-only mask, heavy blocks first
  /// Tiles of 16 query rows per warp (eq. 7). With one, the warp keeps its Q fragments in
  /// registers for the whole loop; with more, it reads them from a Q tile of its own in shared
  /// memory at each K/V tile.
  static constexpr int kRowTiles = 1;
};
/// fa2_ldmatrix: fa2_mma with every fragment read by ldmatrix.
struct LdmatrixRecipe : MmaRecipe {
  static constexpr const char* kName = "fa2_ldmatrix";
  static constexpr bool kLdmatrix = true;
};
/// fa2_swizzle: fa2_ldmatrix with swizzled, unpadded tiles.
struct SwizzleRecipe : LdmatrixRecipe {
  static constexpr const char* kName = "fa2_swizzle";
  static constexpr bool kSwizzle = true;
};
/// fa2_cp_async: fa2_swizzle with K/V double-buffered by cp.async.
struct CpAsyncRecipe : SwizzleRecipe {
  static constexpr const char* kName = "fa2_cp_async";
  static constexpr bool kCpAsync = true;
};
/// fa2_scheduled: fa2_cp_async with FA2's schedule: 8 warps (Br = 128) and the rest of eqs. (5),
/// (6).
struct ScheduledRecipe : CpAsyncRecipe {
  static constexpr const char* kName = "fa2_scheduled";
  static constexpr int kWarps = 8;
  static constexpr bool kScheduled = true;
};
/// fa2_register_blocked: fa2_scheduled with each warp owning two tiles of 16 rows, 4 warps
/// (Br = 128 still): a K or V fragment read from shared memory feeds two mma (eq. 7).
struct RegisterBlockedRecipe : ScheduledRecipe {
  static constexpr const char* kName = "fa2_register_blocked";
  static constexpr int kWarps = 4;
  static constexpr int kRowTiles = 2;
};

// ------------------------------------------------------------------------------------------
// Shared-memory layout of a tile of 16-bit elements with D columns, eq. (3)
// ------------------------------------------------------------------------------------------

inline constexpr int kChunkElements = 8;  // 16-bit elements per 16-byte chunk
inline constexpr int kSwizzleRows = 8;    // rows of one ldmatrix matrix: the swizzle's period

/// Element (row, col) of a tile of D columns: rows D elements apart with 16-byte chunk c of row
/// r stored at chunk c ^ (r % 8) (Swizzle), or rows D + 8 elements apart (padded). Either way
/// the 8 rows of an ldmatrix matrix, or the 8 lanes of a 16-byte store, hit 8 different groups
/// of 4 banks: no bank conflicts. Unpadded and unswizzled, rows 128 or 256 bytes apart would
/// all start in bank 0: an 8-way conflict.
template <int D, bool Swizzle>
struct TileLayout {
  static_assert(D % (kChunkElements * kSwizzleRows) == 0, "whole swizzle periods per row");
  static constexpr int kLd = Swizzle ? D : D + kChunkElements;  // elements per row

  // [swizzle]
  __host__ __device__ static int offset(int row, int col) {
    if constexpr (Swizzle) {
      const int chunk = (col / kChunkElements) ^ (row % kSwizzleRows);  // eq. (3)
      return row * kLd + chunk * kChunkElements + col % kChunkElements;
    } else {
      return row * kLd + col;
    }
  }
  // [swizzle]

  // [fragment_offset]
  /// offset(row0 + r, col0 + c) as a fragment load's address is best computed, eq. (3'): row0 a
  /// multiple of 8 and col0 of 16 (constants once the loops over fragments are unrolled), r and
  /// c the lane's part, c = 0 or 8. The swizzle's XOR reaches only the low 3 bits of the chunk
  /// index, the lane's row r enters it as r % 8 alone, and col0's chunk index k0 is even, so
  ///   (k0 + c / 8) ^ (r % 8) = (k0 - k0 % 8) + (k0 % 8 ^ y),   y = c / 8 ^ r % 8,
  /// with y the lane's alone: the address is the lane's base plus a constant plus one of 4
  /// lane values (k0 % 8 = 0, 2, 4, 6), which the compiler keeps in 4 registers for every
  /// fragment of a loop, where offset() would cost it a register per fragment.
  __host__ __device__ static int fragment_offset(int row0, int col0, int r, int c) {
    if constexpr (Swizzle) {
      const int k0 = col0 / kChunkElements, y = (c / kChunkElements) ^ (r % kSwizzleRows);
      const int chunk_low = (k0 % kSwizzleRows) ^ y;  // the XOR, on the low 3 bits only
      return (row0 + r) * kLd + (k0 - k0 % kSwizzleRows + chunk_low) * kChunkElements;
    } else {
      return offset(row0 + r, col0 + c);
    }
  }
  // [fragment_offset]
};

/// Rows D elements apart with neither padding nor swizzle: the layout eq. (3) mends, kept for
/// the program's bank map and the tests (no kernel uses it).
template <int D>
struct UnpaddedLayout {
  __host__ __device__ static int offset(int row, int col) { return row * D + col; }
  __host__ __device__ static int fragment_offset(int row0, int col0, int r, int c) {
    return offset(row0 + r, col0 + c);
  }
};

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

/// Query rows per block (Br) of a recipe.
template <typename Recipe>
inline constexpr int kRowsOf = Recipe::kWarps* kWarpRows* Recipe::kRowTiles;

/// Keys per online-softmax step within a K/V tile: all kKeys, but 32 for two row tiles at
/// D = 128, whose warps hold O for 32 rows (128 registers) and would need 64 more for S~ of
/// 64 keys (eq. 7).
template <typename Recipe, int D>
inline constexpr int kStepKeys = Recipe::kRowTiles > 1 && D > 64 ? kKeys / 2 : kKeys;

/// Whether a recipe's warps read Q's fragments from shared memory at every K/V tile (more than
/// one row tile per warp) rather than holding them in registers.
template <typename Recipe>
inline constexpr bool kQFromShared = Recipe::kRowTiles > 1;

/// Bytes of dynamic shared memory a recipe's block takes at head dimension d: K and V tiles of
/// kKeys rows, twice with cp.async; rows of d 16-bit elements, plus 16 bytes when padded. The
/// Q tile is staged in the K/V space before the loop (Br <= 2 Bc rows fit in one K/V pair),
/// or has Br rows of its own when the warps read it at every tile.
template <typename Recipe>
constexpr int shared_bytes(int d) {
  constexpr int kElementBytes = 2, kPadBytes = 16;
  const int row_bytes = d * kElementBytes + (Recipe::kSwizzle ? 0 : kPadBytes);
  const int buffers = Recipe::kCpAsync ? 2 : 1;
  const int q_rows = kQFromShared<Recipe> ? kRowsOf<Recipe> : 0;
  return (buffers * 2 * kKeys + q_rows) * row_bytes;
}

// ------------------------------------------------------------------------------------------
// Kernel ladder (launchers defined in fa2_fast_kernels.cuh)
// ------------------------------------------------------------------------------------------

/// The launchers, one per rung; fp16 or bf16, d = 64 or 128, q, k, v 16-byte aligned. Of `a`:
/// q (bh, lq, d); k, v (bh, lk, d); o (bh, lq, d) in `a.dtype`; lse (bh, lq) float;
/// tiles_visited nullptr or (bh, ceil(lq / Br)) ints, the K/V tiles each block loaded.
template <Backend B>
struct Kernels {
  static void fa2_mma(const AttentionArgs& a);
  static void fa2_ldmatrix(const AttentionArgs& a);
  static void fa2_swizzle(const AttentionArgs& a);
  static void fa2_cp_async(const AttentionArgs& a);
  /// Also needs scale > 0: the row max is taken over the unscaled scores (eq. 5).
  static void fa2_scheduled(const AttentionArgs& a);
  /// Also needs scale > 0, as fa2_scheduled.
  static void fa2_register_blocked(const AttentionArgs& a);
  /// Not a rung (bank_map_kernel.cuh): one warp stores a 16 x 64 fp16 tile whose element
  /// (r, c) holds r * 64 + c in `layout`, then loads the A fragment of its first 16 columns by
  /// one ldmatrix .x4 (eq. 2) into `fragments` (32 lanes x 4 registers, device memory): the
  /// launch whose bank use `ch08 --profile` records for the page's bank map.
  static void ldmatrix_bank_map(BankLayout layout, std::uint32_t* fragments);
};

/// What every rung of this chapter moves: chapter 06's per-Q-tile traffic with Br query rows
/// and Bc = kKeys keys (Q once, K and V once per visited tile, O and logsumexp once).
template <typename Recipe>
Traffic fast_traffic(const AttentionArgs& a) {
  return ch06::fa2_tiles_traffic(a, kRowsOf<Recipe>, kKeys);
}

/// The tiles of a rung with `Recipe`, Br query rows by Bc keys, whatever the head dimension
/// (its record's facts: the CPU step runs with them in the tests; they decide which K/V tiles
/// the causal mask skips).
template <typename Recipe>
TileShape fast_tiles(int) {
  return {kRowsOf<Recipe>, kKeys};
}

/// The facts of a rung with `Recipe`: its tiles; P~ rounded to the 16-bit type for P~ V
/// (eq. 1); every shared-memory request conflict-free (eqs. 2, 3: padded rows or the swizzle).
template <typename Recipe>
RungFacts fast_facts() {
  RungFacts f;
  f.tiles = &fast_tiles<Recipe>;
  f.rounds_p = true;
  f.conflict_free = true;
  return f;
}

/// The ladder in order, from chapter 06's last rung, each rung one idea better.
template <Backend B>
Ladder<AttentionArgs> kernel_ladder() {
  const RungLimits limits =
      attention_limits({Dtype::fp16, Dtype::bf16}, 0, {64, 128}, ch04::kMaxBatchHeads,
                       /*causal=*/true, kWritesO | kWritesLse);
  return {
      {"fa2_tensor_core", "chapter 06's last rung: wmma 16x16x16, S~ and P~ through shared memory",
       limits, &ch06::Kernels<B>::fa2_tensor_core, &ch06::fa2_tensor_core_traffic,
       {&ch06::tensor_core_tiles, /*rounds_p=*/true}},
      {MmaRecipe::kName,
       "mma.sync m16n8k16: S~ stays in registers and becomes P~'s A fragment; Q fragments "
       "in registers for the whole loop; Bc = 64",
       limits, &Kernels<B>::fa2_mma, &fast_traffic<MmaRecipe>, fast_facts<MmaRecipe>()},
      {LdmatrixRecipe::kName, "fragments loaded by ldmatrix .x4 (.trans for V)", limits,
       &Kernels<B>::fa2_ldmatrix, &fast_traffic<LdmatrixRecipe>, fast_facts<LdmatrixRecipe>()},
      {SwizzleRecipe::kName, "tiles XOR-swizzled in 16-byte chunks instead of padded rows", limits,
       &Kernels<B>::fa2_swizzle, &fast_traffic<SwizzleRecipe>, fast_facts<SwizzleRecipe>()},
      {CpAsyncRecipe::kName,
       "K/V tiles double-buffered by cp.async: tile j + 1 loads while j computes", limits,
       &Kernels<B>::fa2_cp_async, &fast_traffic<CpAsyncRecipe>, fast_facts<CpAsyncRecipe>()},
      {ScheduledRecipe::kName,
       "FA2's schedule: Br = 128 over 8 warps, exp2 with the scale folded in, the causal "
       "mask on diagonal tiles only, heaviest causal blocks first",
       limits, &Kernels<B>::fa2_scheduled, &fast_traffic<ScheduledRecipe>,
       fast_facts<ScheduledRecipe>()},
      {RegisterBlockedRecipe::kName,
       "register blocking: Br = 128 over 4 warps of 32 rows, each K/V fragment read from "
       "shared memory feeds two mma; Q's fragments read from shared memory at each tile",
       limits, &Kernels<B>::fa2_register_blocked, &fast_traffic<RegisterBlockedRecipe>,
       fast_facts<RegisterBlockedRecipe>()}};
}

}  // namespace wb::ch08
