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
#include "common/attention_profile.hpp"
#include "common/attention_report.hpp"
#include "common/chapter_program.hpp"
#include "common/cli.hpp"
#include "common/program.hpp"
#include "common/reference_attention.hpp"
#include "common/table.hpp"

namespace {

using namespace wb;
using namespace wb::ch05;

int kv_tiles(int lk) {
  return (lk + kKernelKeys - 1) / kKernelKeys;
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

// The chapter after this one, printed last.
void print_next() {
  std::cout << "Next: chapter 06, FlashAttention-2 (chapters/06_fa2_rescaled, docs page\n"
               "\"Chapter 06: FlashAttention-2, the rescaled accumulator\"): keep the output\n"
               "unnormalized, divide once at the end, and swap the loops so that O never\n"
               "leaves the chip until it is final.\n";
}

// Chapter 04's naive P V, the element-wise recurrence and FA1 on the CPU, then every rung of
// `ladder` (kernels of `backend`), on randn and on the uniform softmax of "ones".
void report(Backend backend, const Ladder<AttentionArgs>& ladder, AttentionShape shape,
            std::uint64_t seed) {
  std::cout << "O's error in units of w = sum_j p_ij |v_jc|: O itself can cancel to ~0 (\"ones\"\n"
               "averages randn values).\n";
  const float scale = default_scale(shape.d);
  const std::vector<AttentionStep> steps = {
      {"cpu ch04 naive P V (previous)",
       [&](const AttentionInputs& in) {
         return o_output(ch04::attention_naive(in, shape, scale).o);
       }},
      {"cpu element-wise, eq. (4)",
       [&](const AttentionInputs& in) {
         return o_output(attention_elementwise(in, shape, scale));
       }},
      {"cpu FA1 Algorithm 1, 8 x 32", [&](const AttentionInputs& in) {
         return o_output(attention_fa1(in, shape, scale, kKernelRows, kKernelKeys).o);
       }}};
  report_attention(backend, ladder, steps, {ScoreKind::randn, ScoreKind::ones}, shape, seed,
                   /*p=*/false, "previous");
  const int tiles = kv_tiles(shape.lk);
  std::cout << "  FA1's price: O and (m, l) make a round trip through global memory once per\n"
               "  K/V tile: "
            << tiles << " tiles x (2 d + " << kWarpSize
            << " x 2 + 2) = " << tiles * (2 * shape.d + 2 * kWarpSize + 2)
            << " floats per query row (O read and\n"
               "  written, (m, l) read by the row's lanes and written), against\n"
               "  (5 + ceil(d / 64)) x lk = "
            << (5 + (shape.d + 63) / 64) * shape.lk
            << " for writing and reading S and P in the baseline (eq. 7).\n"
               "  Larger K/V tiles cut it (FA1 sizes them to fill shared memory); chapter 06\n"
               "  removes it.\n";
}

}  // namespace

int main(int argc, char** argv) {
  Cli cli("ch05", "Chapter 05: FlashAttention-1, on the CPU and as a CUDA kernel.");
  AttentionShapeOptions shape_options(cli, {16, 1024, 1024, 64}, {2, 256, 1024, 64},
                                      ch04::kMaxBatchHeads, ch04::kMaxHeadDim);
  ProgramOptions options;
  options.offers_bench = false;  // chapter 06's --bench times the FA2 rungs that replace FA1
  if (const int code = parse_program(cli, argc, argv, &options); code >= 0) return code;
  const AttentionShape shape = shape_options.resolve(options.backend);
  ChapterSteps<AttentionArgs> steps =
      attention_steps(options, shape, /*causal=*/false, Dtype::fp32, report,
                      // FA1 at K/V tiles of 8 to 512 keys: T_c round trips per row
                      tile_sweep("fa1", "Bc", kKernelKeys, fa1_tiles_traffic));
  steps.check = [&] {
    return check_probabilities(cli, shape, 28, "the naive baseline stores P, 1 GiB");
  };
  return run_chapter_program(cli, options, {print_intro, print_trace, print_next}, steps,
                             make_kernel_ladder);
}
