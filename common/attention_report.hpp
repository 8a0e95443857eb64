// What the attention chapters' programs (04, 05, 06) share: their shape options, and their
// error tables: each CPU step and each rung of the chapter's ladder on the same Q, K, V,
// against the fp64 reference (common/reference_attention.hpp) and against the first row, the
// previous chapter's step. Host code only; the rungs run through run_ladder
// (common/ladder_run.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "common/attention_inputs.hpp"
#include "common/backend.hpp"
#include "common/bench.hpp"
#include "common/cli.hpp"
#include "common/dtype.hpp"
#include "common/program.hpp"
#include "common/reference_attention.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"
#include "common/rung_buffers.hpp"

namespace wb {

/// --bh, --lq, --lk and --d, each defaulting to its value in `gpu` on the cuda backend and in
/// `sim` otherwise (the simulator runs every GPU thread on the CPU: smaller shapes).
struct AttentionShapeOptions {
  AttentionShape gpu, sim;
  int bh = 0, lq = 0, lk = 0, d = 0;  ///< 0: not given

  /// Adds the four options to `cli` (which keeps pointers to them: no copies), defaulting to
  /// `gpu_shape` and `sim_shape`, --bh up to `max_bh` and --d up to `max_d`; `d_note` follows
  /// the default in --d's help.
  AttentionShapeOptions(Cli& cli, AttentionShape gpu_shape, AttentionShape sim_shape, int max_bh,
                        int max_d, const std::string& d_note = "");
  AttentionShapeOptions(const AttentionShapeOptions&) = delete;
  /// The shape on `backend`: what was given, else the default.
  AttentionShape resolve(Backend backend) const;
};

/// The programs' limit on bh x lq x lk, 2^`log2_max` (the fp64 reference, or a baseline, holds
/// that many probabilities: `why`). -1 when `shape` fits, else one line and exit code 2.
int check_probabilities(const Cli& cli, AttentionShape shape, int log2_max, const std::string& why);

/// An attention program's size check for its mode: --profile takes any shape; --bench's Q and
/// K/V at most 2^31 elements each; the report's probabilities as check_probabilities. -1 when
/// the shape fits, else the exit code after one line.
int check_attention_size(const Cli& cli, const ProgramOptions& options, AttentionShape shape,
                         int log2_max, const std::string& why);

/// One implementation's attention outputs on a report's input, and its time: a table row.
using AttentionRun = RungRun<AttentionOut>;

/// A CPU step's O (and logsumexp), or its P, as a table row holds them.
inline AttentionOut o_output(std::vector<float> o, std::vector<float> lse = {}) {
  return {std::move(o), std::move(lse), {}, {}};
}
inline AttentionOut p_output(std::vector<float> p) {
  return {{}, {}, {}, std::move(p)};
}

/// A CPU step of a report: its name in the table, and its outputs on Q, K, V.
struct AttentionStep {
  std::string name;
  std::function<AttentionOut(const AttentionInputs& in)> run;
};

/// The rows of a report table: each of `steps` on `in` (timed), then every rung of `ladder`
/// (kernels of `backend`; none on the cpu backend) on Q, K, V of `in` as `dtype` elements,
/// through run_ladder; `skipped` gets the rungs whose limits refuse the call, with the reason.
std::vector<AttentionRun> run_attention_table(Backend backend,
                                              const std::vector<AttentionStep>& steps,
                                              const Ladder<AttentionArgs>& ladder,
                                              const AttentionInputs& in, AttentionShape shape,
                                              float scale, bool causal, Dtype dtype,
                                              std::vector<std::string>* skipped);

/// What a table measures: P with its relative error (chapter 04), or O in units of
/// `o_weight` (chapters 05, 06: O can cancel to ~0, so its error is measured against the size
/// of the terms summed into it, ref::compare_weighted).
struct AttentionMeasure {
  bool p = false;
  std::vector<double> o_weight;  ///< (bh, lq, d), for O
  std::string previous;          ///< what the first row is: "naive", "previous"
  double rounding = 0.0;         ///< added to O's stated floor: a 16-bit output's rounding
};

/// The table: each run's P or O against fp64 and against runs[0], its logsumexp's absolute
/// error where some run has one, non-finite mismatches, the time, and TFLOP/s where some run
/// is on the GPU (attention_flops of `shape`, halved when `causal`); then the `skipped` rungs
/// and the stated floors of the inputs (common/reference_attention.hpp).
void print_attention_table(std::ostream& out, const std::vector<AttentionRun>& runs,
                           const std::vector<std::string>& skipped, const ref::Attention& r,
                           const AttentionMeasure& measure, AttentionShape shape, bool causal);

/// The report of chapters 04 and 05: for each of `kinds`, a table of `steps` and the rungs of
/// `ladder` on Q, K, V of that kind, fp32, without the mask; P (`p`) or O, against fp64 and
/// against the first step, `previous`.
void report_attention(Backend backend, const Ladder<AttentionArgs>& ladder,
                      const std::vector<AttentionStep>& steps, const std::vector<ScoreKind>& kinds,
                      AttentionShape shape, std::uint64_t seed, bool p,
                      const std::string& previous);

/// `--bench` of an attention chapter (06, 08): every rung of `ladder` (cuda kernels) that takes
/// `dtype` elements, on (bh, lq, lk, d) of randn, with or without the mask, in TFLOP/s
/// (attention_flops). Returns the exit code.
int bench_attention(const std::string& chapter, const Ladder<AttentionArgs>& ladder,
                    const BenchOptions& options, AttentionShape shape, bool causal, Dtype dtype,
                    std::uint64_t seed);

/// The worked example of chapters 05 and 06: one query whose scores are kTraceScores (with
/// scale 1), six keys whose values are the rows of kTraceValues, in R^2.
inline const std::vector<float> kTraceScores = {1.f, 3.f, -2.f, 2.5f, 6.f, 0.f};
inline const std::vector<float> kTraceValues = {1.f,  0.f, 0.f, 1.f,  2.f, 2.f,
                                                -1.f, 0.f, 0.f, -1.f, 4.f, 4.f};

}  // namespace wb
