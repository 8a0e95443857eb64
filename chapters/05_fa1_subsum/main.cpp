// Chapter 05 program: FlashAttention-1, the SubSum recurrence. `--help` lists the options.
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "chapters/04_fused_qk_softmax/attention_naive.hpp"
#include "chapters/04_fused_qk_softmax/fused_softmax.hpp"
#include "chapters/05_fa1_subsum/fa1.hpp"
#include "common/attention_inputs.hpp"
#include "common/attention_report.hpp"
#include "common/cli.hpp"
#include "common/ladder_run.hpp"
#include "common/program.hpp"
#include "common/reference_attention.hpp"
#include "common/table.hpp"

namespace {

using namespace wb;
using namespace wb::ch05;

// The CPU steps' tiles in the report: the kernel's 8 query rows by 32 keys.
constexpr int kReportBr = 8;
constexpr int kReportBc = 32;

int kv_tiles(int lk) {
  return (lk + kReportBc - 1) / kReportBc;
}

void print_intro() {
  std::cout
      << "Chapter 05: FlashAttention-1, the SubSum recurrence\n"
         "  Chapter 04 never stored S, but still wrote P, lq x lk floats, only to multiply it\n"
         "  by V. Define O_i, the output of the first i keys normalized with their own\n"
         "  (m_i, d'_i). When key i arrives, the old output was normalized for m_{i-1} and\n"
         "  d'_{i-1}: multiplying it by d'_{i-1} e^(m_{i-1} - m_i) / d'_i moves it onto the new\n"
         "  statistics, and the new key adds e^(x_i - m_i) / d'_i times v_i. After the last key\n"
         "  O_i is the attention output: P is never stored. FA1 does this a tile at a time,\n"
         "  K/V tiles outer and Q tiles inner, O and (m, l) kept in global memory.\n\n";
}

// One query, six keys with two-component values, one key at a time.
void print_trace() {
  const std::vector<float>& x = kTraceScores;
  const std::vector<float>& v = kTraceValues;
  const AttentionShape shape{1, 1, static_cast<int>(x.size()), 2};
  constexpr float kTraceScale = 1.f;  // so that the scores are the x above
  const std::vector<float> q = {1.f, 0.f};
  std::vector<float> k;
  for (float xj : x) k.insert(k.end(), {xj, 0.f});  // s_j = q . k_j = x_j
  std::cout << "Trace: one query, scores x = [1, 3, -2, 2.5, 6, 0], values v_j in R^2\n";
  Table t({"j", "x_j", "v_j", "m_j", "d'_j", "keep d'_(j-1) e^(m_(j-1)-m_j) / d'_j",
           "add e^(x_j-m_j) / d'_j", "O_j"});
  MD md = ch03::md_identity();
  float o[2] = {0.f, 0.f};
  for (int j = 0; j < shape.lk; ++j) {
    const MD next = ch02::online_update(md, x[j]);  // eq. (2)
    const float keep = md.d * rescale(md.m, next.m) / next.d;
    const float add = std::exp(x[j] - next.m) / next.d;
    for (int c = 0; c < 2; ++c) o[c] = o[c] * keep + add * v[2 * j + c];  // eq. (4)
    t.add_row({std::to_string(j), fixed(x[j], 1),
               "(" + fixed(v[2 * j], 0) + ", " + fixed(v[2 * j + 1], 0) + ")", fixed(next.m, 1),
               fixed(next.d), fixed(keep), fixed(add),
               "(" + fixed(o[0]) + ", " + fixed(o[1]) + ")"});
    md = next;
  }
  t.print(std::cout);
  const ch04::NaiveAttention naive = ch04::attention_naive({q, k, v}, shape, kTraceScale);
  std::cout << "  P V of chapter 04's softmax: (" << fixed(naive.o[0]) << ", " << fixed(naive.o[1])
            << "), the same output; P was never stored.\n\n";
}

// Chapter 04's naive P V, the element-wise recurrence and FA1 on the CPU, then every rung of
// `ladder` (kernels of `backend`), on randn and on the uniform softmax of "ones".
void report(Backend backend, const Ladder<AttentionArgs>& ladder, AttentionShape shape,
            std::uint64_t seed) {
  const float scale = default_scale(shape.d);
  for (ScoreKind kind : {ScoreKind::randn, ScoreKind::ones}) {
    const AttentionInputs in = make_attention_inputs(kind, shape, scale, seed);
    const ref::Attention r = ref::attention(in, shape, scale, false, false);
    std::vector<AttentionRun> runs = {
        run_cpu_attention("cpu ch04 naive P V (previous)",
                          [&] { return o_output(ch04::attention_naive(in, shape, scale).o); }),
        run_cpu_attention("cpu element-wise, eq. (4)",
                          [&] { return o_output(attention_elementwise(in, shape, scale)); }),
        run_cpu_attention("cpu FA1 Algorithm 1, 8 x 32", [&] {
          return o_output(attention_fa1(in, shape, scale, kReportBr, kReportBc).o);
        })};
    std::vector<std::string> skipped;
    run_attention_ladder(backend, ladder, in, shape, scale, false, Dtype::fp32, &runs, &skipped);
    std::cout << "O against the fp64 reference on (" << to_string(shape) << ") " << to_string(kind)
              << ", seed " << seed << ":\n";
    print_attention_table(std::cout, runs, r, {false, r.o_weight, "previous"}, shape, false);
    print_skipped(skipped);
    std::cout << "  w = sum_j p_ij |v_jc|: O itself can cancel to ~0 (\"ones\" averages randn\n"
                 "  values). Stated floor for these inputs: "
              << sci(ref::output_floor(r.score_error, shape.lk)) << "\n\n";
  }
  const int tiles = kv_tiles(shape.lk);
  std::cout << "  FA1's price: O and (m, l) make a round trip through global memory once per\n"
               "  K/V tile: "
            << tiles << " tiles x 2 x (d + 2) = " << tiles * 2 * (shape.d + 2)
            << " floats per query row, against 4 x lk = " << 4 * shape.lk
            << "\n  for writing and reading S and P. Larger K/V tiles cut it (FA1 sizes them to\n"
               "  fill shared memory); chapter 06 removes it.\n";
  print_sim_time_note(std::cout, backend);
  std::cout << '\n';
}

}  // namespace

int main(int argc, char** argv) {
  int bh = 0, lq = 0, lk = 0, d = 64;
  Cli cli("ch05", "Chapter 05: FlashAttention-1, on the CPU and as a CUDA kernel.");
  cli.option("--bh", &bh, "batch x heads (default 16 on cuda, 2 otherwise)", ch04::kMaxBatchHeads)
      .option("--lq", &lq, "query rows (default 1024 on cuda, 256 otherwise)")
      .option("--lk", &lk, "key rows (default 1024)")
      .option("--d", &d, "head dimension (default 64)", ch04::kMaxHeadDim);
  ProgramOptions options;
  options.offers_bench = false;  // chapter 06's --bench times the FA2 rungs that replace FA1
  if (const int code = parse_program(cli, argc, argv, &options); code >= 0) return code;
  const auto make_ladder = [](auto b) { return kernel_ladder<decltype(b)::value>(); };
  if (options.list) return list_ladder(options, "05_fa1_subsum", "attention", make_ladder);
  const Backend backend = options.backend;
  const std::uint64_t seed = options.seed;
  const bool gpu = backend == Backend::cuda;
  const AttentionShape shape{bh > 0 ? bh : (gpu ? 16 : 2), lq > 0 ? lq : (gpu ? 1024 : 256),
                             lk > 0 ? lk : 1024, d};
  constexpr std::size_t kMaxProbabilities = std::size_t{1} << 28;  // naive P: 1 GiB of float
  if (shape.p_elems() > kMaxProbabilities)
    return cli.error("--bh x --lq x --lk = " + std::to_string(shape.p_elems()) +
                     " exceeds this program's limit of 2^28 (the naive baseline stores P)");

  print_intro();
  print_trace();
  if (options.trace_only) return 0;
  const Ladder<AttentionArgs> ladder = select_kernel_backend(backend, make_ladder);
  const int code = run_guarded(cli, [&] {
    report(backend, ladder, shape, seed);
    return 0;
  });
  if (code != 0) return code;
  std::cout << "Next: chapter 06, FlashAttention-2 (chapters/06_fa2_rescaled, docs page\n"
               "\"Chapter 06: FlashAttention-2, the rescaled accumulator\"): keep the output\n"
               "unnormalized, divide once at the end, and swap the loops so that O never\n"
               "leaves the chip until it is final.\n";
  return 0;
}
