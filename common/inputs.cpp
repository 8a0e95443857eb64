#include "common/inputs.hpp"

#include <cmath>
#include <limits>

namespace wb {

namespace {

// splitmix64: a tiny, well-mixed, fully specified generator.
struct SplitMix64 {
  std::uint64_t state;
  std::uint64_t next() {
    const std::uint64_t z = splitmix64(state);
    state += 0x9E3779B97F4A7C15ull;
    return z;
  }
  // Uniform in (0, 1]: never 0, so log() below is finite.
  double uniform() { return (static_cast<double>(next() >> 11) + 1.0) * 0x1.0p-53; }
  // Box-Muller; one value per call keeps the stream simple to reason about.
  double normal() {
    constexpr double kTwoPi = 6.283185307179586;
    return std::sqrt(-2.0 * std::log(uniform())) * std::cos(kTwoPi * uniform());
  }
};

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kOutlierFactor = 20.f;
constexpr float kLargeOffset = 1e4f;
constexpr int kOutlierEvery = 64;  // about 1 entry in 64 becomes an outlier
constexpr int kNegInfEvery = 8;    // about 1 entry in 8 becomes -inf
constexpr int kMaskedRowEvery = 3;

}  // namespace

const std::vector<InputKind>& all_input_kinds() {
  static const std::vector<InputKind> kinds = {
      InputKind::randn,           InputKind::outliers,     InputKind::large_offset,
      InputKind::neg_inf_entries, InputKind::neg_inf_rows, InputKind::ones,
      InputKind::arange};
  return kinds;
}

const char* to_string(InputKind kind) {
  switch (kind) {
    case InputKind::randn: return "randn";
    case InputKind::outliers: return "outliers x20";
    case InputKind::large_offset: return "randn + 1e4";
    case InputKind::neg_inf_entries: return "-inf entries";
    case InputKind::neg_inf_rows: return "-inf rows";
    case InputKind::ones: return "ones";
    case InputKind::arange: return "arange";
  }
  return "?";
}

std::vector<float> randn(std::size_t count, std::uint64_t seed, float mean, float stddev) {
  SplitMix64 rng{seed};
  std::vector<float> v(count);
  for (float& x : v) x = mean + stddev * static_cast<float>(rng.normal());
  return v;
}

std::vector<float> make_input(InputKind kind, int rows, int cols, std::uint64_t seed) {
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  SplitMix64 rng{seed ^ (static_cast<std::uint64_t>(kind) << 56)};
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>(rng.normal());
  for (int r = 0; r < rows; ++r) {
    float* row = x.data() + static_cast<std::size_t>(r) * cols;
    switch (kind) {
      case InputKind::randn: break;
      case InputKind::outliers: {
        row[rng.next() % cols] *= kOutlierFactor;  // at least one per row
        for (int c = 0; c < cols; ++c)
          if (rng.next() % kOutlierEvery == 0) row[c] *= kOutlierFactor;
        break;
      }
      case InputKind::large_offset:
        for (int c = 0; c < cols; ++c) row[c] += kLargeOffset;
        break;
      case InputKind::neg_inf_entries: {
        const int keep = static_cast<int>(rng.next() % cols);  // never a whole row
        for (int c = 0; c < cols; ++c)
          if (c != keep && rng.next() % kNegInfEvery == 0) row[c] = kNegInf;
        break;
      }
      case InputKind::neg_inf_rows:
        if (r % kMaskedRowEvery == 0)
          for (int c = 0; c < cols; ++c) row[c] = kNegInf;
        break;
      case InputKind::ones:
        for (int c = 0; c < cols; ++c) row[c] = 1.f;
        break;
      case InputKind::arange:
        for (int c = 0; c < cols; ++c) row[c] = static_cast<float>(c);
        break;
    }
  }
  return x;
}

}  // namespace wb
