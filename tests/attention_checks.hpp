// What the attention chapters' CPU tests (04, 05, 06) share besides their shapes
// (tests/attention_shapes.hpp): keys masked with -inf scores and their fp64 reference, the
// loop over shapes and score kinds with the fp64 reference, the chain rule between CPU steps,
// and the check that a planted mistake fails the bound. Their kernel ladders:
// tests/attention_ladder_checks.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "chapters/02_online_softmax/online_update.hpp"
#include "common/attention_inputs.hpp"
#include "common/compare.hpp"
#include "common/dtype.hpp"
#include "common/reference_attention.hpp"
#include "tests/attention_shapes.hpp"
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
  // Every row fully masked to start with: the reference over no keys at all.
  ref::Attention out = ref::attention(in, {shape.bh, shape.lq, 0, shape.d}, scale, /*causal=*/false,
                                      /*want_p=*/false);
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

}  // namespace wb::test
