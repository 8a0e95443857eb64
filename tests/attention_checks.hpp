// What the attention chapters' tests (04, 05, 06) share besides their shapes
// (tests/attention_shapes.hpp): keys masked with -inf scores and their fp64 reference, the
// loop over shapes and score kinds with the fp64 reference, the check that a planted mistake
// fails the bound, and the chain check of a kernel ladder (tests/ladder_checks.hpp) over cases
// of shape, score kind, mask and element type.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
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
#include "tests/lane_checks.hpp"
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

// ------------------------------------------------------------------------------------------
// Masked keys: -inf scores where a chapter has no causal mask (04, 05)
// ------------------------------------------------------------------------------------------

/// Which keys of an input have the score -inf.
enum class KeyMask {
  none,
  /// By head: head h with h % 3 == 0 masks every key, so each of its rows is fully masked
  /// (O = 0, (m, d) = (-inf, 0), logsumexp -inf: the workbook's convention); h % 3 == 1 masks
  /// its first kMaskedPrefix keys, a whole first K/V tile of every kernel and of the CPU tiles
  /// narrower than that, so that the running max is still -inf after a tile (where
  /// e^{m_old - m_new} = e^{-inf + inf} is NaN unless guarded); h % 3 == 2 masks none, so
  /// that a wrong head offset shows.
  by_head,
};

/// More keys than a K/V tile of the FA1 and FA2 kernels (32).
inline constexpr int kMaskedPrefix = 40;

/// KeyMask::by_head masks the keys [0, masked_keys(head, lk)) of head `head`.
inline int masked_keys(int head, int lk) {
  switch (head % 3) {
    case 0:
      return lk;
    case 1:
      return std::min(lk, kMaskedPrefix);
    default:
      return 0;
  }
}

/// Masks keys as KeyMask::by_head says: k_0 = -inf for a masked key and q_0 > 0 in every query
/// row of its head make the score -inf exactly, in every order of the dot product (q_0 k_0 =
/// -inf, every other product is finite) and after a positive scale. q_0 = 0 would give NaN and
/// q_0 < 0 +inf, so q_0 becomes max(|q_0|, 1/2) there (the kinds that set q_0 keep it).
inline void mask_keys(AttentionInputs& in, AttentionShape shape) {
  const std::size_t d = static_cast<std::size_t>(shape.d);
  for (int b = 0; b < shape.bh; ++b) {
    const int masked = masked_keys(b, shape.lk);
    if (masked == 0) continue;
    for (int i = 0; i < shape.lq; ++i) {
      float& q0 = in.q[(std::size_t(b) * shape.lq + i) * d];
      q0 = std::max(std::fabs(q0), 0.5f);
    }
    for (int j = 0; j < masked; ++j) in.k[(std::size_t(b) * shape.lk + j) * d] = -INFINITY;
  }
}

/// The fp64 attention of inputs masked by mask_keys: each head over its unmasked keys alone (a
/// masked key has p = 0 exactly and adds nothing), a head with none left fully masked (O = 0,
/// m = -inf, d = 0, logsumexp -inf, as ref::attention states it). Head by head, because
/// ref::attention of the masked inputs would bound the scores' rounding by their -inf products
/// (score_error = inf), a bound any error passes.
inline ref::Attention masked_reference(const AttentionInputs& in, AttentionShape shape,
                                       float scale, bool want_p) {
  const std::size_t lq = static_cast<std::size_t>(shape.lq);
  const std::size_t lk = static_cast<std::size_t>(shape.lk);
  const std::size_t d = static_cast<std::size_t>(shape.d);
  ref::Attention out;
  out.o.assign(shape.q_elems(), 0.0);
  out.o_weight.assign(shape.q_elems(), 0.0);
  out.m.assign(shape.rows(), -INFINITY);
  out.d.assign(shape.rows(), 0.0);
  out.lse.assign(shape.rows(), -INFINITY);
  if (want_p) out.p.assign(shape.p_elems(), 0.0);
  for (std::size_t b = 0; b < static_cast<std::size_t>(shape.bh); ++b) {
    const std::size_t masked =
        static_cast<std::size_t>(masked_keys(static_cast<int>(b), shape.lk));
    const std::size_t kept = lk - masked;
    if (kept == 0) continue;  // every row of the head fully masked, as initialized
    const auto rows_of = [&](const std::vector<float>& x, std::size_t first, std::size_t count) {
      return std::vector<float>(x.begin() + static_cast<std::ptrdiff_t>(first * d),
                                x.begin() + static_cast<std::ptrdiff_t>((first + count) * d));
    };
    const AttentionInputs head{rows_of(in.q, b * lq, lq), rows_of(in.k, b * lk + masked, kept),
                               rows_of(in.v, b * lk + masked, kept)};
    const ref::Attention r =
        ref::attention(head, {1, shape.lq, static_cast<int>(kept), shape.d}, scale, false, want_p);
    std::copy(r.o.begin(), r.o.end(), out.o.begin() + static_cast<std::ptrdiff_t>(b * lq * d));
    std::copy(r.o_weight.begin(), r.o_weight.end(),
              out.o_weight.begin() + static_cast<std::ptrdiff_t>(b * lq * d));
    for (std::size_t i = 0; i < lq; ++i) {
      out.m[b * lq + i] = r.m[i];
      out.d[b * lq + i] = r.d[i];
      out.lse[b * lq + i] = r.lse[i];
      if (want_p)
        std::copy(r.p.begin() + static_cast<std::ptrdiff_t>(i * kept),
                  r.p.begin() + static_cast<std::ptrdiff_t>((i + 1) * kept),
                  out.p.begin() + static_cast<std::ptrdiff_t>((b * lq + i) * lk + masked));
    }
    out.score_error = std::max(out.score_error, r.score_error);
    out.max_abs_lse = std::max(out.max_abs_lse, r.max_abs_lse);
  }
  return out;
}

/// One input of an attention test: shape, score kind, its drawn scale, Q, K, V and the fp64
/// attention of them.
struct AttentionInput {
  AttentionShape shape;
  ScoreKind kind;
  bool causal;   ///< the reference's mask
  KeyMask mask;  ///< the keys masked with -inf scores (mask_keys)
  float scale;
  AttentionInputs in;
  ref::Attention r;
};

/// `check(input)` for every shape and every score kind (inputs of `seed`, keys masked by
/// `mask`), the case captured for the failure messages; the reference with the causal mask
/// when `causal`, and with P when `want_p`.
template <typename Check>
void for_each_attention_input(const std::vector<AttentionShape>& shapes, std::uint64_t seed,
                              bool causal, KeyMask mask, bool want_p, Check&& check) {
  REQUIRE((mask == KeyMask::none || !causal));  // masked_reference has no causal mask
  for (const AttentionShape& shape : shapes) {
    for (ScoreKind kind : all_score_kinds()) {
      const std::string where = to_string(shape) + ", " + to_string(kind) +
                                (mask == KeyMask::by_head ? ", keys masked by head" : "");
      CAPTURE(where);
      const float scale = drawn_scale(shape, kind, causal);
      AttentionInput input{
          shape, kind, causal, mask, scale, make_attention_inputs(kind, shape, scale, seed), {}};
      if (mask == KeyMask::by_head) {
        mask_keys(input.in, shape);
        input.r = masked_reference(input.in, shape, scale, want_p);
      } else {
        input.r = ref::attention(input.in, shape, scale, causal, want_p);
      }
      check(static_cast<const AttentionInput&>(input));
    }
  }
}

/// The same with no key masked but by the causal mask, if `causal`.
template <typename Check>
void for_each_attention_input(const std::vector<AttentionShape>& shapes, std::uint64_t seed,
                              bool causal, bool want_p, Check&& check) {
  for_each_attention_input(shapes, seed, causal, KeyMask::none, want_p, check);
}

/// A step's final (m, d) per row, against fp64: m is the max of float scores, each within
/// score_error of its exact value, so m is too; d (FA1's l) is a sum of the same terms as the
/// softmax denominator, within softmax_floor of it.
inline void check_row_stats(const std::vector<ch02::MD>& stats, const AttentionInput& a) {
  const MdColumns s = split_md(stats);
  WB_CHECK_WITHIN(compare(s.m, a.r.m), a.r.score_error);
  WB_CHECK_WITHIN_REL(compare(s.d, a.r.d), ref::softmax_floor(a.r.score_error, a.shape.lk));
}

/// The workbook's convention on every fully masked row of `r` (m = -inf): each value of the
/// row in `values` (rows of `width`: O with d, P with lk) is 0 exactly, never NaN, and the
/// row's (m, d) in `stats`, where given, is (-inf, 0).
inline void check_masked_rows(const ref::Attention& r, const std::vector<float>& values, int width,
                              const MdColumns* stats = nullptr) {
  const std::size_t n = static_cast<std::size_t>(width);
  for (std::size_t row = 0; row < r.m.size(); ++row) {
    if (r.m[row] != -INFINITY) continue;
    CAPTURE(row);
    std::size_t nonzero = 0;
    for (std::size_t c = 0; c < n; ++c) nonzero += !(values[row * n + c] == 0.f);
    CHECK_MESSAGE(nonzero == 0, nonzero, " values of a fully masked row are not 0, the first ",
                  values[row * n]);
    if (stats == nullptr) continue;
    CHECK(stats->m[row] == -INFINITY);
    CHECK(stats->d[row] == 0.f);
  }
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
                      KeyMask mask, bool want_p, const std::vector<Tiles>& tiles,
                      Before&& before, Tiled&& tiled) {
  for_each_attention_input(shapes, seed, causal, mask, want_p, [&](const AttentionInput& a) {
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

/// The same with no key masked but by the causal mask, if `causal`.
template <typename Before, typename Tiled>
void check_step_chain(const std::vector<AttentionShape>& shapes, std::uint64_t seed, bool causal,
                      bool want_p, const std::vector<Tiles>& tiles, Before&& before,
                      Tiled&& tiled) {
  check_step_chain(shapes, seed, causal, KeyMask::none, want_p, tiles, before, tiled);
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
  KeyMask mask = KeyMask::none;  ///< keys masked with -inf scores (mask_keys); not with causal
};

/// The kernel shapes of this run: kAttentionKernelShapes, or their race-mode subset.
inline const std::vector<AttentionShape>& attention_kernel_shapes() {
  return small_shapes() ? kAttentionKernelRaceShapes : kAttentionKernelShapes;
}

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

/// Every shape times every score kind in each of `dtypes`, without the causal mask, with keys
/// masked by head (KeyMask::by_head): fully masked rows and masked first tiles.
inline std::vector<AttentionCase> masked_attention_cases(const std::vector<AttentionShape>& shapes,
                                                         const std::vector<Dtype>& dtypes = {
                                                             Dtype::fp32}) {
  std::vector<AttentionCase> cases;
  for (Dtype t : dtypes)
    for (const AttentionShape& s : shapes)
      for (ScoreKind kind : all_score_kinds())
        cases.push_back({s, kind, /*causal=*/false, t, KeyMask::by_head});
  return cases;
}

/// Causal cases that put the diagonal at every offset within every tile: one head of lq query
/// rows against lk = lq + delta keys, delta over `period` consecutive values from -period / 2,
/// so that lk - lq (and lk itself) takes every residue modulo `period`, which a chapter takes as
/// the least common multiple of its rungs' tile sizes (Br, Bc, the rows a warp owns, the keys of
/// a softmax step). A mask applied only where the diagonal crosses a tile, or a tile skip, that
/// is off by one at any alignment meets its residue here. lq > period / 2 keeps lk >= 1 (a
/// smaller lq drops the deltas that would leave no key). Score
/// kinds alternate between randn and arange (s_ij = j: the key just past a row's diagonal would
/// carry the largest weight); the element type is `dtype`, each d of `head_dims` in turn.
inline std::vector<AttentionCase> diagonal_alignment_cases(int lq, int period,
                                                           const std::vector<int>& head_dims,
                                                           Dtype dtype) {
  std::vector<AttentionCase> cases;
  for (int d : head_dims)
    for (int delta = -period / 2; delta < period - period / 2; ++delta) {
      if (lq + delta < 1) continue;
      const ScoreKind kind = (delta & 1) ? ScoreKind::arange : ScoreKind::randn;
      cases.push_back({{1, lq, lq + delta, d}, kind, /*causal=*/true, dtype});
    }
  return cases;
}

/// The element type `rung` runs a case of `dtype` in: that type where it takes it, else fp32
/// where it takes fp32 (a 16-bit value is exact in float, so an fp32 rung runs on the very
/// values a 16-bit rung reads, and the rung after it has a rung before on every case), else
/// none. Not in race mode, where every access is checked and kernels run ten times slower:
/// there an fp32 rung runs its own cases only (the chain between the rungs is the sim run's).
inline std::optional<Dtype> rung_dtype(const Rung<AttentionArgs>& rung, Dtype dtype) {
  if (rung.limits.takes(dtype)) return dtype;
  if (!small_shapes() && rung.limits.takes(Dtype::fp32)) return Dtype::fp32;
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
  float scale;                ///< drawn_scale(shape, kind, causal)
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
        const float scale = drawn_scale(c.shape, c.kind, c.causal);
        const std::string where = to_string(c.shape) + ", " + to_string(c.kind) + ", " +
                                  to_string(c.dtype) + (c.causal ? ", causal" : "") +
                                  (c.mask == KeyMask::by_head ? ", keys masked by head" : "") +
                                  ", scale " + std::to_string(scale);
        const std::string running = rung.name;  // also when the check reruns the rung before
        CAPTURE(running);
        CAPTURE(where);
        REQUIRE((c.mask == KeyMask::none || !c.causal));  // masked_reference has no causal mask
        AttentionInputs in = make_attention_inputs(c.kind, c.shape, scale, seed);
        if (c.mask == KeyMask::by_head) mask_keys(in, c.shape);
        for (std::vector<float>* x : {&in.q, &in.k, &in.v}) *x = round_elements(*x, c.dtype);
        const std::optional<RungOutput> out =
            run_attention_rung(backend, rung, in, c.shape, scale, c.causal, *dtype);
        if (!out) return std::nullopt;
        const bool want_p = (rung.limits.outputs & kWritesP) != 0;
        const ref::Attention r = c.mask == KeyMask::by_head
                                     ? masked_reference(in, c.shape, scale, want_p)
                                     : ref::attention(in, c.shape, scale, c.causal, want_p);
        RungError e = measure({rung, c, scale, in, r, *dtype, *out});
        e.where = where;
        return e;
      });
}

/// Every fp32 rung of `ladder` (kernels of `backend`) that writes O, on every score kind of
/// `shapes` (with the causal mask if `causal`) with V's columns repeating with period 3
/// (v_jc = v_j,c mod 3): O's columns c and c mod 3 are equal bit for bit. Each lane computes
/// its output columns (lane, lane + 32, ...) with its own copy of the row's statistics (the
/// tile's (m~, l~) from ch04::warp_merge, the running max from warp_max, l from warp_sum), so
/// equal columns held by different lanes show where two copies differ in a bit.
inline void check_attention_lanes_agree(Backend backend, const Ladder<AttentionArgs>& ladder,
                                        const std::vector<AttentionShape>& shapes,
                                        std::uint64_t seed, bool causal) {
  for (const Rung<AttentionArgs>& rung : ladder) {
    if (!rung.limits.takes(Dtype::fp32) || (rung.limits.outputs & kWritesO) == 0) continue;
    bool took = false;  // a rung whose limits refused every shape would pass unseen
    for (const AttentionShape& shape : shapes) {
      for (ScoreKind kind : all_score_kinds()) {
        const std::string where = std::string(rung.name) + ", " + to_string(shape) + ", " +
                                  to_string(kind) + (causal ? ", causal" : "");
        CAPTURE(where);
        const float scale = drawn_scale(shape, kind, causal);
        AttentionInputs in = make_attention_inputs(kind, shape, scale, seed);
        const std::size_t d = static_cast<std::size_t>(shape.d);
        std::vector<float> column_class(shape.q_elems());  // c mod 3: O's "input" per element
        for (std::size_t e = 0; e < in.v.size(); ++e) in.v[e] = in.v[e - e % d + e % d % 3];
        for (std::size_t e = 0; e < column_class.size(); ++e) column_class[e] = float(e % d % 3);
        const std::optional<RungOutput> out =
            run_attention_rung(backend, rung, in, shape, scale, causal, Dtype::fp32);
        if (!out) continue;
        took = true;
        const std::optional<BitMismatch> m =
            equal_inputs_equal_outputs(column_class, out->out.o, d);
        CHECK_MESSAGE(!m, "equal columns of V, held by different lanes, give different columns "
                          "of O (row = query row, column = output column): ",
                      m ? m->describe() : "");
      }
    }
    CHECK_MESSAGE(took, rung.name, " took none of the lanes check's shapes");
  }
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
