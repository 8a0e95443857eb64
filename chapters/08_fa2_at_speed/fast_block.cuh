// What every kernel of chapter 08 does around its K/V loop, whatever its rung: find its head's
// Q, K and V, hold its warp's Q fragments, know the last key its rows see, and report the K/V
// tiles it visited. The rungs (rungs/N_name.cuh, mma_kernel.cuh) call these in the same order;
// what they do between them is each rung's idea. Device code only (this file compiles to
// nothing by itself).
// Test: ctest --test-dir build -R 08_fa2_at_speed --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include <cstddef>
#include <cstdint>

#include "common/rung_args.hpp"

namespace wb::ch08 {
namespace {  // device code with internal linkage: one copy per backend's translation unit

/// Head b's Q (lq, D), K and V (lk, D), in the (bh, l, D) tensors of the launch.
template <typename T, int D>
struct HeadInputs {
  const T* q;
  const T* k;
  const T* v;
  __device__ HeadInputs(const T* q_all, const T* k_all, const T* v_all, AttentionShape shape, int b)
      : q(q_all + std::size_t(b) * shape.lq * D),
        k(k_all + std::size_t(b) * shape.lk * D),
        v(v_all + std::size_t(b) * shape.lk * D) {}
};

/// The warp's 16 rows from `row` of a Q tile in shared memory as A fragments, one per 16 head
/// columns, kept in registers for the whole loop.
template <typename Fragments, typename T>
__device__ __forceinline__ void load_q_fragments(
    std::uint32_t (&qa)[Fragments::Tile::kColumns / 16][4], const T* q_tile, int row, int lane) {
  for (int ks = 0; ks < Fragments::Tile::kColumns / 16; ++ks)
    Fragments::load_a(qa[ks], q_tile, row, 16 * ks, lane);
}

/// The last key that the last of `rows` query rows from w0 sees (chapter 06's eq. 6): a K/V
/// tile past it is masked for all of them, and a warp skips it.
__device__ __forceinline__ int last_visible_key(int w0, int rows, AttentionShape shape,
                                                bool causal) {
  return causal ? w0 + rows - 1 + (shape.lk - shape.lq) : shape.lk - 1;
}

/// The count of K/V tiles that the block of Q tile x of head b visited, from one thread, into
/// tiles_visited (nullptr or (bh, gridDim.x)): the tests hold it to chapter 06's eq. (7).
__device__ __forceinline__ void record_tiles_visited(int* tiles_visited, int b, int x, int tiles) {
  if (tiles_visited != nullptr && threadIdx.x == 0 && threadIdx.y == 0)
    tiles_visited[std::size_t(b) * gridDim.x + x] = tiles;
}

}  // namespace
}  // namespace wb::ch08
