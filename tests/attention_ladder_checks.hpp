// The chain check of an attention kernel ladder (tests/ladder_checks.hpp) over cases of shape,
// score kind, drawn scale, mask and element type, shared by chapters 04, 05, 06 and 08: the
// cases (the diagonal at every alignment with the tiles among them), one rung's run, the lanes
// check and the refusals.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/attention_inputs.hpp"
#include "common/buffer.hpp"
#include "common/dtype.hpp"
#include "common/reference_attention.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"
#include "common/rung_buffers.hpp"
#include "tests/attention_checks.hpp"
#include "tests/attention_shapes.hpp"
#include "tests/ladder_checks.hpp"
#include "tests/lane_checks.hpp"
#include "tests/support.hpp"

namespace wb::test {

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

/// Every shape times every score kind, under each of `masks`, in each of `dtypes` (of this run).
inline std::vector<AttentionCase> attention_cases(const std::vector<AttentionShape>& shapes,
                                                  const std::vector<bool>& masks = {false},
                                                  const std::vector<Dtype>& dtypes = {
                                                      Dtype::fp32}) {
  std::vector<AttentionCase> cases;
  for (Dtype t : dtypes_of_this_run(dtypes))
    for (bool causal : masks)
      for (const AttentionShape& s : shapes)
        for (ScoreKind kind : all_score_kinds()) cases.push_back({s, kind, causal, t});
  return cases;
}

/// Every shape times every score kind in each of `dtypes` (of this run), without the causal mask, with keys
/// masked by head (KeyMask::by_head): fully masked rows and masked first tiles.
inline std::vector<AttentionCase> masked_attention_cases(const std::vector<AttentionShape>& shapes,
                                                         const std::vector<Dtype>& dtypes = {
                                                             Dtype::fp32}) {
  std::vector<AttentionCase> cases;
  for (Dtype t : dtypes_of_this_run(dtypes))
    for (const AttentionShape& s : shapes)
      for (ScoreKind kind : all_score_kinds())
        cases.push_back({s, kind, /*causal=*/false, t, KeyMask::by_head});
  return cases;
}

/// The kernel shapes with keys masked by head of this run: kAttentionMaskedKernelShapes, or their
/// race-mode subset.
inline const std::vector<AttentionShape>& masked_attention_kernel_shapes() {
  return small_shapes() ? kAttentionMaskedKernelRaceShapes : kAttentionMaskedKernelShapes;
}

/// The fp32 cases of a kernel ladder without the causal mask: every kernel shape and score kind,
/// and keys masked by head on the masked kernel shapes (fully masked rows, masked first tiles).
inline std::vector<AttentionCase> attention_kernel_cases() {
  std::vector<AttentionCase> cases = attention_cases(attention_kernel_shapes());
  for (const AttentionCase& c : masked_attention_cases(masked_attention_kernel_shapes()))
    cases.push_back(c);
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
  /// The case and its seed, in words: names everything `in` and `r` depend on, so that a
  /// measure may keep what it derives from them for the next rung (detail::CaseCache).
  const std::string& key;
};

/// A case's inputs and their fp64 reference, made once for all the rungs that run it.
struct CaseInputs {
  AttentionInputs in;  ///< Q, K, V of the seed, keys masked, rounded to the case's type
  ref::Attention r;    ///< the fp64 attention of `in`
};

namespace detail {
/// The inputs of the cases of the ladder check that runs now, by key (AttentionRungRun::key).
/// doctest enters a ladder check once per rung (a SUBCASE each), and every rung of a case reads
/// the same Q, K, V and compares with the same reference: made once, as chapter 09's
/// decode_inputs are, instead of once per rung (a third of chapter 08's sim suite, seven rungs,
/// was remaking them). `list` names the check's list of cases; another list starts the cache
/// afresh, so that it holds one list's cases at a time; `generation` counts the lists, for the
/// caches of what measures derive (fa2_rung_error's).
struct CaseCache {
  std::string list;
  std::uint64_t generation = 0;
  std::map<std::string, CaseInputs> inputs;
};
inline CaseCache& case_cache() {
  static CaseCache cache;
  return cache;
}

/// The cache for the list of `cases` of `seed`, emptied if it held another list's.
inline CaseCache& case_cache_for(const std::vector<AttentionCase>& cases, std::uint64_t seed) {
  CaseCache& cache = case_cache();
  std::string list =
      "seed " + std::to_string(seed) + ", " + std::to_string(cases.size()) + " cases";
  for (const AttentionCase& c : cases)
    list += "; " + to_string(c.shape) + " " + to_string(c.kind) + " " + to_string(c.dtype) +
            (c.causal ? " causal" : "") + (c.mask == KeyMask::by_head ? " masked" : "");
  if (cache.list != list) {
    cache.list = std::move(list);
    ++cache.generation;
    cache.inputs.clear();
  }
  return cache;
}
}  // namespace detail

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
  detail::CaseCache& cache = detail::case_cache_for(cases, seed);
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
        // The reference with P for the rungs that write P, each made once (detail::CaseCache).
        const bool want_p = (rung.limits.outputs & kWritesP) != 0;
        const std::string key =
            where + ", seed " + std::to_string(seed) + (want_p ? ", with P" : "");
        auto cached = cache.inputs.find(key);
        if (cached == cache.inputs.end()) {
          CaseInputs x;
          x.in = make_attention_inputs(c.kind, c.shape, scale, seed);
          if (c.mask == KeyMask::by_head) mask_keys(x.in, c.shape);
          for (std::vector<float>* v : {&x.in.q, &x.in.k, &x.in.v})
            *v = round_elements(*v, c.dtype);
          x.r = c.mask == KeyMask::by_head ? masked_reference(x.in, c.shape, scale, want_p)
                                           : ref::attention(x.in, c.shape, scale, c.causal, want_p);
          cached = cache.inputs.emplace(key, std::move(x)).first;
        }
        const AttentionInputs& in = cached->second.in;
        const std::optional<RungOutput> out =
            run_attention_rung(backend, rung, in, c.shape, scale, c.causal, *dtype);
        if (!out) return std::nullopt;
        RungError e = measure({rung, c, scale, in, cached->second.r, *dtype, *out, key});
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
