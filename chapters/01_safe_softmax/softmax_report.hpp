// The report of the softmax chapter programs (01, 02, 03): their CPU steps and their kernel
// ladder on randn and randn + 1e4 against the fp64 reference, and the --bench timing of the
// ladder. Host code only: the programs include it, the kernels never do.
#pragma once

#include <cstdint>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "common/bench.hpp"
#include "common/buffer.hpp"
#include "common/inputs.hpp"
#include "common/program.hpp"
#include "common/reference.hpp"

namespace wb::ch01 {

/// A CPU step of a softmax chapter: y = step(x, rows, cols).
struct CpuStep {
  std::string name;
  std::function<std::vector<float>(const std::vector<float>& x, int rows, int cols)> run;
};

/// Runs kernel `k` on `backend` once for its output and times it (common/program.hpp).
inline Run run_kernel(Backend backend, const NamedKernel& k, const std::vector<float>& x,
                      int rows, int cols) {
  DeviceBuffer<float> dx(backend, x);
  DeviceBuffer<float> dy(backend, x.size());
  const double ms = time_kernel_ms(backend, [&] { k.launch(dx.data(), dy.data(), rows, cols); });
  return {std::string(to_string(backend)) + " " + k.name, dy.download(), ms};
}

/// For randn and randn + 1e4 on (rows, cols): every CPU step, then every kernel of `ladder`
/// (kernels of `backend`), against fp64, and against the first CPU step when
/// `previous_label` names it (the previous chapter's step).
inline void report_softmax(Backend backend, const std::vector<CpuStep>& cpu_steps,
                           const std::vector<NamedKernel>& ladder,
                           const std::string& previous_label, int rows, int cols,
                           std::uint64_t seed) {
  for (InputKind kind : {InputKind::randn, InputKind::large_offset}) {
    const std::vector<float> x = make_input(kind, rows, cols, seed);
    std::vector<Run> runs;
    for (const CpuStep& step : cpu_steps)
      runs.push_back(run_cpu(step.name, [&] { return step.run(x, rows, cols); }));
    for (const NamedKernel& k : ladder) runs.push_back(run_kernel(backend, k, x, rows, cols));
    std::cout << "Error vs the fp64 reference"
              << (previous_label.empty() ? "" : " and vs " + previous_label) << " on (" << rows
              << ", " << cols << ") " << to_string(kind) << ", seed " << seed << ":\n";
    print_error_table(std::cout, runs, ref::softmax(x, rows, cols), previous_label,
                      softmax_bytes(rows, cols, sizeof(float)));
  }
}

/// --bench: every kernel of `ladder` (cuda kernels) on (rows, cols) of randn, on the GPU.
inline int bench_softmax(const std::string& chapter, const std::vector<NamedKernel>& ladder,
                         const BenchOptions& options, int rows, int cols, std::uint64_t seed) {
  Bench bench(chapter, "softmax", options);
  DeviceBuffer<float> dx(Backend::cuda, bench_input(rows, cols, seed));
  DeviceBuffer<float> dy(Backend::cuda, dx.size());
  const Work work = Work::moving(softmax_bytes(rows, cols, sizeof(float)));
  for (const NamedKernel& k : ladder)
    bench.time(k.name, "fp32", shape_string(rows, cols), work,
               [&] { k.launch(dx.data(), dy.data(), rows, cols); });
  return bench.finish();
}

}  // namespace wb::ch01
