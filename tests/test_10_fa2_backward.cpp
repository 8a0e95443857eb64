// Chapter 10's CPU steps: the fp64 reference against central finite differences of an
// independent fp64 forward (so it is not merely consistent with itself); D = rowsum(dO * O)
// against its definition; the standard backward (P stored) and the tiled backward (P
// recomputed from logsumexp) against fp64 on their stated floors, the tiled one also under the
// 2x policy against the standard one; the causal tile skip. The kernel rungs are
// test_10_fa2_backward_kernels.cpp; what both share, tests/backward_checks.hpp.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "chapters/10_fa2_backward/backward_floors.hpp"
#include "chapters/10_fa2_backward/fa2_backward.hpp"
#include "common/attention_inputs.hpp"
#include "common/inputs.hpp"
#include "common/reference_attention.hpp"
#include "common/reference_attention_backward.hpp"
#include "tests/backward_checks.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch10;
using namespace wb::test::backward;

namespace {

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
