#include "common/program.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <iostream>
#include <ostream>

#include "common/compare.hpp"
#include "common/ladder_run.hpp"
#include "common/table.hpp"
#include "common/timer.hpp"

// True in an instrumented twin (common/sim/access.hpp). A weak reference: wb_common does not
// link the simulator, the chapter programs do.
namespace wb::sim {
bool instrumented() __attribute__((weak));
}  // namespace wb::sim

namespace wb {

namespace {

bool this_program_is_instrumented() {
  return sim::instrumented != nullptr && sim::instrumented();
}

/// --profile in an ordinary build: runs the program's instrumented twin, chNN_instrumented
/// next to it, with the same arguments. Returns only when that fails (the exit code).
int run_instrumented_twin(const Cli& cli, char** argv) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return cli.error("--profile: cannot find this program's path");
  const std::string twin = std::string(self, static_cast<std::size_t>(n)) + "_instrumented";
  std::cout.flush();
  execv(twin.c_str(), argv);
  return cli.error("--profile runs " + twin + ", the program's instrumented twin, which " +
                   (errno == ENOENT ? "is not built (it needs GCC; docs/simulator.md)"
                                    : "cannot run: " + std::string(std::strerror(errno))));
}

std::string g_access_csv;    // --access-csv, for profile_ladder
std::string g_profile_rung;  // --rung, for profile_ladder

}  // namespace

const std::string& profile_access_csv() {
  return g_access_csv;
}

const std::string& profile_rung() {
  return g_profile_rung;
}

int parse_program(Cli& cli, int argc, char** argv, ProgramOptions* options) {
  std::string backend_name = cuda_available() ? "cuda" : "sim";
  cli.option("--seed", &options->seed, "input seed (default 1)")
      .option("--backend", &backend_name, {"cpu", "sim", "cuda"},
              "where the kernels run (default cuda with a GPU, else sim)")
      .flag("--trace", &options->trace_only, "print the worked trace only")
      .flag("--list", &options->list,
            "print the kernel ladder: each rung, what it changes, what it takes (--csv FILE, "
            "or - for standard output: as CSV)")
      .flag("--profile", &options->profile,
            "count each rung's memory traffic on the simulator: bytes per element against the "
            "header's formula, sectors per request, bank conflicts (docs/simulator.md)")
      .option("--access-csv", &g_access_csv,
              "with --profile: also write every global access of each rung, in the order it "
              "ran, to this CSV (for a tiny shape: the tile-order figures)")
      .flag("--sass", &options->sass,
            "print the instruction mix of each rung's main loop in nvcc's sm_90 machine code "
            "(SASS: MMAs, ldmatrix, cp.async, float math, MUFU.EX2, address arithmetic, "
            "barriers), no GPU needed")
      .option("--rung", &g_profile_rung,
              "with --profile: count this rung only (a name --list prints), the one being "
              "changed, or one too slow to simulate with the others on a large shape");
  options->bench.add_to(cli, options->offers_bench);
  if (const int code = cli.parse(argc, argv); code >= 0) return code;
  if (!g_access_csv.empty() && !options->profile)
    return cli.error("--access-csv only applies with --profile");
  if (g_access_csv == "-") return cli.error("--access-csv needs a file name, not -");
  if (!g_profile_rung.empty() && !options->profile)
    return cli.error("--rung only applies with --profile");
  if (options->sass && (options->profile || options->bench.enabled || options->list))
    return cli.error("--sass runs alone (not with --profile, --bench or --list)");
  if (options->profile) {
    if (options->bench.enabled || options->list)
      return cli.error("--profile runs alone (not with --bench or --list)");
    if (!this_program_is_instrumented()) return run_instrumented_twin(cli, argv);
    backend_name = "sim";  // profile mode counts the simulator's accesses
  }
  if (const int code = options->bench.validate(cli, options->list, options->profile); code >= 0)
    return code;
  if (std::string why; !parse_backend(backend_name, &options->backend, &why))
    return cli.error(why);
  return options->bench.check_backend(cli, options->backend);
}

DtypesOption::DtypesOption(Cli& cli, const std::string& help) {
  cli.option("--dtype", &name, {"fp32", "fp16", "bf16", "all"}, help);
}

void add_dot_option(Cli& cli, std::string* path, const std::string& trees,
                    const std::string& state) {
  const bool several = trees.back() == 's';  // "two merge trees", or one "butterfly tree"
  cli.option("--dot", path,
             "also write the trace's " + trees + ", every node's " + state +
                 " as it ran, as Graphviz DOT to this file (the docs draw " +
                 (several ? "them" : "it") + " with dot)");
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
  } catch (const std::invalid_argument& e) {  // input refused (a rung's limits, --rung): exit 2
    return cli.error(e.what());
  } catch (const std::bad_alloc&) {
    cli.error("out of memory for this shape (try smaller --lq, --lk, --rows or --cols)");
    return 1;
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
