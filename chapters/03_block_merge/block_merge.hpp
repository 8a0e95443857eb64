// Chapter 03: the block-associative (m, d) merge. CPU steps and the kernels' launchers.
//
// A block B of a row has statistics S(B) = (max_{j in B} x_j, sum_{j in B} e^{x_j - m_B})
// (eq. 1). Merging two blocks' statistics gives the statistics of their union (eq. 4), so
// a row may be cut anywhere and the pieces merged in any order and any tree shape: the
// merge (md_merge.hpp) is associative and commutative with identity (-inf, 0). See
// block_merge.md for the proofs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/02_online_softmax/online_update.hpp"
#include "chapters/03_block_merge/md_merge.hpp"
#include "common/backend.hpp"
#include "common/dtype.hpp"
#include "common/row_lanes.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"
#include "common/shared_memory.hpp"
#include "common/warp.hpp"

namespace wb::ch03 {

// ------------------------------------------------------------------------------------------
// CPU: block statistics and the blocked online softmax
// ------------------------------------------------------------------------------------------

/// Eq. (1) for the block x[0..n): chapter 02's recurrence started at the identity. n = 0 (an
/// empty block) gives the identity itself.
inline MD block_stats(const float* x, int n) {
  MD md = md_identity();
  for (int i = 0; i < n; ++i) md = ch02::online_update(md, x[i]);
  return md;
}

/// The statistics of the blocks x[bounds[k] .. bounds[k+1]) of one row, k = 0..K-1, for
/// 0 = bounds[0] <= bounds[1] <= ... <= bounds[K] = n (equal bounds make empty blocks).
inline std::vector<MD> blocks_stats(const float* x, const std::vector<int>& bounds) {
  std::vector<MD> leaves;
  for (std::size_t k = 0; k + 1 < bounds.size(); ++k)
    leaves.push_back(block_stats(x + bounds[k], bounds[k + 1] - bounds[k]));
  return leaves;
}

// [blocked_cpu]
/// Two passes per row: the row is cut into blocks of `block` entries (the last one shorter
/// when block does not divide cols), each block folded with the online update (eq. 1), the
/// block statistics merged left to right (eq. 2), then the normalization. x, y: (rows, cols),
/// row-major; block >= 1, any value, larger than cols included.
inline void softmax_blocked(const float* x, float* y, int rows, int cols, int block) {
  if (block < 1) throw std::invalid_argument("softmax_blocked: block must be >= 1");
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<std::size_t>(r) * cols;
    float* yr = y + static_cast<std::size_t>(r) * cols;
    MD md = md_identity();  // eq. (3): the statistics of no block yet
    for (int begin = 0; begin < cols; begin += block) {
      const int n = block < cols - begin ? block : cols - begin;
      md = md_merge(md, block_stats(xr + begin, n));  // eqs. (1), (2)
    }
    const float shift = ch01::exp_shift(md.m);
    const float inv_d = ch01::inverse_or_zero(md.d);
    for (int c = 0; c < cols; ++c) yr[c] = std::exp(xr[c] - shift) * inv_d;
  }
}
// [blocked_cpu]

inline std::vector<float> softmax_blocked(const std::vector<float>& x, int rows, int cols,
                                          int block) {
  std::vector<float> y(x.size());
  softmax_blocked(x.data(), y.data(), rows, cols, block);
  return y;
}

// ------------------------------------------------------------------------------------------
// CPU: reduction over an arbitrary merge tree
// ------------------------------------------------------------------------------------------

/// A binary tree over the blocks 0..K-1. Each node is a leaf (block >= 0, the statistics of
/// that block) or the merge of two earlier nodes, left and right. Children come before their
/// parents; the last node is the root. Any order of the leaves and any shape is allowed.
struct MergeTree {
  struct Node {
    int block;  ///< the leaf's block, or -1 for a merge
    int left;   ///< for a merge: index of its first operand
    int right;  ///< for a merge: index of its second operand
  };
  std::vector<Node> nodes;

  int add_leaf(int block) {
    nodes.push_back({block, -1, -1});
    return static_cast<int>(nodes.size()) - 1;
  }
  int add_merge(int left, int right) {
    nodes.push_back({-1, left, right});
    return static_cast<int>(nodes.size()) - 1;
  }
  /// The node as a parenthesized expression: "((2 1) (0 3))".
  std::string to_string(int node) const {
    const Node& n = nodes[static_cast<std::size_t>(node)];
    if (n.block >= 0) return std::to_string(n.block);
    return "(" + to_string(n.left) + " " + to_string(n.right) + ")";
  }
  std::string to_string() const { return nodes.empty() ? "()" : to_string(root()); }
  int root() const { return static_cast<int>(nodes.size()) - 1; }
  /// The most merges on a path from a leaf to the root (0 for a single leaf or none): what
  /// bounds the rounding any one block's statistics go through. A node comes after its operands.
  int depth() const {
    std::vector<int> below(nodes.size(), 0);
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const Node& n = nodes[i];
      if (n.block < 0)
        below[i] = 1 + std::max(below[static_cast<std::size_t>(n.left)],
                                below[static_cast<std::size_t>(n.right)]);
    }
    return nodes.empty() ? 0 : below.back();
  }
};

/// Writes the trees to `path` as one Graphviz DOT graph, each in a box of its own titled by
/// `titles[t]`, every node labelled by `labels[t][node]` (a leaf's block and value, a merge's
/// result): what the docs build draws with `dot` (Debian's graphviz) from a program's --dot
/// output. Throws std::runtime_error when the file cannot be written.
inline void write_merge_trees_dot(const std::string& path,
                                  const std::vector<const MergeTree*>& trees,
                                  const std::vector<std::string>& titles,
                                  const std::vector<std::vector<std::string>>& labels) {
  // Bottom to top, a merge's operands in order left to right (ordering=in: by incoming edge).
  std::string dot =
      "digraph merges {\n  rankdir=BT;\n  ordering=in;\n  node [shape=box, "
      "fontname=\"Helvetica\", fontsize=10];\n";
  for (std::size_t t = 0; t < trees.size(); ++t) {
    const std::string id = "t" + std::to_string(t) + "_";
    dot += "  subgraph cluster_" + std::to_string(t) + " {\n    label=\"" + titles[t] +
           "\";\n    fontname=\"Helvetica\";\n";
    for (std::size_t i = 0; i < trees[t]->nodes.size(); ++i) {
      const MergeTree::Node& n = trees[t]->nodes[i];
      dot += "    " + id + std::to_string(i) + " [label=\"" + labels[t][i] + "\"" +
             (n.block >= 0 ? ", style=filled, fillcolor=\"#dde8f5\"" : "") + "];\n";
      if (n.block < 0)
        for (int child : {n.left, n.right})
          dot += "    " + id + std::to_string(child) + " -> " + id + std::to_string(i) + ";\n";
    }
    dot += "  }\n";
  }
  std::ofstream out(path);
  out << dot << "}\n";
  if (!out) throw std::runtime_error("--dot: cannot write '" + path + "'");
}

/// ((0 1) 2) 3 ...: the order chapter 02's recurrence and softmax_blocked use.
inline MergeTree left_to_right_tree(int blocks) {
  MergeTree tree;
  if (blocks == 0) return tree;
  int acc = tree.add_leaf(0);
  for (int k = 1; k < blocks; ++k) acc = tree.add_merge(acc, tree.add_leaf(k));
  return tree;
}

/// A random tree: the leaves in a random order, then two random subtrees merged (in a random
/// operand order) until one is left. Every shape and every order of the leaves can come out.
/// `rng`'s engine is fully specified by the standard, so a seed gives the same tree anywhere.
inline MergeTree random_tree(int blocks, std::mt19937_64& rng) {
  MergeTree tree;
  std::vector<int> pending;
  for (int k = 0; k < blocks; ++k) pending.push_back(k);
  for (std::size_t k = pending.size(); k > 1; --k)  // Fisher-Yates, by hand: the standard
    std::swap(pending[k - 1], pending[rng() % k]);  // shuffle's output varies by library
  for (int& p : pending) p = tree.add_leaf(p);
  while (pending.size() > 1) {
    const std::size_t i = rng() % pending.size();
    std::swap(pending[i], pending.back());
    const int left = pending.back();
    pending.pop_back();
    const std::size_t j = rng() % pending.size();
    std::swap(pending[j], pending.back());
    const int right = pending.back();
    pending.pop_back();
    pending.push_back(tree.add_merge(left, right));
  }
  return tree;
}

// [reduce_tree]
/// Reduces the leaves' values `leaves` over `tree` with `merge` (md_merge, or any function
/// of two values: the tests pass a broken one too; chapter 09 merges partial attention
/// results). The value of every node lands in `node_values` when given, for printing the
/// intermediate values. An empty tree gives `identity`, eq. (3).
template <typename T, typename Merge>
T reduce_tree(const MergeTree& tree, const std::vector<T>& leaves, Merge merge, T identity,
              std::vector<T>* node_values = nullptr) {
  if (tree.nodes.empty()) return identity;
  std::vector<T> value(tree.nodes.size());
  for (std::size_t i = 0; i < tree.nodes.size(); ++i) {
    const MergeTree::Node& n = tree.nodes[i];
    value[i] = n.block >= 0 ? leaves.at(static_cast<std::size_t>(n.block))
                            : merge(value[static_cast<std::size_t>(n.left)],
                                    value[static_cast<std::size_t>(n.right)]);  // eq. (2)
  }
  if (node_values) *node_values = value;
  return value.back();
}
// [reduce_tree]

template <typename Merge>
MD reduce_tree(const MergeTree& tree, const std::vector<MD>& leaves, Merge merge,
               std::vector<MD>* node_values = nullptr) {
  return reduce_tree(tree, leaves, merge, md_identity(), node_values);
}

inline MD reduce_tree(const MergeTree& tree, const std::vector<MD>& leaves,
                      std::vector<MD>* node_values = nullptr) {
  return reduce_tree(tree, leaves, md_merge, node_values);
}

// ------------------------------------------------------------------------------------------
// The fast rungs' plans (fast_softmax_kernels.cuh): the row in registers, vector loads
// ------------------------------------------------------------------------------------------

// Element types (Dtype, dtype_bytes, vec_width, and the host's encode_elements,
// decode_elements and round_elements) come from common/dtype.hpp: every rung computes in
// float; fp16 and bf16 are converted on load and rounded to nearest even on store.

/// warp_registers holds each lane's share of the row in float registers: rows of up to
/// common/row_lanes.hpp's kWarpRowMaxBytes, 1024 floats (32 registers a lane) or 2048 fp16 or
/// bf16 values (64 a lane).
inline int warp_registers_max_cols(Dtype t) {
  return warp_row_max_cols(dtype_bytes(t));
}

/// The longest row block_vec and the dispatcher take (the launches index columns with int).
inline constexpr int kFastMaxCols = 1 << 30;

/// True when both pointers are 16-byte aligned and cols is a multiple of the vector width,
/// so that every row starts on a 16-byte boundary: then the rungs load and store whole
/// vectors, else one element at a time.
inline bool can_vectorize(const void* x, const void* y, int cols, Dtype t) {
  return cols % vec_width(t) == 0 && aligned_for_vec(x) && aligned_for_vec(y);
}

/// The kernel a fast launch runs: the row in registers (a group of lanes per row: the warp, or
/// fewer lanes for short rows), or a block per row reading x twice, or caching it in shared
/// memory.
enum class FastPath { warp_registers, block_vec, block_cached };

inline const char* to_string(FastPath p) {
  constexpr const char* kNames[] = {"warp_registers", "block_vec", "block_cached"};  // in order
  return kNames[static_cast<int>(p)];
}

/// What a fast launch does: the kernel, for the register path the lanes per row and the
/// registers per lane (compile-time buckets; 0 for the block paths), and whether it moves
/// 16-byte vectors.
struct FastPlan {
  FastPath path;
  int group_width;
  int cols_per_lane;
  bool vectorized;
};

// [fast_dispatch]
/// warp_registers on rows of `cols` entries: the registers per lane are bucketed to the next
/// power of 2 of ceil(cols / 32) (1, 2, 4, ..., 32, and 64 in 16 bits: one kernel
/// instantiation each), so cols = 32, 64, ..., 1024 (2048) are the last columns of each bucket.
/// Vectors need can_vectorize() and whole vectors per lane (cols_per_lane a multiple of the vector
/// width: cols > 64 for fp32, cols > 128 for fp16 and bf16).
inline FastPlan warp_registers_plan(const void* x, const void* y, int cols, Dtype t) {
  const int per_lane = next_pow2((cols + kWarpSize - 1) / kWarpSize);
  return {FastPath::warp_registers, kWarpSize, per_lane,
          can_vectorize(x, y, cols, t) && per_lane % vec_width(t) == 0};
}

/// lane_groups on rows of `cols` entries: where can_vectorize(), common/row_lanes.hpp's groups
/// of lanes holding whole 16-byte vectors: a row of at most 16 vectors takes a group of that
/// many lanes rounded up to a power of 2, several rows per warp; from 17 vectors on it is
/// warp_registers' plan. Rows that cannot take vectors keep warp_registers' plan.
inline FastPlan lane_groups_plan(const void* x, const void* y, int cols, Dtype t) {
  if (!can_vectorize(x, y, cols, t)) return warp_registers_plan(x, y, cols, t);
  const RowLanes lanes = row_lanes(cols, vec_width(t));
  return {FastPath::warp_registers, lanes.group_width, lanes.cols_per_lane, true};
}

/// block_vec on rows of `cols` entries: vectors wherever can_vectorize().
inline FastPlan block_vec_plan(const void* x, const void* y, int cols, Dtype t) {
  return {FastPath::block_vec, 0, 0, can_vectorize(x, y, cols, t)};
}

/// block_cached on rows of `cols` entries: block_vec's accesses, the row kept in shared memory.
inline FastPlan block_cached_plan(const void* x, const void* y, int cols, Dtype t) {
  return {FastPath::block_cached, 0, 0, can_vectorize(x, y, cols, t)};
}

/// The block paths' threads per row (8 warps).
inline constexpr int kBlockVecThreads = 256;

/// block_cached's dynamic shared memory: the 8 warps' (m, d) pairs (64 bytes, keeping the row
/// 16-byte aligned), then the row as it was read, `cols` elements of `elem_bytes` each.
inline constexpr std::size_t kCachedScratchBytes = kBlockVecThreads / kWarpSize * sizeof(MD);
static_assert(kCachedScratchBytes % 16 == 0, "the cached row starts 16-byte aligned");
inline std::size_t cached_shared_bytes(int cols, std::size_t elem_bytes) {
  return kCachedScratchBytes + static_cast<std::size_t>(cols) * elem_bytes;
}

/// The dispatcher's rule. Rows of up to 4 KiB fit in one warp's registers (1024 floats or 2048
/// halves: 32 lanes x at most 32 or 64 values): lane_groups reads x once, short rows several to
/// a warp. Longer rows get a
/// block of 256 threads: block_cached keeps the row in shared memory, reading x once, while two
/// of its blocks fit on an SM (113 KiB of row on an H100: 28912 floats or 57824 halves); past
/// that, block_vec reads x twice (the second time from L2 where it can). One block of 8 warps
/// per SM has too few loads in flight: on an H100 (2026-11-24, 49152 rows) block_cached read
/// 64 KiB rows at 2450-2601 GB/s against block_vec's 1989-1993, and 128 KiB rows (32768
/// floats, one block per SM) at 1425 against block_vec's 1977.
inline FastPlan plan_fast_softmax(const void* x, const void* y, int cols, Dtype t,
                                  std::size_t max_shared) {
  if (cols <= warp_registers_max_cols(t)) return lane_groups_plan(x, y, cols, t);
  if (two_blocks_fit(cached_shared_bytes(cols, dtype_bytes(t)), max_shared))
    return block_cached_plan(x, y, cols, t);
  return block_vec_plan(x, y, cols, t);
}
// [fast_dispatch]

// ------------------------------------------------------------------------------------------
// Kernel launchers (defined in block_merge_kernels.cuh and fast_softmax_kernels.cuh, once per
// kernel backend) and the ladder
// ------------------------------------------------------------------------------------------

/// The launchers of the ladder's rungs; x, y of `a`: device pointers of backend B to (rows,
/// cols) elements of a.dtype, row-major (16-bit types as their bit patterns), aligned to the
/// element (rows not aligned to 16 bytes take the scalar path). The shapes and types each
/// takes are its limits in kernel_ladder(), checked before launch (run_rung).
template <Backend B>
struct Kernels {
  static void block_per_row_online(const RowArgs& a);  // block_merge_kernels.cuh
  static void warp_per_row_online(const RowArgs& a);
  static void warp_registers(const RowArgs& a);  // fast_softmax_kernels.cuh
  static void lane_groups(const RowArgs& a);
  static void block_vec(const RowArgs& a);
  static void block_cached(const RowArgs& a);
  static void fast_softmax(const RowArgs& a);  ///< runs plan_fast_softmax()
  /// What one block may opt in to on this backend's device (block_cached's row).
  static std::size_t max_dynamic_shared_bytes();
};

/// Rungs 1, 2 and 5 make chapter 02's two passes over global memory: x read for the
/// statistics (m, d) and again to normalize, y written once.
inline Traffic two_passes(const RowArgs& a) {
  return per_element_traffic(a, 2, 1, "2 reads of x (statistics, normalize) + 1 write of y");
}

/// warp_registers and lane_groups keep the row in registers between the statistics and the
/// normalization: x read once, y written once.
inline Traffic row_in_registers(const RowArgs& a) {
  return per_element_traffic(a, 1, 1, "1 read of x (kept in registers) + 1 write of y");
}

/// block_cached keeps it in shared memory: x read once, y written once.
inline Traffic row_in_shared(const RowArgs& a) {
  return per_element_traffic(a, 1, 1, "1 read of x (kept in shared memory) + 1 write of y");
}

/// The dispatcher moves what the rung it picks moves (plan_fast_softmax on backend B's
/// device): 1 read of x up to warp_registers_max_cols(t) columns and while block_cached holds the
/// row, block_vec's 2 reads beyond; 1 write of y.
template <Backend B>
Traffic dispatched(const RowArgs& a) {
  switch (
      plan_fast_softmax(a.x, a.y, a.cols, a.dtype, Kernels<B>::max_dynamic_shared_bytes()).path) {
    case FastPath::warp_registers:
      return row_in_registers(a);
    case FastPath::block_cached:
      return row_in_shared(a);
    case FastPath::block_vec:
      break;
  }
  return two_passes(a);
}

// [ladder]
/// The ladder in order, each rung one idea better than the one before.
template <Backend B>
Ladder<RowArgs> kernel_ladder() {
  const std::vector<Dtype> all_types = {Dtype::fp32, Dtype::fp16, Dtype::bf16};
  return {
      {"block_per_row_online",
       "chapter 02's recurrence split over 256 threads per row, their (m, d) pairs merged",
       row_limits(kAnyCols), &Kernels<B>::block_per_row_online, &two_passes},
      {"warp_per_row_online", "one warp per row: the merge stays in registers, no barrier",
       row_limits(kAnyCols), &Kernels<B>::warp_per_row_online, &two_passes},
      {"warp_registers", "the row kept in registers: x read once; 16-byte vectors, 16-bit types",
       row_limits(warp_row_max_cols(2), all_types, kWarpRowMaxBytes), &Kernels<B>::warp_registers,
       &row_in_registers},
      {"lane_groups",
       "short rows share a warp: a group of 1 to 16 lanes per row, each lane a whole 16-byte "
       "vector, so every lane works at 32 to 256 columns",
       row_limits(warp_row_max_cols(2), all_types, kWarpRowMaxBytes), &Kernels<B>::lane_groups,
       &row_in_registers},
      {"block_vec", "a block per row for any length, each 16-byte vector one block of eq. (1)",
       row_limits(kFastMaxCols, all_types), &Kernels<B>::block_vec, &two_passes},
      {"block_cached",
       "block_vec with the row cached in shared memory (opted in up to the device's limit): x "
       "read once",
       row_limits(kFastMaxCols, all_types,
                  Kernels<B>::max_dynamic_shared_bytes() - kCachedScratchBytes),
       &Kernels<B>::block_cached, &row_in_shared},
      {"fast_softmax",
       "the dispatcher: lane_groups up to 4 KiB rows, block_cached while two blocks' rows "
       "fit in an SM's shared memory, block_vec beyond",
       row_limits(kFastMaxCols, all_types), &Kernels<B>::fast_softmax, &dispatched<B>}};
}
// [ladder]

}  // namespace wb::ch03
