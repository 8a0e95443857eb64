// Chapter 09's kernels: every decoding rung against the CPU split-KV step and the rung before
// it (the shared chain check) in fp32, fp16 and bf16, for every split count, GQA groups, ragged
// lengths and grouped causal rows at every alignment with the tiles; on a paged cache against
// itself on the contiguous one, bit for bit; the refusals of what the rungs cannot take.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chapters/09_flash_decoding/decode_ladder.hpp"
#include "chapters/09_flash_decoding/decode_reference.hpp"
#include "chapters/09_flash_decoding/flash_decoding.hpp"
#include "common/attention_inputs.hpp"
#include "common/reference_attention.hpp"
#include "common/rung_buffers.hpp"
#include "tests/decode_checks.hpp"
#include "tests/ladder_checks.hpp"
#include "tests/lane_checks.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch09;
using namespace wb::test::decode;

// ------------------------------------------------------------------------------------------
// The kernel ladder: one_split and split_kv against the CPU step
// ------------------------------------------------------------------------------------------

namespace {

/// The kernel cases: lengths 1, 2, 31, 1000, 4097 and 65537 (in race mode 1, 2, 31 and a
/// ragged batch of 100), GQA 1, 4, 8, lq up to 16, ragged lengths with a 0, split counts from 1
/// to more than the keys.
struct KernelCase {
  Case c;
  std::vector<int> splits;
  std::vector<Dtype> dtypes;  // empty: fp32, and fp16 and bf16 on the short caches
  bool one_kind = false;      // outlier keys only (the sweeps over every split count)
};

std::vector<KernelCase> kernel_cases() {
  std::vector<KernelCase> cases;
  const auto add = [&](DecodeShape shape, std::vector<int> lengths, bool causal,
                       std::vector<int> splits, std::vector<Dtype> dtypes = {},
                       bool one_kind = false) {
    KernelCase k;
    k.c = make_case(shape, std::move(lengths), causal);
    k.splits = std::move(splits);
    k.dtypes = std::move(dtypes);
    k.one_kind = one_kind;
    cases.push_back(std::move(k));
  };
  for (bool causal : {false, true}) {
    // mma_kv (fp16 or bf16, d = 64 or 128) on the odd lengths too: one key, two keys with a
    // sequence of one (its first row sees nothing under the mask), and, below, 1000, 4097 and
    // 65537 keys, beside the other rungs in fp16.
    add({1, 4, 1, 1, 1, 64}, {}, causal, {1, 2}, {Dtype::fp16});
    add({2, 8, 1, 2, 2, 128}, {2, 1}, causal, {1, 3}, {Dtype::fp16});
    add({1, 1, 1, 1, 1, 16}, {}, causal, {1, 2, 5});
    add({2, 4, 1, 2, 2, 59}, {2, 1}, causal, {1, 3});
    add({1, 8, 1, 3, 31, 64}, {}, causal, {1, 2, 33});
    // GQA 3 with lq 3: 9 group rows, stream_kv's blocks of 4, 4 and 1; d = 24: 3 vectors of
    // fp16 (6 of fp32) over a key's 2 (4) lanes, one (two) of the 4 (8) vectors empty
    add({2, 6, 2, 3, 77, 24}, {77, 40}, causal, {1, 3});
    // mma_kv's tiles (d = 64 or 128): 16 group rows of 4 heads x lq 4 (causal rows seeing
    // different key counts), a ragged batch whose caches end inside a 64-key tile, several
    // tiles per split; in race mode in fp16, 2 splits of one cache of 2 tiles and a short one
    // (cp.async, the barriers around its buffers).
    if (test::small_shapes()) {  // race mode: one ragged batch, splits with no key among them
      add({1, 4, 1, 4, 100, 64}, {}, causal, {2});
      add({3, 8, 2, 2, 100, 32}, {100, 0, 37}, causal, {6});
      continue;
    }
    add({2, 8, 2, 4, 150, 64}, {150, 70}, causal, {1, 2});
    add({2, 8, 2, 4, 300, 128}, {300, 5}, causal, {3});
    add({3, 8, 2, 5, 1000, 32}, {1000, 0, 517}, causal, {1, 4, 40});
    add({2, 2, 2, 16, 4097, 128}, {4097, 33}, causal, {9});
    add({1, 4, 4, 1, 4097, 16}, {}, causal, {100});  // 100 splits of 2 tiles: lanes hold 4
    add({1, 1, 1, 1, 65537, 8}, {}, causal, {2049});
    add({1, 4, 1, 3, 1000, 64}, {}, causal, {1, 7}, {Dtype::fp16});
    if (!causal) {  // one query row sees every key under the mask too: once is enough
      add({1, 2, 1, 1, 4097, 128}, {}, causal, {9}, {Dtype::fp16});
      add({1, 1, 1, 1, 65537, 64}, {}, causal, {20}, {Dtype::fp16});
    }
    // Under the mask, grouped query rows (4 heads x lq 4 over a KV head: 16 rows, mma_kv's
    // m16 tile) against sequences whose lengths take every residue modulo 64 (mma_kv's K/V
    // tile; its warps' 16 keys and the other rungs' 32-key tiles divide it): row i of a group
    // sees keys up to len - lq + i, so some warp's last key falls between two rows'
    // diagonals, and a block that skips its per-row compares where it must not fails there.
    if (causal && !test::small_shapes())
      for (int r = 0; r < 32; ++r)
        add({2, 8, 2, 4, 128, 64}, {64 + r, 96 + r}, causal, {1, 3}, {Dtype::fp16},
            /*one_kind=*/true);
    // Every split count from 1 to more splits than keys on every rung, as on the CPU.
    add({1, 4, 1, 2, 31, 64}, {}, causal, split_counts(31), {Dtype::fp16}, /*one_kind=*/true);
    add({1, 1, 1, 1, 33, 16}, {}, causal, split_counts(33), {Dtype::fp32}, /*one_kind=*/true);
  }
  return cases;
}

/// One case of the chain check: a kernel case in one element type, score kind and split count.
struct DecodeCase {
  const KernelCase* kc;
  Dtype dtype;
  ScoreKind kind;
  int splits;
};

/// The chain check's cases: every kernel case in its types and kinds, at each split count.
std::vector<DecodeCase> decode_cases(const std::vector<KernelCase>& kernel_cases) {
  std::vector<DecodeCase> cases;
  for (const KernelCase& kc : kernel_cases) {
    const Case& c = kc.c;
    const bool chosen = !kc.dtypes.empty();
    for (Dtype dtype :
         chosen ? kc.dtypes : std::vector<Dtype>{Dtype::fp32, Dtype::fp16, Dtype::bf16}) {
      // Unless the case names its types: the long caches and race mode in fp32 only, as the
      // 16-bit types differ in the loads and the final rounding, which the short caches cover
      // (the suite's time); but mma_kv, 16-bit only, runs its tile shapes (d = 64, 128) in race
      // mode in fp16.
      const bool tensor_core_shape = c.shape.d == 64 || c.shape.d == 128;
      if (!chosen && c.shape.lk > 1000 && dtype != Dtype::fp32) continue;
      if (!chosen && test::small_shapes() && dtype != Dtype::fp32 &&
          !(tensor_core_shape && dtype == Dtype::fp16))
        continue;
      // Outlier keys everywhere; on the short caches also scores offset by +-1e4 (an exp of an
      // unshifted lse would overflow) and a steep ramp (one split holds nearly all the mass),
      // in the 16-bit types up to 100 keys (those inputs test the merge's arithmetic, which is
      // float whatever the type; the suite's time).
      std::vector<ScoreKind> kinds = {ScoreKind::outliers};
      if (!test::small_shapes() && !kc.one_kind &&
          c.shape.lk <= (dtype == Dtype::fp32 ? 1000 : 100))
        kinds = {ScoreKind::outliers, ScoreKind::large_offset, ScoreKind::arange};
      for (ScoreKind kind : kinds)
        for (int splits : kc.splits) cases.push_back({&kc, dtype, kind, splits});
    }
  }
  return cases;
}

/// A case's inputs (Q, K, V rounded to its type: the kernels read those values, the CPU step
/// and fp64 use them too), options and fp64 reference, computed once for every rung.
struct DecodeInputs {
  AttentionInputs in;
  DecodeOptions opt;
  DecodeReference r;
  std::vector<double> w;  ///< O's weights, plus the type's smallest normal (its rounding)
  /// The CPU step's O against fp64 (in units of w) by its number of even splits: the rungs of
  /// several ranges run the same splits, computed once for all of them.
  std::map<int, ErrorReport> cpu_o;
};

DecodeInputs& decode_inputs(const DecodeCase& dc, const std::string& key) {
  static std::map<std::string, DecodeInputs> cache;  // every rung's SUBCASE reads the same
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const Case& c = dc.kc->c;
  DecodeInputs x;
  x.in = ch06::round_inputs(inputs_of(c.shape, dc.kind, kSeed), dc.dtype);
  x.opt = {scale_of(c.shape, dc.kind), c.causal};
  x.r = decode_reference(x.in, c.shape, c.lengths, x.opt);
  REQUIRE_FALSE(test::has_nan(x.r.o));
  REQUIRE_FALSE(test::has_nan(x.r.lse));
  // A 16-bit O is rounded once: u max(|O|, N) <= u (o_weight + N), N the smallest normal.
  x.w = x.r.o_weight;
  for (double& v : x.w) v += ch06::smallest_normal(dc.dtype);
  return cache.emplace(key, std::move(x)).first->second;
}

/// Every rung against the CPU split-KV step and against the rung before it that takes the case
/// (the shared chain check, tests/ladder_checks.hpp), O in units of its weights, on its floor;
/// its logsumexp against fp64 and its unseen rows. A rung of one range whatever the split count
/// (one_split) runs once per case, at its first split count.
template <Backend B>
void every_rung_equals_the_cpu_step() {
  const std::vector<KernelCase> kernel = kernel_cases();
  test::check_ladder(
      kernel_ladder<B>(), decode_cases(kernel),
      [&](const Rung<DecodeArgs>& rung, const DecodeCase& dc) -> std::optional<test::RungError> {
        const Case& c = dc.kc->c;
        if (!rung.limits.takes(dc.dtype)) return std::nullopt;  // mma_kv: fp16 and bf16
        if (rung.facts.one_range && dc.splits != dc.kc->splits.front()) return std::nullopt;
        const std::string key =
            describe(c, to_string(dc.kind)) + ", " + to_string(dc.dtype);
        const std::string where = key + ", splits " + std::to_string(dc.splits);
        CAPTURE(where);
        DecodeInputs& x = decode_inputs(dc, key);
        // Fresh buffers per rung: an output one rung wrote cannot stand in for another's.
        DecodeBuffers buffers(B, x.in, c.lengths, c.shape, dc.splits, x.opt.scale, c.causal,
                              dc.dtype);
        if (!rung.limits.takes_head_dim(c.shape.d)) {       // stream_kv: d a multiple of 8,
          CHECK(!why_refused(rung, buffers.args).empty());  // mma_kv: 64 or 128
          return std::nullopt;
        }
        // A single range, or the CPU step's even split, each run once for the case.
        const int n = rung.facts.one_range ? 1 : dc.splits;
        auto cpu_o_of_n = x.cpu_o.find(n);
        if (cpu_o_of_n == x.cpu_o.end()) {
          const DecodeResult cpu = attention_split_kv(
              x.in, c.shape, c.lengths, x.opt, [&](int len) { return even_splits(len, n); });
          cpu_o_of_n = x.cpu_o.emplace(n, ref::compare_weighted(cpu.o, x.r.o, x.w)).first;
        }
        const ErrorReport& cpu_o = cpu_o_of_n->second;
        REQUIRE(why_refused(rung, buffers.args).empty());
        run_rung(rung, buffers.args);
        const DecodeOut got = buffers.download();
        const DecodeResult out{got.o, got.lse};
        // The combine kernel's merges (none for a single range), and those inside a block
        // (stream_kv's key slots' or mma_kv's warps' states, all at once) before it writes
        // its partial.
        const int depth = (n == 1 ? 0 : combine_depth(n)) + rung.facts.block_merges;
        const DecodeReference& r = x.r;
        const double floor = split_floor(r.score_error, c.shape.lk, r.max_abs_partial_lse, depth, n);
        // The policy: twice the CPU step's error (or the rung before's) plus the floor (the
        // kernel sums in butterflies and with fmaf, CUDA's expf and logf differ from glibc's by
        // an ulp or two), plus the 16-bit rounding of O; on tensor cores P~ is rounded to the
        // type for P~ V too (chapter 06's eq. 8: u sum p |v| more, within u o_weight).
        const double rounding = ch06::unit_roundoff(dc.dtype);
        const double roundings = (rung.facts.rounds_p ? 2 : 1) * rounding;
        // And a bound of its own: twice the CPU step's stated bound (eq. 8 with its one merge,
        // eq. 4) in place of its measured error, so that a fault the kernels share with the
        // CPU step (lse_merge, combine_weight) cannot move the bound with it.
        const double cpu_stated =
            split_floor(r.score_error, c.shape.lk, r.max_abs_partial_lse, n == 1 ? 0 : 1, n);
        WB_CHECK_WITHIN(
            compare(out.lse, r.lse),
            split_lse_floor(r.score_error, c.shape.lk, r.max_abs_partial_lse, depth, n));
        check_unseen_rows(r, c.shape, out);
        return test::RungError{ref::compare_weighted(out.o, r.o, x.w), /*relative=*/false,
                               cpu_o.max_abs, floor + roundings,
                               chain_bound(cpu_stated, floor + roundings), where};
      });
}

template <Backend B>
void rungs_refuse_what_they_cannot_take() {
  const Ladder<DecodeArgs> ladder = kernel_ladder<B>();
  const DecodeShape ok{1, 4, 2, 1, 8, 16};
  const AttentionInputs in = inputs_of(ok, ScoreKind::randn, kSeed);
  DecodeBuffers buffers(B, in, {}, ok, 2, 1.f, false, Dtype::fp32);
  for (const Rung<DecodeArgs>& rung : ladder) {
    if (!rung.limits.takes(Dtype::fp32)) continue;  // mma_kv: below
    CAPTURE(std::string(rung.name));
    DecodeArgs a = buffers.args;
    CHECK(why_refused(rung, a).empty());
    a.shape.hkv = 3;  // 4 query heads do not group over 3 KV heads
    CHECK(why_refused(rung, a).find("not a multiple of hkv") != std::string::npos);
    a = buffers.args;
    a.shape.d = ch04::kMaxHeadDim + 1;
    CHECK(why_refused(rung, a).find("d = 129") != std::string::npos);
    const std::vector<int> too_long = {ok.lk + 1};
    a = buffers.args;
    a.lengths_host = too_long.data();
    a.lengths = static_cast<const int*>(buffers.args.q);  // any device pointer: refused first
    CHECK(why_refused(rung, a).find("lengths[0] = 9 is outside [0, lk = 8]") != std::string::npos);
    a = buffers.args;
    a.lengths_host = nullptr;  // lengths without the host copy the formulas read
    a.lengths = static_cast<const int*>(buffers.args.q);
    CHECK(!why_refused(rung, a).empty());
  }
  // stream_kv loads whole 16-byte vectors of a row: d a multiple of 8; the other fp32 rungs
  // take d = 12.
  const Rung<DecodeArgs> streaming = Rungs<B>::stream_kv();
  for (const Rung<DecodeArgs>& rung : ladder) {
    if (!rung.limits.takes(Dtype::fp32)) continue;
    DecodeArgs a = buffers.args;
    a.shape.d = 12;
    CAPTURE(std::string(rung.name));
    CHECK(why_refused(rung, a).empty() == (rung.launch != streaming.launch));
  }
  // mma_kv: fp16 or bf16, d = 64 or 128 (its tiles' template instantiations), and 16-byte
  // aligned q, k, v (its cp.async and ldmatrix rows); each refused in one line.
  const Rung<DecodeArgs> mma = Rungs<B>::mma_kv();
  CHECK(why_refused(mma, buffers.args).find("fp32") != std::string::npos);
  const DecodeShape tc{1, 4, 2, 1, 8, 64};
  DecodeBuffers half(B, inputs_of(tc, ScoreKind::randn, kSeed), {}, tc, 2, 1.f, false, Dtype::fp16);
  CHECK(why_refused(mma, half.args).empty());
  DecodeArgs a = half.args;
  a.shape.d = 96;
  CHECK(why_refused(mma, a).find("d = 96") != std::string::npos);
  a = half.args;
  a.k = static_cast<const unsigned char*>(half.args.k) + 2;  // one element off 16 bytes
  CHECK_THROWS_WITH_AS(run_rung(mma, a), "mma_kv: q, k and v must be 16-byte aligned",
                       std::invalid_argument);
  // stream_kv loads its rows in 16-byte vectors too (any element type).
  CHECK_THROWS_WITH_AS(run_rung(streaming, a), "stream_kv: q, k and v must be 16-byte aligned",
                       std::invalid_argument);
}

/// A paged case: the cache's shape and lengths, the page size, the split count.
struct PagedCase {
  DecodeShape shape;
  std::vector<int> lengths;
  int page_keys;
  int splits;
};

// A paged cache (eq. 9) moves where each key lies, not what a kernel computes from it: every
// rung's O and logsumexp on a paged copy of the cache are its results on the contiguous cache,
// bit for bit. Pages of 32 keys (a page per K/V tile), 64 (one mma_kv tile) and 96 (mma_kv's
// 64-key tiles straddle pages), from a shuffled pool with spare pages whose every unused slot
// holds NaN; lengths ending inside a page, a sequence of no key, causal rows, several splits.
template <Backend B>
void a_paged_cache_gives_the_contiguous_bits() {
  const std::vector<PagedCase> cases =
      test::small_shapes() ? std::vector<PagedCase>{{{2, 4, 1, 4, 100, 64}, {100, 37}, 32, 2},
                                                    {{1, 4, 1, 1, 130, 64}, {}, 96, 1}}
                           : std::vector<PagedCase>{{{3, 8, 2, 2, 200, 64}, {200, 0, 97}, 32, 3},
                                                    {{2, 4, 1, 1, 300, 128}, {300, 161}, 96, 2},
                                                    {{2, 6, 2, 3, 130, 24}, {130, 64}, 64, 1}};
  const Ladder<DecodeArgs> ladder = kernel_ladder<B>();
  for (const PagedCase& pc : cases) {
    for (bool causal : {false, true}) {
      for (Dtype dtype : {Dtype::fp32, Dtype::fp16}) {
        const DecodeShape& shape = pc.shape;
        const std::string where = to_string(shape) + ", pages of " + std::to_string(pc.page_keys) +
                                  (causal ? ", causal" : "") + ", " + to_string(dtype);
        CAPTURE(where);
        const AttentionInputs in =
            ch06::round_inputs(inputs_of(shape, ScoreKind::outliers, kSeed), dtype);
        const PagedCache paged = page_cache(in, shape, pc.page_keys, /*spare=*/3, kSeed);
        const float scale = scale_of(shape, ScoreKind::outliers);
        for (const Rung<DecodeArgs>& rung : ladder) {
          if (!rung.limits.takes(dtype) || !rung.limits.takes_head_dim(shape.d)) continue;
          CAPTURE(std::string(rung.name));
          DecodeBuffers contiguous(B, in, pc.lengths, shape, pc.splits, scale, causal, dtype);
          run_rung(rung, contiguous.args);
          const DecodeOut want = contiguous.download();
          DecodeBuffers pool(B, AttentionInputs{in.q, paged.k, paged.v}, pc.lengths, shape,
                             pc.splits, scale, causal, dtype);
          const DeviceBuffer<int> table(B, paged.table);
          use_paged_cache(pool.args, paged, table.data());
          REQUIRE(why_refused(rung, pool.args).empty());
          run_rung(rung, pool.args);
          const DecodeOut got = pool.download();
          // == on floats: a NaN (a slot no key fills, read) never passes; and bit for bit, so
          // that -0 and +0 differ too.
          CHECK(got.o == want.o);
          CHECK(got.lse == want.lse);
          CHECK_FALSE(test::first_bit_mismatch(got.o, want.o, std::size_t(shape.d)));
          CHECK_FALSE(test::first_bit_mismatch(got.lse, want.lse, 1));
        }
      }
    }
  }
}

// A page size that is not a multiple of 32 (a tile would straddle two pages), a table entry
// outside the pool, a table without its host copy: one line each, before any launch.
template <Backend B>
void rungs_refuse_a_bad_page_table() {
  const DecodeShape shape{2, 4, 2, 1, 100, 64};
  const AttentionInputs in = inputs_of(shape, ScoreKind::randn, kSeed);
  const PagedCache paged = page_cache(in, shape, 32, 0, kSeed);
  DecodeBuffers pool(B, AttentionInputs{in.q, paged.k, paged.v}, {}, shape, 2, 1.f, false,
                     Dtype::fp16);
  const DeviceBuffer<int> table(B, paged.table);
  use_paged_cache(pool.args, paged, table.data());
  for (const Rung<DecodeArgs>& rung : kernel_ladder<B>()) {
    CAPTURE(std::string(rung.name));
    CHECK(why_refused(rung, pool.args).empty());
    DecodeArgs a = pool.args;
    a.page_keys = 48;
    CHECK(why_refused(rung, a) == "page_keys = 48 is not a positive multiple of 32");
    a = pool.args;
    a.pages = paged.pages - 1;  // the table names a page the pool no longer has
    CHECK(why_refused(rung, a).find("is outside [0, pages = 7)") != std::string::npos);
    a = pool.args;
    a.block_table_host = nullptr;
    CHECK(why_refused(rung, a) == "the block table and its host copy must be given together");
  }
}

}  // namespace

WB_KERNEL_TEST_CASE("a paged KV cache gives every decoding rung the contiguous cache's bits",
                    a_paged_cache_gives_the_contiguous_bits)
WB_KERNEL_TEST_CASE(
    "the decoding rungs refuse page sizes off the tile and table entries outside the pool",
    rungs_refuse_a_bad_page_table)
WB_KERNEL_TEST_CASE(
    "every decoding rung equals the CPU split-KV step for every split count in fp32 fp16 and "
    "bf16",
    every_rung_equals_the_cpu_step)
WB_KERNEL_TEST_CASE(
    "the decoding rungs refuse ungrouped heads lengths past the cache and head dimensions above "
    "128 and stream_kv those not a multiple of 8",
    rungs_refuse_what_they_cannot_take)
