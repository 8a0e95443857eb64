// Chapter 08's tiles in shared memory: the shapes every rung shares (Bc keys per K/V tile, 16
// query rows per warp tile) and where element (row, col) of a tile of 16-bit elements lives,
// with rows padded by 16 bytes or with the XOR swizzle of eq. (3) (fa2_at_speed.md). The rungs
// (rungs/N_name.cuh), the tile and fragment loads (fast_tiles.cuh) and chapters 09 and 10's
// tensor-core kernels place their tiles by these layouts.
// Test: ctest --test-dir build -R 08_fa2_at_speed --output-on-failure
#pragma once

#include "common/hd.hpp"

namespace wb::ch08 {

/// Keys per K/V tile (Bc), every rung and head dimension: a warp's S~ row of 64 floats is 32
/// registers per lane, P~ V then takes 4 k-steps of 16 keys.
inline constexpr int kKeys = 64;
/// Query rows per warp tile: the m of mma.m16n8k16.
inline constexpr int kWarpRows = 16;

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
  static constexpr int kColumns = D;
  static constexpr int kLd = Swizzle ? D : D + kChunkElements;  // elements per row
  static constexpr int kElementBytes = 2;                       // __half, __nv_bfloat16
  static constexpr int kRowBytes = kLd * kElementBytes;

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

/// Rows padded by 16 bytes, as chapter 06's tiles (fa2_mma, fa2_ldmatrix).
template <int D>
using PaddedTile = TileLayout<D, false>;
/// Rows unpadded, their 16-byte chunks XOR-swizzled, eq. (3) (fa2_swizzle on).
template <int D>
using SwizzledTile = TileLayout<D, true>;

/// Rows D elements apart with neither padding nor swizzle: the layout eq. (3) mends, kept for
/// the program's bank map and the tests (no kernel uses it).
template <int D>
struct UnpaddedLayout {
  __host__ __device__ static int offset(int row, int col) { return row * D + col; }
  __host__ __device__ static int fragment_offset(int row0, int col0, int r, int c) {
    return offset(row0 + r, col0 + c);
  }
};

}  // namespace wb::ch08
