// Chapter 06: FlashAttention-2. The tiled FA2 against chapter 05's FA1 under the 2x policy,
// logsumexp against fp64, causal against the naive attention with a -inf mask (lq != lk
// included), the tiles the causal mask skips, a planted mistake the bounds catch, then the
// kernel against the CPU step, and the tensor-core kernel (fp16 and bf16 inputs) against the
// CPU step on the same rounded inputs, each rung also against the rung before it and against
// fp64 on its own bound, and the fp32 kernel's lanes' agreement.
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "chapters/04_fused_qk_softmax/attention_naive.hpp"
#include "chapters/05_fa1_subsum/fa1.hpp"
#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "common/attention_inputs.hpp"
#include "common/reference_attention.hpp"
#include "common/warp.hpp"
#include "tests/attention_checks.hpp"
#include "tests/attention_ladder_checks.hpp"
#include "tests/attention_shapes.hpp"
#include "tests/fa2_checks.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch06;

namespace {

constexpr std::uint64_t kSeed = 606;

const std::vector<test::Tiles> kTiles = test::attention_tiles({16, 32});  // the kernel's tile third

/// FA2 with a planted mistake: the accumulator is not rescaled when the running max moves
/// (SS = SS + P~ V instead of SS e^{m - m_new} + P~ V); l is still right.
std::vector<float> fa2_without_accumulator_rescale(const AttentionInputs& in, AttentionShape shape,
                                                   float scale, int bc) {
  std::vector<float> o(shape.q_elems());
  std::vector<float> ss(shape.d), s(bc);
  for (std::size_t row = 0; row < shape.rows(); ++row) {
    const std::size_t b = row / shape.lq;
    float m = -INFINITY, l = 0.f;
    std::fill(ss.begin(), ss.end(), 0.f);
    for (int j0 = 0; j0 < shape.lk; j0 += bc) {
      const int cols = std::min(bc, shape.lk - j0);
      const float* k_j = in.k.data() + (b * shape.lk + j0) * shape.d;
      const float* v_j = in.v.data() + (b * shape.lk + j0) * shape.d;
      ch04::score_tile(in.q.data() + row * shape.d, k_j, 1, cols, shape.d, scale, s.data());
      float m_new = m;
      for (int c = 0; c < cols; ++c) m_new = std::max(m_new, s[c]);
      const float alpha = ch05::rescale(m, m_new);
      float rowsum = 0.f;
      for (int c = 0; c < cols; ++c) rowsum += (s[c] = std::exp(s[c] - m_new));
      l = l * alpha + rowsum;
      for (int c = 0; c < cols; ++c)
        for (int t = 0; t < shape.d; ++t) ss[t] += s[c] * v_j[c * shape.d + t];  // the mistake
      m = m_new;
    }
    for (int t = 0; t < shape.d; ++t) o[row * shape.d + t] = ss[t] / l;
  }
  return o;
}

/// Chapter 05's FA1 against fp64: the step before FA2.
test::StepBefore fa1_error(const test::AttentionInput& a) {
  // O's error in units of sum_j p_j |v_j| (it may cancel to ~0), bounded by output_floor;
  // logsumexp's absolute error by lse_floor (common/reference_attention.hpp).
  return {ref::compare_weighted(
              ch05::attention_fa1(a.in, a.shape, a.scale, ch05::kKernelRows, ch05::kKernelKeys).o,
              a.r.o, a.r.o_weight),
          ref::output_floor(a.r.score_error, a.shape.lk), /*relative=*/false};
}

/// The naive attention with -inf scores above the diagonal: the step before causal FA2.
test::StepBefore masked_naive_error(const test::AttentionInput& a) {
  return {ref::compare_weighted(ch04::attention_naive(a.in, a.shape, a.scale, /*causal=*/true).o,
                                a.r.o, a.r.o_weight),
          ref::output_floor(a.r.score_error, a.shape.lk), /*relative=*/false};
}

/// Tiled FA2's O against fp64 with tiles t (the mask of the reference), after its logsumexp
/// and its fully masked rows.
ErrorReport fa2_cpu_error(const test::AttentionInput& a, const test::Tiles& t) {
  const Fa2Result fa2 = attention_fa2(a.in, a.shape, {a.scale, a.causal, t.br, t.bc});
  WB_CHECK_WITHIN(compare(fa2.lse, a.r.lse),
                  ref::lse_floor(a.r.score_error, a.shape.lk, a.r.max_abs_lse));
  test::check_fa2_masked_rows(a.r, a.shape, a.causal, fa2.o, fa2.lse);
  return ref::compare_weighted(fa2.o, a.r.o, a.r.o_weight);
}

}  // namespace

TEST_SUITE("cpu") {
  TEST_CASE("tiled FA2 equals FA1 under the 2x policy and its logsumexp is within its bound") {
    test::check_step_chain(test::kAttentionCpuShapes, kSeed, /*causal=*/false, /*want_p=*/false,
                           kTiles, fa1_error, fa2_cpu_error);
  }

  TEST_CASE("causal FA2 equals the naive attention with a -inf mask when lq and lk differ") {
    // Bottom-right alignment: query i sees key j iff j <= i + (lk - lq). With lq > lk the first
    // lq - lk rows see nothing: O = 0 and logsumexp = -inf there.
    const std::vector<AttentionShape> shapes = {
        {2, 17, 17, 16},  {1, 127, 17, 59}, {1, 17, 127, 64}, {1, 1000, 31, 1},
        {1, 1, 1000, 16}, {2, 64, 64, 128}, {1, 45, 1, 96}};
    test::check_step_chain(shapes, kSeed, /*causal=*/true, /*want_p=*/false, kTiles,
                           masked_naive_error, fa2_cpu_error);
  }

  TEST_CASE("causal FA2 visits exactly the tiles that touch the diagonal") {
    for (AttentionShape shape : {AttentionShape{1, 256, 256, 8}, AttentionShape{2, 100, 37, 8},
                                 AttentionShape{1, 37, 100, 8}, AttentionShape{1, 5, 1, 8}}) {
      for (const test::Tiles& t : kTiles) {
        const std::string where =
            to_string(shape) + ", tiles " + std::to_string(t.br) + " x " + std::to_string(t.bc);
        CAPTURE(where);
        const AttentionInputs in = make_attention_inputs(ScoreKind::randn, shape, 1.f, kSeed);
        const long all = attention_fa2(in, shape, {1.f, false, t.br, t.bc}).tiles_visited;
        const long causal = attention_fa2(in, shape, {1.f, true, t.br, t.bc}).tiles_visited;
        CHECK(all ==
              shape.bh * long((shape.lq + t.br - 1) / t.br) * ((shape.lk + t.bc - 1) / t.bc));
        CHECK(causal == test::tiles_touching_the_diagonal(shape, t.br, t.bc));
      }
    }
    // On a square problem with 64 x 64 tiles, 8 x 8 tiles: the diagonal and below, 36 of 64.
    const AttentionShape square{1, 512, 512, 8};
    const AttentionInputs in = make_attention_inputs(ScoreKind::randn, square, 1.f, kSeed);
    CHECK(attention_fa2(in, square, {1.f, true, 64, 64}).tiles_visited == 36);
  }

  TEST_CASE("a softmax scale other than the default is applied once") {
    const AttentionShape shape{1, 31, 97, 64};
    for (float scale : {0.03f, 1.f, 2.5f}) {
      CAPTURE(scale);
      const AttentionInputs in = make_attention_inputs(ScoreKind::randn, shape, scale, kSeed);
      const ref::Attention r = ref::attention(in, shape, scale, false, false);
      const Fa2Result fa2 = attention_fa2(in, shape, {scale, false, 16, 32});
      WB_CHECK_WITHIN(ref::compare_weighted(fa2.o, r.o, r.o_weight),
                      ref::output_floor(r.score_error, shape.lk));
      WB_CHECK_WITHIN(compare(fa2.lse, r.lse),
                      ref::lse_floor(r.score_error, shape.lk, r.max_abs_lse));
    }
  }

  TEST_CASE("an accumulator that is not rescaled fails the bound") {
    // The planted mistake of the exercise's hint: SS += P~ V without SS *= e^{m - m_new}. The
    // old terms keep the weight of an older, smaller max: off by e^{m_new - m} - 1 >> floor.
    test::check_planted_mistake_fails(
        {1, 17, 127, 16}, kSeed,
        [](const AttentionInputs& in, AttentionShape shape, float scale) {
          return attention_fa2(in, shape, {scale, false, 1, 16}).o;
        },
        [](const AttentionInputs& in, AttentionShape shape, float scale) {
          return fa2_without_accumulator_rescale(in, shape, scale, 16);
        });
  }
}

// ------------------------------------------------------------------------------------------
// The kernel ladder: FA2 in fp32, then on tensor cores with fp16 and bf16 inputs
// ------------------------------------------------------------------------------------------

namespace {

// lq and lk from {1, 17, 64, 127, 200}, d = 64 and 128, bh 1 and 2: partial Q and K/V tiles
// (64 rows, 64 or 32 keys), lq > lk (fully masked rows under the mask) and lq < lk.
const std::vector<AttentionShape> kTensorCoreShapes = {
    {1, 1, 1, 64},     {2, 17, 127, 64},  {1, 127, 17, 128}, {1, 200, 200, 64},
    {1, 64, 200, 128}, {2, 200, 64, 128}, {1, 127, 1, 64},   {1, 1, 200, 128}};
// Race mode (about ten times slower): one shape per d, both partial tiles and masked rows.
const std::vector<AttentionShape> kTensorCoreRaceShapes = {{1, 17, 127, 64}, {1, 127, 64, 128}};

/// The fp32 cases on the attention kernel shapes, and the fp16 and bf16 cases on the
/// tensor-core shapes, each without and with the mask; and keys masked with -inf scores by
/// head (fully masked rows, masked first tiles), in fp32 and in fp16. The fp32 rung runs on the
/// 16-bit cases too (on the same rounded values, test::rung_dtype): the tensor-core rung's rung
/// before (but in race mode).
std::vector<test::AttentionCase> ladder_cases() {
  const bool small = test::small_shapes();
  std::vector<test::AttentionCase> cases =
      test::attention_cases(test::attention_kernel_shapes(), {false, true});
  for (const std::vector<test::AttentionCase>& more :
       {test::attention_cases(small ? kTensorCoreRaceShapes : kTensorCoreShapes, {false, true},
                              {Dtype::fp16, Dtype::bf16}),
        test::masked_attention_cases(test::masked_attention_kernel_shapes()),
        test::masked_attention_cases(
            small ? test::kAttentionMaskedTileRaceShapes : test::kAttentionMaskedTileShapes,
            {Dtype::fp16})})
    cases.insert(cases.end(), more.begin(), more.end());
  return cases;
}

/// The measure of a rung on a case (tests/fa2_checks.hpp), with the rung's tiles.
test::RungError measure(const test::AttentionRungRun& run) {
  return test::fa2_rung_error(run, run.rung.facts.tiles(run.c.shape.d));
}

template <Backend B>
void every_rung_equals_the_cpu_step() {
  test::check_attention_ladder(B, kernel_ladder<B>(), ladder_cases(), kSeed, measure);
}

template <Backend B>
void every_rung_masks_the_diagonal_at_every_alignment() {
  // lk - lq over every residue modulo 64, the least common multiple of the rungs' tiles (fp32:
  // 16 rows by 32 keys; tensor cores: 64 rows, 4 warps of 16, by 64 keys at d = 64); at
  // d = 128 the residues modulo 32, its tensor-core tile's keys (test::fa2_diagonal_cases).
  // The fp32 rung runs the fp16 cases on their values (test::rung_dtype).
  int period = 1;
  for (const Rung<AttentionArgs>& rung : kernel_ladder<B>()) {
    const TileShape t = rung.facts.tiles(64);
    period = std::lcm(period, std::lcm(t.br, t.bc));
  }
  REQUIRE(period == 64);
  test::check_attention_ladder(B, kernel_ladder<B>(), test::fa2_diagonal_cases(period), kSeed + 1,
                               measure);
}

/// The fp32 rung's K/V tiles per block on randn of `shape`, scale 1.
template <Backend B>
std::vector<int> fa2_tiles(AttentionShape shape, bool causal) {
  const AttentionInputs in = make_attention_inputs(ScoreKind::randn, shape, 1.f, kSeed);
  const std::optional<test::RungOutput> out =
      test::run_attention_rung(B, Rungs<B>::fa2(), in, shape, 1.f, causal, Dtype::fp32);
  REQUIRE(out);
  std::vector<int> tiles = out->tiles;
  tiles.resize(std::size_t(shape.bh) * ((shape.lq + kKernelRows - 1) / kKernelRows));  // its grid
  return tiles;
}

template <Backend B>
void kernel_skips_the_tiles_above_the_diagonal() {
  // 320 x 320 in 16 x 32 tiles: block x visits tiles up to the one holding key 16 x + 15,
  // i.e. x / 2 + 1 of the 10; 20 blocks visit 110 tiles, where the unmasked kernel visits 200.
  const AttentionShape shape{1, 320, 320, 8};
  const std::vector<int> all = fa2_tiles<B>(shape, false);
  const std::vector<int> causal = fa2_tiles<B>(shape, true);
  long n_all = 0, n_causal = 0;
  for (int n : all) n_all += n;
  for (std::size_t x = 0; x < causal.size(); ++x) {
    CAPTURE(x);
    CHECK(causal[x] == int(x) / 2 + 1);
    n_causal += causal[x];
  }
  CHECK(n_all == 200);
  CHECK(n_causal == 110);
}

// Each lane of a warp rescales its output columns with its own copy of the running max
// (warp_max) and of l (warp_sum): equal columns of V give equal columns of O, bit
// for bit, with and without the mask. The check runs the fp32 rungs only: the tensor-core
// rung keeps its rescale factors and P~ in shared memory, one copy per row for every lane (its
// lane pairs combine two operands with fmaxf and +, commutative bit for bit), so it has no
// per-lane copies for this check to compare.
template <Backend B>
void every_lane_rescales_with_the_same_statistics() {
  for (bool causal : {false, true})
    test::check_attention_lanes_agree(
        B, kernel_ladder<B>(),
        test::small_shapes() ? test::kAttentionLaneRaceShapes : test::kAttentionLaneShapes, kSeed,
        causal);
}

template <Backend B>
void kernel_rejects_a_head_dimension_above_128() {
  test::check_rung_refuses(B, Rungs<B>::fa2(), {1, 2, 2, ch04::kMaxHeadDim + 1}, Dtype::fp32,
                           "d = 129");
}

template <Backend B>
void tensor_core_kernel_rejects_other_head_dimensions() {
  for (int d : {16, 96, 256}) {
    CAPTURE(d);
    test::check_rung_refuses(B, Rungs<B>::fa2_tensor_core(), {1, 2, 2, d}, Dtype::fp16,
                             "64 or 128");
  }
}

}  // namespace

WB_KERNEL_TEST_CASE(
    "every FA2 rung equals the CPU step and the rung before it with and without the mask in fp32 "
    "fp16 and bf16",
    every_rung_equals_the_cpu_step)
WB_KERNEL_TEST_CASE("every FA2 rung masks the diagonal at every alignment with the tiles",
                    every_rung_masks_the_diagonal_at_every_alignment)
WB_KERNEL_TEST_CASE("the causal FA2 kernel skips the tiles above the diagonal",
                    kernel_skips_the_tiles_above_the_diagonal)
WB_KERNEL_TEST_CASE("the FA2 kernel rejects a head dimension above 128",
                    kernel_rejects_a_head_dimension_above_128)
WB_KERNEL_TEST_CASE("the tensor-core FA2 kernel rejects head dimensions other than 64 and 128",
                    tensor_core_kernel_rejects_other_head_dimensions)
WB_KERNEL_TEST_CASE("equal columns of V give equal columns of O whichever lane computes them",
                    every_lane_rescales_with_the_same_statistics)
