// The shapes every attention chapter's tests (04, 05, 06) run on: one list, so each step of
// the chain meets the same edges as the step before.
#pragma once

#include <cstdint>
#include <vector>

#include "common/attention_inputs.hpp"
#include "common/inputs.hpp"
#include "common/rung.hpp"

namespace wb::test {

/// CPU steps: lq and lk of 1, 17, 127, 1000 and sizes that are multiples of no tile; every
/// edge head dimension (1, 16, 59, 64, 96, 128); bh > 1 so that a head offset bug shows;
/// lq > lk (fully masked rows under the causal mask) and lq < lk.
inline const std::vector<AttentionShape> kAttentionCpuShapes = {
    {1, 1, 1, 1},     {2, 17, 127, 59},  {1, 127, 17, 16}, {1, 33, 1000, 64}, {1, 5, 300, 96},
    {2, 31, 129, 128}, {1, 1000, 1, 1},  {1, 1, 1000, 16}, {1, 1000, 17, 16}};

/// The simulator runs one fiber per GPU thread: the same edges at moderate sizes, one with
/// lk = 1000 on a small d.
inline const std::vector<AttentionShape> kAttentionKernelShapes = {
    {1, 1, 1, 1},     {2, 17, 127, 59}, {1, 127, 17, 16}, {1, 9, 1000, 16},
    {1, 40, 300, 64}, {1, 33, 65, 128}, {2, 8, 33, 96},   {1, 300, 31, 1}};
/// Race mode and the instrumented twin check every access and run several times slower: the
/// edges that change which accesses a kernel makes (one row and one key; tiles short in both
/// directions with bh > 1 and an odd d; lq > lk; the largest d) at the smallest sizes that
/// hold them. The longer rows of the list above run in the sim tests.
inline const std::vector<AttentionShape> kAttentionKernelRaceShapes = {
    {1, 1, 1, 1}, {2, 17, 127, 59}, {1, 127, 17, 16}, {1, 33, 65, 128}};

/// Keys masked by head (tests/attention_checks.hpp, KeyMask::by_head) need three heads: one
/// fully masked, one with its first 40 keys masked, one unmasked. lk = 1 and 33 leave the
/// second head fully masked too; 41 leaves it one key past the first two K/V tiles of 32.
inline const std::vector<AttentionShape> kAttentionMaskedCpuShapes = {
    {3, 1, 1, 1}, {3, 17, 127, 59}, {3, 33, 41, 16}, {3, 5, 300, 64}, {3, 9, 33, 128}};
inline const std::vector<AttentionShape> kAttentionMaskedKernelShapes = {
    {3, 1, 1, 1}, {3, 17, 100, 16}, {3, 9, 41, 64}, {3, 8, 33, 128}};
/// Race mode and the instrumented twin check every access: one shape with every kind of head.
inline const std::vector<AttentionShape> kAttentionMaskedKernelRaceShapes = {{3, 9, 41, 16}};
/// The same for the 16-bit tile kernels (d = 64 or 128, K/V tiles of up to 64 keys): the second
/// head's 40 masked keys leave a warp's 16 keys, or a step's 32, wholly masked in a first tile
/// whose other keys are not.
inline const std::vector<AttentionShape> kAttentionMaskedTileShapes = {{3, 9, 100, 64},
                                                                       {3, 8, 70, 128}};
inline const std::vector<AttentionShape> kAttentionMaskedTileRaceShapes = {{3, 9, 70, 64}};

/// The lanes check (check_attention_lanes_agree): several K/V tiles, and head dimensions up to
/// 128, where a lane computes columns lane, lane + 32, ...
inline const std::vector<AttentionShape> kAttentionLaneShapes = {
    {2, 17, 100, 16}, {1, 9, 65, 64}, {1, 8, 33, 128}};
inline const std::vector<AttentionShape> kAttentionLaneRaceShapes = {{1, 9, 65, 64}};

/// The softmax scale of a case: 1 / sqrt(d) times a factor drawn from the case itself (its
/// shape, score kind and mask, through splitmix64), so that every list of cases runs most of
/// its cases at a scale other than the default: a kernel that folds 1 / sqrt(d) where the
/// caller's scale belongs, or a launcher that drops it, fails there. Every factor is positive
/// (fa2_scheduled's row max is of unscaled scores, eq. 5 of chapter 08) and within [0.4, 2.4],
/// so the score kinds keep their meaning: the inputs fold the drawn scale in as they fold the
/// default (large_offset, arange), and randn scores stay within a few units.
inline float drawn_scale(AttentionShape s, ScoreKind kind, bool causal = false) {
  constexpr float kFactors[] = {1.f, 0.4f, 1.7f, 0.65f, 2.4f};
  std::uint64_t x = ((((std::uint64_t(s.bh) * 1000003u + std::uint64_t(s.lq)) * 1000003u +
                       std::uint64_t(s.lk)) * 1000003u + std::uint64_t(s.d)) * 8u +
                     std::uint64_t(kind)) * 2u + (causal ? 1u : 0u);
  x = splitmix64(x);  // neighbouring cases land far apart
  return default_scale(s.d) * kFactors[x % (sizeof kFactors / sizeof kFactors[0])];
}

/// Q row blocks x K/V tiles of a CPU step: the rung record's tile shape (common/rung.hpp).
using Tiles = TileShape;

/// One by one (every row and key its own tile), sizes that divide none of the shapes, the
/// chapter kernel's own tile, and tiles larger than the whole problem.
inline std::vector<Tiles> attention_tiles(Tiles kernel_tile) {
  return {{1, 1}, {3, 7}, kernel_tile, {64, 64}, {5, 2000}};
}

}  // namespace wb::test
