// Chapter 03 program: the block-associative (m, d) merge. `--help` lists the options.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "chapters/02_online_softmax/online_softmax.hpp"
#include "chapters/03_block_merge/block_merge.hpp"
#include "chapters/03_block_merge/md_merge.hpp"
#include "common/bench.hpp"
#include "common/buffer.hpp"
#include "common/cli.hpp"
#include "common/compare.hpp"
#include "common/inputs.hpp"
#include "common/reference.hpp"
#include "common/table.hpp"
#include "common/timer.hpp"

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

// One merge order: every merge with its operands and result, then the root.
MD print_order(const std::string& title, const MergeTree& tree, const std::vector<MD>& leaves) {
  std::vector<MD> value;
  const MD root = reduce_tree(tree, leaves, &value);
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

struct Run {
  std::string name;
  std::vector<float> y;
  double ms;
};

// Times a kernel launcher: CUDA events on a GPU (L2 flushed, median of 10), the wall clock
// for one simulated run (simulator time says nothing about GPU speed).
Run run_kernel(Backend backend, const NamedKernel& k, const std::vector<float>& x, int rows,
               int cols) {
  DeviceBuffer<float> dx(backend, x);
  DeviceBuffer<float> dy(backend, x.size());
  auto work = [&] { k.launch(dx.data(), dy.data(), rows, cols); };
  double ms = 0.0;
  if (backend == Backend::cuda) {
    ms = time_cuda(work, 2, 10).median_ms;
  } else {
    CpuTimer timer;
    work();
    ms = timer.elapsed_ms();
  }
  return {std::string(to_string(backend)) + " " + k.name, dy.download(), ms};
}

void report_shape(Backend backend, int rows, int cols, int block, std::uint64_t seed) {
  for (InputKind kind : {InputKind::randn, InputKind::large_offset}) {
    const std::vector<float> x = make_input(kind, rows, cols, seed);
    const std::vector<double> ref = ref::softmax(x, rows, cols);
    std::vector<Run> runs;
    CpuTimer online_timer;
    runs.push_back({"cpu ch02 online", ch02::softmax_online(x, rows, cols), 0.0});
    runs.back().ms = online_timer.elapsed_ms();
    CpuTimer blocked_timer;
    runs.push_back({"cpu ch03 blocked, block " + std::to_string(block),
                    softmax_blocked(x, rows, cols, block), 0.0});
    runs.back().ms = blocked_timer.elapsed_ms();
    if (backend == Backend::sim) {
      for (const NamedKernel& k : kernel_ladder<Backend::sim>())
        runs.push_back(run_kernel(backend, k, x, rows, cols));
    }
    if (backend == Backend::cuda) {
      for (const NamedKernel& k : kernel_ladder<Backend::cuda>())
        runs.push_back(run_kernel(backend, k, x, rows, cols));
    }
    const std::vector<float>& previous = runs.front().y;  // chapter 02's CPU step
    std::cout << "Error vs the fp64 reference and vs chapter 02 on (" << rows << ", " << cols
              << ") " << to_string(kind) << ", seed " << seed << ":\n";
    const double bytes = 2.0 * sizeof(float) * x.size();  // read x once, write y once
    Table t({"implementation", "max rel err", "max abs err", "non-finite", "rel diff vs ch02",
             "time ms", "GB/s"});
    for (const Run& run : runs) {
      const ErrorReport e = compare(run.y, ref);
      const ErrorReport vs_ch02 = compare(run.y, previous);
      const bool gpu = run.name.rfind("cuda", 0) == 0;
      t.add_row({run.name, sci(e.max_rel), sci(e.max_abs), std::to_string(e.nonfinite_mismatches),
                 sci(vs_ch02.max_rel), fixed(run.ms, 3),
                 gpu ? fixed(bytes / run.ms * 1e-6, 1) : "-"});
    }
    t.print(std::cout);
    std::cout << '\n';
  }
  std::cout << "  The merge tree is shallower than chapter 02's chain (a slice of\n"
               "  cols / threads updates, then log2(threads) merges), so d' collects fewer\n"
               "  roundings. GB/s counts one read and one write of x per element (the ideal).\n\n";
  if (backend == Backend::sim)
    std::cout << "  sim times are the simulator running every GPU thread on this CPU: they\n"
                 "  check the kernels, they do not predict GPU speed. GB/s is shown on a GPU.\n\n";
}

// --bench: every rung of the ladder on (rows, cols) of randn, on the GPU.
int run_bench(const BenchOptions& options, int rows, int cols, std::uint64_t seed) {
  Bench bench("03_block_merge", "softmax", options);
  DeviceBuffer<float> dx(Backend::cuda, bench_input(rows, cols, seed));
  DeviceBuffer<float> dy(Backend::cuda, dx.size());
  const Work work = Work::moving(softmax_bytes(rows, cols, sizeof(float)));
  for (const NamedKernel& k : kernel_ladder<Backend::cuda>())
    bench.time(k.name, "fp32", shape_string(rows, cols), work,
               [&] { k.launch(dx.data(), dy.data(), rows, cols); });
  return bench.finish();
}

}  // namespace

int main(int argc, char** argv) {
  int rows = 4096;
  int cols = 1024;
  int block = 100;
  std::uint64_t seed = 1;
  std::string backend_name = cuda_available() ? "cuda" : "sim";
  bool trace_only = false;
  Cli cli("ch03", "Chapter 03: the (m, d) merge, blocked on the CPU and parallel in CUDA.");
  cli.option("--rows", &rows, "rows of x (default 4096)")
      .option("--cols", &cols, "columns of x, the softmax length (default 1024)")
      .option("--block", &block, "block size of the CPU blocked softmax (default 100)")
      .option("--seed", &seed, "input seed (default 1)")
      .option("--backend", &backend_name, {"cpu", "sim", "cuda"},
              "where the kernels run (default cuda with a GPU, else sim)")
      .flag("--trace", &trace_only, "print the worked trace only");
  BenchOptions bench;
  if (const int code = bench.parse(cli, argc, argv); code >= 0) return code;
  constexpr std::size_t kMaxElements = std::size_t{1} << 28;  // 1 GiB per float matrix
  if (static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols) >
      bench.max_elements(kMaxElements))
    return cli.error("--rows x --cols = " + std::to_string(std::size_t(rows) * cols) +
                     " elements exceeds this program's limit of " +
                     (bench.enabled ? "2^31 with --bench" : "2^28 (1 GiB per matrix)"));
  Backend backend{};
  if (std::string why; !parse_backend(backend_name, &backend, &why)) return cli.error(why);
  if (const int code = bench.check_backend(cli, backend); code >= 0) return code;
  if (bench.enabled) {
    try {
      return run_bench(bench, rows, cols, seed);
    } catch (const std::exception& e) {
      return cli.error(e.what());
    }
  }

  print_intro();
  print_trace();
  if (trace_only) return 0;
  try {
    report_shape(backend, rows, cols, block, seed);
  } catch (const std::exception& e) {
    return cli.error(e.what());
  }
  std::cout << "Next: chapter 04, softmax(scale Q K^T) fused (chapters/04_fused_qk_softmax,\n"
               "docs page \"Chapter 04: fused QK softmax\"): the scores are produced tile by\n"
               "tile and merged as (m, d) pairs, never stored whole.\n";
  return 0;
}
