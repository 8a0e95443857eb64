// Chapter 09: what the kernel ladder's rungs share (rungs/1_one_split.cuh to rungs/4_mma_kv.cuh):
// the combine kernel that merges a split rung's partials, the wave the split count fills, the
// traffic formulas (flash_decoding.cpp) and the limits and facts of the records.
#pragma once

#include "chapters/04_fused_qk_softmax/fused_softmax.hpp"
#include "chapters/09_flash_decoding/decode_plan.hpp"
#include "common/backend.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"

namespace wb::ch09 {

/// What several rungs launch on backend B. Of `a`: q (batch, hq, lq, d), k, v (batch, hkv, lk,
/// d) of a.dtype; lengths (batch) ints or nullptr; o of a.dtype and lse float, (batch, hq, lq);
/// the partial buffers of a.splits splits; device pointers of backend B.
template <Backend B>
struct Kernels {
  /// The combine kernel: merges each row's partials into o and lse, eq. (4)
  /// (combine_kernel.cuh); the split rungs launch it after their partials.
  static void combine(const DecodeArgs& a);
  /// Where the streaming kernel's blocks for `shape` and `dtype` run at once: this backend's
  /// device (sim: an H100, common/kernel.cuh's residency, registers not counted). Defined
  /// beside the kernel, rungs/3_stream_kv.cuh.
  static Wave stream_wave(const DecodeShape& shape, Dtype dtype);
};

/// The split count eq. (7) gives for `shape` in `dtype` on backend B's device: the wave of
/// the streaming rung, stream_kv (the other split rungs take the same count).
template <Backend B>
int default_splits(const DecodeShape& shape, Dtype dtype) {
  const Wave w = Kernels<B>::stream_wave(shape, dtype);
  return choose_splits(w.sms, w.blocks_per_sm, base_blocks(shape), shape.lk);
}

/// The entries of a paged cache's block table (ints) one block of a split kernel reads: per
/// K/V tile of 32 keys its range holds, and per key. Every thread that loads a key's row
/// looks its page up itself (eq. 9), so a lookup is a read by each of those threads.
struct TableReads {
  int per_tile = 0, per_key = 0;
};

/// The traffic of a split kernel (flash_decoding.cpp) with `splits` splits (writing partials)
/// or, for splits = 0, of one_split (writing O and logsumexp), per block of up to `block_rows`
/// group rows of a KV head: its Q rows once; K and V once per key of its range it loads
/// (block_keys: its tiles, cut at the causal mask); its rows of O (floats, or the element type)
/// and logsumexp once; the sequence's length (one int) once when a.lengths is given; on a
/// paged cache (a.block_table), `table`'s entries. Reads a.lengths_host.
Traffic split_traffic(const DecodeArgs& a, int splits, int block_rows, TableReads table);

/// The combine kernel: per row, the splits' logsumexps (every lane of its warp reads them, one
/// request each: 4 bytes), each split's O row once, O (element type) and logsumexp written.
Traffic combine_traffic(const DecodeArgs& a);

/// one_split's and split_kv's table reads: every thread looks up each K/V tile once.
inline constexpr TableReads kTileLookups{kBlockThreads, 0};

/// one_split's traffic: split_traffic with one split of 16-row blocks writing O and logsumexp.
inline Traffic one_split_traffic(const DecodeArgs& a) {
  return split_traffic(a, 0, kBlockRows, kTileLookups);
}

/// split_kv's traffic: the split kernel at a.splits splits, then the combine.
Traffic split_kv_traffic(const DecodeArgs& a);

/// stream_kv's traffic: the streaming kernel (blocks of stream_rows group rows) at a.splits
/// splits, a lane looking a key's page up for each 16-byte vector of its K row it loads (and
/// the V vector beside it), then the combine.
Traffic stream_kv_traffic(const DecodeArgs& a);

/// mma_kv's traffic: the tensor-core kernel at a.splits splits (blocks of kMmaRows group rows,
/// each reading its Q rows and its range's keys once, as split_kv's blocks of 16; every thread
/// looks up each 32 keys twice, for K and for V), then the combine.
Traffic mma_kv_traffic(const DecodeArgs& a);

/// The rungs' limits: any head dimension up to 128 (the lanes' output columns), fp32 and the
/// 16-bit types (widened on load), the causal mask, batch x hkv <= 65535 (grid.y).
inline RungLimits decode_limits(unsigned outputs) {
  return attention_limits({Dtype::fp32, Dtype::fp16, Dtype::bf16}, ch04::kMaxHeadDim, {},
                          ch04::kMaxBatchHeads, /*causal=*/true, outputs);
}

/// stream_kv's limits: decode_limits with d a multiple of 8, so that every K and V row starts
/// on a 16-byte boundary (a row is whole 16-byte vectors of fp16 or bf16; of fp32 when d is a
/// multiple of 4, 8 taken for all three types alike).
inline RungLimits stream_limits(unsigned outputs) {
  RungLimits l = decode_limits(outputs);
  for (int d = 8; d <= ch04::kMaxHeadDim; d += 8) l.head_dims.push_back(d);
  return l;
}

/// The facts of a rung that walks a sequence's keys as one range, whatever the split count
/// asked for (one_split).
inline RungFacts one_range_facts() {
  RungFacts f;
  f.one_range = true;
  return f;
}

/// The facts of a rung whose blocks merge states (a key slot's, stream_kv; a warp's, mma_kv)
/// before writing their partial, kStreamBlockMerges merges on a path; with `rounds_p`, P~ is
/// rounded to the 16-bit type for P~ V (tensor cores).
inline RungFacts block_merge_facts(bool rounds_p) {
  RungFacts f;
  f.block_merges = kStreamBlockMerges;
  f.rounds_p = rounds_p;
  return f;
}

/// The ladder's records' shared outputs: a split rung writes its partials and, through the
/// combine, O and the logsumexp.
inline constexpr unsigned kSplitOutputs = kWritesO | kWritesLse | kWritesPartials;

}  // namespace wb::ch09

// The ladder, rungs/1_one_split.cuh to rungs/4_mma_kv.cuh in order: the build lists the files
// as Rungs<B> and kernel_ladder<B>() (a generated header); each file defines its
// Rungs<B>::name() with its kernel's launcher.
#include "chapters/09_flash_decoding/ladder.hpp"
