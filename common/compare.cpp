#include "common/compare.hpp"

#include <cfloat>
#include <cmath>
#include <cstdio>

#include "common/table.hpp"

namespace wb {

namespace {

bool same_kind(double a, double r) {
  if (std::isnan(r)) return std::isnan(a);
  if (std::isinf(r)) return a == r;
  return std::isfinite(a);
}

template <typename Ref>
ErrorReport compare_impl(const std::vector<float>& actual, const std::vector<Ref>& reference) {
  ErrorReport rep;
  rep.count = actual.size();
  if (actual.size() != reference.size()) {
    rep.size_mismatch = true;
    return rep;
  }
  constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  std::size_t first_mismatch = kNone;
  std::size_t worst_finite = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i];
    const double r = static_cast<double>(reference[i]);
    if (!same_kind(a, r)) {
      if (first_mismatch == kNone) first_mismatch = i;
      ++rep.nonfinite_mismatches;
      continue;
    }
    if (!std::isfinite(r)) continue;  // matched NaN or inf: no distance to measure
    const double abs_err = std::fabs(a - r);
    rep.max_rel = std::fmax(rep.max_rel, abs_err / std::fmax(std::fabs(r), static_cast<double>(FLT_MIN)));
    if (abs_err > rep.max_abs) {
      rep.max_abs = abs_err;
      worst_finite = i;
    }
  }
  // A non-finite mismatch outranks any finite error: it is the element to look at first.
  rep.worst = first_mismatch != kNone ? first_mismatch : worst_finite;
  if (!actual.empty()) {
    rep.worst_actual = actual[rep.worst];
    rep.worst_reference = static_cast<double>(reference[rep.worst]);
  }
  return rep;
}

}  // namespace

// A tolerance that is not finite (a bound built on an infinite score error, say) proves
// nothing, so nothing is within it.
bool ErrorReport::within(double abs_tol) const {
  return std::isfinite(abs_tol) && !size_mismatch && nonfinite_mismatches == 0 &&
         max_abs <= abs_tol;
}

bool ErrorReport::within_rel(double rel_tol) const {
  return std::isfinite(rel_tol) && !size_mismatch && nonfinite_mismatches == 0 &&
         max_rel <= rel_tol;
}

std::string ErrorReport::describe() const {
  char buf[256];
  if (size_mismatch) return "sizes differ";
  std::snprintf(buf, sizeof buf, "max abs %.3e rel %.3e, %s at [%zu] = %.9g vs %.9g (%zu non-finite mismatches)",
                max_abs, max_rel, nonfinite_mismatches ? "first non-finite mismatch" : "worst",
                worst, worst_actual, worst_reference, nonfinite_mismatches);
  return buf;
}

std::string ErrorReport::cell() const {
  std::string s = sci(max_abs);
  if (nonfinite_mismatches > 0 || size_mismatch)
    s += " (" + std::to_string(nonfinite_mismatches) + " mismatches!)";
  return s;
}

ErrorReport compare(const std::vector<float>& actual, const std::vector<double>& reference) {
  return compare_impl(actual, reference);
}
ErrorReport compare(const std::vector<float>& actual, const std::vector<float>& reference) {
  return compare_impl(actual, reference);
}

}  // namespace wb
