// The rung: one kernel of a chapter's ladder, described once for every consumer.
//
// Each chapter's kernels form a ladder, each rung one idea better than the rung before. A rung
// is its name, the one thing it changes (a line), its limits (the shapes and element types it
// takes, checked before every launch) and its launch, over the arguments of its op:
//   RowArgs         softmax rows             (common/rung_args.hpp)
//   LayerNormArgs   LayerNorm rows, gamma, beta, mean, rstd
//   AttentionArgs   Q, K, V, O, logsumexp, causal, and the chapters' extra outputs
//   DecodeArgs      Q against a KV cache: heads grouped, lengths per sequence, key splits
//   AttentionBackwardArgs  Q, K, V, O, dO, logsumexp in; dQ, dK, dV out (chapter 10)
// Each rung is a file of its own, chapters/NN_name/rungs/N_name.cuh: its kernel, its launcher
// and its record, which it defines for the backend it is compiled for (nvcc: cuda; the host
// compiler against common/sim: sim) with WB_RUNG (at the end of this file):
//
//   WB_RUNG(RowArgs, warp_shuffle, "the reductions go through warp shuffles: 2 barriers instead of 10",
//           row_limits(kAnyCols), &launch_warp_shuffle, &three_passes)
//
// The build lists the files in order as the chapter's Rungs<B> and kernel_ladder<B>() (a
// generated header, common/cmake/WbChapter.cmake), and everything else iterates the ladder: the
// program's report and --bench (common/ladder_run.hpp), `chNN --list` (common/rung_list.hpp),
// the tests' chain check (tests/ladder_checks.hpp), and bench/bench_vs_torch.py, which reads
// `chNN --list --csv -`. Adding a rung is adding a file. docs/rungs.md explains it for a learner.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/dtype.hpp"
#include "common/row_plan.hpp"

namespace wb {

/// The longest row (or lq, lk) a rung may take: the kernels walk a row in int steps of up to a
/// block's 1024 threads, and an index must not pass INT_MAX on its last step.
inline constexpr int kMaxLength = INT_MAX - 1023;
/// A row-wise rung that takes any row length (up to the int columns the launches index).
inline constexpr int kAnyCols = kMaxLength;

/// Bits of AttentionArgs' outputs a rung writes (and so needs).
enum AttentionOutput : unsigned {
  kWritesO = 1u << 0,         ///< o: (bh, lq, d)
  kWritesLse = 1u << 1,       ///< lse: (bh, lq), float
  kWritesMd = 1u << 2,        ///< md: (bh, lq) running (m, d) pairs, float (chapters 04, 05)
  kWritesP = 1u << 3,         ///< p: (bh, lq, lk) probabilities, float (chapter 04)
  kWritesPartials = 1u << 4,  ///< o_partial, lse_partial: the splits' results (chapter 09)
};

/// What a rung takes. A field that does not apply to the rung's op keeps its default.
struct RungLimits {
  std::vector<Dtype> dtypes = {Dtype::fp32};  ///< element types of its inputs and outputs

  // Row-wise ops (softmax, LayerNorm): rows >= 1 and 1 <= cols <= max_cols, and when
  // max_row_bytes > 0, cols x the element's bytes <= max_row_bytes (a row cached on chip).
  int max_cols = 0;
  std::size_t max_row_bytes = 0;

  // Attention: 1 <= lq, lk <= max_length (kMaxLength when 0); bh x lq <= max_rows when > 0;
  // d in head_dims when given, else 1 <= d <= max_head_dim; 1 <= bh <= max_bh; the causal
  // mask only when `causal`; `outputs` the buffers it writes.
  int max_length = 0;
  long long max_rows = 0;
  int max_head_dim = 0;
  std::vector<int> head_dims;
  int max_bh = 0;
  bool causal = false;
  unsigned outputs = 0;
  /// Attention: the softmax scale must be > 0 (a rung that takes the row max over unscaled
  /// scores and folds the scale into exp2, chapter 08's eq. 5: with scale <= 0 it is the min).
  bool positive_scale = false;

  bool takes(Dtype t) const {
    for (Dtype d : dtypes)
      if (d == t) return true;
    return false;
  }
  /// The longest row of `t` it takes (0 for attention rungs).
  int max_cols_of(Dtype t) const {
    if (max_row_bytes == 0) return max_cols;
    const std::size_t fit = max_row_bytes / dtype_bytes(t);
    return fit < static_cast<std::size_t>(max_cols) ? static_cast<int>(fit) : max_cols;
  }
  bool takes_head_dim(int d) const {
    if (head_dims.empty()) return d >= 1 && d <= max_head_dim;
    for (int h : head_dims)
      if (h == d) return true;
    return false;
  }
};

/// The limits of a row-wise rung on fp32 only, or on the given types.
inline RungLimits row_limits(int max_cols, std::vector<Dtype> dtypes = {Dtype::fp32},
                             std::size_t max_row_bytes = 0) {
  RungLimits l;
  l.dtypes = std::move(dtypes);
  l.max_cols = max_cols;
  l.max_row_bytes = max_row_bytes;
  return l;
}

/// The limits of an attention rung.
inline RungLimits attention_limits(std::vector<Dtype> dtypes, int max_head_dim,
                                   std::vector<int> head_dims, int max_bh, bool causal,
                                   unsigned outputs) {
  RungLimits l;
  l.dtypes = std::move(dtypes);
  l.max_head_dim = max_head_dim;
  l.head_dims = std::move(head_dims);
  l.max_bh = max_bh;
  l.causal = causal;
  l.outputs = outputs;
  return l;
}

/// The global-memory traffic a rung's header promises for one call: exact bytes, counted by the
/// simulator's profile mode in the tests (tests/traffic_checks.hpp) and printed by
/// `chNN --profile` next to what was counted.
struct Traffic {
  std::uint64_t loaded = 0;  ///< bytes read from global memory, all launches of the call
  std::uint64_t stored = 0;  ///< bytes written
  std::string formula;       ///< the claim in words, e.g. "x read 3 times, y written once"
};

/// The tiles an attention rung walks: Br query rows by Bc keys.
struct TileShape {
  int br = 0, bc = 0;
};

/// What a rung's consumers need to know of it besides its limits, launch and traffic: the
/// facts its error bound and its checks are derived from, so that no test or program has to
/// recognize a rung by its name. A field that does not apply to the rung's op keeps its
/// default.
struct RungFacts {
  /// Attention: its tiles on head dimension d (the CPU step runs with them in the tests; they
  /// decide which K/V tiles the causal mask skips). nullptr for an untiled rung.
  TileShape (*tiles)(int d) = nullptr;
  /// Attention: P~ is rounded to the 16-bit input type before P~ V (tensor cores): one more
  /// rounding of u per product in its error bound.
  bool rounds_p = false;
  /// Attention: every shared-memory request is conflict-free (its header's claim, held by the
  /// profile suite against the simulator's bank counts).
  bool conflict_free = false;
  /// Decoding (chapter 09): the merges of states inside a block before it writes its partial
  /// (0: a block holds one state per row); they add to the depth of the merge tree.
  int block_merges = 0;
  /// Decoding: the keys of a sequence in one range whatever the split count asked for.
  bool one_range = false;
  /// Backward (chapter 10): reads the P a standard forward stored instead of recomputing it
  /// from the logsumexp: its CPU step and floors are the standard backward's.
  bool reads_stored_p = false;
  /// Its GPU code is sm_90a's (Hopper's wgmma, TMA, setmaxnreg: chapter 11): on the GPU it runs
  /// on compute capability 9.0 alone.
  bool needs_sm90a = false;
  /// Row-wise ops (softmax, LayerNorm): the plan it runs on rows of cols elements of t
  /// (common/row_plan.hpp: threads sharing a row, merge levels, access width, where the row is
  /// kept), `vectors` when the call can take 16-byte vectors. nullptr for the other ops.
  RowPlanFn row_plan = nullptr;
};

/// One rung of a ladder over the arguments `Args` of its op.
template <typename Args>
struct Rung {
  const char* name;    ///< the kernel's name, as the tests, tables and CSVs print it
  const char* change;  ///< the one thing it changes from the rung before
  RungLimits limits;
  void (*launch)(const Args& args);  ///< launches on the ladder's backend
  /// What its header says it moves for `args` (the derivation's traffic formula).
  Traffic (*traffic)(const Args& args) = nullptr;
  RungFacts facts = {};
};

template <typename Args>
using Ladder = std::vector<Rung<Args>>;

/// Why `rung` cannot take `args` (empty when it can): refusal(limits, args), an overload per
/// op in common/rung_args.hpp, found by argument-dependent lookup.
template <typename Args>
std::string why_refused(const Rung<Args>& rung, const Args& args) {
  return refusal(rung.limits, args);
}

/// Checks `args` against the rung's limits, then launches. A refusal throws
/// std::invalid_argument with one line, "<rung>: <why>", before anything runs: the programs
/// print it as their one-line error.
template <typename Args>
void run_rung(const Rung<Args>& rung, const Args& args) {
  if (const std::string why = why_refused(rung, args); !why.empty())
    throw std::invalid_argument(std::string(rung.name) + ": " + why);
  rung.launch(args);
}

/// The rungs of `ladder` that take `dtype` elements: a table or a benchmark of one element
/// type, where a rung of another type is not one it skipped.
template <typename Args>
Ladder<Args> rungs_taking(const Ladder<Args>& ladder, Dtype dtype) {
  Ladder<Args> taking;
  for (const Rung<Args>& r : ladder)
    if (r.limits.takes(dtype)) taking.push_back(r);
  return taking;
}

/// The rung named `name`, or nullptr: the programs' `--rung NAME` and a test that names the
/// rung its check is about. What a rung is or does comes from its record, never its name.
template <typename Args>
const Rung<Args>* find_rung(const Ladder<Args>& ladder, const std::string& name) {
  for (const Rung<Args>& r : ladder)
    if (name == r.name) return &r;
  return nullptr;
}

/// The rung whose record holds the launcher `launch`, or nullptr: a launcher that several rungs
/// share, each with its own template arguments, names the one it serves in its refusals.
template <typename Args>
const Rung<Args>* rung_launching(const Ladder<Args>& ladder, void (*launch)(const Args&)) {
  for (const Rung<Args>& r : ladder)
    if (r.launch == launch) return &r;
  return nullptr;
}

}  // namespace wb

/// Defines the record of rung `name` of a chapter's ladder (the member Rungs<B>::name() its
/// generated ladder.hpp declares) for the backend this file is compiled for: the one declaration
/// in a rung's file that puts it on the ladder. `Args` is the op's arguments, the rest the
/// record's fields after its name, which is `name` spelled as a string (so a record cannot carry
/// another name than its file's):
///
///   WB_RUNG(RowArgs, warp_shuffle, "the reductions go through warp shuffles: ...",
///           row_limits(kAnyCols), &launch_warp_shuffle, &three_passes)
///
/// expands to
///
///   template <>
///   Rung<RowArgs> Rungs<kThisBackend>::warp_shuffle() {
///     return {"warp_shuffle", "the reductions go through warp shuffles: ...",
///             row_limits(kAnyCols), &launch_warp_shuffle, &three_passes};
///   }
#define WB_RUNG(Args, name, ...)                \
  template <>                                   \
  ::wb::Rung<Args> Rungs<kThisBackend>::name() { \
    return {#name, __VA_ARGS__};                \
  }
