#include "common/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace wb::ref {

std::vector<double> softmax(const std::vector<float>& x, int rows, int cols) {
  std::vector<double> y(x.size());
  for (int r = 0; r < rows; ++r) {
    const float* xr = x.data() + static_cast<std::size_t>(r) * cols;
    double* yr = y.data() + static_cast<std::size_t>(r) * cols;
    double m = -std::numeric_limits<double>::infinity();
    // A NaN entry makes the row NaN (as in IEEE arithmetic), not a row std::max skips it in.
    for (int c = 0; c < cols; ++c)
      if (!(static_cast<double>(xr[c]) <= m)) m = std::isnan(m) ? m : static_cast<double>(xr[c]);
    if (m == -std::numeric_limits<double>::infinity()) {  // fully -inf row: zeros
      std::fill(yr, yr + cols, 0.0);
      continue;
    }
    double d = 0.0;
    for (int c = 0; c < cols; ++c) d += std::exp(static_cast<double>(xr[c]) - m);
    for (int c = 0; c < cols; ++c) yr[c] = std::exp(static_cast<double>(xr[c]) - m) / d;
  }
  return y;
}

}  // namespace wb::ref
