// Bitwise consistency of the kernels' cross-lane reductions, shared by the chapters' tests.
//
// A butterfly all-reduce (__shfl_xor_sync) leaves every lane of a group with its own copy of
// the result, and the pages promise every lane the same bits: the max in every lane is the
// same float, the (m, d) merge is commutative bit for bit (block_merge.md, eq. 5), and the
// Welford all-reduce passes the lower lane's state first because Chan's combine is not
// (welford_layernorm.md). A lane that combined in its own order holds other bits, and the
// accuracy checks cannot see it: both results are within the bound. What every lane holds is
// observed through what it writes:
// - an output that is a function of one input element and the row's statistics (softmax's
//   e^{x - m} / d, LayerNorm's (x - mean) rstd) must give equal input elements of a row equal
//   bits wherever in the row, so in whichever lane, they sit (equal_inputs_equal_outputs);
// - where the kernel writes the statistics too, every output element must reproduce from them
//   bit for bit (first_bit_mismatch against the recomputed outputs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace wb::test {

/// The bit pattern of v: -0 and +0 differ, a NaN is itself.
inline std::uint32_t bits_of(float v) {
  std::uint32_t b = 0;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

/// Where two arrays of one row-major (rows, cols) shape first differ in bits, and how many
/// elements do.
struct BitMismatch {
  std::size_t count = 0;  ///< elements that differ
  std::size_t row = 0, col = 0;
  float actual = 0.f, expected = 0.f;
  std::string describe() const {
    std::ostringstream s;
    s.precision(9);
    s << count << " elements differ in their bits, the first at row " << row << ", column " << col
      << ": " << actual << " where " << expected << " was due";
    return s.str();
  }
};

/// The elements of `actual` whose bits differ from `expected`'s, both (rows, cols); nullopt
/// when none does.
inline std::optional<BitMismatch> first_bit_mismatch(const std::vector<float>& actual,
                                                     const std::vector<float>& expected,
                                                     std::size_t cols) {
  std::optional<BitMismatch> m;
  for (std::size_t i = 0; i < actual.size() && i < expected.size(); ++i) {
    if (bits_of(actual[i]) == bits_of(expected[i])) continue;
    if (!m) m = BitMismatch{0, i / cols, i % cols, actual[i], expected[i]};
    ++m->count;
  }
  return m;
}

/// For each row of x and y (rows of `cols`): every element whose x has the bits of an earlier
/// element's x must have that element's y, bit for bit. The first that does not (its y, and
/// as "due" the y of the earlier element with its x), or nullopt.
inline std::optional<BitMismatch> equal_inputs_equal_outputs(const std::vector<float>& x,
                                                            const std::vector<float>& y,
                                                            std::size_t cols) {
  std::vector<float> due(y.size());
  for (std::size_t begin = 0; begin + cols <= x.size(); begin += cols) {
    std::map<std::uint32_t, float> first_y;  // x's bits -> the y of the row's first such x
    for (std::size_t i = begin; i < begin + cols; ++i)
      due[i] = first_y.emplace(bits_of(x[i]), y[i]).first->second;
  }
  return first_bit_mismatch(y, due, cols);
}

}  // namespace wb::test
