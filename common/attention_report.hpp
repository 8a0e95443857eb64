// The error tables of the attention chapters' programs (04, 05, 06): each CPU step and each
// rung of the chapter's ladder on the same Q, K, V, against the fp64 reference
// (common/reference_attention.hpp) and against the first row, the previous chapter's step.
// Host code only; the rungs run through run_ladder (common/ladder_run.hpp).
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "common/attention_inputs.hpp"
#include "common/backend.hpp"
#include "common/dtype.hpp"
#include "common/program.hpp"
#include "common/reference_attention.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"
#include "common/rung_buffers.hpp"

namespace wb {

/// One implementation's attention outputs on a report's input, and its time: a table row.
using AttentionRun = RungRun<AttentionOut>;

/// A CPU step's O (and logsumexp), or its P, as a table row holds them.
inline AttentionOut o_output(std::vector<float> o, std::vector<float> lse = {}) {
  return {std::move(o), std::move(lse), {}, {}};
}
inline AttentionOut p_output(std::vector<float> p) {
  return {{}, {}, {}, std::move(p)};
}

/// Runs and times one CPU step.
AttentionRun run_cpu_attention(std::string name, const std::function<AttentionOut()>& step);

/// The rungs of `ladder` that take `dtype` elements: a report's table (or a benchmark) is of
/// one element type, and a rung of another type is not a rung it skipped.
Ladder<AttentionArgs> rungs_taking(const Ladder<AttentionArgs>& ladder, Dtype dtype);

/// Every rung of `ladder` (kernels of `backend`) on Q, K, V of `in` as `dtype` elements, in
/// order (run_ladder): those that take the call are appended to `runs`, the others to
/// `skipped` with the reason their limits give. Nothing runs on the cpu backend.
void run_attention_ladder(Backend backend, const Ladder<AttentionArgs>& ladder,
                          const AttentionInputs& in, AttentionShape shape, float scale, bool causal,
                          Dtype dtype, std::vector<AttentionRun>* runs,
                          std::vector<std::string>* skipped);

/// What a table measures: P with its relative error (chapter 04), or O in units of
/// `o_weight` (chapters 05, 06: O can cancel to ~0, so its error is measured against the size
/// of the terms summed into it, ref::compare_weighted).
struct AttentionMeasure {
  bool p = false;
  std::vector<double> o_weight;  ///< (bh, lq, d), for O
  std::string previous;          ///< what the first row is: "naive", "previous"
};

/// The table: each run's P or O against fp64 and against runs[0], its logsumexp's absolute
/// error where some run has one, non-finite mismatches, the time, and TFLOP/s where some run
/// is on the GPU (attention_flops of `shape`, halved when `causal`).
void print_attention_table(std::ostream& out, const std::vector<AttentionRun>& runs,
                           const ref::Attention& r, const AttentionMeasure& measure,
                           AttentionShape shape, bool causal);

/// The worked example of chapters 05 and 06: one query whose scores are kTraceScores (with
/// scale 1), six keys whose values are the rows of kTraceValues, in R^2.
inline const std::vector<float> kTraceScores = {1.f, 3.f, -2.f, 2.5f, 6.f, 0.f};
inline const std::vector<float> kTraceValues = {1.f,  0.f, 0.f, 1.f,  2.f, 2.f,
                                                -1.f, 0.f, 0.f, -1.f, 4.f, 4.f};

}  // namespace wb
