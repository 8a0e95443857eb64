// Chapter 08, rung 4: fa2_swizzle. Rung 3, with its tiles swizzled instead of padded.
//
// Computes: O = softmax(scale Q K^T + causal mask) V and logsumexp per row, as rung 2.
// Changed since rung 3 (fa2_ldmatrix): the tiles' rows are D elements apart, unpadded, with
//           16-byte chunk c of row r stored at chunk c ^ (r % 8), eq. (3) of fa2_at_speed.md
//           (SwizzledTile, tile_layout.hpp): the same single wavefront per ldmatrix matrix as
//           padded rows, with no byte wasted: 16 / 32 KiB of shared memory at d = 64 / 128.
// The kernel: fa2_mma_kernel (mma_kernel.cuh) with these fragments; its header gives the launch
//           shape (Br = 64 over 4 warps), the limits and the traffic.
// Test: ctest --test-dir build -R 08_fa2_at_speed --output-on-failure
#pragma once

#include "chapters/08_fa2_at_speed/mma_kernel.cuh"  // first: common/kernel.cuh

namespace wb::ch08 {

WB_RUNG(AttentionArgs, fa2_swizzle, "tiles XOR-swizzled in 16-byte chunks instead of padded rows",
        fast_limits(), &launch_mma<LdmatrixFragments, SwizzledTile>, &mma_traffic, mma_facts())

}  // namespace wb::ch08
