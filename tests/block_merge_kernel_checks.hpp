// Chapter 03's tests, the kernels (tests/test_03_block_merge.cpp): each rung's floor from
// block_merge.md's eq. (6), the shapes at the dispatcher's bucket edges, the 16-bit chain
// check, and the check of one fast rung on a row placed anywhere in a padded buffer.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "chapters/03_block_merge/block_merge.hpp"
#include "chapters/03_block_merge/fast_plans.hpp"
#include "common/buffer.hpp"
#include "common/compare.hpp"
#include "common/dtype.hpp"
#include "common/inputs.hpp"
#include "common/reference.hpp"
#include "common/row_plan.hpp"
#include "common/rung.hpp"
#include "common/rung_buffers.hpp"
#include "tests/block_merge_laws.hpp"
#include "tests/ladder_checks.hpp"
#include "tests/softmax_checks.hpp"
#include "tests/support.hpp"

namespace wb::test::block_merge {

// ------------------------------------------------------------------------------------------
// The CPU step's stated bound, and each rung's floor
// ------------------------------------------------------------------------------------------

// The blocked CPU step with blocks of kCpuBlock against fp64: the cpu suite holds it within
// twice chapter 02's error plus blocked_cpu_floor, and chapter 02 is within online_cpu_bound
// (tests/softmax_checks.hpp). The kernels' own bound against fp64 builds on it.
inline double blocked_cpu_bound(int cols) {
  return chain_bound(online_cpu_bound(cols), blocked_cpu_floor(cols, kCpuBlock));
}

// A kernel against the CPU step, both against fp64. Their d differ by at most the kernel's d
// bound (`steps` operations on a term's path in the kernel: its thread's share, then merges,
// with CUDA's exp) plus the CPU step's. y_i = e^{x_i - m} (1/d) differs by CUDA's exp against
// glibc's (2 + 1 ulp, 6 u) and the two reciprocals (2 u).
inline double kernel_floor_for_steps(int cols, int steps) {
  return d_bound(steps, kCudaExpErr) + d_bound(blocked_steps(cols, kCpuBlock), kHostExpErr) +
         8 * kFloatEps;
}

// Operations on a term's path in a rung running `plan` (its record's RungFacts::row_plan) on
// rows of `cols` entries: a lane holding its entries in registers sums its cols_per_lane of
// them directly (eq. 1); otherwise a thread reads ceil(cols / (width threads)) accesses, a
// 16-byte vector of `width` entries folded directly and merged into the thread's pair
// (width + 1 steps), a single entry by chapter 02's update (1 step). Then the plan's merges:
// log2 of a group's lanes (a warp: 5), a block of 256's 5 within each warp and 5 over the 8
// warps' pairs.
inline int plan_steps(const RowPlan& plan, int cols) {
  if (plan.cache == RowCache::registers) return plan.cols_per_lane + plan.merges;
  const int per_access = plan.width * plan.threads;
  const int accesses = (cols + per_access - 1) / per_access;
  return accesses * (plan.vectorized() ? plan.width + 1 : 1) + plan.merges;
}

// The plan `rung` runs on rows of `cols` elements of `t` at x and y (its record's fact, on the
// device of the ladder's backend: its shared memory decides what the dispatcher picks).
inline RowPlan rung_plan(const Rung<RowArgs>& rung, const void* x, const void* y, int cols,
                         Dtype t) {
  REQUIRE_MESSAGE(static_cast<bool>(rung.facts.row_plan), rung.name, " states no row plan");
  return rung.facts.row_plan(cols, t, can_vectorize(x, y, cols, t));
}

// The floor of `rung` on rows of `cols` elements of `t` at x and y, in float.
inline double rung_floor(const Rung<RowArgs>& rung, const void* x, const void* y, int cols,
                         Dtype t) {
  return kernel_floor_for_steps(cols, plan_steps(rung_plan(rung, x, y, cols, t), cols));
}

// ------------------------------------------------------------------------------------------
// The shapes and the cases
// ------------------------------------------------------------------------------------------

using Shape = RowShape;

// The bucket edges (1024 and 2048 columns: the registers' last rows of fp32 and of 16-bit
// types) and the required irregular ones, rows never a multiple of the rows per
// block of the register rungs (4 warps, each 32 / group_width rows), and lane_groups' vector
// groups (4 to 248 columns: 1 to 32 lanes of one float4 or 8 halves, 12 and 24 leaving lanes
// of a group idle): every group width in fp32 and in the 16-bit types.
inline const std::vector<Shape> kFastShapes = {
    {5, 1},    {3, 2},    {7, 4},    {9, 8},    {5, 12},  {9, 16},   {11, 24},  {7, 31},
    {5, 32},   {6, 33},   {3, 64},   {5, 65},   {6, 120}, {2, 127},  {3, 128},  {5, 129},
    {5, 248},  {3, 256},  {2, 257},  {3, 512},  {2, 513}, {3, 1000}, {5, 1023}, {3, 1024},
    {2, 1025}, {5, 2047}, {3, 2048}, {2, 2049}, {3, 4096}};
// Race mode checks shared memory, which the block rungs' rows past 1024 columns use, and the
// warp shuffles, which lane_groups confines to a group's lanes (16 columns: groups of 4 lanes
// in fp32, 2 in the 16-bit types).
inline const std::vector<Shape> kFastRaceShapes = {{2, 1}, {9, 16}, {3, 33}, {5, 136}, {2, 1040}};

inline const std::vector<Shape>& fast_shapes() {
  return small_shapes() ? kFastRaceShapes : kFastShapes;
}

// Every fast shape of this binary times every input kind, in each of `dtypes`; and, outside
// race mode, the dispatcher's last block_cached row and one past it (block_vec), and
// block_cached's longest row on an H100 (the simulator's device: 232448 bytes to opt in to,
// less 64 for the warps' pairs) and one past it (refused by block_cached), one row of randn
// each, in fp32 and fp16 (bf16's rows are fp16's bytes).
inline std::vector<SoftmaxCase> fast_cases(const std::vector<Dtype>& dtypes) {
  std::vector<SoftmaxCase> cases;
  for (Dtype t : dtypes) {
    for (const Shape& s : fast_shapes())
      for (InputKind kind : all_input_kinds()) cases.push_back({s, kind, t});
    if (small_shapes() || t == Dtype::bf16) continue;
    const int dispatched = t == Dtype::fp32 ? 28912 : 57824;
    const int last = t == Dtype::fp32 ? 58096 : 116192;
    for (int cols : {dispatched, dispatched + 1, last, last + 1})
      cases.push_back({{1, cols}, InputKind::randn, t});
  }
  return cases;
}

// ------------------------------------------------------------------------------------------
// One fast rung on a row anywhere in memory
// ------------------------------------------------------------------------------------------

// Runs `rung` on x rounded to `t`, checks it against the CPU step on the same rounded values,
// that fully -inf rows give zeros, and that nothing before or after y is written. `x_offset`,
// `y_offset`: bytes past a 16-byte boundary where x and y start (one element, for either,
// forces the scalar path).
template <Backend B>
void check_fast_kernel(const Rung<RowArgs>& rung, Dtype t, int rows, int cols, InputKind kind,
                       std::size_t x_offset, std::size_t y_offset) {
  const std::vector<float> x = make_input(kind, rows, cols, kSeed);
  const std::vector<float> rounded = round_elements(x, t);            // the values the kernel sees
  const std::vector<double> ref = ref::softmax(rounded, rows, cols);  // fp64 from them
  const ErrorReport cpu = compare(ch03::softmax_blocked(rounded, rows, cols, kCpuBlock), ref);

  const std::vector<unsigned char> in = encode_elements(x, t);
  const std::size_t bytes = in.size();
  std::vector<unsigned char> padded(x_offset + bytes + 16, 0);
  std::copy(in.begin(), in.end(), padded.begin() + static_cast<std::ptrdiff_t>(x_offset));
  DeviceBuffer<unsigned char> dx(B, padded);
  DeviceBuffer<unsigned char> dy(B, y_offset + bytes + 16);
  const RowArgs args{dx.data() + x_offset, dy.data() + y_offset, rows, cols, t};
  if (x_offset % kVecBytes != 0 || y_offset % kVecBytes != 0)
    REQUIRE_FALSE(rung_plan(rung, args.x, args.y, cols, t).vectorized());
  run_rung(rung, args);
  const std::vector<unsigned char> out = dy.download();
  const std::vector<float> y = decode_elements(out.data() + y_offset, x.size(), t);

  // The float computation: at most twice the CPU step's error plus the floor (6) gives the
  // kernel with CUDA's exp; then the rounding to t (rounded_bound). And the same with the CPU
  // step's stated bound in place of its error: the kernel's own bound against fp64.
  const double floor = rung_floor(rung, args.x, args.y, cols, t);
  const double bound = rounded_bound(chain_bound(cpu.max_rel, floor), t);
  const double own_bound = rounded_bound(chain_bound(blocked_cpu_bound(cols), floor), t);
  const RelError e = rel_error(y, ref, output_rounding(t).tiny);
  const ErrorReport kinds = compare(y, ref);
  CHECK_MESSAGE(kinds.nonfinite_mismatches == 0, "non-finite output: ", kinds.describe());
  CHECK_MESSAGE(e.max_rel <= bound, "relative error ", e.max_rel, " at [", e.worst,
                "] = ", y[e.worst], " vs ", ref[e.worst], " exceeds ", bound);
  CHECK_MESSAGE(e.max_rel <= own_bound, "relative error ", e.max_rel, " at [", e.worst, "] = ",
                y[e.worst], " vs ", ref[e.worst], " exceeds the kernel's own bound against fp64 ",
                own_bound);
  // The padding around y still holds the 0xff bytes y's buffer started with (not zeros: a
  // fully masked row's outputs are zeros): no write before the row or past its end.
  std::size_t touched = 0;
  for (std::size_t i = 0; i < out.size(); ++i)
    touched += (i < y_offset || i >= y_offset + bytes) && out[i] != 0xff;
  CHECK(touched == 0);

  for (int row = 0; row < rows; ++row) {  // a fully -inf row: exactly zeros, never NaN
    const std::size_t begin = static_cast<std::size_t>(row) * cols;
    bool all_inf = true;
    for (int c = 0; c < cols; ++c) all_inf = all_inf && rounded[begin + c] == -kInf;
    if (!all_inf) continue;
    for (int c = 0; c < cols; ++c) CHECK(y[begin + c] == 0.f);
  }
}

// For every rung of the ladder that takes all three types (the fast ones), every type, and
// every shape of `shapes` the rung takes: body(rung, type, shape), all three captured.
template <Backend B, typename Body>
void for_each_fast_case(const std::vector<Shape>& shapes, Body&& body) {
  for (const Rung<RowArgs>& rung : ch03::kernel_ladder<B>()) {
    if (!rung.limits.takes(Dtype::fp16)) continue;
    for (Dtype t : test::dtypes_of_this_run({Dtype::fp32, Dtype::fp16, Dtype::bf16})) {
      for (const Shape& s : shapes) {
        if (s.cols > rung.limits.max_cols_of(t)) continue;
        const std::string kernel_name = rung.name;
        const std::string dtype = to_string(t);
        CAPTURE(kernel_name);
        CAPTURE(dtype);
        CAPTURE(s.rows);
        CAPTURE(s.cols);
        body(rung, t, s);
      }
    }
  }
}

}  // namespace wb::test::block_merge
