// Chapter 03's kernels: the fast rungs' plans and the dispatcher's rule at their boundaries,
// the refusals (backend-neutral), then every rung of the kernel ladder against the CPU step, the
// rung before and fp64, in fp32, fp16 and bf16 (tests/block_merge_kernel_checks.hpp), and
// every lane's copy of the merged (m, d) (tests/softmax_checks.hpp).
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "chapters/03_block_merge/block_merge.hpp"
#include "chapters/03_block_merge/fast_plans.hpp"
#include "common/dtype.hpp"
#include "common/half.hpp"
#include "common/inputs.hpp"
#include "common/row_plan.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"
#include "common/warp.hpp"
#include "tests/block_merge_kernel_checks.hpp"
#include "tests/block_merge_laws.hpp"
#include "tests/softmax_checks.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch03;
using namespace wb::test::block_merge;

TEST_SUITE("cpu") {
  TEST_CASE("the fast dispatcher picks its rung, group and bucket at every boundary") {
    // Up to 4 KiB rows (1024 floats, 2048 halves), lane_groups: with vectors (cols a multiple of
    // the width, 4 floats or 8 halves, and aligned pointers) one vector per lane in a group of
    // the next power of 2 of vectors up to 32 lanes, then the whole warp with a power of 2 of
    // vectors each; without, warp_registers' plan (the warp, a power of 2 of entries each).
    // Past that, block_cached while two blocks' rows and warps' pairs fit on an H100 SM (232448
    // bytes a block may opt in to, plus 1 KiB the SM keeps back per block: 115712 bytes each,
    // 28912 floats), block_vec beyond. `path` is fp32's; 16-bit rows move at 2048 and 57824.
    alignas(16) static unsigned char buffer[32];
    const void* aligned = buffer;
    constexpr std::size_t kSm90 = 232448;
    struct Lanes {
      int group, per_lane;
      bool vec;
    };
    struct Expect {
      int cols;
      RowCache path;  // registers: lane_groups; shared: block_cached; none: block_vec
      Lanes fp32, bits16;
    };
    const RowCache reg = RowCache::registers, cached = RowCache::shared;
    const RowCache block = RowCache::none;
    // A block rung's 256 threads, its values not in registers.
    const Lanes none = {kBlockVecThreads, 0, false}, none_vec = {kBlockVecThreads, 0, true};
    const Expect expected[] = {
        {1, reg, {32, 1, false}, {32, 1, false}},     {8, reg, {2, 4, true}, {1, 8, true}},
        {24, reg, {8, 4, true}, {4, 8, true}},        {32, reg, {8, 4, true}, {4, 8, true}},
        {33, reg, {32, 2, false}, {32, 2, false}},    {64, reg, {16, 4, true}, {8, 8, true}},
        {65, reg, {32, 4, false}, {32, 4, false}},    {128, reg, {32, 4, true}, {16, 8, true}},
        {129, reg, {32, 8, false}, {32, 8, false}},   {136, reg, {32, 8, true}, {32, 8, true}},
        {256, reg, {32, 8, true}, {32, 8, true}},     {257, reg, {32, 16, false}, {32, 16, false}},
        {512, reg, {32, 16, true}, {32, 16, true}},   {513, reg, {32, 32, false}, {32, 32, false}},
        {1020, reg, {32, 32, true}, {32, 32, false}}, {1024, reg, {32, 32, true}, {32, 32, true}},
        {1025, cached, none, {32, 64, false}},        {1032, cached, none_vec, {32, 64, true}},
        {2048, cached, none_vec, {32, 64, true}},     {2049, cached, none, none},
        {28912, cached, none_vec, none_vec},          {28913, block, none, none},
        {58096, block, none_vec, none_vec},           {116192, block, none_vec, none_vec}};
    for (const Expect& e : expected) {
      for (Dtype t : {Dtype::fp32, Dtype::fp16, Dtype::bf16}) {
        CAPTURE(e.cols);
        const std::string dtype = to_string(t);
        CAPTURE(dtype);
        const Lanes& l = t == Dtype::fp32 ? e.fp32 : e.bits16;
        // A 16-bit row is half the bytes: in registers up to 2048 columns, two block_cached
        // blocks fit up to 57824.
        RowCache path = e.path;
        if (t != Dtype::fp32 && e.cols > 1024)
          path = e.cols <= 2048 ? reg : e.cols <= 57824 ? cached : block;
        const auto plan_at = [&](const void* x, const void* y) {
          return plan_fast_softmax(e.cols, t, can_vectorize(x, y, e.cols, t), kSm90);
        };
        const RowPlan plan = plan_at(aligned, aligned);
        CHECK(plan.cache == path);
        CHECK(plan.threads == l.group);
        CHECK(plan.cols_per_lane == l.per_lane);
        CHECK(plan.vectorized() == l.vec);
        CHECK(plan.merges == (path == reg ? butterfly_levels(l.group) : kBlockMergeLevels));
        // One element past a 16-byte boundary, for x or for y: never vectors, the same rung.
        const void* off = buffer + dtype_bytes(t);
        CHECK_FALSE(plan_at(off, aligned).vectorized());
        CHECK_FALSE(plan_at(aligned, off).vectorized());
        CHECK(plan_at(off, off).cache == path);
      }
    }
    CHECK(plan_fast_softmax(57824, Dtype::fp16, true, kSm90).cache == cached);
    CHECK(plan_fast_softmax(57825, Dtype::fp16, true, kSm90).cache == block);
    // The simulator models that device.
    CHECK(Kernels<Backend::sim>::max_dynamic_shared_bytes() == kSm90);
  }

  TEST_CASE("the kernel shapes run lane_groups with every width of group in every type") {
    // 1 to 32 lanes per row in the sim suite; in race mode the warp and a group that shares a
    // warp between rows. bf16 plans as fp16 (the same bytes).
    alignas(16) static unsigned char buffer[16];
    for (Dtype t : {Dtype::fp32, Dtype::fp16}) {
      const std::string dtype = to_string(t);
      CAPTURE(dtype);
      const auto widths = [&](const std::vector<Shape>& shapes) {
        std::set<int> w;
        for (const Shape& s : shapes)
          w.insert(lane_groups_plan(s.cols, t, can_vectorize(buffer, buffer, s.cols, t)).threads);
        return w;
      };
      CHECK(widths(kFastShapes) == std::set<int>{1, 2, 4, 8, 16, 32});
      const std::set<int> race = widths(kFastRaceShapes);
      CHECK(race.count(32) == 1);
      CHECK(*race.begin() < 32);
    }
  }

  TEST_CASE("fast rung inputs are rounded to nearest even like the GPU conversions") {
    const std::vector<float> x = {1.f / 3.f, -2.71828f, 1e4f + 0.3f, -kInf, 70000.f, 1e-6f};
    const std::vector<float> h = round_elements(x, Dtype::fp16);
    const std::vector<float> b = round_elements(x, Dtype::bf16);
    CHECK(round_elements(x, Dtype::fp32) == x);
    for (std::size_t i = 0; i < x.size(); ++i) {
      CHECK(h[i] == round_to_half(x[i]));
      CHECK(b[i] == round_to_bf16(x[i]));
    }
    CHECK(h[4] == kInf);  // past fp16's largest finite value, 65504
    CHECK(encode_elements(x, Dtype::fp16).size() == 2 * x.size());
  }

  TEST_CASE("a rung refuses before launching what its limits do not take and names the limit") {
    const Rung<RowArgs> warp_rung = Rungs<Backend::sim>::warp_registers();
    const Rung<RowArgs> online_rung = Rungs<Backend::sim>::block_per_row_online();
    const Rung<RowArgs>* warp = &warp_rung;
    const Rung<RowArgs>* online = &online_rung;
    // Null pointers: a launch would fault, so the refusal must come first.
    CHECK_THROWS_WITH_AS(run_rung(*warp, RowArgs{nullptr, nullptr, 2, 1025, Dtype::fp32}),
                         "warp_registers: rows must be >= 1 and cols in [1, 1024] for fp32, got "
                         "(2, 1025)",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(run_rung(*warp, RowArgs{nullptr, nullptr, 2, 2049, Dtype::fp16}),
                         "warp_registers: rows must be >= 1 and cols in [1, 2048] for fp16, got "
                         "(2, 2049)",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(run_rung(*online, RowArgs{nullptr, nullptr, 2, 64, Dtype::bf16}),
                         "block_per_row_online: takes fp32 elements, not bf16",
                         std::invalid_argument);
    unsigned char row[1];  // never launched: only the limits are read
    CHECK(why_refused(*warp, RowArgs{row, row, 2, 2048, Dtype::bf16}).empty());
    CHECK(why_refused(*warp, RowArgs{row, row, 2, 1024, Dtype::fp32}).empty());
  }
}

namespace {

template <Backend B>
void every_kernel_equals_the_cpu_step() {
  // The softmax shapes, and the dispatcher's bucket edges for the fast rungs.
  std::vector<test::SoftmaxCase> cases = test::softmax_cases();
  for (const test::SoftmaxCase& c : fast_cases({Dtype::fp32})) cases.push_back(c);
  test::check_softmax_ladder(
      B, kernel_ladder<B>(),
      [](const std::vector<float>& x, int rows, int cols) {
        return softmax_blocked(x, rows, cols, kCpuBlock);
      },
      // The tolerance policy: at most twice the CPU step's error, plus the rung's floor; and
      // at most twice the CPU step's stated bound, plus the same floor.
      [](const Rung<RowArgs>& rung, const RowArgs& a) {
        return rung_floor(rung, a.x, a.y, a.cols, a.dtype);
      },
      blocked_cpu_bound, kSeed, cases);
}

// The fast rungs and the dispatcher on fp16 and bf16, against the CPU step on the same
// rounded inputs (the fp64 reference is computed from them too).
template <Backend B>
void every_fast_kernel_equals_the_cpu_step_in_16_bits() {
  // The rungs that take 16-bit elements (the fp32-only ones would take none of the cases).
  test::check_softmax_ladder(
      B, rungs_taking(kernel_ladder<B>(), Dtype::fp16),
      [](const std::vector<float>& x, int rows, int cols) {
        return softmax_blocked(x, rows, cols, kCpuBlock);
      },
      [](const Rung<RowArgs>& rung, const RowArgs& a) {
        return rung_floor(rung, a.x, a.y, a.cols, a.dtype);
      },
      blocked_cpu_bound, kSeed, fast_cases({Dtype::fp16, Dtype::bf16}));
}

// At every bucket edge, in every type: no byte around y written, and fully -inf rows zeros.
template <Backend B>
void fast_kernels_write_only_their_rows() {
  for_each_fast_case<B>(fast_shapes(), [](const Rung<RowArgs>& rung, Dtype t, const Shape& s) {
    check_fast_kernel<B>(rung, t, s.rows, s.cols, InputKind::neg_inf_rows, 0, 0);
  });
}

// One element past the 16-byte boundary: the same kernels on the scalar path, on shapes
// whose aligned run takes vectors.
template <Backend B>
void misaligned_rows_take_the_scalar_path() {
  const std::vector<Shape> shapes =
      test::small_shapes()
          ? std::vector<Shape>{{3, 136}, {2, 1040}}
          : std::vector<Shape>{{5, 256}, {3, 1024}, {2, 1032}, {2, 2048}, {3, 4096}};
  for_each_fast_case<B>(shapes, [](const Rung<RowArgs>& rung, Dtype t, const Shape& s) {
    // x and y one element off, and each alone (a kernel that checked one pointer only would
    // take vectors on the other).
    const std::size_t off = dtype_bytes(t);
    for (InputKind kind : {InputKind::outliers, InputKind::large_offset, InputKind::neg_inf_rows}) {
      const std::string input = to_string(kind);
      CAPTURE(input);
      check_fast_kernel<B>(rung, t, s.rows, s.cols, kind, off, off);
    }
    check_fast_kernel<B>(rung, t, s.rows, s.cols, InputKind::outliers, off, 0);
    check_fast_kernel<B>(rung, t, s.rows, s.cols, InputKind::outliers, 0, off);
  });
}

// Every lane ends the butterfly with the same (m, d) (block_merge.md: lanes l and l ^ k compute
// md_merge(a, b) and md_merge(b, a), the same bits by eq. (5)), and every thread of a block
// merges the warps' pairs itself: each normalizes its entries with the same bits, in every
// type.
template <Backend B>
void every_lane_normalizes_with_the_same_statistics() {
  test::check_softmax_lanes_agree(B, kernel_ladder<B>(), {Dtype::fp32, Dtype::fp16, Dtype::bf16},
                                  kSeed);
}

}  // namespace

WB_KERNEL_TEST_CASE(
    "every kernel equals the CPU blocked online softmax on adversarial shapes and inputs",
    every_kernel_equals_the_cpu_step)
WB_KERNEL_TEST_CASE("the fast kernels equal the CPU step in fp16 and bf16",
                    every_fast_kernel_equals_the_cpu_step_in_16_bits)
WB_KERNEL_TEST_CASE("the fast kernels write only their rows and give zeros for fully masked rows",
                    fast_kernels_write_only_their_rows)
WB_KERNEL_TEST_CASE("the fast kernels on misaligned rows take the scalar path and stay exact",
                    misaligned_rows_take_the_scalar_path)
WB_KERNEL_TEST_CASE("equal entries of a row give equal bits whichever lane holds them",
                    every_lane_normalizes_with_the_same_statistics)
