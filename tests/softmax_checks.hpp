// What the softmax chapters' tests (01, 02, 03) share: the shapes, the CPU steps' stated bounds
// against fp64, the chain check of a kernel ladder (tests/ladder_checks.hpp) against the
// chapter's CPU step under the tolerance policy, and the check that every lane and thread of a
// kernel normalized its row with the same statistics.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
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
#include "tests/lane_checks.hpp"
#include "tests/row_shape.hpp"
#include "tests/support.hpp"

namespace wb::test {

// ------------------------------------------------------------------------------------------
// The CPU steps' stated bounds against fp64, relative to each element
// ------------------------------------------------------------------------------------------
//
// What each chapter's cpu suite proves of its CPU step. A kernel rung is held to twice this
// plus its floor as well as to twice the step's measured error plus its floor
// (RungError::fp64_bound): a fault shared by the CPU step and the kernels fails there.

/// Chapter 01, safe softmax, checked against fp64 directly. The numerator e_i = e^{x_i - m}:
/// - x_i - m rounds once: an absolute error of up to u |x_i - m| in the exponent, so a
///   relative error of up to u |x_i - m| in e_i; below -104 the float exp is 0 and so (to
///   within FLT_MIN, see ErrorReport::max_rel) is the reference: |x_i - m| <= 104 matters;
/// - exp itself: glibc's expf is within 1 ulp, a relative 2 u (kHostExpErr).
/// The sum d, of the float e_j in double (its own rounding negligible), then rounded to float
/// (u): each term brings its relative error, so d's is their mean weighted by p_j = e_j / d,
/// 2 u from exp plus u sum_j p_j t_j from the arguments (t_j = m - x_j). With p_j = e^{-t_j}
/// / d, sum_j p_j t_j = H(p) - ln d <= ln n, as d >= 1 (the maximum's own term is 1) and the
/// entropy H(p) of n weights is at most ln n: 10.4 at n = 32768, 16.6 at n = 2^24. The
/// reciprocal and the product: u each.
/// So at most (104 + 2 + ln n + 2 + 1 + 1 + 1) u = (111 + ln n) u < 128 u, the bound.
inline constexpr double kSafeCpuRelBound = 128 * kFloatEps;

/// glibc's expf is within 1 ulp (a relative 2u).
inline constexpr double kHostExpErr = 2 * kFloatEps;

/// Relative error bound of d'_N from the float recurrence (1), (4) of chapter 02 over n
/// entries, with an exp whose relative error is at most `exp_err`. Follow the term
/// e^{x_j - m_N} through the recurrence: it is born as e^{x_j - m_j}, whose argument
/// x_j - m_j rounds once (an absolute error u (m_j - x_j) in the exponent, a relative one in
/// the term), then exp (exp_err) and the add (u); each later step k multiplies it by
/// e^{m_{k-1} - m_k} (argument rounding u (m_k - m_{k-1}), exp_err, the product u) and adds
/// (u). The argument errors telescope to u (m_N - x_j), which matters only while the term is
/// not below float's range, m_N - x_j <= 104 (e^-104 < FLT_TRUE_MIN). So at most
/// (104 + n (exp_err/u + 2)) u.
inline double online_d_bound(int n, double exp_err) {
  return 104 * kFloatEps + n * (exp_err + 2 * kFloatEps);
}

/// Chapter 02's CPU step against chapter 01's, both against fp64: y_i = e^{x_i - m} (1/d) runs
/// the same float operations in both chapters, so the two differ only through d. Chapter 01's
/// d is a double sum of float exps (104 u + 2 u + 1 u for the rounding to float); chapter 02's
/// d' is within online_d_bound(cols); plus 2 u for the two reciprocals' roundings.
inline double online_cpu_floor(int cols) {
  return online_d_bound(cols, kHostExpErr) + (104 + 2 + 1) * kFloatEps + 2 * kFloatEps;
}

/// Chapter 02, online softmax: its cpu suite holds it within twice chapter 01's error plus
/// online_cpu_floor, and chapter 01 within kSafeCpuRelBound.
inline double online_cpu_bound(int cols) {
  return chain_bound(kSafeCpuRelBound, online_cpu_floor(cols));
}

/// Shapes that are multiples of nothing, and the edges: one column, one short of a warp, one
/// past, more than the 256-thread block, Triton's irregular 1823 x 781.
inline const std::vector<RowShape> kSoftmaxShapes = {
    {1, 1}, {3, 2}, {2, 31}, {5, 32}, {7, 33}, {4, 127}, {3, 257}, {11, 1000}, {1823, 781}};

/// The simulator's shapes: the same, with 183 of the 1823 rows. No kernel caps its grid (a
/// block or a warp's group takes the next rows, whatever their number), so the rows past the
/// first blocks add only time: 1.4 million entries per rung were a third of the suite's
/// softmax time.
inline const std::vector<RowShape> kSoftmaxKernelShapes = {
    {1, 1}, {3, 2}, {2, 31}, {5, 32}, {7, 33}, {4, 127}, {3, 257}, {11, 1000}, {183, 781}};

/// In race mode every shared-memory access is checked: the shapes up to 257 columns still
/// cover partial warps, strided loops and more columns than threads.
inline const std::vector<RowShape> kSoftmaxRaceShapes = {{1, 1}, {2, 31}, {3, 33}, {2, 257}};

/// The shapes of this binary: the race-mode twin takes the smaller list.
inline const std::vector<RowShape>& softmax_kernel_shapes() {
  return small_shapes() ? kSoftmaxRaceShapes : kSoftmaxKernelShapes;
}

/// `check(x)` on a rows x cols input x of every kind (make_input with `seed`), the kind named
/// in a failure's message.
template <typename Check>
void for_every_input_kind(int rows, int cols, std::uint64_t seed, Check&& check) {
  for (InputKind kind : all_input_kinds()) {
    const std::string input = to_string(kind);
    CAPTURE(input);
    check(make_input(kind, rows, cols, seed));
  }
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
/// floor + half_ulp (1 + a), so the bound against the CPU step is rounded_bound(a). The rung's
/// own bound against fp64 is the same with the CPU step's stated bound `cpu_bound(cols)` in
/// place of its error: rounded_bound(chain_bound(cpu_bound, floor)). A rung whose limits
/// refuse a case is not run on it.
inline void check_softmax_ladder(Backend backend, const Ladder<RowArgs>& ladder,
                                 const SoftmaxStep& cpu_step, const KernelFloor& floor,
                                 double (*cpu_bound)(int cols), std::uint64_t seed,
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
                 // The CPU step's error in the rung's measure (against max(|ref|, tiny)).
                 const double cpu =
                     rel_error(cpu_step(x, rows, cols), reference, rounding.tiny).max_rel;
                 const double float_floor = floor(rung, buffers.args);
                 const double a = chain_bound(cpu, float_floor);
                 return RungError{
                     report,
                     true,
                     cpu,
                     float_floor + rounding.half_ulp * (1 + a),
                     rounded_bound(chain_bound(cpu_bound(cols), float_floor), c.dtype),
                     std::to_string(rows) + "x" + std::to_string(cols) + " " + to_string(c.kind) +
                         " " + to_string(c.dtype)};
               });
}

// ------------------------------------------------------------------------------------------
// Every lane and thread normalizes with the same (m, d)
// ------------------------------------------------------------------------------------------

/// Rows whose lanes hold unequal statistics and one shared value: randn, outliers x20 and
/// randn + 1e4 in turn (the lanes' maxima and sums differ, so two orders of a merge round
/// differently), with every third column set to column 1's value. The columns of a lane of a
/// warp (l, l + 32, l + 64, with cols >= 96) or of a thread of a block of 256 (cols >= 768)
/// cover every residue mod 3, and so do the 4 or 8 consecutive columns of a 16-byte vector:
/// each holds the shared value.
inline std::vector<float> shared_value_rows(int rows, int cols, std::uint64_t seed) {
  const InputKind kinds[] = {InputKind::randn, InputKind::outliers, InputKind::large_offset};
  std::vector<float> x;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> row =
        make_input(kinds[r % 3], 1, cols, seed + static_cast<std::uint64_t>(r));
    for (std::size_t c = 0; c < row.size(); c += 3) row[c] = row[row.size() > 1 ? 1 : 0];
    x.insert(x.end(), row.begin(), row.end());
  }
  return x;
}

/// The shapes of the lanes check: warp lanes with 3 to 32 values each, every thread of a block
/// of 256 with scalar values, 4-float and 8-half vectors, in this binary's size.
inline std::vector<RowShape> lane_shapes() {
  if (small_shapes()) return {{3, 100}, {1, 1000}};
  return {{3, 100}, {2, 1000}, {2, 1023}, {2, 2048}};
}

/// Every rung of `ladder` (kernels of `backend`) on shared_value_rows, in each of `dtypes` it
/// takes: equal entries of a row give equal outputs, bit for bit. y_i = e^{x_i - m} (1/d) is
/// computed by the lane or thread that holds x_i, with its own copy of the row's (m, d): copies
/// that differ in a bit (a merge that is not commutative bit for bit, a reduction that leaves
/// the result in lane 0 alone) give the shared value different outputs in different lanes.
inline void check_softmax_lanes_agree(Backend backend, const Ladder<RowArgs>& ladder,
                                      const std::vector<Dtype>& dtypes, std::uint64_t seed) {
  for (const Rung<RowArgs>& rung : ladder) {
    for (Dtype t : dtypes) {
      if (!rung.limits.takes(t)) continue;
      bool took = false;  // a rung whose limits refused every shape would pass unseen
      for (const RowShape& s : lane_shapes()) {
        INFO(rung.name << " on " << to_string(t) << ", " << s.rows << " x " << s.cols);
        const std::vector<float> x = round_elements(shared_value_rows(s.rows, s.cols, seed), t);
        RowBuffers buffers(backend, x, s.rows, s.cols, t);
        if (!why_refused(rung, buffers.args).empty()) continue;
        took = true;
        run_rung(rung, buffers.args);
        const std::optional<BitMismatch> m =
            equal_inputs_equal_outputs(x, buffers.download_y(), static_cast<std::size_t>(s.cols));
        CHECK_MESSAGE(!m, "equal entries of a row, held by different lanes or threads, give "
                          "different outputs: ",
                      m ? m->describe() : "");
      }
      CHECK_MESSAGE(took, rung.name, " took none of the lanes check's shapes in ", to_string(t));
    }
  }
}

/// The same for an fp32 ladder whose floor depends on cols only.
inline void check_softmax_ladder(Backend backend, const Ladder<RowArgs>& ladder,
                                 const SoftmaxStep& cpu_step, double (*floor)(int cols),
                                 double (*cpu_bound)(int cols), std::uint64_t seed) {
  check_softmax_ladder(
      backend, ladder, cpu_step,
      [floor](const Rung<RowArgs>&, const RowArgs& args) { return floor(args.cols); }, cpu_bound,
      seed);
}

/// Softmax is shift invariant, and on x on a grid of 1/64 with |x| < 8 shifted by c = +-1000 or
/// 0.5 floating point keeps it: x + c needs 16 bits, so x + c and every difference of two
/// shifted values (x_i - m, m_{i-1} - m_i) is exact, and a step that only ever subtracts values
/// of the row sees identical operands. `step(x, rows, cols)` must give identical outputs, bit
/// for bit. Returns the unshifted grid input (13 x 333), for a test's further checks.
inline std::vector<float> check_exact_shift_invariance(
    const std::function<std::vector<float>(const std::vector<float>&, int, int)>& step,
    std::uint64_t seed) {
  const int rows = 13, cols = 333;
  std::vector<float> x = make_input(InputKind::randn, rows, cols, seed);
  for (float& v : x) v = std::round(std::fmax(std::fmin(v, 7.f), -7.f) * 64.f) / 64.f;
  for (float c : {1000.f, -1000.f, 0.5f}) {
    CAPTURE(c);
    std::vector<float> shifted = x;
    for (float& v : shifted) v += c;
    CHECK(step(x, rows, cols) == step(shifted, rows, cols));
  }
  return x;
}

}  // namespace wb::test
