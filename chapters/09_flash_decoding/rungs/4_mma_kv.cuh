// Chapter 09, rung 4: mma KV. The split kernel with a block's query rows on mma.sync.
//
// Computes: the partials (O_s, logsumexp_s) of eq. (1) for every split s of every query row, as
//           rung 3 does, for fp16 and bf16 elements and d = 64 or 128, with float
//           accumulation; the combine kernel (combine_kernel.cuh) merges them, eq. (4).
// Changed since stream_kv: with several query rows per KV head (lq > 1, or a group of query
//           heads sharing a KV head, eq. 5) stream_kv does every row's dot products and P V
//           on CUDA cores, lane by lane. Here the block's 16 group rows (zeros past the last)
//           are one m16 tile of chapter 08's mma.sync.m16n8k16, and K and V come through
//           shared memory as chapter 08's rungs take them: 64-key tiles double-buffered by
//           cp.async, XOR-swizzled, fragments by ldmatrix. Each of the 4 warps takes 16 keys of
//           every tile with its own online softmax state (chapter 08's warp_tile.cuh: scores,
//           the register softmax, P~ V), and at the end the 4 states of each row merge through
//           shared memory by eq. (4), as stream_kv's key slots do (state_merge.cuh).
// Launch shape: grid (splits x ceil(g lq / 16), batch x hkv), block (32, 4). Dynamic shared
//           memory: two K/V tile pairs (64 rows of d elements each) and the Q tile (16 rows):
//           34 KiB at d = 64, 68 KiB at d = 128 (opted in above 48 KiB); the merge reuses the
//           tiles' bytes.
// Limits: fp16 or bf16; d = 64 or 128 (template instantiations); q, k, v 16-byte aligned
//           (checked by the launcher); the rest as split_kv.
// Memory traffic: split_traffic with blocks of 16 rows (split_kv's): Q once per block, K and V
//           once per key of its range (cp.async zero-fills the rows past it without reading),
//           a float O row where the split saw a key, logsumexp written; a paged cache adds
//           every thread's read of the table per 32 keys, for K and again for V; then the
//           combine's.
// Test: ctest --test-dir build -R 09_flash_decoding --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include <cstdint>

#include "chapters/04_fused_qk_softmax/attention_tiles.cuh"
#include "chapters/08_fa2_at_speed/fast_tiles.cuh"
#include "chapters/08_fa2_at_speed/warp_tile.cuh"
#include "chapters/09_flash_decoding/decode_ladder.hpp"
#include "chapters/09_flash_decoding/flash_decoding.hpp"
#include "chapters/09_flash_decoding/state_merge.cuh"
#include "common/ptx.cuh"
#include "common/shared_memory.cuh"
#include "common/tile_shape.cuh"

namespace wb::ch09 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

// Chapter 08's swizzled tiles, their fragments read by ldmatrix (fa2_swizzle's layout and loads).
template <int D>
using Tile = ch08::SwizzledTile<D>;
template <int D>
using Fragments = ch08::LdmatrixFragments<Tile<D>>;

constexpr int kMmaKeys = ch08::kKeys;              // keys of a K/V tile: 16 per warp
constexpr int kWarpKeys = kMmaKeys / kBlockWarps;  // a warp's keys of each tile
static_assert(kWarpKeys == 16, "a warp's keys are one k16 step of P~ V");
static_assert(kMmaRows == ch08::kWarpRows, "the block's rows are one m16 tile");

/// Elements of the dynamic shared memory: two (K, V) tile pairs, then the Q tile.
template <int D>
constexpr int mma_shared_elements() {
  return 2 * 2 * kMmaKeys * D + kMmaRows * D;
}

/// Keys [t0, t0 + 64) of the cache below j1 into a K or V tile by cp.async (zeros past j1), in
/// two halves of 32 rows: a page of a paged cache holds whole halves, not whole tiles (eq. 9).
template <int D, typename T>
__device__ void load_cache_tile_async(const T* __restrict__ base, const CacheRows& cache, int b,
                                      int kv, int t0, int j1, T* tile) {
  for (int h = 0; h < kMmaKeys; h += kTileKeys) {
    const int j = t0 + h;
    const T* src = j < j1 ? base + cache(b, kv, j) : base;  // past j1: read nothing
    ch08::load_tile_async<Tile<D>, kBlockThreads, kTileKeys>(src, 0, j1 - j, tile, h);
  }
}

// q: (batch, hq, lq, D); k, v: the cache, rows addressed by `cache` (eq. 9), all of T;
// lengths: (batch) or nullptr;
// o_partial (batch, hq, lq, splits, D), lse_partial (batch, hq, lq, splits) of float. Block
// (blockIdx.x, blockIdx.y): split blockIdx.x / row_tiles, group rows
// [16 (blockIdx.x % row_tiles), + 16) of KV head blockIdx.y % hkv of sequence blockIdx.y / hkv;
// warp w takes keys [16 w, 16 w + 16) of every K/V tile.
template <typename T, int D>
__global__ void __launch_bounds__(kBlockThreads)
    mma_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
               CacheRows cache, const int* __restrict__ lengths, float* __restrict__ o_partial,
               float* __restrict__ lse_partial, SplitGrid grid, float scale, bool causal) {
  constexpr int kTileElements = kMmaKeys * D;  // one K or V tile, swizzled rows of D
  const DecodeShape& shape = grid.shape;
  const int lq = shape.lq, g = shape.group();
  const int s = blockIdx.x / grid.row_tiles;
  const int r0 = (blockIdx.x % grid.row_tiles) * kMmaRows;
  const int b = blockIdx.y / shape.hkv, kv = blockIdx.y % shape.hkv;
  const int rows = min(kMmaRows, g * lq - r0);
  const int warp = threadIdx.y, lane = threadIdx.x;

  T* smem = dynamic_shared<T>();  // pair u: K at 2u kTileElements, V right after it
  T* q_tile = smem + 2 * 2 * kTileElements;
  __shared__ int length[1];  // the sequence's keys in use, read once
  if (warp == 0 && lane == 0)
    length[0] = lengths == nullptr ? shape.lk : max(0, min(lengths[b], shape.lk));
  const std::size_t row0 = (std::size_t(b) * shape.hq + std::size_t(kv) * g) * lq + r0;
  ch08::load_tile<Tile<D>, kBlockThreads, kMmaRows>(q + row0 * D, 0, rows,
                                                    q_tile);  // zeros past `rows`
  __syncthreads();  // the length and the Q tile visible to every thread
  const int len = length[0];
  const KeyRange keys = block_keys(len, grid.splits, s, r0, rows, lq, causal);
  const int tiles = keys.j1 > keys.j0 ? (keys.j1 - keys.j0 + kMmaKeys - 1) / kMmaKeys : 0;

  // The block's 16 rows of Q as A fragments, in every warp, for the whole loop.
  std::uint32_t qa[D / 16][4];
  for (int ks = 0; ks < D / 16; ++ks) Fragments<D>::load_a(qa[ks], q_tile, 0, 16 * ks, lane);
  ch08::WarpState<D> st;
  st.clear();

  // [mma_decode]
  if (tiles > 0) {
    load_cache_tile_async<D>(k, cache, b, kv, keys.j0, keys.j1, smem);
    load_cache_tile_async<D>(v, cache, b, kv, keys.j0, keys.j1, smem + kTileElements);
  }
  ptx::cp_async_commit();
  for (int jt = 0; jt < tiles; ++jt) {
    const int t0 = keys.j0 + jt * kMmaKeys;
    if (jt + 1 < tiles) {  // chapter 08's eq. (4): the next tile lands while this one computes
      T* next = smem + (jt + 1) % 2 * 2 * kTileElements;
      load_cache_tile_async<D>(k, cache, b, kv, t0 + kMmaKeys, keys.j1, next);
      load_cache_tile_async<D>(v, cache, b, kv, t0 + kMmaKeys, keys.j1, next + kTileElements);
    }
    ptx::cp_async_commit();
    ptx::cp_async_wait<1>();  // all but the newest group: tile jt has landed
    __syncthreads();          // ... for every thread's copies
    const T* k_tile = smem + jt % 2 * 2 * kTileElements;
    const int key0 = warp * kWarpKeys, j_first = t0 + key0;
    if (j_first < keys.j1) {  // the same in all lanes: a warp past the range adds nothing
      float sc[kWarpKeys / 8][4] = {};
      ch08::tile_scores<T, Fragments<D>>(qa, k_tile, key0, sc);
      // Eq. (6): row (r0 + r) % lq of the group against key j_first + c; and the range's end.
      const bool masked = causal || j_first + kWarpKeys > keys.j1;
      // A row's mask is the first key it does not see, from j_first: the range's end, or under
      // the mask its causal end (ch04::causal_end), once per row and step, not per score.
      ch08::softmax_on_scores(sc, st, ch08::ScaledExp{scale}, masked, [&](int r) {
        const int end = causal ? min(keys.j1, ch04::causal_end((r0 + r) % lq, lq, len)) : keys.j1;
        return end - j_first;
      });
      // P~'s A fragment from the score registers, chapter 08's eq. (1).
      const std::uint32_t pa[4] = {
          ptx::pack_pair<T>(sc[0][0], sc[0][1]), ptx::pack_pair<T>(sc[0][2], sc[0][3]),
          ptx::pack_pair<T>(sc[1][0], sc[1][1]), ptx::pack_pair<T>(sc[1][2], sc[1][3])};
      ch08::accumulate_pv<T, Fragments<D>>(pa, k_tile + kTileElements, key0, st);
    }
    __syncthreads();  // tile jt read: its buffer may be refilled
  }
  // [mma_decode]
  ptx::cp_async_wait<0>();  // nothing in flight into the bytes the merge reuses
  __syncthreads();

  // Each warp's state of each row to shared memory: state `warp` of row r at
  // (warp 16 + r) kStateLd: m, l (the 4 lanes' shares summed), then SS. A lane stores its
  // column pairs as float2; rows kStateLd = D + 8 floats apart (8 mod 32 banks) put the 16
  // lanes of a phase (rows g < 4, pairs t) in 16 different bank pairs: no conflict.
  constexpr int kStateLd = D + 8;
  float* states = reinterpret_cast<float*>(smem);
  const int gl = lane / 4, t = lane % 4;
  for (int h = 0; h < 2; ++h) {
    const float l = ch08::group_sum(st.l[h]);
    float* state = states + (warp * kMmaRows + gl + 8 * h) * kStateLd;
    if (t == 0) state[0] = st.m[h], state[1] = l;
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<float2*>(state + 2 + 8 * n + 2 * t) =
          make_float2(st.acc[n][2 * h], st.acc[n][2 * h + 1]);
  }
  write_block_partial(states, kBlockWarps, kMmaRows, rows, D, kStateLd, row0, grid.splits, s,
                      o_partial, lse_partial);
}

static_assert(block_partial_floats(kBlockWarps, kMmaRows, 128 + 8) * sizeof(float) <=
                  2 * 2 * kMmaKeys * 128 * 2,
              "the merge's states fit in the K/V tiles' bytes");

template <typename T, int D>
void launch_mma(const DecodeArgs& a) {
  const DecodeShape& s = a.shape;
  const SplitGrid grid = split_grid(s, a.splits, kMmaRows);
  launch_opted_in<mma_kernel<T, D>>(
      dim3(grid.splits * grid.row_tiles, s.batch * s.hkv), dim3(kWarpSize, kBlockWarps),
      std::size_t(mma_shared_elements<D>()) * sizeof(T), static_cast<const T*>(a.q),
      static_cast<const T*>(a.k), static_cast<const T*>(a.v), cache_rows(a), a.lengths, a.o_partial,
      a.lse_partial, grid, a.scale, a.causal);
}

// The tensor-core kernel's partials over a.splits ranges, then their combine.
void launch_mma_kv(const DecodeArgs& a) {
  with_tile_shape("mma_kv", a.dtype, a.shape.d, {a.q, a.k, a.v}, "q, k and v",
                  [&](auto t, auto d) { launch_mma<decltype(t), decltype(d)::value>(a); });
  Kernels<kThisBackend>::combine(a);
}

}  // namespace

WB_RUNG(DecodeArgs, mma_kv,
        "a block's 16 group rows on tensor cores: mma.sync m16n8k16 over K/V tiles that "
        "cp.async double-buffers (chapter 08's pieces), the 4 warps splitting each tile's "
        "keys and merging by the monoid",
        attention_limits({Dtype::fp16, Dtype::bf16}, 0, {64, 128}, ch04::kMaxBatchHeads,
                         /*causal=*/true, kSplitOutputs),
        &launch_mma_kv, &mma_kv_traffic, block_merge_facts(/*rounds_p=*/true))

}  // namespace wb::ch09
