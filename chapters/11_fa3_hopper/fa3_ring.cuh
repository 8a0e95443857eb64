// Eq. (4) of fa3_hopper.md, warp specialization's ring, which fa3_warp_specialized,
// fa3_pingpong and fa3_intra_warpgroup share: a producer warpgroup, one thread of it issuing,
// copies the Q tile and then K/V tile after tile into a ring of stages by TMA; two consumer
// warpgroups wait for each tile on its stage's `full` mbarrier and give the stage back on its
// `empty` mbarrier. setmaxnreg moves registers from the producer to the consumers. Device code
// only (this file compiles to nothing by itself).
// Test: ctest --test-dir build -R 11_fa3_hopper --output-on-failure
#pragma once

#include "common/hopper.cuh"  // first: common/kernel.cuh

#include <cstdint>

#include "chapters/11_fa3_hopper/fa3_hopper.hpp"
#include "chapters/11_fa3_hopper/fa3_tiles.cuh"

namespace wb::ch11 {
namespace {  // device code with internal linkage: one copy per backend's translation unit

constexpr int kConsumerWarps = kConsumers * kWarpgroupWarps;  // 8
constexpr int kSpecializedWarps = kWarpgroupWarps + kConsumerWarps;  // and the producer's 4: 12
// setmaxnreg: the block's 384 threads start with 65536 / 384 = 170 registers each at most
// (__launch_bounds__: 168); the producer's copies need few, the consumers' S and O many:
// 128 x 24 + 256 x 240 = 64512 <= 65536.
constexpr int kProducerRegisters = 24;
constexpr int kConsumerRegisters = 240;

/// The ring's barriers, in the kernel's static shared memory. q_full: the Q tile landed.
/// full[s]: stage s holds its tile (the producer's arrival with the bytes to expect, then the
/// bytes). empty[s]: the consumers are done with it (one arrival per consumer warp: after its
/// warpgroup's wgmma_wait_group the warp's lanes have read all they read of the stage, and
/// __syncwarp orders them before lane 0's arrival; 8 arrivals instead of 256).
template <int kStages>
struct RingBarriers {
  std::uint64_t q_full;
  std::uint64_t full[kStages];
  std::uint64_t empty[kStages];
};

/// The ring of kStages K/V stages (K, then V, each a KvTile<D>) from `stages`, and its barriers.
template <int D, int kStages>
struct Ring {
  unsigned char* stages;
  RingBarriers<kStages>* bars;

  /// One thread, before the block's __syncthreads: every barrier at its phase 0.
  __device__ void init() const {
    ptx::mbarrier_init(&bars->q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(&bars->full[s], 1);
      ptx::mbarrier_init(&bars->empty[s], kConsumerWarps);
    }
    ptx::fence_proxy_async();  // the initialized barriers, visible to TMA's complete_tx
  }
  __device__ unsigned char* k_tile(int jt) const {
    return stages + ring_stage(jt, kStages) * kStageBytes<D>;
  }
  __device__ unsigned char* v_tile(int jt) const { return k_tile(jt) + KvTile<D>::kBytes; }

  //! [produce]
  /// The producer's thread: the Q tile of rows [i0, i0 + 128) of head b, then K/V tiles 0 ..
  /// tiles - 1, each into its stage as soon as the consumers gave the stage back.
  __device__ void produce(unsigned char* q_tile, const ptx::TensorMap* q_map,
                          const ptx::TensorMap* k_map, const ptx::TensorMap* v_map, int i0, int b,
                          int tiles) const {
    ptx::mbarrier_arrive_expect_tx(&bars->q_full, QTile<D>::kBytes);
    load_tile_tma<kBr, D>(q_tile, q_map, i0, b, &bars->q_full);
    for (int jt = 0; jt < tiles; ++jt) {
      std::uint64_t* full = &bars->full[ring_stage(jt, kStages)];
      // The stage's previous use (jt - kStages) must have been given back; its first use waits
      // on none.
      if (jt >= kStages)
        ptx::mbarrier_wait_parity(&bars->empty[ring_stage(jt, kStages)], empty_parity(jt, kStages));
      ptx::mbarrier_arrive_expect_tx(full, kStageBytes<D>);
      load_tile_tma<kBc, D>(k_tile(jt), k_map, jt * kBc, b, full);
      load_tile_tma<kBc, D>(v_tile(jt), v_map, jt * kBc, b, full);
    }
  }
  //! [produce]

  /// A consumer thread: wait until the Q tile landed.
  __device__ void wait_q() const { ptx::mbarrier_wait_parity(&bars->q_full, 0); }
  /// A consumer thread: wait until tile jt landed in its stage.
  __device__ void wait_full(int jt) const {
    ptx::mbarrier_wait_parity(&bars->full[ring_stage(jt, kStages)], full_parity(jt, kStages));
  }
  /// A consumer warp, done with tile jt (every product that read its stage waited for): give
  /// the stage back.
  __device__ void release(int jt) const {
    __syncwarp();
    if (threadIdx.x == 0) ptx::mbarrier_arrive(&bars->empty[ring_stage(jt, kStages)]);
  }
};

}  // namespace
}  // namespace wb::ch11
