// What the attention chapters' tests (04, 05, 06) share besides their shapes
// (tests/attention_shapes.hpp): the loop over shapes and score kinds with the fp64 reference,
// the check that a planted mistake fails the bound, and the chain check of a kernel ladder
// (tests/ladder_checks.hpp) over cases of shape, score kind, mask and element type.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "chapters/02_online_softmax/online_update.hpp"
#include "common/attention_inputs.hpp"
#include "common/buffer.hpp"
#include "common/dtype.hpp"
#include "common/reference_attention.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"
#include "common/rung_buffers.hpp"
#include "tests/attention_shapes.hpp"
#include "tests/ladder_checks.hpp"
#include "tests/support.hpp"

namespace wb::test {

// ------------------------------------------------------------------------------------------
// CPU steps
// ------------------------------------------------------------------------------------------

/// The m and the d (or l) of each row's (m, d) pair, as two columns to compare with the
/// reference's m and d.
struct MdColumns {
  std::vector<float> m, d;
};
inline MdColumns split_md(const std::vector<ch02::MD>& md) {
  MdColumns s;
  for (const ch02::MD& x : md) {
    s.m.push_back(x.m);
    s.d.push_back(x.d);
  }
  return s;
}
/// The same from a kernel's md buffer: the pairs as consecutive floats (m, d), as MD lays them.
inline MdColumns split_md(const std::vector<float>& pairs) {
  MdColumns s;
  for (std::size_t e = 0; e + 1 < pairs.size(); e += 2) {
    s.m.push_back(pairs[e]);
    s.d.push_back(pairs[e + 1]);
  }
  return s;
}

/// One input of an attention test: shape, score kind, the default scale, Q, K, V and the fp64
/// attention of them.
struct AttentionInput {
  AttentionShape shape;
  ScoreKind kind;
  bool causal;  ///< the reference's mask
  float scale;
  AttentionInputs in;
  ref::Attention r;
};

/// `check(input)` for every shape and every score kind (inputs of `seed`), the case captured
/// for the failure messages; the reference with the causal mask when `causal`, and with P
/// when `want_p`.
template <typename Check>
void for_each_attention_input(const std::vector<AttentionShape>& shapes, std::uint64_t seed,
                              bool causal, bool want_p, Check&& check) {
  for (const AttentionShape& shape : shapes) {
    for (ScoreKind kind : all_score_kinds()) {
      const std::string where = to_string(shape) + ", " + to_string(kind);
      CAPTURE(where);
      const float scale = default_scale(shape.d);
      AttentionInput input{
          shape, kind, causal, scale, make_attention_inputs(kind, shape, scale, seed), {}};
      input.r = ref::attention(input.in, shape, scale, causal, want_p);
      check(static_cast<const AttentionInput&>(input));
    }
  }
}

/// A step's final (m, d) per row, against fp64: m is the max of float scores, each within
/// score_error of its exact value, so m is too; d (FA1's l) is a sum of the same terms as the
/// softmax denominator, within softmax_floor of it.
inline void check_row_stats(const std::vector<ch02::MD>& stats, const AttentionInput& a) {
  const MdColumns s = split_md(stats);
  WB_CHECK_WITHIN(compare(s.m, a.r.m), a.r.score_error);
  WB_CHECK_WITHIN_REL(compare(s.d, a.r.d), ref::softmax_floor(a.r.score_error, a.shape.lk));
}

/// `check(t)` for every tile shape of a CPU step, captured for the failure messages.
template <typename Check>
void for_each_tiles(const std::vector<Tiles>& tiles, Check&& check) {
  for (const Tiles& t : tiles) {
    CAPTURE(t.br);
    CAPTURE(t.bc);
    check(t);
  }
}

/// The error of the step before on one input, and the tolerance policy's floor in the same
/// measure: relative for P, absolute in units of sum_j p_j |v_j| for O (compare_weighted).
struct StepBefore {
  ErrorReport error;
  double floor;
  bool relative;
};

/// The chain rule between CPU steps (DESIGN.md) on every shape and score kind:
/// `before(input)`, the step before's error, is within the floor, and `tiled(input, t)`, this
/// step's error with each tile shape t of `tiles`, within twice it plus the floor. Either may
/// check other outputs of its step itself.
template <typename Before, typename Tiled>
void check_step_chain(const std::vector<AttentionShape>& shapes, std::uint64_t seed, bool causal,
                      bool want_p, const std::vector<Tiles>& tiles, Before&& before,
                      Tiled&& tiled) {
  for_each_attention_input(shapes, seed, causal, want_p, [&](const AttentionInput& a) {
    const StepBefore b = before(a);
    const auto within = [&](const ErrorReport& e, double bound) {
      return b.relative ? e.within_rel(bound) : e.within(bound);
    };
    CHECK_MESSAGE(within(b.error, b.floor), "the step before: error ", b.error.describe(),
                  " exceeds the floor ", b.floor);
    const double bound = chain_bound(b.relative ? b.error.max_rel : b.error.max_abs, b.floor);
    for_each_tiles(tiles, [&](const Tiles& t) {
      const ErrorReport e = tiled(a, t);
      CHECK_MESSAGE(within(e, bound), "error ", e.describe(),
                    " exceeds 2 x the step before's + floor = ", bound);
    });
  });
}

/// A CPU step's O: step(in, shape, scale).
using AttentionStep =
    std::function<std::vector<float>(const AttentionInputs& in, AttentionShape shape, float scale)>;

/// On randn, outliers and arange inputs of `shape` (the kinds where the running max moves),
/// `good`'s O is within output_floor of fp64, in units of sum_j p_j |v_j|, and `planted`'s is
/// not within twice that error plus the floor: the bounds catch the mistake.
inline void check_planted_mistake_fails(AttentionShape shape, std::uint64_t seed,
                                        const AttentionStep& good, const AttentionStep& planted) {
  const float scale = default_scale(shape.d);
  for (ScoreKind kind : {ScoreKind::randn, ScoreKind::outliers, ScoreKind::arange}) {
    const std::string input = to_string(kind);
    CAPTURE(input);
    const AttentionInputs in = make_attention_inputs(kind, shape, scale, seed);
    const ref::Attention r = ref::attention(in, shape, scale, false, false);
    const double floor = ref::output_floor(r.score_error, shape.lk);
    const ErrorReport good_o = ref::compare_weighted(good(in, shape, scale), r.o, r.o_weight);
    const ErrorReport planted_o = ref::compare_weighted(planted(in, shape, scale), r.o, r.o_weight);
    WB_CHECK_WITHIN(good_o, floor);
    CHECK_MESSAGE(!planted_o.within(chain_bound(good_o.max_abs, floor)),
                  "the planted mistake passed: ", planted_o.describe());
  }
}

// ------------------------------------------------------------------------------------------
// Kernel ladders
// ------------------------------------------------------------------------------------------

/// One case of an attention ladder check.
struct AttentionCase {
  AttentionShape shape;
  ScoreKind kind;
  bool causal;
  Dtype dtype;  ///< Q, K, V are rounded to it; the rungs run in it, or in fp32 (rung_dtype)
};

/// Every shape times every score kind, under each of `masks`, in each of `dtypes`.
inline std::vector<AttentionCase> attention_cases(const std::vector<AttentionShape>& shapes,
                                                  const std::vector<bool>& masks = {false},
                                                  const std::vector<Dtype>& dtypes = {
                                                      Dtype::fp32}) {
  std::vector<AttentionCase> cases;
  for (Dtype t : dtypes)
    for (bool causal : masks)
      for (const AttentionShape& s : shapes)
        for (ScoreKind kind : all_score_kinds()) cases.push_back({s, kind, causal, t});
  return cases;
}

/// The element type `rung` runs a case of `dtype` in: that type where it takes it, else fp32
/// where it takes fp32 (a 16-bit value is exact in float, so an fp32 rung runs on the very
/// values a 16-bit rung reads, and the rung after it has a rung before on every case), else
/// none. Not in race mode, where every access is checked and kernels run ten times slower:
/// there an fp32 rung runs its own cases only (the chain between the rungs is the sim run's).
inline std::optional<Dtype> rung_dtype(const Rung<AttentionArgs>& rung, Dtype dtype) {
  if (rung.limits.takes(dtype)) return dtype;
  if (!kRaceMode && rung.limits.takes(Dtype::fp32)) return Dtype::fp32;
  return std::nullopt;
}

/// A rung's outputs on Q, K, V, and the K/V tiles each of its blocks loaded.
struct RungOutput {
  AttentionOut out;
  /// tiles_visited, (bh, Q tiles) ints: room for one block per query row, 0 past its grid.
  std::vector<int> tiles;
};

/// `rung` (a kernel of `backend`) once through run_rung on Q, K, V of `in` as `dtype`
/// elements, or std::nullopt where its limits refuse the call.
inline std::optional<RungOutput> run_attention_rung(Backend backend,
                                                    const Rung<AttentionArgs>& rung,
                                                    const AttentionInputs& in, AttentionShape shape,
                                                    float scale, bool causal, Dtype dtype) {
  AttentionBuffers buffers(backend, in, shape, scale, causal, dtype, rung.limits.outputs);
  DeviceBuffer<int> tiles(backend, std::vector<int>(shape.rows(), 0));
  AttentionArgs args = buffers.args;
  args.tiles_visited = tiles.data();
  if (!why_refused(rung, args).empty()) return std::nullopt;
  run_rung(rung, args);
  return RungOutput{buffers.download(rung.limits.outputs), tiles.download()};
}

/// One rung on one case: what a chapter's measure looks at.
struct AttentionRungRun {
  const Rung<AttentionArgs>& rung;
  const AttentionCase& c;
  float scale;                ///< default_scale(d)
  const AttentionInputs& in;  ///< Q, K, V as the rung read them: rounded to c.dtype
  const ref::Attention& r;    ///< the fp64 attention of `in`
  Dtype dtype;                ///< the rung's element type on this case (rung_dtype)
  const RungOutput& run;
};

/// A chapter's measure of one rung on one case: checks the rung's other outputs (CHECKs of
/// its own) and returns its main error under the tolerance policy.
using RungMeasure = std::function<RungError(const AttentionRungRun& run)>;

/// Every rung of `ladder` (kernels of `backend`) against the CPU step and the rung before, on
/// every case (test::check_ladder, a SUBCASE per rung), Q, K, V of `seed` rounded to the
/// case's type; `measure` gives the error and its bound. A rung whose limits refuse a case
/// is not run on it.
inline void check_attention_ladder(Backend backend, const Ladder<AttentionArgs>& ladder,
                                   const std::vector<AttentionCase>& cases, std::uint64_t seed,
                                   const RungMeasure& measure) {
  check_ladder(
      ladder, cases,
      [&](const Rung<AttentionArgs>& rung, const AttentionCase& c) -> std::optional<RungError> {
        const std::optional<Dtype> dtype = rung_dtype(rung, c.dtype);
        if (!dtype) return std::nullopt;
        // The case alone, the same for every rung: the chain check's key for the rung before.
        const std::string where = to_string(c.shape) + ", " + to_string(c.kind) + ", " +
                                  to_string(c.dtype) + (c.causal ? ", causal" : "");
        const std::string running = rung.name;  // also when the check reruns the rung before
        CAPTURE(running);
        CAPTURE(where);
        const float scale = default_scale(c.shape.d);
        AttentionInputs in = make_attention_inputs(c.kind, c.shape, scale, seed);
        for (std::vector<float>* x : {&in.q, &in.k, &in.v}) *x = round_elements(*x, c.dtype);
        const std::optional<RungOutput> out =
            run_attention_rung(backend, rung, in, c.shape, scale, c.causal, *dtype);
        if (!out) return std::nullopt;
        const ref::Attention r =
            ref::attention(in, c.shape, scale, c.causal, (rung.limits.outputs & kWritesP) != 0);
        RungError e = measure({rung, c, scale, in, r, *dtype, *out});
        e.where = where;
        return e;
      });
}

/// run_rung refuses `shape` of `dtype` elements before anything runs: std::invalid_argument,
/// one line that names the rung and contains `expected` (the limit).
inline void check_rung_refuses(Backend backend, const Rung<AttentionArgs>& rung,
                               AttentionShape shape, Dtype dtype, const std::string& expected) {
  const AttentionInputs zeros{std::vector<float>(shape.q_elems()),
                              std::vector<float>(shape.kv_elems()),
                              std::vector<float>(shape.kv_elems())};
  AttentionBuffers buffers(backend, zeros, shape, 1.f, false, dtype, rung.limits.outputs);
  std::string message;
  try {
    run_rung(rung, buffers.args);
  } catch (const std::invalid_argument& e) {
    message = e.what();
  }
  CHECK_MESSAGE((message.find(rung.name) == 0 && message.find(expected) != std::string::npos),
                "message: ", message);
}

}  // namespace wb::test
