// The simulator tests' check of a planted bug (tests/sim/test_faults.cpp, test_wmma_faults.cpp).
#pragma once

#include <string>

#include <doctest/doctest.h>

#include "common/sim/sim.hpp"

namespace wb::test {

/// Runs `launch`, requires a Fault of `kind`, and returns its message.
template <typename Launch>
std::string fault_of(wb::sim::Fault::Kind kind, Launch launch) {
  try {
    launch();
  } catch (const wb::sim::Fault& fault) {
    CHECK(static_cast<int>(fault.kind()) == static_cast<int>(kind));
    return fault.what();
  }
  FAIL("the planted bug was not reported");
  return "";
}

}  // namespace wb::test
