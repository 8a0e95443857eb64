#include "common/program.hpp"

#include <exception>
#include <iostream>
#include <ostream>

#include "common/compare.hpp"
#include "common/ladder_run.hpp"
#include "common/table.hpp"
#include "common/timer.hpp"

namespace wb {

int parse_program(Cli& cli, int argc, char** argv, ProgramOptions* options) {
  std::string backend_name = cuda_available() ? "cuda" : "sim";
  cli.option("--seed", &options->seed, "input seed (default 1)")
      .option("--backend", &backend_name, {"cpu", "sim", "cuda"},
              "where the kernels run (default cuda with a GPU, else sim)")
      .flag("--trace", &options->trace_only, "print the worked trace only")
      .flag("--list", &options->list,
            "print the kernel ladder: each rung, what it changes, what it takes (--csv FILE, "
            "or - for standard output: as CSV)");
  options->bench.add_to(cli, options->offers_bench);
  if (const int code = cli.parse(argc, argv); code >= 0) return code;
  if (const int code = options->bench.validate(cli, options->list); code >= 0) return code;
  if (std::string why; !parse_backend(backend_name, &options->backend, &why))
    return cli.error(why);
  return options->bench.check_backend(cli, options->backend);
}

int check_matrix_size(const Cli& cli, const ProgramOptions& options, int rows, int cols) {
  constexpr std::size_t kMaxElements = std::size_t{1} << 28;  // 1 GiB per float matrix
  const std::size_t elements = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  if (elements <= options.bench.max_elements(kMaxElements)) return -1;
  return cli.error("--rows x --cols = " + std::to_string(elements) +
                   " elements exceeds this program's limit of " +
                   (options.bench.enabled ? "2^31 with --bench" : "2^28 (1 GiB per matrix)"));
}

int run_guarded(const Cli& cli, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    cli.error(e.what());
    return 1;
  }
}

double time_kernel_ms(Backend backend, const std::function<void()>& launch) {
  constexpr int kWarmup = 2;
  constexpr int kRepetitions = 10;
  if (backend == Backend::cuda) return time_cuda(launch, kWarmup, kRepetitions).median_ms;
  CpuTimer timer;
  launch();
  return timer.elapsed_ms();
}

Run run_cpu(std::string name, const std::function<std::vector<float>()>& step) {
  CpuTimer timer;
  std::vector<float> out = step();
  return {std::move(name), std::move(out), timer.elapsed_ms()};
}

void print_error_table(std::ostream& out, const std::vector<Run>& runs,
                       const std::vector<double>& reference, const std::string& previous_label,
                       double bytes) {
  std::vector<std::string> header = {"implementation", "max rel err", "max abs err", "non-finite"};
  if (!previous_label.empty()) header.push_back("rel diff vs " + previous_label);
  header.insert(header.end(), {"time ms", "GB/s"});
  Table t(header);
  for (const Run& run : runs) {
    const ErrorReport e = compare(run.out, reference);
    std::vector<std::string> row = {run.name, sci(e.max_rel), sci(e.max_abs),
                                    std::to_string(e.nonfinite_mismatches)};
    if (!previous_label.empty()) row.push_back(sci(compare(run.out, runs.front().out).max_rel));
    const bool gpu = run.name.rfind("cuda", 0) == 0;
    row.insert(row.end(), {fixed(run.ms, 3), gpu ? fixed(gb_per_s(bytes, run.ms), 1) : "-"});
    t.add_row(row);
  }
  t.print(out);
  out << '\n';
}

void print_sim_time_note(std::ostream& out, Backend backend) {
  if (backend != Backend::sim) return;
  out << "  sim times are the simulator running every GPU thread on this CPU: they\n"
         "  check the kernels, they do not predict GPU speed (throughput: on a GPU only).\n\n";
}

void print_skipped(const std::vector<std::string>& skipped) {
  for (const std::string& s : skipped) std::cout << "  skipped " << s << '\n';
  if (!skipped.empty()) std::cout << '\n';
}

}  // namespace wb
