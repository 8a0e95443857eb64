// The arguments of the workbook's three ops, as every rung of their ladders takes them, and
// the check of a call against a rung's limits (common/rung.hpp).
//
// Pointers are device pointers of the ladder's backend. Elements of `dtype` are float for
// fp32 and CUDA's __half / __nv_bfloat16 for fp16 / bf16 (bit patterns on the host,
// common/dtype.hpp); statistics (mean, rstd, logsumexp, (m, d)) are float whatever the type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/attention_inputs.hpp"
#include "common/dtype.hpp"
#include "common/hd.hpp"
#include "common/rung.hpp"

namespace wb {

/// Softmax over each row (chapters 01-03).
struct RowArgs {
  const void* x;  ///< (rows, cols) of dtype, row-major
  void* y;        ///< (rows, cols) of dtype, row-major
  int rows;
  int cols;
  Dtype dtype = Dtype::fp32;
};

/// LayerNorm over each row (chapter 07): y = (x - mean) * rstd * gamma + beta.
struct LayerNormArgs {
  const void* x;      ///< (rows, cols) of dtype, row-major
  const void* gamma;  ///< (cols) of dtype, or nullptr for gamma = 1
  const void* beta;   ///< (cols) of dtype, or nullptr for beta = 0
  void* y;            ///< (rows, cols) of dtype, row-major
  float* mean;        ///< (rows)
  float* rstd;        ///< (rows)
  int rows;
  int cols;
  float eps;  ///< > 0, added to the variance
  Dtype dtype = Dtype::fp32;
};

/// LayerNorm's outputs, as float whatever the element type: what the CPU steps return and what
/// LayerNormBuffers downloads (y widened from dtype, exactly).
struct LayerNormOut {
  std::vector<float> y;     ///< (rows, cols)
  std::vector<float> mean;  ///< (rows)
  std::vector<float> rstd;  ///< (rows)
};

/// Attention's gradients (chapter 10), as float whatever the element type: what the CPU steps
/// return and what AttentionBackwardBuffers downloads (widened from dtype, exactly).
struct BackwardOut {
  std::vector<float> dq;  ///< (bh, lq, d)
  std::vector<float> dk;  ///< (bh, lk, d)
  std::vector<float> dv;  ///< (bh, lk, d)
};
/// Attention (chapters 04-06): O = softmax(scale Q K^T) V per (batch x head), with the
/// bottom-right causal mask when `causal`. A rung writes the outputs its limits name
/// (RungLimits::outputs); the others may be nullptr.
struct AttentionArgs {
  const void* q;  ///< (bh, lq, d) of dtype
  const void* k;  ///< (bh, lk, d) of dtype
  const void* v;  ///< (bh, lk, d) of dtype
  void* o;        ///< (bh, lq, d) of dtype
  float* lse;     ///< (bh, lq): logsumexp of each row, -inf for a fully masked one
  float* md;      ///< (bh, lq) pairs (m, d), laid out as chapter 02's MD (chapters 04, 05)
  float* p;       ///< (bh, lq, lk): the probabilities (chapter 04)
  AttentionShape shape;
  float scale;
  bool causal = false;
  Dtype dtype = Dtype::fp32;
  int* tiles_visited = nullptr;  ///< nullptr, or (bh, Q tiles) K/V tiles each block loaded
};

/// Decoding against a KV cache (chapter 09): Q (batch, hq, lq, d) against K, V
/// (batch, hkv, lk, d), where lk is the cache's capacity per sequence and each sequence uses
/// its first lengths[b] keys. hq is a multiple of hkv: query head h reads KV head h / (hq / hkv)
/// (grouped-query attention; hkv = hq is multi-head attention).
struct DecodeShape {
  int batch;
  int hq;   ///< query heads
  int hkv;  ///< key/value heads, dividing hq
  int lq;   ///< query rows per head (1 when decoding, a few with speculative decoding)
  int lk;   ///< cache slots per sequence and head
  int d;    ///< head dimension

  __host__ __device__ int group() const { return hq / hkv; }  ///< query heads per KV head
  __host__ __device__ std::size_t q_elems() const { return std::size_t(batch) * hq * lq * d; }
  __host__ __device__ std::size_t kv_elems() const { return std::size_t(batch) * hkv * lk * d; }
  /// query rows, all heads
  __host__ __device__ std::size_t rows() const { return std::size_t(batch) * hq * lq; }
};

/// "batch 2, hq 8, hkv 2, lq 1, lk 4097, d 64".
std::string to_string(const DecodeShape& shape);

/// Split-KV decoding (chapter 09): each sequence's keys cut into `splits` ranges, a partial
/// (O_s, logsumexp_s) per range and query row, then merged. A rung writes the outputs its
/// limits name (kWritesO, kWritesLse, kWritesPartials).
struct DecodeArgs {
  const void* q;       ///< (batch, hq, lq, d) of dtype
  const void* k;       ///< (batch, hkv, lk, d) of dtype: the KV cache
  const void* v;       ///< (batch, hkv, lk, d) of dtype
  const int* lengths;  ///< (batch): the keys sequence b uses, in [0, lk]; nullptr: all lk
  /// The same lengths in host memory (nullptr with lengths): what the traffic formulas and a
  /// caller's planning read; the kernels read `lengths`.
  const int* lengths_host;
  void* o;             ///< (batch, hq, lq, d) of dtype
  float* lse;          ///< (batch, hq, lq): logsumexp of each row, -inf when it sees no key
  float* o_partial;    ///< (batch, hq, lq, splits, d): each split's normalized O of each row
  float* lse_partial;  ///< (batch, hq, lq, splits): each split's logsumexp
  DecodeShape shape;
  int splits;  ///< key ranges per sequence, >= 1; the partial buffers hold this many
  float scale;
  bool causal = false;  ///< bottom-right aligned per sequence: row i sees key j <= i + len - lq
  Dtype dtype = Dtype::fp32;
  /// A paged KV cache, the layout serving engines use; null: the contiguous k and v above.
  /// Paged, k and v are (pages, hkv, page_keys, d): a pool of pages, and sequence b's keys
  /// [p page_keys, (p + 1) page_keys) lie in page block_table[b pages_per_sequence + p], with
  /// pages_per_sequence = ceil(lk / page_keys) (chapter 09's eq. 9). A device pointer.
  const int* block_table = nullptr;
  const int* block_table_host = nullptr;  ///< its host copy, which the checks read
  int page_keys = 0;                      ///< keys per page: a multiple of kPageKeyMultiple
  int pages = 0;  ///< pages in the pool; the table's entries lie in [0, pages)
};

/// Page sizes are multiples of a K/V tile of the decoding kernels (32 keys), so that a tile,
/// which starts at a multiple of 32, never straddles two pages.
inline constexpr int kPageKeyMultiple = 32;

/// Pages per sequence of a paged cache of lk slots per sequence: ceil(lk / page_keys).
__host__ __device__ inline int pages_per_sequence(int lk, int page_keys) {
  return lk / page_keys + (lk % page_keys != 0);  // ceil, without lk + page_keys overflowing
}
inline int pages_per_sequence(const DecodeArgs& a) {
  return pages_per_sequence(a.shape.lk, a.page_keys);
}

/// Attention's backward pass (chapter 10): from Q, K, V, the forward's O and logsumexp, and
/// dO = dL/dO, the gradients dQ, dK, dV of the same L. `d_row` and `dq_accum` are float
/// scratch the rungs may use (D_i = rowsum(dO_i O_i); a float dQ that atomics add into).
struct AttentionBackwardArgs {
  const void* q;     ///< (bh, lq, d) of dtype
  const void* k;     ///< (bh, lk, d) of dtype
  const void* v;     ///< (bh, lk, d) of dtype
  const void* o;     ///< (bh, lq, d) of dtype: the forward's output
  const void* d_o;   ///< (bh, lq, d) of dtype: dL/dO
  const float* lse;  ///< (bh, lq): the forward's logsumexp, -inf for a fully masked row
  void* dq;          ///< (bh, lq, d) of dtype
  void* dk;          ///< (bh, lk, d) of dtype
  void* dv;          ///< (bh, lk, d) of dtype
  float* d_row;      ///< (bh, lq) scratch: D
  float* dq_accum;   ///< (bh, lq, d) scratch: dQ in float
  AttentionShape shape;
  float scale;
  bool causal = false;
  Dtype dtype = Dtype::fp32;
  /// (bh, lq, lk) float: the P a standard forward stored, read by the standard backward only
  /// (the FA2 rungs recompute it from lse); null when none was kept.
  const float* p = nullptr;
};

/// Why a rung with `limits` cannot take `a`, or "" when it can.
std::string refusal(const RungLimits& limits, const RowArgs& a);
std::string refusal(const RungLimits& limits, const LayerNormArgs& a);
std::string refusal(const RungLimits& limits, const AttentionArgs& a);
std::string refusal(const RungLimits& limits, const DecodeArgs& a);
std::string refusal(const RungLimits& limits, const AttentionBackwardArgs& a);

/// "fp32, fp16, bf16".
std::string dtypes_string(const std::vector<Dtype>& dtypes, const char* separator = ", ");
/// The limits in a few words: "cols <= 1024; fp32, fp16, bf16".
std::string describe(const RungLimits& limits);

// ------------------------------------------------------------------------------------------
// Traffic formulas (Rung::traffic): the pieces the chapters' ladders state their bytes with
// ------------------------------------------------------------------------------------------

/// The traffic of a row op that reads each element of x `reads` times and writes each element
/// of y `writes` times (Rung::traffic): rows * cols elements of args.dtype.
inline Traffic per_element_traffic(const RowArgs& args, int reads, int writes,
                                   std::string formula) {
  const std::uint64_t bytes = static_cast<std::uint64_t>(args.rows) *
                              static_cast<std::uint64_t>(args.cols) * dtype_bytes(args.dtype);
  return {reads * bytes, writes * bytes, std::move(formula)};
}

/// The traffic of a LayerNorm that reads each element of x `x_reads` times and writes y once;
/// gamma and beta, where given, are read once per row (every row's block or group reads all
/// cols of them: the bytes its lanes ask for, though after the first rows they come from
/// cache); mean and rstd are one float each per row.
inline Traffic layernorm_traffic(const LayerNormArgs& args, int x_reads, std::string formula) {
  const std::uint64_t rows = static_cast<std::uint64_t>(args.rows);
  const std::uint64_t elems =
      rows * static_cast<std::uint64_t>(args.cols) * dtype_bytes(args.dtype);
  const std::uint64_t affine = (args.gamma != nullptr ? 1 : 0) + (args.beta != nullptr ? 1 : 0);
  return {(x_reads + affine) * elems, elems + 2 * rows * sizeof(float), std::move(formula)};
}

/// Bytes moved by one block of an attention kernel (or one head of it).
struct TileTraffic {
  std::uint64_t loaded = 0;
  std::uint64_t stored = 0;
};

/// The bytes of `rows` rows of the head dimension (rows of Q, K, V or O) of args.dtype.
/// `Args`: AttentionArgs or AttentionBackwardArgs.
template <typename Args>
std::uint64_t head_rows_bytes(const Args& args, std::uint64_t rows) {
  return rows * static_cast<std::uint64_t>(args.shape.d) * dtype_bytes(args.dtype);
}

/// The keys in the first `tiles` K/V tiles of `bc` keys: tiles x bc, less what the last tile
/// lacks when it passes lk (the tile loads skip the rows past lk).
inline std::uint64_t keys_in_tiles(int tiles, int bc, int lk) {
  const std::uint64_t keys = static_cast<std::uint64_t>(tiles) * static_cast<std::uint64_t>(bc);
  return keys < static_cast<std::uint64_t>(lk) ? keys : static_cast<std::uint64_t>(lk);
}

/// The traffic of an attention kernel with one block per (Q tile of `br` rows, head):
/// per_tile(i0, rows) states the bytes of the block whose tile holds query rows
/// [i0, i0 + rows) (rows < br for the last, short tile), summed over the ceil(lq / br) tiles of
/// a head and over the bh heads (every head moves the same bytes).
template <typename PerTile>
Traffic per_q_tile_traffic(const AttentionArgs& args, int br, PerTile per_tile,
                           std::string formula) {
  Traffic t{0, 0, std::move(formula)};
  for (int i0 = 0; i0 < args.shape.lq; i0 += br) {
    const int rows = args.shape.lq - i0 < br ? args.shape.lq - i0 : br;
    const TileTraffic tile = per_tile(i0, rows);
    t.loaded += tile.loaded;
    t.stored += tile.stored;
  }
  t.loaded *= static_cast<std::uint64_t>(args.shape.bh);
  t.stored *= static_cast<std::uint64_t>(args.shape.bh);
  return t;
}

}  // namespace wb
