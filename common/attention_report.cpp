#include "common/attention_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <ostream>

#include "common/bench.hpp"
#include "common/compare.hpp"
#include "common/ladder_run.hpp"
#include "common/table.hpp"
#include "common/timer.hpp"

namespace wb {
namespace {

/// "(default 8 on cuda, 1 otherwise)", or "(default 64)" where both are the same; `note`
/// before the closing parenthesis.
std::string defaults(int gpu, int sim, const std::string& note = "") {
  const std::string value =
      gpu == sim ? std::to_string(gpu)
                 : std::to_string(gpu) + " on cuda, " + std::to_string(sim) + " otherwise";
  return "(default " + value + note + ")";
}

}  // namespace

AttentionShapeOptions::AttentionShapeOptions(Cli& cli, AttentionShape gpu_shape,
                                             AttentionShape sim_shape, int max_bh, int max_d,
                                             const std::string& d_note)
    : gpu(gpu_shape), sim(sim_shape) {
  cli.option("--bh", &bh, "batch x heads " + defaults(gpu.bh, sim.bh), max_bh)
      .option("--lq", &lq, "query rows " + defaults(gpu.lq, sim.lq))
      .option("--lk", &lk, "key rows " + defaults(gpu.lk, sim.lk))
      .option("--d", &d, "head dimension " + defaults(gpu.d, sim.d, d_note), max_d);
}

AttentionShape AttentionShapeOptions::resolve(Backend backend) const {
  const AttentionShape& fallback = backend == Backend::cuda ? gpu : sim;
  return {bh > 0 ? bh : fallback.bh, lq > 0 ? lq : fallback.lq, lk > 0 ? lk : fallback.lk,
          d > 0 ? d : fallback.d};
}

int check_probabilities(const Cli& cli, AttentionShape shape, int log2_max,
                        const std::string& why) {
  // In long double: bh x lq x lk reaches 2^90 from options of up to 2^30, past any integer.
  const long double limit = std::ldexp(1.0L, log2_max);
  const auto product = [](long double a, long double b, long double c) { return a * b * c; };
  const auto count = [](long double x) {
    char buf[48];
    std::snprintf(buf, sizeof buf, x < 1e18L ? "%.0Lf" : "%.3Le", x);
    return std::string(buf);
  };
  const long double p = product(shape.bh, shape.lq, shape.lk);
  if (p > limit)
    return cli.error("--bh x --lq x --lk = " + count(p) + " exceeds this program's limit of 2^" +
                     std::to_string(log2_max) + " (" + why + ")");
  // Q, K and V in fp64 references and float copies: the same limit for each.
  const long double qkv = product(shape.bh, std::max(shape.lq, shape.lk), shape.d);
  if (qkv > limit)
    return cli.error("--bh x max(--lq, --lk) x --d = " + count(qkv) +
                     " exceeds this program's limit of 2^" + std::to_string(log2_max) +
                     " elements for Q, K and V");
  return -1;
}

int check_attention_size(const Cli& cli, const ProgramOptions& options, AttentionShape shape,
                         int log2_max, const std::string& why) {
  if (options.profile) return -1;
  if (!options.bench.enabled) return check_probabilities(cli, shape, log2_max, why);
  if (shape.q_elems() > kMaxBenchElements || shape.kv_elems() > kMaxBenchElements)
    return cli.error("--bh x --lq x --d or --bh x --lk x --d exceeds 2^31 elements");
  return -1;
}

std::vector<AttentionRun> run_attention_table(Backend backend,
                                              const std::vector<AttentionStep>& steps,
                                              const Ladder<AttentionArgs>& ladder,
                                              const AttentionInputs& in, AttentionShape shape,
                                              float scale, bool causal, Dtype dtype,
                                              std::vector<std::string>* skipped) {
  std::vector<AttentionRun> runs;
  for (const AttentionStep& step : steps) {
    CpuTimer timer;
    AttentionOut out = step.run(in);
    runs.push_back({step.name, std::move(out), timer.elapsed_ms()});
  }
  if (backend == Backend::cpu || ladder.empty()) return runs;
  AttentionBuffers buffers(backend, in, shape, scale, causal, dtype, ladder_outputs(ladder));
  for (AttentionRun& run : run_ladder(
           backend, ladder, buffers,
           [&](const Rung<AttentionArgs>& rung) { return buffers.download(rung.limits.outputs); },
           skipped))
    runs.push_back(std::move(run));
  return runs;
}

void print_attention_table(std::ostream& out, const std::vector<AttentionRun>& runs,
                           const std::vector<std::string>& skipped, const ref::Attention& r,
                           const AttentionMeasure& measure, AttentionShape shape, bool causal) {
  const auto measured = [&](const AttentionRun& run) -> const std::vector<float>& {
    return measure.p ? run.out.p : run.out.o;
  };
  const auto on_gpu = [](const AttentionRun& run) { return run.name.rfind("cuda", 0) == 0; };
  bool any_lse = false, any_gpu = false;
  for (const AttentionRun& run : runs) {
    any_lse = any_lse || !run.out.lse.empty();
    any_gpu = any_gpu || on_gpu(run);
  }
  const std::string what = measure.p ? "P" : "O";
  std::vector<std::string> header = {"implementation",
                                     measure.p ? "P max rel err vs fp64" : "O err / w vs fp64",
                                     what + " max abs diff vs " + measure.previous};
  if (any_lse) header.push_back("logsumexp abs err");
  header.insert(header.end(), {"non-finite", "time ms"});
  if (any_gpu) header.push_back("TFLOP/s");
  Table t(header);
  const double flops = attention_flops(shape.bh, shape.lq, shape.lk, shape.d, causal);
  for (const AttentionRun& run : runs) {
    const ErrorReport e = measure.p ? compare(run.out.p, r.p)
                                    : ref::compare_weighted(run.out.o, r.o, measure.o_weight);
    std::vector<std::string> row = {run.name, sci(measure.p ? e.max_rel : e.max_abs),
                                    sci(compare(measured(run), measured(runs.front())).max_abs)};
    // A NaN or inf logsumexp where the reference has none shows in its cell and in the count.
    std::size_t nonfinite = e.nonfinite_mismatches;
    if (any_lse) {
      if (run.out.lse.empty()) {
        row.push_back("-");
      } else {
        const ErrorReport lse = compare(run.out.lse, r.lse);
        row.push_back(lse.cell());
        nonfinite += lse.nonfinite_mismatches;
      }
    }
    row.insert(row.end(), {std::to_string(nonfinite), fixed(run.ms, 3)});
    if (any_gpu) row.push_back(on_gpu(run) ? fixed(tflop_per_s(flops, run.ms), 2) : "-");
    t.add_row(row);
  }
  t.print(out);
  for (const std::string& s : skipped) out << "  skipped " << s << '\n';
  out << "  stated floors for these inputs (common/reference_attention.hpp): " << what << " "
      << sci(measure.p ? ref::softmax_floor(r.score_error, shape.lk)
                       : ref::output_floor(r.score_error, shape.lk) + measure.rounding);
  if (any_lse) out << ", logsumexp " << sci(ref::lse_floor(r.score_error, shape.lk, r.max_abs_lse));
  out << "\n\n";
}

void report_attention(Backend backend, const Ladder<AttentionArgs>& ladder,
                      const std::vector<AttentionStep>& steps, const std::vector<ScoreKind>& kinds,
                      AttentionShape shape, std::uint64_t seed, bool p,
                      const std::string& previous) {
  const float scale = default_scale(shape.d);
  for (ScoreKind kind : kinds) {
    const AttentionInputs in = make_attention_inputs(kind, shape, scale, seed);
    const ref::Attention r = ref::attention(in, shape, scale, false, /*want_p=*/p);
    std::vector<std::string> skipped;
    const std::vector<AttentionRun> runs =
        run_attention_table(backend, steps, ladder, in, shape, scale, false, Dtype::fp32, &skipped);
    std::cout << (p ? "P" : "O") << " against the fp64 reference on (" << to_string(shape) << ") "
              << to_string(kind) << ", seed " << seed << ":\n";
    print_attention_table(std::cout, runs, skipped, r, {p, r.o_weight, previous}, shape, false);
  }
}

int bench_attention(const std::string& chapter, const Ladder<AttentionArgs>& ladder,
                    const BenchOptions& options, AttentionShape shape, bool causal, Dtype dtype,
                    std::uint64_t seed) {
  Bench bench(chapter, "attention", options);
  const AttentionInputs in = {bench_input(std::int64_t(shape.bh) * shape.lq, shape.d, seed),
                              bench_input(std::int64_t(shape.bh) * shape.lk, shape.d, seed + 1),
                              bench_input(std::int64_t(shape.bh) * shape.lk, shape.d, seed + 2)};
  AttentionBuffers buffers(Backend::cuda, in, shape, default_scale(shape.d), causal, dtype,
                           ladder_outputs(ladder));
  const Work work =
      Work::computing(attention_flops(shape.bh, shape.lq, shape.lk, shape.d, causal),
                      attention_bytes(shape.bh, shape.lq, shape.lk, shape.d, dtype_bytes(dtype)));
  bench_ladder(bench, rungs_taking(ladder, dtype), buffers.args,
               attention_shape_string(shape.bh, shape.lq, shape.lk, shape.d, causal), work);
  return bench.finish();
}

}  // namespace wb
