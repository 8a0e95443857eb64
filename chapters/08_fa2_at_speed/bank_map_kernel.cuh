// Chapter 08: the launch behind the page's bank map. Not a rung: one warp, one tile, one
// ldmatrix, in each of the three layouts of eq. (3), so that the simulator's profile mode can
// record which lane's row lands in which bank (`ch08 --profile --access-csv FILE`, drawn by
// docs/figures/bank_map.py). The rungs load their fragments with the same address
// (ldmatrix_a_offset, fast_tiles.cuh).
//
// Launch shape: one block of 32 threads; dynamic shared memory: 16 rows of 64 + 8 halves.
// Test: ctest --test-dir build -R 08_fa2_at_speed --output-on-failure
#pragma once

#include <cstdint>

#include "common/kernel.cuh"
#include "common/vector_types.cuh"

#include "chapters/08_fa2_at_speed/fa2_at_speed.hpp"
#include "chapters/08_fa2_at_speed/fast_tiles.cuh"

namespace wb::ch08 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

// Element (r, c) of the tile holds r * 64 + c (exact in fp16), stored at Layout::offset(r, c);
// then the warp's ldmatrix .x4 of the A fragment at (0, 0), whose registers go to `fragments`.
template <typename Layout>
__global__ void __launch_bounds__(32) ldmatrix_bank_map_kernel(std::uint32_t* fragments) {
  __half* tile = dynamic_shared<__half>();
  const int lane = threadIdx.x;
  for (int e = lane; e < kBankMapRows * kBankMapColumns; e += 32)
    tile[Layout::offset(e / kBankMapColumns, e % kBankMapColumns)] = from_float<__half>(float(e));
  __syncthreads();  // the tile is complete before the warp's rows are read
  std::uint32_t a[4];
  ptx::ldmatrix_x4(a, tile + ldmatrix_a_offset<Layout>(0, 0, lane));
  for (int i = 0; i < 4; ++i) fragments[lane * 4 + i] = a[i];
}

}  // namespace

template <>
void Kernels<kThisBackend>::ldmatrix_bank_map(BankLayout layout, std::uint32_t* fragments) {
  constexpr int kPaddedLd = TileLayout<kBankMapColumns, false>::kLd;  // the widest rows
  constexpr int kBytes = kBankMapRows * kPaddedLd * 2;
  switch (layout) {
    case BankLayout::unpadded:
      launch<ldmatrix_bank_map_kernel<UnpaddedLayout<kBankMapColumns>>>(dim3(1), dim3(32), kBytes,
                                                                        fragments);
      break;
    case BankLayout::padded:
      launch<ldmatrix_bank_map_kernel<TileLayout<kBankMapColumns, false>>>(dim3(1), dim3(32),
                                                                           kBytes, fragments);
      break;
    case BankLayout::swizzled:
      launch<ldmatrix_bank_map_kernel<TileLayout<kBankMapColumns, true>>>(dim3(1), dim3(32), kBytes,
                                                                          fragments);
      break;
  }
}

}  // namespace wb::ch08
