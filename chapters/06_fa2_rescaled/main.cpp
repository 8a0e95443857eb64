// Chapter 06 program: FlashAttention-2, the rescaled accumulator. `--help` lists the options.
//
// It also measures the extra memory of the naive attention and of FA2 on the CPU: this file
// replaces the global operator new and delete with counting versions (the peak of live heap
// bytes during a call), and reads the peak resident set size of the process from
// /proc/self/status after resetting it through /proc/self/clear_refs (Linux).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "chapters/04_fused_qk_softmax/attention_naive.hpp"
#include "chapters/05_fa1_subsum/fa1.hpp"
#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "common/attention_inputs.hpp"
#include "common/bench.hpp"
#include "common/buffer.hpp"
#include "common/cli.hpp"
#include "common/compare.hpp"
#include "common/program.hpp"
#include "common/reference_attention.hpp"
#include "common/table.hpp"
#include "common/timer.hpp"

// ------------------------------------------------------------------------------------------
// A counting allocator: every operator new of this program records its size in a header.
// ------------------------------------------------------------------------------------------

namespace {
std::size_t g_live_bytes = 0;  // heap bytes live now (single-threaded program)
std::size_t g_peak_bytes = 0;  // the largest g_live_bytes since the last reset
constexpr std::size_t kHeader = alignof(std::max_align_t);  // keeps the block's alignment

// Not inlined: GCC would otherwise see the header arithmetic on a pointer it believes was
// returned by a plain operator new and warn about an out-of-bounds access.
[[gnu::noinline]] void* counted_alloc(std::size_t n) {
  void* base = std::malloc(n + kHeader);
  if (base == nullptr) return nullptr;
  *static_cast<std::size_t*>(base) = n;
  g_live_bytes += n;
  g_peak_bytes = std::max(g_peak_bytes, g_live_bytes);
  return static_cast<char*>(base) + kHeader;
}
[[gnu::noinline]] void counted_free(void* p) noexcept {
  if (p == nullptr) return;
  char* base = static_cast<char*>(p) - kHeader;
  g_live_bytes -= *reinterpret_cast<std::size_t*>(base);
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

constexpr double kMiB = 1024.0 * 1024.0;
constexpr int kCpuTile = 64;  // the CPU FA2's Br = Bc in the measurements

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

// One query, six keys with two-component values, in tiles of two.
void print_accumulator_trace() {
  const std::vector<float> x = {1.f, 3.f, -2.f, 2.5f, 6.f, 0.f};
  const std::vector<float> v = {1.f, 0.f, 0.f, 1.f, 2.f, 2.f, -1.f, 0.f, 0.f, -1.f, 4.f, 4.f};
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
  print_accumulator_trace();
  print_causal_map(6, 10, 2, 4);
  print_causal_map(8, 5, 2, 2);
}

struct AttentionRun {
  std::string name;
  std::vector<float> o, lse;
  double ms;
};

AttentionRun run_kernel(Backend backend, const AttentionInputs& in, AttentionShape shape,
                        float scale, bool causal) {
  DeviceBuffer<float> q(backend, in.q), k(backend, in.k), v(backend, in.v),
      o(backend, shape.q_elems()), lse(backend, shape.rows());
  const double ms = time_launch(backend, [&](auto b) {
    Kernels<decltype(b)::value>::fa2(q.data(), k.data(), v.data(), o.data(), lse.data(), shape,
                                     scale, causal);
  });
  return {std::string(to_string(backend)) + " FA2 kernel", o.download(), lse.download(), ms};
}

void report_errors(Backend backend, AttentionShape shape, std::uint64_t seed) {
  const float scale = default_scale(shape.d);
  const AttentionInputs in = make_attention_inputs(ScoreKind::randn, shape, scale, seed);
  for (bool causal : {false, true}) {
    const ref::Attention r = ref::attention(in, shape, scale, causal, false);
    std::vector<AttentionRun> runs;
    CpuTimer prev_timer;
    if (!causal)
      runs.push_back(
          {"cpu ch05 FA1 (previous)", ch05::attention_fa1(in, shape, scale, 8, 32).o, {}, 0.0});
    else
      runs.push_back({"cpu naive, -inf mask (previous)",
                      ch04::attention_naive(in, shape, scale, true).o,
                      {},
                      0.0});
    runs.back().ms = prev_timer.elapsed_ms();
    CpuTimer fa2_timer;
    const Fa2Result fa2 = attention_fa2(in, shape, {scale, causal, kCpuTile, kCpuTile});
    runs.push_back({"cpu FA2, 64 x 64 tiles", fa2.o, fa2.lse, fa2_timer.elapsed_ms()});
    if (backend != Backend::cpu) runs.push_back(run_kernel(backend, in, shape, scale, causal));
    std::cout << (causal ? "Causal: " : "") << "O and logsumexp against fp64 on ("
              << to_string(shape) << ") randn, seed " << seed << ":\n";
    Table t({"implementation", "O err / sum p|v|", "O abs err vs previous", "logsumexp abs err",
             "time ms", "TFLOP/s"});
    for (const AttentionRun& run : runs) {
      const ErrorReport e = ref::compare_weighted(run.o, r.o, r.o_weight);
      const bool gpu = run.name.rfind("cuda", 0) == 0;
      const double flops = attention_flops(shape.bh, shape.lq, shape.lk, shape.d, causal);
      t.add_row({run.name, sci(e.max_abs) + (e.nonfinite_mismatches ? " (non-finite!)" : ""),
                 sci(compare(run.o, runs[0].o).max_abs),
                 run.lse.empty() ? "-" : sci(compare(run.lse, r.lse).max_abs), fixed(run.ms, 3),
                 gpu ? fixed(tflop_per_s(flops, run.ms), 2) : "-"});
    }
    t.print(std::cout);
    std::cout << "  stated floors: O " << sci(ref::output_floor(r.score_error, shape.lk))
              << ", logsumexp " << sci(ref::lse_floor(r.score_error, shape.lk, r.max_abs_lse))
              << "\n\n";
  }
  print_sim_time_note(std::cout, backend);
}

/// The tensor-core kernel on `backend`, on the 16-bit `bits` of Q, K, V: O widened to float.
AttentionRun run_tensor_core(Backend backend, HalfType type, const AttentionInputs& rounded,
                             AttentionShape shape, float scale, bool causal) {
  DeviceBuffer<std::uint16_t> q(backend, to_bits(rounded.q, type)),
      k(backend, to_bits(rounded.k, type)), v(backend, to_bits(rounded.v, type)),
      o(backend, shape.q_elems());
  DeviceBuffer<float> lse(backend, shape.rows());
  const double ms = time_launch(backend, [&](auto b) {
    TensorCoreKernels<decltype(b)::value>::fa2(type, q.data(), k.data(), v.data(), o.data(),
                                               lse.data(), shape, scale, causal);
  });
  return {std::string(to_string(backend)) + " tensor-core FA2, " + to_string(type),
          from_bits(o.download(), type), lse.download(), ms};
}

// The last rung: fp16 and bf16 inputs on tensor cores, each against the fp64 attention of its
// own rounded inputs (the kernel's error, not the inputs'), with the bound of eq. (8).
void report_tensor_core(Backend backend, AttentionShape shape, std::uint64_t seed) {
  if (shape.d != 64 && shape.d != 128) {
    std::cout << "Tensor-core FA2: d = " << shape.d
              << " is not one it takes (64 or 128); run with --d 64 or --d 128.\n\n";
    return;
  }
  const float scale = default_scale(shape.d);
  const AttentionInputs in = make_attention_inputs(ScoreKind::randn, shape, scale, seed);
  std::cout << "Tensor-core FA2 (wmma 16x16x16, Br = " << kTensorCoreRows
            << ", Bc = " << tensor_core_keys(shape.d) << ", O in the input type) on ("
            << to_string(shape) << ") randn\n  rounded to fp16 or bf16, against fp64 on the same "
            << "rounded inputs; O's error in units of\n  w = sum p|v| + N (1 + sum |v|) (eq. 8):\n";
  Table t({"implementation", "mask", "O err / w", "bound 2u + floor", "logsumexp abs err",
           "time ms", "TFLOP/s"});
  for (HalfType type : {HalfType::fp16, HalfType::bf16}) {
    const AttentionInputs rounded = round_inputs(in, type);
    for (bool causal : {false, true}) {
      const ref::Attention r = ref::attention(rounded, shape, scale, causal, false);
      const AttentionRun run = run_tensor_core(backend, type, rounded, shape, scale, causal);
      const ErrorReport e =
          ref::compare_weighted(run.o, r.o, tensor_core_weight(r.o_weight, rounded, shape, type));
      const double bound = 2.0 * unit_roundoff(type) + ref::output_floor(r.score_error, shape.lk);
      const double flops = attention_flops(shape.bh, shape.lq, shape.lk, shape.d, causal);
      const std::string tflops =
          backend == Backend::cuda ? fixed(tflop_per_s(flops, run.ms), 2) : "-";
      t.add_row({run.name, causal ? "causal" : "none",
                 sci(e.max_abs) + (e.nonfinite_mismatches ? " (non-finite!)" : ""), sci(bound),
                 sci(compare(run.lse, r.lse).max_abs), fixed(run.ms, 3), tflops});
    }
  }
  t.print(std::cout);
  std::cout
      << "  u = 2^-11 (fp16), 2^-8 (bf16): rounding P~ for the second product and O once.\n\n";
}

// --bench: on the GPU, the fp32 FA2 kernel (--dtype fp32) or the tensor-core kernel (--dtype
// fp16 or bf16) on (bh, lq, lk, d) of randn, with or without the mask.
int run_bench(const BenchOptions& options, AttentionShape shape, bool causal,
              const std::string& dtype, std::uint64_t seed) {
  Bench bench("06_fa2_rescaled", "attention", options);
  const float scale = default_scale(shape.d);
  const std::vector<float> q = bench_input(std::int64_t(shape.bh) * shape.lq, shape.d, seed);
  const std::vector<float> k = bench_input(std::int64_t(shape.bh) * shape.lk, shape.d, seed + 1);
  const std::vector<float> v = bench_input(std::int64_t(shape.bh) * shape.lk, shape.d, seed + 2);
  const std::string name = attention_shape_string(shape.bh, shape.lq, shape.lk, shape.d, causal);
  const double flops = attention_flops(shape.bh, shape.lq, shape.lk, shape.d, causal);
  DeviceBuffer<float> lse(Backend::cuda, shape.rows());
  with_kernel_backend(Backend::cuda, [&](auto b) {
    constexpr Backend kB = decltype(b)::value;
    if (dtype == "fp32") {
      DeviceBuffer<float> dq(kB, q), dk(kB, k), dv(kB, v), o(kB, shape.q_elems());
      const Work work = Work::computing(
          flops, attention_bytes(shape.bh, shape.lq, shape.lk, shape.d, sizeof(float)));
      bench.time("fa2", "fp32", name, work, [&] {
        Kernels<kB>::fa2(dq.data(), dk.data(), dv.data(), o.data(), lse.data(), shape, scale,
                         causal);
      });
      return;
    }
    const HalfType type = dtype == "fp16" ? HalfType::fp16 : HalfType::bf16;
    if (shape.d != 64 && shape.d != 128) {
      bench.skip("fa2_tensor_core", "d = " + std::to_string(shape.d) + " is not 64 or 128");
      return;
    }
    DeviceBuffer<std::uint16_t> dq(kB, to_bits(q, type)), dk(kB, to_bits(k, type)),
        dv(kB, to_bits(v, type)), o(kB, shape.q_elems());
    const Work work = Work::computing(
        flops, attention_bytes(shape.bh, shape.lq, shape.lk, shape.d, sizeof(std::uint16_t)));
    bench.time("fa2_tensor_core", dtype, name, work, [&] {
      TensorCoreKernels<kB>::fa2(type, dq.data(), dk.data(), dv.data(), o.data(), lse.data(), shape,
                                 scale, causal);
    });
  });
  return bench.finish();
}

/// The value of `field` in /proc/self/status, in KiB, or -1 where it is not available.
long long read_status_kib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      std::istringstream fields(line.substr(field.size() + 1));
      long long kib = -1;
      fields >> kib;
      return kib;
    }
  }
  return -1;
}
bool reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";  // "5": reset the peak resident set size to the current one
  clear.flush();
  return static_cast<bool>(clear);
}

struct Measured {
  double heap_peak_bytes;  ///< peak of live operator-new bytes above those live before
  double rss_peak_bytes;   ///< peak RSS above the RSS before, or -1
  double ms;
};

template <typename F>
Measured measure(F work) {
  const bool rss = reset_peak_rss();
  const long long rss_before = read_status_kib("VmRSS");
  const std::size_t live_before = g_live_bytes;
  g_peak_bytes = g_live_bytes;
  CpuTimer timer;
  work();
  const double ms = timer.elapsed_ms();
  const long long hwm = read_status_kib("VmHWM");
  return {double(g_peak_bytes - live_before),
          rss && rss_before >= 0 && hwm >= 0 ? 1024.0 * double(hwm - rss_before) : -1.0, ms};
}

void report_memory(int length, std::uint64_t seed) {
  constexpr int kHeadDim = 64;
  const AttentionShape shape{1, length, length, kHeadDim};
  const float scale = default_scale(shape.d);
  const AttentionInputs in = make_attention_inputs(ScoreKind::randn, shape, scale, seed);
  std::vector<float> o_naive(shape.q_elems()), o_fa2(shape.q_elems()), lse(shape.rows());
  std::cout << "Extra memory and time on the CPU, one head, lq = lk = " << length
            << ", d = " << kHeadDim << " (inputs and outputs allocated beforehand):\n";
  const Measured naive = measure([&] {
    ch04::attention_naive(in.q.data(), in.k.data(), in.v.data(), shape, scale, false, nullptr,
                          o_naive.data());
  });
  const Measured fa2 = measure([&] {
    attention_fa2(in.q.data(), in.k.data(), in.v.data(), shape, {scale, false, kCpuTile, kCpuTile},
                  o_fa2.data(), lse.data());
  });
  Table t({"implementation", "heap peak (operator new)", "peak RSS growth", "time ms"});
  auto mib = [](double bytes) {
    return bytes < 0 ? std::string("n/a") : fixed(bytes / kMiB, 3) + " MiB";
  };
  t.add_row({"naive (Eigen, S stored)", mib(naive.heap_peak_bytes), mib(naive.rss_peak_bytes),
             fixed(naive.ms, 1)});
  t.add_row(
      {"FA2, 64 x 64 tiles", mib(fa2.heap_peak_bytes), mib(fa2.rss_peak_bytes), fixed(fa2.ms, 1)});
  t.print(std::cout);
  std::cout << "  The naive attention holds S: lq x lk floats = "
            << fixed(double(shape.lq) * shape.lk * sizeof(float) / kMiB, 1)
            << " MiB; FA2 holds one Q tile's SS, m, l and one K/V\n  tile. max |O_naive - O_FA2| = "
            << sci(compare(o_fa2, o_naive).max_abs)
            << ".\n  Heap peak: live bytes from this program's counting operator new; peak RSS:\n"
               "  VmHWM after a reset through /proc/self/clear_refs, which also sees Eigen's own\n"
               "  buffers (malloc) and counts pages, not bytes. The naive time is Eigen's\n"
               "  vectorized GEMM; FA2's tiles are plain loops.\n\n";
}

}  // namespace

int main(int argc, char** argv) {
  int bh = 0, lq = 0, lk = 0, d = 64, memory_length = 4096;
  bool causal = false;
  std::string dtype = "fp32";
  constexpr int kMaxMemoryLength = 16384;  // S at 16384^2 is 1 GiB
  Cli cli("ch06",
          "Chapter 06: FlashAttention-2, on the CPU and as CUDA kernels (fp32, and fp16 "
          "and bf16 on tensor cores).");
  cli.option("--bh", &bh, "batch x heads (default 16 on cuda, 2 otherwise)", ch04::kMaxBatchHeads)
      .option("--lq", &lq, "query rows (default 4096 on cuda, 256 otherwise)")
      .option("--lk", &lk, "key rows (default 4096 on cuda, 1024 otherwise)")
      .option("--d", &d, "head dimension (default 64; the tensor-core kernel takes 64 or 128)",
              ch04::kMaxHeadDim)
      .option("--memory-length", &memory_length,
              "lq = lk of the CPU memory and time comparison (default 4096)", kMaxMemoryLength)
      .flag("--causal", &causal, "with --bench: time the causal attention (the report runs both)")
      .option("--dtype", &dtype, {"fp32", "fp16", "bf16"},
              "with --bench: fp32 times the FA2 kernel, fp16 or bf16 the tensor-core kernel "
              "(default fp32)");
  ProgramOptions options;
  if (const int code = parse_program(cli, argc, argv, &options); code >= 0) return code;
  const Backend backend = options.backend;
  const std::uint64_t seed = options.seed;
  const bool gpu = backend == Backend::cuda;
  const AttentionShape shape{bh > 0 ? bh : (gpu ? 16 : 2), lq > 0 ? lq : (gpu ? 4096 : 256),
                             lk > 0 ? lk : (gpu ? 4096 : 1024), d};
  if (!options.bench.enabled && (causal || dtype != "fp32"))
    return cli.error("--causal and --dtype only apply with --bench (the report runs both)");
  if (options.bench.enabled) {
    if (shape.q_elems() > kMaxBenchElements || shape.kv_elems() > kMaxBenchElements)
      return cli.error("--bh x --lq x --d or --bh x --lk x --d exceeds 2^31 elements");
    return run_guarded(cli, [&] { return run_bench(options.bench, shape, causal, dtype, seed); });
  }
  constexpr std::size_t kMaxProbabilities = std::size_t{1} << 28;  // the baselines store P
  if (shape.p_elems() > kMaxProbabilities)
    return cli.error("--bh x --lq x --lk = " + std::to_string(shape.p_elems()) +
                     " exceeds this program's limit of 2^28 (the naive baseline stores P)");

  print_intro();
  print_trace();
  if (options.trace_only) return 0;
  const int code = run_guarded(cli, [&] {
    report_errors(backend, shape, seed);
    if (backend != Backend::cpu) report_tensor_core(backend, shape, seed);
    report_memory(memory_length, seed);
    return 0;
  });
  if (code != 0) return code;
  std::cout << "Next: chapter 07, Welford LayerNorm (chapters/07_welford_layernorm, docs page\n"
               "\"Chapter 07: Welford LayerNorm\"): the same monoid idea, for mean and variance.\n";
  return 0;
}
