// Chapter 07 program: Welford LayerNorm. Run it after building; `--help` lists the options.
#include <cmath>
#include <cstdint>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "chapters/03_block_merge/block_merge.hpp"
#include "chapters/07_welford_layernorm/layernorm.hpp"
#include "chapters/07_welford_layernorm/layernorm_ladder.hpp"
#include "chapters/07_welford_layernorm/welford.hpp"
#include "common/bench.hpp"
#include "common/chapter_program.hpp"
#include "common/cli.hpp"
#include "common/compare.hpp"
#include "common/dtype.hpp"
#include "common/inputs.hpp"
#include "common/ladder_profile.hpp"
#include "common/ladder_run.hpp"
#include "common/program.hpp"
#include "common/reference_layernorm.hpp"
#include "common/rung_buffers.hpp"
#include "common/shared_memory.hpp"
#include "common/table.hpp"
#include "common/timer.hpp"

namespace {

using namespace wb;
using namespace wb::ch07;

std::string number(double v) {
  return std::fabs(v) >= 1e5 || v == 0 ? sci(v, 6) : fixed(v, 6);
}

// The same randn row at offsets 0, 1e4 and 1e6: the naive variance's two terms, and every
// step's variance next to fp64's.
void print_cancellation_demo() {
  constexpr int kCols = 1000;
  constexpr std::uint64_t kDemoSeed = 7;
  std::cout << "Catastrophic cancellation: one randn row of " << kCols
            << " values (variance about 1) moved by an offset.\n";
  Table t({"offset", "E[x^2] (float)", "E[x]^2 (float)", "naive var", "two-pass var", "Welford var",
           "fp64 var"});
  for (float offset : {0.f, 1e4f, 1e6f}) {
    std::vector<float> x = randn(kCols, kDemoSeed);
    for (float& v : x) v += offset;
    const Moments m = naive_moments(x.data(), kCols);
    const float naive_var = m.mean_sq - m.mean * m.mean;  // eq. (5), before any clamp
    const ref::LayerNorm r = ref::layernorm(x, 1, kCols, 0.f);
    const double ref_var = 1.0 / (r.rstd[0] * r.rstd[0]);
    const RowStats two_pass = row_stats_two_pass(x.data(), kCols, 0.f);
    const Welford w = welford_row(x.data(), kCols);
    t.add_row({sci(offset, 0), number(m.mean_sq), number(m.mean * m.mean), number(naive_var),
               number(1.0 / (static_cast<double>(two_pass.rstd) * two_pass.rstd)),
               number(welford_variance(w)), number(ref_var)});
  }
  t.print(std::cout);
  std::cout << "  At 1e4, E[x^2] ~ 1e8 is a float with spacing 8: the variance of 1 is below\n"
               "  its rounding, and the difference is noise (possibly negative). At 1e6 the\n"
               "  spacing is 2^16 = 65536. Two-pass and Welford subtract the mean from each\n"
               "  value first, and keep the variance to a few digits even at 1e6, where the\n"
               "  float inputs themselves carry only 1/16 of resolution.\n\n";
}

// What the chapter changes, then the cancellation it avoids.
void print_intro() {
  std::cout << "Chapter 07: Welford LayerNorm\n"
               "  y = (x - mean) * rstd * gamma + beta, rstd = 1 / sqrt(var + eps), per row.\n"
               "  The one-pass textbook variance E[x^2] - E[x]^2 subtracts two huge, nearly\n"
               "  equal numbers when the data sit far from 0. Two passes (mean, then squared\n"
               "  deviations) are accurate but read x twice; Welford's update keeps\n"
               "  (mean, m2, count) in one pass, and Chan's combine joins two such states: a\n"
               "  monoid again, like chapter 03's (m, d), so threads, warps and blocks can\n"
               "  each fold a piece of the row and merge.\n\n";
  print_cancellation_demo();
}

// Welford's update on a small row, then Chan's combine of its two halves.
std::string g_dot_path;  // --dot: where the trace writes the butterfly's tree (Graphviz)

/// The node lane `lane` holds after the butterfly's exchanges from mask G / 2 down to `mask`
/// (group_all_reduce in rungs/1_warp_per_row.cuh): mask = G is its own state, a leaf;
/// otherwise it combined its state with lane ^ mask's, the lower lane's first.
int butterfly_node(ch03::MergeTree& tree, int group, int lane, int mask) {
  if (mask == group) return tree.add_leaf(lane);
  const int mine = butterfly_node(tree, group, lane, 2 * mask);
  const int partner = butterfly_node(tree, group, lane ^ mask, 2 * mask);
  return (lane & mask) != 0 ? tree.add_merge(partner, mine) : tree.add_merge(mine, partner);
}

std::string state_text(const Welford& w) {
  return "(" + fixed(w.mean, 4) + ", " + fixed(w.m2, 4) + ", " + fixed(w.count, 0) + ")";
}

// The warp kernel's all-reduce over a group of 8 lanes, one value each: the tree of Chan's
// combines that lane 0 evaluates, with every node's (mean, m2, count) as it came out.
void print_butterfly_tree(const std::vector<float>& x) {
  const int group = static_cast<int>(x.size());
  ch03::MergeTree tree;
  butterfly_node(tree, group, 0, 1);
  std::vector<Welford> leaves;
  for (float v : x) leaves.push_back(welford_update(welford_identity(), v));
  std::vector<Welford> value;
  ch03::reduce_tree(tree, leaves, welford_combine, welford_identity(), &value);
  std::cout << "The warp kernel's butterfly over " << group
            << " lanes, one value each, as lane 0 combines (masks 4, 2, 1, lower lane first):\n  "
            << tree.to_string() << " = " << state_text(value.back()) << "\n\n";
  if (g_dot_path.empty()) return;
  std::vector<std::string> labels;
  for (std::size_t i = 0; i < tree.nodes.size(); ++i)
    labels.push_back(
        (tree.nodes[i].block >= 0 ? "lane " + tree.to_string(int(i)) : std::string("combine")) +
        "\\n" + state_text(value[i]));
  ch03::write_merge_trees_dot(g_dot_path, {&tree}, {"lane 0's combines: " + tree.to_string()},
                              {labels});
}

void print_trace() {
  const std::vector<float> x = {2.f, 4.f, 4.f, 4.f, 5.f, 5.f, 7.f, 9.f};
  const int n = static_cast<int>(x.size());
  std::cout << "Trace of Welford's update on x = [2, 4, 4, 4, 5, 5, 7, 9]:\n";
  Table t({"k", "x_k", "delta = x_k - mean_{k-1}", "mean_k", "m2_k", "var_k = m2_k / k"});
  Welford s = welford_identity();
  for (int k = 0; k < n; ++k) {
    const float delta = x[static_cast<std::size_t>(k)] - s.mean;
    s = welford_update(s, x[static_cast<std::size_t>(k)]);
    t.add_row({std::to_string(k + 1), fixed(x[static_cast<std::size_t>(k)], 1), fixed(delta, 4),
               fixed(s.mean, 4), fixed(s.m2, 4), fixed(welford_variance(s), 4)});
  }
  t.print(std::cout);
  const Welford a = welford_row(x.data(), n / 2);
  const Welford b = welford_row(x.data() + n / 2, n - n / 2);
  const Welford ab = welford_combine(a, b);
  std::cout << "\nChan's combine of the halves [2, 4, 4, 4] and [5, 5, 7, 9]:\n";
  Table c({"state", "mean", "m2", "count"});
  c.add_row({"a = Welford(first half)", fixed(a.mean, 4), fixed(a.m2, 4), fixed(a.count, 0)});
  c.add_row({"b = Welford(second half)", fixed(b.mean, 4), fixed(b.m2, 4), fixed(b.count, 0)});
  c.add_row({"combine(a, b)", fixed(ab.mean, 4), fixed(ab.m2, 4), fixed(ab.count, 0)});
  c.add_row({"sequential, above", fixed(s.mean, 4), fixed(s.m2, 4), fixed(s.count, 0)});
  const Welford with_id = welford_combine(welford_identity(), ab);
  c.add_row({"combine(identity, a+b)", fixed(with_id.mean, 4), fixed(with_id.m2, 4),
             fixed(with_id.count, 0)});
  c.print(std::cout);
  const float delta = b.mean - a.mean;
  std::cout << "  delta = mean_b - mean_a = " << fixed(delta, 4)
            << "; m2 = m2_a + m2_b + delta^2 n_a n_b / n = " << fixed(a.m2, 0) << " + "
            << fixed(b.m2, 0) << " + " << fixed(delta * delta * a.count * b.count / ab.count, 0)
            << " = " << fixed(ab.m2, 0) << "; var = " << fixed(welford_variance(ab), 4)
            << ", rstd (eps = 1e-5) = " << fixed(rstd_of(welford_variance(ab), kDefaultEps), 6)
            << "\n\n";
  print_butterfly_tree(x);
}

// The chapter after this one, printed last.
void print_next() {
  std::cout
      << "Next: chapter 08, FlashAttention-2 at speed (chapters/08_fa2_at_speed, docs page\n"
         "\"Chapter 08: FlashAttention-2 at speed\"): chapter 06's algorithm on mma.sync, one\n"
         "optimization per rung.\n";
}

// Which strategy the dispatcher picks for each row length, with the device's limit, for
// elements of `dtype` (fp32; or fp16, standing for both 16-bit types, whose rows cache twice
// as long).
void print_dispatch(Backend backend, Dtype dtype) {
  const std::size_t limit = select_kernel_backend(
      backend, [](auto b) { return Kernels<decltype(b)::value>::max_dynamic_shared_bytes(); });
  const std::size_t elem_bytes = dtype_bytes(dtype);
  const int max_cached = max_cached_cols(limit, dtype);
  const int dispatched = max_dispatched_cached_cols(limit, dtype);
  const int default_cached = max_cached_cols(kDefaultDynamicSharedBytes, dtype);
  const int width = vec_width(dtype);
  const std::string type = dtype == Dtype::fp32 ? "fp32" : "fp16 and bf16";
  std::cout << "The dispatcher on " << to_string(backend) << " for " << type << " rows: " << limit
            << " bytes of shared memory per block (opt-in), so block_cached holds up to "
            << max_cached << " columns; the dispatcher caches up to " << dispatched
            << ", while two blocks fit on an SM.\n";
  Table t({"cols", "strategy", "launch",
           "vectors of " + std::to_string(width) + " (aligned, cols % " + std::to_string(width) +
               " == 0)"});
  const std::set<int> boundaries = {1,
                                    2,
                                    17,
                                    32,
                                    33,
                                    1000,
                                    1024,
                                    1025,
                                    2048,
                                    2049,
                                    4096,
                                    32768,
                                    default_cached,
                                    default_cached + 1,
                                    dispatched,
                                    dispatched + 1,
                                    max_cached,
                                    max_cached + 1};  // in order
  for (int cols : boundaries) {
    const Strategy s = choose_strategy(cols, limit, elem_bytes);
    std::string how;
    bool vec = cols % width == 0;
    if (s == Strategy::warp_per_row) {
      const RowLanes w = warp_shape(cols, vec ? width : 1);
      how = std::to_string(w.group_width) + " lanes x " + std::to_string(w.cols_per_lane) +
            " registers per row, " + std::to_string(rows_per_block(w)) + " rows per block";
    } else if (s == Strategy::block_cached) {
      const std::size_t bytes = cached_shared_bytes(cols, elem_bytes);
      how = "256 threads per row, " + std::to_string(bytes) + " B shared" +
            (bytes > kDefaultDynamicSharedBytes ? " (opt-in)" : "");
    } else {
      how = "256 threads per row, x read twice";
    }
    t.add_row({std::to_string(cols), to_string(s), how, vec ? "yes" : "no"});
  }
  t.print(std::cout);
  std::cout << '\n';
}

// The error table of every step on (rows, cols) of `dtype`: randn, then randn moved by
// randn_offset(dtype) (1e4 in fp32; 1e2 in fp16 and 1e1 in bf16, where 1e4 would round the
// rows to a few levels). x, gamma and beta are rounded to `dtype` first, and the CPU steps and
// the fp64 reference start from those rounded values, as the kernels do.
void report_shape(Backend backend, const Ladder<LayerNormArgs>& ladder, Dtype dtype, int rows,
                  int cols, std::uint64_t seed) {
  const Affine affine{
      round_elements(randn(static_cast<std::size_t>(cols), seed, 1.f, 0.5f), dtype),
      round_elements(randn(static_cast<std::size_t>(cols), seed + 1, 0.f, 0.5f), dtype)};
  for (const float offset : {0.f, randn_offset(dtype)}) {
    std::vector<float> x = make_input(InputKind::randn, rows, cols, seed);
    for (float& v : x) v += offset;
    x = round_elements(x, dtype);
    const ref::LayerNorm ref =
        ref::layernorm(x, rows, cols, kDefaultEps, affine.gamma, affine.beta);
    std::vector<RungRun<LayerNormOut>> runs;
    auto cpu = [&](const char* name, auto step) {
      CpuTimer timer;
      LayerNormOut out = step();
      runs.push_back({name, std::move(out), timer.elapsed_ms()});
    };
    cpu("cpu naive", [&] { return layernorm_naive(x, rows, cols, kDefaultEps, affine); });
    cpu("cpu two-pass", [&] { return layernorm_two_pass(x, rows, cols, kDefaultEps, affine); });
    cpu("cpu Welford", [&] { return layernorm_welford(x, rows, cols, kDefaultEps, affine); });
    cpu("cpu blocked Welford (32)",
        [&] { return layernorm_blocked_welford(x, rows, cols, 32, kDefaultEps, affine); });
    // Every rung that takes the shape, on the same buffers; the others are listed under the table.
    std::vector<std::string> skipped;
    if (backend != Backend::cpu) {
      LayerNormBuffers buffers(backend, x, affine.gamma, affine.beta, rows, cols, kDefaultEps,
                               dtype);
      for (RungRun<LayerNormOut>& run : run_ladder(
               backend, ladder, buffers, [&](const auto&) { return buffers.download(); }, &skipped))
        runs.push_back(std::move(run));
    }

    std::cout << "Error vs the fp64 reference on (" << rows << ", " << cols << ") "
              << to_string(dtype) << " randn";
    if (offset != 0.f)  // a power of 10: "1e4"
      std::cout << " + 1e" << static_cast<int>(std::lround(std::log10(offset)));
    std::cout << ", gamma ~ 1 + 0.5 randn, beta ~ 0.5 randn, seed " << seed
              << (dtype == Dtype::fp32 ? ""
                                       : " (all rounded to " + std::string(to_string(dtype)) +
                                             ", y too; mean and rstd float)")
              << ":\n";
    // Bytes moved: x read once and y written once, gamma and beta once, mean and rstd.
    const double bytes = layernorm_bytes(rows, cols, dtype_bytes(dtype));
    Table t({"implementation", "y max abs err", "rstd max rel err", "mean max abs err",
             "non-finite", "time ms", "GB/s"});
    for (const RungRun<LayerNormOut>& run : runs) {
      const ErrorReport ey = compare(run.out.y, ref.y);
      const ErrorReport er = compare(run.out.rstd, ref.rstd);
      const ErrorReport em = compare(run.out.mean, ref.mean);
      const bool gpu = run.name.rfind("cuda", 0) == 0;
      t.add_row({run.name, sci(ey.max_abs), sci(er.max_rel), em.cell(),
                 std::to_string(ey.nonfinite_mismatches + er.nonfinite_mismatches +
                                em.nonfinite_mismatches),
                 fixed(run.ms, 3), gpu ? fixed(bytes / run.ms * 1e-6, 1) : "-"});
    }
    t.print(std::cout);
    print_skipped(skipped);
    std::cout << '\n';
  }
  if (dtype == Dtype::fp32) {
    std::cout << "  Every kernel stays within a small multiple of the CPU Welford step's error\n"
                 "  (they fold 4 to 32 values per thread and combine along a tree, which rounds\n"
                 "  less than one long chain). At +1e4 the naive step's variance collapses: its\n"
                 "  rstd is off by orders of magnitude.\n\n";
  } else {
    std::cout << "  The kernels read " << to_string(dtype)
              << " and compute in float: mean and rstd match fp32's accuracy on the\n"
                 "  same values, and y carries one more rounding, to "
              << to_string(dtype) << " (half an ulp, a relative\n  "
              << (dtype == Dtype::fp16 ? "2^-11 = 4.9e-4 above 2^-14" : "2^-8 = 3.9e-3")
              << "): it dominates y's error. The CPU steps keep y in float.\n\n";
  }
}

// --bench: every rung of `ladder` (cuda kernels) on (rows, cols) of randn, on the GPU, in every
// selected element type; the rungs that cannot take it are listed as skipped.
int run_bench(const Ladder<LayerNormArgs>& ladder, const BenchOptions& options,
              const std::vector<Dtype>& dtypes, int rows, int cols, std::uint64_t seed) {
  Bench bench(kChapter, "layernorm", options);
  const std::size_t n = static_cast<std::size_t>(cols);
  const std::vector<float> x = bench_input(rows, cols, seed);
  const Affine affine{randn(n, seed, 1.f, 0.5f), randn(n, seed + 1, 0.f, 0.5f)};
  for (Dtype dtype : dtypes) {
    LayerNormBuffers buffers(Backend::cuda, x, affine.gamma, affine.beta, rows, cols, kDefaultEps,
                             dtype);
    bench_ladder(bench, ladder, buffers.args, shape_string(rows, cols),
                 Work::moving(layernorm_bytes(rows, cols, dtype_bytes(dtype))));
  }
  return bench.finish();
}

// --profile: every rung of `ladder` (sim kernels) on (rows, cols) of randn in every selected
// element type, its memory traffic counted by the simulator.
int run_profile(const Ladder<LayerNormArgs>& ladder, const std::vector<Dtype>& dtypes, int rows,
                int cols, std::uint64_t seed, const std::string& csv_path) {
  const std::size_t n = static_cast<std::size_t>(cols);
  const std::vector<float> x = make_input(InputKind::randn, rows, cols, seed);
  const Affine affine{randn(n, seed, 1.f, 0.5f), randn(n, seed + 1, 0.f, 0.5f)};
  for (Dtype dtype : dtypes) {
    LayerNormBuffers buffers(Backend::sim, x, affine.gamma, affine.beta, rows, cols, kDefaultEps,
                             dtype);
    name_buffers(buffers.x, "x", buffers.gamma, "gamma", buffers.beta, "beta", buffers.y, "y",
                 buffers.mean, "mean", buffers.rstd, "rstd");
    profile_ladder(ladder, buffers.args, std::uint64_t(rows) * std::uint64_t(cols), "element",
                   "layernorm " + shape_string(rows, cols) + " " + to_string(dtype), csv_path);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int rows = 512;
  int cols = 1000;
  Cli cli("ch07", "Chapter 07: Welford LayerNorm, on the CPU and as three CUDA strategies.");
  cli.option("--rows", &rows, "rows of x (default 512)")
      .option("--cols", &cols, "columns of x, the normalized length (default 1000)", kMaxCols);
  DtypesOption dtype(cli, "element type of x, gamma, beta and y in the kernels (default all)");
  add_dot_option(cli, &g_dot_path, "butterfly tree", "(mean, m2, count)");
  ProgramOptions options;
  if (const int code = parse_program(cli, argc, argv, &options); code >= 0) return code;
  const std::vector<Dtype> dtypes = dtype.types();
  ChapterSteps<LayerNormArgs> steps;
  steps.op = "layernorm";
  steps.check = [&] { return check_matrix_size(cli, options, rows, cols); };
  steps.profile = [&](const Ladder<LayerNormArgs>& ladder) {
    return run_profile(ladder, dtypes, rows, cols, options.seed, options.bench.csv_path);
  };
  steps.bench = [&](const Ladder<LayerNormArgs>& ladder) {
    return run_bench(ladder, options.bench, dtypes, rows, cols, options.seed);
  };
  steps.report = [&](const Ladder<LayerNormArgs>& ladder) {
    const Backend kernels = options.backend == Backend::cuda ? Backend::cuda : Backend::sim;
    print_dispatch(kernels, Dtype::fp32);
    if (dtypes.back() != Dtype::fp32) print_dispatch(kernels, Dtype::fp16);
    for (Dtype t : dtypes) report_shape(options.backend, ladder, t, rows, cols, options.seed);
  };
  // The trace runs under the program's guard: --dot may fail to write.
  return run_chapter_program(cli, options, {print_intro, print_trace, print_next}, steps,
                             make_kernel_ladder);
}
