// Device buffers for one call of each op, and the Args over them (common/rung_args.hpp): what
// the programs' reports, their --bench and the tests allocate before running a ladder.
// Host values are floats; a buffer of fp16 or bf16 elements holds them rounded to nearest even
// (encode_elements), and outputs come back widened to float, exactly.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <vector>

#include "common/attention_inputs.hpp"
#include "common/buffer.hpp"
#include "common/dtype.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"

namespace wb {

/// `host` as `dtype` elements in a new device buffer of `backend`.
inline DeviceBuffer<unsigned char> upload_elements(Backend backend, const std::vector<float>& host,
                                                   Dtype dtype) {
  return DeviceBuffer<unsigned char>(backend, encode_elements(host, dtype));
}

/// A device buffer of `count` elements of `dtype`, widened to float.
inline std::vector<float> download_elements(const DeviceBuffer<unsigned char>& buffer,
                                            Dtype dtype) {
  const std::vector<unsigned char> bytes = buffer.download();
  return decode_elements(bytes.data(), bytes.size() / dtype_bytes(dtype), dtype);
}

/// Softmax: x uploaded, y allocated, `args` over them.
struct RowBuffers {
  DeviceBuffer<unsigned char> x, y;
  RowArgs args;
  RowBuffers(Backend backend, const std::vector<float>& x_host, int rows, int cols, Dtype dtype)
      : x(upload_elements(backend, x_host, dtype)), y(backend, x.size()),
        args{x.data(), y.data(), rows, cols, dtype} {}
  std::vector<float> download_y() const { return download_elements(y, args.dtype); }
  void poison_outputs() { y.poison(); }  ///< see AttentionBackwardBuffers::poison_outputs
};

/// LayerNorm: x, gamma and beta uploaded (empty gamma or beta: nullptr, the identity), y,
/// mean and rstd allocated, `args` over them.
struct LayerNormBuffers {
  DeviceBuffer<unsigned char> x, gamma, beta, y;
  DeviceBuffer<float> mean, rstd;
  LayerNormArgs args;
  LayerNormBuffers(Backend backend, const std::vector<float>& x_host,
                   const std::vector<float>& gamma_host, const std::vector<float>& beta_host,
                   int rows, int cols, float eps, Dtype dtype)
      : x(upload_elements(backend, x_host, dtype)),
        gamma(upload_elements(backend, gamma_host, dtype)),
        beta(upload_elements(backend, beta_host, dtype)), y(backend, x.size()),
        mean(backend, static_cast<std::size_t>(rows)), rstd(backend, static_cast<std::size_t>(rows)),
        args{x.data(),  gamma_host.empty() ? nullptr : gamma.data(),
             beta_host.empty() ? nullptr : beta.data(),
             y.data(),  mean.data(), rstd.data(), rows, cols, eps, dtype} {}
  LayerNormOut download() const {
    return {download_elements(y, args.dtype), mean.download(), rstd.download()};
  }
  void poison_outputs() {  ///< see AttentionBackwardBuffers::poison_outputs
    y.poison();
    mean.poison();
    rstd.poison();
  }
};

/// Attention's outputs, widened to float; those a rung does not write stay empty.
struct AttentionOut {
  std::vector<float> o, lse, md, p;
};

/// Attention: Q, K, V uploaded as `dtype`, the outputs `outputs` (AttentionOutput bits: the
/// union of what the ladder's rungs write) allocated, `args` over them.
struct AttentionBuffers {
  DeviceBuffer<unsigned char> q, k, v, o;
  DeviceBuffer<float> lse, md, p;
  AttentionArgs args;
  AttentionBuffers(Backend backend, const AttentionInputs& in, AttentionShape shape, float scale,
                   bool causal, Dtype dtype, unsigned outputs)
      : q(upload_elements(backend, in.q, dtype)), k(upload_elements(backend, in.k, dtype)),
        v(upload_elements(backend, in.v, dtype)),
        o(backend, (outputs & kWritesO) ? shape.q_elems() * dtype_bytes(dtype) : 0),
        lse(backend, (outputs & kWritesLse) ? shape.rows() : 0),
        md(backend, (outputs & kWritesMd) ? 2 * shape.rows() : 0),
        p(backend, (outputs & kWritesP) ? shape.p_elems() : 0),
        args{q.data(), k.data(), v.data(), o.size() ? o.data() : nullptr,
             lse.size() ? lse.data() : nullptr, md.size() ? md.data() : nullptr,
             p.size() ? p.data() : nullptr, shape, scale, causal, dtype} {}
  /// What `rung_outputs` (a rung's RungLimits::outputs) wrote.
  AttentionOut download(unsigned rung_outputs) const {
    AttentionOut out;
    if (rung_outputs & kWritesO) out.o = download_elements(o, args.dtype);
    if (rung_outputs & kWritesLse) out.lse = lse.download();
    if (rung_outputs & kWritesMd) out.md = md.download();
    if (rung_outputs & kWritesP) out.p = p.download();
    return out;
  }
  void poison_outputs() {  ///< see AttentionBackwardBuffers::poison_outputs
    o.poison();
    for (DeviceBuffer<float>* b : {&lse, &md, &p}) b->poison();
  }
};

/// Decoding's outputs, widened to float: O and logsumexp (the partials stay on the device).
struct DecodeOut {
  std::vector<float> o, lse;
};

/// Decoding (chapter 09): Q, K, V uploaded as `dtype`, the lengths (empty: all lk) as ints,
/// O, logsumexp and the partial buffers of `splits` splits allocated, `args` over them.
struct DecodeBuffers {
  DeviceBuffer<unsigned char> q, k, v, o;
  std::vector<int> lengths_host;
  DeviceBuffer<int> lengths;
  DeviceBuffer<float> lse, o_partial, lse_partial;
  DecodeArgs args;
  DecodeBuffers(Backend backend, const AttentionInputs& in, const std::vector<int>& lengths_host_,
                DecodeShape shape, int splits, float scale, bool causal, Dtype dtype)
      : q(upload_elements(backend, in.q, dtype)),
        k(upload_elements(backend, in.k, dtype)),
        v(upload_elements(backend, in.v, dtype)),
        o(backend, shape.q_elems() * dtype_bytes(dtype)),
        lengths_host(lengths_host_),
        lengths(backend, lengths_host_),
        lse(backend, shape.rows()),
        o_partial(backend, std::size_t(splits) * shape.q_elems()),
        lse_partial(backend, std::size_t(splits) * shape.rows()),
        args{q.data(),
             k.data(),
             v.data(),
             lengths_host_.empty() ? nullptr : lengths.data(),
             lengths_host_.empty() ? nullptr : lengths_host.data(),
             o.data(),
             lse.data(),
             o_partial.data(),
             lse_partial.data(),
             shape,
             splits,
             scale,
             causal,
             dtype} {}
  DecodeOut download() const { return {download_elements(o, args.dtype), lse.download()}; }
  void poison_outputs() {  ///< the partials too; see AttentionBackwardBuffers::poison_outputs
    o.poison();
    for (DeviceBuffer<float>* b : {&lse, &o_partial, &lse_partial}) b->poison();
  }
};

/// The forward's results and dO that the backward reads (chapter 10), float on the host.
struct BackwardInputs {
  AttentionInputs qkv;
  std::vector<float> o;    ///< (bh, lq, d): the forward's O
  std::vector<float> lse;  ///< (bh, lq): the forward's logsumexp
  std::vector<float> d_o;  ///< (bh, lq, d): dL/dO
  std::vector<float> p;    ///< (bh, lq, lk): the P a standard forward stores; empty: not kept
};

/// Attention's backward (chapter 10): Q, K, V, O, dO uploaded as `dtype`, lse and P (when kept)
/// as floats, the gradients and the float scratch (D, dQ) allocated, `args` over them.
struct AttentionBackwardBuffers {
  DeviceBuffer<unsigned char> q, k, v, o, d_o, dq, dk, dv;
  DeviceBuffer<float> lse, d_row, dq_accum, p;
  AttentionBackwardArgs args;
  AttentionBackwardBuffers(Backend backend, const BackwardInputs& in, AttentionShape shape,
                           float scale, bool causal, Dtype dtype)
      : q(upload_elements(backend, in.qkv.q, dtype)),
        k(upload_elements(backend, in.qkv.k, dtype)),
        v(upload_elements(backend, in.qkv.v, dtype)),
        o(upload_elements(backend, in.o, dtype)),
        d_o(upload_elements(backend, in.d_o, dtype)),
        dq(backend, shape.q_elems() * dtype_bytes(dtype)),
        dk(backend, shape.kv_elems() * dtype_bytes(dtype)),
        dv(backend, shape.kv_elems() * dtype_bytes(dtype)),
        lse(backend, in.lse),
        d_row(backend, shape.rows()),
        dq_accum(backend, shape.q_elems()),
        p(backend, in.p),
        args{q.data(),   k.data(),     v.data(),        o.data(),
             d_o.data(), lse.data(),   dq.data(),       dk.data(),
             dv.data(),  d_row.data(), dq_accum.data(), shape,
             scale,      causal,       dtype,           in.p.empty() ? nullptr : p.data()} {}
  BackwardOut download() const {
    return {download_elements(dq, args.dtype), download_elements(dk, args.dtype),
            download_elements(dv, args.dtype)};
  }
  /// The gradients and the rungs' scratch back to the 0xff bytes of new buffers (DeviceBuffer::
  /// poison): between two rungs on the same buffers, so that what one rung leaves unwritten
  /// reads as NaN, not as the rung before's right answer.
  void poison_outputs() {
    for (DeviceBuffer<unsigned char>* b : {&dq, &dk, &dv}) b->poison();
    for (DeviceBuffer<float>* b : {&d_row, &dq_accum}) b->poison();
  }
};

/// The union of the outputs of a ladder's rungs.
template <typename Args>
unsigned ladder_outputs(const Ladder<Args>& ladder) {
  unsigned outputs = 0;
  for (const Rung<Args>& r : ladder) outputs |= r.limits.outputs;
  return outputs;
}

}  // namespace wb
