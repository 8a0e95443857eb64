// wgmma's shared-memory operand layouts (common/sim/wgmma_layout.hpp): the descriptor's fields
// from hand-built bits, every layout against tiles built the way the PTX ISA's figures draw
// them (tests/sim/wgmma_tiles.hpp: atom by atom, the XOR taken per row, not per address bit),
// the k16 slices a kernel reads by advancing the start, the properties wgmma and the profile
// rely on (distinct addresses inside the tile, one bank group per row of a core-matrix column)
// and the faults.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/sim/wgmma_layout.hpp"
#include "tests/sim/wgmma_tiles.hpp"

namespace {

using wb::sim::decode_wgmma_descriptor;
using wb::sim::wgmma_descriptor_fault;
using wb::sim::wgmma_element_address;
using wb::sim::wgmma_unswizzled_address;
using wb::sim::WgmmaDescriptor;
using wb::sim::WgmmaMajor;
using wb::sim::WgmmaSwizzle;
using wb::test::build_tile;
using wb::test::Element;
using wb::test::kAtomRows;
using wb::test::kChunk;
using wb::test::kChunkElems;
using wb::test::kElem;
using wb::test::row_bytes_of;
using wb::test::TileSpec;

constexpr int kK = 16;                   // one instruction's k (16-bit types)
constexpr int kAm = 64;                  // A: 64 x 16
constexpr std::uint32_t kBase = 0x6000;  // a tile's first byte: on every pattern boundary
                                         // (1024), with higher address bits set

/// Hand-built descriptor bits (PTX ISA, "Matrix Descriptor Format"): bits 0-13 start >> 4,
/// 16-29 LBO >> 4, 32-45 SBO >> 4, 49-51 base offset, 62-63 the swizzle's code (0 none,
/// 1 128 bytes, 2 64, 3 32).
std::uint64_t descriptor_bits(std::uint32_t start, std::uint32_t lbo, std::uint32_t sbo,
                              unsigned base_offset, unsigned swizzle_code) {
  return std::uint64_t{start >> 4} | std::uint64_t{lbo >> 4} << 16 | std::uint64_t{sbo >> 4} << 32 |
         std::uint64_t{base_offset} << 49 | std::uint64_t{swizzle_code} << 62;
}

unsigned swizzle_code(WgmmaSwizzle s) {
  return s == WgmmaSwizzle::b128  ? 1u
         : s == WgmmaSwizzle::b64 ? 2u
         : s == WgmmaSwizzle::b32 ? 3u
                                  : 0u;
}

const char* name_of(WgmmaSwizzle s) {
  return s == WgmmaSwizzle::b128  ? "128B"
         : s == WgmmaSwizzle::b64 ? "64B"
         : s == WgmmaSwizzle::b32 ? "32B"
                                  : "none";
}
const char* name_of(WgmmaMajor m) {
  return m == WgmmaMajor::k ? "K-major" : "MN-major";
}

std::string hex(std::uint32_t v) {
  std::ostringstream out;
  out << "0x" << std::hex << v;
  return out.str();
}

/// Reads the instruction's operand (mn_count x 16) through `bits` and checks that element
/// (mn, k) is the tile's (mn, k0 + k); reports the first mismatch.
void check_reads(const std::map<std::uint32_t, Element>& tile, std::uint64_t bits, WgmmaMajor major,
                 int mn_count, int k0) {
  const WgmmaDescriptor d = decode_wgmma_descriptor(bits);
  int wrong = 0;
  std::string first;
  for (int mn = 0; mn < mn_count; ++mn) {
    for (int k = 0; k < kK; ++k) {
      const std::uint32_t addr = wgmma_element_address(d, major, mn, k);
      const auto it = tile.find(addr);
      const Element want{mn, k0 + k};
      if (it == tile.end() || !(it->second == want)) {
        if (wrong++ == 0) {
          first = "(mn " + std::to_string(mn) + ", k " + std::to_string(k) + ") read at " +
                  hex(addr) + " holds " +
                  (it == tile.end() ? std::string("nothing of the tile")
                                    : "(" + std::to_string(it->second.mn) + ", " +
                                          std::to_string(it->second.k) + ")");
        }
      }
    }
  }
  INFO("first wrong element: " << first);
  CHECK(wrong == 0);
}

/// One concrete layout: the tile as the writer lays it out, the descriptor's offsets as the
/// ISA defines them for that layout, and the operand read.
struct LayoutCase {
  const char* what;
  TileSpec tile;
  std::uint32_t lbo, sbo;  // descriptor fields, chosen by hand from the ISA's definitions
  int mn_count;            // 64 for A, N for B
};

/// Reads every k16 slice of the case's tile: K-major swizzled slices advance the start by 32
/// bytes within the row, the others by two atoms along k.
void check_case(const LayoutCase& c) {
  const auto tile = build_tile(c.tile, kBase);
  const bool k_major_swizzled =
      c.tile.major == WgmmaMajor::k && c.tile.swizzle != WgmmaSwizzle::none;
  for (int slice = 0; slice < c.tile.k_extent / kK; ++slice) {
    const std::uint32_t advance =
        k_major_swizzled ? slice * kK * kElem : slice * (kK / kAtomRows) * c.tile.k_step;
    CAPTURE(slice);
    check_reads(tile,
                descriptor_bits(kBase + advance, c.lbo, c.sbo, 0, swizzle_code(c.tile.swizzle)),
                c.tile.major, c.mn_count, slice * kK);
  }
}

constexpr auto K = WgmmaMajor::k;
constexpr auto MN = WgmmaMajor::mn;
constexpr auto none = WgmmaSwizzle::none;
constexpr auto b32 = WgmmaSwizzle::b32;
constexpr auto b64 = WgmmaSwizzle::b64;
constexpr auto b128 = WgmmaSwizzle::b128;
// LBO for K-major swizzled layouts is unused: a value no layout would take, to show it is not.
constexpr std::uint32_t kUnusedLbo = 0x3ff0;

}  // namespace

// ---- the descriptor ----------------------------------------------------------------------------

TEST_CASE(
    "A descriptor decodes into its start and offsets in bytes and its base offset and "
    "swizzle" *
    doctest::test_suite("wgmma_layout")) {
  // start 0x1230, LBO 0x80, SBO 0x400, base offset 5, 128-byte swizzle: fields >> 4.
  const std::uint64_t bits = 0x123ull | 0x8ull << 16 | 0x40ull << 32 | 5ull << 49 | 1ull << 62;
  const WgmmaDescriptor d = decode_wgmma_descriptor(bits);
  CHECK(d.start == 0x1230);
  CHECK(d.leading_bytes == 0x80);
  CHECK(d.stride_bytes == 0x400);
  CHECK(d.base_offset == 5);
  CHECK(d.swizzle == WgmmaSwizzle::b128);
}

TEST_CASE(
    "Each descriptor field decodes its full 14 or 3 or 2 bits and ignores the reserved "
    "bits" *
    doctest::test_suite("wgmma_layout")) {
  const std::uint64_t ones14 = 0x3fff;
  const std::uint64_t full = ones14 | ones14 << 16 | ones14 << 32 | 7ull << 49 | 3ull << 62;
  // bits 14-15, 30-31, 46-48 and 52-61 are not part of any field
  const std::uint64_t reserved = 0x3ull << 14 | 0x3ull << 30 | 0x7ull << 46 | 0x3ffull << 52;
  for (const std::uint64_t bits : {full, full | reserved}) {
    const WgmmaDescriptor d = decode_wgmma_descriptor(bits);
    CHECK(d.start == 0x3fff0);  // 256 KiB - 16: the largest shared address it can name
    CHECK(d.leading_bytes == 0x3fff0);
    CHECK(d.stride_bytes == 0x3fff0);
    CHECK(d.base_offset == 7);
    CHECK(d.swizzle == WgmmaSwizzle::b32);
  }
  const WgmmaDescriptor only_reserved = decode_wgmma_descriptor(reserved);
  CHECK(only_reserved.start == 0);
  CHECK(only_reserved.leading_bytes == 0);
  CHECK(only_reserved.stride_bytes == 0);
  CHECK(only_reserved.base_offset == 0);
  CHECK(only_reserved.swizzle == WgmmaSwizzle::none);
}

TEST_CASE("The swizzle codes are the PTX ISA's 0 none 1 128B 2 64B 3 32B" *
          doctest::test_suite("wgmma_layout")) {
  CHECK(decode_wgmma_descriptor(0ull << 62).swizzle == WgmmaSwizzle::none);
  CHECK(decode_wgmma_descriptor(1ull << 62).swizzle == WgmmaSwizzle::b128);
  CHECK(decode_wgmma_descriptor(2ull << 62).swizzle == WgmmaSwizzle::b64);
  CHECK(decode_wgmma_descriptor(3ull << 62).swizzle == WgmmaSwizzle::b32);
  CHECK(wb::sim::wgmma_swizzle_row_bytes(WgmmaSwizzle::none) == 16);
  CHECK(wb::sim::wgmma_swizzle_row_bytes(WgmmaSwizzle::b32) == 32);
  CHECK(wb::sim::wgmma_swizzle_row_bytes(WgmmaSwizzle::b64) == 64);
  CHECK(wb::sim::wgmma_swizzle_row_bytes(WgmmaSwizzle::b128) == 128);
  CHECK(wb::sim::wgmma_swizzle_pattern_bytes(WgmmaSwizzle::b32) == 256);
  CHECK(wb::sim::wgmma_swizzle_pattern_bytes(WgmmaSwizzle::b64) == 512);
  CHECK(wb::sim::wgmma_swizzle_pattern_bytes(WgmmaSwizzle::b128) == 1024);
}

// ---- the layouts against the ISA's figures -----------------------------------------------------

TEST_CASE("K-major operands read the tile the ISA's figures draw" *
          doctest::test_suite("wgmma_layout")) {
  // K-major: LBO steps between core matrices along k (no swizzle only), SBO along m|n.
  const LayoutCase cases[] = {
      // no swizzle: core matrices of 128 bytes, the two along k adjacent
      {"A none k-pairs adjacent", {K, none, kAm, kK, 256, 128}, 128, 256, kAm},
      // no swizzle: all of k 0..7 first, k 8..15 2048 bytes on (LBO > SBO)
      {"B N=128 none k-halves apart", {K, none, 128, kK, 128, 2048}, 2048, 128, 128},
      // 32-byte rows hold the k16 slice; atoms of 8 rows 256 apart, then with a gap of 256
      {"A 32B", {K, b32, kAm, kK, 256, 0}, kUnusedLbo, 256, kAm},
      {"B N=64 32B gaps", {K, b32, 64, kK, 512, 0}, kUnusedLbo, 512, 64},
      // 64-byte rows: two k16 slices per row, read at start + 0 and + 32
      {"A 64B", {K, b64, kAm, 32, 512, 0}, kUnusedLbo, 512, kAm},
      {"B N=256 64B", {K, b64, 256, 32, 512, 0}, kUnusedLbo, 512, 256},
      // 128-byte rows: four k16 slices per row (start + 0, 32, 64, 96), atoms 1024 apart
      {"A 128B", {K, b128, kAm, 64, 1024, 0}, kUnusedLbo, 1024, kAm},
      {"B N=256 128B", {K, b128, 256, 64, 1024, 0}, kUnusedLbo, 1024, 256},
      // atoms 2048 apart: a second tile interleaved with this one
      {"A 128B atoms 2048 apart", {K, b128, kAm, 64, 2048, 0}, kUnusedLbo, 2048, kAm},
  };
  for (const LayoutCase& c : cases) {
    CAPTURE(c.what);
    check_case(c);
  }
}

TEST_CASE("MN-major operands read the tile the ISA's figures draw" *
          doctest::test_suite("wgmma_layout")) {
  // MN-major: without swizzle LBO steps along k and SBO along m|n (as K-major); swizzled, LBO
  // steps between atoms along m|n and SBO between atoms along k.
  const LayoutCase cases[] = {
      {"A none", {MN, none, kAm, kK, 128, 1024}, 1024, 128, kAm},
      {"B N=64 none", {MN, none, 64, 32, 512, 128}, 128, 512, 64},
      // 32-byte rows of 16 values of m|n: atoms along k 256 apart, along m|n 512 apart
      {"A 32B", {MN, b32, kAm, kK, 512, 256}, 512, 256, kAm},
      {"B N=128 32B m-first", {MN, b32, 128, 32, 256, 2048}, 256, 2048, 128},
      // 64-byte rows of 32 values
      {"A 64B", {MN, b64, kAm, kK, 1024, 512}, 1024, 512, kAm},
      {"B N=128 64B", {MN, b64, 128, 32, 512, 2048}, 512, 2048, 128},
      // 128-byte rows of 64 values: A fits one atom along m and never uses LBO
      {"A 128B", {MN, b128, kAm, 32, 0, 1024}, kUnusedLbo, 1024, kAm},
      {"B N=128 128B", {MN, b128, 128, kK, 2048, 1024}, 2048, 1024, 128},
      {"B N=256 128B n-first", {MN, b128, 256, 32, 1024, 4096}, 1024, 4096, 256},
  };
  for (const LayoutCase& c : cases) {
    CAPTURE(c.what);
    check_case(c);
  }
}

TEST_CASE("The 128-byte swizzle of a K-major tile spelled out for row 3" *
          doctest::test_suite("wgmma_layout")) {
  // Row 3 of an aligned atom: chunk c of k lies at chunk c ^ 3. k = 0 (chunk 0) at chunk 3,
  // k = 8 (chunk 1) at chunk 2; the slice at start + 32 reads k = 16 (chunk 2) at chunk 1 and
  // k = 24 (chunk 3) at chunk 0 of the same row.
  const std::uint32_t row3 = kBase + 3 * 128;
  const WgmmaDescriptor d = decode_wgmma_descriptor(descriptor_bits(kBase, 16, 1024, 0, 1));
  CHECK(wgmma_element_address(d, K, 3, 0) == row3 + 3 * kChunk);
  CHECK(wgmma_element_address(d, K, 3, 8) == row3 + 2 * kChunk);
  CHECK(wgmma_element_address(d, K, 3, 9) == row3 + 2 * kChunk + kElem);
  const WgmmaDescriptor d32 = decode_wgmma_descriptor(descriptor_bits(kBase + 32, 16, 1024, 0, 1));
  CHECK(wgmma_element_address(d32, K, 3, 0) == row3 + 1 * kChunk);
  CHECK(wgmma_element_address(d32, K, 3, 8) == row3 + 0 * kChunk);
  // row 11 is row 3 of the next atom, SBO on
  CHECK(wgmma_element_address(d, K, 11, 0) == row3 + 1024 + 3 * kChunk);
}

TEST_CASE("The 64-byte swizzle changes its XOR every second row" *
          doctest::test_suite("wgmma_layout")) {
  // 64-byte rows: two rows per 128 bytes share the address bits 7-8, so rows 2r and 2r + 1
  // XOR with r (r % 8 / 2), not with their own row number.
  const WgmmaDescriptor d = decode_wgmma_descriptor(descriptor_bits(kBase, 16, 512, 0, 2));
  for (int row = 0; row < kAtomRows; ++row) {
    CAPTURE(row);
    const std::uint32_t row_start = kBase + row * 64;
    for (int chunk = 0; chunk < 4; ++chunk) {
      const int stored = chunk ^ (row / 2);
      if (chunk * kChunkElems < kK) {
        CHECK(wgmma_element_address(d, K, row, chunk * kChunkElems) == row_start + stored * kChunk);
      }
    }
  }
}

// ---- properties --------------------------------------------------------------------------------

namespace {

/// The tightly packed tile of an operand of mn_count values of m|n: the layout's row and atom,
/// atoms adjacent, first along `first` (k or m|n), then along the other dimension. Returns the
/// spec and the descriptor offsets the ISA assigns to its steps.
struct Packed {
  TileSpec tile;
  std::uint32_t lbo, sbo;
};

Packed packed(WgmmaMajor major, WgmmaSwizzle swizzle, int mn_count, WgmmaMajor first) {
  const std::uint32_t row_bytes = row_bytes_of(swizzle);
  const int row_elems = static_cast<int>(row_bytes / kElem);
  const std::uint32_t atom_bytes = kAtomRows * row_bytes;
  const bool k_major = major == WgmmaMajor::k;
  // a K-major swizzled row is wider than 16 values of k: the tile is one row wide along k
  const int k_extent = k_major && row_elems > kK ? row_elems : kK;
  const int atoms_mn = mn_count / (k_major ? kAtomRows : row_elems);
  const int atoms_k = k_extent / (k_major ? row_elems : kAtomRows);
  const std::uint32_t mn_step = first == WgmmaMajor::mn ? atom_bytes : atom_bytes * atoms_k;
  const std::uint32_t k_step = first == WgmmaMajor::mn ? atom_bytes * atoms_mn : atom_bytes;
  Packed p{{major, swizzle, mn_count, k_extent, mn_step, k_step}, 0, 0};
  // PTX ISA, "Shared Memory Matrix Layout" / the descriptor's strides: the offsets' meaning
  if (swizzle == WgmmaSwizzle::none) {
    p.lbo = k_step;  // between core matrices along k
    p.sbo = mn_step;
  } else if (k_major) {
    p.lbo = kUnusedLbo;
    p.sbo = mn_step;  // between atoms along m|n
  } else {
    p.lbo = mn_step;  // between atoms along m|n
    p.sbo = k_step;   // between atoms along k
  }
  return p;
}

}  // namespace

TEST_CASE("Every element of A and of B for N 64 128 256 has its own address inside the tile" *
          doctest::test_suite("wgmma_layout")) {
  for (const WgmmaMajor major : {K, MN}) {
    for (const WgmmaSwizzle swizzle : {none, b32, b64, b128}) {
      for (const int mn_count : {kAm, 128, 256}) {  // A (64) or B with N = 64, 128, 256
        for (const WgmmaMajor first : {K, MN}) {
          const Packed p = packed(major, swizzle, mn_count, first);
          CAPTURE(name_of(major));
          CAPTURE(name_of(swizzle));
          CAPTURE(mn_count);
          const std::uint32_t footprint = p.tile.mn_extent * p.tile.k_extent * kElem;
          const bool k_major_swizzled = major == K && swizzle != none;
          std::set<std::uint32_t> all;
          int outside = 0, odd = 0, repeated = 0;
          for (int slice = 0; slice < p.tile.k_extent / kK; ++slice) {
            const std::uint32_t advance =
                k_major_swizzled ? slice * kK * kElem : slice * (kK / kAtomRows) * p.tile.k_step;
            const WgmmaDescriptor d = decode_wgmma_descriptor(
                descriptor_bits(kBase + advance, p.lbo, p.sbo, 0, swizzle_code(swizzle)));
            for (int mn = 0; mn < mn_count; ++mn) {
              for (int k = 0; k < kK; ++k) {
                const std::uint32_t a = wgmma_element_address(d, major, mn, k);
                outside += a < kBase || a >= kBase + footprint;
                odd += a % kElem != 0;
                repeated += !all.insert(a).second;
              }
            }
          }
          CHECK(outside == 0);
          CHECK(odd == 0);
          CHECK(repeated == 0);
          // the slices together cover the tile: each of its 2-byte cells exactly once
          CHECK(all.size() == footprint / kElem);
        }
      }
    }
  }
}

namespace {

/// The bank group of a 16-byte access: which 4 of the 32 four-byte banks (address bits 4-6).
unsigned bank_group(std::uint32_t address) {
  return (address / kChunk) % kAtomRows;
}

/// The number of distinct bank groups the 8 rows of each core-matrix column hit (the 16-byte
/// chunk of one k|mn group in rows 0..7 of an atom), the smallest over the operand's columns.
template <typename Address>
int fewest_bank_groups(WgmmaMajor major, int mn_count, Address address) {
  int fewest = kAtomRows;
  const int rows = major == K ? mn_count : kK;     // along the 8-row direction
  const int columns = major == K ? kK : mn_count;  // along the row
  for (int row0 = 0; row0 < rows; row0 += kAtomRows) {
    for (int col = 0; col < columns; col += kChunkElems) {
      std::set<unsigned> groups;
      for (int r = row0; r < row0 + kAtomRows; ++r) {
        groups.insert(bank_group(major == K ? address(r, col) : address(col, r)));
      }
      fewest = std::min(fewest, static_cast<int>(groups.size()));
    }
  }
  return fewest;
}

}  // namespace

TEST_CASE("The 8 rows of a core-matrix column fall in 8 bank groups with every swizzle" *
          doctest::test_suite("wgmma_layout")) {
  for (const WgmmaMajor major : {K, MN}) {
    for (const WgmmaSwizzle swizzle : {none, b32, b64, b128}) {
      const Packed p = packed(major, swizzle, kAm, WgmmaMajor::mn);
      CAPTURE(name_of(major));
      CAPTURE(name_of(swizzle));
      const bool k_major_swizzled = major == K && swizzle != none;
      for (int slice = 0; slice < p.tile.k_extent / kK; ++slice) {
        CAPTURE(slice);
        const std::uint32_t advance =
            k_major_swizzled ? slice * kK * kElem : slice * (kK / kAtomRows) * p.tile.k_step;
        const WgmmaDescriptor d = decode_wgmma_descriptor(
            descriptor_bits(kBase + advance, p.lbo, p.sbo, 0, swizzle_code(swizzle)));
        CHECK(fewest_bank_groups(major, kAm, [&](int mn, int k) {
                return wgmma_element_address(d, major, mn, k);
              }) == kAtomRows);
      }
    }
  }
}

TEST_CASE("Unswizzled 128-byte rows put a core-matrix column in one bank group" *
          doctest::test_suite("wgmma_layout")) {
  // The same K-major tile of 128-byte rows before the XOR: a plain row-major tile, every row's
  // chunk c at bits 4-6 = c, so the 8 rows of a column all hit one bank group (8-way conflict)
  // where the 128-byte swizzle spreads them over all 8.
  for (int slice = 0; slice < 4; ++slice) {
    CAPTURE(slice);
    const WgmmaDescriptor d =
        decode_wgmma_descriptor(descriptor_bits(kBase + slice * 32, kUnusedLbo, 1024, 0, 1));
    CHECK(fewest_bank_groups(
              K, kAm, [&](int mn, int k) { return wgmma_unswizzled_address(d, K, mn, k); }) == 1);
    CHECK(fewest_bank_groups(K, kAm, [&](int mn, int k) {
            return wgmma_element_address(d, K, mn, k);
          }) == kAtomRows);
  }
}

TEST_CASE(
    "The swizzle follows the address so a k slice past the boundary reads its own "
    "columns" *
    doctest::test_suite("wgmma_layout")) {
  // Swizzling the offset from the start (rather than the address) agrees with the address
  // rule only at start + 0; at start + 32 row 1's k = 0 is chunk (2 ^ 1) = 3 of the row, where
  // the offset rule would give (0 ^ 1) + 2 = 3 by luck, and row 2's k = 0 chunk (2 ^ 2) = 0,
  // where the offset rule gives (0 ^ 2) + 2 = 4, the chunk that holds k 48..55.
  const WgmmaDescriptor d = decode_wgmma_descriptor(descriptor_bits(kBase + 32, 16, 1024, 0, 1));
  CHECK(wgmma_element_address(d, K, 1, 0) == kBase + 1 * 128 + 3 * kChunk);
  CHECK(wgmma_element_address(d, K, 2, 0) == kBase + 2 * 128 + 0 * kChunk);
  CHECK(wgmma_element_address(d, K, 2, 8) == kBase + 2 * 128 + 1 * kChunk);
  // and the same tile at a window address whose higher bits differ reads alike, moved
  const std::uint32_t moved = 0x1a400;  // a 1024-byte boundary
  const WgmmaDescriptor e = decode_wgmma_descriptor(descriptor_bits(moved + 32, 16, 1024, 0, 1));
  for (int mn = 0; mn < kAm; ++mn) {
    for (int k = 0; k < kK; ++k) {
      REQUIRE(wgmma_element_address(e, K, mn, k) - moved ==
              wgmma_element_address(d, K, mn, k) - kBase);
    }
  }
}

TEST_CASE("A base offset names the row where an unaligned pattern starts" *
          doctest::test_suite("wgmma_layout")) {
  // PTX ISA, "Matrix Descriptor Format": base offset = (pattern start >> 7) & 7 when the pattern
  // does not start on its boundary. A tile whose pattern starts p rows of 128 bytes past a
  // boundary, read with base offset p, is the aligned tile moved by 128 p bytes (as an H200
  // reads it).
  for (const WgmmaSwizzle swizzle : {b32, b64, b128}) {
    const unsigned rows = wb::sim::wgmma_swizzle_pattern_bytes(swizzle) / 128;
    for (unsigned p = 1; p < rows; ++p) {
      CAPTURE(name_of(swizzle));
      CAPTURE(p);
      const Packed pk = packed(K, swizzle, kAm, WgmmaMajor::mn);
      const unsigned code = swizzle_code(swizzle);
      const WgmmaDescriptor aligned =
          decode_wgmma_descriptor(descriptor_bits(kBase, pk.lbo, pk.sbo, 0, code));
      const WgmmaDescriptor moved =
          decode_wgmma_descriptor(descriptor_bits(kBase + 128 * p, pk.lbo, pk.sbo, p, code));
      CHECK(wgmma_descriptor_fault(moved, K).empty());
      for (int mn = 0; mn < kAm; ++mn) {
        for (int k = 0; k < kK; ++k) {
          REQUIRE(wgmma_element_address(moved, K, mn, k) ==
                  wgmma_element_address(aligned, K, mn, k) + 128 * p);
        }
      }
    }
  }
}

TEST_CASE("Base offset bits above the pattern's rows change nothing" *
          doctest::test_suite("wgmma_layout")) {
  // A 64-byte pattern has 4 rows of 128 bytes and a 32-byte one 2: base offsets 4 and 2 name row
  // 0 again (an H200 reads them as base offset 0), while 5 and 3 name row 1.
  const auto address_with = [](unsigned base_offset, unsigned code, std::uint32_t sbo) {
    return [=](int mn, int k) {
      return wgmma_element_address(
          decode_wgmma_descriptor(descriptor_bits(kBase, kUnusedLbo, sbo, base_offset, code)), K,
          mn, k);
    };
  };
  int same_b64 = 0, same_b32 = 0, moved_b64 = 0, moved_b32 = 0;
  for (int mn = 0; mn < kAm; ++mn) {
    for (int k = 0; k < kK; ++k) {
      same_b64 += address_with(4, 2, 512)(mn, k) == address_with(0, 2, 512)(mn, k);
      same_b32 += address_with(2, 3, 256)(mn, k) == address_with(0, 3, 256)(mn, k);
      moved_b64 += address_with(5, 2, 512)(mn, k) != address_with(0, 2, 512)(mn, k);
      moved_b32 += address_with(3, 3, 256)(mn, k) != address_with(0, 3, 256)(mn, k);
    }
  }
  CHECK(same_b64 == kAm * kK);
  CHECK(same_b32 == kAm * kK);
  CHECK(moved_b64 == kAm * kK);  // counted from row 1, every row takes another XOR
  CHECK(moved_b32 == kAm * kK);
  const WgmmaDescriptor b64_base4 =
      decode_wgmma_descriptor(descriptor_bits(kBase, kUnusedLbo, 512, 4, 2));
  CHECK(wgmma_descriptor_fault(b64_base4, K).empty());
}

// ---- faults ------------------------------------------------------------------------------------

TEST_CASE("A swizzled operand off its pattern boundary is a fault naming the boundary" *
          doctest::test_suite("wgmma_layout")) {
  const auto fault = [](std::uint32_t start, unsigned base_offset, unsigned code, WgmmaMajor m) {
    return wgmma_descriptor_fault(
        decode_wgmma_descriptor(descriptor_bits(start, 16, 1024, base_offset, code)), m);
  };
  // 128 bytes: a 1024-byte boundary plus a k offset of 0, 32, 64 or 96 is fine
  for (const std::uint32_t k_offset : {0u, 32u, 64u, 96u}) {
    CHECK(fault(kBase + k_offset, 0, 1, K).empty());
  }
  const std::string off = fault(kBase + 128, 0, 1, K);
  CHECK(off.find("a 128-byte-swizzled operand must start on a 1024-byte boundary") == 0);
  CHECK(off.find("0x6080") != std::string::npos);
  CHECK(fault(kBase + 256 + 32, 0, 1, MN).find("1024-byte boundary") != std::string::npos);
  // the base offset that names the start's row makes it fine; another one does not
  CHECK(fault(kBase + 128, 1, 1, K).empty());
  CHECK(fault(kBase + 128, 2, 1, K).find("base offset must be (start >> 7) & 7") !=
        std::string::npos);
  CHECK(fault(kBase, 3, 1, K).find("(row 0) with base offset 3") != std::string::npos);
  // 64 and 32 bytes: their patterns repeat every 512 and 256 bytes
  CHECK(fault(kBase + 128, 0, 2, K)
            .find("a 64-byte-swizzled operand must start on a 512-byte "
                  "boundary") == 0);
  CHECK(fault(kBase + 512, 0, 2, K).empty());
  CHECK(fault(kBase + 128, 0, 3, MN)
            .find("a 32-byte-swizzled operand must start on a 256-byte "
                  "boundary") == 0);
  CHECK(fault(kBase + 256, 0, 3, MN).empty());
  // without swizzle the base offset is unused and any 16-byte start will do
  CHECK(fault(kBase + 16, 5, 0, K).empty());
  CHECK(fault(kBase + 128, 0, 0, MN).empty());
}

TEST_CASE("A K-major k16 slice that runs past its swizzle row is a fault" *
          doctest::test_suite("wgmma_layout")) {
  const auto fault = [](std::uint32_t start, unsigned code, WgmmaMajor m) {
    return wgmma_descriptor_fault(decode_wgmma_descriptor(descriptor_bits(start, 16, 512, 0, code)),
                                  m);
  };
  CHECK(fault(kBase + 32, 2, K).empty());  // 64-byte rows: the second slice
  const std::string past = fault(kBase + 48, 2, K);
  CHECK(past.find("a K-major 64-byte-swizzled operand's k16 slice (32 bytes) must lie within one "
                  "64-byte row") == 0);
  CHECK(past.find("48 bytes into its row") != std::string::npos);
  CHECK(fault(kBase + 16, 3, K).find("k16 slice") != std::string::npos);  // 32-byte rows
  CHECK(fault(kBase + 112, 1, K).find("k16 slice") != std::string::npos);
  CHECK(fault(kBase + 96, 1, K).empty());
  // MN-major rows run along m|n: a start inside a row is an offset along m|n, not k
  CHECK(fault(kBase + 48, 2, MN).empty());
}
