// Chapter 02 program: online softmax. Run it after building; `--help` lists the options.
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/01_safe_softmax/softmax_report.hpp"
#include "chapters/02_online_softmax/online_softmax.hpp"
#include "common/chapter_program.hpp"
#include "common/cli.hpp"
#include "common/program.hpp"
#include "common/table.hpp"

namespace {

using namespace wb;
using namespace wb::ch02;

void print_intro() {
  std::cout << "Chapter 02: online softmax\n"
               "  Safe softmax sums d = sum_j e^(x_j - m) with the final max m, so it needs a\n"
               "  whole pass for m first. Keep a running max m_i instead, and rescale the\n"
               "  partial sum whenever m_i grows:\n"
               "    d'_i = d'_(i-1) e^(m_(i-1) - m_i) + e^(x_i - m_i)\n"
               "  At i = N this is exactly the safe d. Two passes per row: statistics,\n"
               "  normalize (2 reads + 1 write per element, where chapter 01 made 3 + 1).\n\n";
}

// The textbook d_i (which needs m_N before it starts) and the online d'_i side by side.
void print_trace() {
  const std::vector<float> x = {1.0f, 3.0f, -2.0f, 2.5f, 4.0f, 0.5f};
  const int n = static_cast<int>(x.size());
  const float m_n = online_stats(x.data(), n).m;
  std::cout << "Trace on x = [1, 3, -2, 2.5, 4, 0.5] (N = 6, i from 1 as on the page):\n"
               "  d_i  = d_(i-1) + e^(x_i - m_N)              needs m_N = "
            << fixed(m_n, 2)
            << " before the first term\n"
               "  d'_i = d'_(i-1) e^(m_(i-1) - m_i) + e^(x_i - m_i)   uses only x_1..x_i\n";
  Table t({"i", "x_i", "m_i", "d_i (with m_N)", "rescale e^(m_(i-1)-m_i)", "d'_i (online)",
           "d'_i e^(m_i-m_N)"});
  double d = 0.0;
  MD md{-INFINITY, 0.f};
  for (int i = 0; i < n; ++i) {
    d += std::exp(static_cast<double>(x[i]) - m_n);  // eq. (2)
    const MD next = online_update(md, x[i]);         // eqs. (1), (4): the code the kernel runs
    const std::string rescale = i == 0 ? "- (d'_0 = 0)" : fixed(std::exp(md.m - next.m));
    t.add_row({std::to_string(i + 1), fixed(x[i], 2), fixed(next.m, 2), fixed(d), rescale,
               fixed(next.d), fixed(next.d * std::exp(static_cast<double>(next.m) - m_n))});
    md = next;
  }
  t.print(std::cout);
  std::cout << "  d'_i differs from d_i while m_i < m_N, yet d_i = d'_i e^(m_i - m_N) at every i\n"
               "  (last column), and once m_i = m_N the factor is 1: d_N = "
            << fixed(d, 6) << ", d'_N = " << fixed(md.d, 6) << " (eq. 5).\n\n";
}

// The chapter after this one, printed last.
void print_next() {
  std::cout << "Next: chapter 03, the block-associative (m, d) merge (chapters/03_block_merge,\n"
               "docs page \"Chapter 03: block-associative merge\"): split a row anywhere, merge\n"
               "the pieces in any order, and let a whole block of threads share one row.\n";
}

}  // namespace

int main(int argc, char** argv) {
  Cli cli("ch02", "Chapter 02: online softmax, on the CPU and as a CUDA kernel.");
  ch01::SoftmaxShapeOptions shape(cli);
  ProgramOptions options;
  if (const int code = parse_program(cli, argc, argv, &options); code >= 0) return code;
  ChapterSteps<RowArgs> steps = ch01::softmax_steps(cli, options, shape);
  steps.report = [&](const Ladder<RowArgs>& ladder) {
    const std::vector<ch01::CpuStep> cpu_steps = {
        {"cpu ch01 safe",
         [](const std::vector<float>& x, int r, int c) { return ch01::softmax_safe(x, r, c); }},
        {"cpu ch02 online",
         [](const std::vector<float>& x, int r, int c) { return softmax_online(x, r, c); }}};
    ch01::report_softmax(options.backend, cpu_steps, ladder, "ch01", shape.rows, shape.cols,
                         options.seed);
    std::cout
        << "  Chapter 01 sums d in double; here d' is a float recurrence, so the error\n"
           "  grows with cols (the tests derive the bound). One thread per row reads\n"
           "  addresses cols floats apart: chapter 03 puts a whole warp or block on a row.\n\n";
  };
  return run_chapter_program(cli, options, {print_intro, print_trace, print_next}, steps,
                             make_kernel_ladder);
}
