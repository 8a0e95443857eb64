// Chapter 04: fused QK^T-softmax. The naive attention and the fused tiled step against fp64,
// fused against naive under the 2x policy, then the kernel ladder against the fused CPU step.
#include <cmath>
#include <string>
#include <vector>

#include "chapters/04_fused_qk_softmax/attention_naive.hpp"
#include "chapters/04_fused_qk_softmax/fused_softmax.hpp"
#include "common/attention_inputs.hpp"
#include "common/reference_attention.hpp"
#include "tests/attention_checks.hpp"
#include "tests/attention_shapes.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch04;

namespace {

constexpr std::uint64_t kSeed = 404;

using test::AttentionInput;
using test::Tiles;
const std::vector<Tiles> kTiles = test::attention_tiles({8, 32});  // the kernel's tile third

}  // namespace

TEST_SUITE("cpu") {
  TEST_CASE("fused softmax equals the naive softmax under the 2x policy on adversarial inputs") {
    test::for_each_attention_input(
        test::kAttentionCpuShapes, kSeed, /*causal=*/false, /*want_p=*/true,
        [](const AttentionInput& a) {
          const ref::Attention& r = a.r;
          // Fused and naive differ only in the order of float operations: both are within
          // softmax_floor (see common/reference_attention.hpp) of fp64; the policy allows the
          // fused step twice the naive step's error plus that floor.
          const double floor = ref::softmax_floor(r.score_error, a.shape.lk);
          const ErrorReport naive = compare(attention_naive(a.in, a.shape, a.scale).p, r.p);
          WB_CHECK_WITHIN_REL(naive, floor);
          test::for_each_tiles(kTiles, [&](const Tiles& t) {
            const FusedSoftmax fused = softmax_qk_fused(a.in, a.shape, a.scale, t.br, t.bc);
            const ErrorReport e = compare(fused.p, r.p);
            WB_CHECK_WITHIN_REL(e, chain_bound(naive.max_rel, floor));
            // The row statistics: m is the max of float scores, each within score_error of
            // its exact value, so m is too; d is a sum of the same terms as P's denominator.
            const test::MdColumns s = test::split_md(fused.stats);
            WB_CHECK_WITHIN(compare(s.m, r.m), r.score_error);
            WB_CHECK_WITHIN_REL(compare(s.d, r.d), floor);
          });
        });
  }

  TEST_CASE("every row of fused P sums to 1 whatever the tiles") {
    const AttentionShape shape{2, 37, 301, 64};
    test::for_each_attention_input(
        {shape}, kSeed, false, /*want_p=*/false, [](const AttentionInput& a) {
          test::for_each_tiles(kTiles, [&](const Tiles& t) {
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

template <Backend B>
void every_kernel_equals_the_fused_cpu_step() {
  test::check_attention_ladder(
      B, kernel_ladder<B>(), test::attention_cases(test::kAttentionKernelShapes), kSeed,
      [](const test::AttentionRungRun& run) {
        const ref::Attention& r = run.r;
        const double floor = ref::softmax_floor(r.score_error, run.c.shape.lk);
        const FusedSoftmax cpu = softmax_qk_fused(run.in, run.c.shape, run.scale, 8, 32);
        const ErrorReport cpu_d = compare(test::split_md(cpu.stats).d, r.d);
        const test::MdColumns s = test::split_md(run.run.out.md);
        // The policy: at most twice the CPU step's error against fp64 plus the floor (the
        // kernel merges in a butterfly, the CPU left to right, and CUDA's expf has 2 ulp).
        WB_CHECK_WITHIN_REL(compare(s.d, r.d), chain_bound(cpu_d.max_rel, floor));
        WB_CHECK_WITHIN(compare(s.m, r.m), r.score_error);  // a max of perturbed scores
        return test::RungError{compare(run.run.out.p, r.p), /*relative=*/true,
                               compare(cpu.p, r.p).max_rel, floor, ""};
      });
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
