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

/// Every kind, for tests that sweep them.
const std::vector<InputKind>& all_input_kinds();

const char* to_string(InputKind kind);

/// A (rows, cols) row-major matrix of the given kind.
std::vector<float> make_input(InputKind kind, int rows, int cols, std::uint64_t seed);

/// `count` standard normal values (for Q, K, V, gamma, ...).
std::vector<float> randn(std::size_t count, std::uint64_t seed, float mean = 0.f,
                         float stddev = 1.f);

}  // namespace wb
