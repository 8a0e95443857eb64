// Chapter 01 program: safe softmax. Run it after building; `--help` lists the options.
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/01_safe_softmax/softmax_report.hpp"
#include "common/chapter_program.hpp"
#include "common/cli.hpp"
#include "common/program.hpp"
#include "common/table.hpp"

namespace {

using namespace wb;
using namespace wb::ch01;

void print_intro() {
  std::cout << "Chapter 01: safe softmax\n"
               "  softmax(x)_i = e^(x_i) / sum_j e^(x_j) overflows as soon as some x_i > 88.7\n"
               "  in float. Subtracting the row max m changes nothing mathematically\n"
               "  (e^-m cancels) and keeps every exponent <= 0: three passes per row,\n"
               "  max, sum d, normalize (3 reads + 1 write per element).\n\n";
}

// The three passes on one small row, every intermediate printed.
void print_passes() {
  const std::vector<float> x = {1.0f, 3.0f, -2.0f, 2.5f, 0.5f};
  std::cout << "Trace of the three passes on x = [1, 3, -2, 2.5, 0.5]:\n";
  float m = -INFINITY;
  std::vector<float> m_i;
  for (float v : x) m_i.push_back(m = std::fmax(m, v));
  double d = 0.0;
  std::vector<double> d_i;
  for (float v : x) d_i.push_back(d += std::exp(v - m));
  const std::vector<float> y = softmax_safe(x, 1, static_cast<int>(x.size()));
  Table t({"i", "x_i", "pass 1: max so far", "e^(x_i - m)", "pass 2: d so far", "pass 3: y_i"});
  for (std::size_t i = 0; i < x.size(); ++i) {
    t.add_row({std::to_string(i), fixed(x[i], 2), fixed(m_i[i], 2), fixed(std::exp(x[i] - m)),
               fixed(d_i[i]), fixed(y[i])});
  }
  t.print(std::cout);
  double sum = 0.0;
  for (float v : y) sum += v;
  std::cout << "  m = " << fixed(m, 2) << ", d = " << fixed(d) << ", sum of y = " << fixed(sum, 6)
            << "\n\n";
}

void print_overflow_demo() {
  const std::vector<float> x = {1000.f, 999.f, 998.f};
  const std::vector<float> naive = softmax_naive(x, 1, 3);
  const std::vector<float> safe = softmax_safe(x, 1, 3);
  std::cout << "Why the max is subtracted: x = [1000, 999, 998]\n";
  Table t({"", "y_0", "y_1", "y_2"});
  t.add_row({"naive e^x / sum e^x", fixed(naive[0]), fixed(naive[1]), fixed(naive[2])});
  t.add_row({"safe  e^(x-m) / sum e^(x-m)", fixed(safe[0]), fixed(safe[1]), fixed(safe[2])});
  t.print(std::cout);
  std::cout << "  e^1000 is inf in float, and inf / inf is NaN.\n\n";
}

// The worked example: the passes, then why the max is subtracted.
void print_trace() {
  print_passes();
  print_overflow_demo();
}

// The chapter after this one, printed last.
void print_next() {
  std::cout << "Next: chapter 02, online softmax (chapters/02_online_softmax, docs page\n"
               "\"Chapter 02: online softmax\"): the max and the sum in one pass.\n";
}

}  // namespace

int main(int argc, char** argv) {
  Cli cli("ch01", "Chapter 01: safe softmax, on the CPU and as three CUDA kernels.");
  SoftmaxShapeOptions shape(cli);
  ProgramOptions options;
  if (const int code = parse_program(cli, argc, argv, &options); code >= 0) return code;
  ChapterSteps<RowArgs> steps = softmax_steps(cli, options, shape);
  steps.report = [&](const Ladder<RowArgs>& ladder) {
    const std::vector<CpuStep> cpu_steps = {
        {"cpu naive",
         [](const std::vector<float>& x, int r, int c) { return softmax_naive(x, r, c); }},
        {"cpu safe",
         [](const std::vector<float>& x, int r, int c) { return softmax_safe(x, r, c); }}};
    report_softmax(options.backend, cpu_steps, ladder, "", shape.rows, shape.cols, options.seed);
  };
  return run_chapter_program(cli, options, {print_intro, print_trace, print_next}, steps,
                             make_kernel_ladder);
}
