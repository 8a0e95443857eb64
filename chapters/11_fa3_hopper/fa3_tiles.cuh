// What chapter 11's Hopper rungs share: the shared-memory tile that TMA writes and wgmma reads
// (eq. 1 of fa3_hopper.md), its descriptors, a warpgroup's two products S = Q K^T and O += P V
// (eq. 2: P from S's registers), the online softmax on S's registers (chapter 08's, per warp of
// the warpgroup), and one K/V tile put together. Device code only (this file compiles to nothing
// by itself).
// Test: ctest --test-dir build -R 11_fa3_hopper --output-on-failure
#pragma once

#include "common/hopper.cuh"  // first: common/kernel.cuh

#include <cstdint>

#include "chapters/08_fa2_at_speed/warp_tile.cuh"
#include "chapters/11_fa3_hopper/fa3_hopper.hpp"
#include "common/shared_memory.cuh"

namespace wb::ch11 {
namespace {  // device code with internal linkage: one copy per backend's translation unit

using ch08::KeyMask;
using ch08::kWarpRows;
using ch08::WarpState;
using ptx::Major;
using ptx::Swizzle;

constexpr int kWarpgroupWarps = 4;                           // wgmma's warpgroup: 4 warps
constexpr int kWarpgroupRows = kWarpgroupWarps * kWarpRows;  // M = 64 rows, 16 a warp
constexpr int kConsumers = kBr / kWarpgroupRows;             // warpgroups that compute: 2
constexpr float kLog2e = 1.4426950408889634f;                // e^x = 2^(x log2(e))

// ------------------------------------------------------------------------------------------
// Eq. (1): the tile. R rows of D 16-bit elements, as TMA writes a box with the 128-byte swizzle
// and wgmma reads it: D / 64 column blocks of R rows of 128 bytes (64 elements), 16-byte chunk
// c of row r at chunk c ^ (r % 8) of its row. A block starts on 1024 bytes, the swizzle's 8-row
// period.
// ------------------------------------------------------------------------------------------

constexpr unsigned kRowBytes = 128;                 // one row of a column block
constexpr int kBlockColumns = kRowBytes / 2;        // 64 elements of 16 bits
constexpr unsigned kSwizzleAtom = 8 * kRowBytes;    // 8 rows: the swizzle's period
constexpr unsigned kUnusedLeadingBytes = 16;        // K-major and swizzled: LBO unused ("1")
constexpr unsigned kKStepBytes = 16 * 2;            // k16 along a K-major row: 32 bytes

template <int R, int D>
struct Tile {
  static_assert(D % kBlockColumns == 0 && R % 8 == 0, "whole column blocks of whole periods");
  static constexpr unsigned kBlockBytes = R * kRowBytes;               // one column block
  static constexpr unsigned kBytes = D / kBlockColumns * kBlockBytes;  // the tile
  /// The byte of element (r, c) from the tile's start.
  __device__ static unsigned offset(int r, int c) {
    const unsigned byte = (c % kBlockColumns) * 2;
    return c / kBlockColumns * kBlockBytes + r * kRowBytes + ((byte / 16) ^ (r % 8)) * 16 +
           byte % 16;
  }
};

template <int D>
using QTile = Tile<kBr, D>;
template <int D>
using KvTile = Tile<kBc, D>;

/// A K/V stage: the K tile, then the V tile.
template <int D>
constexpr unsigned kStageBytes = 2 * KvTile<D>::kBytes;

/// The block's dynamic shared memory: the Q tile, then kStages K/V stages, from a 1024-byte
/// boundary (the slack to reach it is part of the request).
template <int D, int kStages>
constexpr std::size_t kSharedBytes = kSwizzleAtom + QTile<D>::kBytes + kStages * kStageBytes<D>;

/// The first 1024-byte boundary of the dynamic shared memory: the generic address's alignment is
/// the shared address's (the shared window is aligned far beyond 1024 bytes, and the
/// simulator's dynamic shared memory starts on 1024).
__device__ __forceinline__ unsigned char* aligned_shared() {
  unsigned char* base = dynamic_shared<unsigned char>();
  return base + (kSwizzleAtom - reinterpret_cast<std::uintptr_t>(base) % kSwizzleAtom) % kSwizzleAtom;
}

/// Eq. (3): rows [first, first + R) of head b by TMA into a Tile<R, D>: one box of 64 columns
/// per column block (its map: fa3_launch.cuh), completing `bar`'s transaction count by its bytes
/// when it lands. Rows past the head's end land as zeros.
template <int R, int D>
__device__ __forceinline__ void load_tile_tma(unsigned char* tile, const ptx::TensorMap* map,
                                              int first, int b, std::uint64_t* bar) {
#pragma unroll
  for (int block = 0; block < D / kBlockColumns; ++block)
    ptx::tma_load_3d(tile + block * Tile<R, D>::kBlockBytes, map, block * kBlockColumns, first, b,
                     bar);
}


// ------------------------------------------------------------------------------------------
// Eq. (2): the warpgroup's products. Descriptors (PTX ISA, "Matrix Descriptor Format"):
//   Q (A) and K (B, as (keys, d)): K-major, 8-row groups 1024 bytes apart (SBO), LBO unused; k
//     step ks is column block ks / 4, 32 (ks % 4) bytes along its rows;
//   V (B, as (keys, d) = (k, n)): MN-major, 8-row groups of keys 1024 bytes apart (SBO), the
//     column blocks of 64 n one block apart (LBO); k step kk is 16 rows down, 2048 bytes.
// ------------------------------------------------------------------------------------------

/// S (64 x kBc, float, wgmma's accumulator layout) = Q K^T for the warpgroup's 64 rows of the Q
/// tile at q_rows (its row 64 w of a QTile) and the K tile: D / 16 wgmma, issued, not waited for.
template <typename T, int D>
__device__ __forceinline__ void issue_scores(float (&s)[kBc / 2], const unsigned char* q_rows,
                                             const unsigned char* k_tile) {
  const std::uint64_t q_desc =
      ptx::make_smem_descriptor(q_rows, Swizzle::b128, kUnusedLeadingBytes, kSwizzleAtom);
  const std::uint64_t k_desc =
      ptx::make_smem_descriptor(k_tile, Swizzle::b128, kUnusedLeadingBytes, kSwizzleAtom);
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    // Where k step ks (head columns [16 ks, 16 ks + 16)) starts in each tile, in bytes from the
    // descriptor's start: eq. (2).
    unsigned q_step = 0, k_step = 0;
    // [exercise]
    q_step = ks / 4 * QTile<D>::kBlockBytes + ks % 4 * kKStepBytes;
    k_step = ks / 4 * KvTile<D>::kBlockBytes + ks % 4 * kKStepBytes;
    // [exercise]
    ptx::wgmma_ss<T, kBc>(s, ptx::advance_descriptor(q_desc, q_step),
                          ptx::advance_descriptor(k_desc, k_step), ks > 0);
  }
}

/// O (64 x D) += P V for the kBc keys of the V tile, P from registers: p[kk] is the warp's A
/// fragment of keys [16 kk, 16 kk + 16). kBc / 16 wgmma, issued, not waited for.
template <typename T, int D>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2], const std::uint32_t (&p)[kBc / 16][4],
                                         const unsigned char* v_tile) {
  const std::uint64_t v_desc =
      ptx::make_smem_descriptor(v_tile, Swizzle::b128, KvTile<D>::kBlockBytes, kSwizzleAtom);
#pragma unroll
  for (int kk = 0; kk < kBc / 16; ++kk)
    ptx::wgmma_rs<T, D, Major::mn>(o, p[kk], ptx::advance_descriptor(v_desc, kk * 16 * kRowBytes),
                                   true);
}

/// Eq. (2): P's A fragments from S's accumulators, 16 keys at a time (chapter 08's eq. 1, which
/// holds per warp of the warpgroup: wgmma's accumulator is mma.sync's, N / 8 times over).
template <typename T>
__device__ __forceinline__ void pack_p(const float (&s)[kBc / 8][4],
                                       std::uint32_t (&p)[kBc / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kBc / 16; ++kk) ch08::pack_p<T>(s[2 * kk], s[2 * kk + 1], p[kk]);
}

/// The accumulators as wgmma takes them (float[N / 2]) and as the softmax and epilogue read them
/// (float[N / 8][4], chapter 08's fragments): the same registers.
template <int N>
__device__ __forceinline__ float (&flat(float (&a)[N / 8][4]))[N / 2] {
  return reinterpret_cast<float(&)[N / 2]>(a);
}

// ------------------------------------------------------------------------------------------
// The online softmax on S (chapter 06's eq. 3, chapter 08's eqs. 5, 6 per warp)
// ------------------------------------------------------------------------------------------

/// Whether the warp's 16 rows from w0 need the mask on the tile of keys from j0: the end of the
/// keys or, under the causal mask, the warp's diagonal falls in it (chapter 08's eq. 6).
__device__ __forceinline__ bool tile_masked(int w0, int j0, AttentionShape shape, bool causal) {
  return j0 + kBc > shape.lk || (causal && j0 + kBc - 1 > w0 + (shape.lk - shape.lq));
}

/// This thread's warpgroup, threadIdx.y / 4, as a value the compiler knows to be the same in
/// every lane of the warp (a shuffle from lane 0). ptxas serializes the wgmma of a branch whose
/// condition it cannot prove warp-uniform (C7518, C7520: each waits for the one before), and
/// that threadIdx.y is uniform in a warp is a launch fact (blockDim.x = 32) it does not know.
__device__ __forceinline__ int warpgroup_index() {
  return __shfl_sync(kAllLanes, int(threadIdx.y) / kWarpgroupWarps, 0);
}

/// The K/V tiles that the warpgroup of 64 rows from wg0 attends: chapter 06's eq. (7) for its
/// own rows, a prefix of the block's tiles (0 when its rows are all past lq). Past them every
/// key is masked for all its rows: the products would add exactly 0, and it skips them.
__device__ __forceinline__ int warpgroup_tiles(int wg0, AttentionShape shape, bool causal) {
  if (wg0 >= shape.lq) return 0;
  return ch06::kv_tiles_to_visit(wg0, min(kWarpgroupRows, shape.lq - wg0), shape.lq, shape.lk,
                                 kBc, causal);
}

/// The softmax step of the warp's rows from w0 on S's registers (P overwrites them): its new
/// max and l in st, and alpha = e^{scale (m - m_new)}, by which the caller rescales O.
template <int D>
__device__ __forceinline__ void softmax_rows(float (&s)[kBc / 8][4], WarpState<D>& st, int w0,
                                             int j0, AttentionShape shape, float scale, bool causal,
                                             float (&alpha)[2]) {
  ch08::softmax_step(s, st.m, st.l, ch08::FoldedExp2{scale * kLog2e},
                     tile_masked(w0, j0, shape, causal), KeyMask{shape, causal, w0, j0}, alpha);
}

// ------------------------------------------------------------------------------------------
// One K/V tile for the warpgroup, each product waited for (rungs 2 to 4)
// ------------------------------------------------------------------------------------------

/// S = Q K^T, the softmax on it, O rescaled, then O += P V, for the warpgroup whose 64 rows of
/// the Q tile start at q_rows; the warp's rows start at w0, the tile's keys at j0; st the warp's
/// state (O in wgmma's accumulator layout, which is chapter 08's).
template <typename T, int D>
__device__ __forceinline__ void attend_tile(const unsigned char* q_rows,
                                            const unsigned char* k_tile,
                                            const unsigned char* v_tile, int w0, int j0,
                                            AttentionShape shape, float scale, bool causal,
                                            WarpState<D>& st) {
  float s[kBc / 8][4];
  ptx::wgmma_fence();  // the registers written before (O, last tile's P) are what wgmma sees
  issue_scores<T, D>(flat<kBc>(s), q_rows, k_tile);
  ptx::wgmma_commit_group();
  ptx::wgmma_wait_group<0>();
  ptx::wgmma_fence_operand(flat<kBc>(s));
  float alpha[2];
  softmax_rows(s, st, w0, j0, shape, scale, causal, alpha);
  ch08::rescale_rows<D>(st.acc, alpha);
  std::uint32_t p[kBc / 16][4];
  pack_p<T>(s, p);
  ptx::wgmma_fence();  // P and the rescaled O, written since the last wgmma
  issue_pv<T, D>(flat<D>(st.acc), p, v_tile);
  ptx::wgmma_commit_group();
  ptx::wgmma_wait_group<0>();
  ptx::wgmma_fence_operand(flat<D>(st.acc));
}

}  // namespace
}  // namespace wb::ch11
