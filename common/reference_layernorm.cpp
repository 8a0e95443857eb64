#include "common/reference_layernorm.hpp"

#include <cmath>
#include <cstddef>
#include <stdexcept>

namespace wb::ref {

LayerNorm layernorm(const std::vector<float>& x, int rows, int cols, float eps,
                    const std::vector<float>& gamma, const std::vector<float>& beta) {
  const std::size_t n = static_cast<std::size_t>(cols);
  if (x.size() != static_cast<std::size_t>(rows) * n || (!gamma.empty() && gamma.size() != n) ||
      (!beta.empty() && beta.size() != n)) {
    throw std::invalid_argument("ref::layernorm: x must be (rows, cols), gamma and beta (cols)");
  }
  LayerNorm out;
  out.y.resize(x.size());
  out.mean.resize(static_cast<std::size_t>(rows));
  out.rstd.resize(static_cast<std::size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    const float* xr = x.data() + static_cast<std::size_t>(r) * n;
    double* yr = out.y.data() + static_cast<std::size_t>(r) * n;
    double sum = 0.0;
    for (std::size_t c = 0; c < n; ++c) sum += xr[c];
    const double mean = sum / static_cast<double>(n);
    double m2 = 0.0;
    for (std::size_t c = 0; c < n; ++c) m2 += (xr[c] - mean) * (xr[c] - mean);
    const double rstd = 1.0 / std::sqrt(m2 / static_cast<double>(n) + static_cast<double>(eps));
    for (std::size_t c = 0; c < n; ++c) {
      const double g = gamma.empty() ? 1.0 : static_cast<double>(gamma[c]);
      const double b = beta.empty() ? 0.0 : static_cast<double>(beta[c]);
      yr[c] = (xr[c] - mean) * rstd * g + b;
    }
    out.mean[static_cast<std::size_t>(r)] = mean;
    out.rstd[static_cast<std::size_t>(r)] = rstd;
  }
  return out;
}

}  // namespace wb::ref
