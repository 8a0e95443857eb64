// wgmma operand tiles built the way the PTX ISA's figures draw them, independently of the
// simulator's address functions (common/sim/wgmma_layout.hpp): the layout test
// (tests/sim/test_wgmma_layout.cpp) checks those functions against these tiles, and the wgmma
// test (tests/sim/test_wgmma.cpp) has its kernels write their operands into shared memory in
// these tiles' layout.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <map>

#include "common/sim/wgmma_layout.hpp"

namespace wb::test {

constexpr std::uint32_t kElem = 2;    // bytes of an f16 or bf16
constexpr std::uint32_t kChunk = 16;  // a core-matrix row
constexpr int kChunkElems = 8;        // elements of a chunk
constexpr int kAtomRows = 8;          // rows of a core matrix or swizzle atom

/// A row of the layout in bytes: 16 (a core-matrix row) without swizzle, else the swizzle's.
inline std::uint32_t row_bytes_of(wb::sim::WgmmaSwizzle s) {
  using wb::sim::WgmmaSwizzle;
  return s == WgmmaSwizzle::b128  ? 128u
         : s == WgmmaSwizzle::b64 ? 64u
         : s == WgmmaSwizzle::b32 ? 32u
                                  : 16u;
}

/// An element of an operand: (m, k) of A or (n, k) of B.
struct Element {
  int mn, k;
  bool operator==(const Element& o) const { return mn == o.mn && k == o.k; }
};

/// A tile in shared memory as the ISA's figures draw it ("Shared Memory Matrix Layout", the
/// swizzle atom figures): atoms of 8 rows of row_bytes, rows one after the other; K-major rows
/// are 8 values of m|n and run along k, MN-major rows are 8 values of k and run along m|n. The
/// 16-byte chunks of atom row r are permuted: physical chunk p holds logical chunk
/// p ^ (r / (8 / chunks)) for chunks = row_bytes / 16 per row (r for 128 bytes, r / 2 for 64,
/// r / 4 for 32, no permutation for a 16-byte row). Atoms are mn_step apart along m|n and
/// k_step apart along k.
struct TileSpec {
  wb::sim::WgmmaMajor major;
  wb::sim::WgmmaSwizzle swizzle;
  int mn_extent, k_extent;  // the whole tile: for K-major swizzled, k_extent fills a row
  std::uint32_t mn_step, k_step;
};

/// Visits the tile's elements, its first atom at `base`: visit(byte address, Element).
template <typename Visit>
void for_each_tile_element(const TileSpec& t, std::uint32_t base, Visit visit) {
  const std::uint32_t row_bytes = row_bytes_of(t.swizzle);
  const int chunks = static_cast<int>(row_bytes / kChunk);
  const int row_elems = chunks * kChunkElems;
  const bool k_major = t.major == wb::sim::WgmmaMajor::k;
  const int atom_mn = k_major ? kAtomRows : row_elems;  // an atom's extent along m|n
  const int atom_k = k_major ? row_elems : kAtomRows;   // and along k
  for (int i = 0; i < t.mn_extent / atom_mn; ++i) {
    for (int j = 0; j < t.k_extent / atom_k; ++j) {
      const std::uint32_t atom = base + i * t.mn_step + j * t.k_step;
      for (int r = 0; r < kAtomRows; ++r) {
        const int row_xor = chunks == 1 ? 0 : r / (kAtomRows / chunks);
        for (int p = 0; p < chunks; ++p) {
          const int c = p ^ row_xor;  // the logical chunk stored at physical chunk p
          for (int e = 0; e < kChunkElems; ++e) {
            const std::uint32_t addr = atom + r * row_bytes + p * kChunk + e * kElem;
            visit(addr, k_major ? Element{i * atom_mn + r, j * atom_k + c * kChunkElems + e}
                                : Element{i * atom_mn + c * kChunkElems + e, j * atom_k + r});
          }
        }
      }
    }
  }
}

/// The tile's elements by byte address, its first atom at `base`.
inline std::map<std::uint32_t, Element> build_tile(const TileSpec& t, std::uint32_t base) {
  std::map<std::uint32_t, Element> tile;
  for_each_tile_element(t, base, [&](std::uint32_t addr, Element el) {
    REQUIRE(tile.count(addr) == 0);  // the spec itself must not overlap atoms
    tile[addr] = el;
  });
  return tile;
}

}  // namespace wb::test
