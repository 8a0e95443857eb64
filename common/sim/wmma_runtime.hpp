// The simulator's side of WMMA (nvcuda::wmma in wmma.hpp): the element mapping, the warp's
// fragment "register file", and the 16x16x16 product. Compiled into wb_sim, which race mode
// does not instrument, so moving fragment data between lanes is invisible to ThreadSanitizer
// (fragments are registers), while the memory accesses of load and store stay in the kernel's
// translation unit, where it sees them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/sim/runtime.hpp"

namespace wb::sim {

/// The three kinds of 16x16 fragments.
enum class WmmaUse { matrix_a, matrix_b, accumulator };
/// The element types a fragment may hold.
enum class WmmaType { f16, bf16, f32 };

/// Where element `i` of lane `lane`'s fragment lies in its 16x16 matrix: A is (m, k), B is
/// (k, n), the accumulator (m, n). With g = lane / 4 and t = lane % 4 (the layout of PTX's
/// mma.m16n8k16, twice along n):
///   matrix_a, accumulator: row g + 8 * (i / 2 % 2), column 2t + i % 2 + 8 * (i / 4 % 2);
///   matrix_b:              row 2t + i % 2 + 8 * (i / 2 % 2), column g + 8 * (i / 4 % 2).
/// A __half A or B fragment has 16 elements: x[8 + j] holds the same element as x[j].
struct WmmaCoord {
  int row, col;
};
WmmaCoord wmma_coord(WmmaUse use, unsigned lane, int i);

namespace detail {

/// The value of an element of `type` from its bits (the low 16 of them for f16 and bf16).
float fragment_value(WmmaType type, std::uint32_t bits);
/// A float's bits, as a register holds them.
std::uint32_t float_bits(float f);

/// Register-file slots of a lane: inputs of mma_sync, of store_matrix_sync, and the result
/// of load_matrix_sync / mma_sync.
inline constexpr int kWmmaSlotA = 0, kWmmaSlotB = 1, kWmmaSlotC = 2, kWmmaSlotOut = 3;
inline constexpr int kWmmaMaxElements = 16;

/// Faults unless `ptr` is 256-bit aligned and `ldm` a multiple of 16 bytes (CUDA's rules for
/// load_matrix_sync and store_matrix_sync).
void wmma_check_memory(const char* name, const void* ptr, unsigned ldm, std::size_t element_bytes,
                       Site site);

/// Lane `lane`'s slot in the running warp's register file (for the lane that performs a warp's
/// operation; kWmmaMaxElements words).
std::uint32_t* warp_lane_slot(unsigned lane, int slot);

/// Copies the calling lane's fragment bits into / out of its slot.
void wmma_put(int slot, const std::uint32_t* bits, int n);
void wmma_get(int slot, std::uint32_t* bits, int n);

/// The lane that completed a load: distributes a 16x16 tile (row-major, element bits) to the
/// out slot of every lane of the warp, by the mapping.
void wmma_tile_to_lanes(WmmaUse use, int elements, const std::uint32_t* tile);
/// The lane that completed a store: collects every lane's C slot into a 16x16 tile.
void wmma_lanes_to_tile(std::uint32_t* tile);
/// The lane that completed mma_sync: D = A * B + C for the whole warp, from every lane's A, B
/// and C slots into its out slot. Products are exact in float; each D(m, n) is C(m, n) plus
/// the 16 products added one at a time in k order, rounding to nearest after each addition.
/// Faults if two copies of one element of a __half fragment differ.
void wmma_mma(WmmaType ab, int elements, Site site);

}  // namespace detail
}  // namespace wb::sim
