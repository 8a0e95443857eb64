// Chapter 09, rung 3: stream KV. The split kernel with its keys streamed straight into
// registers.
//
// Computes: the partials (O_s, logsumexp_s) of eq. (1) for every split s of every query row,
//           for Q: (batch, hq, lq, d) against the KV cache K, V: (batch, hkv, lk, d) of which
//           sequence b uses its first lengths[b] keys, query head h reading KV head h / g
//           (eq. 5), causal or not (eq. 6); elements fp32, fp16 or bf16, float arithmetic. The
//           combine kernel (combine_kernel.cuh) merges them into O and logsumexp, eq. (4).
// Changed since split_kv: decoding reads every byte of the cache once and does a few flops
//           per byte, so its time is the time to read the cache, and what counts is keeping
//           enough bytes in flight. Here no K/V tile passes through shared memory and no
//           barrier stops the loop: each warp streams its own keys of the block's range,
//           kStreamSteps steps deep, every lane loading kStreamVecs 16-byte vectors of a key's
//           K and V rows per step straight into registers (the key_lanes lanes of a key slot
//           hold one row between them, the warp 32 / key_lanes keys per step). Each key slot
//           keeps its own online (m, l, SS) per row, chapter 06's eq. (3) over kStreamSteps
//           keys at a time; at the end the states of all slots of all warps merge at once
//           through shared memory, eq. (4) on (m, l, SS): chapter 03's monoid, which the
//           combine applies across blocks, applied within one.
// Launch shape: grid (splits x ceil(g lq / R), batch x hkv), block (32, 4), R = stream_rows(g lq)
//           query rows per block (1, 2 or 4, a template parameter: each lane holds its columns
//           of every row's SS in registers, and reads Q from the shared tile). Dynamic shared
//           memory: the Q tile (R x d floats), every slot's state (4 x slots x R x (d + 2)
//           floats), their weights and each row's largest m; fp16, d = 128, R = 4: 4 slots a
//           warp, 34.8 KiB.
// Limits: d a multiple of 8, at most 128 (stream_limits: whole 16-byte vectors per row); q,
//           k and v 16-byte aligned (checked by the launcher); the rest as split_kv.
// Memory traffic: split_traffic with blocks of R rows (flash_decoding.cpp): Q once per
//           block, K and V once per key of its range, a float O row where the split saw a key,
//           logsumexp written; a paged cache adds a read of the table per 16-byte vector of K
//           (the lane that loads it looks the key up, for its K and V vectors alike); then the
//           combine's.
// Test: ctest --test-dir build -R 09_flash_decoding --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include "chapters/04_fused_qk_softmax/attention_tiles.cuh"
#include "chapters/09_flash_decoding/decode_ladder.hpp"
#include "chapters/09_flash_decoding/flash_decoding.hpp"
#include "chapters/09_flash_decoding/state_merge.cuh"
#include "common/tile_shape.cuh"
#include "common/vector_types.cuh"

namespace wb::ch09 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

constexpr int kStreamWarps = 4;
constexpr int kStreamThreads = kStreamWarps * kWarpSize;
/// Key steps whose loads a warp issues before it uses the first: 2 x kStreamVecs x 2 (K and
/// V) x 16 bytes in flight per lane, 4 KiB per warp. A shallower loop waits on one load at a
/// time; registers limit a deeper one.
constexpr int kStreamSteps = 2;
static_assert(ch04::kMaxHeadDim <= kStreamThreads, "the final merge gives every column a thread");

/// The key slots of a warp for head dimension d and elements of T.
template <typename T>
__host__ __device__ int stream_slots(int d) {
  return kWarpSize / stream_key_lanes(d, Vec<T>::kWidth);
}

/// The dynamic shared memory of a block of R rows: the Q tile (R, d), the states (m, l, SS) of
/// every key slot of every warp (warps x slots x R, d + 2), their weights in the merge and
/// each row's largest m.
template <typename T>
std::size_t stream_shared_bytes(int rows, int d) {
  return sizeof(float) * (std::size_t(rows) * d +
                          block_partial_floats(kStreamWarps * stream_slots<T>(d), rows, d + 2));
}

// q: (batch, hq, lq, d) of T; k, v: the cache, rows addressed by `cache` (eq. 9) of T;
// lengths: (batch) or nullptr;
// o_partial (batch, hq, lq, splits, d) and lse_partial (batch, hq, lq, splits) of float.
// Block (blockIdx.x, blockIdx.y): split blockIdx.x / row_tiles, group rows
// [R (blockIdx.x % row_tiles), + R) of KV head blockIdx.y % hkv of sequence blockIdx.y / hkv.
// Lane x of warp y: key slot x / key_lanes; of every key it loads vectors e = 0, 1, the
// columns [W (e key_lanes + x % key_lanes), + W) (each load instruction one contiguous run of
// a row per slot).
template <typename T, int R>
__global__ void __launch_bounds__(kStreamThreads)
    stream_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                  CacheRows cache, const int* __restrict__ lengths, float* __restrict__ o_partial,
                  float* __restrict__ lse_partial, SplitGrid grid, float scale, bool causal) {
  constexpr int W = Vec<T>::kWidth;   // elements of one 16-byte load
  constexpr int C = kStreamVecs * W;  // columns of a lane
  const DecodeShape& shape = grid.shape;
  const int d = shape.d, lq = shape.lq, g = shape.group();
  const int s = blockIdx.x / grid.row_tiles;
  const int r0 = (blockIdx.x % grid.row_tiles) * R;
  const int b = blockIdx.y / shape.hkv, kv = blockIdx.y % shape.hkv;
  const int rows = min(R, g * lq - r0);
  const int warp = threadIdx.y, lane = threadIdx.x, tid = warp * kWarpSize + lane;
  const int key_lanes = stream_key_lanes(d, W);
  const int slots = kWarpSize / key_lanes;  // keys a warp holds per step
  const int slot = lane / key_lanes;
  int col[kStreamVecs];  // the first column of each of the lane's vectors; >= d: none
#pragma unroll
  for (int e = 0; e < kStreamVecs; ++e) col[e] = (e * key_lanes + lane % key_lanes) * W;

  float* q_tile = dynamic_shared<float>();  // (R, d)
  float* states = q_tile + R * d;           // (warps x slots x R, d + 2): m, l, then SS
  __shared__ int length[1];                 // the sequence's keys in use, read once
  if (tid == 0) length[0] = lengths == nullptr ? shape.lk : max(0, min(lengths[b], shape.lk));
  const std::size_t row0 = (std::size_t(b) * shape.hq + std::size_t(kv) * g) * lq + r0;
  for (int e = tid * W; e < rows * d; e += kStreamThreads * W) {  // the Q tile, once
    const Vec<T> x = load_vec(q + row0 * d, e);
#pragma unroll
    for (int w = 0; w < W; ++w) q_tile[e + w] = to_float(x.v[w]);
  }
  __syncthreads();  // the length and the Q tile visible to every thread
  const int len = length[0];
  const KeyRange keys = block_keys(len, grid.splits, s, r0, rows, lq, causal);

  float m[R], l[R], ss[R][C];  // each row's state over the slot's keys, eq. (3) of ch06
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m[r] = -INFINITY, l[r] = 0.f;
#pragma unroll
    for (int c = 0; c < C; ++c) ss[r][c] = 0.f;
  }

  // [stream]
  const int warp_keys = kStreamSteps * slots;  // keys one warp takes per pass
  for (int j0 = keys.j0 + warp * warp_keys; j0 < keys.j1; j0 += kStreamWarps * warp_keys) {
    // Q is read from the tile each pass, not held in registers: R x C fewer registers, more
    // warps resident. (__syncwarp orders shared memory, so the reads are not hoisted.)
    __syncwarp();
    Vec<T> kk[kStreamSteps][kStreamVecs], vv[kStreamSteps][kStreamVecs];
#pragma unroll
    for (int u = 0; u < kStreamSteps; ++u) {  // every load issued before any is used
      const int j = j0 + u * slots + slot;
#pragma unroll
      for (int e = 0; e < kStreamVecs; ++e) {
        if (j < keys.j1 && col[e] < d) {
          const std::size_t row = cache(b, kv, j);  // eq. (9)
          kk[u][e] = load_vec(k + row, col[e]);
          vv[u][e] = load_vec(v + row, col[e]);
        } else {
#pragma unroll
          for (int w = 0; w < W; ++w) kk[u][e].v[w] = vv[u][e].v[w] = from_float<T>(0.f);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r >= rows) break;  // the same for the whole block
      const int i = (r0 + r) % lq;
      float x[kStreamSteps], m_new = m[r];
#pragma unroll
      for (int u = 0; u < kStreamSteps; ++u) {
        float dot = 0.f;  // the lane's columns, then summed over the key's lanes
#pragma unroll
        for (int e = 0; e < kStreamVecs; ++e) {
          if (col[e] >= d) continue;  // an empty vector: no Q columns to read
          const float* q_row = q_tile + r * d + col[e];
#pragma unroll
          for (int w = 0; w < W; ++w) dot = fmaf(q_row[w], to_float(kk[u][e].v[w]), dot);
        }
        for (int lanes = 1; lanes < key_lanes; lanes *= 2)
          dot += __shfl_xor_sync(kAllLanes, dot, lanes);
        const int j = j0 + u * slots + slot;
        const bool seen = j < keys.j1 && (!causal || ch04::causal_visible(i, j, lq, len));
        x[u] = seen ? dot * scale : -INFINITY;
        m_new = fmaxf(m_new, x[u]);
      }
      // chapter 06's eq. (3) over the slot's kStreamSteps keys: one rescale, then each key
      const float alpha = ch05::rescale(m[r], m_new), shift = ch01::exp_shift(m_new);
      l[r] *= alpha;
#pragma unroll
      for (int c = 0; c < C; ++c) ss[r][c] *= alpha;
#pragma unroll
      for (int u = 0; u < kStreamSteps; ++u) {
        const float p = expf(x[u] - shift);
        l[r] += p;
#pragma unroll
        for (int e = 0; e < kStreamVecs; ++e)
#pragma unroll
          for (int w = 0; w < W; ++w)
            ss[r][e * W + w] = fmaf(p, to_float(vv[u][e].v[w]), ss[r][e * W + w]);
      }
      m[r] = m_new;
    }
  }
  // [stream]

  // Every key slot's state to shared memory: state n = (warp, slot) of row r at
  // states[(n R + r)(d + 2)]; the slot's first lane writes m and l, each lane its columns.
  const int n_states = kStreamWarps * slots, n = warp * slots + slot;
#pragma unroll
  for (int r = 0; r < R; ++r) {  // r a constant: the register arrays stay registers
    if (r >= rows) break;
    float* st = states + (n * R + r) * (d + 2);
    if (lane % key_lanes == 0) st[0] = m[r], st[1] = l[r];
#pragma unroll
    for (int e = 0; e < kStreamVecs; ++e)
      if (col[e] < d)
#pragma unroll
        for (int w = 0; w < W; ++w) st[2 + col[e] + w] = ss[r][e * W + w];
  }
  write_block_partial(states, n_states, R, rows, d, d + 2, row0, grid.splits, s, o_partial,
                      lse_partial);
}

/// Calls f(std::integral_constant<int, R>{}) for R = stream_rows(group_rows).
template <typename F>
void with_stream_rows(int group_rows, F&& f) {
  switch (stream_rows(group_rows)) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    default:
      return f(std::integral_constant<int, kStreamMaxRows>{});
  }
}

// The streaming kernel's partials over a.splits ranges, then their combine.
void launch_stream_kv(const DecodeArgs& a) {
  const DecodeShape& s = a.shape;
  require_16_byte_rows("stream_kv", {a.q, a.k, a.v}, "q, k and v");  // whole 16-byte vectors
  with_element_type(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    with_stream_rows(s.group() * s.lq, [&](auto rows) {
      constexpr int R = decltype(rows)::value;
      const SplitGrid grid = split_grid(s, a.splits, R);
      launch<stream_kernel<T, R>>(dim3(grid.splits * grid.row_tiles, s.batch * s.hkv),
                                  dim3(kWarpSize, kStreamWarps), stream_shared_bytes<T>(R, s.d),
                                  static_cast<const T*>(a.q), static_cast<const T*>(a.k),
                                  static_cast<const T*>(a.v), cache_rows(a), a.lengths, a.o_partial,
                                  a.lse_partial, grid, a.scale, a.causal);
    });
  });
  Kernels<kThisBackend>::combine(a);
}

}  // namespace

WB_RUNG(DecodeArgs, stream_kv,
        "each warp streams its own keys from global memory into registers, 16-byte loads "
        "several keys deep, no shared tiles or barriers in the loop; lanes and warps merge "
        "by the same monoid",
        stream_limits(kSplitOutputs), &launch_stream_kv, &stream_kv_traffic,
        block_merge_facts(/*rounds_p=*/false))

// The wave eq. (7) fills: this kernel's residency on the backend's device.
template <>
Wave Kernels<kThisBackend>::stream_wave(const DecodeShape& shape, Dtype dtype) {
  Wave wave{0, 0};
  with_element_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    with_stream_rows(shape.group() * shape.lq, [&](auto rows) {
      constexpr int R = decltype(rows)::value;
      const Residency r =
          residency<stream_kernel<T, R>>(kStreamThreads, stream_shared_bytes<T>(R, shape.d));
      wave = {r.sms, r.blocks_per_sm};
    });
  });
  return wave;
}

}  // namespace wb::ch09
