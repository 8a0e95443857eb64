// Chapter 09: the kernels' block shapes and the split count, eq. (7) of flash_decoding.md: what
// the CPU step cuts its ranges by (the kernels' split), what the launchers and the traffic
// formulas count, and the wave a split count fills.
//
// splits = max(1, min(floor(sms x blocks_per_sm / base_blocks), ceil(tiles / 4)))     eq. (7)
#pragma once

#include <algorithm>

#include "common/hd.hpp"
#include "common/rung_args.hpp"
#include "common/warp.hpp"

namespace wb::ch09 {

/// Keys of a K/V tile of the split kernel (one lane each in its score phase); the splits cut
/// a sequence's keys at multiples of it.
inline constexpr int kTileKeys = 32;
/// Query rows of one block of the split kernel: up to 16 rows of a KV head's group.
inline constexpr int kBlockRows = 16;
/// Warps of one block of the split kernels (split_kernel.cuh, rungs/4_mma_kv.cuh), and their
/// threads: the traffic formulas count what each thread reads of a paged cache's table.
inline constexpr int kBlockWarps = 4;
inline constexpr int kBlockThreads = kBlockWarps * kWarpSize;
/// The most query rows of one block of the streaming kernel (stream_kv): each lane holds its
/// columns of every row's output in registers, 16 per row in fp16.
inline constexpr int kStreamMaxRows = 4;
/// Query rows of one block of the tensor-core rung (mma_kv): one m16 tile of mma.sync, zeros
/// past a group's last row.
inline constexpr int kMmaRows = 16;
/// The 16-byte vectors of one key's row each lane of stream_kv loads (of K and of V): two, so
/// that a key takes half as many lanes and its score half as many shuffles to sum.
inline constexpr int kStreamVecs = 2;
/// The merges on a path inside one block of stream_kv before its partial is written: the
/// states of all its warps' key slots at once, eq. (4): one weight each.
inline constexpr int kStreamBlockMerges = 1;
/// The fewest K/V tiles a split should hold, eq. (7): per query row and split the partials
/// cost d + 1 floats written and read back (and the logsumexp read once more), 8 d + 12 bytes,
/// against the split's 2 x 4 x 32 x d elements of K and V: under 2 % in fp16 for one row.
inline constexpr int kMinTilesPerSplit = 4;
/// The most splits a program asks for: the grid's splits x row tiles stays an int, and the
/// partials (splits per row) stay a workspace, not a copy of the cache.
inline constexpr int kMaxSplits = 65536;

// [choose_splits]
/// How many key ranges each (KV head, row tile) gets. `base_blocks` blocks exist without a
/// split (batch x hkv x row tiles); `sms` x `blocks_per_sm` run at once. Splitting multiplies
/// the blocks: take as many splits as still fit in that one wave (floor, so that no second,
/// nearly empty wave follows), but no more than leave kMinTilesPerSplit tiles to each split of
/// the longest sequence, and at least 1.
inline int choose_splits(int sms, int blocks_per_sm, long base_blocks, int lk) {
  const long wave = long(sms) * blocks_per_sm;
  const long fill = wave / std::max(1L, base_blocks);
  const int tiles = (lk + kTileKeys - 1) / kTileKeys;
  const long by_tiles = (tiles + kMinTilesPerSplit - 1) / kMinTilesPerSplit;
  return int(std::max(1L, std::min(fill, by_tiles)));
}
// [choose_splits]

/// Query rows of one block of the streaming kernel for `s`: the group's g lq rows rounded up to
/// a power of two, at most kStreamMaxRows (its register arrays are sized by it at compile time).
__host__ __device__ inline int stream_rows(int group_rows) {
  int r = 1;
  while (r < group_rows && r < kStreamMaxRows) r *= 2;
  return r;
}

/// Lanes that share one key in the streaming kernel: each loads kStreamVecs vectors of
/// `width` elements of the key's row, so ceil(d / (kStreamVecs width)) of them, rounded up to a
/// power of two that divides the warp; the warp holds 32 / key_lanes keys at once.
__host__ __device__ inline int stream_key_lanes(int d, int width) {
  int lanes = 1;
  while (lanes * kStreamVecs * width < d) lanes *= 2;
  return lanes;
}

/// Blocks of a split kernel per split: batch x hkv x ceil(g lq / block_rows), block_rows the
/// query rows of one block (the last rung's by default).
inline long base_blocks(const DecodeShape& s, int block_rows) {
  return long(s.batch) * s.hkv * ((long(s.group()) * s.lq + block_rows - 1) / block_rows);
}
inline long base_blocks(const DecodeShape& s) {
  return base_blocks(s, stream_rows(s.group() * s.lq));
}

/// The SMs of a device and how many blocks of a kernel each runs at once.
struct Wave {
  int sms;
  int blocks_per_sm;
};

}  // namespace wb::ch09
