// Chapter 08's warp-level attention step, in pieces: S~ = Q K^T for some keys of a shared K
// tile into mma.m16n8k16 accumulators, the online softmax on those registers (chapter 06's
// eq. 3, the row statistics by two shuffles; its exponentials scaled or, eq. 5, folded into
// exp2), O += P~ V from a shared V tile, and the epilogue that writes O and the logsumexp;
// the products for one tile of 16 query rows or several (fa2_register_blocked: two, eq. 7),
// their fragments read as the rung says (fast_tiles.cuh); the re-pack of eq. (1) and
// attend_keys, one step of keys put together (chapter 09's tensor-core decode kernel does the
// same with 16 keys per warp). Device code only (this file compiles to
// nothing by itself).
// Test: ctest --test-dir build -R "08_fa2_at_speed|09_flash_decoding" --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include <cstdint>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/05_fa1_subsum/fa1.hpp"
#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "chapters/08_fa2_at_speed/fast_tiles.cuh"
#include "chapters/08_fa2_at_speed/tile_layout.hpp"
#include "common/ptx.cuh"

namespace wb::ch08 {
namespace {  // device code with internal linkage: one copy per backend's translation unit

constexpr float kLog2e = 1.4426950408889634f;  // 1 / ln 2: e^x = 2^(x log2(e))

/// What one warp carries from K/V tile to K/V tile for its 16 rows, in the accumulator layout:
/// lane (g, t) holds rows g and g + 8 (h = 0, 1) and, of each 8 columns, columns 2t and 2t + 1.
template <int D>
struct WarpState {
  float acc[D / 8][4];  // SS, the unnormalized output (chapter 06's eq. 1): column group n
  float m[2];           // running max of rows g, g + 8 (of unscaled scores with FoldedExp2)
  float l[2];           // this lane's share of the running denominators (its columns only)

  /// Nothing seen yet: SS = 0, m = -inf, l = 0.
  __device__ void clear() {
    for (int n = 0; n < D / 8; ++n)
      for (int e = 0; e < 4; ++e) acc[n][e] = 0.f;
    for (int h = 0; h < 2; ++h) m[h] = -INFINITY, l[h] = 0.f;
  }
};

/// The max over the 4 lanes of a row's group (lanes 4g .. 4g + 3).
__device__ __forceinline__ float group_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(kAllLanes, x, 1));
  return fmaxf(x, __shfl_xor_sync(kAllLanes, x, 2));
}
__device__ __forceinline__ float group_sum(float x) {
  x += __shfl_xor_sync(kAllLanes, x, 1);
  return x + __shfl_xor_sync(kAllLanes, x, 2);
}

// ------------------------------------------------------------------------------------------
// S~ = Q K^T and O += P~ V, fragments read by Fragments (fast_tiles.cuh)
// ------------------------------------------------------------------------------------------

/// S~ += Q K^T for keys [key0, key0 + 8 kGroups) of a (.., D) K tile in shared memory, for
/// kRowTiles tiles of 16 query rows: s[mt][n] is the 16 x 8 block of keys key0 + 8n .. + 8 for
/// row tile mt, and q_fragment(mt, ks, a) puts that tile's A fragment of head columns
/// [16 ks, 16 ks + 16) in `a`. Each B fragment of K is read from shared memory once and serves
/// every row tile (eq. 7).
template <typename T, typename Fragments, int kRowTiles, int kGroups, typename QFragment>
__device__ __forceinline__ void row_tiles_scores(QFragment q_fragment, const T* k_tile, int key0,
                                                 float (*s)[kGroups][4]) {
  static_assert(kGroups % 2 == 0, "key groups come in pairs (one ldmatrix .x4)");
  constexpr int D = Fragments::Tile::kColumns;
  const int lane = threadIdx.x;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    std::uint32_t qa[kRowTiles][4];
#pragma unroll
    for (int mt = 0; mt < kRowTiles; ++mt) q_fragment(mt, ks, qa[mt]);
#pragma unroll
    for (int n = 0; n < kGroups; n += 2) {
      std::uint32_t b0[2], b1[2];
      Fragments::load_b_of_k(b0, b1, k_tile, key0 + 8 * n, 16 * ks, lane);
#pragma unroll
      for (int mt = 0; mt < kRowTiles; ++mt) {
        ptx::mma_m16n8k16<T>(s[mt][n], qa[mt], b0, s[mt][n]);
        ptx::mma_m16n8k16<T>(s[mt][n + 1], qa[mt], b1, s[mt][n + 1]);
      }
    }
  }
}

/// row_tiles_scores for one row tile whose A fragments qa the warp holds in registers.
template <typename T, typename Fragments, int kGroups>
__device__ __forceinline__ void tile_scores(
    const std::uint32_t (&qa)[Fragments::Tile::kColumns / 16][4], const T* k_tile, int key0,
    float (&s)[kGroups][4]) {
  row_tiles_scores<T, Fragments, 1>(
      [&](int, int ks, std::uint32_t(&a)[4]) {
        for (int e = 0; e < 4; ++e) a[e] = qa[ks][e];
      },
      k_tile, key0, &s);
}

/// SS += P~ V for keys [key0, key0 + 16) of a (.., D) V tile in shared memory, for kRowTiles
/// tiles of 16 rows: pa[mt], row tile mt's P~ A fragment for those keys (eq. 1), st[mt] its
/// state. Each B fragment of V is read from shared memory once and serves every row tile.
template <typename T, typename Fragments, int kRowTiles, int D>
__device__ __forceinline__ void row_tiles_pv(const std::uint32_t (*pa)[4], const T* v_tile,
                                             int key0, WarpState<D>* st) {
  const int lane = threadIdx.x;
#pragma unroll
  for (int n = 0; n < D / 8; n += 2) {
    std::uint32_t b0[2], b1[2];
    Fragments::load_b_of_v(b0, b1, v_tile, key0, 8 * n, lane);
#pragma unroll
    for (int mt = 0; mt < kRowTiles; ++mt) {
      ptx::mma_m16n8k16<T>(st[mt].acc[n], pa[mt], b0, st[mt].acc[n]);
      ptx::mma_m16n8k16<T>(st[mt].acc[n + 1], pa[mt], b1, st[mt].acc[n + 1]);
    }
  }
}

/// row_tiles_pv for one row tile.
template <typename T, typename Fragments, int D>
__device__ __forceinline__ void accumulate_pv(const std::uint32_t (&pa)[4], const T* v_tile,
                                              int key0, WarpState<D>& st) {
  row_tiles_pv<T, Fragments, 1>(&pa, v_tile, key0, &st);
}

// ------------------------------------------------------------------------------------------
// The online softmax on the registers of S~, chapter 06's eq. (3)
// ------------------------------------------------------------------------------------------

/// Chapter 06's exponentials, as the rungs up to fa2_cp_async take them: each score scaled,
/// then e^{x - m} by expf; the running max m is of scaled scores.
struct ScaledExp {
  float scale;
  __device__ float score(float s) const { return scale * s; }
  __device__ float rescale(float m_old, float m_new) const { return ch05::rescale(m_old, m_new); }
  __device__ float shift(float m_new) const { return ch01::exp_shift(m_new); }
  __device__ float p(float s, float shift) const { return expf(s - shift); }
};

// [folded_exp2]
/// Eq. (5), fa2_scheduled on: the scores stay unscaled and the scale, folded into 2^x with
/// log2(e), makes each P~ one fmaf and one ex2.approx. The running max m is of unscaled scores,
/// the max of the scaled ones only when scale > 0 (the rungs refuse any other).
struct FoldedExp2 {
  float scale_log2;  // scale log2(e): e^{scale x} = 2^{x scale log2(e)}
  __device__ float score(float s) const { return s; }
  /// e^{scale (m_old - m_new)}, 0 when m_old = -inf (nothing summed yet), as ch05::rescale.
  __device__ float rescale(float m_old, float m_new) const {
    return m_old == -INFINITY ? 0.f : ptx::exp2_approx((m_old - m_new) * scale_log2);
  }
  __device__ float shift(float m_new) const { return ch01::exp_shift(m_new) * scale_log2; }
  __device__ float p(float s, float shift) const {
    return ptx::exp2_approx(fmaf(s, scale_log2, -shift));
  }
};
// [folded_exp2]

// [register_softmax]
/// Chapter 06's eq. (3) on a warp's S~ registers, with the exponentials of Exp (ScaledExp or,
/// eq. 5, FoldedExp2): scored, masked where `masked` says so from key key_end(r) on (row r < 16
/// of the warp; keys counted from the block's first, so key c < 8 kGroups is masked iff
/// c >= key_end(r)), the rows' new max by two shuffles, l rescaled, s overwritten by
/// P~ = e^{s - m_new}, and alpha = e^{m - m_new}, by which the caller rescales SS
/// (softmax_on_scores at once; chapter 11's pipelined rung once the product still reading SS
/// is done). s[n][e] is row g + 8 (e / 2), key 8n + 2t + e % 2; m, l: rows g, g + 8.
template <typename Exp, int kGroups, typename KeyEnd>
__device__ __forceinline__ void softmax_step(float (&s)[kGroups][4], float (&m)[2], float (&l)[2],
                                             Exp exp, bool masked, KeyEnd key_end,
                                             float (&alpha)[2]) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  // The lane's two rows' ends less its column offset 2t, once per step: score (n, e) is masked
  // iff 8n + e % 2 >= end[e / 2], one compare with a constant, where evaluating the mask for
  // each score took its row, its key and two compares (the SASS view counts the difference).
  int end[2] = {0, 0};
  if (masked)
    for (int h = 0; h < 2; ++h) end[h] = key_end(g + 8 * h) - 2 * t;
  float m_tile[2] = {-INFINITY, -INFINITY};
  for (int n = 0; n < kGroups; ++n) {
    for (int e = 0; e < 4; ++e) {
      float x = exp.score(s[n][e]);
      if (masked && 8 * n + e % 2 >= end[e / 2]) x = -INFINITY;
      s[n][e] = x;
      m_tile[e / 2] = fmaxf(m_tile[e / 2], x);
    }
  }
  float shift[2];
  for (int h = 0; h < 2; ++h) {
    const float m_new = fmaxf(m[h], group_max(m_tile[h]));  // chapter 06's eq. (3)
    alpha[h] = exp.rescale(m[h], m_new);
    shift[h] = exp.shift(m_new);
    m[h] = m_new;
  }
  float rowsum[2] = {0.f, 0.f};  // of the float P~, before it is rounded for the product
  for (int n = 0; n < kGroups; ++n) {
    for (int e = 0; e < 4; ++e) {
      const float p = exp.p(s[n][e], shift[e / 2]);
      s[n][e] = p;  // P~, in S~'s registers
      rowsum[e / 2] += p;
    }
  }
  for (int h = 0; h < 2; ++h) l[h] = l[h] * alpha[h] + rowsum[h];
}

/// SS e^{m - m_new}: the accumulators of rows g (e = 0, 1) and g + 8 (e = 2, 3) by alpha.
template <int D>
__device__ __forceinline__ void rescale_rows(float (&acc)[D / 8][4], const float (&alpha)[2]) {
  for (int n = 0; n < D / 8; ++n)
    for (int e = 0; e < 4; ++e) acc[n][e] *= alpha[e / 2];
}

/// softmax_step on the warp's state, then SS rescaled at once.
template <typename Exp, int kGroups, int D, typename KeyEnd>
__device__ __forceinline__ void softmax_on_scores(float (&s)[kGroups][4], WarpState<D>& st, Exp exp,
                                                  bool masked, KeyEnd key_end) {
  float alpha[2];
  softmax_step(s, st.m, st.l, exp, masked, key_end, alpha);
  rescale_rows<D>(st.acc, alpha);
}
// [register_softmax]

// ------------------------------------------------------------------------------------------
// P~ back into the products, eq. (1), and one step of keys put together
// ------------------------------------------------------------------------------------------

// [key_mask]
/// Chapter 06's eq. (6) on a block of S~: row row0 + r against key key0 + c is masked when the
/// key is past lk or, under the causal mask, the row does not see it. Either way a row's
/// visible keys are a prefix, so the mask is the first key the row does not see, counted from
/// key0: lk, or under the mask ch04::causal_end, whichever comes first.
struct KeyMask {
  AttentionShape shape;
  bool causal;
  int row0, key0;
  __device__ int operator()(int r) const {
    const int end =
        causal ? min(shape.lk, ch04::causal_end(row0 + r, shape.lq, shape.lk)) : shape.lk;
    return end - key0;
  }
};
// [key_mask]

// [repack]
/// Eq. (1): P~'s A fragment pa of 16 keys, from the accumulators of their two groups of 8, lo
/// (columns 0-7 of A) and hi (columns 8-15), each row pair rounded to T and packed. A's
/// registers (g, 2t..), (g + 8, 2t..), (g, 2t + 8..), (g + 8, 2t + 8..) are exactly the
/// accumulators' (g, 2t..) and (g + 8, 2t..) of lo and then of hi: no lane needs another's.
template <typename T>
__device__ __forceinline__ void pack_p(const float (&lo)[4], const float (&hi)[4],
                                       std::uint32_t (&pa)[4]) {
  // [exercise]
  pa[0] = ptx::pack_pair<T>(lo[0], lo[1]);
  pa[1] = ptx::pack_pair<T>(lo[2], lo[3]);
  pa[2] = ptx::pack_pair<T>(hi[0], hi[1]);
  pa[3] = ptx::pack_pair<T>(hi[2], hi[3]);
  // [exercise]
}
// [repack]

/// Keys [key0, key0 + kStepKeys) of a K/V tile for the warp's 16 rows: S~ = Q K^T into
/// registers, the online softmax on them with the exponentials of Exp, every score compared
/// with `mask` (chapter 06's eqs. 3 and 6), then O += P~ V with P~ re-packed from the same
/// registers (eq. 1): the step of the rungs up to fa2_cp_async. qa: the warp's Q fragments;
/// k_tile, v_tile: (kKeys, D) in shared memory; st: the warp's state.
template <typename T, typename Fragments, int kStepKeys, typename Exp, int D>
__device__ __forceinline__ void attend_keys(const std::uint32_t (&qa)[D / 16][4], const T* k_tile,
                                            const T* v_tile, int key0, Exp exp, KeyMask mask,
                                            WarpState<D>& st) {
  // S~ = Q K^T: s[n] is the 16 x 8 block of keys key0 + [8n, 8n + 8).
  float s[kStepKeys / 8][4] = {};
  tile_scores<T, Fragments>(qa, k_tile, key0, s);
  softmax_on_scores(s, st, exp, /*masked=*/true, mask);
  // + P~ V, 16 keys at a time: keys [16 kk, 16 kk + 16) are the groups 2 kk and 2 kk + 1.
#pragma unroll
  for (int kk = 0; kk < kStepKeys / 16; ++kk) {
    std::uint32_t pa[4] = {};
    pack_p<T>(s[2 * kk], s[2 * kk + 1], pa);
    accumulate_pv<T, Fragments>(pa, v_tile, key0 + 16 * kk, st);
  }
}

// ------------------------------------------------------------------------------------------
// The epilogue: chapter 06's eqs. (4), (5)
// ------------------------------------------------------------------------------------------

/// O = SS / l, rounded once to T, and the logsumexp m + log l for the warp's tile of 16 rows
/// from r0 of head b, with state st (its m the max of scaled scores), in lane (g, t) of the
/// warp. o: (bh, lq, D); lse: (bh, lq); the rows at or past lq are not written.
template <typename T, int D>
__device__ __forceinline__ void store_rows(const WarpState<D>& st, T* o, float* lse, int b, int r0,
                                           int lq, int g, int t) {
  for (int h = 0; h < 2; ++h) {
    const float l = group_sum(st.l[h]);            // the 4 lanes' shares of the row
    const float inv_l = ch01::inverse_or_zero(l);  // 0 for a fully masked row
    const int i = r0 + g + 8 * h;
    if (i >= lq) continue;
    T* o_row = o + (std::size_t(b) * lq + i) * D;
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<std::uint32_t*>(o_row + 8 * n + 2 * t) =
          ptx::pack_pair<T>(st.acc[n][2 * h] * inv_l, st.acc[n][2 * h + 1] * inv_l);
    }
    if (t == 0) lse[std::size_t(b) * lq + i] = ch06::logsumexp(st.m[h], l);
  }
}

}  // namespace
}  // namespace wb::ch08
