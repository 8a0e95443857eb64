// The tests' chain check over a kernel ladder (common/rung.hpp), shared by every chapter:
// every rung equals the CPU step and the rung before it, on every case of a list, under the
// tolerance policy (DESIGN.md): a rung's error against fp64 is at most twice the CPU step's
// error plus the rung's floor, and at most twice the error of the rung before it (the last
// earlier rung that takes the case) plus the same floor.
//
// Both bounds move with a measured error: a fault the rung shares with the CPU step (a
// __host__ __device__ function both call, epsilon outside a square root, a wrong logsumexp)
// raises the CPU step's error and the rung's alike, and the chain passes. So every rung is
// also held to a bound of its own against fp64 (RungError::fp64_bound) that no measured error
// moves: the policy's rule with the CPU step's stated bound (what the cpu suite holds it to) in
// place of its measured error, 2 x that bound + the rung's floor. A correct CPU step is within
// its bound, so this bound is never tighter than the chain's where the CPU step is right.
//
//   test::check_ladder(ladder, cases, [&](const Rung<RowArgs>& rung, const Case& c)
//       -> std::optional<test::RungError> { ... run it, compare with fp64 ... });
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/compare.hpp"
#include "common/rung.hpp"
#include "tests/support.hpp"

namespace wb::test {

/// The rungs a check ran, so that it can require that every rung of the ladder took some case:
/// a rung whose limits refused them all would otherwise pass unseen.
class RungsRan {
 public:
  void add(const std::string& name) { names_.insert(name); }
  template <typename Args>
  void check_every_rung(const Ladder<Args>& ladder) const {
    for (const Rung<Args>& rung : ladder)
      CHECK_MESSAGE(names_.count(rung.name) == 1, std::string(rung.name), " took none of the cases");
  }

 private:
  std::set<std::string> names_;
};

/// One rung on one case, against fp64.
struct RungError {
  ErrorReport report;  ///< the rung's output against the fp64 reference
  bool relative;       ///< the bound applies to report.max_rel (else to report.max_abs)
  double cpu_error;    ///< the CPU step's error on the same case, in the same measure
  double floor;        ///< the rung's floor on this case (its reason: at the caller)
  /// The rung's own bound against fp64 on this case, in the same measure, independent of any
  /// measured error: chain_bound(the CPU step's stated bound, floor), as the caller derives it.
  double fp64_bound;
  /// The case, for the failure message and as the cache's key: "1823x781 randn fp32". It must
  /// name everything the case's inputs depend on (shape, kind, type, and seed where it varies).
  std::string where;
  double error() const { return relative ? report.max_rel : report.max_abs; }
  bool within(double bound) const {
    return relative ? report.within_rel(bound) : report.within(bound);
  }
};

namespace detail {
/// The errors of the rungs already checked, so that rung i compares with rung i - 1 without
/// running it again: doctest enters the test case once per SUBCASE, in ladder order.
/// Key: (the ladder's first launch, rung index, the case's `where`), so that two lists of
/// cases checked on one ladder never mix: a key names the same inputs in both.
using ErrorKey = std::tuple<const void*, std::size_t, std::string>;
inline std::map<ErrorKey, double>& rung_errors() {
  static std::map<ErrorKey, double> errors;
  return errors;
}
}  // namespace detail

/// For every rung of `ladder` (a SUBCASE each, so a failure names its rung) and every case:
/// `run(rung, case)` runs the rung (std::nullopt when its limits refuse the case) and returns
/// its error; the check is the chain rule above.
template <typename Args, typename Case, typename Run>
void check_ladder(const Ladder<Args>& ladder, const std::vector<Case>& cases, Run&& run) {
  if (ladder.empty()) return;
  const void* id = reinterpret_cast<const void*>(ladder.front().launch);
  auto& errors = detail::rung_errors();
  // The error of rung r on case c (described by `where`), from the cache or by running it.
  auto error_of = [&](std::size_t r, std::size_t c, const std::string& where) -> std::optional<double> {
    if (auto it = errors.find(detail::ErrorKey(id, r, where)); it != errors.end()) return it->second;
    const std::optional<RungError> e = run(ladder[r], cases[c]);
    if (!e) return std::nullopt;
    return errors[detail::ErrorKey(id, r, e->where)] = e->error();
  };
  for (std::size_t r = 0; r < ladder.size(); ++r) {
    SUBCASE(ladder[r].name) {
      int ran = 0;
      for (std::size_t c = 0; c < cases.size(); ++c) {
        const std::optional<RungError> e = run(ladder[r], cases[c]);
        if (!e) continue;
        ++ran;
        const std::string& where = e->where;
        CAPTURE(where);
        errors[detail::ErrorKey(id, r, where)] = e->error();
        const double vs_cpu = chain_bound(e->cpu_error, e->floor);
        CHECK_MESSAGE(e->within(vs_cpu), "error ", e->report.describe(),
                      " exceeds 2 x the CPU step's + floor = ", vs_cpu);
        CHECK_MESSAGE(e->within(e->fp64_bound), "error ", e->report.describe(),
                      " exceeds the rung's own bound against fp64 (2 x the CPU step's stated "
                      "bound + floor) = ",
                      e->fp64_bound, "; the CPU step's error is ", e->cpu_error);
        for (std::size_t p = r; p-- > 0;) {  // the last earlier rung that takes the case
          const std::optional<double> previous = error_of(p, c, where);
          if (!previous) continue;
          const double vs_previous = chain_bound(*previous, e->floor);
          CHECK_MESSAGE(e->within(vs_previous), "error ", e->report.describe(), " exceeds 2 x ",
                        ladder[p].name, "'s + floor = ", vs_previous);
          break;
        }
      }
      // A rung no case exercises would pass without a check: the list must reach every rung.
      CHECK_MESSAGE(ran > 0, std::string(ladder[r].name), " takes none of the cases");
    }
  }
}

}  // namespace wb::test
