// What the softmax chapters' tests (01, 02, 03) share: the shapes, and the chain check of a
// kernel ladder (tests/ladder_checks.hpp) against the chapter's CPU step under the tolerance
// policy.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "common/buffer.hpp"
#include "common/dtype.hpp"
#include "common/inputs.hpp"
#include "common/reference.hpp"
#include "common/rung_buffers.hpp"
#include "tests/ladder_checks.hpp"
#include "tests/support.hpp"

namespace wb::test {

struct RowShape {
  int rows, cols;
};

/// Shapes that are multiples of nothing, and the edges: one column, one short of a warp, one
/// past, more than the 256-thread block, Triton's irregular 1823 x 781.
inline const std::vector<RowShape> kSoftmaxShapes = {
    {1, 1}, {3, 2}, {2, 31}, {5, 32}, {7, 33}, {4, 127}, {3, 257}, {11, 1000}, {1823, 781}};

/// In race mode every shared-memory access is checked: the shapes up to 257 columns still
/// cover partial warps, strided loops and more columns than threads.
inline const std::vector<RowShape> kSoftmaxRaceShapes = {{1, 1}, {2, 31}, {3, 33}, {2, 257}};

/// The shapes of this binary: the race-mode twin takes the smaller list.
inline const std::vector<RowShape>& softmax_kernel_shapes() {
  return kRaceMode ? kSoftmaxRaceShapes : kSoftmaxShapes;
}

/// A chapter's CPU step: y = step(x, rows, cols).
using SoftmaxStep = std::function<std::vector<float>(const std::vector<float>& x, int rows, int cols)>;
/// The floor of the tolerance policy for rung `rung` on the call `args` (its cols, its element
/// type, and where x and y lie: a rung may vectorize only aligned rows), in float.
using KernelFloor = std::function<double(const Rung<RowArgs>& rung, const RowArgs& args)>;

// The output's rounding to `t` is output_rounding(t) (common/dtype.hpp): half an ulp, 2^-11 of
// |y| for fp16, 2^-8 for bf16, 0 for fp32; below `tiny` (fp16's smallest normal 2^-14; FLT_MIN
// otherwise) the spacing stops shrinking, so the error is measured against max(|ref|, tiny).
// For fp32 that is compare()'s relative error, and the rounding adds nothing.

/// max_i |y_i - ref_i| / max(|ref_i|, tiny), and where it is; infinity for a NaN or inf where
/// the reference is finite (compare() reports those too).
struct RelError {
  double max_rel = 0.0;
  std::size_t worst = 0;
};
inline RelError rel_error(const std::vector<float>& y, const std::vector<double>& ref,
                          double tiny) {
  RelError e;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double err = std::isfinite(y[i])
                           ? std::fabs(y[i] - ref[i]) / std::max(std::fabs(ref[i]), tiny)
                           : std::numeric_limits<double>::infinity();
    if (!(err <= e.max_rel)) e = {err, i};
  }
  return e;
}

/// The bound of a rung whose float computation is within `a` of fp64 (relative), after the
/// rounding to t, relative half_ulp (1 + a) of |y|: |round(y) - ref| <= (a + half_ulp (1 + a))
/// max(|ref|, tiny).
inline double rounded_bound(double a, Dtype t) {
  return a + output_rounding(t).half_ulp * (1 + a);
}

/// One case of a softmax ladder check: a shape, an input kind, an element type.
struct SoftmaxCase {
  RowShape shape;
  InputKind kind;
  Dtype dtype;
};

/// Every shape of this binary times every input kind, in each of `dtypes`.
inline std::vector<SoftmaxCase> softmax_cases(const std::vector<Dtype>& dtypes = {Dtype::fp32}) {
  std::vector<SoftmaxCase> cases;
  for (Dtype t : dtypes)
    for (const RowShape& s : softmax_kernel_shapes())
      for (InputKind kind : all_input_kinds()) cases.push_back({s, kind, t});
  return cases;
}

/// Every rung of `ladder` (kernels of `backend`) against `cpu_step` and the rung before, on
/// every case (tests/ladder_checks.hpp), inputs rounded to the case's type (fp64 and the CPU
/// step run on the rounded values): a rung's relative error against fp64, measured against
/// max(|ref|, tiny), may be at most twice the CPU step's (and twice the rung before's) plus
/// `floor`, plus the output's rounding: with a = chain_bound(cpu, floor), the floor passed on is
/// floor + half_ulp (1 + a), so the bound against the CPU step is rounded_bound(a). A rung
/// whose limits refuse a case is not run on it.
inline void check_softmax_ladder(Backend backend, const Ladder<RowArgs>& ladder,
                                 const SoftmaxStep& cpu_step, const KernelFloor& floor,
                                 std::uint64_t seed,
                                 const std::vector<SoftmaxCase>& cases = softmax_cases()) {
  check_ladder(ladder, cases,
               [&](const Rung<RowArgs>& rung, const SoftmaxCase& c) -> std::optional<RungError> {
                 const int rows = c.shape.rows, cols = c.shape.cols;
                 const std::vector<float> x =
                     round_elements(make_input(c.kind, rows, cols, seed), c.dtype);
                 RowBuffers buffers(backend, x, rows, cols, c.dtype);
                 if (!why_refused(rung, buffers.args).empty()) return std::nullopt;
                 run_rung(rung, buffers.args);
                 const std::vector<double> reference = ref::softmax(x, rows, cols);
                 const std::vector<float> y = buffers.download_y();
                 const OutputRounding rounding = output_rounding(c.dtype);
                 ErrorReport report = compare(y, reference);  // NaN-aware, and where the worst is
                 report.max_rel = rel_error(y, reference, rounding.tiny).max_rel;
                 const double cpu = compare(cpu_step(x, rows, cols), reference).max_rel;
                 const double float_floor = floor(rung, buffers.args);
                 const double a = chain_bound(cpu, float_floor);
                 return RungError{report, true, cpu, float_floor + rounding.half_ulp * (1 + a),
                                  std::to_string(rows) + "x" + std::to_string(cols) + " " +
                                      to_string(c.kind) + " " + to_string(c.dtype)};
               });
}

/// The same for an fp32 ladder whose floor depends on cols only.
inline void check_softmax_ladder(Backend backend, const Ladder<RowArgs>& ladder,
                                 const SoftmaxStep& cpu_step, double (*floor)(int cols),
                                 std::uint64_t seed) {
  check_softmax_ladder(
      backend, ladder, cpu_step,
      [floor](const Rung<RowArgs>&, const RowArgs& args) { return floor(args.cols); }, seed);
}

}  // namespace wb::test
