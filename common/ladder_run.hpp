// The consumers of a kernel ladder (common/rung.hpp) that every chapter program shares: run
// each rung once for the report, and time each rung for --bench. Host code only.
//
// The caller allocates the op's device buffers once, with one Args over them; each rung that
// takes the Args runs on them in turn (its outputs poisoned before and downloaded after), each
// rung that does not is listed with the reason its limits give.
#pragma once

#include <string>
#include <vector>

#include "common/backend.hpp"
#include "common/bench.hpp"
#include "common/program.hpp"
#include "common/rung.hpp"

namespace wb {

/// Every rung of `ladder` (kernels of `backend`) on `buffers` (common/rung_buffers.hpp), in
/// order: a rung that takes buffers.args runs on outputs poisoned first (so that nothing the
/// rung before wrote passes for its own), timed (time_kernel_ms), then `download(rung)` returns
/// its output; a rung that does not goes to `skipped` as "<rung>: <why>".
template <typename Buffers, typename Args, typename Download>
auto run_ladder(Backend backend, const Ladder<Args>& ladder, Buffers& buffers, Download&& download,
                std::vector<std::string>* skipped) {
  std::vector<RungRun<decltype(download(ladder.front()))>> runs;
  for (const Rung<Args>& rung : ladder) {
    if (const std::string why = why_refused(rung, buffers.args); !why.empty()) {
      skipped->push_back(std::string(rung.name) + ": " + why);
      continue;
    }
    buffers.poison_outputs();
    const double ms = time_kernel_ms(backend, [&] { rung.launch(buffers.args); });
    runs.push_back({std::string(to_string(backend)) + " " + rung.name, download(rung), ms});
  }
  return runs;
}

/// Prints the rungs run_ladder skipped, one line each, under a table.
void print_skipped(const std::vector<std::string>& skipped);

/// --bench: times every rung of `ladder` (cuda kernels) that takes `args`, one row each (the
/// element type of `args`, `shape`, `work`); records the others as skipped with their reason.
template <typename Args>
void bench_ladder(Bench& bench, const Ladder<Args>& ladder, const Args& args,
                  const std::string& shape, const Work& work) {
  for (const Rung<Args>& rung : ladder) {
    if (const std::string why = why_refused(rung, args); !why.empty()) {
      bench.skip(rung.name, why);
      continue;
    }
    bench.time(rung.name, to_string(args.dtype), shape, work, [&] { rung.launch(args); });
  }
}

}  // namespace wb
