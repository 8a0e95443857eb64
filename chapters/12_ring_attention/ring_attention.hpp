// Chapter 12: ring attention. The sequence split across P ranks, the K/V blocks passed around a
// ring, each block's partial (O, logsumexp) merged into the running result by chapter 09's
// monoid; the causal mask balanced by the split; the backward with dK and dV travelling with
// their block. Here on the CPU, the P ranks simulated in one process; over torch.distributed in
// python/flash_workbook/ring.py.
//
// chunks: L positions in `parts` chunks, the first L mod parts one longer             eq. (1)
// layouts: contiguous (rank r: chunk r of P), zigzag (chunks r and 2P-1-r of 2P),
//          striped (positions r, r + P, r + 2P, ...)                                 eq. (2)
// a piece of positions b, b + sigma, ..., against a piece b', b' + sigma, ...: query i
//   sees key j iff b' + j sigma <= b + i sigma iff j <= i + delta,
//   delta = floor((b - b') / sigma): chapter 06's bottom-right mask on lq + delta keys  eq. (3)
// ring step t: rank r holds the K/V block of rank (r - t) mod P                      eq. (4)
// merge of a block's partial: chapter 09's eq. (2), (lse, O) <- (lse, O) . (lse_b, O_b) eq. (5)
// backward: P = e^{S - lse} with the merged lse makes each block's dQ, dK, dV terms exact
//   parts of chapter 10's sums; dK_s, dV_s ride with K_s, V_s and reach rank s after P hops
//                                                                                    eq. (6)
// See ring_attention.md for the derivation.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "chapters/09_flash_decoding/lse_merge.hpp"
#include "chapters/10_fa2_backward/fa2_backward.hpp"
#include "common/attention_inputs.hpp"
#include "common/backend.hpp"
#include "common/buffer.hpp"

namespace wb::ch12 {

/// The ring's largest size the tests and the program take (the distributed version has none).
inline constexpr int kMaxRanks = 64;

// ------------------------------------------------------------------------------------------
// The split: chunks, layouts, pieces
// ------------------------------------------------------------------------------------------

// [chunks]
/// Where chunk c of `length` positions cut into `parts` chunks begins, eq. (1): the first
/// length mod parts chunks are one position longer, so chunk sizes differ by at most one.
inline int chunk_begin(int length, int parts, int c) {
  const int base = length / parts, extra = length % parts;
  return c * base + std::min(c, extra);
}

inline int chunk_length(int length, int parts, int c) {
  return chunk_begin(length, parts, c + 1) - chunk_begin(length, parts, c);
}
// [chunks]

/// How the sequence's positions are dealt to the ranks, eq. (2).
enum class Layout {
  contiguous,  ///< rank r holds chunk r of P: the causal mask leaves rank 0 almost idle
  zigzag,      ///< rank r holds chunks r and 2P - 1 - r of 2P: one early, one late
  striped,     ///< rank r holds positions r, r + P, r + 2P, ...
};

inline const char* to_string(Layout layout) {
  switch (layout) {
    case Layout::contiguous: return "contiguous";
    case Layout::zigzag: return "zigzag";
    case Layout::striped: return "striped";
  }
  return "?";
}

inline const std::vector<Layout>& all_layouts() {
  static const std::vector<Layout> layouts{Layout::contiguous, Layout::zigzag, Layout::striped};
  return layouts;
}

// [piece]
/// A run of a rank's positions in its local order: begin, begin + stride, ... (count of them).
/// A chunk is a piece of stride 1; a striped shard is one piece of stride P.
struct Piece {
  int begin;
  int count;
  int stride;
};
// [piece]

// [layouts]
/// Rank r's pieces in its local order, eq. (2): its shard's rows are the pieces' positions one
/// piece after another.
inline std::vector<Piece> shard_pieces(int length, int ranks, int rank, Layout layout) {
  switch (layout) {
    case Layout::contiguous:
      return {{chunk_begin(length, ranks, rank), chunk_length(length, ranks, rank), 1}};
    case Layout::zigzag: {
      const int late = 2 * ranks - 1 - rank;
      return {{chunk_begin(length, 2 * ranks, rank), chunk_length(length, 2 * ranks, rank), 1},
              {chunk_begin(length, 2 * ranks, late), chunk_length(length, 2 * ranks, late), 1}};
    }
    case Layout::striped:
      return {{rank, length > rank ? (length - rank + ranks - 1) / ranks : 0, ranks}};
  }
  throw std::invalid_argument("unknown layout");
}
// [layouts]

/// The global position of every row of rank r's shard, in local order.
inline std::vector<int> shard_positions(int length, int ranks, int rank, Layout layout) {
  std::vector<int> positions;
  for (const Piece& p : shard_pieces(length, ranks, rank, layout))
    for (int i = 0; i < p.count; ++i) positions.push_back(p.begin + i * p.stride);
  return positions;
}

/// Where each piece of a shard starts among the shard's rows.
inline std::vector<int> piece_offsets(const std::vector<Piece>& pieces) {
  std::vector<int> offsets(pieces.size() + 1, 0);
  for (std::size_t p = 0; p < pieces.size(); ++p) offsets[p + 1] = offsets[p] + pieces[p].count;
  return offsets;
}

// ------------------------------------------------------------------------------------------
// The mask between two pieces: chapter 06's, on a prefix of the keys
// ------------------------------------------------------------------------------------------

// [block_mask]
/// What query piece `q` sees of key piece `kv` (same stride), eq. (3).
struct BlockMask {
  enum Kind { full, causal, none } kind;
  int keys;  ///< the keys a call of chapter 06 takes: all of kv (full), a prefix (causal), 0
};

inline int floor_div(int a, int b) {
  return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

inline BlockMask block_mask(const Piece& q, const Piece& kv, bool causal) {
  if (q.count == 0 || kv.count == 0) return {BlockMask::none, 0};
  if (!causal) return {BlockMask::full, kv.count};
  // Query i sees key j iff j <= i + delta (eq. 3).
  const int delta = floor_div(q.begin - kv.begin, q.stride);
  if (delta >= kv.count - 1) return {BlockMask::full, kv.count};  // row 0 sees every key
  if (q.count - 1 + delta < 0) return {BlockMask::none, 0};      // the last row sees none
  // Chapter 06's mask on lk keys is j <= i + (lk - lq): lk = lq + delta keys give eq. (3),
  // provided the shard holds that many (every layout of eq. 2 does: a diagonal chunk pair
  // has delta = 0 and equal lengths; striped has delta = 0 or -1 against a shard no shorter).
  const int keys = q.count + delta;
  if (keys > kv.count)
    throw std::logic_error("block_mask: pieces that no layout of eq. (2) makes");
  return {BlockMask::causal, keys};
}
// [block_mask]

/// Whether a query at global position p_q sees a key at p_k, stated directly: the tests' check
/// of eq. (3).
inline bool sees(int p_q, int p_k, bool causal) {
  return !causal || p_k <= p_q;
}

/// The (query, key) pairs a block of `rows` queries against `m.keys` keys computes: all of
/// them for a full block, the causal triangle (row i: i + keys - rows + 1 keys) for a causal
/// one.
inline long visible_pairs(int rows, const BlockMask& m) {
  if (m.kind == BlockMask::none) return 0;
  if (m.kind == BlockMask::full) return long(rows) * m.keys;
  long pairs = 0;
  for (int i = 0; i < rows; ++i) pairs += std::max(0, std::min(m.keys, i + m.keys - rows + 1));
  return pairs;
}

// ------------------------------------------------------------------------------------------
// Shards
// ------------------------------------------------------------------------------------------

/// The ring's problem: bh heads of a sequence of `length` positions, head dimension d, split
/// over `ranks` ranks by `layout`; the attention's scale and mask; chapter 06's and 10's
/// tiles for each block.
struct RingSpec {
  int bh;
  int length;
  int d;
  int ranks;
  Layout layout;
  float scale;
  bool causal;
  int br = ch06::kKernelRows;
  int bc = ch06::kKernelKeys;
};

/// Rows `positions` of x (bh, length, d), for each head: a shard (bh, positions, d).
inline std::vector<float> gather_rows(const std::vector<float>& x, int bh, int length, int d,
                                      const std::vector<int>& positions) {
  std::vector<float> out(std::size_t(bh) * positions.size() * d);
  for (int b = 0; b < bh; ++b)
    for (std::size_t i = 0; i < positions.size(); ++i)
      std::copy_n(x.begin() + std::ptrdiff_t((std::size_t(b) * length + positions[i]) * d), d,
                  out.begin() + std::ptrdiff_t((b * positions.size() + i) * d));
  return out;
}

/// Each rank's rows of x (bh, length, width): `width` = d for Q, K, V, O; 1 for the lse.
inline std::vector<std::vector<float>> shard(const std::vector<float>& x, const RingSpec& s,
                                             int width) {
  std::vector<std::vector<float>> shards;
  for (int r = 0; r < s.ranks; ++r)
    shards.push_back(
        gather_rows(x, s.bh, s.length, width, shard_positions(s.length, s.ranks, r, s.layout)));
  return shards;
}

/// The shards put back in global order: (bh, length, width).
inline std::vector<float> unshard(const std::vector<std::vector<float>>& shards, const RingSpec& s,
                                  int width) {
  std::vector<float> x(std::size_t(s.bh) * s.length * width);
  for (int r = 0; r < s.ranks; ++r) {
    const std::vector<int> pos = shard_positions(s.length, s.ranks, r, s.layout);
    for (int b = 0; b < s.bh; ++b)
      for (std::size_t i = 0; i < pos.size(); ++i)
        std::copy_n(shards[std::size_t(r)].begin() + std::ptrdiff_t((b * pos.size() + i) * width),
                    width, x.begin() + std::ptrdiff_t((std::size_t(b) * s.length + pos[i]) * width));
  }
  return x;
}

/// Rank r's Q, K and V: its rows of each.
inline std::vector<AttentionInputs> shard_inputs(const AttentionInputs& in, const RingSpec& s) {
  const auto q = shard(in.q, s, s.d), k = shard(in.k, s, s.d), v = shard(in.v, s, s.d);
  std::vector<AttentionInputs> out;
  for (int r = 0; r < s.ranks; ++r)
    out.push_back({q[std::size_t(r)], k[std::size_t(r)], v[std::size_t(r)]});
  return out;
}

/// Rows [row0, row0 + rows) of a shard (bh, n, width), for each head: (bh, rows, width).
inline std::vector<float> slice_rows(const std::vector<float>& x, int bh, int n, int width, int row0,
                                     int rows) {
  std::vector<float> out(std::size_t(bh) * rows * width);
  for (int b = 0; b < bh; ++b)
    std::copy_n(x.begin() + std::ptrdiff_t((std::size_t(b) * n + row0) * width),
                std::size_t(rows) * width,
                out.begin() + std::ptrdiff_t(std::size_t(b) * rows * width));
  return out;
}

/// x's rows [row0, row0 + rows) += y (bh, rows, width).
inline void add_rows(std::vector<float>& x, int bh, int n, int width, int row0, int rows,
                     const std::vector<float>& y) {
  for (int b = 0; b < bh; ++b)
    for (std::size_t e = 0; e < std::size_t(rows) * width; ++e)
      x[(std::size_t(b) * n + row0) * width + e] += y[std::size_t(b) * rows * width + e];
}

/// x's rows [row0, row0 + rows) = y (bh, rows, width).
inline void put_rows(std::vector<float>& x, int bh, int n, int width, int row0, int rows,
                     const std::vector<float>& y) {
  for (int b = 0; b < bh; ++b)
    std::copy_n(y.begin() + std::ptrdiff_t(std::size_t(b) * rows * width), std::size_t(rows) * width,
                x.begin() + std::ptrdiff_t((std::size_t(b) * n + row0) * width));
}

// ------------------------------------------------------------------------------------------
// The merge of a ring step
// ------------------------------------------------------------------------------------------

// [merge_step]
/// A block's partial merged into the running result of the same rows, eq. (5): each row's
/// (lse, O) <- merge((lse, O), (lse_b, O_b)) by chapter 09's lse_merge. A row the block's keys
/// do not reach (lse_b = -inf, O_b = 0) keeps its bits; a row no block reached yet holds the
/// identity (-inf, 0) and takes the block's exactly. o, o_blk: (rows, d); lse, lse_blk: (rows).
inline void merge_step(float* o, float* lse, const float* o_blk, const float* lse_blk, int rows,
                       int d) {
  for (int i = 0; i < rows; ++i) {
    const ch09::LseMerge w = ch09::lse_merge(lse[i], lse_blk[i]);  // ch09 eq. (2)
    for (int c = 0; c < d; ++c) {
      float& o_ic = o[std::size_t(i) * d + c];
      o_ic = w.w_a * o_ic + w.w_b * o_blk[std::size_t(i) * d + c];
    }
    lse[i] = w.lse;
  }
}
// [merge_step]

/// The same merge as a kernel (ring_merge.cuh): one warp per row.
struct RingMergeArgs {
  float* o;             ///< (rows, d), the running O, merged into in place
  float* lse;           ///< (rows), the running logsumexp
  const float* o_blk;   ///< (rows, d), the block's partial O
  const float* lse_blk; ///< (rows), the block's logsumexp
  int rows;
  int d;
};

/// The global bytes the merge kernel moves: O and O_b read and O written, d floats a row
/// each; lse and lse_b read and lse written, a float a row each.
struct MergeTraffic {
  std::uint64_t loaded;
  std::uint64_t stored;
};

inline MergeTraffic merge_traffic(int rows, int d) {
  const std::uint64_t row_bytes = sizeof(float) * std::uint64_t(d), lse_bytes = sizeof(float);
  return {std::uint64_t(rows) * (2 * row_bytes + 2 * lse_bytes),
          std::uint64_t(rows) * (row_bytes + lse_bytes)};
}

template <Backend B>
struct Kernels {
  static void merge_ring_step(const RingMergeArgs& a);
};

/// merge_step on `backend`: the loop above for cpu, the kernel on sim or cuda (its buffers
/// uploaded and the result downloaded).
inline void merge_on(Backend backend, std::vector<float>& o, std::vector<float>& lse,
                     const std::vector<float>& o_blk, const std::vector<float>& lse_blk, int d) {
  const int rows = static_cast<int>(lse.size());
  if (backend == Backend::cpu) {
    merge_step(o.data(), lse.data(), o_blk.data(), lse_blk.data(), rows, d);
    return;
  }
  DeviceBuffer<float> o_dev(backend, o), lse_dev(backend, lse), o_blk_dev(backend, o_blk),
      lse_blk_dev(backend, lse_blk);
  with_kernel_backend(backend, [&](auto b) {
    Kernels<decltype(b)::value>::merge_ring_step(
        {o_dev.data(), lse_dev.data(), o_blk_dev.data(), lse_blk_dev.data(), rows, d});
  });
  o = o_dev.download();
  lse = lse_dev.download();
}

// ------------------------------------------------------------------------------------------
// CPU step: the forward ring
// ------------------------------------------------------------------------------------------

/// One block of the ring: at `step`, `rank` computed its query piece `q_piece` against key
/// piece `kv_piece` of the K/V block of `source`, under `mask`.
struct BlockRecord {
  int step;
  int rank;
  int source;
  int q_piece;
  int kv_piece;
  BlockMask mask;
  long pairs;  ///< visible (query, key) pairs, over all heads
  long tiles;  ///< chapter 06's K/V tiles visited (its br x bc tiles), over all heads
};

struct RingForward {
  std::vector<std::vector<float>> o;    ///< per rank: (bh, n_r, d)
  std::vector<std::vector<float>> lse;  ///< per rank: (bh, n_r)
  std::vector<BlockRecord> blocks;      ///< every block computed or skipped, in order
};

/// One block of a ring step, eq. (3): its record and, unless its mask is none, the query
/// piece's rows and the key piece's visible prefix, and where they sit in their shards.
struct Block {
  BlockRecord record;
  AttentionInputs inputs;  ///< q (bh, rows, d); k, v (bh, keys, d); empty for a mask of none
  AttentionShape shape;    ///< {bh, rows, keys, d}
  int q_row0, n_q;         ///< the piece's first row in rank r's shard, and the shard's rows
  int k_row0, n_k;         ///< the same in the K/V block's shard
};

/// Calls f(block) for every pair of rank r's query pieces and the key pieces of the K/V block
/// of rank `src` it holds at step t, in order.
template <typename F>
void for_each_block(const std::vector<AttentionInputs>& shards, const RingSpec& s, int t, int r,
                    int src, F&& f) {
  const std::vector<Piece> qp = shard_pieces(s.length, s.ranks, r, s.layout);
  const std::vector<Piece> kp = shard_pieces(s.length, s.ranks, src, s.layout);
  const std::vector<int> q_off = piece_offsets(qp), k_off = piece_offsets(kp);
  const AttentionInputs& mine = shards[std::size_t(r)];
  const AttentionInputs& theirs = shards[std::size_t(src)];
  for (std::size_t a = 0; a < qp.size(); ++a)
    for (std::size_t b = 0; b < kp.size(); ++b) {
      const BlockMask m = block_mask(qp[a], kp[b], s.causal);  // eq. (3)
      const int rows = qp[a].count;
      Block blk{{t, r, src, int(a), int(b), m, long(s.bh) * visible_pairs(rows, m), 0},
                {},
                {s.bh, rows, m.keys, s.d},
                q_off[a],
                q_off.back(),
                k_off[b],
                k_off.back()};
      if (m.kind != BlockMask::none)
        blk.inputs = {slice_rows(mine.q, s.bh, blk.n_q, s.d, blk.q_row0, rows),
                      slice_rows(theirs.k, s.bh, blk.n_k, s.d, blk.k_row0, m.keys),
                      slice_rows(theirs.v, s.bh, blk.n_k, s.d, blk.k_row0, m.keys)};
      f(blk);
    }
}

/// The order in which each rank receives the K/V blocks: arrival[r][t] is the source of rank
/// r's t-th block. The ring's own order is eq. (4).
inline std::vector<std::vector<int>> ring_order(int ranks) {
  std::vector<std::vector<int>> order(std::size_t(ranks), std::vector<int>(std::size_t(ranks), 0));
  for (int r = 0; r < ranks; ++r)
    for (int t = 0; t < ranks; ++t) order[std::size_t(r)][std::size_t(t)] = (r - t + ranks) % ranks;
  return order;
}

inline void check_spec(const RingSpec& s) {
  if (s.ranks < 1 || s.ranks > kMaxRanks)
    throw std::invalid_argument("ring: " + std::to_string(s.ranks) + " ranks; it takes 1 to " +
                                std::to_string(kMaxRanks));
  if (s.bh < 1 || s.length < 1 || s.d < 1)
    throw std::invalid_argument("ring: bh, length and d must be positive");
}

// [ring_forward]
/// The forward ring, P ranks in one process: each rank starts from the identity and merges the
/// partial of every block it receives (in `arrival` order; eq. 4 by default), each block
/// chapter 06's FA2 on the pieces' rows with the mask of eq. (3), merged on `merge_backend`
/// (cpu: merge_step; sim, cuda: the merge kernel). shards: each rank's Q, K, V (shard_inputs).
/// `steps` < P stops the ring early: the running results after that many steps (the trace's).
inline RingForward ring_forward(const std::vector<AttentionInputs>& shards, const RingSpec& s,
                                std::vector<std::vector<int>> arrival = {},
                                Backend merge_backend = Backend::cpu, int steps = kMaxRanks) {
  check_spec(s);
  if (arrival.empty()) arrival = ring_order(s.ranks);
  RingForward out;
  for (int r = 0; r < s.ranks; ++r) {
    const int n = static_cast<int>(shard_positions(s.length, s.ranks, r, s.layout).size());
    out.o.emplace_back(std::size_t(s.bh) * n * s.d, 0.f);          // the identity: O = 0,
    out.lse.emplace_back(std::size_t(s.bh) * n, -INFINITY);         // lse = -inf
  }
  for (int t = 0; t < std::min(steps, s.ranks); ++t)
    for (int r = 0; r < s.ranks; ++r)
      for_each_block(shards, s, t, r, arrival[std::size_t(r)][std::size_t(t)], [&](Block& blk) {
        if (blk.record.mask.kind != BlockMask::none) {
          const ch06::Fa2Result part = ch06::attention_fa2(
              blk.inputs, blk.shape, {s.scale, blk.record.mask.kind == BlockMask::causal, s.br, s.bc});
          blk.record.tiles = part.tiles_visited;
          // eq. (5): the piece's running rows, merged with the block's partial.
          const int rows = blk.shape.lq;
          std::vector<float>& o = out.o[std::size_t(r)];
          std::vector<float>& lse = out.lse[std::size_t(r)];
          std::vector<float> o_run = slice_rows(o, s.bh, blk.n_q, s.d, blk.q_row0, rows);
          std::vector<float> lse_run = slice_rows(lse, s.bh, blk.n_q, 1, blk.q_row0, rows);
          merge_on(merge_backend, o_run, lse_run, part.o, part.lse, s.d);
          put_rows(o, s.bh, blk.n_q, s.d, blk.q_row0, rows, o_run);
          put_rows(lse, s.bh, blk.n_q, 1, blk.q_row0, rows, lse_run);
        }
        out.blocks.push_back(blk.record);
      });
  return out;
}
// [ring_forward]

// ------------------------------------------------------------------------------------------
// CPU step: the backward ring
// ------------------------------------------------------------------------------------------

struct RingBackward {
  std::vector<std::vector<float>> dq, dk, dv;  ///< per rank, its shard's rows
  /// path[s]: the ranks that held block s's dK, dV accumulators, step by step, and last the
  /// rank they arrived at (its owner, s, after P hops).
  std::vector<std::vector<int>> path;
  std::vector<BlockRecord> blocks;
};

// [ring_backward]
/// The backward ring, eq. (6): each rank keeps its Q, O, logsumexp (the merged ones of the
/// forward), dO and a dQ accumulator; the K/V blocks travel the ring as in the forward, each with
/// a dK, dV accumulator. At every step a rank adds, for each piece pair, chapter 10's tiled
/// backward of the block (P recomputed from the merged lse, D from the merged O) into its dQ
/// and into the travelling dK, dV; then every block moves on to rank r + 1. After P steps
/// each block, with its dK and dV, is back at its owner.
inline RingBackward ring_backward(const std::vector<AttentionInputs>& shards,
                                  const std::vector<std::vector<float>>& o,
                                  const std::vector<std::vector<float>>& lse,
                                  const std::vector<std::vector<float>>& d_o, const RingSpec& s) {
  check_spec(s);
  const auto n_of = [&](int r) {
    return static_cast<int>(shard_positions(s.length, s.ranks, r, s.layout).size());
  };
  RingBackward out;
  // The travelling part: which block each rank holds and its accumulators.
  struct Travelling {
    int block;
    std::vector<float> dk, dv;
  };
  std::vector<Travelling> held;
  for (int r = 0; r < s.ranks; ++r) {
    const std::size_t elems = std::size_t(s.bh) * n_of(r) * s.d;
    out.dq.emplace_back(elems, 0.f);
    held.push_back({r, std::vector<float>(elems, 0.f), std::vector<float>(elems, 0.f)});
    out.path.push_back({});
  }
  for (int t = 0; t < s.ranks; ++t) {
    for (int r = 0; r < s.ranks; ++r) {
      Travelling& kv = held[std::size_t(r)];
      out.path[std::size_t(kv.block)].push_back(r);
      for_each_block(shards, s, t, r, kv.block, [&](Block& blk) {
        if (blk.record.mask.kind != BlockMask::none) {
          const int rows = blk.shape.lq, keys = blk.shape.lk;
          const ch10::BackwardResult g = ch10::attention_backward_fa2(
              blk.inputs, slice_rows(o[std::size_t(r)], s.bh, blk.n_q, s.d, blk.q_row0, rows),
              slice_rows(lse[std::size_t(r)], s.bh, blk.n_q, 1, blk.q_row0, rows),
              slice_rows(d_o[std::size_t(r)], s.bh, blk.n_q, s.d, blk.q_row0, rows), blk.shape,
              {s.scale, blk.record.mask.kind == BlockMask::causal, s.br, s.bc});
          blk.record.tiles = g.tiles_visited;
          add_rows(out.dq[std::size_t(r)], s.bh, blk.n_q, s.d, blk.q_row0, rows, g.grads.dq);
          add_rows(kv.dk, s.bh, blk.n_k, s.d, blk.k_row0, keys, g.grads.dk);
          add_rows(kv.dv, s.bh, blk.n_k, s.d, blk.k_row0, keys, g.grads.dv);
        }
        out.blocks.push_back(blk.record);
      });
    }
    // Every block, with its accumulators, moves on to the next rank.
    std::rotate(held.rbegin(), held.rbegin() + 1, held.rend());
  }
  out.dk.resize(std::size_t(s.ranks));
  out.dv.resize(std::size_t(s.ranks));
  for (int r = 0; r < s.ranks; ++r) {
    Travelling& kv = held[std::size_t(r)];
    out.path[std::size_t(kv.block)].push_back(r);  // where the accumulators arrived
    out.dk[std::size_t(kv.block)] = std::move(kv.dk);
    out.dv[std::size_t(kv.block)] = std::move(kv.dv);
  }
  return out;
}
// [ring_backward]

// ------------------------------------------------------------------------------------------
// The load: what each rank computes
// ------------------------------------------------------------------------------------------

/// Per rank, the visible pairs and chapter 06's tiles of its blocks, summed over the ring.
struct RankLoad {
  std::vector<long> pairs;
  std::vector<long> tiles;
};

inline RankLoad rank_load(const std::vector<BlockRecord>& blocks, int ranks) {
  RankLoad load{std::vector<long>(std::size_t(ranks), 0), std::vector<long>(std::size_t(ranks), 0)};
  for (const BlockRecord& b : blocks) {
    load.pairs[std::size_t(b.rank)] += b.pairs;
    load.tiles[std::size_t(b.rank)] += b.tiles;
  }
  return load;
}

}  // namespace wb::ch12
