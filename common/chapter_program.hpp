// One chapter program's flow, shared by every chapter's main.cpp: after the common flags
// (parse_program), `--list` and `--sass`, then `--profile`, `--bench` or the report, every
// failure one line and a non-zero exit. A chapter's main.cpp holds what is its own: its options
// and default shape, its checks of them, its intro and trace, what its report, profile and
// benchmark run, and its "next chapter" line:
//
//   ChapterSteps<RowArgs> steps = ch01::softmax_steps(cli, options, shape);
//   steps.report = [&](const Ladder<RowArgs>& ladder) { ... };
//   return run_chapter_program(cli, options, {print_intro, print_trace, print_next}, steps,
//                              make_kernel_ladder);
#pragma once

#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "common/backend.hpp"
#include "common/cli.hpp"
#include "common/program.hpp"
#include "common/rung.hpp"
#include "common/rung_list.hpp"
#include "common/sass_view.hpp"

#ifndef WB_CHAPTER
#error "WB_CHAPTER (the chapter's folder name) comes from wb_add_chapter: build a chapter program"
#endif

namespace wb {

/// The chapter's folder name, "01_safe_softmax": its tables, CSVs and --list name it so. The
/// build passes it to the program (wb_add_chapter), so no program spells it.
inline constexpr const char* kChapter = WB_CHAPTER;

/// What a chapter program prints of its own around the report: what the chapter's step
/// changes, its worked example (all that --trace prints), and the chapter after, printed last.
struct ChapterText {
  std::function<void()> intro;
  std::function<void()> trace;
  std::function<void()> next;
};

/// What a chapter program runs in each mode, over its ladder of `Args`. Every step but `op` may
/// be left empty: no check, no profile or benchmark offered, no report.
template <typename Args>
struct ChapterSteps {
  const char* op = "";  ///< the ladder's op, as --list names it ("softmax", "attention", ...)
  /// The chapter's checks of its options, before any ladder is made: -1 to go on, else the exit
  /// code after its one-line refusal (cli.error).
  std::function<int()> check;
  std::function<int(const Ladder<Args>&)> profile;  ///< --profile: returns the exit code
  std::function<int(const Ladder<Args>&)> bench;    ///< --bench: returns the exit code
  std::function<void(const Ladder<Args>&)> report;  ///< the ladder against the CPU steps
};

/// The attention chapters' refusal of --causal and --dtype (`dtype_given`: other than its
/// default) outside --bench and --profile, where the report runs both masks and every type: -1
/// when neither was given, else the exit code after one line.
inline int check_mode_options(const Cli& cli, const ProgramOptions& options, bool causal,
                              bool dtype_given) {
  if (options.bench.enabled || options.profile || (!causal && !dtype_given)) return -1;
  return cli.error(
      "--causal and --dtype only apply with --bench or --profile (the report runs both)");
}

/// The rest of the program once `options` are parsed: --list (the ladder of the program's
/// backend), then the chapter's check, then --profile, --bench or the text's intro and trace,
/// the report (and what simulator times mean, where they were shown) and the next chapter,
/// under run_guarded (an exception is one line: exit code 2 for refused input, 1 for a
/// failure). `make(b)` returns the chapter's ladder on kernel backend b.
template <typename Args, typename Make>
int run_chapter_program(const Cli& cli, const ProgramOptions& options, const ChapterText& text,
                        const ChapterSteps<Args>& steps, Make&& make) {
  if (options.list) return list_ladder(cli, options, kChapter, steps.op, make);
  if (options.sass) {  // the ladder's names, in order, for the build's table of its kernels
    std::vector<std::string> rungs;
    for (const RungInfo& r : rung_infos(select_kernel_backend(Backend::sim, make)))
      rungs.push_back(r.name);
    return print_sass_view(cli, kChapter, rungs);
  }
  if (steps.check)
    if (const int code = steps.check(); code >= 0) return code;
  return run_guarded(cli, [&] {
    const Ladder<Args> ladder = select_kernel_backend(options.backend, make);
    if (options.profile) return steps.profile ? steps.profile(ladder) : 0;
    if (options.bench.enabled) return steps.bench ? steps.bench(ladder) : 0;
    if (text.intro) text.intro();
    if (text.trace) text.trace();
    if (options.trace_only) return 0;
    if (steps.report) steps.report(ladder);
    print_sim_time_note(std::cout, options.backend);
    if (text.next) text.next();
    return 0;
  });
}

}  // namespace wb
