// Chapter 08, rung 2: fa2_mma. Chapter 06's FA2 on mma.sync, with S~ kept in registers.
//
// Computes: O = softmax(scale Q K^T + causal mask) V and logsumexp per row, for Q: (bh, lq, d),
//           K, V: (bh, lk, d) in __half or __nv_bfloat16, float accumulation: chapter 06's
//           eqs. (3)-(7), as its tensor-core kernel. O in the input type, logsumexp in float; a
//           fully masked row gives O = 0 and logsumexp = -inf.
// Changed since rung 1 (chapter 06's fa2_tensor_core): the products are mma.sync.m16n8k16
//           (common/ptx.cuh) and S~ never leaves registers: each lane holds its S~ elements in
//           the accumulator layout, takes the row statistics with two shuffles, and re-packs the
//           same registers as P~'s A fragment (eq. 1 of fa2_at_speed.md: pack_p and attend_keys
//           in warp_tile.cuh); the fragments are read by 32-bit loads (PairFragments,
//           fast_tiles.cuh) from tiles with rows padded by 16 bytes, as chapter 06's
//           (PaddedTile, tile_layout.hpp); K/V tiles of 64 keys whatever d.
// The kernel: fa2_mma_kernel (mma_kernel.cuh) with these fragments; its header gives the launch
//           shape (Br = 64 over 4 warps), the limits and the traffic. Rungs 3 and 4 are the same
//           kernel with other fragments.
// Test: ctest --test-dir build -R 08_fa2_at_speed --output-on-failure
#pragma once

#include "chapters/08_fa2_at_speed/mma_kernel.cuh"  // first: common/kernel.cuh

namespace wb::ch08 {

WB_RUNG(AttentionArgs, fa2_mma,
        "mma.sync m16n8k16: S~ stays in registers and becomes P~'s A fragment; Q fragments in "
        "registers for the whole loop; Bc = 64",
        fast_limits(), &launch_mma<PairFragments, PaddedTile>, &mma_traffic, mma_facts())

}  // namespace wb::ch08
