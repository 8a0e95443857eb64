// Chapter 11's trace (`ch11 --trace`): eq. (1)'s tile and the descriptors of the two products,
// and eq. (4)'s mbarrier protocol over a ring of K/V stages, step by step for a small case,
// from the same stage and parity functions the kernels call (fa3_hopper.hpp).
#pragma once

#include <iostream>
#include <string>

#include "chapters/11_fa3_hopper/fa3_hopper.hpp"
#include "common/table.hpp"

namespace wb::ch11 {

/// Eq. (1): where the 16-byte chunks of a 128-byte-swizzled tile row land, and the descriptor
/// of each k step of the two products at d = 128.
inline void print_tile_trace() {
  std::cout << "Eq. (1): a tile row is 64 elements (128 bytes) of a column block; chunk c (8 "
               "elements) of row r\n  is stored at chunk c ^ (r % 8). Column chunk 0 of rows "
               "0-7, and the banks it spans:\n";
  Table rows({"row", "chunk stored at", "banks"});
  for (int r = 0; r < 8; ++r) {
    const int at = 0 ^ (r % 8);
    rows.add_row({std::to_string(r), std::to_string(at),
                  std::to_string(4 * at) + "-" + std::to_string(4 * at + 3)});
  }
  rows.print(std::cout);
  constexpr int kD = 128;
  constexpr unsigned kRow = 128, kQBlock = kBr * kRow, kKvBlock = kBc * kRow;
  std::cout << "  8 rows, 8 bank groups: a core matrix (8 rows x 16 bytes) in one pass.\n\n"
               "Eq. (2): the descriptors at d = 128 (Q tile " << kBr << " rows, K/V tiles " << kBc
            << " rows, two column blocks each):\n";
  Table desc({"product", "k step", "operand", "major", "start (bytes from tile)", "LBO", "SBO"});
  for (int ks = 0; ks < kD / 16; ++ks) {
    const unsigned along = ks % 4 * 32;
    desc.add_row({"S = Q K^T", std::to_string(ks), "A = Q (64 rows of warpgroup w)", "K",
                  std::to_string(ks / 4 * kQBlock + along) + " + 8192 w", "unused", "1024"});
    desc.add_row({"", "", "B = K", "K", std::to_string(ks / 4 * kKvBlock + along), "unused",
                  "1024"});
  }
  for (int kk = 0; kk < kBc / 16; kk += 7) {
    desc.add_row({kk == 0 ? "O += P V" : "", std::to_string(kk), "A = P (registers)", "-", "-",
                  "-", "-"});
    desc.add_row({"", "", "B = V", "MN", std::to_string(kk * 16 * kRow),
                  std::to_string(kKvBlock), "1024"});
  }
  desc.print(std::cout);
  std::cout << "  (k steps 1-6 of P V step 2048 bytes each.) K-major: a k step moves 32 bytes "
               "along the swizzled rows;\n  MN-major V: 16 rows down; LBO steps to V's second "
               "column block (64 more of d).\n\n";
}

/// Eq. (4): the producer and consumers of a ring of `stages` stages over `tiles` K/V tiles, in
/// the order the protocol allows them (the producer as far ahead as the ring lets it).
inline void print_ring_trace(int tiles, int stages) {
  std::cout << "Eq. (4): the mbarrier protocol of " << tiles << " K/V tiles through a ring of "
            << stages << " stages\n  (full[s]: 1 arrival + the tile's bytes; empty[s]: 8 "
               "arrivals, one per consumer warp):\n";
  Table table({"step", "producer (1 thread)", "consumers (2 warpgroups)"});
  int step = 0;
  int produced = 0;
  for (int i = 0; i < tiles; ++i) {
    // The producer fills every stage the ring has free before the consumers need tile i.
    for (; produced < tiles && produced < i + stages; ++produced) {
      const int s = ring_stage(produced, stages);
      std::string p;
      if (produced >= stages)
        p = "wait empty[" + std::to_string(s) + "] parity " +
            std::to_string(empty_parity(produced, stages)) + "; ";
      p += "expect_tx full[" + std::to_string(s) + "]; TMA K, V of tile " +
           std::to_string(produced);
      table.add_row({std::to_string(++step), p, ""});
    }
    const int s = ring_stage(i, stages);
    table.add_row({std::to_string(++step), "",
                   "wait full[" + std::to_string(s) + "] parity " +
                       std::to_string(full_parity(i, stages)) + "; tile " + std::to_string(i) +
                       "; arrive empty[" + std::to_string(s) + "]"});
  }
  table.print(std::cout);
  std::cout << "  Stage s's k-th use (from 0) completes phase k of full[s] and of empty[s]: the "
               "waits name it\n  by its parity k % 2. The producer's first use of a stage waits "
               "on nothing.\n\n";
}

inline void print_trace() {
  print_tile_trace();
  print_ring_trace(5, 2);
}

}  // namespace wb::ch11
