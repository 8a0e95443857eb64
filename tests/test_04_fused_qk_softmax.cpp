// Chapter 04: fused QK^T-softmax. The naive attention and the fused tiled step against fp64,
// fused against naive under the 2x policy, also with keys masked to -inf (fully masked rows),
// then the kernel ladder against the fused CPU step and fp64. The warp reductions the attention
// kernels share: test_04_fused_qk_softmax_lanes.cpp.
#include <cmath>
#include <string>
#include <vector>

#include "chapters/04_fused_qk_softmax/attention_naive.hpp"
#include "chapters/04_fused_qk_softmax/fused_softmax.hpp"
#include "common/attention_inputs.hpp"
#include "common/reference_attention.hpp"
#include "tests/attention_checks.hpp"
#include "tests/attention_ladder_checks.hpp"
#include "tests/attention_shapes.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch04;

namespace {

constexpr std::uint64_t kSeed = 404;

const std::vector<test::Tiles> kTiles =
    test::attention_tiles({kKernelRows, kKernelKeys});  // the kernel's tile third

/// The naive step's P against fp64: the step before.
test::StepBefore naive_error(const test::AttentionInput& a) {
  // Fused and naive differ only in the order of float operations: both are within
  // softmax_floor (see common/reference_attention.hpp) of fp64; the policy allows the
  // fused step twice the naive step's error plus that floor.
  const std::vector<float> p = attention_naive(a.in, a.shape, a.scale).p;
  test::check_masked_rows(a.r, p, a.shape.lk);  // a fully masked row's P is zeros
  return {compare(p, a.r.p), ref::softmax_floor(a.r.score_error, a.shape.lk), /*relative=*/true};
}

/// The fused step's P against fp64 with tiles t, after its row statistics (m, d) and its fully
/// masked rows.
ErrorReport fused_error(const test::AttentionInput& a, const test::Tiles& t) {
  const FusedSoftmax fused = softmax_qk_fused(a.in, a.shape, a.scale, t.br, t.bc);
  test::check_row_stats(fused.stats, a);
  const test::MdColumns stats = test::split_md(fused.stats);
  test::check_masked_rows(a.r, fused.p, a.shape.lk, &stats);  // P = 0, (m, d) = (-inf, 0)
  return compare(fused.p, a.r.p);
}

}  // namespace

TEST_SUITE("cpu") {
  TEST_CASE("a row's visible keys end at causal_end, a key's rows start at causal_first_query") {
    // The kernels' masks compare a key with its row's end (or a row with its key's start) instead
    // of evaluating causal_visible per score: the three must agree on every pair, lq above, equal
    // to and below lk, fully masked rows included.
    for (const int lq : {1, 2, 5, 9})
      for (const int lk : {1, 3, 5, 12})
        for (int i = 0; i < lq; ++i)
          for (int j = 0; j < lk; ++j) {
            CAPTURE(lq);
            CAPTURE(lk);
            CAPTURE(i);
            CAPTURE(j);
            CHECK((j < causal_end(i, lq, lk)) == causal_visible(i, j, lq, lk));
            CHECK((i >= causal_first_query(j, lq, lk)) == causal_visible(i, j, lq, lk));
          }
  }

  TEST_CASE("fused softmax equals the naive softmax under the 2x policy on adversarial inputs") {
    test::check_step_chain(test::kAttentionCpuShapes, kSeed, /*causal=*/false, /*want_p=*/true,
                           kTiles, naive_error, fused_error);
  }

  TEST_CASE("fully masked rows give zeros with (m, d) = (-inf, 0) and masked keys get p = 0") {
    // Chapter 04 has no mask, but -inf scores reach it all the same: keys masked by head
    // (tests/attention_checks.hpp), a head whose every key is -inf (a fully masked row: P = 0
    // and (m, d) = (-inf, 0), never NaN, DESIGN.md's convention) and one whose first 40 keys
    // are (whole K tiles of the identity (-inf, 0) merged into (-inf, 0)). The same chain as
    // above, against the fp64 softmax over the unmasked keys.
    test::check_step_chain(test::kAttentionMaskedCpuShapes, kSeed, /*causal=*/false,
                           test::KeyMask::by_head, /*want_p=*/true, kTiles, naive_error,
                           fused_error);
  }

  TEST_CASE("every row of fused P sums to 1 whatever the tiles") {
    test::for_each_attention_input(
        {{2, 37, 301, 64}}, kSeed, false, /*want_p=*/false, [](const test::AttentionInput& a) {
          test::for_each_tiles(kTiles, [&](const test::Tiles& t) {
            const FusedSoftmax fused = softmax_qk_fused(a.in, a.shape, a.scale, t.br, t.bc);
            for (std::size_t row = 0; row < a.shape.rows(); ++row) {
              double sum = 0.0;  // in double: exact enough not to add error of its own
              for (int j = 0; j < a.shape.lk; ++j) sum += fused.p[row * a.shape.lk + j];
              // Each p_j is within softmax_floor of its exact value, relative, so their sum is
              // within softmax_floor of 1.
              CHECK(std::fabs(sum - 1.0) <= ref::softmax_floor(a.r.score_error, a.shape.lk));
            }
          });
        });
  }

  TEST_CASE("scores near 1e4 overflow a softmax without the max but not the fused one") {
    const AttentionShape shape{1, 4, 50, 16};
    const float scale = default_scale(shape.d);
    const AttentionInputs in = make_attention_inputs(ScoreKind::large_offset, shape, scale, kSeed);
    std::vector<float> s(shape.p_elems());
    score_tile(in.q.data(), in.k.data(), shape.lq, shape.lk, shape.d, scale, s.data());
    CHECK(std::isinf(std::exp(s[0])));  // e^{1e4} = inf in float: eq. (2) as written is NaN
    const FusedSoftmax fused = softmax_qk_fused(in, shape, scale, 4, 16);
    const ref::Attention r = ref::attention(in, shape, scale, false);
    WB_CHECK_WITHIN_REL(compare(fused.p, r.p), ref::softmax_floor(r.score_error, shape.lk));
  }
}

namespace {

/// The fused rung's P against fp64 (relative), and its final (m, d), on one case.
test::RungError fused_rung_error(const test::AttentionRungRun& run) {
  const ref::Attention& r = run.r;
  const double floor = ref::softmax_floor(r.score_error, run.c.shape.lk);
  const FusedSoftmax cpu =
      softmax_qk_fused(run.in, run.c.shape, run.scale, kKernelRows, kKernelKeys);
  const ErrorReport cpu_d = compare(test::split_md(cpu.stats).d, r.d);
  const test::MdColumns s = test::split_md(run.run.out.md);
  test::check_masked_rows(r, run.run.out.p, run.c.shape.lk, &s);  // P = 0, (m, d) = (-inf, 0)
  // The policy: at most twice the CPU step's error against fp64 plus the floor (the
  // kernel merges in a butterfly, the CPU left to right, and CUDA's expf has 2 ulp). On its
  // own: the CPU step's stated bound is softmax_floor itself (the error model holds for every
  // order of the work), so the kernel is within twice that plus the floor whatever the CPU
  // step computed.
  const double own_bound = chain_bound(floor, floor);
  const ErrorReport d = compare(s.d, r.d);
  WB_CHECK_WITHIN_REL(d, chain_bound(cpu_d.max_rel, floor));
  WB_CHECK_WITHIN_REL(d, own_bound);
  WB_CHECK_WITHIN(compare(s.m, r.m), r.score_error);  // a max of perturbed scores
  return {compare(run.run.out.p, r.p), /*relative=*/true, compare(cpu.p, r.p).max_rel, floor,
          own_bound, ""};
}

// The kernel shapes, and keys masked by head (fully masked rows, masked K tiles).
template <Backend B>
void every_kernel_equals_the_fused_cpu_step() {
  test::check_attention_ladder(B, kernel_ladder<B>(), test::attention_kernel_cases(), kSeed,
                               fused_rung_error);
}

template <Backend B>
void kernel_rejects_a_head_dimension_above_128() {
  test::check_rung_refuses(B, kernel_ladder<B>().front(), {1, 2, 2, kMaxHeadDim + 1}, Dtype::fp32,
                           "d = 129");
}

}  // namespace

WB_KERNEL_TEST_CASE("the fused kernel equals the fused CPU step on adversarial shapes and inputs",
                    every_kernel_equals_the_fused_cpu_step)
WB_KERNEL_TEST_CASE("the fused kernel rejects a head dimension above 128",
                    kernel_rejects_a_head_dimension_above_128)
