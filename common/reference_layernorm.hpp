// fp64 reference for LayerNorm: the ground truth chapter 07's steps and kernels are measured
// against.
//
// Computed in double from the same float inputs, with the two-pass formulas (the mean, then
// the mean of squared deviations), which in double are accurate to about 1e-16 relative for
// every input the workbook uses. The variance is the population variance (divide by n), as in
// torch.nn.functional.layer_norm.
#pragma once

#include <vector>

namespace wb::ref {

/// Per-row statistics and output of LayerNorm, in double.
struct LayerNorm {
  std::vector<double> y;     ///< (rows, cols), row-major
  std::vector<double> mean;  ///< (rows): mean_r = (1/cols) sum_c x[r][c]
  std::vector<double> rstd;  ///< (rows): 1 / sqrt(var_r + eps)
};

/// y[r][c] = (x[r][c] - mean_r) * rstd_r * gamma[c] + beta[c] over x: (rows, cols),
/// row-major. gamma and beta: (cols), or empty for gamma = 1 and beta = 0. eps is added to
/// the variance (as the float value the kernels add, converted exactly to double).
LayerNorm layernorm(const std::vector<float>& x, int rows, int cols, float eps,
                    const std::vector<float>& gamma = {}, const std::vector<float>& beta = {});

}  // namespace wb::ref
