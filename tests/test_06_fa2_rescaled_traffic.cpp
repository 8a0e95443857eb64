// Chapter 06's kernels move the bytes their headers state, the causal mask's skipped K/V tiles
// included (suite "profile": the instrumented twin, CTest 06_fa2_rescaled/sim-profile;
// tests/traffic_checks.hpp).
#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "tests/traffic_checks.hpp"

using namespace wb;

TEST_CASE("every rung moves the bytes its header states, on odd shapes" *
          doctest::test_suite("profile")) {
  // Each case without and with the causal mask, and masked again with tiles_visited written.
  // fa2 (fp32, Br 16, Bc 32): one query and one key; two heads with lq < lk, a short last Q
  // tile and K/V tile, and under the mask the first Q tile visiting 2 of the 3 K/V tiles;
  // lq > lk, fully masked rows, Q tiles that visit no K/V tile.
  const test::AttentionTrafficCases fa2{{{1, 1, 1, 1}, {2, 50, 70, 7}, {1, 37, 5, 33}},
                                        {Dtype::fp32},
                                        /*causal=*/true,
                                        /*tiles_br=*/ch06::kKernelRows};
  // fa2_tensor_core (fp16, bf16; Br 64): a short last Q tile of 6 or 2 rows (a partial warp of
  // 16 rows, warps with none); under the mask the first Q tile visits 2 of the 3 K/V tiles,
  // with d = 64 (Bc 64) and d = 128 (Bc 32); lq - lk >= 64, a Q tile that visits no K/V tile.
  const test::AttentionTrafficCases tensor_core{
      {{1, 70, 130, 64}, {1, 80, 9, 64}, {1, 66, 66, 128}},
      {Dtype::fp16, Dtype::bf16},
      /*causal=*/true,
      /*tiles_br=*/ch06::kTensorCoreRows};
  test::check_traffic(ch06::kernel_ladder<Backend::sim>(), fa2, tensor_core);
}
