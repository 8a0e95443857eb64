#include "chapters/06_fa2_rescaled/memory_probe.hpp"

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "chapters/04_fused_qk_softmax/attention_naive.hpp"
#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "common/attention_inputs.hpp"
#include "common/compare.hpp"
#include "common/table.hpp"
#include "common/timer.hpp"

namespace wb::ch06 {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr int kHeadDim = 64;
constexpr int kCpuTile = 64;  // the CPU FA2's Br = Bc

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
Measured measure(HeapCount& heap, F work) {
  const bool rss = reset_peak_rss();
  const long long rss_before = read_status_kib("VmRSS");
  const std::size_t live_before = heap.live;
  heap.peak = heap.live;
  CpuTimer timer;
  work();
  const double ms = timer.elapsed_ms();
  const long long hwm = read_status_kib("VmHWM");
  return {double(heap.peak - live_before),
          rss && rss_before >= 0 && hwm >= 0 ? 1024.0 * double(hwm - rss_before) : -1.0, ms};
}

std::string mib(double bytes) {
  return bytes < 0 ? std::string("n/a") : fixed(bytes / kMiB, 3) + " MiB";
}

}  // namespace

void report_memory(int length, std::uint64_t seed, HeapCount& heap) {
  const AttentionShape shape{1, length, length, kHeadDim};
  const float scale = default_scale(shape.d);
  const AttentionInputs in = make_attention_inputs(ScoreKind::randn, shape, scale, seed);
  std::vector<float> o_naive(shape.q_elems()), o_fa2(shape.q_elems()), lse(shape.rows());
  std::cout << "Extra memory and time on the CPU, one head, lq = lk = " << length
            << ", d = " << kHeadDim << " (inputs and outputs allocated beforehand):\n";
  const Measured naive = measure(heap, [&] {
    ch04::attention_naive(in.q.data(), in.k.data(), in.v.data(), shape, scale, false, nullptr,
                          o_naive.data());
  });
  const Measured fa2 = measure(heap, [&] {
    attention_fa2(in.q.data(), in.k.data(), in.v.data(), shape, {scale, false, kCpuTile, kCpuTile},
                  o_fa2.data(), lse.data());
  });
  Table t({"implementation", "heap peak (operator new)", "peak RSS growth", "time ms"});
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

}  // namespace wb::ch06
