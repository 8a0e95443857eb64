// Chapter 07's kernel ladder against the CPU Welford step and the rung before it, through the
// tests' chain check (tests/ladder_checks.hpp): the problems (shapes, input kinds, element
// types, gamma and beta, misaligned pointers), the Welford tree each rung computes, and the
// run of a rung on a problem in buffers with a margin, so that a write past y is seen.
//
// The tolerance policy applies row by row, as for the CPU steps (tests/layernorm_errors.hpp):
// a case of the chain check is one row of one problem and one output (mean, rstd or y), its
// error in units of u K of that row. A rung runs once per problem; its rows are the cases.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chapters/07_welford_layernorm/layernorm.hpp"
#include "chapters/07_welford_layernorm/layernorm_ladder.hpp"
#include "common/buffer.hpp"
#include "common/dtype.hpp"
#include "common/inputs.hpp"
#include "common/row_plan.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"
#include "common/shared_memory.hpp"
#include "common/table.hpp"
#include "common/warp.hpp"
#include "tests/ladder_checks.hpp"
#include "tests/layernorm_errors.hpp"
#include "tests/support.hpp"

namespace wb::ch07::testing {

// ------------------------------------------------------------------------------------------
// The trees the rungs compute
// ------------------------------------------------------------------------------------------

// The plan `rung` runs on rows of n elements of t (its record's fact, on the device of the
// ladder's backend: its shared memory decides what the dispatcher picks); `vectorized` when
// the call can take 16-byte accesses (can_vectorize).
inline RowPlan rung_plan(const Rung<LayerNormArgs>& rung, int n, Dtype t, bool vectorized) {
  REQUIRE_MESSAGE(static_cast<bool>(rung.facts.row_plan), rung.name, " states no row plan");
  return rung.facts.row_plan(n, t, vectorized);
}

// The Welford tree a rung running `plan` computes, for a row of n values of t.
inline Tree kernel_tree(const RowPlan& plan, int n, Dtype t) {
  // Scalar rows fold by Welford's update: a leaf of the values a lane or thread holds. Vector
  // rows fold m vectors of W values (4 floats, 8 halves), each by two passes (vector_stats: the
  // pairwise mean within (log2 W + 1) u A), joined by a chain of Chan combines. Joining vector
  // k + 1 to a run of k rounds as Welford's update k + 1 does (delta, n_b / n, their product,
  // the sum: u A (1 + 6 / (k + 1))), and every error is scaled as in Welford's chain, so the
  // mean is within ((m + 1) / 2 + 6 + log2 W + 1) u A: the leaf bound of m + 2 log2 W + 2
  // values, no more than the leaves below for m >= 2 (a lane's mW, a thread's at least mW + 1;
  // W = 4 or 8), while one vector is its own two-pass (the combine with the empty run returns
  // it exactly). m2's roundings, (W + 1) u for a vector's sum of squares (relative to its m2,
  // which is no larger than the run's) and 3 u per combine after the first (exact), (W + 3m - 2) u
  // in all, stay within the leaf's (leaf + 2) u >= (mW + 2) u for every m >= 1.
  //
  // A lane folds cols_per_lane values, then log2(group_width) butterfly levels.
  if (plan.cache == RowCache::registers) return {plan.cols_per_lane, plan.merges};
  // A thread of a block folds ceil(n / 256) values (rounded up to whole vectors), then 5 levels
  // within the warp and 5 more over the warps' states (3 of them with the identity, exact).
  const int per_thread = (n + plan.threads - 1) / plan.threads + vec_width(t);
  return {per_thread, plan.merges};
}

/// The bound a rung computing `tree` on rows of n values is held to against fp64 alone, row by
/// row (check_layernorm_ladder's fp64 bound): the tolerance policy's rule with the CPU Welford
/// step's stated bound (sequential Welford, the tree with leaf = n and depth 0) in place of its
/// measured error, 2 x that bound + the rung's own tree bound.
inline auto rung_fp64_bounds(Tree tree, int n) {
  return [tree, n](const RowErrors& re, double G, double B) {
    const Bounds own = tree_bounds(tree)(re, G, B);
    const Bounds cpu = tree_bounds({n, 0})(re, G, B);
    return Bounds{chain_bound(cpu.mean, own.mean), chain_bound(cpu.rstd, own.rstd),
                  chain_bound(cpu.y, own.y)};
  };
}

// ------------------------------------------------------------------------------------------
// The shapes
// ------------------------------------------------------------------------------------------

struct KernelShape {
  int rows, cols;
};

// cols 1..32 (narrow groups, several rows per warp), one past every group width, the vector
// groups' edges (8 to 256 columns: 1 to 32 lanes of one float4 or 8 halves each, 24 leaving
// lanes of a group without a vector), the warp limits (1024 floats, 2048 halves) and one past
// them, the default shared-memory limit, and the edge sizes; rows never a multiple of the
// rows per block.
inline const std::vector<KernelShape> kKernelShapes = {
    {130, 1},  {67, 2},   {37, 3},   {9, 8},    {19, 16},  {11, 24},  {5, 17},  {7, 31},  {5, 32},
    {6, 33},   {7, 64},   {5, 97},   {6, 120},  {5, 128},  {3, 129},  {5, 248}, {3, 256}, {5, 1000},
    {3, 1023}, {3, 1024}, {3, 1025}, {5, 2047}, {3, 2048}, {3, 2049}, {2, 4096}};
// Long rows, few of them: the simulator runs 256 threads per row.
inline const std::vector<KernelShape> kLongShapes = {{2, 12264}, {2, 12265}, {1, 32768}};
// Race mode checks every shared-memory access: narrow groups, a partial warp, several
// values per lane, and one long row past the default shared-memory limit still run there.
inline const std::vector<KernelShape> kRaceShapes = {{5, 17}, {9, 24}, {3, 136}, {3, 1032}};
inline const std::vector<KernelShape> kRaceLongShapes = {{1, 12265}};

// ------------------------------------------------------------------------------------------
// The problems
// ------------------------------------------------------------------------------------------

/// One input of the ladder check: its values (already rounded to `dtype`) and fp64 reference,
/// where they sit in the buffers, and how many of its rows the block strategies run.
struct LadderProblem {
  Problem p;
  Dtype dtype = Dtype::fp32;
  /// x, gamma, beta and y one element past a 16-byte boundary, so the scalar path runs.
  bool misalign = false;
  /// The block strategies give each row a block of its own, so more rows only repeat it: they
  /// run the first block_rows rows, the warp strategy every row, where the count matters.
  int block_rows = 0;
  /// Every row of one Kind, or (mixed_first >= 0) the 16-bit kinds cycling from that one.
  Kind kind = Kind::randn;
  int mixed_first = -1;

  /// "5x33 fp16 affine misaligned, row 2 (arange)": the case, for a failure message.
  std::string row_name(int row) const {
    const std::string input = mixed_first >= 0
                                  ? to_string(static_cast<Kind16>((mixed_first + row) % kKinds16))
                                  : to_string(kind);
    return std::to_string(p.rows) + "x" + std::to_string(p.cols) + " " + to_string(dtype) +
           (p.affine.gamma.empty() ? "" : " affine") + (misalign ? " misaligned" : "") + ", eps " +
           sci(p.eps) + ", row " + std::to_string(row) + " (" + input + ")";
  }
};

/// The fp32 problems: on every shape, every kind (2^54 randn + 1e20 among them: past
/// |mean| = 1.8e19, where the lanes and threads holding no values pass the identity, a combine
/// computed through it is NaN); gamma and beta on randn, aligned and misaligned. The long
/// shapes (and the device's longest cached row and one past it): randn and randn + 1e4, and
/// gamma and beta misaligned. eps drawn per problem (EpsDraws, layernorm_errors.hpp): every
/// rung runs runs of consecutive problems, so each meets every value on several kinds.
inline std::vector<LadderProblem> fp32_problems(std::size_t max_shared) {
  std::vector<LadderProblem> out;
  EpsDraws eps_draws(kSeed + 10);
  auto add = [&](const KernelShape& s, Kind kind, bool affine, bool misalign) {
    const std::uint64_t seed = affine ? kSeed + 1 : kSeed;
    out.push_back({make_problem(make_x(kind, s.rows, s.cols, seed), s.rows, s.cols,
                                affine ? make_affine(s.cols, kSeed) : Affine{}, eps_draws.next()),
                   Dtype::fp32, misalign, s.rows, kind});
  };
  for (const KernelShape& s : test::small_shapes() ? kRaceShapes : kKernelShapes) {
    for (Kind kind : kKinds) add(s, kind, false, false);
    add(s, Kind::randn, true, false);
    add(s, Kind::randn, true, true);
  }
  std::vector<KernelShape> long_shapes = test::small_shapes() ? kRaceLongShapes : kLongShapes;
  if (!test::small_shapes()) {
    const int dispatched = max_dispatched_cached_cols(max_shared);
    long_shapes.push_back({1, dispatched});      // the dispatcher's last cached row
    long_shapes.push_back({1, dispatched + 1});  // one past: the dispatcher goes uncached
    const int max_cached = max_cached_cols(max_shared);
    long_shapes.push_back({1, max_cached});      // the longest cached row: all of shared memory
    long_shapes.push_back({1, max_cached + 1});  // one past: uncached
  }
  for (const KernelShape& s : long_shapes) {
    for (Kind kind : {Kind::randn, Kind::offset_1e4}) add(s, kind, false, false);
    add(s, Kind::randn, true, true);
  }
  return out;
}

/// The fp16 and bf16 problems: on the fp32 shapes (at least 3 rows, so that the two inputs'
/// rows cover all five kinds, and 3 is no multiple of any rows per block, 4 to 128), then the
/// 16-bit boundaries of block_cached, one row each: the first row past 48 KiB (24529 halves,
/// opted in), the dispatcher's last cached row (57808 on the simulator) with one past it, and
/// the device's limit (116176) with one past it (uncached).
/// On each: rows of every kind without gamma and beta (from randn on), rows of every kind with
/// them (from randn + offset on), and those again misaligned where vectors could be used; eps
/// drawn per problem.
inline std::vector<LadderProblem> problems_16_bit(std::size_t max_shared) {
  std::vector<LadderProblem> out;
  EpsDraws eps_draws(kSeed + 11);
  for (Dtype t : test::dtypes_of_this_run({Dtype::fp16, Dtype::bf16})) {
    std::vector<KernelShape> shapes = test::small_shapes() ? kRaceShapes : kKernelShapes;
    for (KernelShape& s : shapes) s.rows = std::max(s.rows, 3);
    shapes.push_back({1, max_cached_cols(kDefaultDynamicSharedBytes, t) + 1});
    if (!test::small_shapes()) {
      shapes.push_back({1, max_dispatched_cached_cols(max_shared, t)});
      shapes.push_back({1, max_dispatched_cached_cols(max_shared, t) + 1});
      shapes.push_back({1, max_cached_cols(max_shared, t)});
      shapes.push_back({1, max_cached_cols(max_shared, t) + 1});
    }
    for (const KernelShape& s : shapes) {
      const int block_rows = std::min(s.rows, kKinds16);
      const Problem plain = make_rounded_problem(make_mixed_x(s.rows, s.cols, kSeed, t, 0), s.rows,
                                                 s.cols, {}, t, eps_draws.next());
      const Problem affine =
          make_rounded_problem(make_mixed_x(s.rows, s.cols, kSeed + 9, t, 2), s.rows, s.cols,
                               make_affine(s.cols, kSeed), t, eps_draws.next());
      out.push_back({plain, t, false, block_rows, Kind::randn, 0});
      out.push_back({affine, t, false, block_rows, Kind::randn, 2});
      if (s.cols % vec_width(t) == 0) {
        Problem misaligned = affine;  // the same rows, another eps
        misaligned.eps = eps_draws.next();
        misaligned.ref =
            ref::layernorm(misaligned.x, misaligned.rows, misaligned.cols, misaligned.eps,
                           misaligned.affine.gamma, misaligned.affine.beta);
        out.push_back({std::move(misaligned), t, true, block_rows, Kind::randn, 2});
      }
    }
  }
  return out;
}

// ------------------------------------------------------------------------------------------
// A rung on a problem
// ------------------------------------------------------------------------------------------

// `values` as elements of t, `pad` bytes into a buffer with kVecBytes of zeros after them.
inline std::vector<unsigned char> padded_elements(const std::vector<float>& values, Dtype t,
                                                  std::size_t pad) {
  const std::vector<unsigned char> bytes = encode_elements(values, t);
  std::vector<unsigned char> out(pad + bytes.size() + kVecBytes, 0);
  std::copy(bytes.begin(), bytes.end(), out.begin() + static_cast<std::ptrdiff_t>(pad));
  return out;
}

/// Runs `rung` (kernels of B) on p's values as elements of t (p's values already rounded to
/// t), through run_rung: its outputs, or std::nullopt when its limits refuse the call.
/// Checks on the way that vectors are used exactly where can_vectorize allows them
/// (DeviceBuffers are 16-byte aligned) and that no byte before y or past its end is written
/// (they keep the 0xff bytes a new buffer holds; a constant row's outputs are zeros).
template <Backend B>
std::optional<LayerNormOut> run_on(const Rung<LayerNormArgs>& rung, const Problem& p, Dtype t,
                                   bool misalign) {
  const std::size_t pad = misalign ? dtype_bytes(t) : 0;
  DeviceBuffer<unsigned char> dx(B, padded_elements(p.x, t, pad));
  DeviceBuffer<unsigned char> dgamma(B, padded_elements(p.affine.gamma, t, pad));
  DeviceBuffer<unsigned char> dbeta(B, padded_elements(p.affine.beta, t, pad));
  DeviceBuffer<unsigned char> dy(B, dx.size());
  DeviceBuffer<float> dmean(B, static_cast<std::size_t>(p.rows));
  DeviceBuffer<float> drstd(B, static_cast<std::size_t>(p.rows));
  const LayerNormArgs a{dx.data() + pad,
                        p.affine.gamma.empty() ? nullptr : dgamma.data() + pad,
                        p.affine.beta.empty() ? nullptr : dbeta.data() + pad,
                        dy.data() + pad,
                        dmean.data(),
                        drstd.data(),
                        p.rows,
                        p.cols,
                        p.eps,
                        t};
  if (!why_refused(rung, a).empty()) return std::nullopt;
  CHECK(can_vectorize(a) == (!misalign && p.cols % vec_width(t) == 0));
  run_rung(rung, a);
  const std::vector<unsigned char> out = dy.download();
  const std::size_t bytes = p.x.size() * dtype_bytes(t);
  std::size_t touched = 0;
  for (std::size_t i = 0; i < out.size(); ++i)
    touched += (i < pad || i >= pad + bytes) && out[i] != 0xff;
  CHECK(touched == 0);
  return LayerNormOut{decode_elements(out.data() + pad, p.x.size(), t), dmean.download(),
                      drstd.download()};
}

// ------------------------------------------------------------------------------------------
// The chain check
// ------------------------------------------------------------------------------------------

enum class Output { mean, rstd, y };

inline const char* to_string(Output o) {
  return o == Output::mean ? "mean" : o == Output::rstd ? "rstd" : "y";
}

// A row's error, or its bound, in one output.
inline double part(const RowErrors& e, Output o) {
  return o == Output::mean ? e.mean : o == Output::rstd ? e.rstd : e.y;
}
inline double part(const Bounds& b, Output o) {
  return o == Output::mean ? b.mean : o == Output::rstd ? b.rstd : b.y;
}

/// One case of the chain check: one row of one problem, one output.
struct LadderCase {
  std::size_t problem;
  int row;
  Output output;
};

// Row `row`'s error in `o`, as check_ladder reads it: max_abs is the error in units of u K of
// the row (scaled_errors, net of a 16-bit output's rounding), the worst element and the
// non-finite count come from comparing the row's values with fp64.
inline ErrorReport row_report(const Problem& p, const LayerNormOut& out, const RowErrors& re,
                              int row, Output o) {
  const std::size_t r = static_cast<std::size_t>(row), n = static_cast<std::size_t>(p.cols);
  std::vector<float> actual = {out.mean[r]};
  std::vector<double> reference = {p.ref.mean[r]};
  if (o == Output::rstd) {
    actual = {out.rstd[r]};
    reference = {p.ref.rstd[r]};
  } else if (o == Output::y) {
    actual.assign(out.y.begin() + r * n, out.y.begin() + (r + 1) * n);
    reference.assign(p.ref.y.begin() + r * n, p.ref.y.begin() + (r + 1) * n);
  }
  ErrorReport report = compare(actual, reference);
  report.max_abs = part(re, o);
  return report;
}

/// Every rung of `ladder` (kernels of B) against the CPU Welford step and the rung before it
/// (tests/ladder_checks.hpp) on every row of every problem, in each output: within twice the
/// CPU Welford step's error (and twice the rung before's) plus the rung's own tree bound (a
/// wrong combine or a dropped value is off by O(1), 1e5 units and more), for the float
/// computation; y's rounding to a 16-bit type is allowed for by scaled_errors. And against
/// fp64 alone: within twice sequential Welford's a priori bound plus the rung's tree bound, so
/// that a fault shared with the CPU step (rstd_of, welford_combine) fails the kernel suites too.
template <Backend B>
void check_layernorm_ladder(const Ladder<LayerNormArgs>& ladder,
                            const std::vector<LadderProblem>& problems) {
  std::vector<LadderCase> cases;
  for (std::size_t i = 0; i < problems.size(); ++i)
    for (int row = 0; row < problems[i].p.rows; ++row)
      for (Output o : {Output::mean, Output::rstd, Output::y}) cases.push_back({i, row, o});

  // Each rung runs once per problem, on the rows it runs (rows_run), and the CPU Welford step
  // once, as the cases ask for them.
  struct Run {
    Problem p;  // the rows the rung ran
    LayerNormOut out;
    Errors errors;
  };
  // run_on places every buffer 16-byte aligned unless it misaligns them.
  auto vectorized = [](const LadderProblem& lp) {
    return !lp.misalign && lp.p.cols % vec_width(lp.dtype) == 0;
  };
  auto plan_of = [&](const Rung<LayerNormArgs>& rung, const LadderProblem& lp) {
    return rung_plan(rung, lp.p.cols, lp.dtype, vectorized(lp));
  };
  auto rows_run = [&](const Rung<LayerNormArgs>& rung, const LadderProblem& lp) {
    const bool block = plan_of(rung, lp).threads > kWarpSize;  // a block per row
    return block ? lp.block_rows : lp.p.rows;
  };
  std::map<std::pair<std::string, std::size_t>, std::optional<Run>> runs;
  std::map<std::size_t, Errors> cpu;
  auto run_of = [&](const Rung<LayerNormArgs>& rung, std::size_t i) -> const std::optional<Run>& {
    const auto key = std::make_pair(std::string(rung.name), i);
    if (auto it = runs.find(key); it != runs.end()) return it->second;
    const LadderProblem& lp = problems[i];
    Problem p = lp.p;
    if (const int rows = rows_run(rung, lp); rows < p.rows) {
      const std::size_t n = static_cast<std::size_t>(p.cols);
      p = make_problem(std::vector<float>(p.x.begin(), p.x.begin() + rows * n), rows, p.cols,
                       p.affine, p.eps);
    }
    std::optional<Run> run;
    if (std::optional<LayerNormOut> out = run_on<B>(rung, p, lp.dtype, lp.misalign)) {
      const Errors errors = scaled_errors(p, *out, output_rounding(lp.dtype));
      run = Run{std::move(p), std::move(*out), errors};
    }
    return runs[key] = std::move(run);
  };
  auto cpu_of = [&](std::size_t i) -> const Errors& {
    if (auto it = cpu.find(i); it != cpu.end()) return it->second;
    const Problem& p = problems[i].p;
    return cpu[i] = scaled_errors(p, layernorm_welford(p.x, p.rows, p.cols, p.eps, p.affine));
  };

  test::check_ladder(
      ladder, cases,
      [&](const Rung<LayerNormArgs>& rung, const LadderCase& c) -> std::optional<test::RungError> {
        const LadderProblem& lp = problems[c.problem];
        if (c.row >= rows_run(rung, lp)) return std::nullopt;
        const std::optional<Run>& run = run_of(rung, c.problem);
        if (!run) return std::nullopt;  // its limits refuse the problem
        const RowErrors& re = run->errors.rows[static_cast<std::size_t>(c.row)];
        const RowErrors& cpu_re = cpu_of(c.problem).rows[static_cast<std::size_t>(c.row)];
        const Tree tree = kernel_tree(plan_of(rung, lp), lp.p.cols, lp.dtype);
        const Bounds b = tree_bounds(tree)(re, run->errors.G, run->errors.B);
        // The CPU Welford step's stated bound: sequential Welford's a priori bound, the tree
        // with leaf = n and depth 0 (welford_layernorm.md, "How accurate").
        const Bounds cpu_bound = tree_bounds({lp.p.cols, 0})(re, run->errors.G, run->errors.B);
        return test::RungError{row_report(run->p, run->out, re, c.row, c.output), false,
                               part(cpu_re, c.output), part(b, c.output),
                               chain_bound(part(cpu_bound, c.output), part(b, c.output)),
                               lp.row_name(c.row) + ", " + to_string(c.output) +
                                   ", errors in units of u K with K = " + sci(re.K) +
                                   " (tree: leaf " + std::to_string(tree.leaf) + ", depth " +
                                   std::to_string(tree.depth) + ")"};
      });
}

}  // namespace wb::ch07::testing
