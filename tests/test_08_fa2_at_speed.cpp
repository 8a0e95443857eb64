// Chapter 08: FlashAttention-2 at speed. The laws the rungs rest on, checked on the host: the
// S~ accumulator registers are P~'s A fragment (eq. 1, against the simulator's PTX layouts),
// the swizzle is a permutation of each row that spreads an ldmatrix matrix over all banks
// (eq. 3). Then every rung, from chapter 06's tensor-core kernel on, against the CPU step
// (chapter 06's tiled FA2 with the rung's tiles), the rung before and fp64 on chapter 06's
// eq. (8) bound, fp16 and bf16, d = 64 and 128, odd shapes, with and without the causal mask;
// the refusals of what the rungs cannot take.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "chapters/08_fa2_at_speed/fa2_at_speed.hpp"
#include "common/sim/ptx_runtime.hpp"
#include "tests/attention_checks.hpp"
#include "tests/attention_ladder_checks.hpp"
#include "tests/fa2_checks.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch08;

namespace {

constexpr std::uint64_t kSeed = 808;
constexpr int kBankGroups = 8;  // 32 banks in groups of 4: one 16-byte row

/// The 16-byte chunk offsets (in elements) of every row of a `rows` x D tile with Layout.
template <typename Layout, int D>
std::vector<int> all_offsets(int rows) {
  std::vector<int> offsets;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < D; ++c) offsets.push_back(Layout::offset(r, c));
  return offsets;
}

/// The most 16-byte rows of one ldmatrix matrix (8 consecutive rows, one column chunk) that
/// start in the same group of 4 banks: the wavefronts the matrix takes.
template <typename Layout, int D>
int worst_matrix_conflict() {
  int worst = 0;
  for (int row0 = 0; row0 < 2 * kKeys; row0 += kSwizzleRows) {
    for (int col = 0; col < D; col += kChunkElements) {
      int per_group[kBankGroups] = {};
      for (int r = row0; r < row0 + kSwizzleRows; ++r) {
        worst = std::max(worst, ++per_group[first_bank<Layout>(r, col) / 4]);
      }
    }
  }
  return worst;
}

template <int D>
void check_layouts() {
  using Padded = TileLayout<D, false>;
  using Swizzled = TileLayout<D, true>;
  // The swizzle only permutes chunks within a row: every element keeps a place of its own, in
  // the row's own D elements (so an unpadded tile of R rows takes exactly R D elements).
  const std::vector<int> swizzled = all_offsets<Swizzled, D>(2 * kKeys);
  std::vector<int> sorted = swizzled;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t e = 0; e < sorted.size(); ++e) REQUIRE(sorted[e] == int(e));
  for (int r = 0; r < 2 * kKeys; ++r)
    for (int c = 0; c < D; ++c) CHECK(Swizzled::offset(r, c) / D == r);
  // Within a chunk the elements stay in order: a 16-byte access, and a 32-bit pair, are whole.
  for (int c = 0; c < D; ++c) CHECK(Swizzled::offset(5, c) % kChunkElements == c % kChunkElements);
  // Eq. (3): 1 wavefront per matrix swizzled or padded; rows D elements apart without either
  // all start in one bank group (the 8-way conflict the swizzle removes).
  // Eq. (3'): a fragment load's split address is offset() itself, for every row0 a multiple of
  // 8, col0 a multiple of 16, lane row r of up to 16 and lane column c of 0 or 8.
  for (int row0 = 0; row0 < 2 * kKeys; row0 += kSwizzleRows)
    for (int col0 = 0; col0 < D; col0 += 16)
      for (int r = 0; r < 16; ++r)
        for (int c : {0, 8}) {
          CHECK(Swizzled::fragment_offset(row0, col0, r, c) ==
                Swizzled::offset(row0 + r, col0 + c));
          CHECK(Padded::fragment_offset(row0, col0, r, c) == Padded::offset(row0 + r, col0 + c));
        }
  using Unpadded = UnpaddedLayout<D>;
  CHECK(worst_matrix_conflict<Swizzled, D>() == 1);
  CHECK(worst_matrix_conflict<Padded, D>() == 1);
  CHECK(worst_matrix_conflict<Unpadded, D>() == kSwizzleRows);
}

}  // namespace

TEST_SUITE("cpu") {
  TEST_CASE("the accumulators of S~ hold exactly the elements of P~'s A fragment") {
    // Eq. (1), against the PTX ISA's layouts as the simulator implements them (tested on
    // their own in tests/sim/test_ptx.cpp): register r of P~'s A fragment for keys
    // [16 kk, 16 kk + 16) packs s[2 kk + r / 2][2 (r % 2)] and the element after it.
    for (int lane = 0; lane < kWarpSize; ++lane) {
      for (int r = 0; r < 4; ++r) {
        for (int half = 0; half < 2; ++half) {
          CAPTURE(lane);
          CAPTURE(r);
          const sim::WmmaCoord a = sim::mma_coord(sim::MmaOperand::a, unsigned(lane), r, half);
          const int group = r / 2, e = 2 * (r % 2) + half;  // s[2 kk + group][e]
          const sim::WmmaCoord c = sim::mma_coord(sim::MmaOperand::c, unsigned(lane), e, 0);
          CHECK(a.row == c.row);
          CHECK(a.col == 8 * group + c.col);  // key group 2 kk + 1 is A's columns 8-15
        }
      }
    }
  }

  TEST_CASE("the swizzle permutes each row and spreads an ldmatrix matrix over all banks") {
    SUBCASE("d = 64") {
      check_layouts<64>();
    }
    SUBCASE("d = 128") {
      check_layouts<128>();
    }
  }
}

// ------------------------------------------------------------------------------------------
// The kernel ladder
// ------------------------------------------------------------------------------------------

namespace {

// lq and lk from {1, 17, 97, 203, 1000}: partial Q tiles of 64 and 128 rows and K/V tiles of 64
// (and chapter 06's 32) keys, lq != lk both ways (fully masked rows under the mask, Q tiles
// that visit no K/V tile), d = 64 and 128, bh 1 and 2. And the two boundaries an off-by-one
// hides behind, at lq = 126, lk = 127: the last key step reaches one key past lk (127 = 64 + 63
// = 3 x 32 + 31: its last key alone is masked, at 64 and at 32 keys a step), and under the mask
// key 64, the first of the second K/V tile, is seen by row 63 alone, the last row of a warp's 16
// (rows 48-63) and of its 32 (rows 32-63, fa2_register_blocked).
const std::vector<AttentionShape> kShapes = {
    {1, 1, 1, 64},     {2, 17, 97, 64},   {1, 203, 17, 128}, {1, 97, 203, 128},
    {1, 1000, 97, 64}, {1, 1, 1000, 128}, {1, 126, 127, 64}, {1, 126, 127, 128}};
// Race mode and the instrumented twin (several times slower): both d, partial tiles, lq < lk
// and lq > lk, and d = 128 with lk = lq + 1 (the warp boundary above).
const std::vector<AttentionShape> kRaceShapes = {
    {1, 17, 97, 64}, {1, 203, 17, 128}, {1, 64, 65, 128}};

test::RungError measure(const test::AttentionRungRun& run) {
  return test::fa2_rung_error(run, run.rung.facts.tiles(run.c.shape.d));
}

template <Backend B>
void every_rung_equals_the_cpu_step() {
  // And keys masked with -inf scores by head: fully masked rows, and a first tile whose
  // masked keys fill a warp's 16 (or a 32-key step) while the tile's others do not.
  const bool small = test::small_shapes();
  std::vector<test::AttentionCase> cases = test::attention_cases(
      small ? kRaceShapes : kShapes, {false, true}, {Dtype::fp16, Dtype::bf16});
  for (const test::AttentionCase& c : test::masked_attention_cases(
           small ? test::kAttentionMaskedTileRaceShapes : test::kAttentionMaskedTileShapes,
           {Dtype::fp16, Dtype::bf16}))
    cases.push_back(c);
  test::check_attention_ladder(B, kernel_ladder<B>(), cases, kSeed, measure);
}

template <Backend B>
void every_rung_masks_the_diagonal_at_every_alignment() {
  // The scheduled rungs mask only the key steps the diagonal crosses (eq. 6) and every rung
  // skips the K/V tiles past it: lk - lq over every residue modulo 128, the least common
  // multiple of every rung's Br (64, 128), Bc (64), warp rows (16, 32) and softmax step (64,
  // 32 keys). One residue per case, at d = 64; at d = 128 the residues modulo 32, where
  // fa2_register_blocked's softmax step is 32 keys, the other tiles those of d = 64
  // (test::fa2_diagonal_cases).
  int period = 1;
  for (const Rung<AttentionArgs>& rung : kernel_ladder<B>())
    for (int d : {64, 128}) {
      const TileShape t = rung.facts.tiles(d);
      for (int size : {t.br, t.bc, 32}) period = std::lcm(period, size);
    }
  REQUIRE(period == 128);
  test::check_attention_ladder(B, kernel_ladder<B>(), test::fa2_diagonal_cases(period), kSeed + 1,
                               measure);
}

/// The bias of `o` toward zero against the fp64 `ref`: sum (o - ref) sign(ref) / sum |ref|
/// over the elements where ref != 0, a relative measure in which an unbiased rounding averages
/// out and a rounding toward zero does not.
double bias_toward_zero(const std::vector<float>& o, const std::vector<double>& ref) {
  double signed_sum = 0.0, size = 0.0;
  for (std::size_t e = 0; e < o.size(); ++e) {
    if (ref[e] == 0.0) continue;
    signed_sum += (double(o[e]) - ref[e]) * (ref[e] > 0.0 ? 1.0 : -1.0);
    size += std::fabs(ref[e]);
  }
  return signed_sum / size;
}

template <Backend B>
void every_rung_rounds_p_to_nearest() {
  // Eq. (1): P~ is packed to the 16-bit type by round-to-nearest-even, whose errors have mean 0;
  // the chain bounds hold any rounding of at most 2u per product, so a P~ truncated toward zero
  // (too small by up to 2u, about u on average, in units of P) passes them. It does not pass
  // this: O = sum P~ v / l with l summed from the unrounded P~, so truncation shrinks every
  // |O| by the average relative error of its P~, while round-to-nearest leaves a mean of about
  // u / sqrt(12 lk N) over N outputs of lk terms each (and O's own final rounding, also to
  // nearest, about u / sqrt(12 N)). 256 rows x 64 columns x 256 keys, randn: round-to-nearest
  // stays within u / 16 (measured: 0.002 u in fp16, -0.008 u in bf16); P~ truncated to fp16's
  // mantissa measured -0.54 u to -0.63 u in fp16, -0.074 u in bf16.
  const AttentionShape shape{1, 256, 256, 64};
  for (Dtype dtype : {Dtype::fp16, Dtype::bf16}) {
    const std::string type = to_string(dtype);
    CAPTURE(type);
    const float scale = default_scale(shape.d);
    const AttentionInputs in =
        ch06::round_inputs(make_attention_inputs(ScoreKind::randn, shape, scale, kSeed), dtype);
    const ref::Attention r = ref::attention(in, shape, scale, false, false);
    for (const Rung<AttentionArgs>& rung : kernel_ladder<B>()) {
      const std::string running = rung.name;
      CAPTURE(running);
      const std::optional<test::RungOutput> run =
          test::run_attention_rung(B, rung, in, shape, scale, false, dtype);
      REQUIRE(run);
      const double bias = bias_toward_zero(run->out.o, r.o);
      CHECK_MESSAGE(std::fabs(bias) <= ch06::unit_roundoff(dtype) / 16,
                    "mean error toward zero: ", bias / ch06::unit_roundoff(dtype), " u");
    }
  }
}

template <Backend B>
void every_rung_rejects_other_head_dimensions() {
  for (const Rung<AttentionArgs>& rung : kernel_ladder<B>()) {
    for (int d : {16, 96, 256}) {
      CAPTURE(d);
      CAPTURE(rung.name);
      test::check_rung_refuses(B, rung, {1, 2, 2, d}, Dtype::fp16, "64 or 128");
    }
    test::check_rung_refuses(B, rung, {1, 2, 2, 64}, Dtype::fp32, "fp32");
  }
}

template <Backend B>
void the_scheduled_rungs_reject_a_scale_that_is_not_positive() {
  // Their row max is taken over the unscaled scores (eq. 5): with scale <= 0 it would be the
  // min. Their records say so (limits.positive_scale); each rung that says so refuses.
  CHECK(Rungs<B>::fa2_scheduled().limits.positive_scale);
  CHECK(Rungs<B>::fa2_register_blocked().limits.positive_scale);
  const AttentionShape shape{1, 3, 5, 64};
  const AttentionInputs in = make_attention_inputs(ScoreKind::randn, shape, 1.f, kSeed);
  for (const Rung<AttentionArgs>& rung : kernel_ladder<B>()) {
    if (!rung.limits.positive_scale) continue;
    const std::string name = rung.name;
    for (float scale : {0.f, -0.125f}) {
      CAPTURE(scale);
      CAPTURE(name);
      AttentionBuffers buffers(B, in, shape, scale, false, Dtype::fp16, rung.limits.outputs);
      std::string message;
      try {
        run_rung(rung, buffers.args);
      } catch (const std::invalid_argument& e) {
        message = e.what();
      }
      CHECK_MESSAGE(message.find(name + ": the softmax scale must be positive") == 0,
                    "message: ", message);
    }
  }
}

}  // namespace

WB_KERNEL_TEST_CASE(
    "every FA2 rung at speed equals the CPU step and the rung before it with and without the "
    "mask in fp16 and bf16",
    every_rung_equals_the_cpu_step)
WB_KERNEL_TEST_CASE("every FA2 rung at speed masks the diagonal at every alignment with the tiles",
                    every_rung_masks_the_diagonal_at_every_alignment)
WB_KERNEL_TEST_CASE("every FA2 rung at speed rounds P~ to nearest: no mean error toward zero",
                    every_rung_rounds_p_to_nearest)
WB_KERNEL_TEST_CASE("every rung rejects head dimensions other than 64 and 128 and fp32",
                    every_rung_rejects_other_head_dimensions)
WB_KERNEL_TEST_CASE("the scheduled rungs reject a softmax scale that is not positive",
                    the_scheduled_rungs_reject_a_scale_that_is_not_positive)
