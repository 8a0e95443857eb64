// Chapter 07: Welford LayerNorm. The CPU ladder (the kernels' shapes, the dispatcher's rule
// and the kernel ladder: layernorm_ladder.hpp).
//
// y = (x - mean) * rstd * gamma + beta over each row                  eq. (1)
// with mean and rstd = 1 / sqrt(var + eps) computed four ways on the CPU:
//   naive            var = E[x^2] - E[x]^2 in one pass: cancels catastrophically, eq. (5)
//   two_pass         the mean, then the mean of squared deviations, eqs. (2)-(3)
//   welford          one pass with Welford's update, eqs. (7)-(9)
//   blocked_welford  Welford per block of columns, blocks joined by Chan's combine, (10)-(13)
// See welford_layernorm.md for the derivation.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "chapters/07_welford_layernorm/welford.hpp"
#include "common/dtype.hpp"
#include "common/hd.hpp"
#include "common/rung_args.hpp"

namespace wb::ch07 {

/// torch.nn.functional.layer_norm's default epsilon.
inline constexpr float kDefaultEps = 1e-5f;

/// The longest row any step accepts: a Welford count must stay exact in a float.
inline constexpr int kMaxCols = 1 << 24;

/// The offset the tests and the program add to randn rows (sigma = 1) to show cancellation,
/// per element type: 1e4 in fp32 (the type's spacing there is 2^-10), 1e2 in fp16 and 1e1 in
/// bf16 (spacing 2^-4 = sigma / 16 in both). At 1e4 fp16's spacing is 8 and bf16's 64: the
/// offset would dominate, rounding a row to a few levels, no longer randn moved by an offset.
inline float randn_offset(Dtype t) {
  switch (t) {
    case Dtype::fp16:
      return 1e2f;
    case Dtype::bf16:
      return 1e1f;
    case Dtype::fp32:
      break;
  }
  return 1e4f;
}

// ------------------------------------------------------------------------------------------
// The normalization, shared by the CPU steps and the kernels
// ------------------------------------------------------------------------------------------

// [normalize]
/// Eq. (1) for one element. gamma = 1 and beta = 0 when the affine transform is left out:
/// multiplying by 1 and adding 0 are exact, so no separate code path is needed.
__host__ __device__ inline float layernorm_y(float x, float mean, float rstd, float gamma,
                                             float beta) {
  return (x - mean) * rstd * gamma + beta;
}
// [normalize]

// ------------------------------------------------------------------------------------------
// CPU reference
// ------------------------------------------------------------------------------------------

/// The affine transform's gamma and beta, (cols) each; empty means gamma = 1 and beta = 0.
struct Affine {
  std::vector<float> gamma;
  std::vector<float> beta;
};

/// A row's statistics, as each step computes them.
struct RowStats {
  float mean;
  float rstd;
};

/// E[x] and E[x^2] of x_1..x_n, accumulated in float in one pass.
struct Moments {
  float mean;
  float mean_sq;
};

// [naive_cpu]
/// Eq. (5): sum and sum of squares in one pass, var = E[x^2] - E[x]^2. The difference of two
/// large, nearly equal numbers: at an offset of 1e4, E[x^2] ~ 1e8 is rounded to a multiple of
/// 8, so a variance of 1 is lost entirely (eq. 6).
inline Moments naive_moments(const float* x, int n) {
  float sum = 0.f;
  float sum_sq = 0.f;
  for (int j = 0; j < n; ++j) {
    sum += x[j];
    sum_sq += x[j] * x[j];
  }
  return {sum / static_cast<float>(n), sum_sq / static_cast<float>(n)};
}

/// The clamp at 0 is the usual patch for the negative variances eq. (5) produces; it hides
/// them, it does not fix them.
inline RowStats row_stats_naive(const float* x, int n, float eps) {
  const Moments m = naive_moments(x, n);
  const float var = m.mean_sq - m.mean * m.mean;  // eq. (5)
  return {m.mean, rstd_of(var > 0.f ? var : 0.f, eps)};
}
// [naive_cpu]

// [two_pass_cpu]
/// Eqs. (2)-(3): the mean first, then the mean of the squared deviations. Each deviation
/// x_j - mean is small when the data are, whatever their offset: nothing large cancels.
/// Two reads of x.
inline RowStats row_stats_two_pass(const float* x, int n, float eps) {
  float sum = 0.f;
  for (int j = 0; j < n; ++j) sum += x[j];
  const float mean = sum / static_cast<float>(n);  // eq. (2)
  float m2 = 0.f;
  for (int j = 0; j < n; ++j) m2 += (x[j] - mean) * (x[j] - mean);  // eq. (3)
  return {mean, rstd_of(m2 / static_cast<float>(n), eps)};
}
// [two_pass_cpu]

// [welford_cpu]
/// Welford's update over x_1..x_n, left to right, eqs. (7)-(9): one read of x.
inline Welford welford_row(const float* x, int n) {
  Welford s = welford_identity();
  for (int j = 0; j < n; ++j) s = welford_update(s, x[j]);
  return s;
}
// [welford_cpu]

// [blocked_cpu]
/// Welford over each block of `block` consecutive values (the last one shorter), the blocks'
/// states joined left to right by Chan's combine, eqs. (10)-(13). Any block size gives the
/// same statistics up to rounding: that is what the combine is for.
inline Welford welford_blocked(const float* x, int n, int block) {
  Welford s = welford_identity();
  for (int start = 0; start < n; start += block) {
    const int len = n - start < block ? n - start : block;
    s = welford_combine(s, welford_row(x + start, len));
  }
  return s;
}
// [blocked_cpu]

inline RowStats row_stats(Welford s, float eps) {
  return {s.mean, rstd_of(welford_variance(s), eps)};
}

/// Applies `stats(row) -> RowStats` to every row of x: (rows, cols), then eq. (1). The
/// outputs are float, as the kernels' are (LayerNormOut, common/rung_args.hpp).
template <typename StatsFn>
LayerNormOut layernorm_rows(const std::vector<float>& x, int rows, int cols, const Affine& affine,
                            StatsFn stats) {
  const std::size_t n = static_cast<std::size_t>(cols);
  if (rows < 1 || cols < 1 || cols > kMaxCols || x.size() != static_cast<std::size_t>(rows) * n ||
      (!affine.gamma.empty() && affine.gamma.size() != n) ||
      (!affine.beta.empty() && affine.beta.size() != n)) {
    throw std::invalid_argument(
        "layernorm: x must be (rows, cols) with rows >= 1 and 1 <= cols <= " +
        std::to_string(kMaxCols) + ", gamma and beta (cols) or empty");
  }
  LayerNormOut out{std::vector<float>(x.size()), std::vector<float>(rows),
                   std::vector<float>(rows)};
  for (int r = 0; r < rows; ++r) {
    const float* xr = x.data() + static_cast<std::size_t>(r) * n;
    float* yr = out.y.data() + static_cast<std::size_t>(r) * n;
    const RowStats s = stats(xr, cols);
    for (std::size_t c = 0; c < n; ++c) {
      const float gamma = affine.gamma.empty() ? 1.f : affine.gamma[c];
      const float beta = affine.beta.empty() ? 0.f : affine.beta[c];
      yr[c] = layernorm_y(xr[c], s.mean, s.rstd, gamma, beta);
    }
    out.mean[static_cast<std::size_t>(r)] = s.mean;
    out.rstd[static_cast<std::size_t>(r)] = s.rstd;
  }
  return out;
}

/// x: (rows, cols), row-major. Each returns y, mean and rstd.
inline LayerNormOut layernorm_naive(const std::vector<float>& x, int rows, int cols,
                                    float eps = kDefaultEps, const Affine& affine = {}) {
  return layernorm_rows(x, rows, cols, affine,
                        [eps](const float* xr, int n) { return row_stats_naive(xr, n, eps); });
}

inline LayerNormOut layernorm_two_pass(const std::vector<float>& x, int rows, int cols,
                                       float eps = kDefaultEps, const Affine& affine = {}) {
  return layernorm_rows(x, rows, cols, affine,
                        [eps](const float* xr, int n) { return row_stats_two_pass(xr, n, eps); });
}

inline LayerNormOut layernorm_welford(const std::vector<float>& x, int rows, int cols,
                                      float eps = kDefaultEps, const Affine& affine = {}) {
  return layernorm_rows(x, rows, cols, affine, [eps](const float* xr, int n) {
    return row_stats(welford_row(xr, n), eps);
  });
}

/// `block` >= 1 columns per Welford block.
inline LayerNormOut layernorm_blocked_welford(const std::vector<float>& x, int rows, int cols,
                                              int block, float eps = kDefaultEps,
                                              const Affine& affine = {}) {
  if (block < 1) throw std::invalid_argument("layernorm_blocked_welford: block must be >= 1");
  return layernorm_rows(x, rows, cols, affine, [eps, block](const float* xr, int n) {
    return row_stats(welford_blocked(xr, n, block), eps);
  });
}

}  // namespace wb::ch07
