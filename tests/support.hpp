// Test helpers shared by every chapter's doctest file.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/backend.hpp"
#include "common/compare.hpp"
#include "common/dtype.hpp"

#include "common/sim/access.hpp"
#include "common/sim/runtime.hpp"

namespace wb::test {
/// True in the race-mode twin of a test binary (linked with ThreadSanitizer over the
/// simulator's fibers) and in its instrumented twin (memcheck and initcheck), see the
/// simulator's page: every memory access is checked and kernels run several times slower, so
/// kernel tests use their smaller shapes there. Asked at run time: one compile of the tests
/// serves every twin (common/cmake/WbChapter.cmake), only the kernel libraries differ. On a
/// GPU, WB_TEST_SMALL_SHAPES=1 asks for the same shapes, for compute-sanitizer's racecheck,
/// which runs the kernels as many times slower as the simulator's race mode does.
inline bool small_shapes() {
  static const bool asked = [] {
    const char* v = std::getenv("WB_TEST_SMALL_SHAPES");
    return v != nullptr && std::string(v) == "1";
  }();
  return asked || sim::race_mode() || sim::instrumented();
}

/// The dtypes of `dtypes` a kernel test runs in: all of them, or in race mode and the
/// instrumented twin (small_shapes()) the first of each element size. fp16 and bf16 are both two
/// bytes: a rung moves the same bytes through the same loads, stores, barriers and waits in
/// either (only the conversions differ, which touch no memory), and those are all that race
/// mode, memcheck and initcheck check; the sim suite runs every dtype.
inline std::vector<Dtype> dtypes_of_this_run(const std::vector<Dtype>& dtypes) {
  if (!small_shapes()) return dtypes;
  std::vector<Dtype> one_per_size;
  for (Dtype t : dtypes) {
    bool seen = false;
    for (Dtype u : one_per_size) seen = seen || dtype_bytes(u) == dtype_bytes(t);
    if (!seen) one_per_size.push_back(t);
  }
  return one_per_size;
}

/// Whether `v` holds a NaN. The kernel tests' inputs hold none, so neither may their fp64
/// reference: compare() matches a NaN output with a NaN reference (NaN inputs give NaN rows),
/// and a reference gone NaN would let any output pass there.
template <typename T>
bool has_nan(const std::vector<T>& v) {
  for (const T& x : v)
    if (std::isnan(x)) return true;
  return false;
}

/// For its lifetime, the simulator runs launches with their blocks in reverse order
/// (sim::set_block_order), so that what depends on the order of blocks (atomics summed
/// across blocks) comes out of another order than the default's; then the order it found
/// again. On a GPU it does nothing: the hardware picks the order.
class ReversedBlocks {
 public:
  explicit ReversedBlocks(Backend b) : sim_(b == Backend::sim), before_(sim::block_order()) {
    if (sim_) sim::set_block_order(sim::BlockOrder::reverse);
  }
  ~ReversedBlocks() {
    if (sim_) sim::set_block_order(before_);
  }
  ReversedBlocks(const ReversedBlocks&) = delete;
  ReversedBlocks& operator=(const ReversedBlocks&) = delete;

 private:
  bool sim_;
  sim::BlockOrder before_;
};
}  // namespace wb::test

/// CHECK that `report` is within `bound`, printing the worst element when it is not.
#define WB_CHECK_WITHIN(report, bound)                                              \
  CHECK_MESSAGE((report).within(bound), "error ", (report).describe(), " exceeds ", \
                (bound))

/// CHECK that `report`'s relative error is within `bound`.
#define WB_CHECK_WITHIN_REL(report, bound)                                                  \
  CHECK_MESSAGE((report).within_rel(bound), "relative error ", (report).describe(), " exceeds ", \
                (bound))

/// Registers `body<B>()`, a function template over wb::Backend, twice: as the `sim` test
/// "sim: <name>" and as the `cuda` test "cuda: <name>". Builds without nvcc keep an empty
/// `cuda` case, which never runs: tests/main.cpp reports the cuda suite as skipped first.
#define WB_KERNEL_TEST_CASE(name, body)                                          \
  TEST_CASE("sim: " name * doctest::test_suite("sim")) { body<wb::Backend::sim>(); } \
  WB_CUDA_TEST_CASE_(name, body)

#if WB_HAVE_CUDA
#define WB_CUDA_TEST_CASE_(name, body) \
  TEST_CASE("cuda: " name * doctest::test_suite("cuda")) { body<wb::Backend::cuda>(); }
#else
#define WB_CUDA_TEST_CASE_(name, body) \
  TEST_CASE("cuda: " name * doctest::test_suite("cuda")) {}
#endif
