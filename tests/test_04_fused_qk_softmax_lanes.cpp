// Chapter 04's warp reductions (attention_tiles.cuh), shared by the attention kernels of
// chapters 04-06: ch04::warp_merge, warp_max and warp_sum leave the warp's result in every
// lane, and every lane holds the same bits (tests/lane_checks.hpp), on lanes whose inputs
// differ so that two orders of a merge or a sum would round differently. A test kernel calls
// them directly, one result per lane written out; then the fused kernel's P, each computed by
// its lane from that lane's copy of the row's (m, d), against the (m, d) the kernel wrote.
// Simulator only: test files are compiled by the host compiler, and the host's expf is the
// simulator's, so a P recomputed here is the kernel's bit for bit (the kernels that call these
// reductions run on both backends in test_04_fused_qk_softmax.cpp and the chapters after it).
#include <doctest/doctest.h>

// The CUDA dialect (common/sim for the host compiler) before any header that spells
// __host__ __device__, as in a kernel file.
#include "common/kernel.cuh"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/attention_inputs.hpp"
#include "common/buffer.hpp"
#include "common/compare.hpp"
#include "tests/attention_checks.hpp"
#include "tests/attention_ladder_checks.hpp"
#include "tests/lane_checks.hpp"

#include "chapters/04_fused_qk_softmax/attention_tiles.cuh"

using namespace wb;

namespace {

constexpr int kWarps = 8;  // warps are independent: each reduces its own 32 lanes
constexpr int kThreads = kWarps * kWarpSize;
constexpr float kInf = std::numeric_limits<float>::infinity();

// m, d, x: (kThreads), each lane's own pair and value. merged_m, merged_d, max, sum:
// (kThreads), what each lane got back from the reduction.
__global__ void warp_reductions_kernel(const float* m, const float* d, const float* x,
                                       float* merged_m, float* merged_d, float* max, float* sum) {
  const int t = static_cast<int>(threadIdx.x);
  const ch03::MD md = ch04::warp_merge({m[t], d[t]});
  merged_m[t] = md.m;
  merged_d[t] = md.d;
  max[t] = warp_max(x[t]);
  sum[t] = warp_sum(x[t]);
}

struct LaneInputs {
  std::vector<float> m, d, x;
};

// Unequal lanes: maxima spread over +-20 (a factor e^{m_lo - m_hi} per merge, rounded
// differently in two orders where the merge is not commutative bit for bit), lanes holding the
// identity (-inf, 0) (a key past lk, a masked one), denominators from 1 to 32, and values of
// magnitudes 1 to 1e6 with both signs, whose float sum depends on the order of the additions.
LaneInputs lane_inputs(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(-1.f, 1.f);
  LaneInputs in;
  for (int t = 0; t < kThreads; ++t) {
    const bool identity = t % 7 == 3;
    in.m.push_back(identity ? -kInf : 20.f * unit(rng));
    in.d.push_back(identity ? 0.f : 1.f + 31.f * std::fabs(unit(rng)));
    in.x.push_back(unit(rng) * std::pow(10.f, static_cast<float>(t % 7)));
  }
  return in;
}

}  // namespace

TEST_CASE("sim: warp_merge warp_max and warp_sum give every lane the same bits" *
          doctest::test_suite("sim")) {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    CAPTURE(seed);
    const LaneInputs in = lane_inputs(seed);
    DeviceBuffer<float> m(Backend::sim, in.m), d(Backend::sim, in.d), x(Backend::sim, in.x);
    DeviceBuffer<float> merged_m(Backend::sim, kThreads), merged_d(Backend::sim, kThreads),
        max(Backend::sim, kThreads), sum(Backend::sim, kThreads);
    launch<warp_reductions_kernel>(dim3(1), dim3(kThreads), 0, m.data(), d.data(), x.data(),
                                   merged_m.data(), merged_d.data(), max.data(), sum.data());
    const std::vector<float> out_m = merged_m.download(), out_d = merged_d.download(),
                             out_max = max.download(), out_sum = sum.download();
    for (int w = 0; w < kWarps; ++w) {
      CAPTURE(w);
      const std::size_t first = static_cast<std::size_t>(w) * kWarpSize;
      // Every lane's copy, bit for bit: lane 0's is what each of the others must hold.
      for (const std::vector<float>* out : {&out_m, &out_d, &out_max, &out_sum}) {
        const std::vector<float> lanes(out->begin() + static_cast<std::ptrdiff_t>(first),
                                       out->begin() + static_cast<std::ptrdiff_t>(first) +
                                           kWarpSize);
        const std::vector<float> lane0(lanes.size(), lanes[0]);
        const std::optional<test::BitMismatch> mismatch =
            test::first_bit_mismatch(lanes, lane0, lanes.size());
        CHECK_MESSAGE(!mismatch, "the lanes of a warp disagree: ",
                      mismatch ? mismatch->describe() : "", " (column = lane)");
      }
      // And the result itself: a max is one of its operands, exactly; the merged d and the
      // sum within their rounding (block_merge.md, eq. 6: five merges on a lane's path, each
      // an exp of under 1 ulp (2 u) and a product and a sum (2 u), the exponents' roundings
      // telescoping to at most 40 u for maxima within 40 of each other; a sum along a tree of
      // depth 5: gamma_5 times the sum of magnitudes).
      double max_m = -kInf, max_x = -kInf, exact_sum = 0.0, magnitude = 0.0;
      for (int l = 0; l < kWarpSize; ++l) {
        max_m = std::fmax(max_m, in.m[first + l]);
        max_x = std::fmax(max_x, in.x[first + l]);
        exact_sum += in.x[first + l];
        magnitude += std::fabs(in.x[first + l]);
      }
      double exact_d = 0.0;
      for (int l = 0; l < kWarpSize; ++l)
        if (in.m[first + l] != -kInf)
          exact_d += in.d[first + l] * std::exp(in.m[first + l] - max_m);
      CHECK(out_m[first] == max_m);
      CHECK(out_max[first] == max_x);
      CHECK(std::fabs(out_d[first] - exact_d) <= (40 + 5 * 4) * kFloatEps * exact_d);
      const double gamma5 = 5 * kFloatEps / (1 - 5 * kFloatEps);
      CHECK(std::fabs(out_sum[first] - exact_sum) <= gamma5 * magnitude);
    }
  }
}

TEST_CASE("sim: every P of the fused kernel reproduces from the (m, d) it wrote" *
          doctest::test_suite("sim")) {
  // Eq. (6): P = e^{s - m} / d with the row's final (m, d). Each lane normalizes its keys with
  // its own copy of (m, d) from warp_merge, lane 0 writes the row's: a lane whose copy differs
  // in a bit gives its keys other P than the written (m, d) do. Several K tiles, keys masked
  // by head (tests/attention_checks.hpp: rows of (-inf, 0), whose P is 0), every score kind.
  const std::vector<AttentionShape> shapes =
      test::small_shapes() ? std::vector<AttentionShape>{{3, 9, 41, 16}}
                      : std::vector<AttentionShape>{{2, 17, 100, 16}, {3, 9, 65, 64}};
  for (const AttentionShape& shape : shapes) {
    for (ScoreKind kind : all_score_kinds()) {
      for (test::KeyMask mask : {test::KeyMask::none, test::KeyMask::by_head}) {
        const std::string where = to_string(shape) + ", " + to_string(kind) +
                                  (mask == test::KeyMask::by_head ? ", keys masked by head" : "");
        CAPTURE(where);
        const float scale = test::drawn_scale(shape, kind);
        AttentionInputs in = make_attention_inputs(kind, shape, scale, 404);
        if (mask == test::KeyMask::by_head) test::mask_keys(in, shape);
        const std::optional<test::RungOutput> run = test::run_attention_rung(
            Backend::sim, ch04::kernel_ladder<Backend::sim>().front(), in, shape, scale,
            /*causal=*/false, Dtype::fp32);
        REQUIRE(run);
        const std::size_t d = static_cast<std::size_t>(shape.d);
        const std::size_t lq = static_cast<std::size_t>(shape.lq);
        const std::size_t lk = static_cast<std::size_t>(shape.lk);
        std::vector<float> due(shape.p_elems());
        for (std::size_t row = 0; row < shape.rows(); ++row) {
          const float m = run->out.md[2 * row], sum = run->out.md[2 * row + 1];
          const float* q = in.q.data() + row * d;
          const float* k = in.k.data() + row / lq * lk * d;
          for (std::size_t j = 0; j < lk; ++j) {
            const float s = ch04::score(q, k + j * d, shape.d, scale);  // the kernel's own
            due[row * lk + j] = expf(s - ch01::exp_shift(m)) * ch01::inverse_or_zero(sum);
          }
        }
        const std::optional<test::BitMismatch> mismatch =
            test::first_bit_mismatch(run->out.p, due, lk);
        CHECK_MESSAGE(!mismatch, "P does not reproduce from the (m, d) the kernel wrote (row = "
                                 "query row, column = key, the key's lane = column mod 32): ",
                      mismatch ? mismatch->describe() : "");
      }
    }
  }
}
