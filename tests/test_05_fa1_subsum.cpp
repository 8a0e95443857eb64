// Chapter 05: FlashAttention-1. The element-wise SubSum recurrence and the tiled FA1 against
// chapter 04's P V under the 2x policy, also with keys masked to -inf (fully masked rows and
// masked first tiles), the block form's merge law, a planted mistake that the bounds catch,
// then the kernel against the tiled CPU step and fp64, and its lanes' agreement.
#include <cmath>
#include <string>
#include <vector>

#include "chapters/04_fused_qk_softmax/attention_naive.hpp"
#include "chapters/04_fused_qk_softmax/fused_softmax.hpp"
#include "chapters/05_fa1_subsum/fa1.hpp"
#include "common/attention_inputs.hpp"
#include "common/reference_attention.hpp"
#include "tests/attention_checks.hpp"
#include "tests/attention_ladder_checks.hpp"
#include "tests/attention_shapes.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch05;

namespace {

constexpr std::uint64_t kSeed = 505;

/// Chapter 04's step followed by O = P V: the fused P times V, accumulated in float.
std::vector<float> previous_step(const AttentionInputs& in, AttentionShape shape, float scale) {
  const ch04::FusedSoftmax fused =
      ch04::softmax_qk_fused(in, shape, scale, ch04::kKernelRows, ch04::kKernelKeys);
  std::vector<float> o(shape.q_elems(), 0.f);
  for (std::size_t row = 0; row < shape.rows(); ++row) {
    const std::size_t b = row / shape.lq;
    for (int j = 0; j < shape.lk; ++j) {
      const float p = fused.p[row * shape.lk + j];
      const float* v_j = in.v.data() + (b * shape.lk + j) * shape.d;
      for (int c = 0; c < shape.d; ++c) o[row * shape.d + c] += p * v_j[c];
    }
  }
  return o;
}

/// Chapter 04's P V against fp64: the step before; and the element-wise recurrence against it.
test::StepBefore previous_and_elementwise_error(const test::AttentionInput& a) {
  const ref::Attention& r = a.r;
  // O can cancel to ~0 (the ones kind averages randn values), so its error is measured
  // in units of sum_j p_j |v_j| (compare_weighted); output_floor bounds the rounding of
  // the probabilities and of up to lk steps of the recurrence in those units.
  const double floor = ref::output_floor(r.score_error, a.shape.lk);
  const ErrorReport prev =
      ref::compare_weighted(previous_step(a.in, a.shape, a.scale), r.o, r.o_weight);
  const std::vector<float> elem_o = attention_elementwise(a.in, a.shape, a.scale);
  test::check_masked_rows(r, elem_o, a.shape.d);  // O = 0 where every key is masked
  const ErrorReport elem = ref::compare_weighted(elem_o, r.o, r.o_weight);
  WB_CHECK_WITHIN(elem, chain_bound(prev.max_abs, floor));
  return {prev, floor, /*relative=*/false};
}

/// Tiled FA1's O against fp64 with tiles t, after its final (m, l) and its fully masked rows.
ErrorReport fa1_cpu_error(const test::AttentionInput& a, const test::Tiles& t) {
  const Fa1Result fa1 = attention_fa1(a.in, a.shape, a.scale, t.br, t.bc);
  test::check_row_stats(fa1.stats, a);  // the final (m, l) in "HBM"
  const test::MdColumns stats = test::split_md(fa1.stats);
  test::check_masked_rows(a.r, fa1.o, a.shape.d, &stats);  // O = 0, (m, l) = (-inf, 0)
  return ref::compare_weighted(fa1.o, a.r.o, a.r.o_weight);
}

/// The element-wise recurrence with a planted mistake: the old output is not rescaled by
/// e^{m_{j-1} - m_j} when the running max moves (keep = d'_{j-1} / d'_j).
std::vector<float> elementwise_without_rescale(const AttentionInputs& in, AttentionShape shape,
                                               float scale) {
  std::vector<float> o(shape.q_elems(), 0.f);
  for (std::size_t row = 0; row < shape.rows(); ++row) {
    const std::size_t b = row / shape.lq;
    MD md = ch03::md_identity();
    for (int j = 0; j < shape.lk; ++j) {
      const float* k_j = in.k.data() + (b * shape.lk + j) * shape.d;
      const float* v_j = in.v.data() + (b * shape.lk + j) * shape.d;
      float x = 0.f;
      ch04::score_tile(in.q.data() + row * shape.d, k_j, 1, 1, shape.d, scale, &x);
      const MD next = ch02::online_update(md, x);
      const float keep = md.d / next.d;  // the mistake: e^{m_{j-1} - m_j} dropped
      const float add = std::exp(x - next.m) / next.d;
      for (int c = 0; c < shape.d; ++c)
        o[row * shape.d + c] = o[row * shape.d + c] * keep + add * v_j[c];
      md = next;
    }
  }
  return o;
}

}  // namespace

TEST_SUITE("cpu") {
  TEST_CASE("the SubSum recurrence and tiled FA1 equal chapter 04 P V under the 2x policy") {
    test::check_step_chain(
        test::kAttentionCpuShapes, kSeed, /*causal=*/false, /*want_p=*/false,
        test::attention_tiles({kKernelRows, kKernelKeys}),  // the kernel's among them
        previous_and_elementwise_error, fa1_cpu_error);
  }

  TEST_CASE("fully masked rows give zeros and (m, l) = (-inf, 0) and masked tiles add nothing") {
    // Chapter 05 has no mask, but -inf scores reach it all the same: keys masked by head
    // (tests/attention_checks.hpp), a head whose every key is -inf (fully masked rows: O = 0,
    // (m, l) = (-inf, 0), never NaN, DESIGN.md's convention) and one whose first 40 keys are
    // (the element-wise recurrence's first steps and a whole first tile for tiles of up to 32
    // keys: merging (-inf, 0) with (-inf, 0) must rescale by 0, not by e^{-inf + inf} = NaN).
    // The same chain as above: O within twice chapter 04's error plus the floor, against the
    // fp64 attention over the unmasked keys.
    test::check_step_chain(test::kAttentionMaskedCpuShapes, kSeed, /*causal=*/false,
                           test::KeyMask::by_head, /*want_p=*/false,
                           test::attention_tiles({kKernelRows, kKernelKeys}),
                           previous_and_elementwise_error, fa1_cpu_error);
  }

  TEST_CASE("two normalized partial outputs merge into the output of all keys") {
    // Eq. (5): attention over keys [0, split) and over [split, lk), each normalized with its
    // own (m, d), merged, equals attention over all keys.
    const AttentionShape shape{1, 23, 211, 59};
    for (ScoreKind kind : all_score_kinds()) {
      const float scale = test::drawn_scale(shape, kind);
      for (int split_at : {1, 100, 210}) {
        const std::string where =
            std::string(to_string(kind)) + ", split " + std::to_string(split_at);
        CAPTURE(where);
        const AttentionInputs in = make_attention_inputs(kind, shape, scale, kSeed);
        const ref::Attention r = ref::attention(in, shape, scale, false, false);
        const std::size_t cut = std::size_t(split_at) * shape.d;
        const AttentionShape shape_a{1, shape.lq, split_at, shape.d};
        const AttentionShape shape_b{1, shape.lq, shape.lk - split_at, shape.d};
        const AttentionInputs in_a{
            in.q, {in.k.begin(), in.k.begin() + cut}, {in.v.begin(), in.v.begin() + cut}};
        const AttentionInputs in_b{
            in.q, {in.k.begin() + cut, in.k.end()}, {in.v.begin() + cut, in.v.end()}};
        const Fa1Result a = attention_fa1(in_a, shape_a, scale, 4, 16);
        const Fa1Result b = attention_fa1(in_b, shape_b, scale, 4, 16);
        std::vector<float> o(shape.q_elems());
        for (int i = 0; i < shape.lq; ++i) {
          const MD md = ch03::md_merge(a.stats[i], b.stats[i]);
          const float wa = a.stats[i].d * rescale(a.stats[i].m, md.m) / md.d;  // eq. (5)
          const float wb = b.stats[i].d * rescale(b.stats[i].m, md.m) / md.d;
          for (int c = 0; c < shape.d; ++c)
            o[i * shape.d + c] = wa * a.o[i * shape.d + c] + wb * b.o[i * shape.d + c];
        }
        // Each part is within output_floor of its exact partial output, in units of its own
        // weights, which the merge's convex weights carry into r.o_weight (a part's lk is at
        // most lk); each weight d_x e^{m_x - m} / d is off by the relative errors of d_x and of
        // d, softmax_floor each; and the merge adds 6 roundings (two factors of 3).
        WB_CHECK_WITHIN(ref::compare_weighted(o, r.o, r.o_weight),
                        ref::output_floor(r.score_error, shape.lk) +
                            2 * ref::softmax_floor(r.score_error, shape.lk) + 6 * kFloatEps);
      }
    }
  }

  TEST_CASE("a recurrence that forgets to rescale the old output fails the bound") {
    // The planted mistake of the exercise's hint: keep = d'_{j-1} / d'_j without
    // e^{m_{j-1} - m_j}. Whenever the running max moves the old output keeps too much
    // weight, by a factor e^{m_j - m_{j-1}} - 1 that the floor (~1e-4) cannot hide.
    test::check_planted_mistake_fails(
        {1, 17, 127, 16}, kSeed,
        [](const AttentionInputs& in, AttentionShape shape, float scale) {
          return attention_elementwise(in, shape, scale);
        },
        elementwise_without_rescale);
  }
}

namespace {

/// The FA1 rung's O against fp64 (in units of sum_j p_j |v_j|), and its final (m, l), on one
/// case.
test::RungError fa1_error(const test::AttentionRungRun& run) {
  const AttentionShape& shape = run.c.shape;
  const Fa1Result cpu = attention_fa1(run.in, shape, run.scale, kKernelRows, kKernelKeys);
  const ErrorReport cpu_l = compare(test::split_md(cpu.stats).d, run.r.d);
  const test::MdColumns s = test::split_md(run.run.out.md);
  test::check_masked_rows(run.r, run.run.out.o, shape.d, &s);  // O = 0, (m, l) = (-inf, 0)
  // The policy: twice the CPU step's error plus the floor (the kernel merges the tile's
  // statistics in a butterfly and sums P~ V with fmaf; CUDA's expf has 2 ulp). On its own:
  // twice the CPU step's stated bound plus the floor, the stated bound being the error
  // model's floor itself (it holds for every order of the work, the CPU step's included).
  const double l_floor = ref::softmax_floor(run.r.score_error, shape.lk);
  const ErrorReport l = compare(s.d, run.r.d);
  WB_CHECK_WITHIN_REL(l, chain_bound(cpu_l.max_rel, l_floor));
  WB_CHECK_WITHIN_REL(l, chain_bound(l_floor, l_floor));
  WB_CHECK_WITHIN(compare(s.m, run.r.m), run.r.score_error);
  const double o_floor = ref::output_floor(run.r.score_error, shape.lk);
  return {ref::compare_weighted(run.run.out.o, run.r.o, run.r.o_weight), /*relative=*/false,
          ref::compare_weighted(cpu.o, run.r.o, run.r.o_weight).max_abs, o_floor,
          chain_bound(o_floor, o_floor), ""};
}

/// The baseline rung's O against fp64 (same units as FA1's), and its P: its CPU step is
/// chapter 04's naive attention, the same three steps (S stored, chapter 01's softmax, P V).
test::RungError standard_error(const test::AttentionRungRun& run) {
  const AttentionShape& shape = run.c.shape;
  const ch04::NaiveAttention cpu = ch04::attention_naive(run.in, shape, run.scale);
  test::check_masked_rows(run.r, run.run.out.p, shape.lk);  // P = 0 where every key is masked
  test::check_masked_rows(run.r, run.run.out.o, shape.d);   // and O = 0
  // P as chapter 04's kernel is held (relative, softmax_floor), against the naive step and on
  // its own: the naive step's stated bound is softmax_floor (chapter 04's cpu suite).
  const double p_floor = ref::softmax_floor(run.r.score_error, shape.lk);
  const ErrorReport p = compare(run.run.out.p, run.r.p);
  WB_CHECK_WITHIN_REL(p, chain_bound(compare(cpu.p, run.r.p).max_rel, p_floor));
  WB_CHECK_WITHIN_REL(p, chain_bound(p_floor, p_floor));
  // O: the naive step's stated bound is output_floor (the error model holds for every order
  // of the sums, Eigen's blocked products included), held here so that the own bound below
  // rests on a checked claim.
  const double o_floor = ref::output_floor(run.r.score_error, shape.lk);
  const ErrorReport cpu_o = ref::compare_weighted(cpu.o, run.r.o, run.r.o_weight);
  WB_CHECK_WITHIN(cpu_o, o_floor);
  return {ref::compare_weighted(run.run.out.o, run.r.o, run.r.o_weight), /*relative=*/false,
          cpu_o.max_abs, o_floor, chain_bound(o_floor, o_floor), ""};
}

/// The measure of each rung: the baseline writes P (and no (m, l)), FA1 the reverse.
test::RungError rung_error(const test::AttentionRungRun& run) {
  return (run.rung.limits.outputs & kWritesP) != 0 ? standard_error(run) : fa1_error(run);
}

// The kernel shapes, and keys masked by head (fully masked rows, masked first tiles).
template <Backend B>
void kernel_equals_the_tiled_cpu_step() {
  test::check_attention_ladder(B, kernel_ladder<B>(), test::attention_kernel_cases(), kSeed,
                               rung_error);
}

// Each lane of a warp rescales its output columns with its own copy of the tile's (m~, l~)
// (ch04::warp_merge): equal columns of V give equal columns of O, bit for bit.
template <Backend B>
void every_lane_rescales_with_the_same_statistics() {
  test::check_attention_lanes_agree(
      B, kernel_ladder<B>(),
      test::small_shapes() ? test::kAttentionLaneRaceShapes : test::kAttentionLaneShapes, kSeed,
      /*causal=*/false);
}

template <Backend B>
void kernel_rejects_a_head_dimension_above_128() {
  for (const Rung<AttentionArgs>& rung : kernel_ladder<B>())
    test::check_rung_refuses(B, rung, {1, 2, 2, ch04::kMaxHeadDim + 1}, Dtype::fp32, "d = 129");
}

}  // namespace

WB_KERNEL_TEST_CASE("the baseline equals the naive CPU step and the FA1 kernel the tiled FA1 CPU "
                    "step on adversarial shapes and inputs",
                    kernel_equals_the_tiled_cpu_step)
WB_KERNEL_TEST_CASE("the kernels reject a head dimension above 128",
                    kernel_rejects_a_head_dimension_above_128)
WB_KERNEL_TEST_CASE("equal columns of V give equal columns of O whichever lane computes them",
                    every_lane_rescales_with_the_same_statistics)
