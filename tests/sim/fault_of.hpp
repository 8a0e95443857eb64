// The simulator tests' check of a planted bug (tests/sim/test_faults.cpp, test_memcheck*.cpp,
// test_ptx_faults.cpp, test_wmma_faults.cpp): the Fault it raises, and what its message says.
#pragma once

#include <string>
#include <vector>

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

/// `message` says each of `phrases` (each checked on its own: a failure names the one missing).
inline void check_says(const std::string& message, const std::vector<std::string>& phrases) {
  CAPTURE(message);
  for (const std::string& phrase : phrases) {
    CAPTURE(phrase);
    CHECK(message.find(phrase) != std::string::npos);
  }
}

}  // namespace wb::test
