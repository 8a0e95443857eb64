// What the softmax chapters' tests (01, 02, 03) share: the shapes, and the check of a kernel
// ladder against the chapter's CPU step under the tolerance policy.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "common/buffer.hpp"
#include "common/inputs.hpp"
#include "common/reference.hpp"
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
/// The floor of the tolerance policy for kernel `k` on rows of `cols`.
using KernelFloor = std::function<double(const ch01::NamedKernel& k, int cols)>;

/// Every kernel of `ladder` (kernels of `backend`, a SUBCASE each so a failure names its
/// rung) against `cpu_step` on every shape of this binary and every input kind: the kernel's
/// relative error against fp64 may be at most twice the CPU step's, plus `floor`.
inline void check_softmax_ladder(Backend backend, const std::vector<ch01::NamedKernel>& ladder,
                                 const SoftmaxStep& cpu_step, const KernelFloor& floor,
                                 std::uint64_t seed) {
  for (const ch01::NamedKernel& k : ladder) {
    SUBCASE(k.name) {
      for (const RowShape& s : softmax_kernel_shapes()) {
        for (InputKind kind : all_input_kinds()) {
          const std::string input = to_string(kind);
          CAPTURE(s.rows);
          CAPTURE(s.cols);
          CAPTURE(input);
          const std::vector<float> x = make_input(kind, s.rows, s.cols, seed);
          const std::vector<double> reference = ref::softmax(x, s.rows, s.cols);
          const ErrorReport cpu = compare(cpu_step(x, s.rows, s.cols), reference);
          DeviceBuffer<float> dx(backend, x);
          DeviceBuffer<float> dy(backend, x.size());
          k.launch(dx.data(), dy.data(), s.rows, s.cols);
          const ErrorReport kernel = compare(dy.download(), reference);
          WB_CHECK_WITHIN_REL(kernel, chain_bound(cpu.max_rel, floor(k, s.cols)));
        }
      }
    }
  }
}

}  // namespace wb::test
