// Chapter 06 program: FlashAttention-2, the rescaled accumulator. `--help` lists the options.
//
// It also measures the extra memory of the naive attention and of FA2 on the CPU
// (memory_probe.hpp): this file replaces the global operator new and delete with counting
// versions, which keep the peak of live heap bytes during a call.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "chapters/04_fused_qk_softmax/attention_naive.hpp"
#include "chapters/05_fa1_subsum/fa1.hpp"
#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "chapters/06_fa2_rescaled/memory_probe.hpp"
#include "common/attention_inputs.hpp"
#include "common/attention_profile.hpp"
#include "common/attention_report.hpp"
#include "common/bench.hpp"
#include "common/chapter_program.hpp"
#include "common/cli.hpp"
#include "common/ladder_run.hpp"
#include "common/program.hpp"
#include "common/reference_attention.hpp"
#include "common/rung_buffers.hpp"
#include "common/table.hpp"

// ------------------------------------------------------------------------------------------
// A counting allocator: every operator new of this program records its size in a header.
// ------------------------------------------------------------------------------------------

namespace {
wb::ch06::HeapCount g_heap;                                 // single-threaded program
constexpr std::size_t kHeader = alignof(std::max_align_t);  // keeps the block's alignment

// Not inlined: GCC would otherwise see the header arithmetic on a pointer it believes was
// returned by a plain operator new and warn about an out-of-bounds access.
[[gnu::noinline]] void* counted_alloc(std::size_t n) {
  void* base = std::malloc(n + kHeader);
  if (base == nullptr) return nullptr;
  *static_cast<std::size_t*>(base) = n;
  g_heap.live += n;
  g_heap.peak = std::max(g_heap.peak, g_heap.live);
  return static_cast<char*>(base) + kHeader;
}
[[gnu::noinline]] void counted_free(void* p) noexcept {
  if (p == nullptr) return;
  char* base = static_cast<char*>(p) - kHeader;
  g_heap.live -= *reinterpret_cast<std::size_t*>(base);
  std::free(base);
}
}  // namespace

void* operator new(std::size_t n) {
  if (void* p = counted_alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  return operator new(n);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return counted_alloc(n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return counted_alloc(n);
}
void operator delete(void* p) noexcept {
  counted_free(p);
}
void operator delete[](void* p) noexcept {
  counted_free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  counted_free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  counted_free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  counted_free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  counted_free(p);
}

namespace {

using namespace wb;
using namespace wb::ch06;

constexpr int kCpuTile = 64;  // the CPU FA2's Br = Bc in the report

void print_intro() {
  std::cout
      << "Chapter 06: FlashAttention-2, the rescaled accumulator\n"
         "  Chapter 05's output is normalized after every key: divided by d'_i, only to be\n"
         "  multiplied by d'_i again at the next step. Multiply the recurrence through by\n"
         "  d'_i: the unnormalized accumulator SS_i = SS_(i-1) e^(m_(i-1) - m_i) + e^(x_i - m_i) "
         "v_i\n"
         "  needs one rescale per tile and ONE division, at the very end. Then swap the loops:\n"
         "  with the Q tile outer, a block keeps its SS, m and l in registers from the first\n"
         "  K/V tile to the last, and blocks are independent: one per (Q tile, head). It also\n"
         "  returns logsumexp = m + log l (all the backward pass needs), applies the softmax\n"
         "  scale, and with the causal mask never visits the tiles above the diagonal.\n\n";
}

// One query with scores x, keys with two-component values v, in tiles of two.
void print_accumulator_trace(const std::vector<float>& x, const std::vector<float>& v) {
  constexpr int kTraceTile = 2;
  std::cout << "Trace: one query, scores x = [1, 3, -2, 2.5, 6, 0], values v_j in R^2, tiles of "
            << kTraceTile << " keys\n";
  Table t({"tile", "scores", "m_new", "alpha = e^(m - m_new)", "rowsum P~", "l", "SS"});
  float m = -INFINITY, l = 0.f, ss[2] = {0.f, 0.f};
  for (std::size_t j0 = 0; j0 < x.size(); j0 += kTraceTile) {
    float m_new = m;
    for (int c = 0; c < kTraceTile; ++c) m_new = std::max(m_new, x[j0 + c]);
    const float alpha = ch05::rescale(m, m_new);
    float rowsum = 0.f;
    for (int t2 = 0; t2 < 2; ++t2) ss[t2] *= alpha;
    for (int c = 0; c < kTraceTile; ++c) {
      const float p = std::exp(x[j0 + c] - m_new);
      rowsum += p;
      for (int t2 = 0; t2 < 2; ++t2) ss[t2] += p * v[2 * (j0 + c) + t2];
    }
    l = l * alpha + rowsum;
    m = m_new;
    t.add_row({std::to_string(j0 / kTraceTile), fixed(x[j0], 1) + ", " + fixed(x[j0 + 1], 1),
               fixed(m, 1), fixed(alpha), fixed(rowsum), fixed(l),
               "(" + fixed(ss[0]) + ", " + fixed(ss[1]) + ")"});
  }
  t.print(std::cout);
  std::cout << "  O = SS / l = (" << fixed(ss[0] / l) << ", " << fixed(ss[1] / l)
            << "), chapter 05's output; logsumexp = m + log l = " << fixed(m + std::log(l))
            << "\n\n";
}

// Which (query, key) pairs a causal Q tile sees, masks, or skips with its whole K/V tile.
void print_causal_map(int lq, int lk, int br, int bc) {
  std::cout << "Causal mask, lq = " << lq << ", lk = " << lk << ", tiles of " << br << " x " << bc
            << " (bottom-right aligned: query i sees key j iff j <= i " << (lk >= lq ? "+ " : "- ")
            << std::abs(lk - lq) << "):\n"
            << "  x seen, o masked inside a visited tile, . in a skipped tile\n";
  for (int i = 0; i < lq; ++i) {
    const int i0 = i / br * br;
    const int tiles = kv_tiles_to_visit(i0, std::min(br, lq - i0), lq, lk, bc, true);
    std::cout << "  q" << i << (i < 10 ? "  " : " ");
    for (int j = 0; j < lk; ++j) {
      if (j % bc == 0) std::cout << '|';
      const bool visited = j / bc < tiles;
      std::cout << (!visited ? '.' : ch04::causal_visible(i, j, lq, lk) ? 'x' : 'o');
    }
    const bool fully_masked = i + (lk - lq) < 0;  // not even key 0 is visible
    std::cout << "|" << (fully_masked ? "  fully masked: O = 0, logsumexp = -inf" : "") << '\n';
  }
  std::cout << '\n';
}

void print_trace() {
  print_accumulator_trace(kTraceScores, kTraceValues);  // chapter 05's trace, in tiles
  print_causal_map(6, 10, 2, 4);
  print_causal_map(8, 5, 2, 2);
}

// The chapter after this one, printed last.
void print_next() {
  std::cout << "Next: chapter 07, Welford LayerNorm (chapters/07_welford_layernorm, docs page\n"
               "\"Chapter 07: Welford LayerNorm\"): the same monoid idea, for mean and variance.\n";
}

// The previous step (FA1; the naive attention with a -inf mask when causal), the CPU FA2 and
// every rung of `ladder` that takes `dtype`, on Q, K, V of `in` (rounded to `dtype`), against
// the fp64 attention of those very values. A 16-bit type that no rung takes (d = 59 on tensor
// cores) prints the rungs' reasons instead of a table, and returns false.
bool report_table(Backend backend, const Ladder<AttentionArgs>& ladder, const AttentionInputs& in,
                  AttentionShape shape, bool causal, Dtype dtype, std::uint64_t seed) {
  const float scale = default_scale(shape.d);
  const std::vector<AttentionStep> steps = {
      causal
          ? AttentionStep{"cpu naive, -inf mask (previous)",
                          [&](const AttentionInputs& x) {
                            return o_output(ch04::attention_naive(x, shape, scale, true).o);
                          }}
          : AttentionStep{"cpu ch05 FA1 (previous)",
                          [&](const AttentionInputs& x) {
                            return o_output(ch05::attention_fa1(x, shape, scale, ch05::kKernelRows,
                                                                ch05::kKernelKeys)
                                                .o);
                          }},
      {"cpu FA2, 64 x 64 tiles", [&](const AttentionInputs& x) {
         Fa2Result fa2 = attention_fa2(x, shape, {scale, causal, kCpuTile, kCpuTile});
         return o_output(std::move(fa2.o), std::move(fa2.lse));
       }}};
  std::vector<std::string> skipped;
  const std::vector<AttentionRun> runs = run_attention_table(
      backend, steps, rungs_taking(ladder, dtype), in, shape, scale, causal, dtype, &skipped);
  const bool rounded = dtype != Dtype::fp32;
  if (rounded && runs.size() == steps.size()) {
    std::cout << to_string(dtype) << " on tensor cores:\n";
    print_skipped(skipped);
    return false;
  }
  if (rounded && !causal)
    std::cout << "On tensor cores, Q, K, V rounded to " << to_string(dtype)
              << "; the CPU steps and fp64 run on the same rounded\n  values. O's error in "
                 "units of w = sum p|v| + N (1 + sum |v|), eq. (8); its floor adds 2u\n  for "
                 "rounding P~ and O (u = 2^-11 in fp16, 2^-8 in bf16).\n";
  std::cout << (causal ? "Causal: " : "") << "O and logsumexp against fp64 on (" << to_string(shape)
            << ") randn, " << to_string(dtype) << ", seed " << seed << ":\n";
  const ref::Attention r = ref::attention(in, shape, scale, causal, false);
  // 2u = 0 in fp32: nothing is rounded.
  const AttentionMeasure measure{
      false, rounded ? tensor_core_weight(r.o_weight, in, shape, dtype) : r.o_weight, "previous",
      2.0 * unit_roundoff(dtype)};
  print_attention_table(std::cout, runs, skipped, r, measure, shape, causal);
  return true;
}

void report_errors(Backend backend, const Ladder<AttentionArgs>& ladder, AttentionShape shape,
                   std::uint64_t seed) {
  const AttentionInputs randn =
      make_attention_inputs(ScoreKind::randn, shape, default_scale(shape.d), seed);
  // fp32, and on a kernel backend the 16-bit types of the tensor-core rung.
  for (Dtype dtype : dtypes_of_option(backend == Backend::cpu ? "fp32" : "all")) {
    const AttentionInputs in = round_inputs(randn, dtype);
    for (bool causal : {false, true})
      if (!report_table(backend, ladder, in, shape, causal, dtype, seed)) break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  int memory_length = 4096;
  bool causal = false;
  std::string dtype = "fp32";
  constexpr int kMaxMemoryLength = 16384;  // S at 16384^2 is 1 GiB
  Cli cli("ch06",
          "Chapter 06: FlashAttention-2, on the CPU and as CUDA kernels (fp32, and fp16 "
          "and bf16 on tensor cores).");
  AttentionShapeOptions shape_options(cli, {16, 4096, 4096, 64}, {2, 256, 1024, 64},
                                      ch04::kMaxBatchHeads, ch04::kMaxHeadDim,
                                      "; the tensor-core rung takes 64 or 128");
  cli.option("--memory-length", &memory_length,
             "lq = lk of the CPU memory and time comparison (default 4096)", kMaxMemoryLength)
      .flag("--causal", &causal, "with --bench: time the causal attention (the report runs both)")
      .option("--dtype", &dtype, {"fp32", "fp16", "bf16"},
              "with --bench: the element type; the rungs that take it are timed (fp32: fa2, "
              "fp16 or bf16: fa2_tensor_core; default fp32)");
  ProgramOptions options;
  if (const int code = parse_program(cli, argc, argv, &options); code >= 0) return code;
  const AttentionShape shape = shape_options.resolve(options.backend);
  const Dtype type = dtypes_of_option(dtype).front();
  // The error tables, then the CPU's extra memory (memory_probe.hpp).
  const AttentionReport report = [&](Backend backend, const Ladder<AttentionArgs>& ladder,
                                     AttentionShape s, std::uint64_t seed) {
    report_errors(backend, ladder, s, seed);
    report_memory(memory_length, seed, g_heap);
  };
  ChapterSteps<AttentionArgs> steps =
      attention_steps(options, shape, causal, type, report,
                      // FA2 at Q tiles of 8 to 512 rows: K and V read once per Q tile
                      tile_sweep("fa2", "Br", kKernelRows, [](const AttentionArgs& a, int br) {
                        return fa2_tiles_traffic(a, br, kKernelKeys);
                      }));
  steps.check = [&] {
    if (const int code = check_mode_options(cli, options, causal, dtype != "fp32"); code >= 0)
      return code;
    return check_attention_size(cli, options, shape, 28, "the naive baseline stores P, 1 GiB");
  };
  return run_chapter_program(cli, options, {print_intro, print_trace, print_next}, steps,
                             make_kernel_ladder);
}
