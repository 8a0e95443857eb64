// fp64 references: the ground truth every step and kernel is measured against.
//
// Computed in double from the same float inputs, with the workbook's conventions:
// a row whose entries are all -inf has no probability mass to share, and its softmax is
// all zeros (the same rule that makes a fully masked attention row output zeros).
#pragma once

#include <vector>

namespace wb::ref {

/// Row-wise softmax of x: (rows, cols), row-major, in double.
std::vector<double> softmax(const std::vector<float>& x, int rows, int cols);

}  // namespace wb::ref
