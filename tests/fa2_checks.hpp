// What the FA2 chapters' tests (06, 08) share: the K/V tiles a causal kernel must visit, the
// convention on fully masked rows, and the measure of a rung against chapter 06's CPU step and
// the fp64 reference under the error model of chapter 06's eq. (8).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "common/compare.hpp"
#include "common/reference_attention.hpp"
#include "tests/attention_checks.hpp"
#include "tests/attention_ladder_checks.hpp"
#include "tests/support.hpp"

namespace wb::test {

/// The K/V tiles that hold at least one (query, key) pair the mask lets through, counted by
/// brute force over every pair: the tiles an honest causal kernel must visit, and no more.
inline long tiles_touching_the_diagonal(AttentionShape shape, int br, int bc) {
  long tiles = 0;
  for (int i0 = 0; i0 < shape.lq; i0 += br)
    for (int j0 = 0; j0 < shape.lk; j0 += bc) {
      bool any = false;
      for (int i = i0; i < std::min(i0 + br, shape.lq) && !any; ++i)
        for (int j = j0; j < std::min(j0 + bc, shape.lk) && !any; ++j)
          any = j <= i + (shape.lk - shape.lq);  // the mask, restated as in chapter 06's eq. (6)
      tiles += any;
    }
  return tiles * shape.bh;
}

/// The K/V tiles block (Q tile x, head b) must load, at (b, x) of a (bh, ceil(lq / br)) table
/// and 0 after it up to `slots` ints (the room the tests give: one per query row): every tile
/// of the keys without the mask; under it, those holding a pair the mask lets through, counted
/// by brute force. Checked slot by slot, a block that writes its count into another block's
/// slot fails even where the counts' sum is right.
inline std::vector<int> tiles_per_block(AttentionShape shape, int br, int bc, bool causal,
                                        std::size_t slots) {
  std::vector<int> tiles(slots, 0);
  const int q_tiles = (shape.lq + br - 1) / br;
  for (int x = 0; x < q_tiles; ++x) {
    const int i0 = x * br;
    int count = 0;
    for (int j0 = 0; j0 < shape.lk; j0 += bc) {
      bool any = !causal;
      for (int i = i0; i < std::min(i0 + br, shape.lq) && !any; ++i)
        any = j0 <= i + (shape.lk - shape.lq);  // the tile's first key is its most visible
      count += any;
    }
    for (int b = 0; b < shape.bh; ++b) tiles[std::size_t(b) * q_tiles + x] = count;
  }
  return tiles;
}

/// The FA2 chapters' causal cases at every alignment of the diagonal with the tiles
/// (diagonal_alignment_cases, fp16): lq = 65 (a full Q tile of 64 rows, 4 warps of 16, one row
/// past them, a partial tile of 128), at d = 64 every residue of lk - lq modulo `period` (the
/// least common multiple of the ladder's tile sizes there), at d = 128 those modulo 32, where a
/// rung's tiles or softmax steps of 32 keys differ from d = 64's. Race mode and the
/// instrumented twin check accesses, not the mask: four residues at lq = 17, in fp16 and in
/// fp32 (where an fp32 rung runs only its own type's cases, rung_dtype).
inline std::vector<AttentionCase> fa2_diagonal_cases(int period) {
  if (small_shapes()) {
    std::vector<AttentionCase> cases = diagonal_alignment_cases(17, 4, {64}, Dtype::fp16);
    for (const AttentionCase& c : diagonal_alignment_cases(17, 4, {64}, Dtype::fp32))
      cases.push_back(c);
    return cases;
  }
  std::vector<AttentionCase> cases = diagonal_alignment_cases(65, period, {64}, Dtype::fp16);
  for (const AttentionCase& c : diagonal_alignment_cases(65, 32, {128}, Dtype::fp16))
    cases.push_back(c);
  return cases;
}

/// Checks the workbook's convention on every fully masked row: O = 0 exactly, lse = -inf.
/// Under the causal mask with lq > lk the first lq - lk rows of every head see no key: that
/// they were found is checked too, so the check cannot pass by finding none.
inline void check_fa2_masked_rows(const ref::Attention& r, AttentionShape shape, bool causal,
                                  const std::vector<float>& o, const std::vector<float>& lse) {
  std::size_t masked = 0;
  for (std::size_t row = 0; row < shape.rows(); ++row) {
    if (r.m[row] != -INFINITY) continue;
    CAPTURE(row);
    ++masked;
    CHECK(lse[row] == -INFINITY);
    for (int c = 0; c < shape.d; ++c) CHECK(o[row * shape.d + c] == 0.f);
  }
  if (causal && shape.lq > shape.lk)
    CHECK(masked >= static_cast<std::size_t>(shape.bh) * (shape.lq - shape.lk));
}

/// What fa2_rung_error holds a rung to on a case, from the CPU step with the rung's tiles: its
/// errors against fp64 (O in units of the case's w) and the K/V tiles it visited.
struct Fa2CpuStep {
  ErrorReport o;
  ErrorReport lse;
  long tiles_visited;
};

namespace detail {
/// O's weights w of each case and the CPU step of each case and tile shape, made once for all
/// the rungs that take them (chapter 08's seven rungs have at most three tile shapes), as the
/// case's inputs are (CaseCache), and emptied with them.
struct Fa2Cache {
  std::uint64_t generation = 0;
  std::map<std::string, std::vector<double>> w;
  std::map<std::tuple<std::string, int, int>, Fa2CpuStep> cpu;
};
inline Fa2Cache& fa2_cache() {
  static Fa2Cache cache;
  if (cache.generation != case_cache().generation) cache = {case_cache().generation, {}, {}};
  return cache;
}
}  // namespace detail

/// The measure of an FA2 rung (chapters 06 and 08) with tiles t (Br, Bc) on a case: O in units
/// of w, logsumexp, the fully masked rows, the K/V tiles visited.
inline RungError fa2_rung_error(const AttentionRungRun& run, Tiles t) {
  const AttentionShape& shape = run.c.shape;
  const ref::Attention& r = run.r;
  // The kernel's inputs, and the CPU step and fp64 reference run on exactly those values.
  // The +-1e4 offsets (large_offset) still make sense in fp16: |q_0| = k_0 = sqrt(1e4 /
  // scale) is at most about 450 (d = 64) or 530 (d = 128) at the smallest drawn scale (0.4 /
  // sqrt(d)), far below fp16's 65504, and the scores of about +-1e4 only ever exist in the
  // float accumulator.
  REQUIRE_FALSE(has_nan(r.o));
  REQUIRE_FALSE(has_nan(r.lse));
  detail::Fa2Cache& cache = detail::fa2_cache();
  auto w_cached = cache.w.find(run.key);
  if (w_cached == cache.w.end()) {
    std::vector<double> w_case =
        run.c.dtype == Dtype::fp32
            ? r.o_weight
            : ch06::tensor_core_weight(r.o_weight, run.in, shape, run.c.dtype);
    w_cached = cache.w.emplace(run.key, std::move(w_case)).first;
  }
  const std::vector<double>& w = w_cached->second;
  const auto step_key = std::make_tuple(run.key, t.br, t.bc);
  auto step = cache.cpu.find(step_key);
  if (step == cache.cpu.end()) {
    const ch06::Fa2Result cpu =
        ch06::attention_fa2(run.in, shape, {run.scale, run.c.causal, t.br, t.bc});
    step = cache.cpu
               .emplace(step_key, Fa2CpuStep{ref::compare_weighted(cpu.o, r.o, w),
                                             compare(cpu.lse, r.lse), cpu.tiles_visited})
               .first;
  }
  const ErrorReport& cpu_o = step->second.o;
  const ErrorReport& cpu_lse = step->second.lse;
  // The policy: twice the CPU step's error plus the floor (the kernel sums in butterflies
  // and with fmaf, CUDA's expf and logf differ from glibc's by an ulp or two).
  // logsumexp comes from the float m and l (l sums the unrounded P~): the float policy. On its
  // own, against fp64: twice the CPU step's stated bound plus the floor, the stated bound being
  // lse_floor itself (the cpu suite holds the CPU step to it directly), so a logsumexp() both
  // compute wrong fails here.
  const double lse_floor = ref::lse_floor(r.score_error, shape.lk, r.max_abs_lse);
  const ErrorReport lse = compare(run.run.out.lse, r.lse);
  WB_CHECK_WITHIN(lse, chain_bound(cpu_lse.max_abs, lse_floor));
  WB_CHECK_WITHIN(lse, chain_bound(lse_floor, lse_floor));
  check_fa2_masked_rows(r, shape, run.c.causal, run.run.out.o, run.run.out.lse);
  long visited = 0;
  for (int n : run.run.tiles) visited += n;
  // The same tiles as the CPU step with the kernel's tile sizes: under the mask, exactly
  // those that touch the diagonal; the others are never loaded. And block by block, each
  // count in its own block's slot.
  CHECK(visited == step->second.tiles_visited);
  if (run.c.causal) CHECK(visited == tiles_touching_the_diagonal(shape, t.br, t.bc));
  const std::vector<int> due = tiles_per_block(shape, t.br, t.bc, run.c.causal, run.run.tiles.size());
  for (std::size_t slot = 0; slot < due.size(); ++slot) {
    if (run.run.tiles[slot] == due[slot]) continue;
    CHECK_MESSAGE(run.run.tiles[slot] == due[slot], "slot ", slot, " of tiles_visited (head ",
                  slot / std::size_t((shape.lq + t.br - 1) / t.br), ", Q tile ",
                  slot % std::size_t((shape.lq + t.br - 1) / t.br), ") holds ",
                  run.run.tiles[slot], " K/V tiles, not ", due[slot]);
    break;  // the first wrong slot says it; the others would repeat it
  }
  // O, in units of w: twice the CPU step's float error plus the stated floor of the
  // float work (output_floor: the kernel sums in another order, on tensor cores and in
  // lane pairs), plus 2 u for rounding P~ and O to the 16-bit type (tensor_core_weight in
  // fa2.hpp); u = 0 for the fp32 rung, which rounds nothing. On its own, against fp64: the
  // same with the CPU step's stated bound, output_floor (the error model holds for every
  // order of the work; in units of w >= o_weight the CPU step's error is no larger).
  const double rounding = 2.0 * ch06::unit_roundoff(run.dtype);
  const double o_floor = ref::output_floor(r.score_error, shape.lk);
  return {ref::compare_weighted(run.run.out.o, r.o, w),
          /*relative=*/false,
          cpu_o.max_abs,
          o_floor + rounding,
          chain_bound(o_floor, o_floor + rounding),
          ""};
}

}  // namespace wb::test
