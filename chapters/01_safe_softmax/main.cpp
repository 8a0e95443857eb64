// Chapter 01 program: safe softmax. Run it after building; `--help` lists the options.
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "common/bench.hpp"
#include "common/buffer.hpp"
#include "common/cli.hpp"
#include "common/compare.hpp"
#include "common/inputs.hpp"
#include "common/reference.hpp"
#include "common/table.hpp"
#include "common/timer.hpp"

namespace {

using namespace wb;
using namespace wb::ch01;

void print_intro() {
  std::cout << "Chapter 01: safe softmax\n"
               "  softmax(x)_i = e^(x_i) / sum_j e^(x_j) overflows as soon as some x_i > 88.7\n"
               "  in float. Subtracting the row max m changes nothing mathematically\n"
               "  (e^-m cancels) and keeps every exponent <= 0: three passes per row,\n"
               "  max, sum d, normalize (3 reads + 1 write per element).\n\n";
}

// The three passes on one small row, every intermediate printed.
void print_trace() {
  const std::vector<float> x = {1.0f, 3.0f, -2.0f, 2.5f, 0.5f};
  std::cout << "Trace of the three passes on x = [1, 3, -2, 2.5, 0.5]:\n";
  float m = -INFINITY;
  std::vector<float> m_i;
  for (float v : x) m_i.push_back(m = std::fmax(m, v));
  double d = 0.0;
  std::vector<double> d_i;
  for (float v : x) d_i.push_back(d += std::exp(v - m));
  const std::vector<float> y = softmax_safe(x, 1, static_cast<int>(x.size()));
  Table t({"i", "x_i", "pass 1: max so far", "e^(x_i - m)", "pass 2: d so far", "pass 3: y_i"});
  for (std::size_t i = 0; i < x.size(); ++i) {
    t.add_row({std::to_string(i), fixed(x[i], 2), fixed(m_i[i], 2), fixed(std::exp(x[i] - m)),
               fixed(d_i[i]), fixed(y[i])});
  }
  t.print(std::cout);
  double sum = 0.0;
  for (float v : y) sum += v;
  std::cout << "  m = " << fixed(m, 2) << ", d = " << fixed(d) << ", sum of y = " << fixed(sum, 6)
            << "\n\n";
}

void print_overflow_demo() {
  const std::vector<float> x = {1000.f, 999.f, 998.f};
  const std::vector<float> naive = softmax_naive(x, 1, 3);
  const std::vector<float> safe = softmax_safe(x, 1, 3);
  std::cout << "Why the max is subtracted: x = [1000, 999, 998]\n";
  Table t({"", "y_0", "y_1", "y_2"});
  t.add_row({"naive e^x / sum e^x", fixed(naive[0]), fixed(naive[1]), fixed(naive[2])});
  t.add_row({"safe  e^(x-m) / sum e^(x-m)", fixed(safe[0]), fixed(safe[1]), fixed(safe[2])});
  t.print(std::cout);
  std::cout << "  e^1000 is inf in float, and inf / inf is NaN.\n\n";
}

struct Run {
  std::string name;
  std::vector<float> y;
  double ms;
};

// Times a kernel launcher: CUDA events on a GPU (L2 flushed, median of 10), the wall clock
// for one simulated run (simulator time says nothing about GPU speed).
Run run_kernel(Backend backend, const NamedKernel& k, const std::vector<float>& x, int rows,
               int cols) {
  DeviceBuffer<float> dx(backend, x);
  DeviceBuffer<float> dy(backend, x.size());
  auto work = [&] { k.launch(dx.data(), dy.data(), rows, cols); };
  double ms = 0.0;
  if (backend == Backend::cuda) {
    ms = time_cuda(work, 2, 10).median_ms;
  } else {
    CpuTimer timer;
    work();
    ms = timer.elapsed_ms();
  }
  return {std::string(to_string(backend)) + " " + k.name, dy.download(), ms};
}

void report_shape(Backend backend, int rows, int cols, std::uint64_t seed) {
  for (InputKind kind : {InputKind::randn, InputKind::large_offset}) {
    const std::vector<float> x = make_input(kind, rows, cols, seed);
    const std::vector<double> ref = ref::softmax(x, rows, cols);
    std::vector<Run> runs;
    CpuTimer naive_timer;
    runs.push_back({"cpu naive", softmax_naive(x, rows, cols), 0.0});
    runs.back().ms = naive_timer.elapsed_ms();
    CpuTimer safe_timer;
    runs.push_back({"cpu safe", softmax_safe(x, rows, cols), 0.0});
    runs.back().ms = safe_timer.elapsed_ms();
    if (backend == Backend::sim) {
      for (const NamedKernel& k : kernel_ladder<Backend::sim>())
        runs.push_back(run_kernel(backend, k, x, rows, cols));
    }
    if (backend == Backend::cuda) {
      for (const NamedKernel& k : kernel_ladder<Backend::cuda>())
        runs.push_back(run_kernel(backend, k, x, rows, cols));
    }
    std::cout << "Error vs the fp64 reference on (" << rows << ", " << cols << ") "
              << to_string(kind) << ", seed " << seed << ":\n";
    const double bytes = 2.0 * sizeof(float) * x.size();  // read x once, write y once
    Table t({"implementation", "max rel err", "max abs err", "non-finite", "time ms", "GB/s"});
    for (const Run& run : runs) {
      const ErrorReport e = compare(run.y, ref);
      const bool gpu = run.name.rfind("cuda", 0) == 0;
      t.add_row({run.name, sci(e.max_rel), sci(e.max_abs), std::to_string(e.nonfinite_mismatches),
                 fixed(run.ms, 3), gpu ? fixed(bytes / run.ms * 1e-6, 1) : "-"});
    }
    t.print(std::cout);
    std::cout << '\n';
  }
  if (backend == Backend::sim)
    std::cout << "  sim times are the simulator running every GPU thread on this CPU: they\n"
                 "  check the kernels, they do not predict GPU speed. GB/s is shown on a GPU.\n\n";
}

// --bench: every rung of the ladder on (rows, cols) of randn, on the GPU.
int run_bench(const BenchOptions& options, int rows, int cols, std::uint64_t seed) {
  Bench bench("01_safe_softmax", "softmax", options);
  DeviceBuffer<float> dx(Backend::cuda, bench_input(rows, cols, seed));
  DeviceBuffer<float> dy(Backend::cuda, dx.size());
  const Work work = Work::moving(softmax_bytes(rows, cols, sizeof(float)));
  for (const NamedKernel& k : kernel_ladder<Backend::cuda>())
    bench.time(k.name, "fp32", shape_string(rows, cols), work,
               [&] { k.launch(dx.data(), dy.data(), rows, cols); });
  return bench.finish();
}

}  // namespace

int main(int argc, char** argv) {
  int rows = 4096;
  int cols = 1024;
  std::uint64_t seed = 1;
  std::string backend_name = cuda_available() ? "cuda" : "sim";
  bool trace_only = false;
  Cli cli("ch01", "Chapter 01: safe softmax, on the CPU and as three CUDA kernels.");
  cli.option("--rows", &rows, "rows of x (default 4096)")
      .option("--cols", &cols, "columns of x, the softmax length (default 1024)")
      .option("--seed", &seed, "input seed (default 1)")
      .option("--backend", &backend_name, {"cpu", "sim", "cuda"},
              "where the kernels run (default cuda with a GPU, else sim)")
      .flag("--trace", &trace_only, "print the worked trace only");
  BenchOptions bench;
  if (const int code = bench.parse(cli, argc, argv); code >= 0) return code;
  constexpr std::size_t kMaxElements = std::size_t{1} << 28;  // 1 GiB per float matrix
  if (static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols) >
      bench.max_elements(kMaxElements))
    return cli.error("--rows x --cols = " + std::to_string(std::size_t(rows) * cols) +
                     " elements exceeds this program's limit of " +
                     (bench.enabled ? "2^31 with --bench" : "2^28 (1 GiB per matrix)"));
  Backend backend{};
  if (std::string why; !parse_backend(backend_name, &backend, &why)) return cli.error(why);
  if (const int code = bench.check_backend(cli, backend); code >= 0) return code;
  if (bench.enabled) {
    try {
      return run_bench(bench, rows, cols, seed);
    } catch (const std::exception& e) {
      return cli.error(e.what());
    }
  }

  print_intro();
  print_trace();
  print_overflow_demo();
  if (trace_only) return 0;
  try {
    report_shape(backend, rows, cols, seed);
  } catch (const std::exception& e) {
    return cli.error(e.what());
  }
  std::cout << "Next: chapter 02, online softmax (chapters/02_online_softmax, docs page\n"
               "\"Chapter 02: online softmax\"): the max and the sum in one pass.\n";
  return 0;
}
