// Chapter 07's kernel ladder on the simulator (and a GPU): every rung against the CPU Welford
// step and the rung before it (tests/layernorm_checks.hpp), in fp32, fp16 and bf16, constant
// rows, the limits each rung refuses past, rows holding -inf, and every lane's copy of the
// all-reduced statistics (tests/lane_checks.hpp). The dispatcher's rule and the kernels' shapes
// (backend-neutral): test_07_welford_layernorm_dispatch.cpp.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "chapters/07_welford_layernorm/layernorm.hpp"
#include "chapters/07_welford_layernorm/layernorm_ladder.hpp"
#include "chapters/07_welford_layernorm/welford.hpp"
#include "common/buffer.hpp"
#include "common/dtype.hpp"
#include "common/inputs.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"
#include "common/rung_buffers.hpp"
#include "common/shared_memory.hpp"
#include "common/warp.hpp"
#include "tests/ladder_checks.hpp"
#include "tests/lane_checks.hpp"
#include "tests/layernorm_checks.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch07;
using namespace wb::ch07::testing;

// ==========================================================================================
// The kernel ladder
// ==========================================================================================

namespace {

const Dtype kDtypes[] = {Dtype::fp32, Dtype::fp16, Dtype::bf16};

// Every rung on the fp32 problems and the fp16 and bf16 ones (layernorm_checks.hpp), in one
// chain check: check_ladder keeps each rung's errors for the next rung by ladder and case
// index, so a ladder gets one list of cases per test binary.
template <Backend B>
void every_rung_equals_the_cpu_welford_step_and_the_rung_before() {
  const std::size_t max_shared = Kernels<B>::max_dynamic_shared_bytes();
  std::vector<LadderProblem> problems = fp32_problems(max_shared);
  for (LadderProblem& p : problems_16_bit(max_shared)) problems.push_back(std::move(p));
  check_layernorm_ladder<B>(kernel_ladder<B>(), problems);
}

// A constant per row: -2, 0 and 1e4, and the largest magnitudes the type holds, 3e38 and
// -1e30 (fp32, bf16) or 6e4 and -6e4 (fp16, whose largest value is 65504). Past |mean| =
// 1.8e19 a combine computed through the identity, which the threads and lanes holding no
// values pass (every block's second round, lanes 8 to 31), squares the mean to inf and makes
// NaN; returned as it is, the statistics stay exact. eps drawn per case (EpsDraws): a launcher
// or dispatcher passing kDefaultEps gives 1 / sqrt(1e-5) where the case asks for another.
template <Backend B>
void constant_rows_give_rstd_one_over_sqrt_eps() {
  test::RungsRan ran;
  EpsDraws eps_draws(kSeed + 20);
  for (Dtype t : kDtypes) {
    for (const Rung<LayerNormArgs>& rung : kernel_ladder<B>()) {
      for (int cols : {1, 2, 33, 1000, 1025, 4096}) {
        const float eps = eps_draws.next();
        INFO(rung.name << " on " << to_string(t) << ", cols " << cols << ", eps " << eps);
        const bool fp16 = t == Dtype::fp16;
        const float constants[] = {-2.f, fp16 ? -6e4f : -1e30f, 0.f, 1e4f, fp16 ? 6e4f : 3e38f};
        const int rows = 5;
        std::vector<float> x(static_cast<std::size_t>(rows) * cols);
        for (int r = 0; r < rows; ++r)  // a different constant per row
          std::fill(x.begin() + r * cols, x.begin() + (r + 1) * cols, constants[r]);
        x = round_elements(x, t);  // 1e4 is 9984 in bf16: the kernel's constant
        DeviceBuffer<unsigned char> dx(B, encode_elements(x, t)), dy(B, dx.size());
        DeviceBuffer<float> dmean(B, rows), drstd(B, rows);
        const LayerNormArgs a{dx.data(),    nullptr, nullptr, dy.data(), dmean.data(),
                              drstd.data(), rows,    cols,    eps,       t};
        if (!why_refused(rung, a).empty()) continue;
        ran.add(rung.name);
        run_rung(rung, a);
        const std::vector<float> rstd = drstd.download(), mean = dmean.download();
        for (int r = 0; r < rows; ++r) {
          CAPTURE(r);
          // Exact: every combine of equal means has delta = 0, so m2 stays 0, and rstd is
          // 1 / sqrt(eps), written out here rather than through rstd_of, which the kernels
          // share (a wrong rstd_of must not pass for its own expectation).
          CHECK(mean[r] == x[static_cast<std::size_t>(r) * cols]);
          CHECK(rstd[r] == 1.f / std::sqrt(eps));
        }
        // y = 0 * rstd * 1 + 0 = +0 in every type: every byte of y is zero.
        const std::vector<unsigned char> y = dy.download();
        CHECK(std::count(y.begin(), y.end(), 0) == static_cast<std::ptrdiff_t>(y.size()));
      }
    }
  }
  ran.check_every_rung(kernel_ladder<B>());
}

// Rows whose variance overflows float give what the CPU steps give there (test_07's "a row
// whose variance overflows float"): m2 = +inf (every term added to it is >= 0: inf + inf,
// never inf - inf), rstd = 1 / sqrt(inf) = 0 and y = (x - mean) 0 = 0, the mean finite,
// never NaN. Rows: 1e25 randn (var 1e50), +-1e30 alternating (var 1e60; a lane or thread may
// hold one sign only, so two states of m2 = 0 combine to inf) and 1e28 randn + 1e30 (var 1e56;
// bf16's spacing at 1e30 is 5e27: a few levels per standard deviation, not a constant row); in
// fp32 and bf16 (fp16 holds no such values); eps drawn per case.
template <Backend B>
void rows_whose_variance_overflows_give_rstd_zero() {
  test::RungsRan ran;
  EpsDraws eps_draws(kSeed + 24);
  // Race mode checks every shared-memory access: one row per group of a warp and a block.
  const std::vector<int> widths =
      test::small_shapes() ? std::vector<int>{3, 33, 1000} : std::vector<int>{3, 33, 1000, 4096};
  for (Dtype t : {Dtype::fp32, Dtype::bf16}) {
    for (int cols : widths) {
      const int rows = 3;
      const std::size_t n = static_cast<std::size_t>(cols);
      const std::vector<float> r = make_input(InputKind::randn, 2, cols, kSeed);
      std::vector<float> x(rows * n);
      for (std::size_t c = 0; c < n; ++c) {
        x[c] = 1e25f * r[c];
        x[n + c] = c % 2 == 0 ? 1e30f : -1e30f;
        x[2 * n + c] = 1e28f * r[n + c] + 1e30f;
      }
      x = round_elements(x, t);
      for (const Rung<LayerNormArgs>& rung : kernel_ladder<B>()) {
        const float eps = eps_draws.next();
        INFO(rung.name << " on " << to_string(t) << ", cols " << cols << ", eps " << eps);
        LayerNormBuffers buffers(B, x, {}, {}, rows, cols, eps, t);
        if (!why_refused(rung, buffers.args).empty()) continue;
        ran.add(rung.name);
        run_rung(rung, buffers.args);
        const LayerNormOut out = buffers.download();
        for (std::size_t row = 0; row < static_cast<std::size_t>(rows); ++row) {
          CAPTURE(row);
          CHECK(std::isfinite(out.mean[row]));
          CHECK(out.rstd[row] == 0.f);
          CHECK(std::count(out.y.begin() + row * n, out.y.begin() + (row + 1) * n, 0.f) ==
                static_cast<std::ptrdiff_t>(n));
        }
      }
    }
  }
  ran.check_every_rung(kernel_ladder<B>());
}

// The longest row each rung holds is taken, one more (and an empty row) refused before any
// launch by run_rung, with the limit named: 1024 floats or 2048 halves for warp_per_row, what
// the device's shared
// memory holds of the type for block_cached, 2^24 (a Welford count exact in a float) for the
// others.
template <Backend B>
void rungs_refuse_rows_they_cannot_hold() {
  EpsDraws eps_draws(kSeed + 21);  // the limits do not depend on eps: any value is refused alike
  DeviceBuffer<unsigned char> d(B, 16);
  DeviceBuffer<float> stats(B, 4);
  const Ladder<LayerNormArgs> ladder = kernel_ladder<B>();
  const std::size_t limit = Kernels<B>::max_dynamic_shared_bytes();
  for (Dtype t : kDtypes) {
    const std::pair<Rung<LayerNormArgs>, int> longest[] = {
        {Rungs<B>::warp_per_row(), warp_max_cols(t)},
        {Rungs<B>::block_cached(), max_cached_cols(limit, t)},
        {Rungs<B>::block_uncached(), kMaxCols},
        {Rungs<B>::dispatch(), kMaxCols}};
    REQUIRE(std::size(longest) == ladder.size());  // every rung of the ladder
    for (const auto& [record, max_cols] : longest) {
      const std::string dtype = to_string(t);
      const std::string name = record.name;
      CAPTURE(dtype);
      CAPTURE(name);
      const Rung<LayerNormArgs>* rung = &record;
      LayerNormArgs a{d.data(),     nullptr, nullptr,      d.data(),         stats.data(),
                      stats.data(), 1,       max_cols + 1, eps_draws.next(), t};
      const std::string limit_named = "cols in [1, " + std::to_string(max_cols) + "]";
      CHECK_THROWS_WITH_AS(run_rung(*rung, a), doctest::Contains(limit_named.c_str()),
                           std::invalid_argument);
      a.cols = 0;
      CHECK_THROWS_AS(run_rung(*rung, a), std::invalid_argument);
      a.cols = max_cols;
      CHECK(why_refused(*rung, a).empty());
    }
  }
}

// Rows holding -inf, every third one wholly and one in some entries, between randn rows: each
// rung gives such a row NaN in rstd and in every y, as the CPU step does (folding -inf makes
// m2 += delta (x - mean) = -inf x (-inf - (-inf)) = NaN; the mean is -inf or NaN, by the order
// of the combines), and the other rows the very bits it gives them when the -inf rows hold
// zeros instead: a group of lanes, or a block, exchanges with its own row only.
template <Backend B>
void rows_holding_minus_inf_are_nan_and_leave_the_others_alone() {
  test::RungsRan ran;
  EpsDraws eps_draws(kSeed + 22);
  for (Dtype t : kDtypes) {
    const std::vector<int> widths = test::small_shapes() ? std::vector<int>{3, 33, 1001}
                                                    : std::vector<int>{3, 16, 33, 1000, 1001, 2048};
    for (int cols : widths) {
      const int rows = 7;
      std::vector<float> x = make_input(InputKind::neg_inf_rows, rows, cols, kSeed);
      const std::vector<float> entries = make_input(InputKind::neg_inf_entries, rows, cols, kSeed);
      const std::size_t n = static_cast<std::size_t>(cols);
      for (std::size_t i = 4 * n; i < 5 * n; ++i) x[i] = entries[i];  // row 4: some entries -inf
      x = round_elements(x, t);
      std::vector<bool> holds_inf(rows, false);
      for (std::size_t i = 0; i < x.size(); ++i)
        if (std::isinf(x[i])) holds_inf[i / n] = true;
      std::vector<float> zeroed = x;
      for (std::size_t i = 0; i < x.size(); ++i)
        if (holds_inf[i / n]) zeroed[i] = 0.f;
      for (const Rung<LayerNormArgs>& rung : kernel_ladder<B>()) {
        const float eps = eps_draws.next();
        INFO(rung.name << " on " << to_string(t) << ", cols " << cols << ", eps " << eps);
        LayerNormBuffers with_inf(B, x, {}, {}, rows, cols, eps, t);
        LayerNormBuffers with_zeros(B, zeroed, {}, {}, rows, cols, eps, t);
        if (!why_refused(rung, with_inf.args).empty()) continue;
        ran.add(rung.name);
        run_rung(rung, with_inf.args);
        run_rung(rung, with_zeros.args);
        const LayerNormOut a = with_inf.download(), b = with_zeros.download();
        for (int r = 0; r < rows; ++r) {
          CAPTURE(r);
          const std::size_t row = static_cast<std::size_t>(r);
          const std::vector<float> ya(a.y.begin() + row * n, a.y.begin() + (row + 1) * n);
          const std::vector<float> yb(b.y.begin() + row * n, b.y.begin() + (row + 1) * n);
          if (holds_inf[row]) {
            CHECK_FALSE(std::isfinite(a.mean[row]));
            CHECK(std::isnan(a.rstd[row]));
            CHECK(std::count_if(ya.begin(), ya.end(), [](float v) { return std::isnan(v); }) ==
                  static_cast<std::ptrdiff_t>(n));
          } else {
            CHECK(test::bits_of(a.mean[row]) == test::bits_of(b.mean[row]));
            CHECK(test::bits_of(a.rstd[row]) == test::bits_of(b.rstd[row]));
            const std::optional<test::BitMismatch> m = test::first_bit_mismatch(ya, yb, n);
            CHECK_MESSAGE(!m, "a row next to a -inf row changed: ", m ? m->describe() : "");
          }
        }
      }
    }
  }
  ran.check_every_rung(kernel_ladder<B>());
}

// Rows whose lanes hold unequal Welford states (every kind but ones, randn + 1e4 and + 1e6
// among them, where mean's bits reach y exactly: x - mean is exact there), with every lane of
// a group of 2 to 32 holding values: one value per lane (cols 2 to 32), several in scalars and
// in 16-byte vectors (33 to 1000), every thread of a block of 256 in scalars (1001) and in
// vectors (2048 and 4104); the rungs run what their limits take.
const std::vector<KernelShape> kLaneShapes = {{7, 2},   {7, 3},    {7, 9},    {7, 16},
                                              {7, 31},  {7, 32},   {7, 33},   {7, 100},
                                              {5, 255}, {5, 1000}, {5, 1001}, {5, 2048},
                                              {5, 4104}};
const std::vector<KernelShape> kLaneRaceShapes = {{5, 9}, {5, 100}, {2, 1001}};

std::vector<float> lane_rows(int rows, int cols, Dtype t) {
  if (t != Dtype::fp32) return make_mixed_x(rows, cols, kSeed, t, 0);
  const Kind kinds[] = {Kind::randn, Kind::offset_1e4, Kind::outliers, Kind::offset_1e6,
                        Kind::arange};
  std::vector<float> x;
  for (int r = 0; r < rows; ++r) {
    const std::vector<float> row =
        make_x(kinds[r % 5], 1, cols, kSeed + static_cast<std::uint64_t>(r));
    x.insert(x.end(), row.begin(), row.end());
  }
  return x;
}

// The all-reduces (rungs/1_warp_per_row.cuh's group_all_reduce, welford_all_reduce.cuh's for
// the blocks) promise every lane of a group, and every thread of a block, the same bits at
// their end ("the same mean and rstd for every element of the row"):
// Chan's combine is not commutative bit for bit, so both partners of an exchange must combine
// (lower, upper). Each thread normalizes the values it holds with its own copy of mean and
// rstd, and thread 0 of the row writes them: so every y reproduces bit for bit from the mean
// and rstd the kernel wrote, y = round_T((x - mean) rstd), and a lane whose copy rounded
// otherwise shows in the elements it normalized. Without gamma and beta the rounded operations
// are the same on every backend (x - mean, the product; times 1 and plus 0 are exact, fused or
// not).
template <Backend B>
void every_lane_normalizes_with_the_written_statistics() {
  test::RungsRan ran;
  EpsDraws eps_draws(kSeed + 23);
  for (Dtype t : kDtypes) {
    for (const KernelShape& s : test::small_shapes() ? kLaneRaceShapes : kLaneShapes) {
      const std::vector<float> x = round_elements(lane_rows(s.rows, s.cols, t), t);
      for (const Rung<LayerNormArgs>& rung : kernel_ladder<B>()) {
        const float eps = eps_draws.next();
        INFO(rung.name << " on " << to_string(t) << ", " << s.rows << " x " << s.cols << ", eps "
                       << eps);
        LayerNormBuffers buffers(B, x, {}, {}, s.rows, s.cols, eps, t);
        if (!why_refused(rung, buffers.args).empty()) continue;
        ran.add(rung.name);
        run_rung(rung, buffers.args);
        const LayerNormOut out = buffers.download();
        std::vector<float> due(x.size());
        const std::size_t n = static_cast<std::size_t>(s.cols);
        for (std::size_t i = 0; i < x.size(); ++i)
          due[i] = layernorm_y(x[i], out.mean[i / n], out.rstd[i / n], 1.f, 0.f);  // eq. (1)
        const std::optional<test::BitMismatch> m =
            test::first_bit_mismatch(out.y, round_elements(due, t), n);
        CHECK_MESSAGE(!m, "y does not reproduce from the mean and rstd the kernel wrote: ",
                      m ? m->describe() : "",
                      " (the thread normalizing that column ended the all-reduce with other "
                      "bits than thread 0)");
      }
    }
  }
  ran.check_every_rung(kernel_ladder<B>());
}

}  // namespace

WB_KERNEL_TEST_CASE("every LayerNorm rung equals the CPU Welford step and the rung before it",
                    every_rung_equals_the_cpu_welford_step_and_the_rung_before)
WB_KERNEL_TEST_CASE("constant rows give mean exact and rstd 1 over sqrt(eps) on every strategy",
                    constant_rows_give_rstd_one_over_sqrt_eps)
WB_KERNEL_TEST_CASE("a row whose variance overflows float gives rstd 0 and y 0 on every rung",
                    rows_whose_variance_overflows_give_rstd_zero)
WB_KERNEL_TEST_CASE("every rung refuses rows longer than its strategy holds with the limit named",
                    rungs_refuse_rows_they_cannot_hold)
WB_KERNEL_TEST_CASE("a row holding -inf is NaN on every rung and leaves the other rows alone",
                    rows_holding_minus_inf_are_nan_and_leave_the_others_alone)
WB_KERNEL_TEST_CASE("every lane normalizes with the mean and rstd the kernel wrote bit for bit",
                    every_lane_normalizes_with_the_written_statistics)
