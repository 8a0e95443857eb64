// The traffic check: every rung of a ladder moves exactly the global-memory bytes its header
// states (Rung::traffic, common/rung.hpp), counted by the simulator's profile mode. Runs only
// in a chapter's instrumented twin (suite "profile", CTest NN_name/sim-profile), on odd shapes
// (rows and cols that are multiples of nothing), so a formula that holds only for whole tiles
// or whole vectors fails.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "common/rung.hpp"
#include "common/sim/access.hpp"

namespace wb::test {

/// Global bytes read and written by everything `launch` runs, counted by profile mode.
struct CountedTraffic {
  std::uint64_t loaded = 0, stored = 0;
};

template <typename Launch>
CountedTraffic count_traffic(Launch&& launch) {
  wb::sim::start_profile();
  try {
    launch();
  } catch (...) {
    wb::sim::stop_profile();
    throw;
  }
  CountedTraffic c;
  for (const wb::sim::LaunchProfile& p : wb::sim::stop_profile()) {
    c.loaded += p.counts.global_load.bytes;
    c.stored += p.counts.global_store.bytes;
  }
  return c;
}

/// Every rung of `ladder` that takes `args` states its traffic, and moves exactly that.
/// Returns the names of the rungs that took `args` (for check_every_rung_counted).
template <typename Args>
std::vector<std::string> check_ladder_traffic(const Ladder<Args>& ladder, const Args& args,
                                              const std::string& where) {
  REQUIRE_MESSAGE(wb::sim::instrumented(),
                  "traffic checks need the instrumented twin (run NN_name/sim-profile)");
  std::vector<std::string> took;
  for (const Rung<Args>& rung : ladder) {
    if (!why_refused(rung, args).empty()) continue;
    took.emplace_back(rung.name);
    INFO(std::string(rung.name), " on ", where);
    const bool states_traffic = rung.traffic != nullptr;
    REQUIRE_MESSAGE(states_traffic, rung.name, " states no traffic (Rung::traffic)");
    const Traffic stated = rung.traffic(args);
    const CountedTraffic counted = count_traffic([&] { rung.launch(args); });
    INFO("the header says: ", stated.formula);
    CHECK(counted.loaded == stated.loaded);
    CHECK(counted.stored == stated.stored);
  }
  return took;
}

/// Each rung of `ladder` was counted on some case: `took` lists the rungs each case ran.
template <typename Args>
void check_every_rung_counted(const Ladder<Args>& ladder, const std::vector<std::string>& took) {
  for (const Rung<Args>& rung : ladder) {
    bool counted = false;
    for (const std::string& name : took) counted = counted || name == rung.name;
    CHECK_MESSAGE(counted, rung.name, " took none of the traffic check's cases");
  }
}

}  // namespace wb::test
