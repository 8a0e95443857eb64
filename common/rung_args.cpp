#include "common/rung_args.hpp"

#include <climits>
#include <string>

namespace wb {
namespace {

std::string shape_of(int rows, int cols) {
  return "(" + std::to_string(rows) + ", " + std::to_string(cols) + ")";
}

std::string dtype_refusal(const RungLimits& limits, Dtype t) {
  if (limits.takes(t)) return "";
  return std::string("takes ") + dtypes_string(limits.dtypes) + " elements, not " + to_string(t);
}

std::string row_refusal(const RungLimits& limits, int rows, int cols, Dtype t) {
  if (std::string why = dtype_refusal(limits, t); !why.empty()) return why;
  const int max_cols = limits.max_cols_of(t);
  if (rows < 1 || cols < 1 || cols > max_cols)
    return "rows must be >= 1 and cols in [1, " + std::to_string(max_cols) + "] for " +
           to_string(t) + ", got " + shape_of(rows, cols);
  return "";
}

std::string head_dim_refusal(const RungLimits& limits, int d) {
  if (limits.takes_head_dim(d)) return "";
  std::string takes;
  for (int h : limits.head_dims) takes += (takes.empty() ? "" : " or ") + std::to_string(h);
  if (takes.empty()) takes = "[1, " + std::to_string(limits.max_head_dim) + "]";
  return "d = " + std::to_string(d) + " is not one it takes: d in " + takes;
}

/// The checks attention's forward and backward share: element type, shape, mask.
std::string attention_shape_refusal(const RungLimits& limits, Dtype t, const AttentionShape& s,
                                    bool causal) {
  if (std::string why = dtype_refusal(limits, t); !why.empty()) return why;
  const int max_length = limits.max_length > 0 ? limits.max_length : kMaxLength;
  if (s.lq < 1 || s.lk < 1 || s.lq > max_length || s.lk > max_length)
    return "lq and lk must be in [1, " + std::to_string(max_length) + "], got lq " +
           std::to_string(s.lq) + ", lk " + std::to_string(s.lk);
  if (limits.max_rows > 0 && static_cast<long long>(s.bh) * s.lq > limits.max_rows)
    return "bh x lq = " + std::to_string(static_cast<long long>(s.bh) * s.lq) + " exceeds " +
           std::to_string(limits.max_rows);
  if (s.bh < 1 || s.bh > limits.max_bh)
    return "bh = " + std::to_string(s.bh) + " is outside [1, " + std::to_string(limits.max_bh) +
           "]";
  if (std::string why = head_dim_refusal(limits, s.d); !why.empty()) return why;
  if (causal && !limits.causal) return "takes no causal mask";
  return "";
}

}  // namespace

std::string to_string(const DecodeShape& s) {
  return "batch " + std::to_string(s.batch) + ", hq " + std::to_string(s.hq) + ", hkv " +
         std::to_string(s.hkv) + ", lq " + std::to_string(s.lq) + ", lk " + std::to_string(s.lk) +
         ", d " + std::to_string(s.d);
}

std::string dtypes_string(const std::vector<Dtype>& dtypes, const char* separator) {
  std::string s;
  for (Dtype t : dtypes) s += (s.empty() ? "" : separator) + std::string(to_string(t));
  return s;
}

std::string refusal(const RungLimits& limits, const RowArgs& a) {
  if (std::string why = row_refusal(limits, a.rows, a.cols, a.dtype); !why.empty()) return why;
  if (a.x == nullptr || a.y == nullptr) return "x and y must not be null";
  return "";
}

std::string refusal(const RungLimits& limits, const LayerNormArgs& a) {
  if (std::string why = row_refusal(limits, a.rows, a.cols, a.dtype); !why.empty()) return why;
  // eps > 0 keeps rstd finite on a constant row (variance 0): 1 / sqrt(eps).
  if (!(a.eps > 0.f)) return "eps must be > 0";
  if (a.x == nullptr || a.y == nullptr || a.mean == nullptr || a.rstd == nullptr)
    return "x, y, mean and rstd must not be null";
  return "";
}

std::string refusal(const RungLimits& limits, const AttentionArgs& a) {
  if (std::string why = attention_shape_refusal(limits, a.dtype, a.shape, a.causal); !why.empty())
    return why;
  const unsigned need = limits.outputs;
  if (a.q == nullptr || a.k == nullptr || a.v == nullptr || ((need & kWritesO) && !a.o) ||
      ((need & kWritesLse) && !a.lse) || ((need & kWritesMd) && !a.md) ||
      ((need & kWritesP) && !a.p))
    return "an input or an output it writes is null";
  if (limits.positive_scale && !(a.scale > 0.f))
    return "the softmax scale must be positive (the row max is taken over unscaled scores)";
  return "";
}

namespace {

/// A paged cache's page size and table (DecodeArgs::block_table); "" for a contiguous one.
std::string paging_refusal(const DecodeArgs& a) {
  if (a.block_table == nullptr && a.block_table_host == nullptr) return "";
  if (a.block_table == nullptr || a.block_table_host == nullptr)
    return "the block table and its host copy must be given together";
  if (a.page_keys < kPageKeyMultiple || a.page_keys % kPageKeyMultiple != 0)
    return "page_keys = " + std::to_string(a.page_keys) + " is not a positive multiple of " +
           std::to_string(kPageKeyMultiple);
  const std::size_t entries = std::size_t(a.shape.batch) * std::size_t(pages_per_sequence(a));
  for (std::size_t e = 0; e < entries; ++e)
    if (a.block_table_host[e] < 0 || a.block_table_host[e] >= a.pages)
      return "block_table[" + std::to_string(e) + "] = " + std::to_string(a.block_table_host[e]) +
             " is outside [0, pages = " + std::to_string(a.pages) + ")";
  return "";
}

}  // namespace

std::string refusal(const RungLimits& limits, const DecodeArgs& a) {
  if (std::string why = dtype_refusal(limits, a.dtype); !why.empty()) return why;
  const DecodeShape& s = a.shape;
  if (s.batch < 1 || s.lq < 1 || s.lk < 1 || s.hkv < 1 || s.hq < 1)
    return "batch, hq, hkv, lq and lk must be >= 1";
  if (s.lq > kMaxLength || s.lk > kMaxLength)
    return "lq and lk must be at most " + std::to_string(kMaxLength);
  if (s.hq % s.hkv != 0)
    return "hq = " + std::to_string(s.hq) + " is not a multiple of hkv = " + std::to_string(s.hkv);
  // The grid's batch x hkv dimension (one block per KV head and split).
  if (static_cast<long long>(s.batch) * s.hkv > limits.max_bh)
    return "batch x hkv = " + std::to_string(static_cast<long long>(s.batch) * s.hkv) +
           " exceeds " + std::to_string(limits.max_bh);
  if (std::string why = head_dim_refusal(limits, s.d); !why.empty()) return why;
  if (a.causal && !limits.causal) return "takes no causal mask";
  if (a.splits < 1) return "splits must be >= 1";
  // The query rows (batch hq lq) and the grid's x (splits x the group's rows at most) are ints.
  const long long rows = static_cast<long long>(s.batch) * s.hq * s.lq;
  const long long grid_x = static_cast<long long>(a.splits) * (s.hq / s.hkv) * s.lq;
  if (rows > INT_MAX || grid_x > INT_MAX)
    return "batch x hq x lq = " + std::to_string(rows) +
           " and splits x hq / hkv x lq = " + std::to_string(grid_x) + " must be at most " +
           std::to_string(INT_MAX);
  if ((a.lengths == nullptr) != (a.lengths_host == nullptr))
    return "lengths and their host copy must be given together";
  for (int b = 0; a.lengths_host != nullptr && b < s.batch; ++b)
    if (a.lengths_host[b] < 0 || a.lengths_host[b] > s.lk)
      return "lengths[" + std::to_string(b) + "] = " + std::to_string(a.lengths_host[b]) +
             " is outside [0, lk = " + std::to_string(s.lk) + "]";
  if (std::string why = paging_refusal(a); !why.empty()) return why;
  const unsigned need = limits.outputs;
  if (a.q == nullptr || a.k == nullptr || a.v == nullptr || ((need & kWritesO) && !a.o) ||
      ((need & kWritesLse) && !a.lse) ||
      ((need & kWritesPartials) && (!a.o_partial || !a.lse_partial)))
    return "an input or an output it writes is null";
  return "";
}

std::string refusal(const RungLimits& limits, const AttentionBackwardArgs& a) {
  if (std::string why = attention_shape_refusal(limits, a.dtype, a.shape, a.causal); !why.empty())
    return why;
  if (a.q == nullptr || a.k == nullptr || a.v == nullptr || a.o == nullptr || a.d_o == nullptr ||
      a.lse == nullptr || a.dq == nullptr || a.dk == nullptr || a.dv == nullptr ||
      a.d_row == nullptr || a.dq_accum == nullptr)
    return "an input, an output or a scratch buffer is null";
  return "";
}

std::string describe(const RungLimits& l) {
  std::string s;
  if (l.max_cols > 0) {
    s = l.max_cols == kAnyCols ? std::string("any cols") : "cols <= " + std::to_string(l.max_cols);
    if (l.max_row_bytes > 0)
      s += ", a row of at most " + std::to_string(l.max_row_bytes) + " bytes (fp32: cols <= " +
           std::to_string(l.max_cols_of(Dtype::fp32)) + ")";
  } else if (l.max_bh > 0) {
    std::string dims;
    for (int h : l.head_dims) dims += (dims.empty() ? "" : " or ") + std::to_string(h);
    s = "d " + (dims.empty() ? "<= " + std::to_string(l.max_head_dim) : "= " + dims) +
        ", bh <= " + std::to_string(l.max_bh) + (l.causal ? ", causal or not" : ", no mask");
    if (l.max_length > 0) s += ", lq and lk <= " + std::to_string(l.max_length);
    if (l.max_rows > 0) s += ", bh x lq <= " + std::to_string(l.max_rows);
  }
  return s + "; " + dtypes_string(l.dtypes);
}

}  // namespace wb
