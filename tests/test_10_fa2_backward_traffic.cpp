// Chapter 10's backward moves the bytes its formula states (suite "profile": the instrumented
// twin, CTest 10_fa2_backward/sim-profile; tests/traffic_checks.hpp): the standard baseline's
// lq x lk matrices and its matmuls' re-reads (64-tiles short in every direction); K and V once per
// K/V tile, Q, dO, lse and D once per (K/V tile, Q tile) pair the causal mask leaves, dQ added into
// as often, short last tiles read only up to lk and lq. fa2_backward_mma's shared memory is
// free of bank conflicts.
#include <string>
#include <vector>

#include "chapters/10_fa2_backward/fa2_backward.hpp"
#include "common/inputs.hpp"
#include "common/rung_buffers.hpp"
#include "common/sim/access.hpp"
#include "tests/traffic_checks.hpp"

using namespace wb;

TEST_CASE("the backward rungs move the bytes their formula states, on odd shapes" *
          doctest::test_suite("profile")) {
  // One key; tiles short both ways with lq > lk (fully masked rows); lq < lk, d = 59; the
  // tensor-core rung's d = 64 with tiles of 64 short both ways; the baseline's 64-tiles short
  // in all three directions (T(d) = 2).
  test::check_traffic(ch10::kernel_ladder<Backend::sim>(),
                      test::BackwardTrafficCases{{{1, 1, 1, 8},
                                                  {2, 37, 21, 16},
                                                  {1, 20, 45, 59},
                                                  {1, 70, 90, 64},
                                                  {1, 90, 70, 64},
                                                  {1, 66, 130, 72}},
                                                 {Dtype::fp32, Dtype::fp16},
                                                 /*causal=*/true});
}

TEST_CASE("fa2_backward_mma reads and writes shared memory without a bank conflict" *
          doctest::test_suite("profile")) {
  // Chapter 08's eqs. (2) and (3) for its tiles, and the dS^T tile: a warp's 32-bit stores of
  // dS^T pairs land in chunk (r0 / 8 + h) XOR g, word t (32 banks), its ldmatrix .trans reads of dS
  // 8 swizzled rows per matrix; the lse and D reads are words of 8 rows a lane group shares.
  // Wavefronts = the conflict-free count, for the main kernel (the second of three launches).
  const Rung<AttentionBackwardArgs> mma = ch10::Rungs<Backend::sim>::fa2_backward_mma();
  for (const int d : {64, 128}) {
    const AttentionShape s{1, 130, 150, d};
    CAPTURE(d);
    BackwardInputs in{make_attention_inputs(ScoreKind::randn, s, 1.f, 9),
                      randn(s.q_elems(), 10),
                      std::vector<float>(s.rows(), 0.f),
                      randn(s.q_elems(), 11),
                      {}};
    AttentionBackwardBuffers buffers(Backend::sim, in, s, 1.f, /*causal=*/true, Dtype::fp16);
    const std::vector<sim::LaunchProfile> launches =
        test::profile_launches([&] { run_rung(mma, buffers.args); });
    REQUIRE(launches.size() == 3);
    test::check_no_bank_conflicts(launches[1].counts);
  }
}
