// Chapter 04 program: fused QK^T-softmax. Run it after building; `--help` lists the options.
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "chapters/04_fused_qk_softmax/attention_naive.hpp"
#include "chapters/04_fused_qk_softmax/fused_softmax.hpp"
#include "common/attention_inputs.hpp"
#include "common/attention_profile.hpp"
#include "common/attention_report.hpp"
#include "common/chapter_program.hpp"
#include "common/cli.hpp"
#include "common/compare.hpp"
#include "common/program.hpp"
#include "common/reference_attention.hpp"
#include "common/table.hpp"

namespace {

using namespace wb;
using namespace wb::ch04;

void print_intro() {
  std::cout
      << "Chapter 04: fused QK^T-softmax\n"
         "  Attention's softmax runs over the scores S = scale Q K^T, an lq x lk matrix per\n"
         "  head: 64 MiB in float at lq = lk = 4096. Written to memory and read back three\n"
         "  times (chapter 01) or twice (chapter 02), S dominates the traffic. Fusing computes\n"
         "  S tile by tile from Q and K and never stores it; but a tile only knows its own\n"
         "  keys, so each tile yields its statistics (m~, d~) and chapter 03's merge folds them\n"
         "  into the row's running (m, d), in any tiling. A second sweep recomputes the scores\n"
         "  and writes P = e^(s - m) / d.\n\n";
}

// One query row, ten keys in tiles of four: the tile statistics and the running merge.
void print_trace() {
  const std::vector<float> x = {1.f, 3.f, -2.f, 2.5f, 0.5f, 4.f, 1.f, -1.f, 6.f, 0.f};
  const AttentionShape shape{1, 1, static_cast<int>(x.size()), 2};
  constexpr int kTraceTile = 4;
  constexpr float kTraceScale = 1.f;  // so that the scores are the x above
  const std::vector<float> q = {1.f, 0.5f};
  std::vector<float> k;
  for (float xj : x) k.insert(k.end(), {xj, 0.f});  // s_j = q . k_j = x_j
  std::cout << "Trace: one query, keys in tiles of " << kTraceTile
            << ", scores s = [1, 3, -2, 2.5, 0.5, 4, 1, -1, 6, 0]\n";
  Table t({"tile", "scores", "m~ (tile)", "d~ (tile)", "m: before -> after",
           "rescale e^(m_before - m)", "d after merge"});
  MD md = ch03::md_identity();
  std::vector<float> s(kTraceTile);
  for (int j0 = 0; j0 < shape.lk; j0 += kTraceTile) {
    const int cols = std::min(kTraceTile, shape.lk - j0);
    score_tile(q.data(), k.data() + j0 * shape.d, 1, cols, shape.d, kTraceScale, s.data());
    MD tile = ch03::md_identity();
    std::string scores;
    for (int c = 0; c < cols; ++c) {
      tile = ch02::online_update(tile, s[c]);  // eq. (4)
      scores += (c ? ", " : "") + fixed(s[c], 1);
    }
    const MD before = md;
    md = ch03::md_merge(md, tile);  // eq. (5)
    const float rescale = before.m == -INFINITY ? 0.f : std::exp(before.m - md.m);
    t.add_row({std::to_string(j0 / kTraceTile), scores, fixed(tile.m, 1), fixed(tile.d),
               fixed(before.m, 1) + " -> " + fixed(md.m, 1), fixed(rescale), fixed(md.d)});
  }
  t.print(std::cout);
  const FusedSoftmax fused = softmax_qk_fused({q, k, k}, shape, kTraceScale, 1, kTraceTile);
  const NaiveAttention naive = attention_naive({q, k, k}, shape, kTraceScale);
  std::cout << "  P (fused, eq. 6):";
  for (float p : fused.p) std::cout << ' ' << fixed(p, 4);
  std::cout << "\n  max |fused P - naive P| = " << sci(compare(fused.p, naive.p).max_abs)
            << ": the same softmax, the 1 x 10 scores never stored.\n\n";
}

// The chapter after this one, printed last.
void print_next() {
  std::cout << "Next: chapter 05, FlashAttention-1 (chapters/05_fa1_subsum, docs page\n"
               "\"Chapter 05: FlashAttention-1, the SubSum recurrence\"): the output O = P V\n"
               "carried through the same tiles, so that P is never stored either.\n";
}

// The naive and fused CPU steps, then every rung of `ladder` (kernels of `backend`), on randn
// and on scores near 1e4.
void report(Backend backend, const Ladder<AttentionArgs>& ladder, AttentionShape shape,
            std::uint64_t seed) {
  const float scale = default_scale(shape.d);
  const std::vector<AttentionStep> steps = {
      {"cpu naive (Eigen, S stored)",
       [&](const AttentionInputs& in) { return p_output(attention_naive(in, shape, scale).p); }},
      {"cpu fused 8 x 32 tiles", [&](const AttentionInputs& in) {
         return p_output(softmax_qk_fused(in, shape, scale, kKernelRows, kKernelKeys).p);
       }}};
  report_attention(backend, ladder, steps, {ScoreKind::randn, ScoreKind::large_offset}, shape, seed,
                   /*p=*/true, "naive");
  std::cout << "  Scores held at once, per head: naive " << std::size_t(shape.lq) * shape.lk
            << " floats (the whole S), fused " << kKernelRows * kKernelKeys
            << " (one tile). Chapter 06 measures the difference.\n";
}

}  // namespace

int main(int argc, char** argv) {
  Cli cli("ch04", "Chapter 04: fused QK^T-softmax, on the CPU and as a CUDA kernel.");
  AttentionShapeOptions shape_options(cli, {8, 1024, 1024, 64}, {1, 256, 1024, 64}, kMaxBatchHeads,
                                      kMaxHeadDim);
  ProgramOptions options;
  options.offers_bench = false;  // chapter 06's --bench times the FA2 rungs that replace it
  if (const int code = parse_program(cli, argc, argv, &options); code >= 0) return code;
  const AttentionShape shape = shape_options.resolve(options.backend);
  ChapterSteps<AttentionArgs> steps =
      attention_steps(options, shape, /*causal=*/false, Dtype::fp32, report);
  // P in fp64: 2^26 probabilities are 512 MiB.
  steps.check = [&] {
    return check_probabilities(cli, shape, 26, "the fp64 reference keeps them all");
  };
  return run_chapter_program(cli, options, {print_intro, print_trace, print_next}, steps,
                             make_kernel_ladder);
}
