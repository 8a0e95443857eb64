// Chapter 07's kernels move the bytes their headers state (suite "profile": the instrumented
// twin, CTest 07_welford_layernorm/sim-profile; tests/traffic_checks.hpp).
#include <cstddef>
#include <string>
#include <vector>

#include "chapters/07_welford_layernorm/layernorm_ladder.hpp"
#include "common/buffer.hpp"
#include "common/inputs.hpp"
#include "common/row_plan.hpp"
#include "tests/layernorm_checks.hpp"
#include "tests/layernorm_errors.hpp"
#include "tests/traffic_checks.hpp"

using namespace wb;

TEST_CASE("every rung moves the bytes its header states, on odd shapes" *
          doctest::test_suite("profile")) {
  // Each in fp32, fp16 and bf16 with gamma and beta, and in fp32 without them.
  // warp_per_row: narrow groups (1 and 7 columns: groups of 1 and 8 lanes; 17 rows, a partial
  // second block of 16 rows), whole warps with scalar values (37, 263), 16-byte vectors (136:
  // 8 values per lane, whole vectors of every type). block_cached and block_uncached: a
  // partial warp and block of 256 threads, scalar (263, 1031) and in vectors (136, 2056; 2056
  // leaves some threads one vector more than others). The dispatcher picks warp_per_row up to
  // 1024 columns, then block_cached.
  const std::vector<test::RowShape> shapes = {{3, 1},   {17, 7},   {3, 37},  {3, 136},
                                              {2, 263}, {1, 1031}, {1, 2056}};
  // A row longer than one block's shared memory holds: the dispatcher picks block_uncached.
  const std::size_t shared_bytes = ch07::Kernels<Backend::sim>::max_dynamic_shared_bytes();
  const int uncached_cols = ch07::max_cached_cols(shared_bytes) + 3;
  REQUIRE(ch07::choose_strategy(uncached_cols, shared_bytes) == ch07::Strategy::block_uncached);
  test::check_traffic(
      ch07::kernel_ladder<Backend::sim>(),
      test::LayerNormTrafficCases{shapes, {Dtype::fp32, Dtype::fp16, Dtype::bf16}, /*affine=*/true},
      test::LayerNormTrafficCases{shapes, {Dtype::fp32}, /*affine=*/false},
      test::LayerNormTrafficCases{{{1, uncached_cols}}, {Dtype::fp32}, /*affine=*/true});
}

TEST_CASE("every rung moves x, y, gamma and beta in 16-byte vectors exactly where they allow" *
          doctest::test_suite("profile")) {
  const Ladder<LayerNormArgs> ladder = ch07::kernel_ladder<Backend::sim>();
  // eps drawn per case (the access widths do not depend on it).
  ch07::testing::EpsDraws eps_draws(ch07::testing::kSeed + 30);
  // Every access to the four row buffers has the one width (mean and rstd are a float each).
  for (Dtype t : {Dtype::fp32, Dtype::fp16, Dtype::bf16}) {
    for (const test::RowShape& s : test::kVectorWidthShapes) {
      const std::vector<float> x(static_cast<std::size_t>(s.rows) * s.cols, 0.5f);
      const std::vector<float> gamma(s.cols, 2.f), beta(s.cols, 1.f);
      LayerNormBuffers buffers(Backend::sim, x, gamma, beta, s.rows, s.cols, eps_draws.next(), t);
      sim::label_device_buffer(buffers.x.data(), "x");
      sim::label_device_buffer(buffers.y.data(), "y");
      sim::label_device_buffer(buffers.gamma.data(), "gamma");
      sim::label_device_buffer(buffers.beta.data(), "beta");
      for (const Rung<LayerNormArgs>& rung : ladder) {
        if (!why_refused(rung, buffers.args).empty()) continue;
        INFO(rung.name, " on ", s.rows, " x ", s.cols, " ", to_string(t));
        CHECK(test::global_access_widths([&] { rung.launch(buffers.args); },
                                         {"x", "y", "gamma", "beta"}) ==
              test::row_access_width(ch07::can_vectorize(buffers.args), t));
      }
    }
  }
}

TEST_CASE("the dispatcher launches the strategy its rule names, at every boundary, in every type" *
          doctest::test_suite("profile")) {
  // warp_per_row and block_cached move the same bytes and give right answers on every row
  // both hold, so neither the chain nor the traffic tests see a dispatcher that launches the
  // one for the other: the kernel the simulator ran does. And what it launched computes with
  // the caller's eps, drawn per case: its row within the bound the chain check holds the
  // dispatch rung to against fp64 (rung_fp64_bounds), which eps = 1e-5 in place of 0.1 or 1
  // on these randn rows misses by a factor of thousands (layernorm_errors.hpp, kEpsValues).
  using namespace ch07::testing;
  EpsDraws eps_draws(kSeed + 31);
  const std::size_t limit = ch07::Kernels<Backend::sim>::max_dynamic_shared_bytes();
  const Rung<LayerNormArgs> dispatch = ch07::Rungs<Backend::sim>::dispatch();
  for (Dtype t : {Dtype::fp32, Dtype::fp16, Dtype::bf16}) {
    const int warp = ch07::warp_max_cols(t), cached = ch07::max_dispatched_cached_cols(limit, t);
    for (int cols :
         {1, ch07::kWarpMaxCols, ch07::kWarpMaxCols + 1, warp, warp + 1, cached, cached + 1}) {
      const std::string dtype = ::wb::to_string(t);
      const float eps = eps_draws.next();
      CAPTURE(dtype);
      CAPTURE(cols);
      CAPTURE(eps);
      const ch07::Strategy expected = ch07::choose_strategy(cols, limit, dtype_bytes(t));
      const Problem p =
          make_rounded_problem(make_input(InputKind::randn, 1, cols, 3), 1, cols, {}, t, eps);
      DeviceBuffer<unsigned char> dx(Backend::sim, encode_elements(p.x, t)),
          dy(Backend::sim, dx.size());
      DeviceBuffer<float> dmean(Backend::sim, 1), drstd(Backend::sim, 1);
      const LayerNormArgs a{dx.data(),    nullptr, nullptr, dy.data(), dmean.data(),
                            drstd.data(), 1,       cols,    eps,       t};
      const bool vectorized = cols % vec_width(t) == 0;  // DeviceBuffers are 16-byte aligned
      // The plan the dispatcher's record states is the strategy's the rule names.
      const RowPlan plan = rung_plan(dispatch, cols, t, vectorized);
      const RowPlan expected_plan = ch07::strategy_plan(expected, cols, t, vectorized);
      CHECK(plan.cache == expected_plan.cache);
      CHECK(plan.threads == expected_plan.threads);
      CHECK(plan.cols_per_lane == expected_plan.cols_per_lane);
      CHECK(plan.width == expected_plan.width);
      const std::vector<std::string> kernels =
          test::launched_kernels([&] { run_rung(dispatch, a); });
      REQUIRE(kernels.size() == 1);
      const std::string name = std::string("::") + ch07::to_string(expected) + "_kernel<";
      CHECK_MESSAGE(kernels[0].find(name) != std::string::npos, "launched ", kernels[0]);
      const LayerNormOut out{decode_elements(dy.download().data(), p.x.size(), t), dmean.download(),
                             drstd.download()};
      const Errors e = scaled_errors(p, out, output_rounding(t));
      CHECK(worst_ratio(e, rung_fp64_bounds(kernel_tree(plan, cols, t), cols)) <= 1.0);
    }
  }
}
