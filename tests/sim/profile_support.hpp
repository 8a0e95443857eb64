// The profile-mode tests' one launch under the profiler (tests/sim/test_profile_counters.cpp,
// test_hopper_access.cpp; the instrumented binary test_sim_access).
#pragma once

#include <doctest/doctest.h>

#include <vector>

#include "common/sim/access.hpp"

namespace wb::test {

/// What profile mode recorded of the one launch `launch()` makes.
template <typename Launch>
wb::sim::LaunchProfile profile_of(Launch launch) {
  wb::sim::start_profile();
  launch();
  std::vector<wb::sim::LaunchProfile> p = wb::sim::stop_profile();
  REQUIRE(p.size() == 1);
  return p[0];
}

}  // namespace wb::test
