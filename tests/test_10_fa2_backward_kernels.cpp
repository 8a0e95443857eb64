// Chapter 10's kernel rungs: every rung against fp64, against the CPU step and the rung before
// it (the shared chain check, each gradient a case) in fp32, fp16 and bf16, fully masked rows
// exactly zero, and dQ's atomics bounded between two runs in different block orders.
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "chapters/10_fa2_backward/backward_floors.hpp"
#include "chapters/10_fa2_backward/fa2_backward.hpp"
#include "common/reference_attention_backward.hpp"
#include "common/rung_buffers.hpp"
#include "tests/backward_checks.hpp"
#include "tests/ladder_checks.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch10;
using namespace wb::test::backward;

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
  for (Dtype type : test::dtypes_of_this_run({Dtype::fp32, Dtype::fp16, Dtype::bf16}))
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
