#include "common/attention_report.hpp"

#include <ostream>

#include "common/bench.hpp"
#include "common/compare.hpp"
#include "common/ladder_run.hpp"
#include "common/table.hpp"
#include "common/timer.hpp"

namespace wb {

AttentionRun run_cpu_attention(std::string name, const std::function<AttentionOut()>& step) {
  CpuTimer timer;
  AttentionOut out = step();
  return {std::move(name), std::move(out), timer.elapsed_ms()};
}

Ladder<AttentionArgs> rungs_taking(const Ladder<AttentionArgs>& ladder, Dtype dtype) {
  Ladder<AttentionArgs> taking;
  for (const Rung<AttentionArgs>& rung : ladder)
    if (rung.limits.takes(dtype)) taking.push_back(rung);
  return taking;
}

void run_attention_ladder(Backend backend, const Ladder<AttentionArgs>& ladder,
                          const AttentionInputs& in, AttentionShape shape, float scale, bool causal,
                          Dtype dtype, std::vector<AttentionRun>* runs,
                          std::vector<std::string>* skipped) {
  if (backend == Backend::cpu || ladder.empty()) return;
  AttentionBuffers buffers(backend, in, shape, scale, causal, dtype, ladder_outputs(ladder));
  for (AttentionRun& run : run_ladder(
           backend, ladder, buffers.args,
           [&](const Rung<AttentionArgs>& rung) { return buffers.download(rung.limits.outputs); },
           skipped))
    runs->push_back(std::move(run));
}

void print_attention_table(std::ostream& out, const std::vector<AttentionRun>& runs,
                           const ref::Attention& r, const AttentionMeasure& measure,
                           AttentionShape shape, bool causal) {
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
    if (any_lse)
      row.push_back(run.out.lse.empty() ? "-" : sci(compare(run.out.lse, r.lse).max_abs));
    row.insert(row.end(), {std::to_string(e.nonfinite_mismatches), fixed(run.ms, 3)});
    if (any_gpu) row.push_back(on_gpu(run) ? fixed(tflop_per_s(flops, run.ms), 2) : "-");
    t.add_row(row);
  }
  t.print(out);
}

}  // namespace wb
