// Chapter 03: the block-associative (m, d) merge. The CPU steps, the merge trees, and what the
// kernel ladder's rungs (rungs/) share.
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
#include "common/rung.hpp"
#include "common/rung_args.hpp"

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
// The kernel ladder: one rung per file of rungs/ (its kernel, launcher and record); the fast
// rungs' plans and the dispatcher's rule in fast_plans.hpp
// ------------------------------------------------------------------------------------------

/// What every rung's launch on backend B may ask of its device. x, y of a rung's RowArgs:
/// device pointers of backend B to (rows, cols) elements of a.dtype, row-major (16-bit types
/// as their bit patterns), aligned to the element (rows not aligned to 16 bytes take the
/// scalar path); the shapes and types each rung takes are its limits, checked before launch
/// (run_rung).
template <Backend B>
struct Kernels {
  /// What one block may opt in to on this backend's device (block_cached's row; defined in
  /// rungs/6_block_cached.cuh).
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

}  // namespace wb::ch03

// [ladder]
// The ladder, rungs/1_block_per_row_online.cuh to rungs/7_fast_softmax.cuh in order: the build
// lists the files as Rungs<B> and kernel_ladder<B>() (a generated header); each file defines
// its Rungs<B>::name() with its kernel and launcher.
#include "chapters/03_block_merge/ladder.hpp"
// [ladder]
