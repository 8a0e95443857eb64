// Chapter 07: Welford LayerNorm. The CPU ladder, the dispatcher's rule and the kernels'
// launchers.
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
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "chapters/07_welford_layernorm/welford.hpp"
#include "common/backend.hpp"
#include "common/dtype.hpp"
#include "common/hd.hpp"

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

/// y: (rows, cols), mean and rstd: (rows), as float, like the kernels' outputs.
struct LayerNormOutput {
  std::vector<float> y;
  std::vector<float> mean;
  std::vector<float> rstd;
};

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

/// Applies `stats(row) -> RowStats` to every row of x: (rows, cols), then eq. (1).
template <typename StatsFn>
LayerNormOutput layernorm_rows(const std::vector<float>& x, int rows, int cols,
                               const Affine& affine, StatsFn stats) {
  const std::size_t n = static_cast<std::size_t>(cols);
  if (rows < 1 || cols < 1 || cols > kMaxCols || x.size() != static_cast<std::size_t>(rows) * n ||
      (!affine.gamma.empty() && affine.gamma.size() != n) ||
      (!affine.beta.empty() && affine.beta.size() != n)) {
    throw std::invalid_argument(
        "layernorm: x must be (rows, cols) with rows >= 1 and 1 <= cols <= " +
        std::to_string(kMaxCols) + ", gamma and beta (cols) or empty");
  }
  LayerNormOutput out{std::vector<float>(x.size()), std::vector<float>(rows),
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
inline LayerNormOutput layernorm_naive(const std::vector<float>& x, int rows, int cols,
                                       float eps = kDefaultEps, const Affine& affine = {}) {
  return layernorm_rows(x, rows, cols, affine,
                        [eps](const float* xr, int n) { return row_stats_naive(xr, n, eps); });
}

inline LayerNormOutput layernorm_two_pass(const std::vector<float>& x, int rows, int cols,
                                          float eps = kDefaultEps, const Affine& affine = {}) {
  return layernorm_rows(x, rows, cols, affine,
                        [eps](const float* xr, int n) { return row_stats_two_pass(xr, n, eps); });
}

inline LayerNormOutput layernorm_welford(const std::vector<float>& x, int rows, int cols,
                                         float eps = kDefaultEps, const Affine& affine = {}) {
  return layernorm_rows(x, rows, cols, affine, [eps](const float* xr, int n) {
    return row_stats(welford_row(xr, n), eps);
  });
}

/// `block` >= 1 columns per Welford block.
inline LayerNormOutput layernorm_blocked_welford(const std::vector<float>& x, int rows, int cols,
                                                 int block, float eps = kDefaultEps,
                                                 const Affine& affine = {}) {
  if (block < 1) throw std::invalid_argument("layernorm_blocked_welford: block must be >= 1");
  return layernorm_rows(x, rows, cols, affine, [eps, block](const float* xr, int n) {
    return row_stats(welford_blocked(xr, n, block), eps);
  });
}

// ------------------------------------------------------------------------------------------
// The kernels' shapes and the dispatcher's rule (backend-neutral: the limits are numbers)
// ------------------------------------------------------------------------------------------

/// Lanes in a warp.
inline constexpr int kLanes = 32;

/// warp_per_row holds a row in registers: at most this many floats per lane, so at most
/// kWarpMaxCols columns. 32 registers of the 255 a thread may have leaves room for the rest.
inline constexpr int kMaxColsPerLane = 32;
inline constexpr int kWarpMaxCols = kLanes * kMaxColsPerLane;  // 1024

/// warp_per_row's block: 4 warps, each serving 32 / group_width rows.
inline constexpr int kWarpBlockThreads = 128;

/// block_cached and block_uncached: one block of 256 threads (8 warps) per row, so every row
/// past kWarpMaxCols gives each thread at least 4 values to fold.
inline constexpr int kBlockThreads = 256;
inline constexpr int kBlockWarps = kBlockThreads / kLanes;
static_assert(kBlockThreads % kLanes == 0 && kBlockWarps <= kLanes,
              "whole warps, and one warp can reduce the warps' states");

/// A 16-byte vector (common/dtype.hpp) is 4 floats (a float4) or 8 halves, loaded in one
/// access when its address is 16-byte aligned. kVec is fp32's width.
inline constexpr int kVec = kVecBytes / static_cast<int>(sizeof(float));
inline constexpr std::uintptr_t kVecAlignment = kVecBytes;

/// How warp_per_row maps a row onto lanes: a group of group_width lanes (a power of 2 up to
/// 32) serves one row, each lane holding cols_per_lane values (a power of 2 up to 32).
struct WarpShape {
  int group_width;
  int cols_per_lane;
  int rows_per_block() const { return kWarpBlockThreads / group_width; }
};

inline int next_pow2(int v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

/// Short rows use narrow groups, several rows per warp (cols <= 32: one value per lane);
/// longer rows use the whole warp with ceil(cols / 32) values per lane, rounded up to a power
/// of 2 (one kernel instantiation per power). Requires 1 <= cols <= kWarpMaxCols.
inline WarpShape warp_shape(int cols) {
  if (cols <= kLanes) return {next_pow2(cols), 1};
  return {kLanes, next_pow2((cols + kLanes - 1) / kLanes)};
}

/// block_cached's dynamic shared memory: the kBlockWarps warp states (rounded up to keep the
/// row 16-byte aligned for vectors), then the row, as it was read: `elem_bytes` per value
/// (4 for fp32, 2 for fp16 and bf16, so a 16-bit row twice as long fits).
inline constexpr std::size_t kCachedScratchBytes =
    (kBlockWarps * sizeof(Welford) + kVecAlignment - 1) / kVecAlignment * kVecAlignment;
inline std::size_t cached_shared_bytes(int cols, std::size_t elem_bytes = sizeof(float)) {
  return kCachedScratchBytes + static_cast<std::size_t>(cols) * elem_bytes;
}

/// The longest row block_cached can hold when one block may use `max_dynamic_shared_bytes`,
/// capped at kMaxCols.
inline int max_cached_cols(std::size_t max_dynamic_shared_bytes,
                           std::size_t elem_bytes = sizeof(float)) {
  if (max_dynamic_shared_bytes <= kCachedScratchBytes) return 0;
  const std::size_t cols = (max_dynamic_shared_bytes - kCachedScratchBytes) / elem_bytes;
  return cols < static_cast<std::size_t>(kMaxCols) ? static_cast<int>(cols) : kMaxCols;
}

enum class Strategy { warp_per_row, block_cached, block_uncached };

inline const char* to_string(Strategy s) {
  switch (s) {
    case Strategy::warp_per_row:
      return "warp_per_row";
    case Strategy::block_cached:
      return "block_cached";
    case Strategy::block_uncached:
      return "block_uncached";
  }
  return "?";
}

// [dispatch]
/// The dispatcher's rule, from the fastest strategy to the most general:
///   cols <= 1024                               warp_per_row: the row in registers, 1 read;
///   the row fits in one block's shared memory  block_cached: the row in shared memory, 1 read;
///   otherwise                                  block_uncached: x read twice.
/// `max_dynamic_shared_bytes` is what one block may opt in to on the device: queried from
/// the CUDA runtime on a GPU (227 KiB on an H100), sm_90's value in the simulator. The cache
/// holds the row's elements as they are (`elem_bytes` each): 16-bit rows fit twice as long.
inline Strategy choose_strategy(int cols, std::size_t max_dynamic_shared_bytes,
                                std::size_t elem_bytes = sizeof(float)) {
  if (cols <= kWarpMaxCols) return Strategy::warp_per_row;
  if (cached_shared_bytes(cols, elem_bytes) <= max_dynamic_shared_bytes)
    return Strategy::block_cached;
  return Strategy::block_uncached;
}
// [dispatch]

// ------------------------------------------------------------------------------------------
// Kernel launchers (defined in layernorm_kernels.cuh, once per kernel backend)
// ------------------------------------------------------------------------------------------

/// One LayerNorm call on fp32. Device pointers of the kernel's backend.
struct LayerNormArgs {
  const float* x;      ///< (rows, cols), row-major
  const float* gamma;  ///< (cols), or nullptr for gamma = 1
  const float* beta;   ///< (cols), or nullptr for beta = 0
  float* y;            ///< (rows, cols), row-major
  float* mean;         ///< (rows)
  float* rstd;         ///< (rows)
  int rows;            ///< >= 1
  int cols;            ///< in [1, kMaxCols]
  float eps;           ///< > 0, added to the variance
};

/// One LayerNorm call on elements of `dtype`: x, gamma, beta and y hold `dtype` elements
/// (__half or __nv_bfloat16 in the kernels; bit patterns on the host, common/dtype.hpp);
/// mean and rstd are float whatever the type, and the kernels compute in float: x, gamma and
/// beta are widened exactly, y is rounded once, to nearest even. Device pointers of the
/// kernel's backend.
struct TypedLayerNormArgs {
  const void* x;      ///< (rows, cols), row-major
  const void* gamma;  ///< (cols), or nullptr for gamma = 1
  const void* beta;   ///< (cols), or nullptr for beta = 0
  void* y;            ///< (rows, cols), row-major
  float* mean;        ///< (rows)
  float* rstd;        ///< (rows)
  int rows;           ///< >= 1
  int cols;           ///< in [1, kMaxCols]
  float eps;          ///< > 0, added to the variance
  Dtype dtype;        ///< the element type of x, gamma, beta and y
};

/// An fp32 call as a typed one: the T = float instantiation of every kernel.
inline TypedLayerNormArgs typed(const LayerNormArgs& a) {
  return {a.x, a.gamma, a.beta, a.y, a.mean, a.rstd, a.rows, a.cols, a.eps, Dtype::fp32};
}

inline bool aligned_for_vec(const void* p) {
  return p == nullptr || reinterpret_cast<std::uintptr_t>(p) % kVecAlignment == 0;
}

/// True when the kernels may use 16-byte vector loads and stores: cols a multiple of the
/// vector width (4 floats, 8 halves; so every row starts 16-byte aligned) and every pointer
/// 16-byte aligned. Otherwise they access one element at a time.
inline bool can_vectorize(const TypedLayerNormArgs& a) {
  return a.cols % vec_width(a.dtype) == 0 && aligned_for_vec(a.x) && aligned_for_vec(a.y) &&
         aligned_for_vec(a.gamma) && aligned_for_vec(a.beta);
}
inline bool can_vectorize(const LayerNormArgs& a) {
  return can_vectorize(typed(a));
}

/// Throws std::invalid_argument, naming the limit, for arguments no strategy accepts.
inline void check_args(const TypedLayerNormArgs& a) {
  if (a.rows < 1 || a.cols < 1 || a.cols > kMaxCols)
    throw std::invalid_argument("layernorm: rows must be >= 1 and cols in [1, " +
                                std::to_string(kMaxCols) + "], got (" + std::to_string(a.rows) +
                                ", " + std::to_string(a.cols) + ")");
  // eps > 0 keeps rstd finite on a constant row (variance 0): 1 / sqrt(eps).
  if (!(a.eps > 0.f)) throw std::invalid_argument("layernorm: eps must be > 0");
  if (a.x == nullptr || a.y == nullptr || a.mean == nullptr || a.rstd == nullptr)
    throw std::invalid_argument("layernorm: x, y, mean and rstd must not be null");
}
inline void check_args(const LayerNormArgs& a) {
  check_args(typed(a));
}

/// The launchers, each in two forms: on fp32 (LayerNormArgs) and on any element type
/// (TypedLayerNormArgs); the fp32 form is the typed one with dtype fp32.
template <Backend B>
struct Kernels {
  /// Strategy 1: a group of lanes per row, the row in registers. cols <= kWarpMaxCols.
  static void warp_per_row(const TypedLayerNormArgs& a);
  /// Strategy 2: a block per row, the row cached in dynamic shared memory.
  /// cached_shared_bytes(cols, dtype_bytes(dtype)) <= max_dynamic_shared_bytes().
  static void block_cached(const TypedLayerNormArgs& a);
  /// Strategy 3: a block per row, x read twice. Any cols.
  static void block_uncached(const TypedLayerNormArgs& a);
  /// What one block may opt in to on this backend's device.
  static std::size_t max_dynamic_shared_bytes();
  /// The dispatcher: choose_strategy(cols, max_dynamic_shared_bytes(), dtype_bytes(dtype)),
  /// launched.
  static Strategy layernorm(const TypedLayerNormArgs& a);
  static void dispatch(const TypedLayerNormArgs& a) { layernorm(a); }

  static void warp_per_row(const LayerNormArgs& a) { warp_per_row(typed(a)); }
  static void block_cached(const LayerNormArgs& a) { block_cached(typed(a)); }
  static void block_uncached(const LayerNormArgs& a) { block_uncached(typed(a)); }
  static Strategy layernorm(const LayerNormArgs& a) { return layernorm(typed(a)); }
  static void dispatch(const LayerNormArgs& a) { layernorm(a); }
};

using Launcher = void (*)(const LayerNormArgs& a);
using TypedLauncher = void (*)(const TypedLayerNormArgs& a);

struct NamedKernel {
  const char* name;
  Launcher launch;
  /// The longest row it takes on this device (kMaxCols where any row goes).
  int max_cols;
};

struct TypedNamedKernel {
  const char* name;
  TypedLauncher launch;
  /// The longest row of `dtype` it takes on this device (kMaxCols where any row goes).
  int max_cols;
};

/// The three strategies and the dispatcher on fp32, each with the rows it accepts.
template <Backend B>
std::vector<NamedKernel> kernel_ladder() {
  return {{"warp_per_row", &Kernels<B>::warp_per_row, kWarpMaxCols},
          {"block_cached", &Kernels<B>::block_cached,
           max_cached_cols(Kernels<B>::max_dynamic_shared_bytes())},
          {"block_uncached", &Kernels<B>::block_uncached, kMaxCols},
          {"dispatch", &Kernels<B>::dispatch, kMaxCols}};
}

/// The same on elements of `dtype`: block_cached holds 16-bit rows twice as long.
template <Backend B>
std::vector<TypedNamedKernel> typed_kernel_ladder(Dtype dtype) {
  return {{"warp_per_row", &Kernels<B>::warp_per_row, kWarpMaxCols},
          {"block_cached", &Kernels<B>::block_cached,
           max_cached_cols(Kernels<B>::max_dynamic_shared_bytes(), dtype_bytes(dtype))},
          {"block_uncached", &Kernels<B>::block_uncached, kMaxCols},
          {"dispatch", &Kernels<B>::dispatch, kMaxCols}};
}

}  // namespace wb::ch07
