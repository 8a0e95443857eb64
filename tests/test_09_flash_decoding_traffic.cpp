// Chapter 09's kernels move the bytes their formulas state (suite "profile": the instrumented
// twin, CTest 09_flash_decoding/sim-profile; tests/traffic_checks.hpp): the split kernel's K/V
// ranges cut at the causal mask, the O rows of splits that saw no key neither written nor read
// back, the lengths read once per block; on a paged cache, the block table's reads.
#include <optional>
#include <string>
#include <vector>

#include "chapters/09_flash_decoding/decode_ladder.hpp"
#include "chapters/09_flash_decoding/decode_reference.hpp"
#include "chapters/09_flash_decoding/flash_decoding.hpp"
#include "common/rung_buffers.hpp"
#include "tests/traffic_checks.hpp"

namespace {
using namespace wb;

/// A traffic case: the shape, the lengths (empty: all lk), the splits, and the page size of a
/// paged cache (0: contiguous).
struct Case {
  DecodeShape shape;
  std::vector<int> lengths;
  int splits;
  int page_keys = 0;
};

/// Every rung that takes them on every case, fp32 and fp16, causal or not, counted against its
/// formula; each rung must take some case.
void check_decode_traffic(const std::vector<Case>& cases) {
  const Ladder<DecodeArgs> ladder = ch09::kernel_ladder<Backend::sim>();
  std::vector<std::string> took;
  for (const Case& c : cases)
    for (Dtype t : {Dtype::fp32, Dtype::fp16})
      for (bool causal : {false, true}) {
        const AttentionInputs in = make_attention_inputs(
            ScoreKind::randn,
            {c.shape.batch, c.shape.hq * c.shape.lq, c.shape.hkv * c.shape.lk, c.shape.d}, 1.f, 9);
        std::optional<ch09::PagedCache> paged;
        if (c.page_keys > 0) paged = ch09::page_cache(in, c.shape, c.page_keys, /*spare=*/2, 9);
        DecodeBuffers buffers(Backend::sim, paged ? AttentionInputs{in.q, paged->k, paged->v} : in,
                              c.lengths, c.shape, c.splits, 1.f, causal, t);
        std::optional<DeviceBuffer<int>> table;
        if (paged) {
          table.emplace(Backend::sim, paged->table);
          ch09::use_paged_cache(buffers.args, *paged, table->data());
        }
        const std::vector<std::string> r = test::check_ladder_traffic(
            ladder, buffers.args,
            to_string(c.shape) + ", " + to_string(t) + (causal ? ", causal" : "") + ", splits " +
                std::to_string(c.splits) +
                (paged ? ", pages of " + std::to_string(c.page_keys) : ""));
        took.insert(took.end(), r.begin(), r.end());
      }
  test::check_every_rung_counted(ladder, took);
}

}  // namespace

TEST_CASE("every decoding rung moves the bytes its formula states, on odd shapes" *
          doctest::test_suite("profile")) {
  // One key; GQA 4 with lq 5 (20 group rows: a full and a short row tile), a sequence of 0
  // keys and a short one, more splits than tiles; lq 16 over GQA 2 with 3 splits of odd
  // lengths (a short last tile, causal cuts inside a split); mma_kv's d = 64 and 128 with 20
  // group rows, a cache ending inside a 64-key tile and one of 0 keys.
  check_decode_traffic({{{1, 1, 1, 1, 1, 8}, {}, 3},
                        {{3, 8, 2, 5, 130, 24}, {130, 0, 37}, 7},
                        {{2, 4, 2, 16, 301, 40}, {301, 75}, 3},
                        {{2, 8, 2, 5, 200, 64}, {200, 0}, 2},
                        {{1, 4, 2, 3, 77, 128}, {}, 1}});
}

// A paged cache (eq. 9) moves the same K and V bytes, plus each rung's reads of the block table:
// pages of 32 keys (one per K/V tile) and of 96 (mma_kv's 64-key tiles straddle pages), a
// length ending inside a page, a sequence of no key, causal rows cut inside a split.
TEST_CASE("on a paged cache every decoding rung adds exactly its reads of the block table" *
          doctest::test_suite("profile")) {
  check_decode_traffic(
      {{{3, 8, 2, 2, 200, 64}, {200, 0, 97}, 3, 32}, {{2, 4, 1, 3, 300, 128}, {300, 161}, 2, 96}});
}
