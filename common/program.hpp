// What every chapter program shares: its common options, the backend choice, timing a kernel
// launch on either kernel backend, a row of the error table, and one-line errors.
//
//   wb::Cli cli("ch01", "Chapter 01: ...");
//   cli.option("--rows", &rows, "...").option("--cols", &cols, "...");   // the chapter's own
//   wb::ProgramOptions options;
//   if (const int code = wb::parse_program(cli, argc, argv, &options); code >= 0) return code;
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "common/backend.hpp"
#include "common/bench.hpp"
#include "common/cli.hpp"
#include "common/dtype.hpp"
#include "common/rung_list.hpp"

namespace wb {

struct ProgramOptions {
  std::uint64_t seed = 1;
  bool trace_only = false;
  Backend backend = Backend::sim;
  BenchOptions bench;
  bool offers_bench = true;  ///< set false before parsing where the program has no --bench
  bool list = false;         ///< --list: print the kernel ladder (--csv FILE: as CSV) and stop
  bool profile = false;      ///< --profile: count each rung's traffic (common/ladder_profile.hpp)
  bool sass = false;  ///< --sass: each rung's main-loop instruction mix (common/sass_view.hpp)
};

/// The --access-csv FILE parse_program was given ("" when none): profile_ladder writes every
/// global access of each rung's launches there (the pages' tile-order figures).
const std::string& profile_access_csv();

/// The --rung NAME parse_program was given ("" when none): profile_ladder counts that rung only.
const std::string& profile_rung();

/// Adds --seed, --backend (default: cuda with a GPU, else sim), --trace, --list, --profile,
/// --sass and the benchmark options to `cli`, parses argv, resolves the backend. Returns -1 when
/// the program should go on, else the exit code: 0 after --help, 2 after a one-line error.
int parse_program(Cli& cli, int argc, char** argv, ProgramOptions* options);

/// --dtype fp32|fp16|bf16|all of a row-wise chapter (03, 07): the element types its kernels run,
/// all three unless given. Made with the program's Cli, it adds the option to it with `help`
/// (the Cli keeps a pointer to `name`: no copies).
struct DtypesOption {
  std::string name = "all";

  DtypesOption(Cli& cli, const std::string& help);
  DtypesOption(const DtypesOption&) = delete;
  /// The types named, fp32 first (dtypes_of_option).
  std::vector<Dtype> types() const { return dtypes_of_option(name); }
};

/// Adds --dot FILE to `cli`, kept in `path`: where the program's trace also writes `trees` ("three
/// merge trees", "butterfly tree"), every node's `state` ("(m, d)") as it ran, as Graphviz DOT
/// (ch03::write_merge_trees_dot), which the docs draw with dot.
void add_dot_option(Cli& cli, std::string* path, const std::string& trees,
                    const std::string& state);

/// A row-wise chapter's size check: rows x cols at most 2^28 elements (1 GiB per float
/// matrix), or 2^31 with --bench. -1 when it fits, else prints one line and returns 2.
int check_matrix_size(const Cli& cli, const ProgramOptions& options, int rows, int cols);

/// Runs `body`, turning an exception into one line on stderr: exit code 2 for input it refuses
/// (std::invalid_argument: a rung's limits, an unknown --rung), 1 for a failure (a CUDA error,
/// a simulator fault, memory).
int run_guarded(const Cli& cli, const std::function<int()>& body);

/// --list: the ladder of the program's backend (sim where the backend is cpu) as a table, or as
/// CSV with --csv FILE. `make(b)` returns the ladder of kernel backend b (see
/// select_kernel_backend). Returns the program's exit code: 1, after one line, when the CSV
/// file cannot be written.
template <typename Make>
int list_ladder(const Cli& cli, const ProgramOptions& options, const std::string& chapter,
                const std::string& op, Make&& make) {
  const Backend backend = options.backend == Backend::cpu ? Backend::sim : options.backend;
  return run_guarded(cli, [&] {
    print_ladder(std::cout, chapter, op, rung_infos(select_kernel_backend(backend, make)),
                 options.bench.csv_path);
    return 0;
  });
}

/// Times `launch` on a kernel backend: CUDA events on a GPU (2 warm-ups, the median of 10,
/// the L2 cache flushed before each), the wall clock of one run on the simulator.
double time_kernel_ms(Backend backend, const std::function<void()>& launch);

/// time_kernel_ms for a launch written once for both kernel backends: `launch(b)` gets
/// std::integral_constant<Backend, B> (see with_kernel_backend), so it can name Kernels<B>:
///   time_launch(backend, [&](auto b) { Kernels<decltype(b)::value>::fa1(...); });
template <typename Launch>
double time_launch(Backend backend, Launch&& launch) {
  double ms = 0.0;
  with_kernel_backend(backend, [&](auto b) { ms = time_kernel_ms(backend, [&] { launch(b); }); });
  return ms;
}

/// One implementation's output (`Out`: a vector, or an op's outputs) on a report's input, and
/// its time: a row of an error table.
template <typename Out>
struct RungRun {
  std::string name;  ///< "cpu safe", "sim warp_shuffle"
  Out out;
  double ms;
};
using Run = RungRun<std::vector<float>>;

/// Runs and times one CPU step.
Run run_cpu(std::string name, const std::function<std::vector<float>()>& step);

/// The error table of the row-wise chapters: each run against the fp64 reference and, when
/// `previous_label` is not empty, against runs[0] (the previous chapter's CPU step); time;
/// and, for GPU runs, GB/s for `bytes` moved.
void print_error_table(std::ostream& out, const std::vector<Run>& runs,
                       const std::vector<double>& reference, const std::string& previous_label,
                       double bytes);

/// Under a table with simulator times: what they mean (nothing for cpu or cuda).
void print_sim_time_note(std::ostream& out, Backend backend);

}  // namespace wb
