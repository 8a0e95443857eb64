// Chapter 09's kernels at the edges of float's range (the CPU's laws there:
// test_09_flash_decoding_merge_laws.cpp): the combine kernel takes empty splits as the
// identity exactly, averages an equal pair far out and keeps the merged lse within its
// rounding; every decoding rung on a
// cache whose only visible key scores an extreme value gives that key's V row and its score
// bit for bit, through the in-block merge of the key slots' and warps' states
// (state_merge.cuh) and the combine over the empty splits; a sequence of no key gives
// (-inf, 0).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "chapters/09_flash_decoding/decode_ladder.hpp"
#include "chapters/09_flash_decoding/decode_reference.hpp"
#include "chapters/09_flash_decoding/flash_decoding.hpp"
#include "common/buffer.hpp"
#include "common/half.hpp"
#include "common/rung_buffers.hpp"
#include "tests/decode_edges.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch09;
using namespace wb::test::decode_edges;

namespace {

/// The combine kernel alone on partials written here: `lse` (rows, splits) and `o` (rows,
/// splits, d); an empty split's O row (lse -inf) is NaN, which the kernel must not read.
template <Backend B>
DecodeOut run_combine(const std::vector<float>& lse, std::vector<float> o, int rows, int splits,
                      int d) {
  for (std::size_t i = 0; i < lse.size(); ++i)
    if (lse[i] == -kInf)
      std::fill(o.begin() + std::ptrdiff_t(i * std::size_t(d)),
                o.begin() + std::ptrdiff_t((i + 1) * std::size_t(d)),
                std::numeric_limits<float>::quiet_NaN());
  const DecodeShape shape{1, rows, 1, 1, 1, d};
  DeviceBuffer<float> lse_partial(B, lse), o_partial(B, o);
  DeviceBuffer<float> out_o(B, std::size_t(rows) * d), out_lse(B, std::size_t(rows));
  out_o.poison();
  out_lse.poison();
  const DecodeArgs a{nullptr, nullptr, nullptr, nullptr, nullptr, out_o.data(), out_lse.data(),
                     o_partial.data(), lse_partial.data(), shape, splits, 1.f, false,
                     Dtype::fp32};
  Kernels<B>::combine(a);
  return {out_o.download(), out_lse.download()};
}

// One row per edge lse and split count, its one non-empty split moving with the row, among
// splits that saw no key (lse -inf, O rows of NaN): O and lse come back exactly (m + log 1 on
// the row's (m, d), weight e^0 = 1); and rows whose every split is empty give (-inf, 0).
template <Backend B>
void combine_takes_empty_splits_as_the_identity() {
  const int d = static_cast<int>(kRowO);
  for (int splits : {1, 3, 33, 70}) {  // one lane, several lanes, lanes holding 2 and 3 splits
    CAPTURE(splits);
    std::vector<float> lse, o;
    const int rows = static_cast<int>(kEdgeLse.size()) + 2;
    for (int r = 0; r < rows; ++r) {
      const int at = (r * 7) % splits;
      for (int s = 0; s < splits; ++s) {
        const bool seen = r < static_cast<int>(kEdgeLse.size()) && s == at;
        lse.push_back(seen ? kEdgeLse[std::size_t(r)] : -kInf);
        const std::vector<float> row = edge_o(std::size_t(r + s));
        o.insert(o.end(), row.begin(), row.end());
      }
    }
    const DecodeOut got = run_combine<B>(lse, o, rows, splits, d);
    for (int r = 0; r < rows; ++r) {
      CAPTURE(r);
      if (r >= static_cast<int>(kEdgeLse.size())) {
        CHECK(got.lse[std::size_t(r)] == -kInf);
        for (int c = 0; c < d; ++c) CHECK(got.o[std::size_t(r * d + c)] == 0.f);
        continue;
      }
      const int at = (r * 7) % splits;
      const std::vector<float> want = edge_o(std::size_t(r + at));
      CHECK(same_value_bits(got.lse[std::size_t(r)], kEdgeLse[std::size_t(r)]));
      for (int c = 0; c < d; ++c)
        CHECK(same_value_bits(got.o[std::size_t(r * d + c)], want[std::size_t(c)]));
    }
  }
}

// An equal pair of non-empty splits per row, far out (lse + log 2 rounds to lse there), among
// empty ones: weights taken from the rounded lse would be 1 each and add the two O rows; eq.
// (4)'s weights from the row's (M, l) are e^0 / 2 = 0.5 exactly and give the O row back.
template <Backend B>
void combine_averages_an_equal_pair_far_out() {
  const int d = 4;
  const std::vector<float> far = {1e8f, 1e30f, -1e30f, 3e38f, -3e38f};
  for (int splits : {2, 3, 40}) {  // the pair in one lane or two, empty splits between
    CAPTURE(splits);
    const int rows = static_cast<int>(far.size());
    std::vector<float> lse, o;
    for (int r = 0; r < rows; ++r) {
      for (int s = 0; s < splits; ++s) {
        const bool seen = s == 0 || s == splits - 1;
        lse.push_back(seen ? far[std::size_t(r)] : -kInf);
        for (int c = 0; c < d; ++c) o.push_back(float(c) - 1.5f);
      }
    }
    const DecodeOut got = run_combine<B>(lse, o, rows, splits, d);
    for (int r = 0; r < rows; ++r) {
      CAPTURE(r);
      for (int c = 0; c < d; ++c) CHECK(got.o[std::size_t(r * d + c)] == float(c) - 1.5f);
    }
  }
}

// Rows of several non-empty splits drawn from the edges (neighbouring edges meet): the merged
// lse within the rounding of the lanes' merges of (lse_s, 1): chapter 03's eq. (6) on d,
// 104 u for the exponents plus, per merge on a path (ceil(splits / 32) + 5, combine_depth),
// CUDA's exp (4 u) and a product and a sum (2 u), a relative error of d that is an absolute
// one of log d; then logf's ulp of log d <= log S (2 u log S) and the add to m, u (|m| +
// log S). No NaN in O.
template <Backend B>
void combine_lse_is_within_its_rounding() {
  const int d = 4;
  std::vector<float> lses = kEdgeLse;
  lses.push_back(-kInf);
  for (int splits : {3, 40}) {
    CAPTURE(splits);
    const int rows = 64;
    std::vector<float> lse, o;
    std::uint64_t state = 99;
    for (int r = 0; r < rows; ++r) {
      for (int s = 0; s < splits; ++s) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        lse.push_back(lses[(std::size_t(r) + (state >> 33) % 3) % lses.size()]);
        for (int c = 0; c < d; ++c) o.push_back(kEdgeO[std::size_t(r + s + 3 * c) % kEdgeO.size()]);
      }
    }
    const DecodeOut got = run_combine<B>(lse, o, rows, splits, d);
    for (int r = 0; r < rows; ++r) {
      CAPTURE(r);
      const std::vector<float> row(lse.begin() + std::ptrdiff_t(r * splits),
                                   lse.begin() + std::ptrdiff_t((r + 1) * splits));
      const long double exact = exact_lse(row);
      for (int c = 0; c < d; ++c) CHECK_FALSE(std::isnan(got.o[std::size_t(r * d + c)]));
      if (exact == -kInf) {
        CHECK(got.lse[std::size_t(r)] == -kInf);
        continue;
      }
      const double m = *std::max_element(row.begin(), row.end());
      const double log_s = std::log(double(splits));
      const double d_rel = (104.0 + combine_depth(splits) * (4.0 + 2.0)) * kU;
      const double bound = d_rel + 2 * log_s * kU + (std::fabs(m) + log_s) * kU;
      CHECK(std::isfinite(got.lse[std::size_t(r)]));
      CHECK(std::fabs(static_cast<long double>(got.lse[std::size_t(r)]) - exact) <= bound);
    }
  }
}

// A cache whose sequence 0 has one key (of lk 70: two more K/V tiles) and sequence 1 none;
// query head h of the group scores that key at edge[h] (q = (edge[h], 0, ...), k = (1, 0, ...),
// scale 1: the dot product is exact), V's row is edge O's. Every rung, every split count (the
// other splits empty; in a block, the other key slots' and warps' states empty): O is the V
// row and lse the score, bit for bit (p = e^0 = 1, l = 1); sequence 1's rows (-inf, 0).
template <Backend B>
void one_visible_key_at_an_edge_score_comes_back_exactly() {
  const Ladder<DecodeArgs> ladder = kernel_ladder<B>();
  int runs = 0;
  for (Dtype dtype : {Dtype::fp32, Dtype::bf16}) {  // bf16 for mma_kv (fp16 ends at 65504)
    const int d = dtype == Dtype::fp32 ? 16 : 64;
    const int hq = 8;
    const DecodeShape shape{2, hq, 1, 1, 70, d};
    // Scores at the edges, as the type holds them: bf16 keeps float's range, not its bits,
    // and its largest finite value is 0x7f7f (FLT_MAX rounds to inf).
    const float top = dtype == Dtype::fp32 ? kMax : fp16_detail::bfloat16_to_float(0x7f7fu);
    const auto as_type = [&](float x) {
      if (dtype == Dtype::fp32) return x;
      return std::fabs(x) == kMax ? std::copysign(top, x) : round_to_bf16(x);
    };
    const std::vector<float> scores = {-kMax, -3e38f, -1e30f, -104.f, 88.7f, 1e30f, 3e38f, kMax};
    AttentionInputs in;
    in.q.assign(shape.q_elems(), 0.f);
    in.k.assign(shape.kv_elems(), 0.f);
    in.v.assign(shape.kv_elems(), 0.f);
    std::vector<float> want_lse(shape.rows(), -kInf), want_o(shape.q_elems(), 0.f);
    for (int b = 0; b < 2; ++b) {
      for (int h = 0; h < hq; ++h) {
        const float s = as_type(scores[std::size_t(h)]);
        in.q[std::size_t((b * hq + h) * d)] = s;
        if (b == 0) want_lse[std::size_t(h)] = s;
      }
      in.k[std::size_t(b * shape.lk * d)] = 1.f;
      for (int c = 0; c < d; ++c) {
        const float v = as_type(kEdgeO[std::size_t(c) % kEdgeO.size()]);
        in.v[std::size_t(b * shape.lk * d + c)] = v;
        for (int h = 0; h < hq && b == 0; ++h) want_o[std::size_t(h * d + c)] = v;
      }
    }
    const std::vector<int> lengths = {1, 0};
    for (const Rung<DecodeArgs>& rung : ladder) {
      if (!rung.limits.takes(dtype) || !rung.limits.takes_head_dim(d)) continue;
      // bf16 only for the rungs fp32 cannot run (mma_kv): the others ran in fp32 already.
      if (dtype == Dtype::bf16 && rung.limits.takes(Dtype::fp32)) continue;
      for (int splits : {1, 3}) {
        const std::string where =
            std::string(rung.name) + ", " + to_string(dtype) + ", splits " + std::to_string(splits);
        CAPTURE(where);
        DecodeBuffers buffers(B, in, lengths, shape, splits, 1.f, false, dtype);
        buffers.poison_outputs();
        REQUIRE(why_refused(rung, buffers.args).empty());
        run_rung(rung, buffers.args);
        ++runs;
        const DecodeOut got = buffers.download();
        for (std::size_t row = 0; row < shape.rows(); ++row) {
          CAPTURE(row);
          CHECK(same_value_bits(got.lse[row], want_lse[row]));
          for (int c = 0; c < d; ++c)
            CHECK(same_value_bits(got.o[row * std::size_t(d) + std::size_t(c)],
                                  want_o[row * std::size_t(d) + std::size_t(c)]));
        }
      }
    }
  }
  CHECK(runs == 2 * 4);  // one_split, split_kv and stream_kv in fp32, mma_kv in bf16; 2 split counts
}

}  // namespace

WB_KERNEL_TEST_CASE(
    "at the edges of float's range the combine kernel takes empty splits as the identity exactly",
    combine_takes_empty_splits_as_the_identity)
WB_KERNEL_TEST_CASE("at the edges of float's range the combine kernel's lse is within its rounding",
                    combine_lse_is_within_its_rounding)
WB_KERNEL_TEST_CASE("the combine kernel averages an equal pair of partials far out",
                    combine_averages_an_equal_pair_far_out)
WB_KERNEL_TEST_CASE(
    "a single visible key at an edge score gives its V row and its score on every decoding rung",
    one_visible_key_at_an_edge_score_comes_back_exactly)
