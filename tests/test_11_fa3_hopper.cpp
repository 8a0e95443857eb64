// Chapter 11: FlashAttention-3 on Hopper. The laws its rungs rest on, checked on the host:
// wgmma's accumulator holds exactly the elements of its register A operand (eq. 2, against the
// simulator's PTX layouts), the 128-byte swizzle permutes each row and puts a core matrix's 8
// rows in 8 bank groups (eq. 1), and the ring's parities name each stage's phases (eq. 4). Then
// every rung, from chapter 08's last on, against the CPU step (chapter 06's tiled FA2 with the
// rung's tiles), the rung before and fp64 on chapter 06's eq. (8) bound, fp16 and bf16, d = 64
// and 128, odd shapes, with and without the causal mask; the refusals of what the rungs cannot
// take.
#include <cmath>
#include <cstdint>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "chapters/11_fa3_hopper/fa3_hopper.hpp"
#include "common/sim/ptx_runtime.hpp"
#include "common/sim/wgmma_layout.hpp"
#include "tests/attention_checks.hpp"
#include "tests/attention_ladder_checks.hpp"
#include "tests/fa2_checks.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch11;

namespace {

constexpr std::uint64_t kSeed = 1111;

}  // namespace

TEST_SUITE("cpu") {
  TEST_CASE("the ring's parities name each stage's phases in order") {
    // Eq. (4): stage s's k-th use completes phase k of full[s] and, once the consumers release
    // it, phase k of empty[s]. Replaying the uses, each wait must name the parity of the phase
    // it waits for: the consumer's the use itself, the producer's the use before.
    for (int stages : {1, 2, 3, 4}) {
      std::vector<int> uses(stages, 0);
      for (int i = 0; i < 40; ++i) {
        CAPTURE(stages);
        CAPTURE(i);
        const int s = ring_stage(i, stages);
        REQUIRE(s == i % stages);
        CHECK(full_parity(i, stages) == unsigned(uses[s] % 2));
        if (uses[s] > 0) CHECK(empty_parity(i, stages) == unsigned((uses[s] - 1) % 2));
        ++uses[s];
      }
    }
  }

  TEST_CASE("the 128-byte swizzle permutes each row and spreads a core matrix over all banks") {
    // Eq. (1), against the simulator's canonical layouts (tested on their own in
    // tests/sim/test_wgmma_layout.cpp): chunk c of row r at chunk c ^ (r % 8) of the row.
    for (int r = 0; r < 64; ++r) {
      std::set<unsigned> chunks;
      for (unsigned c = 0; c < 8; ++c) {
        const unsigned at = sim::wgmma_swizzle(r * 128 + c * 16, sim::WgmmaSwizzle::b128, 0);
        CHECK(at / 128 == unsigned(r));  // the row keeps its 128 bytes
        chunks.insert(at % 128 / 16);
        CHECK(at % 128 / 16 == (c ^ unsigned(r % 8)));
      }
      CHECK(chunks.size() == 8);
    }
    // A core matrix: chunk c of 8 consecutive rows lands in 8 different 16-byte bank groups.
    for (int r0 = 0; r0 < 64; r0 += 8)
      for (unsigned c = 0; c < 8; ++c) {
        std::set<unsigned> groups;
        for (int r = r0; r < r0 + 8; ++r)
          groups.insert(sim::wgmma_swizzle(r * 128 + c * 16, sim::WgmmaSwizzle::b128, 0) % 128 / 16);
        CHECK(groups.size() == 8);
      }
  }

  TEST_CASE("wgmma's accumulator holds exactly the elements of its register A operand") {
    // Eq. (2): thread l of warp w of the warpgroup holds D(16 w + g + 8 (e / 2), 8 n + 2 t +
    // e % 2) in d[4 n + e] (g = l / 4, t = l % 4; common/hopper.cuh, the simulator's layout,
    // tested against wgmma's products in tests/sim/test_wgmma.cpp). Register r of P's A
    // fragment for keys [16 kk, 16 kk + 16) packs d[4 (2 kk + r / 2) + 2 (r % 2)] and the
    // element after it (pack_p): those must be A's elements (row, 16 kk + col) of that register
    // and half, which wgmma reads as mma.m16n8k16's A layout for rows 16 w .. 16 w + 15.
    for (int warp = 0; warp < 4; ++warp)
      for (int lane = 0; lane < 32; ++lane)
        for (int kk = 0; kk < kBc / 16; ++kk)
          for (int r = 0; r < 4; ++r)
            for (int half = 0; half < 2; ++half) {
              CAPTURE(warp);
              CAPTURE(lane);
              CAPTURE(r);
              const int g = lane / 4, t = lane % 4;
              const int j = 4 * (2 * kk + r / 2) + 2 * (r % 2) + half;  // the accumulator
              const int d_row = 16 * warp + g + 8 * (j % 4 / 2), d_col = 8 * (j / 4) + 2 * t + j % 2;
              const sim::WmmaCoord a = sim::mma_coord(sim::MmaOperand::a, unsigned(lane), r, half);
              CHECK(d_row == 16 * warp + a.row);
              CHECK(d_col == 16 * kk + a.col);
            }
  }
}

// ------------------------------------------------------------------------------------------
// The kernel ladder
// ------------------------------------------------------------------------------------------

namespace {

// lq and lk from {1, 17, 97, 203, 1000}: partial Q tiles of 128 rows (and of a warpgroup's 64),
// partial K/V tiles of 128 (and chapter 08's 64) keys, lq != lk both ways (fully masked rows
// under the mask, Q tiles that visit no K/V tile), d = 64 and 128, bh 1 and 2; and lq = 126,
// lk = 127 at both d (the last key of a K/V tile alone masked; under the mask row 63, the last
// of the first warpgroup, alone seeing key 64).
const std::vector<AttentionShape> kShapes = {
    {1, 1, 1, 64},     {2, 17, 97, 64},   {1, 203, 17, 128}, {1, 97, 203, 128},
    {1, 1000, 97, 64}, {1, 1, 1000, 128}, {1, 126, 127, 64}, {1, 126, 127, 128}};
// Race mode and the instrumented twin (several times slower): both d, partial tiles, lq < lk
// with 5 K/V tiles (both rings, of 2 and 3 stages, wrap around: every stage is given back and
// refilled) and lq > lk (fully masked rows, a Q tile that visits no K/V tile).
const std::vector<AttentionShape> kRaceShapes = {{1, 17, 520, 64}, {1, 203, 17, 128}};

/// The ladder the checks run: all of it, or in race mode and the instrumented twin (whose
/// checks are of accesses) the Hopper rungs alone: rung 1 is chapter 08's kernel, which chapter
/// 08's own suites run in those modes.
template <Backend B>
Ladder<AttentionArgs> checked_ladder() {
  Ladder<AttentionArgs> ladder = kernel_ladder<B>();
  if (test::small_shapes()) ladder.erase(ladder.begin());
  return ladder;
}

test::RungError measure(const test::AttentionRungRun& run) {
  return test::fa2_rung_error(run, run.rung.facts.tiles(run.c.shape.d));
}

template <Backend B>
void every_rung_equals_the_cpu_step() {
  const bool small = test::small_shapes();
  std::vector<test::AttentionCase> cases = test::attention_cases(
      small ? kRaceShapes : kShapes, {false, true}, {Dtype::fp16, Dtype::bf16});
  // And keys masked with -inf scores by head: fully masked rows, and a first tile whose
  // masked keys fill a warp's 16 while the tile's others do not.
  for (const test::AttentionCase& c : test::masked_attention_cases(
           small ? test::kAttentionMaskedTileRaceShapes : test::kAttentionMaskedTileShapes,
           {Dtype::fp16, Dtype::bf16}))
    cases.push_back(c);
  test::check_attention_ladder(B, checked_ladder<B>(), cases, kSeed, measure);
}

template <Backend B>
void every_rung_masks_the_diagonal_at_every_alignment() {
  // Every rung masks only the tiles the diagonal crosses, and skips the K/V tiles past it (per
  // block, and per warpgroup in the Hopper rungs): lk - lq over every residue modulo the least
  // common multiple of every rung's Br, Bc, warpgroup (64), warp (16, 32) and softmax step (64,
  // 32 keys): 128 (test::fa2_diagonal_cases).
  int period = 64;
  for (const Rung<AttentionArgs>& rung : kernel_ladder<B>())
    for (int d : {64, 128}) {
      const TileShape t = rung.facts.tiles(d);
      for (int size : {t.br, t.bc, 32}) period = std::lcm(period, size);
    }
  REQUIRE(period == 128);
  test::check_attention_ladder(B, checked_ladder<B>(), test::fa2_diagonal_cases(period), kSeed + 1,
                               measure);
}

template <Backend B>
void every_rung_rejects_other_head_dimensions() {
  for (const Rung<AttentionArgs>& rung : kernel_ladder<B>()) {
    for (int d : {16, 96, 256}) {
      CAPTURE(d);
      CAPTURE(rung.name);
      test::check_rung_refuses(B, rung, {1, 2, 2, d}, Dtype::fp16, "64 or 128");
    }
    test::check_rung_refuses(B, rung, {1, 2, 2, 64}, Dtype::fp32, "fp32");
  }
}

template <Backend B>
void every_rung_rejects_a_scale_that_is_not_positive() {
  // The row max is of the unscaled scores (chapter 08's eq. 5): with scale <= 0 it would be the
  // min. Every rung's record says so, and every rung refuses.
  const AttentionShape shape{1, 3, 5, 64};
  const AttentionInputs in = make_attention_inputs(ScoreKind::randn, shape, 1.f, kSeed);
  for (const Rung<AttentionArgs>& rung : kernel_ladder<B>()) {
    const std::string name = rung.name;
    CAPTURE(name);
    CHECK(rung.limits.positive_scale);
    for (float scale : {0.f, -0.125f}) {
      CAPTURE(scale);
      AttentionBuffers buffers(B, in, shape, scale, false, Dtype::fp16, rung.limits.outputs);
      std::string message;
      try {
        run_rung(rung, buffers.args);
      } catch (const std::invalid_argument& e) {
        message = e.what();
      }
      CHECK_MESSAGE(message.find(name + ": the softmax scale must be positive") == 0,
                    "message: ", message);
    }
  }
}

}  // namespace

WB_KERNEL_TEST_CASE(
    "every FA3 rung equals the CPU step and the rung before it with and without the mask in "
    "fp16 and bf16",
    every_rung_equals_the_cpu_step)
WB_KERNEL_TEST_CASE("every FA3 rung masks the diagonal at every alignment with the tiles",
                    every_rung_masks_the_diagonal_at_every_alignment)
WB_KERNEL_TEST_CASE("every FA3 rung rejects head dimensions other than 64 and 128 and fp32",
                    every_rung_rejects_other_head_dimensions)
WB_KERNEL_TEST_CASE("every FA3 rung rejects a softmax scale that is not positive",
                    every_rung_rejects_a_scale_that_is_not_positive)
