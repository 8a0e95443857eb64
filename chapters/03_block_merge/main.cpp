// Chapter 03 program: the block-associative (m, d) merge. `--help` lists the options.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "chapters/01_safe_softmax/softmax_report.hpp"
#include "chapters/02_online_softmax/online_softmax.hpp"
#include "chapters/03_block_merge/block_merge.hpp"
#include "chapters/03_block_merge/fast_plans.hpp"
#include "chapters/03_block_merge/md_merge.hpp"
#include "common/chapter_program.hpp"
#include "common/cli.hpp"
#include "common/dtype.hpp"
#include "common/program.hpp"
#include "common/row_plan.hpp"
#include "common/table.hpp"
#include "common/warp.hpp"

namespace {

using namespace wb;
using namespace wb::ch03;

void print_intro() {
  std::cout << "Chapter 03: the block-associative (m, d) merge\n"
               "  The statistics of a block, (m, d) = (max x_j, sum e^(x_j - m)), merge:\n"
               "    merge((m_a, d_a), (m_b, d_b)) = (m, d_a e^(m_a - m) + d_b e^(m_b - m)),\n"
               "    m = max(m_a, m_b), identity (-inf, 0),\n"
               "  and the merge of two blocks' statistics is the statistics of their union.\n"
               "  So a row can be cut anywhere and the pieces merged in any order: a warp\n"
               "  or a block of threads shares one row, with one read pass for (m, d).\n\n";
}

// The kernel a plan of the dispatcher runs.
const char* kernel_of(const RowPlan& plan) {
  switch (plan.cache) {
    case RowCache::registers:
      return plan.threads < kWarpSize ? "lane_groups" : "warp_registers";
    case RowCache::shared:
      return "block_cached";
    case RowCache::none:
      break;
  }
  return "block_vec";
}

std::string pair(MD md) {
  return "(" + fixed(md.m, 2) + ", " + fixed(md.d, 6) + ")";
}

// Distance in units in the last place between two positive floats.
long ulps_apart(float a, float b) {
  std::int32_t ia = 0, ib = 0;
  std::memcpy(&ia, &a, sizeof a);
  std::memcpy(&ib, &b, sizeof b);
  return std::labs(static_cast<long>(ia) - static_cast<long>(ib));
}

std::string g_dot_path;  // --dot: where the trace writes its merge trees (Graphviz)
std::vector<std::string> g_dot_titles;
std::vector<std::vector<std::string>> g_dot_labels;

// One merge order: every merge with its operands and result, then the root.
MD print_order(const std::string& title, const MergeTree& tree, const std::vector<MD>& leaves) {
  std::vector<MD> value;
  const MD root = reduce_tree(tree, leaves, &value);
  std::vector<std::string> labels;  // each node: what it holds, as it ran
  for (std::size_t i = 0; i < tree.nodes.size(); ++i)
    labels.push_back((tree.nodes[i].block >= 0 ? "block " + tree.to_string(int(i)) + "\\n"
                                               : std::string("merge\\n")) +
                     pair(value[i]));
  g_dot_titles.push_back(title + ": " + tree.to_string());
  g_dot_labels.push_back(labels);
  std::cout << title << ": " << tree.to_string() << "\n";
  for (std::size_t i = 0; i < tree.nodes.size(); ++i) {
    const MergeTree::Node& n = tree.nodes[i];
    if (n.block >= 0) continue;
    std::cout << "  merge(" << tree.to_string(n.left) << " " << pair(value[n.left]) << ", "
              << tree.to_string(n.right) << " " << pair(value[n.right]) << ") = " << pair(value[i])
              << "\n";
  }
  return root;
}

void print_trace() {
  const std::vector<float> x = {1.0f, 3.0f, -2.0f, 2.5f, 4.0f, 0.5f, -1.0f, 2.0f};
  const std::vector<int> bounds = {0, 2, 4, 6, 8};
  const std::vector<MD> leaves = blocks_stats(x.data(), bounds);
  std::cout << "Trace on x = [1, 3, -2, 2.5, 4, 0.5, -1, 2] cut into 4 blocks of 2:\n";
  Table t({"block", "entries", "m (eq. 1)", "d (eq. 1)"});
  for (std::size_t k = 0; k < leaves.size(); ++k)
    t.add_row({std::to_string(k), "[" + fixed(x[2 * k], 1) + ", " + fixed(x[2 * k + 1], 1) + "]",
               fixed(leaves[k].m, 2), fixed(leaves[k].d, 6)});
  t.print(std::cout);
  std::cout << '\n';

  MergeTree swapped;  // (2 1) (0 3): no block next to its neighbour, operands reversed
  const int b21 = swapped.add_merge(swapped.add_leaf(2), swapped.add_leaf(1));
  const int b03 = swapped.add_merge(swapped.add_leaf(0), swapped.add_leaf(3));
  swapped.add_merge(b21, b03);
  std::mt19937_64 rng(3);
  const MergeTree random = random_tree(static_cast<int>(leaves.size()), rng);

  const MD a = print_order("Order 1, left to right", left_to_right_tree(4), leaves);
  const MD b = print_order("Order 2, pairs out of order", swapped, leaves);
  const MD c = print_order("Order 3, a random tree (seed 3)", random, leaves);
  const MD whole = ch02::online_stats(x.data(), static_cast<int>(x.size()));
  if (!g_dot_path.empty()) {
    const MergeTree ordered = left_to_right_tree(4);
    write_merge_trees_dot(g_dot_path, {&ordered, &swapped, &random}, g_dot_titles, g_dot_labels);
  }

  std::cout << "\nThe three results, and chapter 02's one-thread recurrence over the row:\n";
  Table r({"order", "m", "d", "d (9 digits)", "ulps from order 1"});
  const struct {
    const char* name;
    MD md;
  } results[] = {{"1", a}, {"2", b}, {"3", c}, {"chapter 02", whole}};
  for (const auto& res : results) {
    char digits[32];
    std::snprintf(digits, sizeof digits, "%.9g", static_cast<double>(res.md.d));
    r.add_row({res.name, fixed(res.md.m, 2), fixed(res.md.d, 6), digits,
               std::to_string(ulps_apart(res.md.d, a.d))});
  }
  double exact = 0.0;  // fp64 sum_j e^{x_j - m}
  for (float v : x) exact += std::exp(static_cast<double>(v) - whole.m);
  char digits[32];
  std::snprintf(digits, sizeof digits, "%.9g", exact);
  r.add_row({"fp64 sum", fixed(whole.m, 2), fixed(exact, 6), digits, "-"});
  r.print(std::cout);
  std::cout << "  m is the same float every way (max does not round); d may differ in its last\n"
               "  bits with the order of the roundings, within the bound of eq. (6).\n\n";
}

// The chapter after this one, printed last.
void print_next() {
  std::cout << "Next: chapter 04, softmax(scale Q K^T) fused (chapters/04_fused_qk_softmax,\n"
               "docs page \"Chapter 04: fused QK softmax\"): the scores are produced tile by\n"
               "tile and merged as (m, d) pairs, never stored whole.\n";
}

}  // namespace

int main(int argc, char** argv) {
  int block = 100;
  Cli cli("ch03", "Chapter 03: the (m, d) merge, blocked on the CPU and parallel in CUDA.");
  ch01::SoftmaxShapeOptions shape(cli);
  cli.option("--block", &block, "block size of the CPU blocked softmax (default 100)");
  DtypesOption dtype(cli,
                     "element type of x and y (default all; the first two rungs take fp32 only)");
  add_dot_option(cli, &g_dot_path, "three merge trees", "(m, d)");
  ProgramOptions options;
  if (const int code = parse_program(cli, argc, argv, &options); code >= 0) return code;
  const std::vector<Dtype> dtypes = dtype.types();
  ChapterSteps<RowArgs> steps = ch01::softmax_steps(cli, options, shape, dtypes);
  steps.report = [&](const Ladder<RowArgs>& ladder) {
    const std::vector<ch01::CpuStep> cpu_steps = {
        {"cpu ch02 online",
         [](const std::vector<float>& x, int r, int c) { return ch02::softmax_online(x, r, c); }},
        {"cpu ch03 blocked, block " + std::to_string(block),
         [block](const std::vector<float>& x, int r, int c) {
           return softmax_blocked(x, r, c, block);
         }}};
    for (Dtype t : dtypes)
      ch01::report_softmax(options.backend, cpu_steps, ladder, "ch02", shape.rows, shape.cols,
                           options.seed, t);
    // The kernel backend's device decides block_cached's limit (cpu: the simulator's H100).
    // A 16-bit row is half the bytes of a float one: its plan is its own.
    const Backend device = options.backend == Backend::cpu ? Backend::sim : options.backend;
    std::string runs;
    for (Dtype t : dtypes) {
      // The program's buffers are 16-byte aligned: vectors wherever cols allows them.
      const RowPlan plan = select_kernel_backend(device, [&](auto b) {
        return plan_fast_softmax(shape.cols, t, shape.cols % vec_width(t) == 0,
                                 Kernels<decltype(b)::value>::max_dynamic_shared_bytes());
      });
      runs += std::string(runs.empty() ? "" : ";\n  ") + "on " + to_string(t) + " " +
              kernel_of(plan) + " with groups of " +
              std::to_string(plan.cache == RowCache::registers ? plan.threads : 0) + " lanes";
    }
    std::cout
        << "  The merge tree is shallower than chapter 02's chain (a slice of\n"
           "  cols / threads updates, then log2(threads) merges), so d' collects fewer\n"
           "  roundings. GB/s counts one read and one write of x per element (the ideal).\n"
           "  The fast rungs: warp_registers (rows of up to "
        << kWarpRowMaxBytes
        << " bytes, the row in registers, x read once),\n"
           "  lane_groups (short rows several to a warp), block_vec (16-byte vectors, x read\n"
           "  twice), block_cached (the row in shared memory, x read once) and fast_softmax,\n"
           "  the dispatcher: here it runs\n  "
        << runs
        << "\n  (0: a block per row; see block_merge.md, \"The fast rungs\"). On fp16 and "
           "bf16\n  x is rounded first: the CPU steps and the fp64 reference see the same "
           "values.\n\n";
    if (dtypes.size() > 1 || dtypes[0] != Dtype::fp32)
      std::cout << "  16-bit outputs carry their own rounding, half an ulp: a relative 2^-8\n"
                   "  (3.9e-3) for bf16, 2^-11 (4.9e-4) for fp16 down to its smallest normal,\n"
                   "  2^-14 = 6.1e-5; below it fp16's spacing is fixed (2^-24), so small outputs\n"
                   "  show larger relative errors (the tests bound |y - ref| by 2^-11 max(|ref|,\n"
                   "  2^-14) plus the float error).\n\n";
  };
  // The trace runs under the program's guard: --dot may fail to write.
  return run_chapter_program(cli, options, {print_intro, print_trace, print_next}, steps,
                             make_kernel_ladder);
}
