// The workbook's attention as PyTorch ops (TORCH_LIBRARY namespace flash_workbook), for the
// Python package python/flash_workbook, which adds autograd and the keyword interface:
//
//   flash_workbook::attention_forward(q, k, v, causal, scale, rung, backend, backward_rung)
//       -> (o, lse); backward_rung: the one its autograd will run, checked before the forward
//   flash_workbook::attention_backward(d_o, q, k, v, o, lse, causal, scale, rung, backend)
//       -> (dq, dk, dv)
//   flash_workbook::decode(q, k, v, lengths?, block_table?, causal, scale, splits, rung, backend)
//       -> (o, lse): a few query rows against a KV cache, contiguous or paged (chapter 09)
//   flash_workbook::softmax(x, rung, backend) -> y            over the last dimension (ch. 01-03)
//   flash_workbook::layer_norm(x, weight?, bias?, eps, rung, backend) -> (y, mean, rstd)
//                                                                over the last dimension (ch. 07)
//   flash_workbook::rungs(op) -> str[]: "name\tchange\tlimits\trequires" of every rung the op
//       can run
//
// q, k, v, o, d_o: (B, H, L, D) contiguous, the layout of F.scaled_dot_product_attention, with
// as many heads in k and v as in q (the package repeats the KV heads of grouped-query
// attention); fp32, fp16 or bf16; lse: (B, H, Lq) float. The causal mask is the workbook's,
// aligned bottom-right (row i sees key j <= i + Lk - Lq), which is SDPA's is_causal when
// Lq = Lk.
//
// Where an op runs: `backend` "cpu" runs the chapter's CPU step (chapter 06's tiled FA2 for the
// forward, chapter 10's for the backward) on the inputs' values in float; "sim" runs `rung` (a
// kernel of chapters 06, 08 and 11 forward, 10 backward) in the workbook's CUDA simulator on
// the CPU; "cuda" runs it on the GPU, the tensors' device. `rung` "" picks the ladder's last
// rung that takes the dtype, head dimension and device. Every refusal (a bad shape, dtype,
// device, rung or backend, a rung's limit) is one ValueError naming the limit, before anything
// runs; the inputs are never written.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/03_block_merge/block_merge.hpp"
#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "chapters/07_welford_layernorm/layernorm_ladder.hpp"
#include "chapters/08_fa2_at_speed/fa2_at_speed.hpp"
#include "chapters/09_flash_decoding/decode_ladder.hpp"
#include "chapters/09_flash_decoding/flash_decoding.hpp"
#include "chapters/10_fa2_backward/fa2_backward.hpp"
#include "chapters/11_fa3_hopper/fa3_hopper.hpp"
#include "common/backend.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"

namespace {

using namespace wb;

Dtype dtype_of(const at::Tensor& t, const char* name) {
  switch (t.scalar_type()) {
    case at::kFloat: return Dtype::fp32;
    case at::kHalf: return Dtype::fp16;
    case at::kBFloat16: return Dtype::bf16;
    default:
      TORCH_CHECK_VALUE(false, "flash_workbook: ", name, " is ", t.scalar_type(),
                        ": the ops take float32, float16 or bfloat16");
  }
  return Dtype::fp32;
}

/// Checks that `t` is a contiguous rank-4 tensor of `dtype` on `device`, named `name`.
void check_operand(const at::Tensor& t, const char* name, at::ScalarType dtype,
                   const at::Device& device) {
  TORCH_CHECK_VALUE(t.dim() == 4, "flash_workbook: ", name, " has ", t.dim(),
                    " dimensions: the ops take (batch, heads, length, head_dim)");
  TORCH_CHECK_VALUE(t.scalar_type() == dtype, "flash_workbook: ", name, " is ", t.scalar_type(),
                    " and q is ", dtype, ": q, k and v have one dtype");
  TORCH_CHECK_VALUE(t.device() == device, "flash_workbook: ", name, " is on ", t.device(),
                    " and q on ", device, ": the tensors share a device");
  TORCH_CHECK_VALUE(t.is_contiguous(), "flash_workbook: ", name,
                    " is not contiguous: the kernels read (batch, heads, length, head_dim) "
                    "row-major (call .contiguous())");
}

/// The shape of (B, H, Lq, D) q against (B, H, Lk, D) k and v, after the checks above.
AttentionShape attention_shape(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  check_operand(q, "q", q.scalar_type(), q.device());
  check_operand(k, "k", q.scalar_type(), q.device());
  check_operand(v, "v", q.scalar_type(), q.device());
  TORCH_CHECK_VALUE(k.sizes() == v.sizes(), "flash_workbook: k is ", k.sizes(), " and v ",
                    v.sizes(), ": they must match");
  TORCH_CHECK_VALUE(q.size(0) == k.size(0) && q.size(1) == k.size(1) && q.size(3) == k.size(3),
                    "flash_workbook: q is ", q.sizes(), " and k ", k.sizes(),
                    ": batch, heads and head_dim must match");
  TORCH_CHECK_VALUE(q.size(2) >= 1 && k.size(2) >= 1 && q.size(3) >= 1 && q.size(0) * q.size(1) >= 1,
                    "flash_workbook: empty q or k ", q.sizes(), ", ", k.sizes());
  const std::int64_t bh = q.size(0) * q.size(1);
  TORCH_CHECK_VALUE(bh <= INT32_MAX && q.size(2) <= kMaxLength && k.size(2) <= kMaxLength &&
                        q.size(3) <= INT32_MAX,
                    "flash_workbook: ", q.sizes(), " and ", k.sizes(),
                    " pass the int lengths the kernels index");
  return {int(bh), int(q.size(2)), int(k.size(2)), int(q.size(3))};
}

/// `backend` checked against the tensors' device: "cpu" or "sim" for CPU tensors, "cuda" for
/// CUDA ones; "" picks "cpu" or "cuda" by the device.
Backend backend_of(const std::string& backend, const at::Device& device) {
  const bool on_cuda = device.is_cuda();
  const std::string b = backend.empty() ? (on_cuda ? "cuda" : "cpu") : backend;
  if (b == "cpu" || b == "sim") {
    TORCH_CHECK_VALUE(!on_cuda, "flash_workbook: backend '", b,
                      "' runs on the CPU and the tensors are on ", device,
                      " (backend 'cuda', or move them with .cpu())");
    return b == "cpu" ? Backend::cpu : Backend::sim;
  }
  if (b == "cuda") {
    TORCH_CHECK_VALUE(on_cuda, "flash_workbook: backend 'cuda' needs CUDA tensors; these are on ",
                      device, " (backend 'cpu' or 'sim' runs CPU tensors)");
    TORCH_CHECK_VALUE(kCudaCompiled && cuda_available(),
                      "flash_workbook: backend 'cuda': ", cuda_device_description());
    return Backend::cuda;
  }
  TORCH_CHECK_VALUE(false, "flash_workbook: backend '", backend,
                    "' is not one of 'cpu', 'sim', 'cuda' (or '' for the tensors' device)");
  return Backend::cpu;
}

// ------------------------------------------------------------------------------------------
// The ladders
// ------------------------------------------------------------------------------------------

/// Every forward attention rung on kernel backend B, ladder order: chapter 06's, 08's, 11's
/// (chapter 11's first rung is chapter 08's last, listed once).
template <Backend B>
std::vector<Rung<AttentionArgs>> forward_rungs() {
  std::vector<Rung<AttentionArgs>> all;
  const auto add = [&](const Ladder<AttentionArgs>& ladder) {
    for (const Rung<AttentionArgs>& r : ladder) {
      bool seen = false;
      for (const Rung<AttentionArgs>& s : all) seen = seen || std::string(s.name) == r.name;
      if (!seen) all.push_back(r);
    }
  };
  add(ch06::kernel_ladder<B>());
  add(ch08::kernel_ladder<B>());
  add(ch11::kernel_ladder<B>());
  return all;
}

template <Backend B>
std::vector<Rung<AttentionBackwardArgs>> backward_rungs() {
  return ch10::kernel_ladder<B>();
}

/// Every softmax rung: chapter 01's three-pass ladder, then chapter 03's (its last, the
/// dispatcher, the default). Chapter 02's rungs take fp32 rows only and are chapter 03's
/// predecessors; they are left out of the op.
template <Backend B>
std::vector<Rung<RowArgs>> softmax_rungs() {
  std::vector<Rung<RowArgs>> all = ch01::kernel_ladder<B>();
  for (const Rung<RowArgs>& r : ch03::kernel_ladder<B>()) all.push_back(r);
  return all;
}

template <Backend B>
std::vector<Rung<DecodeArgs>> decode_rungs() {
  return ch09::kernel_ladder<B>();
}

template <Backend B>
std::vector<Rung<LayerNormArgs>> layer_norm_rungs() {
  return ch07::kernel_ladder<B>();
}

/// Whether `rung` takes args' dtype, head dimension and shape (its limits), reads nothing the
/// ops do not keep (the P a standard forward stored), and on the GPU whether this device runs
/// it (an sm_90a rung needs an H100 or H200).
template <typename Args>
bool takes(const Rung<Args>& rung, const Args& args, Backend backend) {
  if (!why_refused(rung, args).empty() || rung.facts.reads_stored_p) return false;
  return backend != Backend::cuda || !rung.facts.needs_sm90a || why_no_sm90a().empty();
}

/// What a refusal names of the arguments besides their dtype.
std::string what(const AttentionArgs& a) { return "at head_dim " + std::to_string(a.shape.d); }
std::string what(const AttentionBackwardArgs& a) {
  return "at head_dim " + std::to_string(a.shape.d);
}
std::string what(const DecodeArgs& a) { return "at head_dim " + std::to_string(a.shape.d); }
std::string what(const RowArgs& a) { return "rows of " + std::to_string(a.cols); }
std::string what(const LayerNormArgs& a) { return "rows of " + std::to_string(a.cols); }

/// The rung of `rungs` named `name`; one ValueError listing their names when none is.
template <typename Args>
const Rung<Args>& named_rung(const std::vector<Rung<Args>>& rungs, const std::string& name,
                             const char* op) {
  for (const Rung<Args>& r : rungs)
    if (name == r.name) return r;
  std::string names;
  for (const Rung<Args>& r : rungs) names += std::string(names.empty() ? "" : ", ") + r.name;
  TORCH_CHECK_VALUE(false, "flash_workbook: no ", op, " rung is named '", name, "' (", names, ")");
  return rungs.front();
}

/// The rung named `name` of `rungs`, or with "" the last that takes `args`; one ValueError when
/// there is none, or the named one refuses `args` (its refusal, verbatim).
template <typename Args>
const Rung<Args>& pick_rung(const std::vector<Rung<Args>>& rungs, const std::string& name,
                            const Args& args, Backend backend, const char* op) {
  if (name.empty()) {
    for (auto r = rungs.rbegin(); r != rungs.rend(); ++r)
      if (takes(*r, args, backend)) return *r;
    TORCH_CHECK_VALUE(false, "flash_workbook: no ", op, " rung takes ", to_string(args.dtype),
                      " ", what(args), " here (flash_workbook.rungs('", op,
                      "') lists their limits)");
  }
  const Rung<Args>& r = named_rung(rungs, name, op);
  const std::string why = why_refused(r, args);
  TORCH_CHECK_VALUE(why.empty(), "flash_workbook: rung ", r.name, ": ", why);
  return r;
}

/// The ops' forward keeps no P: a backward rung that reads one is refused.
void refuse_stored_p(const Rung<AttentionBackwardArgs>& r) {
  TORCH_CHECK_VALUE(!r.facts.reads_stored_p, "flash_workbook: ", r.name,
                    " reads the P a standard forward kept; the ops' forward keeps none (pick "
                    "an FA2 backward rung)");
}

/// Backend "cpu" runs a chapter's CPU step (`step`), which has no rungs: a rung named there is
/// refused.
void refuse_rung_on_cpu(const std::string& rung, const char* step = "the CPU step") {
  TORCH_CHECK_VALUE(rung.empty(), "flash_workbook: backend 'cpu' runs ", step, ", not rung '",
                    rung, "' (backend 'sim' runs a rung on the CPU)");
}

/// Runs `launch` as the kernel backend b's code, turning a kernel's std::exception into one
/// RuntimeError with its message.
template <typename F>
void run_guarded(F&& launch) {
  try {
    launch();
  } catch (const c10::Error&) {
    throw;
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, "flash_workbook: ", e.what());
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "flash_workbook: ", e.what());
  }
}

/// A float copy of a tensor's values, as the CPU steps take them.
std::vector<float> floats(const at::Tensor& t) {
  const at::Tensor f = t.to(at::kFloat).contiguous();
  return std::vector<float>(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
}

at::Tensor tensor_of(const std::vector<float>& values, at::IntArrayRef sizes, at::ScalarType type) {
  return at::from_blob(const_cast<float*>(values.data()), sizes, at::kFloat).to(type).clone();
}

// ------------------------------------------------------------------------------------------
// The ops
// ------------------------------------------------------------------------------------------

/// The backward rung a forward's autograd will run, checked with the forward: an unknown name,
/// or a rung the ops' backward cannot run, fails before anything runs, not after the forward.
/// (Its limits are checked by the backward, on the arguments it gets.)
void check_backward_rung(const std::string& name, Backend backend) {
  if (name.empty()) return;
  if (backend == Backend::cpu) refuse_rung_on_cpu(name, "chapter 10's CPU step");
  with_kernel_backend(backend, [&](auto b) {
    constexpr Backend B = decltype(b)::value;
    refuse_stored_p(named_rung(backward_rungs<B>(), name, "attention_backward"));
  });
}

std::tuple<at::Tensor, at::Tensor> attention_forward(const at::Tensor& q, const at::Tensor& k,
                                                     const at::Tensor& v, bool causal,
                                                     double scale, const std::string& rung,
                                                     const std::string& backend_name,
                                                     const std::string& backward_rung) {
  const AttentionShape shape = attention_shape(q, k, v);
  const Dtype dtype = dtype_of(q, "q");
  const Backend backend = backend_of(backend_name, q.device());
  TORCH_CHECK_VALUE(scale > 0.0, "flash_workbook: scale = ", scale,
                    ": the softmax scale must be positive");
  check_backward_rung(backward_rung, backend);
  at::Tensor o = at::empty_like(q);
  at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
  if (backend == Backend::cpu) {
    refuse_rung_on_cpu(rung);
    const AttentionInputs in{floats(q), floats(k), floats(v)};
    const ch06::Fa2Result r =
        ch06::attention_fa2(in, shape, {float(scale), causal, ch08::kKeys, ch08::kKeys});
    o.copy_(tensor_of(r.o, q.sizes(), q.scalar_type()));
    lse.copy_(tensor_of(r.lse, lse.sizes(), at::kFloat));
    return {o, lse};
  }
  AttentionArgs args{q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr<float>(),
                     nullptr, nullptr, shape, float(scale), causal, dtype};
  with_kernel_backend(backend, [&](auto b) {
    constexpr Backend B = decltype(b)::value;
    const std::vector<Rung<AttentionArgs>> rungs = forward_rungs<B>();
    const Rung<AttentionArgs>& chosen = pick_rung(rungs, rung, args, backend, "attention");
    TORCH_CHECK_VALUE((chosen.limits.outputs & ~(kWritesO | kWritesLse)) == 0,
                      "flash_workbook: rung ", chosen.name, " writes more than O and lse");
    run_guarded([&] { run_rung(chosen, args); });
  });
  return {o, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward(
    const at::Tensor& d_o, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& o, const at::Tensor& lse, bool causal, double scale, const std::string& rung,
    const std::string& backend_name) {
  const AttentionShape shape = attention_shape(q, k, v);
  check_operand(o, "o", q.scalar_type(), q.device());
  check_operand(d_o, "d_o", q.scalar_type(), q.device());
  TORCH_CHECK_VALUE(o.sizes() == q.sizes() && d_o.sizes() == q.sizes(),
                    "flash_workbook: o and d_o must have q's shape ", q.sizes());
  TORCH_CHECK_VALUE(lse.scalar_type() == at::kFloat && lse.dim() == 3 && lse.is_contiguous() &&
                        lse.size(0) == q.size(0) && lse.size(1) == q.size(1) &&
                        lse.size(2) == q.size(2) && lse.device() == q.device(),
                    "flash_workbook: lse must be the forward's (batch, heads, Lq) float32 logsumexp");
  const Dtype dtype = dtype_of(q, "q");
  const Backend backend = backend_of(backend_name, q.device());
  TORCH_CHECK_VALUE(scale > 0.0, "flash_workbook: scale = ", scale,
                    ": the softmax scale must be positive");
  at::Tensor dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v);
  if (backend == Backend::cpu) {
    refuse_rung_on_cpu(rung);
    const AttentionInputs in{floats(q), floats(k), floats(v)};
    const std::vector<float> o_f = floats(o), do_f = floats(d_o), lse_f = floats(lse);
    std::vector<float> dq_f(shape.q_elems()), dk_f(shape.kv_elems()), dv_f(shape.kv_elems());
    ch10::attention_backward_fa2(in, o_f.data(), lse_f.data(), do_f.data(), shape,
                                 {float(scale), causal, ch10::kKernelRows, ch10::kKernelKeys},
                                 dq_f.data(), dk_f.data(), dv_f.data());
    dq.copy_(tensor_of(dq_f, q.sizes(), q.scalar_type()));
    dk.copy_(tensor_of(dk_f, k.sizes(), k.scalar_type()));
    dv.copy_(tensor_of(dv_f, v.sizes(), v.scalar_type()));
    return {dq, dk, dv};
  }
  at::Tensor d_row = at::empty({q.size(0) * q.size(1) * q.size(2)}, lse.options());
  at::Tensor dq_accum = at::empty({std::int64_t(shape.q_elems())}, lse.options());
  AttentionBackwardArgs args{q.data_ptr(),          k.data_ptr(),   v.data_ptr(),
                             o.data_ptr(),          d_o.data_ptr(), lse.data_ptr<float>(),
                             dq.data_ptr(),         dk.data_ptr(),  dv.data_ptr(),
                             d_row.data_ptr<float>(), dq_accum.data_ptr<float>(), shape,
                             float(scale),          causal,         dtype};
  with_kernel_backend(backend, [&](auto b) {
    constexpr Backend B = decltype(b)::value;
    const std::vector<Rung<AttentionBackwardArgs>> rungs = backward_rungs<B>();
    const Rung<AttentionBackwardArgs>& chosen =
        pick_rung(rungs, rung, args, backend, "attention_backward");
    refuse_stored_p(chosen);
    run_guarded([&] { run_rung(chosen, args); });
  });
  return {dq, dk, dv};
}

/// An int32 tensor's values on the host (lengths, a block table), after its checks.
std::vector<int> host_ints(const at::Tensor& t, const char* name, at::IntArrayRef sizes,
                           const at::Device& device) {
  TORCH_CHECK_VALUE(t.scalar_type() == at::kInt && t.sizes() == sizes && t.is_contiguous() &&
                        t.device() == device,
                    "flash_workbook: ", name, " must be a contiguous int32 tensor of shape ",
                    sizes, " on ", device, " (it is ", t.scalar_type(), " ", t.sizes(), " on ",
                    t.device(), ")");
  const at::Tensor h = t.cpu();
  return std::vector<int>(h.data_ptr<int>(), h.data_ptr<int>() + h.numel());
}

std::tuple<at::Tensor, at::Tensor> decode(const at::Tensor& q, const at::Tensor& k,
                                          const at::Tensor& v,
                                          const c10::optional<at::Tensor>& lengths,
                                          const c10::optional<at::Tensor>& block_table,
                                          bool causal, double scale, int64_t splits,
                                          const std::string& rung,
                                          const std::string& backend_name) {
  check_operand(q, "q", q.scalar_type(), q.device());
  check_operand(k, "k_cache", q.scalar_type(), q.device());
  check_operand(v, "v_cache", q.scalar_type(), q.device());
  const Dtype dtype = dtype_of(q, "q");
  const Backend backend = backend_of(backend_name, q.device());
  TORCH_CHECK_VALUE(k.sizes() == v.sizes(), "flash_workbook: k_cache is ", k.sizes(),
                    " and v_cache ", v.sizes(), ": they must match");
  TORCH_CHECK_VALUE(scale > 0.0, "flash_workbook: scale = ", scale,
                    ": the softmax scale must be positive");
  const std::int64_t batch = q.size(0), hq = q.size(1), hkv = k.size(1), d = q.size(3);
  TORCH_CHECK_VALUE(k.size(3) == d, "flash_workbook: q's head_dim ", d, " and the cache's ",
                    k.size(3), " must match");
  TORCH_CHECK_VALUE(hkv >= 1 && hq % hkv == 0, "flash_workbook: q has ", hq,
                    " heads and the cache ", hkv, ": the KV heads must divide the query heads");
  TORCH_CHECK_VALUE(batch >= 1 && q.size(2) >= 1 && d >= 1, "flash_workbook: empty q ", q.sizes());
  // The cache: contiguous (batch, hkv, lk, d), or paged (pages, hkv, page_keys, d) with a
  // (batch, pages per sequence) table (chapter 09's eq. 9).
  std::vector<int> table;
  int page_keys = 0, pages = 0;
  std::int64_t lk = k.size(2);
  if (block_table) {
    TORCH_CHECK_VALUE(block_table->dim() == 2 && block_table->size(0) == batch,
                      "flash_workbook: block_table must be (batch, pages per sequence)");
    page_keys = int(k.size(2));
    pages = int(k.size(0));
    TORCH_CHECK_VALUE(page_keys % kPageKeyMultiple == 0, "flash_workbook: a page holds ",
                      page_keys, " keys: the kernels take pages of a multiple of ",
                      kPageKeyMultiple, " (whole K/V tiles)");
    table = host_ints(*block_table, "block_table", block_table->sizes(), q.device());
    for (int entry : table)
      TORCH_CHECK_VALUE(entry >= 0 && entry < pages, "flash_workbook: block_table holds page ",
                        entry, ", not one of the cache's ", pages);
    lk = block_table->size(1) * page_keys;
  } else {
    TORCH_CHECK_VALUE(k.size(0) == batch, "flash_workbook: the cache holds ", k.size(0),
                      " sequences and q ", batch, " (a paged cache needs block_table)");
  }
  TORCH_CHECK_VALUE(lk >= 1 && lk <= kMaxLength && batch * hq <= INT32_MAX,
                    "flash_workbook: a cache of ", lk, " keys passes the kernels' int lengths");
  std::vector<int> length_values;
  if (lengths) {
    length_values = host_ints(*lengths, "cache_lengths", {batch}, q.device());
    for (int len : length_values)
      TORCH_CHECK_VALUE(len >= 0 && len <= lk, "flash_workbook: a cache length of ", len,
                        ", not in [0, ", lk, "]");
  }
  const DecodeShape shape{int(batch), int(hq), int(hkv), int(q.size(2)), int(lk), int(d)};
  at::Tensor o = at::empty_like(q);
  at::Tensor lse = at::empty({batch, hq, q.size(2)}, q.options().dtype(at::kFloat));
  if (backend == Backend::cpu) {
    refuse_rung_on_cpu(rung);
    // Chapter 09's step for a contiguous cache: each sequence's keys as chapter 06's FA2 sees
    // them. A paged cache is gathered into one first: page block_table[b][p] holds keys
    // [p page_keys, (p + 1) page_keys) of sequence b.
    const auto contiguous = [&](const at::Tensor& cache) {
      if (!block_table) return cache;
      return cache.index_select(0, block_table->reshape({-1}).to(at::kLong))
          .reshape({batch, block_table->size(1), hkv, page_keys, d})
          .permute({0, 2, 1, 3, 4})
          .reshape({batch, hkv, lk, d});
    };
    const AttentionInputs in{floats(q), floats(contiguous(k)), floats(contiguous(v))};
    const ch09::DecodeResult r =
        ch09::attention_fa2_per_sequence(in, shape, length_values, {float(scale), causal});
    o.copy_(tensor_of(r.o, q.sizes(), q.scalar_type()));
    lse.copy_(tensor_of(r.lse, lse.sizes(), at::kFloat));
    return {o, lse};
  }
  // Splits: eq. (7)'s bound by the tiles, at least 4 K/V tiles of 32 keys to a split, at most
  // 16 (its other bound, one wave of the device's blocks, is the chapter program's).
  const int tiles = int((lk + ch09::kTileKeys - 1) / ch09::kTileKeys);
  const int chosen_splits =
      splits > 0 ? int(std::min<std::int64_t>(splits, ch09::kMaxSplits))
                 : std::max(1, std::min(16, (tiles + ch09::kMinTilesPerSplit - 1) /
                                                ch09::kMinTilesPerSplit));
  at::Tensor o_partial = at::empty({batch * hq * q.size(2) * chosen_splits * d},
                                   lse.options());
  at::Tensor lse_partial = at::empty({batch * hq * q.size(2) * chosen_splits}, lse.options());
  DecodeArgs args{q.data_ptr(),
                  k.data_ptr(),
                  v.data_ptr(),
                  lengths ? lengths->data_ptr<int>() : nullptr,
                  lengths ? length_values.data() : nullptr,
                  o.data_ptr(),
                  lse.data_ptr<float>(),
                  o_partial.data_ptr<float>(),
                  lse_partial.data_ptr<float>(),
                  shape,
                  chosen_splits,
                  float(scale),
                  causal,
                  dtype};
  if (block_table) {
    args.block_table = block_table->data_ptr<int>();
    args.block_table_host = table.data();
    args.page_keys = page_keys;
    args.pages = pages;
  }
  with_kernel_backend(backend, [&](auto b) {
    constexpr Backend B = decltype(b)::value;
    const std::vector<Rung<DecodeArgs>> rungs = decode_rungs<B>();
    run_guarded([&] { run_rung(pick_rung(rungs, rung, args, backend, "decode"), args); });
  });
  return {o, lse};
}

/// (rows, cols) of a tensor normalized over its last dimension, checked: contiguous, a dtype the
/// ops take, rows and cols in int.
std::pair<int, int> rows_and_cols(const at::Tensor& x) {
  TORCH_CHECK_VALUE(x.dim() >= 1, "flash_workbook: x is a scalar: the row ops take rows");
  TORCH_CHECK_VALUE(x.is_contiguous(), "flash_workbook: x is not contiguous: the kernels read "
                    "its rows row-major (call .contiguous())");
  dtype_of(x, "x");
  const std::int64_t cols = x.size(-1), rows = cols == 0 ? 0 : x.numel() / cols;
  TORCH_CHECK_VALUE(rows >= 1 && cols >= 1, "flash_workbook: x ", x.sizes(), " is empty");
  TORCH_CHECK_VALUE(rows <= INT32_MAX && cols <= kMaxLength, "flash_workbook: x ", x.sizes(),
                    " passes the int rows and columns the kernels index");
  return {int(rows), int(cols)};
}

at::Tensor softmax(const at::Tensor& x, const std::string& rung, const std::string& backend_name) {
  const auto [rows, cols] = rows_and_cols(x);
  const Backend backend = backend_of(backend_name, x.device());
  at::Tensor y = at::empty_like(x);
  if (backend == Backend::cpu) {
    refuse_rung_on_cpu(rung);
    // Chapter 03's step: blocks of 256 columns, their (m, d) pairs merged (eq. 3 there).
    const std::vector<float> out = ch03::softmax_blocked(floats(x), rows, cols, 256);
    y.copy_(tensor_of(out, x.sizes(), x.scalar_type()));
    return y;
  }
  RowArgs args{x.data_ptr(), y.data_ptr(), rows, cols, dtype_of(x, "x")};
  with_kernel_backend(backend, [&](auto b) {
    constexpr Backend B = decltype(b)::value;
    const std::vector<Rung<RowArgs>> rungs = softmax_rungs<B>();
    run_guarded([&] { run_rung(pick_rung(rungs, rung, args, backend, "softmax"), args); });
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm(
    const at::Tensor& x, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& bias, double eps, const std::string& rung,
    const std::string& backend_name) {
  const auto [rows, cols] = rows_and_cols(x);
  const Backend backend = backend_of(backend_name, x.device());
  TORCH_CHECK_VALUE(eps > 0.0, "flash_workbook: eps = ", eps, ": it must be positive");
  for (const auto& [t, name] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!t->has_value()) continue;
    const at::Tensor& w = **t;
    TORCH_CHECK_VALUE(w.dim() == 1 && w.size(0) == cols && w.is_contiguous() &&
                          w.scalar_type() == x.scalar_type() && w.device() == x.device(),
                      "flash_workbook: ", name, " must be a contiguous (", cols, ") tensor of x's "
                      "dtype and device, or None");
  }
  at::Tensor y = at::empty_like(x);
  at::Tensor mean = at::empty({rows}, x.options().dtype(at::kFloat));
  at::Tensor rstd = at::empty({rows}, x.options().dtype(at::kFloat));
  if (backend == Backend::cpu) {
    refuse_rung_on_cpu(rung);
    // Chapter 07's step, Welford's moments of blocks of 32 columns joined by Chan's combine
    // (eqs. 10-13 there), the blocks' states joined pairwise, as a tree: the error grows with
    // the tree's depth, log2 of the blocks, not with the row (joined left to right, or one
    // running state, it was 5-30 times PyTorch's at 1000-5000 columns).
    const ch07::Affine affine{weight ? floats(*weight) : std::vector<float>{},
                              bias ? floats(*bias) : std::vector<float>{}};
    const LayerNormOut out =
        ch07::layernorm_rows(floats(x), rows, cols, affine, [eps](const float* row, int n) {
          std::vector<ch07::Welford> level;
          for (int start = 0; start < n; start += 32)
            level.push_back(ch07::welford_row(row + start, std::min(32, n - start)));
          while (level.size() > 1) {  // one level of the tree: neighbours joined
            std::vector<ch07::Welford> up;
            for (std::size_t i = 0; i + 1 < level.size(); i += 2)
              up.push_back(ch07::welford_combine(level[i], level[i + 1]));
            if (level.size() % 2 == 1) up.push_back(level.back());
            level = std::move(up);
          }
          return ch07::row_stats(level.front(), float(eps));
        });
    y.copy_(tensor_of(out.y, x.sizes(), x.scalar_type()));
    mean.copy_(tensor_of(out.mean, mean.sizes(), at::kFloat));
    rstd.copy_(tensor_of(out.rstd, rstd.sizes(), at::kFloat));
    return {y, mean, rstd};
  }
  LayerNormArgs args{x.data_ptr(),
                     weight ? weight->data_ptr() : nullptr,
                     bias ? bias->data_ptr() : nullptr,
                     y.data_ptr(),
                     mean.data_ptr<float>(),
                     rstd.data_ptr<float>(),
                     rows,
                     cols,
                     float(eps),
                     dtype_of(x, "x")};
  with_kernel_backend(backend, [&](auto b) {
    constexpr Backend B = decltype(b)::value;
    const std::vector<Rung<LayerNormArgs>> rungs = layer_norm_rungs<B>();
    run_guarded([&] { run_rung(pick_rung(rungs, rung, args, backend, "layer_norm"), args); });
  });
  return {y, mean, rstd};
}

/// "name\tchange\tlimits\trequires" of every rung of `op` ("attention" or "attention_backward") on the
/// simulator (the same ladder as on the GPU).
std::vector<std::string> rungs(const std::string& op) {
  std::vector<std::string> out;
  // What a rung needs besides its limits, from its record's facts.
  const auto line = [&](const auto& r) {
    std::string requires_;
    if (r.facts.needs_sm90a) requires_ = "sm_90a on the GPU";
    if (r.facts.reads_stored_p) requires_ = "the P a standard forward stored";
    out.push_back(std::string(r.name) + "\t" + r.change + "\t" + describe(r.limits) + "\t" +
                  requires_);
  };
  if (op == "attention") {
    for (const auto& r : forward_rungs<Backend::sim>()) line(r);
  } else if (op == "attention_backward") {
    for (const auto& r : backward_rungs<Backend::sim>()) line(r);
  } else if (op == "decode") {
    for (const auto& r : decode_rungs<Backend::sim>()) line(r);
  } else if (op == "softmax") {
    for (const auto& r : softmax_rungs<Backend::sim>()) line(r);
  } else if (op == "layer_norm") {
    for (const auto& r : layer_norm_rungs<Backend::sim>()) line(r);
  } else {
    TORCH_CHECK_VALUE(false, "flash_workbook: no op '", op, "' (rungs of 'attention', "
                      "'attention_backward', 'decode', 'softmax' or 'layer_norm')");
  }
  return out;
}

}  // namespace

TORCH_LIBRARY(flash_workbook, m) {
  m.def("attention_forward(Tensor q, Tensor k, Tensor v, bool causal, float scale, str rung, "
        "str backend, str backward_rung) -> (Tensor, Tensor)");
  m.def("attention_backward(Tensor d_o, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, "
        "bool causal, float scale, str rung, str backend) -> (Tensor, Tensor, Tensor)");
  m.def("decode(Tensor q, Tensor k, Tensor v, Tensor? lengths, Tensor? block_table, bool causal, "
        "float scale, int splits, str rung, str backend) -> (Tensor, Tensor)");
  m.def("softmax(Tensor x, str rung, str backend) -> Tensor");
  m.def("layer_norm(Tensor x, Tensor? weight, Tensor? bias, float eps, str rung, str backend) "
        "-> (Tensor, Tensor, Tensor)");
  m.def("rungs(str op) -> str[]", &rungs);
}

TORCH_LIBRARY_IMPL(flash_workbook, CPU, m) {
  m.impl("attention_forward", &attention_forward);
  m.impl("attention_backward", &attention_backward);
  m.impl("decode", &decode);
  m.impl("softmax", &softmax);
  m.impl("layer_norm", &layer_norm);
}

TORCH_LIBRARY_IMPL(flash_workbook, CUDA, m) {
  m.impl("decode", &decode);
  m.impl("attention_forward", &attention_forward);
  m.impl("attention_backward", &attention_backward);
  m.impl("softmax", &softmax);
  m.impl("layer_norm", &layer_norm);
}
