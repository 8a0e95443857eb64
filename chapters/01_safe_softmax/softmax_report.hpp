// The report of the softmax chapter programs (01, 02, 03): their CPU steps and their kernel
// ladder on randn and randn + 1e4 against the fp64 reference, the --bench timing and the
// --profile counts of the ladder, and what their programs share (SoftmaxShapeOptions,
// softmax_steps). Host code only: the programs include it, the kernels never do.
#pragma once

#include <cstdint>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "common/bench.hpp"
#include "common/chapter_program.hpp"
#include "common/cli.hpp"
#include "common/dtype.hpp"
#include "common/inputs.hpp"
#include "common/ladder_profile.hpp"
#include "common/ladder_run.hpp"
#include "common/program.hpp"
#include "common/reference.hpp"
#include "common/rung_buffers.hpp"

namespace wb::ch01 {

/// A CPU step of a softmax chapter: y = step(x, rows, cols).
struct CpuStep {
  std::string name;
  std::function<std::vector<float>(const std::vector<float>& x, int rows, int cols)> run;
};

/// For randn and randn + 1e4 on (rows, cols) of `dtype`: every CPU step, then every rung of
/// `ladder` (kernels of `backend`) that takes the shape, against fp64 on the same (rounded)
/// inputs, and against the first CPU step when `previous_label` names it (the previous
/// chapter's step).
inline void report_softmax(Backend backend, const std::vector<CpuStep>& cpu_steps,
                           const Ladder<RowArgs>& ladder, const std::string& previous_label,
                           int rows, int cols, std::uint64_t seed, Dtype dtype = Dtype::fp32) {
  for (InputKind kind : {InputKind::randn, InputKind::large_offset}) {
    const std::vector<float> x = round_elements(make_input(kind, rows, cols, seed), dtype);
    std::vector<Run> runs;
    for (const CpuStep& step : cpu_steps)
      runs.push_back(run_cpu(step.name, [&] { return step.run(x, rows, cols); }));
    std::vector<std::string> skipped;
    if (backend != Backend::cpu) {
      RowBuffers buffers(backend, x, rows, cols, dtype);
      for (Run& run : run_ladder(
               backend, ladder, buffers, [&](const auto&) { return buffers.download_y(); },
               &skipped))
        runs.push_back(std::move(run));
    }
    std::cout << "Error vs the fp64 reference"
              << (previous_label.empty() ? "" : " and vs " + previous_label) << " on (" << rows
              << ", " << cols << ") " << to_string(dtype) << " " << to_string(kind) << ", seed "
              << seed << ":\n";
    print_error_table(std::cout, runs, ref::softmax(x, rows, cols), previous_label,
                      softmax_bytes(rows, cols, dtype_bytes(dtype)));
    print_skipped(skipped);
  }
}

/// --bench: every rung of `ladder` (cuda kernels) on (rows, cols) of randn in `dtype`, on the
/// GPU; the rungs that cannot take it are listed as skipped.
inline int bench_softmax(const std::string& chapter, const Ladder<RowArgs>& ladder,
                         const BenchOptions& options, int rows, int cols, std::uint64_t seed,
                         const std::vector<Dtype>& dtypes = {Dtype::fp32}) {
  Bench bench(chapter, "softmax", options);
  const std::vector<float> x = bench_input(rows, cols, seed);
  for (Dtype dtype : dtypes) {
    RowBuffers buffers(Backend::cuda, x, rows, cols, dtype);
    bench_ladder(bench, ladder, buffers.args, shape_string(rows, cols),
                 Work::moving(softmax_bytes(rows, cols, dtype_bytes(dtype))));
  }
  return bench.finish();
}

/// --profile: every rung of `ladder` (sim kernels) on (rows, cols) of randn in each of `dtypes`,
/// its memory traffic counted by the simulator (common/ladder_profile.hpp), also appended to
/// `csv_path` when given.
inline int profile_softmax(const Ladder<RowArgs>& ladder, int rows, int cols, std::uint64_t seed,
                           const std::vector<Dtype>& dtypes = {Dtype::fp32},
                           const std::string& csv_path = "") {
  const std::vector<float> x = make_input(InputKind::randn, rows, cols, seed);
  for (Dtype dtype : dtypes) {
    RowBuffers buffers(Backend::sim, x, rows, cols, dtype);
    name_buffers(buffers.x, "x", buffers.y, "y");
    profile_ladder(ladder, buffers.args, std::uint64_t(rows) * std::uint64_t(cols), "element",
                   "softmax " + shape_string(rows, cols) + " " + to_string(dtype), csv_path);
  }
  return 0;
}

/// x's shape in the softmax chapters' programs: --rows rows of --cols, the softmax length
/// (4096 x 1024 unless given). Made with the program's Cli, it adds the two options to it (which
/// keeps pointers to them: no copies).
struct SoftmaxShapeOptions {
  int rows = 4096;
  int cols = 1024;

  explicit SoftmaxShapeOptions(Cli& cli) {
    cli.option("--rows", &rows, "rows of x (default 4096)")
        .option("--cols", &cols, "columns of x, the softmax length (default 1024)");
  }
  SoftmaxShapeOptions(const SoftmaxShapeOptions&) = delete;
};

/// What the softmax chapters' programs share besides their intro, trace and report: --list's op,
/// the size check, --profile and --bench over x of `shape` in each of `dtypes`. `shape` is read
/// when a step runs, after the options are parsed.
inline ChapterSteps<RowArgs> softmax_steps(const Cli& cli, const ProgramOptions& options,
                                           const SoftmaxShapeOptions& shape,
                                           std::vector<Dtype> dtypes = {Dtype::fp32}) {
  ChapterSteps<RowArgs> steps;
  steps.op = "softmax";
  steps.check = [&] { return check_matrix_size(cli, options, shape.rows, shape.cols); };
  steps.profile = [&, dtypes](const Ladder<RowArgs>& ladder) {
    return profile_softmax(ladder, shape.rows, shape.cols, options.seed, dtypes,
                           options.bench.csv_path);
  };
  steps.bench = [&, dtypes](const Ladder<RowArgs>& ladder) {
    return bench_softmax(kChapter, ladder, options.bench, shape.rows, shape.cols, options.seed,
                         dtypes);
  };
  return steps;
}

}  // namespace wb::ch01
