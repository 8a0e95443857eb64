// Chapter 12: the fp64 reference of the ring and the error floors it is judged by (section
// "Errors" of ring_attention.md): the ring is chapter 09's split-KV with the splits the blocks
// of eq. (3), merged one after another, and its backward chapter 10's sums in another order.
#pragma once

#include <algorithm>
#include <vector>

#include "chapters/09_flash_decoding/decode_reference.hpp"
#include "chapters/10_fa2_backward/backward_floors.hpp"
#include "chapters/12_ring_attention/ring_attention.hpp"
#include "common/reference_attention.hpp"
#include "common/reference_attention_backward.hpp"

namespace wb::ch12 {

/// The partials a row can merge: one per key piece of every rank (2 P with zigzag, else P).
inline int partials_per_row(const RingSpec& s) {
  return s.ranks * static_cast<int>(shard_pieces(s.length, s.ranks, 0, s.layout).size());
}

/// The fp64 attention of the whole sequence (chapter 09's reference with one sequence per
/// head), in global order.
inline ch09::DecodeReference ring_reference(const AttentionInputs& whole, const RingSpec& s) {
  return ch09::decode_reference(whole, DecodeShape{s.bh, 1, 1, s.length, s.length, s.d}, {},
                                {s.scale, s.causal});
}

// [ring_floors]
/// The stated floors of the ring's forward (eq. 7): chapter 09's split floors for
/// partials_per_row partials merged along a chain (every merge but the first, with the
/// identity, rounds): O in units of o_weight, the logsumexp absolute.
struct RingFloors {
  double o;
  double lse;
};

inline RingFloors ring_floors(const ch09::DecodeReference& r, const RingSpec& s) {
  const int splits = partials_per_row(s), depth = std::max(1, splits - 1);
  return {ch09::split_floor(r.score_error, s.length, r.max_abs_partial_lse, depth, splits),
          ch09::split_lse_floor(r.score_error, s.length, r.max_abs_partial_lse, depth, splits)};
}

/// The floors of the ring's backward (eq. 8): chapter 10's, whatever the order of its sums,
/// for a P recomputed from the ring's logsumexp and a D from the ring's O, each within the
/// forward's floors above.
inline ref::BackwardFloors ring_backward_floors(const ref::AttentionGrads& g, const RingFloors& f,
                                                const RingSpec& s) {
  return ref::backward_floors(ref::recomputed_p_error(g.score_error, f.lse),
                              ref::d_from_o_error(f.o, s.d), s.length, s.length, s.d);
}
// [ring_floors]

}  // namespace wb::ch12
