// Where wgmma.mma_async reads its shared-memory operands: the matrix descriptor's fields and
// the byte address of every element of a 16-bit A (64 x 16) or B (16 x N) operand, swizzle
// included, as pure functions: for the simulator's wgmma (common/sim/hopper.hpp) to read
// through and its profile to count the banks they hit; common/hopper.cuh's header states the
// same layouts for the kernel writer.
//
// The layouts are the PTX ISA's, sections "Shared Memory Matrix Layout" and "Matrix Descriptor
// Format" of wgmma.mma_async (with the tcgen05 "Strides" table, which words the same offsets),
// cross-checked with CUTLASS (cute/atom/mma_traits_sm90_gmma.hpp: make_gmma_desc and the
// GMMA::Layout_{K,MN}_{INTER,SW32,SW64,SW128}_Atom definitions). In short:
//
// * A *core matrix* is 8 rows of 16 bytes (8 elements of 16 bits). K-major (the default,
//   "no transpose"): a row runs along k, the 8 rows are 8 values of m (or n). MN-major
//   ("transposed", imm-trans = 1): a row runs along m (or n), the 8 rows are 8 values of k.
// * No swizzle ("interleave"): a core matrix is 128 contiguous bytes; the descriptor's two
//   offsets place the core matrices. A swizzle of 32, 64 or 128 bytes: the operand is built of
//   *swizzle atoms* of 8 rows of 32, 64 or 128 bytes; the rows of an atom lie one after the
//   other, and the atoms are placed by the offsets.
// * Which offset places what (the ISA's "leading dimension byte offset" and "stride dimension
//   byte offset"; CUTLASS's LBO and SBO):
//
//     layout              LBO: the step between ...          SBO: the step between ...
//     K-major, none       core matrices along k (k / 8)      core matrices along m|n (mn / 8)
//     K-major, swizzled   unused: k stays in one atom row    atoms along m|n (mn / 8)
//     MN-major, none      core matrices along k (k / 8)      core matrices along m|n (mn / 8)
//     MN-major, swizzled  atoms along m|n (mn / row elems)   atoms along k (k / 8)
//
//   so LBO and SBO trade places between MN-major unswizzled and MN-major swizzled operands.
// * The swizzle acts on the shared-window *address*, not on an offset into the tile: bits
//   [7, 7 + b) of the byte address are XORed into bits [4, 4 + b), b = 3, 2, 1 for 128, 64 and
//   32 bytes (CUTLASS's Swizzle<b, 4, 3>). So the pattern repeats every 8 atom rows (1024, 512,
//   256 bytes) of the window, and 16-byte chunk c of the row at window address a lands at chunk
//   c ^ ((a / 128) % 2^b) of it: for 128-byte rows, c ^ (row % 8); for 64-byte rows
//   c ^ (row % 8 / 2); for 32-byte rows c ^ (row % 8 / 4), row counted from a pattern boundary.
//   A descriptor may start past a boundary by a k offset within a row (32 bytes per k16 step,
//   as CUTLASS and FA3 advance it): the element addresses move by the offset *before* the XOR,
//   which is what finds the k16 slice that a TMA box (swizzled by the same address rule) wrote.
// * The descriptor's base offset (bits 49-51) names the 128-byte row of the pattern grid where a
//   pattern that is off its boundary starts: the row bits are counted from there,
//   ((address >> 7) - base offset) mod 2^b.
//
// Every formula here was also checked on an H200: wgmma read 42 descriptors (both majors, A and
// B, every swizzle, k slices past the boundary, base offsets 0-5) from shared memory whose every
// 2-byte cell held its own index, and each element came from the address these functions give.
#pragma once

#include <cstdint>
#include <string>

namespace wb::sim {

/// The descriptor's swizzle field (bits 62-63), valued as the PTX ISA encodes it.
enum class WgmmaSwizzle : unsigned { none = 0, b128 = 1, b64 = 2, b32 = 3 };

/// A wgmma matrix descriptor, decoded (PTX ISA, "Matrix Descriptor Format"). The three byte
/// fields are stored >> 4 in the descriptor, so each is a multiple of 16 here.
struct WgmmaDescriptor {
  std::uint32_t start;          ///< the operand's first byte in the shared window (bits 0-13)
  std::uint32_t leading_bytes;  ///< leading dimension byte offset, LBO (bits 16-29)
  std::uint32_t stride_bytes;   ///< stride dimension byte offset, SBO (bits 32-45)
  unsigned base_offset;         ///< bits 49-51: where the swizzle pattern starts (see below)
  WgmmaSwizzle swizzle;         ///< bits 62-63
};

/// Which dimension runs along a row of 16 bytes: k (K-major, imm-trans 0) or m|n (MN-major).
enum class WgmmaMajor { k, mn };

/// One wgmma instruction of 16-bit types reads k = 0 .. kWgmmaK - 1.
inline constexpr int kWgmmaK = 16;
/// f16 and bf16: the only element types whose layouts this file describes.
inline constexpr unsigned kWgmmaElementBytes = 2;
/// A core matrix: 8 rows of one 16-byte chunk each.
inline constexpr unsigned kCoreMatrixRows = 8;
inline constexpr unsigned kChunkBytes = 16;
inline constexpr unsigned kChunkElements = kChunkBytes / kWgmmaElementBytes;
/// The swizzle's address bits: 16-byte chunks are bits 4 and up; the row of 128 bytes that
/// selects the XOR is bits 7 and up (Swizzle<b, 4, 3>: base 4, shift 3).
inline constexpr unsigned kChunkShift = 4;
inline constexpr unsigned kSwizzleRowShift = 7;

/// The descriptor's fields (PTX ISA, "Matrix Descriptor Format").
WgmmaDescriptor decode_wgmma_descriptor(std::uint64_t desc);

/// The swizzle's row: 32, 64 or 128 bytes; 16 (one core-matrix row) without swizzle.
unsigned wgmma_swizzle_row_bytes(WgmmaSwizzle swizzle);
/// The number b of address bits the swizzle XORs: 3, 2, 1 for 128, 64, 32 bytes; 0 for none.
unsigned wgmma_swizzle_bits(WgmmaSwizzle swizzle);
/// Where the swizzle pattern repeats: 8 rows of the swizzle (1024, 512 or 256 bytes).
unsigned wgmma_swizzle_pattern_bytes(WgmmaSwizzle swizzle);

/// `address` with the swizzle applied: the row bits [7, 7 + b), counted from the pattern start
/// that `base_offset` names (0: a boundary of the window's pattern grid), XORed into the chunk
/// bits [4, 4 + b).
std::uint32_t wgmma_swizzle(std::uint32_t address, WgmmaSwizzle swizzle, unsigned base_offset);

/// The canonical layout's address of element (mn, k) before the swizzle: the start plus the
/// offsets of the table above. mn = m in 0..63 for A, n in 0..N-1 for B; k in 0..15.
std::uint32_t wgmma_unswizzled_address(const WgmmaDescriptor& d, WgmmaMajor major, int mn, int k);

/// The shared-window byte address of element (mn, k) of a 16-bit wgmma operand described by
/// `d`: for A, mn = m in 0..63; for B, mn = n in 0..N-1; k in 0..15 (one k16 instruction), with
/// the swizzle applied as the hardware does.
std::uint32_t wgmma_element_address(const WgmmaDescriptor& d, WgmmaMajor major, int mn, int k);

/// Why `d` cannot describe a `major` operand as its writer meant it, in one sentence; empty
/// when it can. A swizzled operand must start where its pattern starts (the start's row bits
/// equal to the base offset; with base offset 0, a pattern boundary plus an offset below 128
/// bytes), and a K-major one's k16 slice (32 bytes) must lie within one swizzle row. The
/// hardware reads such descriptors without complaint, by the address rule above; these are the
/// ISA's rules, whose breach means a tile laid out off its pattern or a slice across two rows.
std::string wgmma_descriptor_fault(const WgmmaDescriptor& d, WgmmaMajor major);

}  // namespace wb::sim
