// Chapter 08, rung 3: fa2_ldmatrix. Rung 2, with every fragment read by ldmatrix.
//
// Computes: O = softmax(scale Q K^T + causal mask) V and logsumexp per row, as rung 2.
// Changed since rung 2 (fa2_mma): the fragments are read from shared memory by ldmatrix .x4
//           (.trans for V), eq. (2) of fa2_at_speed.md (LdmatrixFragments, fast_tiles.cuh): one
//           instruction per A fragment or pair of B fragments, where fa2_mma makes four 32-bit
//           loads (eight 16-bit ones for V). The tiles keep their padded rows.
// The kernel: fa2_mma_kernel (mma_kernel.cuh) with these fragments; its header gives the launch
//           shape (Br = 64 over 4 warps), the limits and the traffic.
// Test: ctest --test-dir build -R 08_fa2_at_speed --output-on-failure
#pragma once

#include "chapters/08_fa2_at_speed/mma_kernel.cuh"  // first: common/kernel.cuh

namespace wb::ch08 {

WB_RUNG(AttentionArgs, fa2_ldmatrix, "fragments loaded by ldmatrix .x4 (.trans for V)",
        fast_limits(), &launch_mma<LdmatrixFragments, PaddedTile>, &mma_traffic, mma_facts())

}  // namespace wb::ch08
