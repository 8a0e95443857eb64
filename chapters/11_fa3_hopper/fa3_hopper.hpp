// Chapter 11: FlashAttention-3 on Hopper. The same FA2 as chapters 06 and 08 (chapter 06's CPU
// step is this chapter's), rebuilt on the H100's asynchronous instructions (common/hopper.cuh),
// one idea per rung; every rung is a file of its own, proven equal to the rung before. The ideas
// (fa3_hopper.md derives each):
//   rungs/1_fa2_register_blocked.cuh  chapter 08's last rung (mma.sync, ldmatrix, cp.async),
//                  where the ladder starts
//   rungs/2_fa3_wgmma.cuh  a warpgroup per 64 query rows: S = Q K^T by wgmma from 128-byte
//                  swizzled shared tiles (descriptors), P from the S registers as wgmma's
//                  register A operand for P V  eqs. (1), (2)
//   rungs/3_fa3_tma.cuh  Q, K and V tiles by TMA (one thread, a box per 64 columns), completion
//                  by mbarrier phases  eq. (3)
//   rungs/4_fa3_warp_specialized.cuh  a producer warpgroup fills a ring of K/V stages (full and
//                  empty mbarriers) while two consumer warpgroups compute; setmaxnreg moves
//                  registers from the producer to the consumers  eq. (4)
//   rungs/5_fa3_pingpong.cuh  named barriers order the consumers' GEMMs: one warpgroup's
//                  softmax runs while the other's GEMMs do  eq. (5)
//   rungs/6_fa3_intra_warpgroup.cuh  S = Q K_{j+1}^T issued before the softmax of tile j
//                  finishes, P_j V_j behind it  eq. (6)
// What the rungs share: the tile layout, descriptors, the warpgroup's two products and its
// softmax (fa3_tiles.cuh), the tensor maps and the launch (fa3_launch.cuh), their limits,
// traffic and facts (below). The rungs from 2 on are sm_90a code: the build compiles this
// chapter's kernels for that target alone, and on any GPU but a compute capability 9.0 one
// they refuse in one line.
#pragma once

#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "chapters/08_fa2_at_speed/fa2_at_speed.hpp"
#include "common/backend.hpp"
#include "common/hd.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"

namespace wb::ch11 {

/// Query rows per block: two consumer warpgroups of 64 rows (wgmma's M).
inline constexpr int kBr = 128;
/// Keys per K/V tile: wgmma's N for S = Q K^T, its K for P V.
inline constexpr int kBc = 128;

/// Eq. (4), the ring of K/V stages: tile i of a block goes to stage i % stages, and it is the
/// (i / stages)-th use of that stage (from 0). Each use of a stage completes one phase of its
/// `full` barrier (the producer's arrival and the tile's bytes) and one of its `empty` barrier
/// (every consumer warp's arrival), so a wait names the phase by its parity:
///   consumer, before tile i:     full[i % stages]  parity (i / stages) % 2
///   producer, before tile i:     empty[i % stages] parity (i / stages - 1) % 2, for i >= stages
///                                (the stage's previous use released; the first use waits on none)
__host__ __device__ constexpr int ring_stage(int i, int stages) { return i % stages; }
__host__ __device__ constexpr unsigned full_parity(int i, int stages) {
  return unsigned(i / stages % 2);
}
__host__ __device__ constexpr unsigned empty_parity(int i, int stages) {
  return unsigned((i / stages - 1) % 2);
}

/// What every Hopper rung of this chapter takes: chapter 08's fast limits (fp16 or bf16, d = 64
/// or 128, the causal mask; q, k, v and o 16-byte aligned, checked by its launcher) and, the
/// scale folded into exp2 (chapter 08's eq. 5), a positive scale.
inline RungLimits fa3_limits() { return ch08::folded_scale_limits(); }

/// Chapter 06's per-Q-tile traffic with kBr rows and kBc keys: Q once, K and V once per visited
/// tile (TMA's zero fill past lk reads nothing), O and logsumexp once.
inline Traffic fa3_traffic(const AttentionArgs& a) { return ch06::fa2_tiles_traffic(a, kBr, kBc); }

/// The tiles of every Hopper rung, whatever the head dimension.
inline TileShape fa3_tiles(int) { return {kBr, kBc}; }

/// The facts of a Hopper rung: its tiles; P rounded to the 16-bit type for P V (eq. 2); sm_90a
/// code on the GPU. No claim of conflict-free shared memory: wgmma's operand reads are served a
/// core matrix at a time (the profile counts them).
inline RungFacts fa3_facts() {
  RungFacts f;
  f.tiles = &fa3_tiles;
  f.rounds_p = true;
  f.needs_sm90a = true;
  return f;
}

}  // namespace wb::ch11

// The ladder, rungs/1_fa2_register_blocked.cuh to rungs/6_fa3_intra_warpgroup.cuh in order: the
// build lists the files as Rungs<B> and kernel_ladder<B>() (a generated header); each file
// defines its Rungs<B>::name() with its kernel and launcher.
#include "chapters/11_fa3_hopper/ladder.hpp"
