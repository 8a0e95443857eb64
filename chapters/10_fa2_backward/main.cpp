// Chapter 10 program: the FlashAttention-2 backward pass, P recomputed from the logsumexp.
// `--help` lists the options.
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "chapters/04_fused_qk_softmax/attention_naive.hpp"
#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "chapters/10_fa2_backward/backward_floors.hpp"
#include "chapters/10_fa2_backward/fa2_backward.hpp"
#include "common/attention_inputs.hpp"
#include "common/attention_report.hpp"
#include "common/bench.hpp"
#include "common/chapter_program.hpp"
#include "common/cli.hpp"
#include "common/inputs.hpp"
#include "common/ladder_profile.hpp"
#include "common/ladder_run.hpp"
#include "common/program.hpp"
#include "common/reference_attention.hpp"
#include "common/reference_attention_backward.hpp"
#include "common/rung_buffers.hpp"
#include "common/table.hpp"
#include "common/timer.hpp"

namespace {

using namespace wb;
using namespace wb::ch10;

constexpr double kMiB = 1024.0 * 1024.0;

void print_intro() {
  std::cout
      << "Chapter 10: the FlashAttention-2 backward pass\n"
         "  Training needs dQ, dK, dV. The standard backward reads the P that the forward\n"
         "  stored: lq x lk per head. FA2 stored only O and the logsumexp, and that is enough:\n"
         "  P_ij = e^(s_ij - lse_i) is recomputed tile by tile, D_i = rowsum(dO_i * O_i) replaces\n"
         "  rowsum(P_i * dP_i), and dS = P * (dP - D) feeds dQ = scale dS K, dK = scale dS^T Q,\n"
         "  dV = P^T dO. A block owns a K/V tile (its dK, dV stay on chip) and walks the Q\n"
         "  tiles; dQ, which every K/V tile adds to, is accumulated with atomics.\n\n";
}

/// The forward's O and logsumexp (chapter 06's CPU FA2) and a seeded dO for `qkv`, and with
/// `keep_p` in fp32 the P a standard forward stores (chapter 04's naive attention: the standard
/// rung's input); for a 16-bit type Q, K, V, dO and O rounded to it (what its kernels read, and
/// what the CPU steps and the fp64 reference then run on).
BackwardInputs forward_for(const AttentionInputs& qkv_in, AttentionShape shape, float scale,
                           bool causal, std::uint64_t seed, Dtype type = Dtype::fp32,
                           bool keep_p = true) {
  const AttentionInputs qkv = ch06::round_inputs(qkv_in, type);
  const ch06::Fa2Result fwd = ch06::attention_fa2(qkv, shape, {scale, causal, 16, 32});
  BackwardInputs in{qkv,
                    round_elements(fwd.o, type),
                    fwd.lse,
                    round_elements(randn(shape.q_elems(), seed + 1), type),
                    {}};
  if (keep_p && type == Dtype::fp32) in.p = ch04::attention_naive(qkv, shape, scale, causal).p;
  return in;
}

// One query row sees three keys; d = 2. P recomputed from lse, dP, the two ways to D, dS.
void print_trace() {
  const AttentionShape s{1, 2, 3, 2};
  const AttentionInputs qkv = {
      {1.f, 0.f, 0.f, 2.f}, {1.f, 0.f, 0.f, 1.f, 2.f, 1.f}, {1.f, 0.f, 0.f, 1.f, 2.f, 2.f}};
  BackwardInputs in = forward_for(qkv, s, 1.f, false, 0);
  in.d_o = {1.f, -1.f, 0.5f, 2.f};
  std::cout << "Trace: scale 1, q_0 = (1, 0), q_1 = (0, 2); k = (1, 0), (0, 1), (2, 1); "
               "v = (1, 0), (0, 1), (2, 2); dO_0 = (1, -1), dO_1 = (0.5, 2)\n";
  Table t({"i", "j", "s_ij", "P_ij = e^(s - lse_i), eq. (6)", "dP_ij = dO_i . v_j, eq. (2)",
           "dS_ij = P (dP - D_i), eq. (4)"});
  Table rows({"i", "lse_i", "D_i = dO_i . O_i, eq. (3)", "sum_j P_ij dP_ij"});
  for (int i = 0; i < s.lq; ++i) {
    const float* q = qkv.q.data() + 2 * i;
    const float* o = in.o.data() + 2 * i;
    const float* d_o = in.d_o.data() + 2 * i;
    const float d_i = d_o[0] * o[0] + d_o[1] * o[1];
    float pdp = 0.f;
    for (int j = 0; j < s.lk; ++j) {
      const float* k = qkv.k.data() + 2 * j;
      const float* v = qkv.v.data() + 2 * j;
      const float sc = q[0] * k[0] + q[1] * k[1];
      const float p = recomputed_p(sc, in.lse[std::size_t(i)], false);
      const float dp = d_o[0] * v[0] + d_o[1] * v[1];
      pdp += p * dp;
      t.add_row({std::to_string(i), std::to_string(j), fixed(sc), fixed(p), fixed(dp),
                 fixed(p * (dp - d_i))});
    }
    rows.add_row({std::to_string(i), fixed(in.lse[std::size_t(i)]), fixed(d_i), fixed(pdp)});
  }
  t.print(std::cout);
  rows.print(std::cout);
  const BackwardOut g =
      attention_backward_fa2(in.qkv, in.o, in.lse, in.d_o, s, {1.f, false, 1, 2}).grads;
  const ref::AttentionGrads r = ref::attention_backward(qkv, in.d_o, s, 1.f, false);
  std::cout << "  dV_0 = sum_i P_i0 dO_i = (" << fixed(g.dv[0]) << ", " << fixed(g.dv[1])
            << "), dQ_0 = sum_j dS_0j k_j = (" << fixed(g.dq[0]) << ", " << fixed(g.dq[1])
            << "); fp64: (" << fixed(r.dv[0]) << ", " << fixed(r.dv[1]) << "), (" << fixed(r.dq[0])
            << ", " << fixed(r.dq[1]) << ")\n\n";
}

// The chapter after this one, printed last.
void print_next() {
  std::cout
      << "This is the workbook's last chapter so far. The chapter map on the docs main page (and\n"
         "README.md) leads back to every step, from chapter 01's safe softmax on.\n";
}

// The extra memory of each CPU step on one head of lq = lk = length, d = 64.
void print_memory(int length, std::uint64_t seed) {
  const AttentionShape s{1, length, length, 64};
  const float scale = default_scale(s.d);
  const BackwardInputs in = forward_for(make_attention_inputs(ScoreKind::randn, s, scale, seed), s,
                                        scale, false, seed, Dtype::fp32, /*keep_p=*/false);
  std::size_t stored = 0;
  CpuTimer t_std;
  const BackwardOut standard =
      attention_backward_standard(in.qkv, in.d_o, s, scale, false, &stored);
  const double ms_std = t_std.elapsed_ms();
  constexpr int kTile = 64;
  CpuTimer t_fa2;
  const BackwardOut tiled =
      attention_backward_fa2(in.qkv, in.o, in.lse, in.d_o, s, {scale, false, kTile, kTile}).grads;
  const double ms_fa2 = t_fa2.elapsed_ms();
  // D (lq floats), one tile of P and dS, one K/V tile's dK and dV; lse is the forward's.
  const double scratch = sizeof(float) * (double(s.lq) + 2.0 * kTile * kTile + 2.0 * kTile * s.d);
  std::cout << "Memory beyond inputs and outputs, one head, lq = lk = " << length
            << ", d = 64, on the CPU:\n";
  Table t({"step", "holds", "bytes", "ms"});
  t.add_row({"standard (P stored)", "P and dP / dS: 2 lq lk floats",
             fixed(stored / kMiB, 1) + " MiB", fixed(ms_std, 0)});
  t.add_row({"FA2, 64 x 64 tiles", "D: lq floats; a tile of P, dS; dK, dV of a K/V tile",
             fixed(scratch / 1024.0, 1) + " KiB", fixed(ms_fa2, 0)});
  t.print(std::cout);
  std::cout << "  max |dQ_standard - dQ_FA2| = " << sci(compare(tiled.dq, standard.dq).max_abs)
            << ", dK " << sci(compare(tiled.dk, standard.dk).max_abs) << ", dV "
            << sci(compare(tiled.dv, standard.dv).max_abs)
            << ". The forward's lse (lq floats) is all FA2 kept of P.\n\n";
}

struct Row {
  std::string name;
  BackwardOut g;
  double ms;
};

// The previous step (the standard backward), the tiled step and every rung, against fp64.
void report_table(Backend backend, const Ladder<AttentionBackwardArgs>& ladder,
                  const BackwardInputs& in, AttentionShape s, bool causal, Dtype type,
                  std::uint64_t seed) {
  const float scale = default_scale(s.d);
  std::vector<Row> rows;
  {
    CpuTimer timer;
    BackwardOut g = attention_backward_standard(in.qkv, in.d_o, s, scale, causal);
    rows.push_back({"cpu standard, P stored (previous)", std::move(g), timer.elapsed_ms()});
  }
  {
    CpuTimer timer;
    BackwardOut g = attention_backward_fa2(in.qkv, in.o, in.lse, in.d_o, s,
                                           {scale, causal, kKernelRows, kKernelKeys})
                        .grads;
    rows.push_back({"cpu FA2, P recomputed", std::move(g), timer.elapsed_ms()});
  }
  std::vector<std::string> skipped;
  if (backend != Backend::cpu) {
    AttentionBackwardBuffers buffers(backend, in, s, scale, causal, type);
    for (auto& run : run_ladder(
             backend, rungs_taking(ladder, type), buffers,
             [&](const Rung<AttentionBackwardArgs>&) { return buffers.download(); }, &skipped))
      rows.push_back({run.name, std::move(run.out), run.ms});
  }
  ref::AttentionGrads r = ref::attention_backward(in.qkv, in.d_o, s, scale, causal);
  add_subnormal_terms(r, in.qkv, in.d_o, s, scale, type);
  std::cout << (causal ? "Causal: " : "") << "gradients against fp64 (bh " << s.bh << ", lq "
            << s.lq << ", lk " << s.lk << ", d " << s.d << ", randn, dO randn, " << to_string(type)
            << ", seed " << seed << "), errors in units of each gradient's weight:\n";
  Table t({"implementation", "dQ err", "dK err", "dV err", "dQ vs previous", "ms"});
  for (const Row& row : rows)
    t.add_row({row.name, ref::compare_weighted(row.g.dq, r.dq, r.dq_weight).cell(),
               ref::compare_weighted(row.g.dk, r.dk, r.dk_weight).cell(),
               ref::compare_weighted(row.g.dv, r.dv, r.dv_weight).cell(),
               sci(compare(row.g.dq, rows.front().g.dq).max_abs), fixed(row.ms, 2)});
  t.print(std::cout);
  print_skipped(skipped);
  const ref::BackwardFloors f = stated_floors(r, s, type);
  std::cout << "  stated floors with P recomputed: dQ " << sci(f.dq) << ", dK " << sci(f.dk)
            << ", dV " << sci(f.dv) << " (fa2_backward.md, section \"Errors\")\n\n";
}

int run_bench(const Ladder<AttentionBackwardArgs>& ladder, const BenchOptions& options,
              AttentionShape s, bool causal, Dtype type, std::uint64_t seed) {
  Bench bench(kChapter, "attention_backward", options);
  const float scale = default_scale(s.d);
  const AttentionInputs qkv = {bench_input(std::int64_t(s.bh) * s.lq, s.d, seed),
                               bench_input(std::int64_t(s.bh) * s.lk, s.d, seed + 1),
                               bench_input(std::int64_t(s.bh) * s.lk, s.d, seed + 2)};
  // The forward's O, lse and P do not matter to the time: randn O, lse = 0 (P = e^s,
  // finite), and for the fp32 baseline a random P.
  BackwardInputs in{qkv,
                    bench_input(std::int64_t(s.bh) * s.lq, s.d, seed + 3),
                    std::vector<float>(s.rows(), 0.f),
                    bench_input(std::int64_t(s.bh) * s.lq, s.d, seed + 4),
                    {}};
  if (type == Dtype::fp32) in.p = bench_input(std::int64_t(s.bh) * s.lq, s.lk, seed + 5);
  AttentionBackwardBuffers buffers(Backend::cuda, in, s, scale, causal, type);
  // FlashAttention counts the backward as 2.5x the forward's 4 bh lq lk d (half with the mask).
  const double flops = attention_backward_flops(s.bh, s.lq, s.lk, s.d, causal);
  bench_ladder(bench, rungs_taking(ladder, type), buffers.args,
               attention_shape_string(s.bh, s.lq, s.lk, s.d, causal), Work::computing(flops, 0.0));
  return bench.finish();
}

// --profile: every rung of `ladder` (sim kernels) on randn inputs and their forward, its traffic
// counted by the simulator against the rung's formula, every buffer named.
int run_profile(const Ladder<AttentionBackwardArgs>& ladder, const AttentionShape& shape,
                float scale, bool causal, Dtype type, const ProgramOptions& options) {
  const BackwardInputs in =
      forward_for(make_attention_inputs(ScoreKind::randn, shape, scale, options.seed), shape, scale,
                  causal, options.seed, type);
  AttentionBackwardBuffers buffers(Backend::sim, in, shape, scale, causal, type);
  name_buffers(buffers.q, "q", buffers.k, "k", buffers.v, "v", buffers.o, "o", buffers.d_o, "d_o",
               buffers.lse, "lse", buffers.dq, "dq", buffers.dk, "dk", buffers.dv, "dv",
               buffers.d_row, "d_row", buffers.p, "p");
  return profile_ladder(ladder, buffers.args, shape.rows(), "row",
                        attention_shape_string(shape.bh, shape.lq, shape.lk, shape.d, causal),
                        options.bench.csv_path);
}

}  // namespace

int main(int argc, char** argv) {
  Cli cli("ch10",
          "Chapter 10: the FlashAttention-2 backward pass on the CPU and as CUDA kernels (fp32, "
          "and fp16 and bf16 on tensor cores).");
  int memory_length = 4096;
  bool causal = false;
  std::string dtype = "fp32";
  AttentionShapeOptions shape_options(cli, {16, 4096, 4096, 64}, {2, 300, 257, 64},
                                      ch04::kMaxBatchHeads, ch04::kMaxHeadDim,
                                      "; the 16-bit rungs take 64 or 128");
  cli.option("--memory-length", &memory_length,
             "lq = lk of the CPU memory comparison (default 4096)", 8192)
      .flag("--causal", &causal,
            "with --bench or --profile: the causal mask (the report runs both)")
      .option("--dtype", &dtype, {"fp32", "fp16", "bf16"},
              "with --bench or --profile: the element type (default fp32)");
  ProgramOptions options;
  if (const int code = parse_program(cli, argc, argv, &options); code >= 0) return code;
  const AttentionShape shape = shape_options.resolve(options.backend);
  const Dtype type = dtypes_of_option(dtype).front();
  const float scale = default_scale(shape.d);
  ChapterSteps<AttentionBackwardArgs> steps;
  steps.op = "attention_backward";
  steps.check = [&] {
    if (shape.q_elems() > kMaxBenchElements || shape.kv_elems() > kMaxBenchElements)
      return cli.error("--bh x --lq x --d or --bh x --lk x --d exceeds 2^31");
    if (const int code = check_mode_options(cli, options, causal, dtype != "fp32"); code >= 0)
      return code;
    if (options.bench.enabled || options.profile) return -1;
    return check_probabilities(cli, shape, 28, "the fp64 reference holds P");
  };
  steps.bench = [&](const Ladder<AttentionBackwardArgs>& ladder) {
    return run_bench(ladder, options.bench, shape, causal, type, options.seed);
  };
  steps.profile = [&](const Ladder<AttentionBackwardArgs>& ladder) {
    return run_profile(ladder, shape, scale, causal, type, options);
  };
  steps.report = [&](const Ladder<AttentionBackwardArgs>& ladder) {
    if (memory_length > 0) print_memory(memory_length, options.seed);
    const AttentionInputs qkv = make_attention_inputs(ScoreKind::randn, shape, scale, options.seed);
    for (Dtype t : dtypes_of_option(options.backend == Backend::cpu ? "fp32" : "all"))
      for (bool c : {false, true})
        report_table(options.backend, ladder, forward_for(qkv, shape, scale, c, options.seed, t),
                     shape, c, t, options.seed);
  };
  return run_chapter_program(cli, options, {print_intro, print_trace, print_next}, steps,
                             make_kernel_ladder);
}
