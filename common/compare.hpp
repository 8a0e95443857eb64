// NaN-aware comparison of a result against its fp64 reference.
//
// `fabs(a - b) > tol` lets a NaN through (every comparison with NaN is false). Here a
// non-finite value where the reference is finite is a failure by itself, reported with its
// index, value and reference, whatever the tolerance.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace wb {

struct ErrorReport {
  std::size_t count = 0;        ///< elements compared
  double max_abs = 0.0;         ///< max |actual - reference| over finite pairs
  /// max |actual - reference| / max(|reference|, FLT_MIN). Below FLT_MIN (the smallest
  /// normal float) a float keeps only absolute precision, so the relative error is measured
  /// against FLT_MIN there instead of blowing up on subnormal or zero references.
  double max_rel = 0.0;
  std::size_t worst = 0;        ///< index of the max abs error (or of the first mismatch)
  double worst_actual = 0.0;    ///< actual[worst]
  double worst_reference = 0.0; ///< reference[worst]
  std::size_t nonfinite_mismatches = 0;  ///< NaN/inf where the reference differs in kind
  bool size_mismatch = false;

  /// True when every element matched in kind and max_abs <= abs_tol, a finite tolerance.
  bool within(double abs_tol) const;
  /// True when every element matched in kind and max_rel <= rel_tol, a finite tolerance.
  bool within_rel(double rel_tol) const;
  /// One line: "max abs 1.2e-07 rel 3.4e-06 at [17] = 0.1 vs 0.1000001 (0 non-finite)".
  std::string describe() const;
  /// A table cell: max_abs, and the mismatches when there are any ("3.1e-07",
  /// "3.1e-07 (2 mismatches!)": NaN or inf where the reference differs, or a miss of an exact
  /// reference in compare_weighted).
  std::string cell() const;
};

/// Compares element-wise. Non-finite references (NaN, +-inf) must be matched exactly in kind.
ErrorReport compare(const std::vector<float>& actual, const std::vector<double>& reference);
ErrorReport compare(const std::vector<float>& actual, const std::vector<float>& reference);

/// The unit roundoff of float, 2^-24: the relative error of one correctly rounded operation.
inline constexpr double kFloatEps = 5.9604644775390625e-08;

/// The workbook's tolerance policy: a step's error against fp64 may be at most twice the
/// previous step's error against fp64, plus a stated floor (FlashAttention's own rule
/// against PyTorch). Returns that bound.
inline double chain_bound(double previous_step_error, double floor) {
  return 2.0 * previous_step_error + floor;
}

}  // namespace wb
