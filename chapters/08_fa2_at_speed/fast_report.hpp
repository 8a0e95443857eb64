// The report of the tensor-core attention ladders (chapters 08 and 11's programs): for fp16 and
// bf16, with and without the mask, one table of the CPU step (chapter 06's tiled FA2 with the
// given tiles) and every rung of the ladder against the fp64 attention of the same rounded
// inputs, O's error in units of chapter 06's w.
#pragma once

#include <cstdint>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "common/attention_inputs.hpp"
#include "common/attention_report.hpp"
#include "common/ladder_run.hpp"
#include "common/reference_attention.hpp"

namespace wb::ch08 {

/// One table: the CPU step with `tiles` and every rung of `ladder` taking `dtype` on Q, K, V of
/// `in` (rounded to `dtype`) against the fp64 attention of those values.
inline void report_tensor_core_table(Backend backend, const Ladder<AttentionArgs>& ladder,
                                     const AttentionInputs& in, AttentionShape shape, bool causal,
                                     Dtype dtype, std::uint64_t seed, TileShape tiles) {
  const float scale = default_scale(shape.d);
  const std::string step = "cpu ch06 FA2, " + std::to_string(tiles.br) + " x " +
                           std::to_string(tiles.bc) + " tiles (previous)";
  const std::vector<AttentionStep> steps = {{step, [&](const AttentionInputs& x) {
                                               ch06::Fa2Result fa2 = ch06::attention_fa2(
                                                   x, shape, {scale, causal, tiles.br, tiles.bc});
                                               return o_output(std::move(fa2.o),
                                                               std::move(fa2.lse));
                                             }}};
  std::vector<std::string> skipped;
  const std::vector<AttentionRun> runs = run_attention_table(
      backend, steps, rungs_taking(ladder, dtype), in, shape, scale, causal, dtype, &skipped);
  std::cout << (causal ? "Causal: " : "") << "O and logsumexp against fp64 on (" << to_string(shape)
            << ") randn, " << to_string(dtype) << ", seed " << seed << ":\n";
  const ref::Attention r = ref::attention(in, shape, scale, causal, false);
  // O in units of chapter 06's w (eq. 8 there); its floor adds 2u for rounding P~ and O.
  const AttentionMeasure measure{false, ch06::tensor_core_weight(r.o_weight, in, shape, dtype),
                                 "previous", 2.0 * ch06::unit_roundoff(dtype)};
  print_attention_table(std::cout, runs, skipped, r, measure, shape, causal);
}

/// The four tables: fp16 and bf16, without and with the mask.
inline void report_tensor_core_errors(Backend backend, const Ladder<AttentionArgs>& ladder,
                                      AttentionShape shape, std::uint64_t seed, TileShape tiles) {
  std::cout << "Q, K, V rounded to the 16-bit type; the CPU step and fp64 run on the same "
               "rounded values.\n  O's error in units of chapter 06's w, eq. (8) there; its floor "
               "adds 2u (u = 2^-11 in fp16, 2^-8 in bf16).\n";
  const AttentionInputs randn =
      make_attention_inputs(ScoreKind::randn, shape, default_scale(shape.d), seed);
  for (Dtype dtype : {Dtype::fp16, Dtype::bf16}) {
    const AttentionInputs in = ch06::round_inputs(randn, dtype);
    for (bool causal : {false, true})
      report_tensor_core_table(backend, ladder, in, shape, causal, dtype, seed, tiles);
  }
}

}  // namespace wb::ch08
