// Chapter 08's building blocks, one per idea of the ladder: how a tile gets into shared memory
// (through registers, or by cp.async, eq. 4), in a layout of tile_layout.hpp (padded rows or
// the XOR swizzle, eq. 3), and how a warp reads its mma.m16n8k16 fragments out of it
// (PairFragments: 32-bit loads; LdmatrixFragments: ldmatrix, eq. 2). Each rung
// (rungs/N_name.cuh) names the ones it takes; chapters 09 and 10 call them too.
// Test: ctest --test-dir build -R 08_fa2_at_speed --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include <cstddef>
#include <cstdint>

#include <type_traits>

#include "chapters/08_fa2_at_speed/tile_layout.hpp"
#include "common/ptx.cuh"

namespace wb::ch08 {

// ------------------------------------------------------------------------------------------
// Tile loads: rows [first, first + rows) of a (.., D) matrix, zeros past `limit`
// ------------------------------------------------------------------------------------------

/// Which 16-byte chunks of a tile of kRows rows a thread copies: the block's kThreads threads
/// cover kRowsPerPass rows per pass, consecutive threads consecutive chunks of a row
/// (coalesced), and each thread the same column chunk of rows kRowsPerPass apart. All three are
/// constants, so a thread's addresses are its first one plus constants: kRowsPerPass rows
/// further in global memory, and in a swizzled tile too, since kRowsPerPass is a multiple of
/// the swizzle's 8-row period (eq. 3). No register per chunk, and no bound to test per pass.
template <int D, int kThreads, int kRows>
struct TileChunks {
  static constexpr int kPerRow = D / kChunkElements;
  static constexpr int kRowsPerPass = kThreads / kPerRow;
  static constexpr int kPasses = kRows / kRowsPerPass;
  static_assert(kThreads % kPerRow == 0 && kRowsPerPass % kSwizzleRows == 0,
                "every pass covers whole rows and whole swizzle periods");
  static_assert(kRows % kRowsPerPass == 0, "the passes cover the tile's rows exactly");
  __device__ static int thread() { return int(threadIdx.y * blockDim.x + threadIdx.x); }
  __device__ static int first_row() { return thread() / kPerRow; }
  __device__ static int col() { return thread() % kPerRow * kChunkElements; }
};

/// Through registers: each thread reads 16-byte chunks and stores them at their place in a
/// tile of Layout (its kColumns elements per row in global memory); the caller's __syncthreads
/// makes the tile visible. Rows at or past `limit` are zeros, so that masked keys multiply as
/// 0, never as NaN. kThreads: the block's threads.
template <typename Layout, int kThreads, int kRows, typename T>
__device__ void load_tile(const T* __restrict__ src, int first, int limit, T* tile) {
  constexpr int D = Layout::kColumns;
  using Chunks = TileChunks<D, kThreads, kRows>;
  const int r0 = Chunks::first_row(), col = Chunks::col();
#pragma unroll
  for (int p = 0; p < Chunks::kPasses; ++p) {
    const int r = r0 + p * Chunks::kRowsPerPass;
    uint4 chunk = make_uint4(0u, 0u, 0u, 0u);
    if (first + r < limit)
      chunk = *reinterpret_cast<const uint4*>(src + std::size_t(first + r) * D + col);
    *reinterpret_cast<uint4*>(tile + Layout::offset(r, col)) = chunk;
  }
}

/// By cp.async, eq. (4): the same chunks, copied without passing through registers; they land
/// at the caller's cp_async_wait (then __syncthreads makes them visible to the block). They
/// land in the tile's rows from `tile_row` on (a tile filled in pieces: chapter 09's pages).
template <typename Layout, int kThreads, int kRows, typename T>
__device__ void load_tile_async(const T* __restrict__ src, int first, int limit, T* tile,
                                int tile_row = 0) {
  constexpr int D = Layout::kColumns;
  using Chunks = TileChunks<D, kThreads, kRows>;
  const int r0 = Chunks::first_row(), col = Chunks::col();
#pragma unroll
  for (int p = 0; p < Chunks::kPasses; ++p) {
    const int r = r0 + p * Chunks::kRowsPerPass;
    const bool inside = first + r < limit;
    // A row past the matrix reads nothing (src is any valid address then) and lands as zeros.
    const T* from = inside ? src + std::size_t(first + r) * D + col : src;
    ptx::cp_async_16(tile + Layout::offset(tile_row + r, col), from, inside);
  }
}

// ------------------------------------------------------------------------------------------
// Fragments of mma.m16n8k16 from a tile (layouts: common/ptx.cuh), g = lane / 4, t = lane % 4
// ------------------------------------------------------------------------------------------

/// The element of a tile in Layout whose address `lane` gives ldmatrix .x4 for the A fragment at
/// (row0, col0), eq. (2): matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15)
/// = a[0..3], lane 8 m + r giving row r of matrix m.
template <typename Layout>
__device__ __forceinline__ int ldmatrix_a_offset(int row0, int col0, int lane) {
  return Layout::fragment_offset(row0, col0, lane % 8 + 8 * (lane / 8 % 2), 8 * (lane / 16));
}

/// A warp's fragments read from a tile in Layout by 32-bit loads (fa2_mma): four per A
/// fragment, two per B fragment of K, and two 16-bit loads per register of V's B fragment.
template <typename Layout>
struct PairFragments {
  using Tile = Layout;

  /// A fragment (16 x 16) of rows [row0, row0 + 16), columns [col0, col0 + 16) of a row-major
  /// tile: Q's, for S = Q K^T.
  template <typename T>
  __device__ __forceinline__ static void load_a(std::uint32_t (&a)[4], const T* tile, int row0,
                                                int col0, int lane) {
    const int g = lane / 4, t = lane % 4;
    a[0] = ptx::load_pair(tile + Layout::offset(row0 + g, col0 + 2 * t));
    a[1] = ptx::load_pair(tile + Layout::offset(row0 + g + 8, col0 + 2 * t));
    a[2] = ptx::load_pair(tile + Layout::offset(row0 + g, col0 + 2 * t + 8));
    a[3] = ptx::load_pair(tile + Layout::offset(row0 + g + 8, col0 + 2 * t + 8));
  }

  /// B fragments (16 x 8) of K^T for S = Q K^T, two key groups at once: keys [key0, key0 + 8)
  /// and [key0 + 8, key0 + 16) over head columns [col0, col0 + 16). K is stored row-major
  /// (keys, D), which is K^T column-major: B's column n is K's row n, its k pairs adjacent in
  /// memory.
  template <typename T>
  __device__ __forceinline__ static void load_b_of_k(std::uint32_t (&b0)[2], std::uint32_t (&b1)[2],
                                                     const T* tile, int key0, int col0, int lane) {
    const int g = lane / 4, t = lane % 4;
    b0[0] = ptx::load_pair(tile + Layout::offset(key0 + g, col0 + 2 * t));
    b0[1] = ptx::load_pair(tile + Layout::offset(key0 + g, col0 + 2 * t + 8));
    b1[0] = ptx::load_pair(tile + Layout::offset(key0 + 8 + g, col0 + 2 * t));
    b1[1] = ptx::load_pair(tile + Layout::offset(key0 + 8 + g, col0 + 2 * t + 8));
  }

  /// B fragments (16 x 8) of V for O += P~ V, two column groups at once: keys
  /// [key0, key0 + 16) over head columns [col0, col0 + 8) and [col0 + 8, col0 + 16). V is
  /// row-major (keys, D): B's k pairs are two elements of one column in adjacent rows, a row
  /// stride apart in memory.
  template <typename T>
  __device__ __forceinline__ static void load_b_of_v(std::uint32_t (&b0)[2], std::uint32_t (&b1)[2],
                                                     const T* tile, int key0, int col0, int lane) {
    const int g = lane / 4, t = lane % 4;
    for (int group = 0; group < 2; ++group) {
      std::uint32_t(&b)[2] = group == 0 ? b0 : b1;
      const int col = col0 + 8 * group + g;
      for (int reg = 0; reg < 2; ++reg) {  // B's two registers: keys 2t, 2t+1 and 2t+8, 2t+9
        const int key = key0 + 2 * t + 8 * reg;
        b[reg] =
            ptx::load_pair(tile + Layout::offset(key, col), tile + Layout::offset(key + 1, col));
      }
    }
  }
};

/// The same fragments read by ldmatrix .x4, eq. (2) (fa2_ldmatrix on): one instruction per A
/// fragment or pair of B fragments, .trans gathering V's column pairs.
template <typename Layout>
struct LdmatrixFragments {
  using Tile = Layout;

  template <typename T>
  __device__ __forceinline__ static void load_a(std::uint32_t (&a)[4], const T* tile, int row0,
                                                int col0, int lane) {
    ptx::ldmatrix_x4(a, tile + ldmatrix_a_offset<Layout>(row0, col0, lane));
  }

  template <typename T>
  __device__ __forceinline__ static void load_b_of_k(std::uint32_t (&b0)[2], std::uint32_t (&b1)[2],
                                                     const T* tile, int key0, int col0, int lane) {
    // Matrices (keys 0-7, cols 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15) = b0, b1.
    std::uint32_t r[4];
    ptx::ldmatrix_x4(r, tile + Layout::fragment_offset(key0, col0, lane % 8 + 8 * (lane / 16),
                                                       8 * (lane / 8 % 2)));
    b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
  }

  template <typename T>
  __device__ __forceinline__ static void load_b_of_v(std::uint32_t (&b0)[2], std::uint32_t (&b1)[2],
                                                     const T* tile, int key0, int col0, int lane) {
    // Matrices (keys 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15), each transposed.
    std::uint32_t r[4];
    ptx::ldmatrix_x4_trans(
        r,
        tile + Layout::fragment_offset(key0, col0, lane % 8 + 8 * (lane / 8 % 2), 8 * (lane / 16)));
    b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
  }
};

/// The fragments of rungs 4 to 7: tiles with 16-byte chunks XOR-swizzled (eq. 3), read by
/// ldmatrix .x4 (eq. 2).
template <int D>
using SwizzledFragments = LdmatrixFragments<SwizzledTile<D>>;

/// A fragment (16 x 16) of rows [row0, row0 + 16), columns [col0, col0 + 16) of a matrix whose
/// transpose the tile holds row-major, A(m, k) = tile(col0 + k, row0 + m), by ldmatrix .trans:
/// matrix j is a[j], stored as (k 0-7, m 0-7), (k 0-7, m 8-15), (k 8-15, m 0-7), (k 8-15, m 8-15),
/// and transposing it gives lane (g, t) A(g, 2t..2t+1). Chapter 10's dS, from its dS^T tile.
template <typename Layout, typename T>
__device__ __forceinline__ void load_a_transposed(std::uint32_t (&a)[4], const T* tile, int row0,
                                                  int col0, int lane) {
  ptx::ldmatrix_x4_trans(a, tile + Layout::fragment_offset(col0, row0, lane % 8 + 8 * (lane / 16),
                                                           8 * (lane / 8 % 2)));
}

}  // namespace wb::ch08
