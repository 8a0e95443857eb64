// Chapter 12 program: ring attention, the sequence split across ranks and the K/V blocks passed
// around a ring, P ranks simulated in one process. `--help` lists the options.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "chapters/10_fa2_backward/fa2_backward.hpp"
#include "chapters/12_ring_attention/ring_attention.hpp"
#include "chapters/12_ring_attention/ring_floors.hpp"
#include "common/attention_inputs.hpp"
#include "common/cli.hpp"
#include "common/inputs.hpp"
#include "common/program.hpp"
#include "common/reference_attention.hpp"
#include "common/reference_attention_backward.hpp"
#include "common/table.hpp"
#include "common/timer.hpp"

namespace {

using namespace wb;
using namespace wb::ch12;

void print_intro() {
  std::cout
      << "Chapter 12: ring attention\n"
         "  A sequence too long for one GPU's memory is split across P of them: rank r keeps\n"
         "  its rows of Q, K and V. Attention needs every key for every query, so the K/V\n"
         "  blocks travel a ring: at step t rank r holds the block of rank r - t, computes its\n"
         "  queries against it (chapter 06's FA2 on two pieces of the sequence) and merges the\n"
         "  partial (O, lse) into its running result by chapter 09's monoid; meanwhile the\n"
         "  next block is on its way. After P steps every rank has its rows of the whole\n"
         "  sequence's attention. Under the causal mask a contiguous split leaves rank 0 almost\n"
         "  idle; a zigzag split (chunks r and 2P-1-r) gives every rank the same work. The\n"
         "  backward sends dK and dV around with their block, home after P hops.\n\n";
}

std::string lse_text(float lse) {
  return lse == -INFINITY ? std::string("-inf") : fixed(lse, 3);
}

std::string positions_text(const std::vector<int>& pos) {
  std::string s;
  for (int p : pos) s += (s.empty() ? "" : " ") + std::to_string(p);
  return s;
}

std::string mask_text(const BlockMask& m) {
  switch (m.kind) {
    case BlockMask::full: return "full " + std::to_string(m.keys);
    case BlockMask::causal: return "causal " + std::to_string(m.keys);
    case BlockMask::none: return "none";
  }
  return "?";
}

/// The tile counts of each layout's ring, per rank and step, for the page's load figure
/// (written by --balance-csv): the records the load table and the tests count.
void write_balance_csv(const std::string& path, int ranks, int length,
                       const std::vector<RingForward>& rings) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("--balance-csv: cannot write '" + path + "'");
  out << "layout,ranks,length,rank,step,source,pairs,tiles\n";
  for (std::size_t l = 0; l < rings.size(); ++l) {
    std::vector<long> pairs(std::size_t(ranks * ranks), 0), tiles(pairs.size(), 0);
    std::vector<int> source(pairs.size(), 0);
    for (const BlockRecord& b : rings[l].blocks) {
      const std::size_t at = std::size_t(b.rank * ranks + b.step);
      pairs[at] += b.pairs;
      tiles[at] += b.tiles;
      source[at] = b.source;
    }
    for (int r = 0; r < ranks; ++r)
      for (int t = 0; t < ranks; ++t) {
        const std::size_t at = std::size_t(r * ranks + t);
        out << to_string(all_layouts()[l]) << ',' << ranks << ',' << length << ',' << r << ','
            << t << ',' << source[at] << ',' << pairs[at] << ',' << tiles[at] << '\n';
      }
  }
  if (!out) throw std::runtime_error("--balance-csv: cannot write '" + path + "'");
}

std::string g_balance_csv;  // --balance-csv: where the trace writes the load of every layout

// The ring on 3 ranks, 10 positions, causal, zigzag: who holds what, each step's blocks, the
// running logsumexp of one row, where dK and dV travel; then the load of the three layouts.
void print_trace() {
  const int ranks = 3, length = 10;
  std::cout << "Trace: " << length << " positions on " << ranks << " ranks, eq. (2)\n";
  Table split({"layout", "rank 0", "rank 1", "rank 2"});
  for (Layout layout : all_layouts()) {
    std::vector<std::string> row{to_string(layout)};
    for (int r = 0; r < ranks; ++r)
      row.push_back(positions_text(shard_positions(length, ranks, r, layout)));
    split.add_row(row);
  }
  split.print(std::cout);

  const RingSpec s{1, length, 2, ranks, Layout::zigzag, 1.f, true};
  const AttentionInputs in = make_attention_inputs(ScoreKind::randn, {1, length, length, 2}, 1.f, 7);
  const std::vector<AttentionInputs> shards = shard_inputs(in, s);
  const RingForward f = ring_forward(shards, s);
  std::cout << "\nThe causal ring, zigzag: at step t rank r holds the K/V of rank r - t (eq. 4);\n"
               "each (query chunk, key chunk) pair is full, causal (the diagonal) or none (eq. 3)\n";
  Table steps({"step", "rank", "K/V of", "chunk pairs (query x key: mask, keys)", "pairs"});
  for (int t = 0; t < ranks; ++t)
    for (int r = 0; r < ranks; ++r) {
      std::string pairs_text;
      long pairs = 0;
      int source = 0;
      for (const BlockRecord& b : f.blocks)
        if (b.step == t && b.rank == r) {
          source = b.source;
          pairs += b.pairs;
          pairs_text += (pairs_text.empty() ? "" : ", ") + std::to_string(b.q_piece) + "x" +
                        std::to_string(b.kv_piece) + ": " + mask_text(b.mask);
        }
      steps.add_row({std::to_string(t), std::to_string(r), std::to_string(source), pairs_text,
                     std::to_string(pairs)});
    }
  steps.print(std::cout);

  // One row's running logsumexp, step by step: position 8 lives on rank 1 (chunk 4 of 6).
  const int rank = 1, position = 8;
  const std::vector<int> pos = shard_positions(length, ranks, rank, s.layout);
  const int row = int(std::find(pos.begin(), pos.end(), position) - pos.begin());
  std::cout << "\nPosition " << position << " (rank " << rank << ", row " << row
            << "): its running (lse, O) after each step, eq. (5)\n";
  Table chain({"after step", "merged K/V of", "lse", "O"});
  const std::vector<std::vector<int>> order = ring_order(ranks);
  for (int t = 0; t < ranks; ++t) {
    std::string merged;
    for (int u = 0; u <= t; ++u) merged += (u ? ", " : "") + std::to_string(order[rank][std::size_t(u)]);
    // The running state after step t: the ring stopped there, its first t + 1 blocks merged.
    const RingForward g = ring_forward(shards, s, {}, Backend::cpu, t + 1);
    const std::size_t at = std::size_t(row);
    const float lse = g.lse[std::size_t(rank)][at];
    const std::vector<float> o(g.o[std::size_t(rank)].begin() + std::ptrdiff_t(2 * at),
                               g.o[std::size_t(rank)].begin() + std::ptrdiff_t(2 * at + 2));
    chain.add_row({std::to_string(t), merged, lse_text(lse),
                   "(" + fixed(o[0], 3) + ", " + fixed(o[1], 3) + ")"});
  }
  chain.print(std::cout);
  const std::size_t at = std::size_t(row);
  std::cout << "  the ring's result: (" << lse_text(f.lse[std::size_t(rank)][at]) << ", ("
            << fixed(f.o[std::size_t(rank)][2 * at], 3) << ", "
            << fixed(f.o[std::size_t(rank)][2 * at + 1], 3) << "))";
  const ch06::Fa2Result whole = ch06::attention_fa2(in, {1, length, length, 2}, {s.scale, true, 4, 4});
  std::cout << "; chapter 06 on the whole sequence: (" << lse_text(whole.lse[std::size_t(position)])
            << ", (" << fixed(whole.o[std::size_t(2 * position)], 3) << ", "
            << fixed(whole.o[std::size_t(2 * position + 1)], 3) << "))\n";

  // The backward: where each block's dK, dV accumulators go (eq. 6).
  std::vector<std::vector<float>> d_o = shard(in.q, s, s.d);  // any dO: only the path matters
  const RingBackward bwd = ring_backward(shards, f.o, f.lse, d_o, s);
  std::cout << "\nThe backward: each K/V block's dK, dV ride with it; the ranks that held them, "
               "step by step, then where they arrive (eq. 6)\n";
  for (int b = 0; b < ranks; ++b) {
    std::cout << "  block " << b << ":";
    const std::vector<int>& path = bwd.path[std::size_t(b)];
    for (std::size_t i = 0; i < path.size(); ++i)
      std::cout << (i ? (i + 1 == path.size() ? " => " : " -> ") : " ") << "rank " << path[i];
    std::cout << (path.back() == b ? " (its owner)\n" : " (NOT its owner)\n");
  }

  // The load: visible pairs and chapter 06's tiles per rank, causal, P = 4, 512 positions.
  const int load_ranks = 4, load_length = 512;
  std::cout << "\nThe causal load per rank, " << load_length << " positions on " << load_ranks
            << " ranks (chapter 06's tiles of " << ch06::kKernelRows << " x " << ch06::kKernelKeys
            << ")\n";
  Table load({"layout", "pairs per rank", "tiles per rank", "max / min tiles"});
  const AttentionInputs li =
      make_attention_inputs(ScoreKind::randn, {1, load_length, load_length, 8}, 1.f, 1);
  std::vector<RingForward> rings;
  for (Layout layout : all_layouts()) {
    const RingSpec ls{1, load_length, 8, load_ranks, layout, 1.f, true};
    rings.push_back(ring_forward(shard_inputs(li, ls), ls));
    const RankLoad l = rank_load(rings.back().blocks, load_ranks);
    std::string pairs, tiles;
    for (int r = 0; r < load_ranks; ++r) {
      pairs += (r ? " " : "") + std::to_string(l.pairs[std::size_t(r)]);
      tiles += (r ? " " : "") + std::to_string(l.tiles[std::size_t(r)]);
    }
    const auto [lo, hi] = std::minmax_element(l.tiles.begin(), l.tiles.end());
    load.add_row({to_string(layout), pairs, tiles, fixed(double(*hi) / double(*lo), 2)});
  }
  load.print(std::cout);
  if (!g_balance_csv.empty()) write_balance_csv(g_balance_csv, load_ranks, load_length, rings);
  std::cout << "\n";
}

// The report: the ring against chapter 06 on the whole sequence and fp64, every layout, both
// masks, merged on the CPU and by the merge kernel; the backward against chapter 10.
void report(const RingSpec& base, Backend backend, std::uint64_t seed) {
  const AttentionShape whole{base.bh, base.length, base.length, base.d};
  const AttentionInputs in = make_attention_inputs(ScoreKind::outliers, whole, base.scale, seed);
  std::cout << "bh " << base.bh << ", " << base.length << " positions, d " << base.d << ", "
            << base.ranks << " ranks; errors in units of o_weight (sum_j p_ij |v_jc|), outlier "
                             "inputs\n";
  Table t({"mask", "layout", "run", "error vs fp64", "floor (eq. 7)", "vs chapter 06",
           "max / min tiles", "ms"});
  for (bool causal : {false, true}) {
    RingSpec s = base;
    s.causal = causal;
    const ch09::DecodeReference r = ring_reference(in, s);
    CpuTimer timer;
    const ch06::Fa2Result fa2 = ch06::attention_fa2(in, whole, {s.scale, causal, s.br, s.bc});
    const double fa2_ms = timer.elapsed_ms();
    const ErrorReport fa2_err = ref::compare_weighted(fa2.o, r.o, r.o_weight);
    t.add_row({causal ? "causal" : "none", "-", "chapter 06, whole sequence", sci(fa2_err.max_abs),
               sci(ref::output_floor(r.score_error, s.length)), "-", "-", fixed(fa2_ms, 1)});
    for (Layout layout : all_layouts()) {
      s.layout = layout;
      std::vector<Backend> merges{Backend::cpu};
      if (backend != Backend::cpu) merges.push_back(backend);  // the merge kernel
      for (Backend merge : merges) {
        CpuTimer ring_timer;
        const RingForward f = ring_forward(shard_inputs(in, s), s, {}, merge);
        const double ms = ring_timer.elapsed_ms();
        const std::vector<float> o = unshard(f.o, s, s.d);
        const RankLoad l = rank_load(f.blocks, s.ranks);
        const auto [lo, hi] = std::minmax_element(l.tiles.begin(), l.tiles.end());
        t.add_row({causal ? "causal" : "none", to_string(layout),
                   std::string("ring, merged on ") + to_string(merge),
                   sci(ref::compare_weighted(o, r.o, r.o_weight).max_abs),
                   sci(ring_floors(r, s).o), sci(compare(o, fa2.o).max_abs),
                   *lo > 0 ? fixed(double(*hi) / double(*lo), 2) : std::string("-"),
                   fixed(ms, 1)});
      }
    }
  }
  t.print(std::cout);

  // The backward, causal zigzag, against chapter 10's tiled backward on the whole sequence.
  RingSpec s = base;
  s.causal = true;
  s.layout = Layout::zigzag;
  const std::vector<float> d_o = randn(whole.q_elems(), seed + 1);
  const ref::AttentionGrads g = ref::attention_backward(in, d_o, whole, s.scale, true);
  const ch06::Fa2Result fa2 = ch06::attention_fa2(in, whole, {s.scale, true, s.br, s.bc});
  const ch10::BackwardResult tiled =
      ch10::attention_backward_fa2(in, fa2.o, fa2.lse, d_o, whole, {s.scale, true, s.br, s.bc});
  const RingForward f = ring_forward(shard_inputs(in, s), s);
  const RingBackward b = ring_backward(shard_inputs(in, s), f.o, f.lse, shard(d_o, s, s.d), s);
  const ref::BackwardFloors floors = ring_backward_floors(g, ring_floors(ring_reference(in, s), s), s);
  std::cout << "\nThe backward, causal, zigzag: errors in units of the gradients' weights\n";
  Table bt({"gradient", "chapter 10, whole sequence", "ring", "floor (eq. 8)"});
  const auto row = [&](const char* name, const std::vector<float>& ch10_g,
                       const std::vector<std::vector<float>>& ring_g, const std::vector<double>& ref_g,
                       const std::vector<double>& weight, double floor) {
    bt.add_row({name, sci(ref::compare_weighted(ch10_g, ref_g, weight).max_abs),
                sci(ref::compare_weighted(unshard(ring_g, s, s.d), ref_g, weight).max_abs),
                sci(floor)});
  };
  row("dQ", tiled.grads.dq, b.dq, g.dq, g.dq_weight, floors.dq);
  row("dK", tiled.grads.dk, b.dk, g.dk, g.dk_weight, floors.dk);
  row("dV", tiled.grads.dv, b.dv, g.dv, g.dv_weight, floors.dv);
  bt.print(std::cout);
  std::cout << "\nOver processes: python/flash_workbook/ring.py runs the same ring on "
               "torch.distributed (gloo, NCCL),\n  each block through the PyTorch ops.\n";
}

void print_next() {
  std::cout << "\nThis is the last chapter so far: docs page \"Chapter 12: ring attention\" has "
               "the derivation,\n  the load balance and the overlap of compute and transfer.\n";
}

}  // namespace

int main(int argc, char** argv) {
  int bh = 2, length = 1000, d = 64, ranks = 4;
  Cli cli("ch12",
          "Chapter 12: ring attention, the sequence split across ranks and merged by chapter 09's "
          "monoid (the ranks simulated in one process).");
  cli.option("--bh", &bh, "batch x heads (default 2)", 64)
      .option("--length", &length, "the sequence's positions (default 1000)", 1 << 14)
      .option("--d", &d, "head dimension (default 64)", 256)
      .option("--ranks", &ranks, "ranks of the ring (default 4)", kMaxRanks)
      .option("--balance-csv", &g_balance_csv,
              "with the trace: write every layout's tiles per rank and step to FILE (the "
              "page's figure)");
  ProgramOptions options;
  options.offers_bench = false;
  if (const int code = parse_program(cli, argc, argv, &options); code >= 0) return code;
  if (options.list || options.profile || options.sass)
    return cli.error(std::string(options.list ? "--list" : options.profile ? "--profile" : "--sass") +
                     ": chapter 12 has no ladder of its own (its blocks are chapter 06's step; "
                     "over processes, the earlier chapters' kernels through the PyTorch ops)");
  if (std::int64_t(bh) * length * length > (std::int64_t(1) << 26))
    return cli.error("--bh x --length^2 at most 2^26: the fp64 reference of the report");
  return run_guarded(cli, [&] {
    print_intro();
    print_trace();
    if (options.trace_only) return 0;
    const RingSpec s{bh, length, d, ranks, Layout::zigzag, default_scale(d), false};
    report(s, options.backend, options.seed);
    print_sim_time_note(std::cout, options.backend);
    print_next();
    return 0;
  });
}
