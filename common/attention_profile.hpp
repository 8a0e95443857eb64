// `chNN --profile` for the attention chapters (04-06): the ladder on one shape, its traffic
// counted per attention row by the simulator (common/ladder_profile.hpp). Included by the
// chapter programs, which link the simulator.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "common/attention_inputs.hpp"
#include "common/ladder_profile.hpp"
#include "common/rung_buffers.hpp"

namespace wb {

/// Every rung of `ladder` (sim kernels) on randn Q, K, V of `shape` in `dtype`.
inline int profile_attention(const Ladder<AttentionArgs>& ladder, AttentionShape shape,
                             std::uint64_t seed, bool causal, Dtype dtype) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.d));
  const AttentionInputs in = make_attention_inputs(ScoreKind::randn, shape, scale, seed);
  AttentionBuffers buffers(Backend::sim, in, shape, scale, causal, dtype, ladder_outputs(ladder));
  sim::label_device_buffer(buffers.q.data(), "q");
  sim::label_device_buffer(buffers.k.data(), "k");
  sim::label_device_buffer(buffers.v.data(), "v");
  sim::label_device_buffer(buffers.o.data(), "o");
  sim::label_device_buffer(buffers.lse.data(), "lse");
  sim::label_device_buffer(buffers.md.data(), "md");
  sim::label_device_buffer(buffers.p.data(), "p");
  return profile_ladder(ladder, buffers.args, shape.rows(), "row",
                        "attention " + to_string(shape) + (causal ? " causal " : " ") +
                            to_string(dtype));
}

}  // namespace wb
