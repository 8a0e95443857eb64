// Chapter 02 program: online softmax. Run it after building; `--help` lists the options.
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/02_online_softmax/online_softmax.hpp"
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
using namespace wb::ch02;

void print_intro() {
  std::cout << "Chapter 02: online softmax\n"
               "  Safe softmax sums d = sum_j e^(x_j - m) with the final max m, so it needs a\n"
               "  whole pass for m first. Keep a running max m_i instead, and rescale the\n"
               "  partial sum whenever m_i grows:\n"
               "    d'_i = d'_(i-1) e^(m_(i-1) - m_i) + e^(x_i - m_i)\n"
               "  At i = N this is exactly the safe d. Two passes per row: statistics,\n"
               "  normalize (2 reads + 1 write per element, where chapter 01 made 3 + 1).\n\n";
}

// The textbook d_i (which needs m_N before it starts) and the online d'_i side by side.
void print_trace() {
  const std::vector<float> x = {1.0f, 3.0f, -2.0f, 2.5f, 4.0f, 0.5f};
  const int n = static_cast<int>(x.size());
  const float m_n = online_stats(x.data(), n).m;
  std::cout << "Trace on x = [1, 3, -2, 2.5, 4, 0.5] (N = 6, i from 1 as on the page):\n"
               "  d_i  = d_(i-1) + e^(x_i - m_N)              needs m_N = "
            << fixed(m_n, 2)
            << " before the first term\n"
               "  d'_i = d'_(i-1) e^(m_(i-1) - m_i) + e^(x_i - m_i)   uses only x_1..x_i\n";
  Table t({"i", "x_i", "m_i", "d_i (with m_N)", "rescale e^(m_(i-1)-m_i)", "d'_i (online)",
           "d'_i e^(m_i-m_N)"});
  double d = 0.0;
  MD md{-INFINITY, 0.f};
  for (int i = 0; i < n; ++i) {
    d += std::exp(static_cast<double>(x[i]) - m_n);  // eq. (2)
    const MD next = online_update(md, x[i]);         // eqs. (1), (4): the code the kernel runs
    const std::string rescale = i == 0 ? "- (d'_0 = 0)" : fixed(std::exp(md.m - next.m));
    t.add_row({std::to_string(i + 1), fixed(x[i], 2), fixed(next.m, 2), fixed(d), rescale,
               fixed(next.d), fixed(next.d * std::exp(static_cast<double>(next.m) - m_n))});
    md = next;
  }
  t.print(std::cout);
  std::cout << "  d'_i differs from d_i while m_i < m_N, yet d_i = d'_i e^(m_i - m_N) at every i\n"
               "  (last column), and once m_i = m_N the factor is 1: d_N = "
            << fixed(d, 6) << ", d'_N = " << fixed(md.d, 6) << " (eq. 5).\n\n";
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
    CpuTimer safe_timer;
    runs.push_back({"cpu ch01 safe", ch01::softmax_safe(x, rows, cols), 0.0});
    runs.back().ms = safe_timer.elapsed_ms();
    CpuTimer online_timer;
    runs.push_back({"cpu ch02 online", softmax_online(x, rows, cols), 0.0});
    runs.back().ms = online_timer.elapsed_ms();
    if (backend == Backend::sim) {
      for (const NamedKernel& k : kernel_ladder<Backend::sim>())
        runs.push_back(run_kernel(backend, k, x, rows, cols));
    }
    if (backend == Backend::cuda) {
      for (const NamedKernel& k : kernel_ladder<Backend::cuda>())
        runs.push_back(run_kernel(backend, k, x, rows, cols));
    }
    const std::vector<float>& previous = runs.front().y;  // chapter 01's CPU step
    std::cout << "Error vs the fp64 reference and vs chapter 01 on (" << rows << ", " << cols
              << ") " << to_string(kind) << ", seed " << seed << ":\n";
    const double bytes = 2.0 * sizeof(float) * x.size();  // read x once, write y once
    Table t({"implementation", "max rel err", "max abs err", "non-finite", "rel diff vs ch01",
             "time ms", "GB/s"});
    for (const Run& run : runs) {
      const ErrorReport e = compare(run.y, ref);
      const ErrorReport vs_ch01 = compare(run.y, previous);
      const bool gpu = run.name.rfind("cuda", 0) == 0;
      t.add_row({run.name, sci(e.max_rel), sci(e.max_abs), std::to_string(e.nonfinite_mismatches),
                 sci(vs_ch01.max_rel), fixed(run.ms, 3),
                 gpu ? fixed(bytes / run.ms * 1e-6, 1) : "-"});
    }
    t.print(std::cout);
    std::cout << '\n';
  }
  std::cout << "  Chapter 01 sums d in double; here d' is a float recurrence, so the error\n"
               "  grows with cols (the tests derive the bound). One thread per row reads\n"
               "  addresses cols floats apart: chapter 03 puts a whole warp or block on a row.\n\n";
  if (backend == Backend::sim)
    std::cout << "  sim times are the simulator running every GPU thread on this CPU: they\n"
                 "  check the kernels, they do not predict GPU speed. GB/s is shown on a GPU.\n\n";
}

// --bench: every rung of the ladder on (rows, cols) of randn, on the GPU.
int run_bench(const BenchOptions& options, int rows, int cols, std::uint64_t seed) {
  Bench bench("02_online_softmax", "softmax", options);
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
  Cli cli("ch02", "Chapter 02: online softmax, on the CPU and as a CUDA kernel.");
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
  if (trace_only) return 0;
  try {
    report_shape(backend, rows, cols, seed);
  } catch (const std::exception& e) {
    return cli.error(e.what());
  }
  std::cout << "Next: chapter 03, the block-associative (m, d) merge (chapters/03_block_merge,\n"
               "docs page \"Chapter 03: block-associative merge\"): split a row anywhere, merge\n"
               "the pieces in any order, and let a whole block of threads share one row.\n";
  return 0;
}
