// Chapter 10: the FA2 backward. The fp64 reference against central finite differences of an
// independent fp64 forward (so it is not merely consistent with itself); the standard
// backward (P stored) and the tiled backward (P recomputed from logsumexp) against fp64 on
// their stated floors, the tiled one also under the 2x policy against the standard one; the
// causal tile skip; then every kernel rung against fp64, against the CPU step and the rung
// before it (the shared chain check, each gradient a case), fully masked rows exactly zero,
// and dQ's atomics bounded between two runs.
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "chapters/04_fused_qk_softmax/attention_naive.hpp"
#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "chapters/10_fa2_backward/fa2_backward.hpp"
#include "common/attention_inputs.hpp"
#include "common/compare.hpp"
#include "common/inputs.hpp"
#include "common/reference_attention.hpp"
#include "common/reference_attention_backward.hpp"
#include "common/rung_buffers.hpp"
#include "tests/attention_shapes.hpp"
#include "tests/ladder_checks.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch10;

namespace {

constexpr std::uint64_t kSeed = 1010;

struct Case {
  AttentionShape shape;
  ScoreKind kind;
  bool causal;
  bool fp16_only = false;  ///< the tensor-core rungs run it in fp16 alone (the suite's time)
};

/// One key; d = 59 over tiles of 16 keys and rows with lq != lk; lq > lk causal (the first
/// lq - lk rows fully masked); a long row of 1000 keys; lq = 97 (six Q tiles and a short one);
/// every input kind on a shape that crosses tiles both ways, with and without the mask. And
/// lk = lq + 1 under the mask: key 16 j is seen first by row 16 j - 1, the last row of a Q tile,
/// the boundary of eq. (7)'s first Q tile.
std::vector<Case> cases() {
  std::vector<Case> c = {
      {{1, 1, 1, 8}, ScoreKind::randn, false},       {{2, 17, 33, 59}, ScoreKind::randn, true},
      {{2, 17, 33, 59}, ScoreKind::outliers, false}, {{1, 40, 19, 16}, ScoreKind::randn, true},
      {{1, 2, 1000, 32}, ScoreKind::randn, true},    {{1, 48, 49, 8}, ScoreKind::randn, true}};
  if (test::small_shapes()) return c;
  // Under the mask, lk - lq over every residue modulo 16 (the fp32 rungs' Br = Bc = 16).
  for (int delta = -8; delta < 8; ++delta)
    c.push_back({{1, 17, 17 + delta, 8}, (delta & 1) ? ScoreKind::arange : ScoreKind::randn, true});
  c.push_back({{1, 97, 64, 64}, ScoreKind::randn, true});
  c.push_back({{1, 31, 203, 128}, ScoreKind::randn, false});
  for (ScoreKind kind : all_score_kinds())
    for (bool causal : {false, true}) c.push_back({{2, 33, 47, 24}, kind, causal});
  return c;
}

/// The tensor-core rung's cases (d = 64 or 128): tiles of 64 rows and keys, short last tiles,
/// lq > lk causal (fully masked rows), outliers; lk = lq + 1 = 127 under the mask (key 64 seen
/// first by row 63, the last of a Q tile; the last 16 keys one past lk).
std::vector<Case> tensor_core_cases() {
  std::vector<Case> c = {{{1, 20, 70, 64}, ScoreKind::randn, true},
                         {{1, 70, 20, 128}, ScoreKind::randn, true},
                         {{1, 126, 127, 64}, ScoreKind::randn, true}};
  if (test::small_shapes()) return c;
  // Scores of +-1e4 (large_offset: odd rows' logsumexp near -1e4) over a last K/V tile that
  // lk ends inside: a key past lk left unmasked, its K row zero-filled, would score 0, and
  // e^{0 - lse} = inf there.
  c.push_back({{1, 33, 70, 64}, ScoreKind::large_offset, false});
  c.push_back({{1, 20, 100, 128}, ScoreKind::large_offset, true});
  c.push_back({{2, 33, 130, 64}, ScoreKind::outliers, false});
  c.push_back({{1, 97, 150, 128}, ScoreKind::randn, true});
  c.push_back({{1, 130, 129, 64}, ScoreKind::randn, false});
  // The program's shape: the last keys are seen by a few rows only, with probabilities below
  // fp16's smallest normal, where its rounding is absolute (add_subnormal_terms).
  c.push_back({{2, 300, 257, 64}, ScoreKind::randn, true});
  // Under the mask, lk - lq over every residue modulo 64 (the tensor-core rungs' Br = Bc = 64;
  // their warps' 16 rows or keys divide it) with lq = 65: the diagonal at every offset within
  // a tile, where first_q_tile's skip and the per-warp mask decide which products count.
  // Randn and the ramp (s_ij = j: a key wrongly visible past a row's diagonal outweighs the
  // rest) in turn.
  for (int delta = -32; delta < 32; ++delta)
    c.push_back({{1, 65, 65 + delta, 64}, (delta & 1) ? ScoreKind::arange : ScoreKind::randn,
                 true, /*fp16_only=*/true});
  return c;
}

/// The softmax scale of a case, drawn from it (test::drawn_scale): most cases run at a scale
/// other than 1 / sqrt(d), so that a backward that folds the default where the caller's
/// scale belongs fails.
float scale_of(const Case& c) {
  return test::drawn_scale(c.shape, c.kind, c.causal);
}

std::string describe(const Case& c) {
  const AttentionShape& s = c.shape;
  return "bh " + std::to_string(s.bh) + ", lq " + std::to_string(s.lq) + ", lk " +
         std::to_string(s.lk) + ", d " + std::to_string(s.d) + ", " + to_string(c.kind) +
         (c.causal ? ", causal" : "") + ", scale " + std::to_string(scale_of(c));
}

/// The case's inputs: Q, K, V of its kind, dO randn, and the forward's O and logsumexp from
/// chapter 06's CPU FA2 (float): what a training step hands the backward; in fp32 also the P
/// a standard forward stores (chapter 04's naive attention: the standard rung's input). For a
/// 16-bit type, Q, K, V, dO and O rounded to it: the values its kernels read, on which the CPU
/// step and the fp64 reference run too.
BackwardInputs backward_inputs(const Case& c, Dtype type = Dtype::fp32) {
  const float scale = scale_of(c);
  BackwardInputs in;
  in.qkv = ch06::round_inputs(make_attention_inputs(c.kind, c.shape, scale, kSeed), type);
  in.d_o = round_elements(randn(c.shape.q_elems(), kSeed + 1), type);
  const ch06::Fa2Result fwd = ch06::attention_fa2(in.qkv, c.shape, {scale, c.causal, 16, 32});
  in.o = round_elements(fwd.o, type);
  in.lse = fwd.lse;
  if (type == Dtype::fp32) in.p = ch04::attention_naive(in.qkv, c.shape, scale, c.causal).p;
  return in;
}

struct Errors {
  ErrorReport dq, dk, dv;
};

Errors errors(const std::vector<float>& dq, const std::vector<float>& dk,
              const std::vector<float>& dv, const ref::AttentionGrads& r) {
  return {ref::compare_weighted(dq, r.dq, r.dq_weight),
          ref::compare_weighted(dk, r.dk, r.dk_weight),
          ref::compare_weighted(dv, r.dv, r.dv_weight)};
}

void check_within(const Errors& e, const ref::BackwardFloors& f) {
  WB_CHECK_WITHIN(e.dq, f.dq);
  WB_CHECK_WITHIN(e.dk, f.dk);
  WB_CHECK_WITHIN(e.dv, f.dv);
}

/// The standard backward's floors: P from a safe softmax (softmax_floor), D as an lk-term sum
/// of P dP, whose terms sum to B_i (sum_j P_ij A_ij = sum_c |dO_ic| o_weight_ic).
ref::BackwardFloors standard_floors(const ref::AttentionGrads& r, AttentionShape s) {
  const double p_error = ref::softmax_floor(r.score_error, s.lk);
  return ref::backward_floors(p_error, p_error + kFloatEps * (s.lk + 1.0), s.lq, s.lk, s.d);
}

// ---- an independent fp64 forward for the finite differences --------------------------------

/// L = sum_ic dO_ic O_ic of attention on double inputs, written out again on purpose (plain
/// softmax over the visible keys, the mask restated): the gradient of L is what the reference
/// claims to compute.
double loss(const std::vector<double>& q, const std::vector<double>& k,
            const std::vector<double>& v, const std::vector<float>& d_o, AttentionShape s,
            double scale, bool causal) {
  double total = 0.0;
  for (int b = 0; b < s.bh; ++b)
    for (int i = 0; i < s.lq; ++i) {
      std::vector<double> w(s.lk, 0.0);
      double m = -INFINITY;
      for (int j = 0; j < s.lk; ++j) {
        if (causal && j > i + (s.lk - s.lq)) continue;
        double dot = 0.0;
        for (int t = 0; t < s.d; ++t)
          dot +=
              q[(std::size_t(b) * s.lq + i) * s.d + t] * k[(std::size_t(b) * s.lk + j) * s.d + t];
        w[j] = scale * dot;
        m = std::max(m, w[j]);
      }
      if (m == -INFINITY) continue;  // no visible key: O_i = 0
      double z = 0.0;
      for (int j = 0; j < s.lk; ++j)
        if (!(causal && j > i + (s.lk - s.lq))) z += std::exp(w[j] - m);
      for (int j = 0; j < s.lk; ++j) {
        if (causal && j > i + (s.lk - s.lq)) continue;
        const double p = std::exp(w[j] - m) / z;
        for (int t = 0; t < s.d; ++t)
          total += double(d_o[(std::size_t(b) * s.lq + i) * s.d + t]) * p *
                   v[(std::size_t(b) * s.lk + j) * s.d + t];
      }
    }
  return total;
}

}  // namespace

TEST_CASE("the fp64 backward reference equals finite differences of an fp64 forward" *
          doctest::test_suite("cpu")) {
  // lq < lk, lq > lk with the mask (a fully masked row), and one row.
  for (const Case& c :
       {Case{{2, 3, 4, 5}, ScoreKind::randn, false}, Case{{1, 5, 3, 4}, ScoreKind::randn, true},
        Case{{1, 1, 6, 3}, ScoreKind::outliers, false}}) {
    CAPTURE(describe(c));
    const AttentionShape s = c.shape;
    const float scale = scale_of(c);
    const AttentionInputs in = make_attention_inputs(c.kind, s, scale, kSeed);
    const std::vector<float> d_o = randn(s.q_elems(), kSeed + 1);
    const ref::AttentionGrads r = ref::attention_backward(in, d_o, s, scale, c.causal);
    std::vector<double> q(in.q.begin(), in.q.end()), k(in.k.begin(), in.k.end()),
        v(in.v.begin(), in.v.end());
    // Central differences at steps h and h/2, combined by Richardson extrapolation: the h^2
    // terms cancel, leaving O(h^4) ~ 1e-12 and the rounding of L (~1e-16 / h): 1e-8 relative
    // to the gradient's size is far below any mistake (a wrong term is O(1) of it).
    const auto derivative = [&](std::vector<double>& x, std::size_t e) {
      const auto central = [&](double h) {
        const double x0 = x[e];
        x[e] = x0 + h;
        const double up = loss(q, k, v, d_o, s, scale, c.causal);
        x[e] = x0 - h;
        const double down = loss(q, k, v, d_o, s, scale, c.causal);
        x[e] = x0;
        return (up - down) / (2.0 * h);
      };
      constexpr double kStep = 1e-3;
      return (4.0 * central(kStep / 2) - central(kStep)) / 3.0;
    };
    const auto check = [&](std::vector<double>& x, const std::vector<double>& grad,
                           const std::vector<double>& weight, const char* name) {
      for (std::size_t e = 0; e < x.size(); ++e) {
        CAPTURE(name);
        CAPTURE(e);
        const double fd = derivative(x, e);
        CHECK(std::fabs(fd - grad[e]) <= 1e-8 * (1.0 + weight[e]));
      }
    };
    check(q, r.dq, r.dq_weight, "dQ");
    check(k, r.dk, r.dk_weight, "dK");
    check(v, r.dv, r.dv_weight, "dV");
  }
}

TEST_CASE("D = rowsum(dO * O) equals rowsum(P * dP), eq. (3), in fp64" *
          doctest::test_suite("cpu")) {
  const AttentionShape s{2, 7, 9, 6};
  const float scale = default_scale(s.d);
  const AttentionInputs in = make_attention_inputs(ScoreKind::outliers, s, scale, kSeed);
  const std::vector<float> d_o = randn(s.q_elems(), kSeed + 1);
  const ref::AttentionGrads r = ref::attention_backward(in, d_o, s, scale, true);
  const ref::Attention fwd = ref::attention(in, s, scale, true);
  for (std::size_t row = 0; row < s.rows(); ++row) {
    const std::size_t b = row / s.lq;
    double sum = 0.0, size = 0.0;
    for (int j = 0; j < s.lk; ++j) {
      double dp = 0.0;
      for (int t = 0; t < s.d; ++t)
        dp += double(d_o[row * s.d + t]) * double(in.v[(b * s.lk + j) * s.d + t]);
      sum += fwd.p[row * s.lk + j] * dp;
      size += fwd.p[row * s.lk + j] * std::fabs(dp);
    }
    CAPTURE(row);
    CHECK(std::fabs(sum - r.d_row[row]) <= 1e-12 * (1.0 + size));  // two fp64 orders of a sum
  }
}

TEST_CASE("the standard and the tiled backward equal fp64, the tiled within 2x the standard" *
          doctest::test_suite("cpu")) {
  for (const Case& c : cases()) {
    CAPTURE(describe(c));
    const AttentionShape s = c.shape;
    const float scale = scale_of(c);
    const BackwardInputs in = backward_inputs(c);
    const ref::AttentionGrads r = ref::attention_backward(in.qkv, in.d_o, s, scale, c.causal);
    const BackwardOut standard = attention_backward_standard(in.qkv, in.d_o, s, scale, c.causal);
    const Errors e_std = errors(standard.dq, standard.dk, standard.dv, r);
    check_within(e_std, standard_floors(r, s));
    for (int br : {1, 16, 64})
      for (int bc : {1, 16, 37}) {
        CAPTURE(br);
        CAPTURE(bc);
        const BackwardResult t =
            attention_backward_fa2(in.qkv, in.o, in.lse, in.d_o, s, {scale, c.causal, br, bc});
        const Errors e = errors(t.grads.dq, t.grads.dk, t.grads.dv, r);
        const ref::BackwardFloors f = stated_floors(r, s, Dtype::fp32);
        check_within(e, f);
        // The 2x policy against the previous step (DESIGN.md), its floor the step's own.
        WB_CHECK_WITHIN(e.dq, 2 * e_std.dq.max_abs + f.dq);
        WB_CHECK_WITHIN(e.dk, 2 * e_std.dk.max_abs + f.dk);
        WB_CHECK_WITHIN(e.dv, 2 * e_std.dv.max_abs + f.dv);
      }
  }
}

TEST_CASE("the causal tiled backward visits exactly the tile pairs that hold a visible key" *
          doctest::test_suite("cpu")) {
  for (AttentionShape s : {AttentionShape{2, 50, 50, 8}, AttentionShape{1, 20, 70, 8},
                           AttentionShape{1, 70, 20, 8}, AttentionShape{1, 1, 33, 8}}) {
    CAPTURE(s.lq);
    CAPTURE(s.lk);
    for (int br : {1, 16, 7})
      for (int bc : {16, 5}) {
        long expected = 0;  // brute force over every pair, the mask restated
        for (int j0 = 0; j0 < s.lk; j0 += bc)
          for (int i0 = 0; i0 < s.lq; i0 += br) {
            bool any = false;
            for (int i = i0; i < std::min(i0 + br, s.lq); ++i) any = any || j0 <= i + (s.lk - s.lq);
            expected += any;
          }
        const BackwardInputs in = backward_inputs({s, ScoreKind::randn, true});
        const BackwardResult t =
            attention_backward_fa2(in.qkv, in.o, in.lse, in.d_o, s, {1.f, true, br, bc});
        CHECK(t.tiles_visited == expected * s.bh);
      }
  }
}

namespace {

/// One case of the chain check: a case in an element type, and the gradient it measures.
struct GradCase {
  Case c;
  Dtype type;
  int grad;  ///< 0: dQ, 1: dK, 2: dV
};

/// A case in one type: its inputs, the fp64 reference, the CPU steps' errors and floors.
struct Prepared {
  BackwardInputs in;
  ref::AttentionGrads r;
  Errors tiled, standard;  ///< chapter 10's tiled step (kernel tiles) and the standard one
  ref::BackwardFloors tiled_floors, standard_floors;
};

const Prepared& prepared(const Case& c, Dtype type, const std::string& key) {
  static std::map<std::string, Prepared> cache;  // every rung's SUBCASE reads the same
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  Prepared p;
  const AttentionShape s = c.shape;
  const float scale = scale_of(c);
  p.in = backward_inputs(c, type);
  p.r = ref::attention_backward(p.in.qkv, p.in.d_o, s, scale, c.causal);
  REQUIRE_FALSE(test::has_nan(p.r.dq));
  REQUIRE_FALSE(test::has_nan(p.r.dk));
  REQUIRE_FALSE(test::has_nan(p.r.dv));
  add_subnormal_terms(p.r, p.in.qkv, p.in.d_o, s, scale, type);
  const BackwardResult tiled = attention_backward_fa2(
      p.in.qkv, p.in.o, p.in.lse, p.in.d_o, s, {scale, c.causal, kKernelRows, kKernelKeys});
  p.tiled = errors(tiled.grads.dq, tiled.grads.dk, tiled.grads.dv, p.r);
  p.tiled_floors = stated_floors(p.r, s, type);
  const BackwardOut g = attention_backward_standard(p.in.qkv, p.in.d_o, s, scale, c.causal);
  p.standard = errors(g.dq, g.dk, g.dv, p.r);
  p.standard_floors = standard_floors(p.r, s);
  return cache.emplace(key, std::move(p)).first->second;
}

/// Every rung on every case of its types, each gradient a case of the shared chain check
/// (tests/ladder_checks.hpp): against its CPU step (same rounded inputs) under the 2x policy,
/// against the rung before it that takes the case under the same policy, and against fp64 on
/// its floor; fully masked rows' dQ exactly 0; and two runs: dK and dV bit for bit (each
/// written once by one block), dQ within the reordering of its atomic sum over the K/V tiles
/// (2 gamma_tiles of its weight, and for a 16-bit dQ one rounding either way). The simulator
/// runs the second with its blocks in reverse order, so that dQ's terms meet in another order
/// there too.
template <Backend B>
void rungs_equal_fp64_and_the_cpu_step() {
  const Ladder<AttentionBackwardArgs> ladder = kernel_ladder<B>();
  std::vector<GradCase> grad_cases;
  for (Dtype type : {Dtype::fp32, Dtype::fp16, Dtype::bf16})
    for (const Case& c : type == Dtype::fp32 ? cases() : tensor_core_cases()) {
      if (c.fp16_only && type != Dtype::fp16) continue;  // the mask is the same in bf16
      for (int grad = 0; grad < 3; ++grad) grad_cases.push_back({c, type, grad});
    }
  // A rung's errors on a case, from its first gradient's run (a rung's SUBCASE runs it once).
  std::map<std::string, Errors> ran;
  static std::set<std::string> rungs_done, reordered;  // across the SUBCASEs' entries
  test::check_ladder(
      ladder, grad_cases,
      [&](const Rung<AttentionBackwardArgs>& rung,
          const GradCase& gc) -> std::optional<test::RungError> {
        if (!rung.limits.takes(gc.type)) return std::nullopt;
        const Case& c = gc.c;
        const AttentionShape s = c.shape;
        const std::string key = describe(c) + ", " + to_string(gc.type);
        CAPTURE(key);
        const Prepared& p = prepared(c, gc.type, key);
        const ref::BackwardFloors& f = rung.facts.reads_stored_p ? p.standard_floors : p.tiled_floors;
        const std::string run_key = std::string(rung.name) + ": " + key;
        if (ran.count(run_key) == 0) {
          AttentionBackwardBuffers buffers(B, p.in, s, scale_of(c), c.causal, gc.type);
          if (!rung.limits.takes_head_dim(s.d)) {  // the tensor-core rungs: d = 64 or 128
            CHECK(!why_refused(rung, buffers.args).empty());
            return std::nullopt;
          }
          // Any other refusal would skip the case unseen.
          REQUIRE(why_refused(rung, buffers.args).empty());
          run_rung(rung, buffers.args);
          const BackwardOut first = buffers.download();
          for (std::size_t row = 0; row < s.rows(); ++row)
            if (p.r.lse[row] == -INFINITY)
              for (int col = 0; col < s.d; ++col) CHECK(first.dq[row * s.d + col] == 0.f);
          {  // Again, the blocks in reverse order on the simulator: dQ's sums in another order.
            const test::ReversedBlocks reversed(B);
            buffers.poison_outputs();
            run_rung(rung, buffers.args);
          }
          const BackwardOut second = buffers.download();
          CHECK(second.dk == first.dk);
          CHECK(second.dv == first.dv);
          if (second.dq != first.dq) reordered.insert(rung.name);
          // dQ's terms: one per K/V tile of the rung, 16 keys for fp32 and 64 for the 16-bit
          // rungs (the untiled standard backward counted as the fp32 rung).
          const int keys = rung.facts.tiles ? rung.facts.tiles(s.d).bc : kKernelKeys;
          const int tiles = (s.lk + keys - 1) / keys;
          const double reorder = 2.0 * tiles * kFloatEps / (1.0 - tiles * kFloatEps);
          std::vector<double> first_dq(first.dq.begin(), first.dq.end());
          // In units of dq_weight the terms' magnitudes sum to at most 1 + f.dq (the weight,
          // and the error each computed term already carries).
          WB_CHECK_WITHIN(ref::compare_weighted(second.dq, first_dq, p.r.dq_weight),
                          reorder * (1.0 + f.dq) + 2 * ch06::unit_roundoff(gc.type) * (1.0 + f.dq));
          ran[run_key] = errors(first.dq, first.dk, first.dv, p.r);
        }
        const Errors& e = ran.at(run_key);
        // A rung that reads the stored P: its CPU step and floor are the standard backward's.
        const Errors& cpu = rung.facts.reads_stored_p ? p.standard : p.tiled;
        const ErrorReport& got = gc.grad == 0 ? e.dq : gc.grad == 1 ? e.dk : e.dv;
        const ErrorReport& step = gc.grad == 0 ? cpu.dq : gc.grad == 1 ? cpu.dk : cpu.dv;
        const double floor = gc.grad == 0 ? f.dq : gc.grad == 1 ? f.dk : f.dv;
        rungs_done.insert(rung.name);
        // The floor itself is the rung's own bound against fp64 (check_within before the chain
        // check shared it): no measured error moves it.
        return test::RungError{got, /*relative=*/false, step.max_abs, floor, floor,
                               key + (gc.grad == 0 ? ", dQ" : gc.grad == 1 ? ", dK" : ", dV")};
      });
  // Once every rung has run (the last SUBCASE's entry): the reordered runs did move dQ's bits
  // somewhere, so the bound above was put to the test.
  if (B == Backend::sim && rungs_done.size() == ladder.size()) CHECK(!reordered.empty());
}

}  // namespace

WB_KERNEL_TEST_CASE("every backward rung equals fp64 and the CPU step, odd shapes, masked rows",
                    rungs_equal_fp64_and_the_cpu_step)
