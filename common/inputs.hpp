// Seeded, adversarial inputs. The same (kind, shape, seed) gives the same values on every
// machine: the generator and the normal transform are written here, not taken from <random>'s
// distributions, whose output differs between standard libraries.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wb {

enum class InputKind {
  randn,            ///< standard normal
  outliers,         ///< randn with about 1 entry in 64 (at least one per row) multiplied by 20
  large_offset,     ///< randn + 1e4: exp overflows unless the max is subtracted
  neg_inf_entries,  ///< randn with about 1 entry in 8 set to -inf (never a whole row)
  neg_inf_rows,     ///< randn with every third row entirely -inf (a fully masked row)
  ones,             ///< all 1: a uniform softmax
  arange,           ///< x[r][c] = c: a steep ramp, most mass on the last entries
};

/// splitmix64 at x: the golden-ratio step, then its finalizer. Successive x give the
/// generator's stream; any x gives a well-mixed 64-bit value of it (a seeded choice, a hash).
inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Every kind, for tests that sweep them.
const std::vector<InputKind>& all_input_kinds();

const char* to_string(InputKind kind);

/// A (rows, cols) row-major matrix of the given kind.
std::vector<float> make_input(InputKind kind, int rows, int cols, std::uint64_t seed);

/// `count` standard normal values (for Q, K, V, gamma, ...).
std::vector<float> randn(std::size_t count, std::uint64_t seed, float mean = 0.f,
                         float stddev = 1.f);

}  // namespace wb
