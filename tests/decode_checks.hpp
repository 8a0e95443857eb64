// What chapter 09's test files share: the seed, a decoding case and its description, its drawn
// softmax scale and inputs, the convention on unseen rows, and the split counts to try.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "chapters/09_flash_decoding/decode_ladder.hpp"
#include "chapters/09_flash_decoding/decode_reference.hpp"
#include "chapters/09_flash_decoding/flash_decoding.hpp"
#include "common/attention_inputs.hpp"
#include "tests/attention_shapes.hpp"
#include "tests/support.hpp"

namespace wb::test::decode {

using namespace wb::ch09;

inline constexpr std::uint64_t kSeed = 909;

/// A decoding problem: the shape, the lengths (empty: all lk), the mask.
struct Case {
  DecodeShape shape{};
  std::vector<int> lengths;
  bool causal = false;
};

inline std::string describe(const Case& c, const char* kind) {
  std::string s = to_string(c.shape) + (c.causal ? ", causal" : "") + ", " + kind + ", lengths";
  if (c.lengths.empty()) return s + " all";
  for (int len : c.lengths) s += " " + std::to_string(len);
  return s;
}

/// The softmax scale of a case: test::drawn_scale of its query rows against its keys, so that
/// most cases run at a scale other than 1 / sqrt(d).
inline float scale_of(const DecodeShape& s, ScoreKind kind) {
  return test::drawn_scale({s.batch, s.hq * s.lq, s.hkv * s.lk, s.d}, kind);
}

/// Q, K, V of `kind` for the shape: chapter 04's seeded adversarial inputs, laid out as
/// batch x (hq lq) query rows and batch x (hkv lk) keys, for the scale scale_of(s, kind).
inline AttentionInputs inputs_of(const DecodeShape& s, ScoreKind kind, std::uint64_t seed) {
  return make_attention_inputs(kind, {s.batch, s.hq * s.lq, s.hkv * s.lk, s.d}, scale_of(s, kind),
                               seed);
}

/// Every fully masked row (no visible key: a sequence of length 0, or rows before the
/// diagonal) gives O = 0 exactly and logsumexp = -inf: the workbook's convention.
inline void check_unseen_rows(const DecodeReference& r, const DecodeShape& s, const DecodeResult& out) {
  for (std::size_t row = 0; row < s.rows(); ++row) {
    if (r.lse[row] != -INFINITY) continue;
    CAPTURE(row);
    CHECK(out.lse[row] == -INFINITY);
    for (int c = 0; c < s.d; ++c) CHECK(out.o[row * s.d + c] == 0.f);
  }
}

/// The split counts to try on `lk` keys: all from 1 to more splits than tiles and keys for
/// short caches, a spread for long ones.
inline std::vector<int> split_counts(int lk) {
  std::vector<int> counts;
  if (lk <= 40) {
    for (int s = 1; s <= lk + 3; ++s) counts.push_back(s);
  } else {
    counts = {1, 2, 3, 7, (lk + kTileKeys - 1) / kTileKeys, (lk + kTileKeys - 1) / kTileKeys + 5};
  }
  return counts;
}

/// A case of `shape` with the given lengths (empty: every sequence lk long) and mask.
inline Case make_case(DecodeShape shape, std::vector<int> lengths, bool causal) {
  Case c;
  c.shape = shape;
  c.lengths = std::move(lengths);
  c.causal = causal;
  return c;
}

}  // namespace wb::test::decode
