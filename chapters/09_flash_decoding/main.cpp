// Chapter 09 program: Flash-Decoding, split-KV attention merged by the logsumexp monoid.
// `--help` lists the options.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "chapters/09_flash_decoding/decode_ladder.hpp"
#include "chapters/09_flash_decoding/decode_reference.hpp"
#include "chapters/09_flash_decoding/flash_decoding.hpp"
#include "common/attention_inputs.hpp"
#include "common/attention_report.hpp"
#include "common/bench.hpp"
#include "common/chapter_program.hpp"
#include "common/cli.hpp"
#include "common/ladder_profile.hpp"
#include "common/ladder_run.hpp"
#include "common/program.hpp"
#include "common/reference_attention.hpp"
#include "common/rung_buffers.hpp"
#include "common/table.hpp"
#include "common/timer.hpp"

namespace {

using namespace wb;
using namespace wb::ch09;

void print_intro() {
  std::cout
      << "Chapter 09: Flash-Decoding\n"
         "  Decoding asks a few query rows against a cache of thousands of keys. Chapter 06\n"
         "  gives each (Q tile, head) one block, so 32 heads of one query row make 32 blocks on\n"
         "  a GPU of 132 SMs, each walking its whole cache alone. Split the keys as well: each\n"
         "  range gives a partial result (O_s, lse_s), normalized by its own denominator, and\n"
         "  the partials merge exactly like chapter 03's (m, d): lse = log(e^lse_a + e^lse_b),\n"
         "  O = e^(lse_a - lse) O_a + e^(lse_b - lse) O_b, identity (-inf, 0), any split, any\n"
         "  order. Query heads that share a KV head (grouped-query attention) share its tiles.\n\n";
}

std::string vec2(const std::vector<float>& o) {
  return "(" + fixed(o[0]) + ", " + fixed(o[1]) + ")";
}

std::string lse_text(float lse) {
  return lse == -INFINITY ? std::string("-inf") : fixed(lse);
}

std::string g_dot_path;  // --dot: where the trace writes its merge trees (Graphviz)

// Chapter 05's example (one query, scores x, values in R^2) cut into ranges, one of them
// empty, and merged in two orders.
void print_merge_trace() {
  const std::vector<float>& x = kTraceScores;
  const int n = static_cast<int>(x.size());
  // d = 2: q = (1, 0) and k_j = (x_j, 0) give the scores x_j at scale 1.
  std::vector<float> k(std::size_t(2 * n), 0.f);
  for (int j = 0; j < n; ++j) k[std::size_t(2 * j)] = x[std::size_t(j)];
  const std::vector<float> q = {1.f, 0.f};
  const std::vector<int> bounds = {0, 2, 3, 3, 6};
  std::cout << "Trace: scores x = [1, 3, -2, 2.5, 6, 0], values v_j in R^2, cut at keys "
               "{0, 2, 3, 3, 6} (split 2 is empty)\n";
  Table t({"split", "keys", "lse_s = log sum e^x", "O_s = sum e^(x - lse_s) v"});
  std::vector<Partial> parts;
  for (std::size_t s = 0; s + 1 < bounds.size(); ++s) {
    parts.push_back(partial_attention(q.data(), k.data(), kTraceValues.data(), 2, bounds[s],
                                      bounds[s + 1], n - 1, 1.f));  // eq. (1)
    t.add_row({std::to_string(s),
               "[" + std::to_string(bounds[s]) + ", " + std::to_string(bounds[s + 1]) + ")",
               lse_text(parts.back().lse), vec2(parts.back().o)});
  }
  t.print(std::cout);
  ch03::MergeTree a = ch03::left_to_right_tree(4);
  ch03::MergeTree b;  // (3 (2 0)) 1
  const int l3 = b.add_leaf(3), l2 = b.add_leaf(2), l0 = b.add_leaf(0);
  b.add_merge(b.add_merge(l3, b.add_merge(l2, l0)), b.add_leaf(1));
  std::vector<std::string> titles;
  std::vector<std::vector<std::string>> labels;  // each node: (lse, O) as it ran
  for (const ch03::MergeTree* tree : {&a, &b}) {
    std::vector<Partial> nodes;
    ch03::reduce_tree(*tree, parts, merge_partials, identity_partial(2), &nodes);  // eq. (2)
    std::cout << "  merged as " << tree->to_string() << ":";
    titles.push_back("merged as " + tree->to_string());
    labels.emplace_back();
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const std::string value = "(" + lse_text(nodes[i].lse) + ", " + vec2(nodes[i].o) + ")";
      const bool leaf = tree->nodes[i].block >= 0;
      labels.back().push_back((leaf ? "split " + tree->to_string(int(i)) : std::string("merge")) +
                              "\\n" + value);
      if (!leaf) std::cout << "  " << tree->to_string(int(i)) << " -> " << value;
    }
    std::cout << "\n";
  }
  if (!g_dot_path.empty()) ch03::write_merge_trees_dot(g_dot_path, {&a, &b}, titles, labels);
  const Partial all = combine_partials(parts, 2);  // eq. (4)
  const Partial whole =
      partial_attention(q.data(), k.data(), kTraceValues.data(), 2, 0, n, n - 1, 1.f);
  std::cout << "  all at once, eq. (4): (" << lse_text(all.lse) << ", " << vec2(all.o)
            << "); no split: (" << lse_text(whole.lse) << ", " << vec2(whole.o)
            << "), chapter 06's O and logsumexp\n\n";
}

// The split count of eq. (7) on the decode shapes of the benchmark.
template <Backend B>
void print_split_rule(const char* device) {
  std::cout << "The split count, eq. (7), for stream_kv in fp16 on " << device << ":\n";
  Table t({"shape", "blocks / split", "wave", "tiles", "splits", "keys / split", "blocks"});
  for (int hkv : {32, 4})
    for (int lk : {4096, 32768, 131072}) {
      const DecodeShape s{1, 32, hkv, hkv == 32 ? 1 : 4, lk, 128};
      const Wave w = Kernels<B>::stream_wave(s, Dtype::fp16);
      const int splits = default_splits<B>(s, Dtype::fp16);
      const int tiles = (lk + kTileKeys - 1) / kTileKeys;
      t.add_row({to_string(s), std::to_string(base_blocks(s)),
                 std::to_string(w.sms) + " x " + std::to_string(w.blocks_per_sm),
                 std::to_string(tiles), std::to_string(splits),
                 std::to_string(split_begin(lk, splits, 1)),
                 std::to_string(base_blocks(s) * splits)});
    }
  t.print(std::cout);
  std::cout << "  A split adds blocks until one wave is full (floor: no second, nearly empty "
               "wave), keeping at least "
            << kMinTilesPerSplit << " tiles of " << kTileKeys << " keys each.\n\n";
}

void print_trace() {
  print_merge_trace();
  print_split_rule<Backend::sim>(
      "an H100 (the simulator's model: 132 SMs, shared memory "
      "and threads per SM)");
}

// The chapter after this one, printed last.
void print_next() {
  std::cout
      << "Next: chapter 10, the FlashAttention-2 backward pass (chapters/10_fa2_backward, "
         "docs page\n"
         "\"Chapter 10\"): the logsumexp this chapter merged lets it recompute P tile by tile.\n";
}

/// Seeded lengths in [1, lk], the first sequence full: a batch of a KV cache.
std::vector<int> ragged_lengths(int batch, int lk, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> lengths(std::size_t(batch), lk);
  for (int b = 1; b < batch; ++b) lengths[std::size_t(b)] = 1 + int(rng() % std::uint64_t(lk));
  return lengths;
}

struct Row {
  std::string name;
  DecodeResult out;
  double ms;
};

/// The kernels' buffers over `in`, its cache paged (eq. 9) into pages of `page_keys` keys
/// from a shuffled pool with one spare page when page_keys > 0.
struct KernelBuffers {
  PagedCache paged;
  DecodeBuffers buffers;
  std::optional<DeviceBuffer<int>> table;
  KernelBuffers(Backend backend, const AttentionInputs& in, const std::vector<int>& lengths,
                const DecodeShape& shape, int splits, bool causal, Dtype dtype, int page_keys,
                std::uint64_t seed)
      : paged(page_keys > 0 ? page_cache(in, shape, page_keys, 1, seed) : PagedCache{}),
        buffers(backend, page_keys > 0 ? AttentionInputs{in.q, paged.k, paged.v} : in, lengths,
                shape, splits, default_scale(shape.d), causal, dtype) {
    if (page_keys == 0) return;
    table.emplace(backend, paged.table);
    use_paged_cache(buffers.args, paged, table->data());
  }
};

// The previous step, the CPU split-KV (eq. 4 and a random merge tree) and every rung that
// takes the type, on `in` rounded to `dtype`, against the fp64 reference of those values.
void report_table(Backend backend, const Ladder<DecodeArgs>& ladder, const AttentionInputs& in,
                  const DecodeShape& shape, const std::vector<int>& lengths, int splits,
                  int page_keys, bool causal, Dtype dtype, std::uint64_t seed) {
  const DecodeOptions opt{default_scale(shape.d), causal};
  std::vector<Row> rows;
  const auto cpu = [&](const std::string& name, auto&& f) {
    CpuTimer timer;
    DecodeResult r = f();
    rows.push_back({name, std::move(r), timer.elapsed_ms()});
  };
  cpu("cpu ch06 FA2 per sequence (previous)",
      [&] { return attention_fa2_per_sequence(in, shape, lengths, opt); });
  const SplitRule split = [&](int len) { return even_splits(len, splits); };
  cpu("cpu split-KV, eq. (4)", [&] { return attention_split_kv(in, shape, lengths, opt, split); });
  std::mt19937_64 rng(seed);
  const ch03::MergeTree tree = ch03::random_tree(splits, rng);
  cpu("cpu split-KV, a random tree",
      [&] { return attention_split_kv(in, shape, lengths, opt, split, {&tree}); });
  std::vector<std::string> skipped;
  if (backend != Backend::cpu) {
    KernelBuffers kb(backend, in, lengths, shape, splits, causal, dtype, page_keys, seed);
    for (auto& run : run_ladder(
             backend, rungs_taking(ladder, dtype), kb.buffers,
             [&](const Rung<DecodeArgs>&) {
               const DecodeOut o = kb.buffers.download();
               return DecodeResult{o.o, o.lse};
             },
             &skipped))
      rows.push_back({run.name, std::move(run.out), run.ms});
  }
  const DecodeReference r = decode_reference(in, shape, lengths, opt);
  // A 16-bit O is rounded once: half an ulp of max(|O|, the smallest normal).
  std::vector<double> w = r.o_weight;
  for (double& x : w) x += ch06::smallest_normal(dtype);
  std::cout << (causal ? "Causal: " : "") << "O and logsumexp against fp64 on (" << to_string(shape)
            << "), lengths";
  for (int len : lengths) std::cout << " " << len;
  std::cout << ", " << splits << " splits, randn, " << to_string(dtype) << ", seed " << seed;
  if (page_keys > 0) std::cout << ", the kernels on a paged cache (pages of " << page_keys << ")";
  std::cout << ":\n";
  Table t({"implementation", "O err (units of w)", "O vs previous", "logsumexp err", "ms"});
  for (const Row& row : rows) {
    const ErrorReport o = ref::compare_weighted(row.out.o, r.o, w);
    const ErrorReport lse = compare(row.out.lse, r.lse);
    const ErrorReport prev = compare(row.out.o, rows.front().out.o);
    t.add_row({row.name, o.cell(), prev.cell(), lse.cell(), fixed(row.ms, 2)});
  }
  t.print(std::cout);
  print_skipped(skipped);
  // The combine kernel's depth of merges and stream_kv's (mma_kv's) inside a block (the random
  // tree's is larger, the CPU eq. (4)'s 1), and one rounding of a 16-bit O (mma_kv: and of P~).
  const int depth = combine_depth(splits) + kStreamBlockMerges;
  const double o_floor = split_floor(r.score_error, shape.lk, r.max_abs_partial_lse, depth, splits);
  std::cout << "  stated floors of the kernels: O " << sci(o_floor + ch06::unit_roundoff(dtype));
  if (dtype != Dtype::fp32)
    std::cout << " (mma_kv " << sci(o_floor + 2 * ch06::unit_roundoff(dtype)) << ")";
  std::cout << ", logsumexp "
            << sci(split_lse_floor(r.score_error, shape.lk, r.max_abs_partial_lse, depth, splits))
            << " (w = sum p |v|; flash_decoding.md, section \"Errors\")\n\n";
}

int run_bench(const Ladder<DecodeArgs>& ladder, const BenchOptions& options,
              const DecodeShape& shape, int splits, int page_keys, bool causal, Dtype dtype,
              std::uint64_t seed) {
  Bench bench(kChapter, "decode", options);
  const AttentionInputs in = {
      bench_input(std::int64_t(shape.batch) * shape.hq * shape.lq, shape.d, seed),
      bench_input(std::int64_t(shape.batch) * shape.hkv * shape.lk, shape.d, seed + 1),
      bench_input(std::int64_t(shape.batch) * shape.hkv * shape.lk, shape.d, seed + 2)};
  KernelBuffers kb(Backend::cuda, in, {}, shape, splits, causal, dtype, page_keys, seed);
  // Decoding is bound by reading the cache: K and V once, Q read and O written once.
  const double bytes =
      double(dtype_bytes(dtype)) * (2.0 * double(shape.kv_elems()) + 2.0 * double(shape.q_elems()));
  std::cout << "split_kv, stream_kv and mma_kv with " << splits
            << " splits per sequence (eq. 7 for stream_kv, or --splits)"
            << (page_keys > 0 ? ", the cache paged (eq. 9)" : "") << "\n";
  bench_ladder(bench, rungs_taking(ladder, dtype), kb.buffers.args,
               decode_shape_string(shape.batch, shape.hq, shape.hkv, shape.lq, shape.lk, shape.d) +
                   (causal ? " causal" : "") +
                   (page_keys > 0 ? " paged " + std::to_string(page_keys) : ""),
               Work::moving(bytes));
  return bench.finish();
}

// --profile: every rung of `ladder` (sim kernels) on randn inputs of `shape`, its traffic
// counted by the simulator against the rung's formula, every buffer named.
int run_profile(const Ladder<DecodeArgs>& ladder, const DecodeShape& shape,
                const std::vector<int>& lengths, int splits, int page_keys, bool causal, bool full,
                Dtype dtype, const ProgramOptions& options) {
  const AttentionInputs in = make_attention_inputs(
      ScoreKind::randn, {shape.batch, shape.hq * shape.lq, shape.hkv * shape.lk, shape.d},
      default_scale(shape.d), options.seed);
  KernelBuffers kb(Backend::sim, in, lengths, shape, splits, causal, dtype, page_keys,
                   options.seed);
  const DecodeBuffers& buffers = kb.buffers;
  // Names for the profile's per-buffer bytes and the access trace.
  if (kb.table) name_buffers(*kb.table, "block_table");
  name_buffers(buffers.q, "q", buffers.k, "k", buffers.v, "v", buffers.lengths, "lengths",
               buffers.o, "o", buffers.lse, "lse", buffers.o_partial, "o_partial",
               buffers.lse_partial, "lse_partial");
  return profile_ladder(ladder, buffers.args, shape.rows(), "row",
                        to_string(shape) + ", " + std::to_string(splits) + " splits" +
                            (full ? "" : ", ragged lengths") + (causal ? ", causal" : "") +
                            (page_keys > 0 ? ", pages of " + std::to_string(page_keys) : ""),
                        options.bench.csv_path);
}

}  // namespace

int main(int argc, char** argv) {
  Cli cli("ch09",
          "Chapter 09: Flash-Decoding, split-KV attention on the CPU and as CUDA kernels "
          "(fp32, fp16 and bf16 elements, float arithmetic).");
  int batch = 0, hq = 0, hkv = 0, lq = 0, lk = 0, d = 0, splits = 0, page_keys = 0;
  bool causal = false, full = false;
  std::string dtype = "fp32";
  cli.option("--batch", &batch, "sequences (default 3; 1 on cuda)", ch04::kMaxBatchHeads)
      .option("--hq", &hq, "query heads (default 8; 32 on cuda)")
      .option("--hkv", &hkv, "KV heads, dividing --hq (default 2; 32 on cuda)")
      .option("--lq", &lq, "query rows per head (default 3; 1 on cuda)")
      .option("--lk", &lk, "KV cache slots per sequence (default 700; 32768 on cuda)")
      .option("--d", &d, "head dimension (default 64; 128 on cuda)", ch04::kMaxHeadDim)
      .option("--splits", &splits, "key ranges per sequence (default: eq. (7) for the device)",
              kMaxSplits)
      .option("--page-keys", &page_keys,
              "the kernels read a paged copy of the cache, pages of this many keys (a multiple "
              "of 32) from a shuffled pool, eq. (9) (default: contiguous)",
              1 << 20)
      .flag("--full", &full,
            "every sequence uses all lk keys (default: seeded lengths in [1, lk], "
            "the first full; --bench always uses full ones)")
      .flag("--causal", &causal,
            "with --bench or --profile: the causal mask (the report runs both)");
  add_dot_option(cli, &g_dot_path, "two merge trees", "(lse, O)");
  cli.option("--dtype", &dtype, {"fp32", "fp16", "bf16"},
             "with --bench or --profile: the element type (default fp32)");
  ProgramOptions options;
  if (const int code = parse_program(cli, argc, argv, &options); code >= 0) return code;
  const bool gpu = options.backend == Backend::cuda;
  const DecodeShape shape{batch > 0 ? batch : (gpu ? 1 : 3), hq > 0 ? hq : (gpu ? 32 : 8),
                          hkv > 0 ? hkv : (gpu ? 32 : 2),    lq > 0 ? lq : (gpu ? 1 : 3),
                          lk > 0 ? lk : (gpu ? 32768 : 700), d > 0 ? d : (gpu ? 128 : 64)};
  const Dtype type = dtypes_of_option(dtype).front();
  const std::vector<int> lengths =
      full ? std::vector<int>{} : ragged_lengths(shape.batch, shape.lk, options.seed);
  // eq. (7) on the device that runs the kernels (the simulator models an H100)
  const auto split_count = [&] {
    return splits > 0 ? splits
                      : select_kernel_backend(gpu ? Backend::cuda : Backend::sim, [&](auto b) {
                          return default_splits<decltype(b)::value>(shape, type);
                        });
  };
  ChapterSteps<DecodeArgs> steps;
  steps.op = "decode";
  steps.check = [&] {
    if (shape.hq % shape.hkv != 0)
      return cli.error("--hq = " + std::to_string(shape.hq) +
                       " is not a multiple of --hkv = " + std::to_string(shape.hkv));
    if (shape.q_elems() > kMaxBenchElements || shape.kv_elems() > kMaxBenchElements)
      return cli.error("--batch x --hq x --lq x --d or --batch x --hkv x --lk x --d exceeds 2^31");
    if (const int code = check_mode_options(cli, options, causal, dtype != "fp32"); code >= 0)
      return code;
    if (page_keys % kPageKeyMultiple != 0)
      return cli.error("--page-keys = " + std::to_string(page_keys) + " is not a multiple of " +
                       std::to_string(kPageKeyMultiple) + " (a K/V tile would straddle two pages)");
    if (!options.bench.enabled && !options.profile &&
        std::size_t(shape.batch) * shape.hq * shape.lq * shape.lk > (std::size_t{1} << 28))
      return cli.error(
          "--batch x --hq x --lq x --lk exceeds this program's limit of 2^28 (the fp64 "
          "reference)");
    return -1;
  };
  steps.bench = [&](const Ladder<DecodeArgs>& ladder) {
    return run_bench(ladder, options.bench, shape, split_count(), page_keys, causal, type,
                     options.seed);
  };
  steps.profile = [&](const Ladder<DecodeArgs>& ladder) {
    return run_profile(ladder, shape, lengths, split_count(), page_keys, causal, full, type,
                       options);
  };
  steps.report = [&](const Ladder<DecodeArgs>& ladder) {
    const AttentionInputs randn = make_attention_inputs(
        ScoreKind::randn, {shape.batch, shape.hq * shape.lq, shape.hkv * shape.lk, shape.d},
        default_scale(shape.d), options.seed);
    const int n_splits = split_count();
    for (Dtype t : dtypes_of_option(options.backend == Backend::cpu ? "fp32" : "all"))
      for (bool c : {false, true})
        report_table(options.backend, ladder, ch06::round_inputs(randn, t), shape, lengths,
                     n_splits, page_keys, c, t, options.seed);
  };
  return run_chapter_program(cli, options, {print_intro, print_trace, print_next}, steps,
                             make_kernel_ladder);
}
