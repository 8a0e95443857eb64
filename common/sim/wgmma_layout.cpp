// wgmma's shared-memory operand layouts (wgmma_layout.hpp): the descriptor's fields, the
// canonical layouts and the swizzle, each formula with the PTX ISA section it comes from.
#include "common/sim/wgmma_layout.hpp"

#include <cstdio>

namespace wb::sim {
namespace {

// The descriptor's fields (PTX ISA, "Matrix Descriptor Format"): each byte field is
// matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4, 14 bits wide.
constexpr unsigned kAddressFieldBits = 14;
constexpr std::uint64_t kAddressFieldMask = (std::uint64_t{1} << kAddressFieldBits) - 1;
constexpr unsigned kAddressFieldScale = 4;  // the field holds bytes >> 4
constexpr unsigned kStartBit = 0;
constexpr unsigned kLeadingBit = 16;
constexpr unsigned kStrideBit = 32;
constexpr unsigned kBaseOffsetBit = 49;
constexpr std::uint64_t kBaseOffsetMask = 0x7;  // 3 bits
constexpr unsigned kSwizzleBit = 62;
constexpr std::uint64_t kSwizzleMask = 0x3;  // 2 bits

std::uint32_t byte_field(std::uint64_t desc, unsigned bit) {
  return static_cast<std::uint32_t>((desc >> bit) & kAddressFieldMask) << kAddressFieldScale;
}

/// The k16 slice of a K-major operand: 16 elements of 2 bytes along one row.
constexpr unsigned kSliceBytes = kWgmmaK * kWgmmaElementBytes;

}  // namespace

WgmmaDescriptor decode_wgmma_descriptor(std::uint64_t desc) {
  WgmmaDescriptor d{};
  d.start = byte_field(desc, kStartBit);
  d.leading_bytes = byte_field(desc, kLeadingBit);
  d.stride_bytes = byte_field(desc, kStrideBit);
  d.base_offset = static_cast<unsigned>((desc >> kBaseOffsetBit) & kBaseOffsetMask);
  d.swizzle = static_cast<WgmmaSwizzle>((desc >> kSwizzleBit) & kSwizzleMask);
  return d;
}

unsigned wgmma_swizzle_row_bytes(WgmmaSwizzle swizzle) {
  // 16 << b: a row of 2^b chunks, each XORed with one of the 2^b values of the row bits.
  return kChunkBytes << wgmma_swizzle_bits(swizzle);
}

unsigned wgmma_swizzle_bits(WgmmaSwizzle swizzle) {
  switch (swizzle) {
    case WgmmaSwizzle::b128:
      return 3;
    case WgmmaSwizzle::b64:
      return 2;
    case WgmmaSwizzle::b32:
      return 1;
    case WgmmaSwizzle::none:
      break;
  }
  return 0;
}

unsigned wgmma_swizzle_pattern_bytes(WgmmaSwizzle swizzle) {
  // PTX ISA, "Matrix Descriptor Format": the repeating pattern starts on a 1024-, 512- or
  // 256-byte boundary, 2^(7 + b): 8 rows of the swizzle.
  return kCoreMatrixRows * wgmma_swizzle_row_bytes(swizzle);
}

std::uint32_t wgmma_swizzle(std::uint32_t address, WgmmaSwizzle swizzle, unsigned base_offset) {
  const unsigned bits = wgmma_swizzle_bits(swizzle);
  if (bits == 0) return address;  // the ISA: base offset is unused without swizzle
  const std::uint32_t row_mask = (1u << bits) - 1;
  // Swizzle<b, 4, 3> (CUTLASS's GMMA::Layout_*_SW*_Atom): address bits [7, 7 + b), the 128-byte
  // row within the pattern, select the XOR of the chunk bits [4, 4 + b). The ISA's base offset,
  // "(pattern start addr >> 0x7) & 0x7" for a pattern that does not start on its boundary,
  // shifts that row count so that it counts from the pattern's own start; only its low b bits
  // matter. (The ISA gives no formula for this; an H200 read every element of 42 descriptors,
  // base offsets 0-5 among them, exactly where this function and the layouts below say.)
  const std::uint32_t row = ((address >> kSwizzleRowShift) - base_offset) & row_mask;
  return address ^ (row << kChunkShift);
}

std::uint32_t wgmma_unswizzled_address(const WgmmaDescriptor& d, WgmmaMajor major, int mn, int k) {
  const auto mn_u = static_cast<std::uint32_t>(mn);
  const auto k_u = static_cast<std::uint32_t>(k);
  const std::uint32_t lbo = d.leading_bytes, sbo = d.stride_bytes;
  if (d.swizzle == WgmmaSwizzle::none) {
    // PTX ISA, "Shared Memory Matrix Layout", no-swizzle ("interleave") mode: core matrices of
    // 8 rows x 16 bytes, 128 contiguous bytes each; LBO steps along k between core matrices,
    // SBO along m|n, for both majors (CUTLASS, make_gmma_desc, in elements with T = 8:
    //   K-major  ((8,m),(T,2k)):((1T,SBO),(1,LBO))
    //   MN-major ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO)) ).
    const std::uint32_t core_matrix = (mn_u / kCoreMatrixRows) * sbo + (k_u / kChunkElements) * lbo;
    const std::uint32_t within =
        major == WgmmaMajor::k
            ? (mn_u % kCoreMatrixRows) * kChunkBytes + (k_u % kChunkElements) * kWgmmaElementBytes
            : (k_u % kCoreMatrixRows) * kChunkBytes + (mn_u % kChunkElements) * kWgmmaElementBytes;
    return d.start + core_matrix + within;
  }
  // Swizzled modes: atoms of 8 rows of row_bytes (32, 64, 128), rows one after the other.
  const std::uint32_t row_bytes = wgmma_swizzle_row_bytes(d.swizzle);
  if (major == WgmmaMajor::k) {
    // K-major: row mn % 8 of the atom holds k contiguously; atoms along m|n are SBO apart; LBO
    // is unused, the k16 slice staying within one row (CUTLASS's ((8,m),(T,2k)):((8T,SBO),(1,T))
    // for 128 bytes, 2T and 4T rows for 32 and 64; the ISA's tcgen05 "Strides" table, which
    // words the same layouts: "Swizzled layouts: not used, assumed to be 1").
    return d.start + (mn_u / kCoreMatrixRows) * sbo + (mn_u % kCoreMatrixRows) * row_bytes +
           k_u * kWgmmaElementBytes;
  }
  // MN-major: row k % 8 of the atom holds row_elements values of m|n contiguously; atoms along
  // m|n are LBO apart, along k SBO apart (CUTLASS's ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)) for
  // 128 bytes, T,2 and T,4 for 32 and 64; the ISA's tcgen05 "Strides" table: LBO is "the stride
  // from the first (swizzle-byte-size/16) rows to the next", rows of 16 bytes along m|n).
  const std::uint32_t row_elements = row_bytes / kWgmmaElementBytes;
  return d.start + (mn_u / row_elements) * lbo + (mn_u % row_elements) * kWgmmaElementBytes +
         (k_u / kCoreMatrixRows) * sbo + (k_u % kCoreMatrixRows) * row_bytes;
}

std::uint32_t wgmma_element_address(const WgmmaDescriptor& d, WgmmaMajor major, int mn, int k) {
  return wgmma_swizzle(wgmma_unswizzled_address(d, major, mn, k), d.swizzle, d.base_offset);
}

std::string wgmma_descriptor_fault(const WgmmaDescriptor& d, WgmmaMajor major) {
  const unsigned bits = wgmma_swizzle_bits(d.swizzle);
  if (bits == 0) return {};
  const unsigned row_bytes = wgmma_swizzle_row_bytes(d.swizzle);
  const unsigned pattern_bytes = wgmma_swizzle_pattern_bytes(d.swizzle);
  const unsigned row_mask = (1u << bits) - 1;
  const unsigned start_row = (d.start >> kSwizzleRowShift) & row_mask;
  char buf[320];
  // PTX ISA, "Matrix Descriptor Format": base offset 0 when the pattern starts on its boundary,
  // else (pattern start >> 7) & 7. An operand that starts past its pattern's first 128 bytes
  // with a base offset that does not say so reads its rows with another row's XOR.
  if (start_row != (d.base_offset & row_mask)) {
    if (d.base_offset == 0) {
      std::snprintf(buf, sizeof buf,
                    "a %u-byte-swizzled operand must start on a %u-byte boundary of shared "
                    "memory, plus an offset below 128 bytes (a k step within a row): this "
                    "descriptor starts at 0x%x, %u bytes past a boundary, with base offset 0",
                    row_bytes, pattern_bytes, static_cast<unsigned>(d.start),
                    static_cast<unsigned>(d.start % pattern_bytes));
    } else {
      std::snprintf(buf, sizeof buf,
                    "a %u-byte-swizzled operand's base offset must be (start >> 7) & %u, the "
                    "128-byte row of its %u-byte pattern where it starts: this descriptor starts "
                    "at 0x%x (row %u) with base offset %u",
                    row_bytes, row_mask, pattern_bytes, static_cast<unsigned>(d.start), start_row,
                    d.base_offset);
    }
    return buf;
  }
  // A K-major operand's rows run along k: the instruction's 32 bytes of k must stay within the
  // swizzle row the start points into, or its last chunks are read from the next row (the
  // hardware adds the offsets and swizzles the sum, row crossing or not).
  const unsigned into_row = d.start % row_bytes;
  if (major == WgmmaMajor::k && into_row + kSliceBytes > row_bytes) {
    std::snprintf(buf, sizeof buf,
                  "a K-major %u-byte-swizzled operand's k16 slice (%u bytes) must lie within one "
                  "%u-byte row: this descriptor starts at 0x%x, %u bytes into its row",
                  row_bytes, kSliceBytes, row_bytes, static_cast<unsigned>(d.start), into_row);
    return buf;
  }
  return {};
}

}  // namespace wb::sim
