// Chapter 03: the block-associative (m, d) merge. The monoid laws as property tests over
// many seeded cases (generic over the merge, so that broken merges can be shown to fail
// them), the blocked CPU step against chapter 02's, then every kernel against the CPU step.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "chapters/02_online_softmax/online_softmax.hpp"
#include "chapters/03_block_merge/block_merge.hpp"
#include "chapters/03_block_merge/md_merge.hpp"
#include "common/buffer.hpp"
#include "common/half.hpp"
#include "common/inputs.hpp"
#include "common/reference.hpp"
#include "tests/softmax_checks.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch03;

namespace {

constexpr std::uint64_t kSeed = 2024;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int kLawCases = 400;  // seeded random rows, split and merged in random ways

// glibc's expf is within 1 ulp (a relative 2u); CUDA's expf within 2 ulp (4u).
constexpr double kHostExpErr = 2 * kFloatEps;
constexpr double kCudaExpErr = 4 * kFloatEps;

// ------------------------------------------------------------------------------------------
// The error bound (block_merge.md, eq. 6)
// ------------------------------------------------------------------------------------------

// Relative error of a d computed by online updates and merges, where every entry's term passes
// at most `steps` operations (its block's updates plus the merges on its path to the root):
// the term e^{x_j - m} is born as e^{x_j - m_j} (exp_err, an add: u) and each later update or
// merge multiplies it by a factor e^{m_old - m_new} (exp_err, the product: u) and adds (u).
// The exponents' roundings, u |m_old - m_new| each, telescope along the path to
// u (m - x_j), which matters only while the term is in float's range: m - x_j <= 104.
// So |d - d_exact| <= (104 u + steps (exp_err + 2u)) d_exact, whatever the tree's shape.
double d_bound(int steps, double exp_err) {
  return 104 * kFloatEps + steps * (exp_err + 2 * kFloatEps);
}

// Two reductions of the same row agree within the sum of their bounds.
double agreement_bound(int steps_a, int steps_b) {
  return d_bound(steps_a, kHostExpErr) + d_bound(steps_b, kHostExpErr);
}

// The longest leaf-to-root path of a merge tree, in merges.
int depth(const MergeTree& tree) {
  std::vector<int> d(tree.nodes.size(), 0);
  for (std::size_t i = 0; i < tree.nodes.size(); ++i) {
    const MergeTree::Node& n = tree.nodes[i];
    if (n.block < 0)
      d[i] =
          1 + std::max(d[static_cast<std::size_t>(n.left)], d[static_cast<std::size_t>(n.right)]);
  }
  return tree.nodes.empty() ? 0 : d.back();
}

// ------------------------------------------------------------------------------------------
// Seeded cases: a row and the bounds that cut it into blocks
// ------------------------------------------------------------------------------------------

struct Case {
  std::string what;
  std::vector<float> x;     // the row
  std::vector<int> bounds;  // 0 = bounds[0] <= ... <= bounds[K] = x.size()
  int longest_block() const {
    int l = 0;
    for (std::size_t k = 0; k + 1 < bounds.size(); ++k) l = std::max(l, bounds[k + 1] - bounds[k]);
    return l;
  }
};

// Case i: a row of 0..199 entries of one of eight flavours, cut at random points. Every case
// has at least one empty block (a repeated bound); flavours add blocks that are all -inf,
// whole -inf rows, single-entry blocks, outliers x20, +1e4 offsets and blocks whose offsets
// differ by 1e4 (so e^{m_lo - m_hi} underflows to 0 inside the merge).
Case make_case(int i) {
  std::mt19937_64 rng(kSeed + static_cast<std::uint64_t>(i));
  const int flavour = i % 8;
  int n = static_cast<int>(rng() % 200);
  if (flavour == 6) n = 1 + static_cast<int>(rng() % 40);
  Case c;
  const InputKind kinds[] = {InputKind::randn, InputKind::outliers, InputKind::large_offset,
                             InputKind::neg_inf_entries};
  c.x = n > 0 ? make_input(kinds[flavour % 4], 1, n, rng()) : std::vector<float>{};
  if (flavour == 6) {  // every entry its own block
    for (int k = 0; k <= n; ++k) c.bounds.push_back(k);
  } else {
    const int cuts = 1 + static_cast<int>(rng() % 12);
    c.bounds = {0, n};
    for (int k = 0; k < cuts; ++k) c.bounds.push_back(static_cast<int>(rng() % (n + 1)));
  }
  c.bounds.push_back(c.bounds[rng() % c.bounds.size()]);  // an empty block, always
  std::sort(c.bounds.begin(), c.bounds.end());
  const int blocks = static_cast<int>(c.bounds.size()) - 1;
  const int chosen = static_cast<int>(rng() % blocks);
  const char* names[] = {"randn",
                         "outliers",
                         "randn + 1e4",
                         "-inf entries",
                         "an all -inf block",
                         "an all -inf row",
                         "single entries",
                         "offsets 0 or +-1e4 per block"};
  c.what = names[flavour];
  for (int k = 0; k < blocks; ++k) {
    for (int j = c.bounds[k]; j < c.bounds[k + 1]; ++j) {
      if (flavour == 4 && k == chosen) c.x[j] = -kInf;
      if (flavour == 5) c.x[j] = -kInf;
      if (flavour == 7) c.x[j] += 1e4f * static_cast<float>(static_cast<int>(k % 3) - 1);
    }
  }
  return c;
}

std::string describe(const Case& c, int i) {
  std::ostringstream s;
  s << "case " << i << " (" << c.what << ", " << c.x.size() << " entries, " << c.bounds.size() - 1
    << " blocks)";
  return s.str();
}

// fp64 sum_j e^{x_j - m} for the float max m of the row.
double exact_d(const std::vector<float>& x, float m) {
  if (m == -kInf) return 0.0;
  double d = 0.0;
  for (float v : x) d += std::exp(static_cast<double>(v) - m);
  return d;
}

// ------------------------------------------------------------------------------------------
// The laws, generic over the merge
// ------------------------------------------------------------------------------------------

using Merge = MD (*)(MD, MD);

struct LawResult {
  int checks = 0;
  int violations = 0;
  std::string first;  // the first violation, described
  void fail(const std::string& why) {
    if (violations++ == 0) first = why;
  }
};

bool same(MD a, MD b) {
  return a.m == b.m && a.d == b.d;
}  // NaN is never the same

std::string str(MD md) {
  std::ostringstream s;
  s.precision(9);
  s << "(" << md.m << ", " << md.d << ")";
  return s.str();
}

// Identity, eq. (3): merge(a, e) = merge(e, a) = a bit for bit, for every block's statistics
// and for e itself; never NaN.
LawResult identity_law(Merge merge) {
  LawResult r;
  for (int i = 0; i < kLawCases; ++i) {
    const Case c = make_case(i);
    std::vector<MD> leaves = blocks_stats(c.x.data(), c.bounds);
    leaves.push_back(md_identity());
    for (const MD& a : leaves) {
      ++r.checks;
      const MD right = merge(a, md_identity());
      const MD left = merge(md_identity(), a);
      if (!same(right, a) || !same(left, a))
        r.fail(describe(c, i) + ": merge(" + str(a) + ", e) = " + str(right) +
               ", merge(e, a) = " + str(left));
    }
  }
  return r;
}

// Commutativity: merge(a, b) = merge(b, a) bit for bit, for every pair of blocks of a case.
LawResult commutativity_law(Merge merge) {
  LawResult r;
  for (int i = 0; i < kLawCases; ++i) {
    const Case c = make_case(i);
    const std::vector<MD> leaves = blocks_stats(c.x.data(), c.bounds);
    for (const MD& a : leaves) {
      for (const MD& b : leaves) {
        ++r.checks;
        const MD ab = merge(a, b);
        const MD ba = merge(b, a);
        if (!same(ab, ba))
          r.fail(describe(c, i) + ": merge(" + str(a) + ", " + str(b) + ") = " + str(ab) +
                 " but merge(b, a) = " + str(ba));
      }
    }
  }
  return r;
}

// Associativity: merge(merge(a, b), c) and merge(a, merge(b, c)) have the same m exactly and
// d within twice the bound of two merges on given operands, (104 + 2 (2 + 2)) u each.
LawResult associativity_law(Merge merge) {
  LawResult r;
  const double bound = agreement_bound(2, 2);
  for (int i = 0; i < kLawCases; ++i) {
    const Case c = make_case(i);
    const std::vector<MD> leaves = blocks_stats(c.x.data(), c.bounds);
    const std::size_t k = leaves.size();
    for (std::size_t j = 0; j < k; ++j) {
      const MD& a = leaves[j];
      const MD& b = leaves[(j + 1) % k];
      const MD& cc = leaves[(j + 2) % k];
      ++r.checks;
      const MD left = merge(merge(a, b), cc);
      const MD right = merge(a, merge(b, cc));
      const bool ok = left.m == right.m && std::isfinite(left.d) && std::isfinite(right.d) &&
                      std::fabs(left.d - right.d) <= bound * std::max(left.d, right.d);
      if (!ok)
        r.fail(describe(c, i) + ": (a b) c = " + str(left) + " but a (b c) = " + str(right) +
               " for a = " + str(a) + ", b = " + str(b) + ", c = " + str(cc));
    }
  }
  return r;
}

// Order independence: the blocks reduced left to right, left to right in a random permutation,
// and over a random tree (random shape and operand order) all give the row's max exactly and
// a d within d_bound(longest block + depth) of the fp64 sum, hence within the sum of two
// such bounds of each other. A row of -inf only gives (-inf, 0) exactly, every way.
LawResult order_independence_law(Merge merge) {
  LawResult r;
  for (int i = 0; i < kLawCases; ++i) {
    const Case c = make_case(i);
    std::mt19937_64 rng(kSeed * 7 + static_cast<std::uint64_t>(i));
    const std::vector<MD> leaves = blocks_stats(c.x.data(), c.bounds);
    const int blocks = static_cast<int>(leaves.size());
    float m = -kInf;
    for (float v : c.x) m = std::fmax(m, v);
    const double d = exact_d(c.x, m);

    std::vector<int> order(static_cast<std::size_t>(blocks));
    for (int k = 0; k < blocks; ++k) order[k] = k;
    for (int k = blocks; k > 1; --k) std::swap(order[k - 1], order[rng() % k]);
    MergeTree permuted;
    int acc = permuted.add_leaf(order[0]);
    for (int k = 1; k < blocks; ++k) acc = permuted.add_merge(acc, permuted.add_leaf(order[k]));

    const MergeTree trees[] = {left_to_right_tree(blocks), permuted, random_tree(blocks, rng)};
    for (const MergeTree& tree : trees) {
      ++r.checks;
      const MD md = reduce_tree(tree, leaves, merge);
      const double bound = d_bound(c.longest_block() + depth(tree), kHostExpErr);
      const bool ok = md.m == m && std::isfinite(md.d) &&
                      (d == 0.0 ? md.d == 0.f : std::fabs(md.d - d) <= bound * d);
      if (!ok) {
        std::ostringstream s;
        s.precision(9);
        s << describe(c, i) << ": tree " << tree.to_string() << " gives " << str(md)
          << " where the row has (" << m << ", " << d << "), bound " << bound;
        r.fail(s.str());
      }
    }
  }
  return r;
}

// ------------------------------------------------------------------------------------------
// Broken merges, to show that the laws catch them
// ------------------------------------------------------------------------------------------

// Forgets to rescale d_b: right whenever b holds the larger max, wrong otherwise.
MD merge_without_rescaling_b(MD a, MD b) {
  const float m = std::fmax(a.m, b.m);
  const float scale_a = a.m == -kInf ? 0.f : std::exp(a.m - m);
  return {m, a.d * scale_a + b.d};
}

// Eq. (2) taken literally, without the -inf guard: e^{-inf - (-inf)} = e^{NaN}.
MD merge_without_inf_guard(MD a, MD b) {
  const float m = std::fmax(a.m, b.m);
  return {m, a.d * std::exp(a.m - m) + b.d * std::exp(b.m - m)};
}

// ------------------------------------------------------------------------------------------
// Shapes and floors for the softmax steps
// ------------------------------------------------------------------------------------------

using Shape = test::RowShape;
const std::vector<Shape>& kShapes = test::kSoftmaxShapes;

// The block size of the CPU step the kernels are compared with: divides none of the shapes.
constexpr int kCpuBlock = 100;

// Operations on a term's path in softmax_blocked: its block's updates (at most `block`) and
// the left-to-right merges (at most one per block; the first, with the identity, is exact).
int blocked_steps(int cols, int block) {
  return std::min(block, cols) + (cols + block - 1) / block;
}

// The blocked step against chapter 02's, both against fp64: y_i = e^{x_i - m} (1/d) runs the
// same float operations in both, so they differ only through d: the two d bounds, plus 2 u for
// the two reciprocals' roundings.
double blocked_cpu_floor(int cols, int block) {
  return d_bound(blocked_steps(cols, block), kHostExpErr) + d_bound(cols, kHostExpErr) +
         2 * kFloatEps;
}

// A kernel against the CPU step, both against fp64. Their d differ by at most the kernel's d
// bound (a slice of ceil(cols / threads) updates, then `merges` butterfly merges, with CUDA's
// exp) plus the CPU step's. y_i = e^{x_i - m} (1/d) differs by CUDA's exp against glibc's
// (2 + 1 ulp, 6 u) and the two reciprocals (2 u).
// `steps`: the operations on a term's path in the kernel (its thread's share, then merges).
double kernel_floor_for_steps(int cols, int steps) {
  return d_bound(steps, kCudaExpErr) + d_bound(blocked_steps(cols, kCpuBlock), kHostExpErr) +
         8 * kFloatEps;
}
double kernel_floor(int cols, int threads, int merges) {
  const int slice = (cols + threads - 1) / threads;
  return kernel_floor_for_steps(cols, slice + merges);
}

// Threads sharing a row and the butterfly merges on a term's path, per kernel: a warp merges
// in 5 steps; a block of 256 in 5 within each warp, then 5 over the 8 warps' pairs.
struct KernelShape {
  int threads, merges;
};
KernelShape kernel_shape(const std::string& name) {
  if (name == "block_per_row_online") return {256, 10};
  return {32, 5};  // warp_per_row_online
}

}  // namespace

TEST_SUITE("cpu") {
  TEST_CASE("merging with the identity returns the other operand bit for bit") {
    const LawResult r = identity_law(md_merge);
    CHECK(r.checks > kLawCases);
    CHECK_MESSAGE(r.violations == 0, r.first);
    // The identity with itself, and an all -inf block (the identity's own statistics).
    CHECK(same(md_merge(md_identity(), md_identity()), md_identity()));
    const float all_inf[] = {-kInf, -kInf, -kInf};
    CHECK(same(block_stats(all_inf, 3), md_identity()));
  }

  TEST_CASE("the merge is commutative bit for bit") {
    const LawResult r = commutativity_law(md_merge);
    CHECK(r.checks > kLawCases);
    CHECK_MESSAGE(r.violations == 0, r.first);
  }

  TEST_CASE("the merge is associative with m exact and d within the derived bound") {
    const LawResult r = associativity_law(md_merge);
    CHECK(r.checks > kLawCases);
    CHECK_MESSAGE(r.violations == 0, r.first);
  }

  TEST_CASE("any split any permutation and any merge tree give the same statistics") {
    const LawResult r = order_independence_law(md_merge);
    CHECK(r.checks == 3 * kLawCases);
    CHECK_MESSAGE(r.violations == 0, r.first);
  }

  TEST_CASE("a merge that forgets to rescale d_b fails the laws") {
    // The identity law cannot see this bug (with e on either side there is nothing to
    // rescale); commutativity, associativity and order independence each catch it.
    CHECK(identity_law(merge_without_rescaling_b).violations == 0);
    CHECK(commutativity_law(merge_without_rescaling_b).violations > 0);
    CHECK(associativity_law(merge_without_rescaling_b).violations > 0);
    CHECK(order_independence_law(merge_without_rescaling_b).violations > 0);
  }

  TEST_CASE("a merge without the minus infinity guard fails the identity law with NaN") {
    const LawResult r = identity_law(merge_without_inf_guard);
    CHECK(r.violations > 0);
    CHECK(std::isnan(merge_without_inf_guard(md_identity(), md_identity()).d));
    CHECK(order_independence_law(merge_without_inf_guard).violations > 0);
  }

  TEST_CASE("a block is exactly chapter 02's recurrence from the identity") {
    // One block of the whole row is chapter 02's online_stats, bit for bit: same operations.
    for (InputKind kind : all_input_kinds()) {
      const std::string input = to_string(kind);
      CAPTURE(input);
      const std::vector<float> x = make_input(kind, 1, 333, kSeed);
      CHECK(same(block_stats(x.data(), 333), ch02::online_stats(x.data(), 333)));
      CHECK(same(reduce_tree(left_to_right_tree(1), blocks_stats(x.data(), {0, 333})),
                 ch02::online_stats(x.data(), 333)));
    }
    CHECK(same(block_stats(nullptr, 0), md_identity()));       // an empty block
    CHECK(same(reduce_tree(MergeTree{}, {}), md_identity()));  // no blocks at all
  }

  TEST_CASE("blocked online softmax is within twice the online softmax error for any block size") {
    for (const Shape& s : kShapes) {
      for (InputKind kind : all_input_kinds()) {
        const std::vector<float> x = make_input(kind, s.rows, s.cols, kSeed);
        const std::vector<double> ref = ref::softmax(x, s.rows, s.cols);
        const ErrorReport previous = compare(ch02::softmax_online(x, s.rows, s.cols), ref);
        for (int block : {1, 2, 7, 31, 32, 33, kCpuBlock, s.cols, s.cols + 5}) {
          CAPTURE(s.rows);
          CAPTURE(s.cols);
          CAPTURE(block);
          const std::string input = to_string(kind);
          CAPTURE(input);
          const ErrorReport blocked = compare(softmax_blocked(x, s.rows, s.cols, block), ref);
          // The tolerance policy: twice chapter 02's error, plus the floor derived above.
          WB_CHECK_WITHIN_REL(blocked,
                              chain_bound(previous.max_rel, blocked_cpu_floor(s.cols, block)));
        }
      }
    }
  }

  TEST_CASE("blocked online softmax with one block is chapter 02 bit for bit") {
    const int rows = 17, cols = 257;
    for (InputKind kind : all_input_kinds()) {
      const std::string input = to_string(kind);
      CAPTURE(input);
      const std::vector<float> x = make_input(kind, rows, cols, kSeed);
      CHECK(softmax_blocked(x, rows, cols, cols) == ch02::softmax_online(x, rows, cols));
    }
  }

  TEST_CASE("the merge trees cover every block once") {
    std::mt19937_64 rng(kSeed);
    for (int blocks : {1, 2, 3, 8, 37}) {
      CAPTURE(blocks);
      for (const MergeTree& tree : {left_to_right_tree(blocks), random_tree(blocks, rng)}) {
        std::vector<int> seen(static_cast<std::size_t>(blocks), 0);
        int merges = 0;
        for (const MergeTree::Node& n : tree.nodes) {
          if (n.block >= 0)
            ++seen[static_cast<std::size_t>(n.block)];
          else
            ++merges;
        }
        CHECK(merges == blocks - 1);
        for (int v : seen) CHECK(v == 1);
      }
    }
  }
}

namespace {

template <Backend B>
void every_kernel_equals_the_cpu_step() {
  test::check_softmax_ladder(
      B, kernel_ladder<B>(),
      [](const std::vector<float>& x, int rows, int cols) {
        return softmax_blocked(x, rows, cols, kCpuBlock);
      },
      // The tolerance policy: at most twice the CPU step's error, plus the floor above.
      [](const NamedKernel& k, int cols) {
        const KernelShape ks = kernel_shape(k.name);
        return kernel_floor(cols, ks.threads, ks.merges);
      },
      kSeed);
}

}  // namespace

WB_KERNEL_TEST_CASE(
    "every kernel equals the CPU blocked online softmax on adversarial shapes and inputs",
    every_kernel_equals_the_cpu_step)

// ------------------------------------------------------------------------------------------
// The fast rungs (fast_softmax_kernels.cuh): registers, vectors, fp32, fp16 and bf16
// ------------------------------------------------------------------------------------------

TEST_SUITE("cpu") {
  TEST_CASE("the fast dispatcher picks its rung and bucket at every boundary") {
    // Each bucket of registers per lane ends at 32 x a power of 2; one past it starts the
    // next; 1025 leaves the registers for the block kernel. Vectors need cols a multiple of
    // the vector width (4 floats, 8 halves), whole vectors per lane and aligned pointers.
    alignas(16) static unsigned char buffer[32];
    const void* aligned = buffer;
    struct Expect {
      int cols;
      FastPath path;
      int per_lane;
      bool vec_fp32, vec_16bit;
    };
    const FastPath warp = FastPath::warp_registers;
    const FastPath block = FastPath::block_vec;
    const Expect expected[] = {
        {1, warp, 1, false, false},    {32, warp, 1, false, false},  {33, warp, 2, false, false},
        {64, warp, 2, false, false},   {65, warp, 4, false, false},  {128, warp, 4, true, false},
        {129, warp, 8, false, false},  {136, warp, 8, true, true},   {256, warp, 8, true, true},
        {257, warp, 16, false, false}, {512, warp, 16, true, true},  {513, warp, 32, false, false},
        {1020, warp, 32, true, false}, {1024, warp, 32, true, true}, {1025, block, 0, false, false},
        {1028, block, 0, true, false}, {1032, block, 0, true, true}, {4096, block, 0, true, true}};
    for (const Expect& e : expected) {
      for (Dtype t : {Dtype::fp32, Dtype::fp16, Dtype::bf16}) {
        CAPTURE(e.cols);
        const std::string dtype = to_string(t);
        CAPTURE(dtype);
        const FastPlan plan = plan_fast_softmax(aligned, aligned, e.cols, t);
        CHECK(plan.path == e.path);
        CHECK(plan.cols_per_lane == e.per_lane);
        CHECK(plan.vectorized == (t == Dtype::fp32 ? e.vec_fp32 : e.vec_16bit));
        // One element past a 16-byte boundary, for x or for y: never vectors.
        const void* off = buffer + dtype_bytes(t);
        CHECK_FALSE(plan_fast_softmax(off, aligned, e.cols, t).vectorized);
        CHECK_FALSE(plan_fast_softmax(aligned, off, e.cols, t).vectorized);
        CHECK(plan_fast_softmax(off, off, e.cols, t).path == e.path);
      }
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
}

namespace {

const Dtype kDtypes[] = {Dtype::fp32, Dtype::fp16, Dtype::bf16};

// The output's rounding to `t` is output_rounding(t) (common/dtype.hpp): half an ulp, 2^-11 of
// |y| for fp16, 2^-8 for bf16, 0 for fp32; below `tiny` (fp16's smallest normal 2^-14; FLT_MIN
// otherwise) the spacing stops shrinking, so the error is measured against max(|ref|, tiny).

// max_i |y_i - ref_i| / max(|ref_i|, tiny), and where it is; infinity for a NaN or inf where
// the reference is finite (compare() reports those too).
struct RelError {
  double max_rel = 0.0;
  std::size_t worst = 0;
};
RelError rel_error(const std::vector<float>& y, const std::vector<double>& ref, double tiny) {
  RelError e;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double err = std::isfinite(y[i])
                           ? std::fabs(y[i] - ref[i]) / std::max(std::fabs(ref[i]), tiny)
                           : std::numeric_limits<double>::infinity();
    if (!(err <= e.max_rel)) e = {err, i};
  }
  return e;
}

// Operations on a term's path in a fast rung (see kernel_floor): warp_registers sums its
// lane's cols_per_lane entries directly (eq. 1) and merges 5 times; block_vec folds each
// vector of kWidth entries directly and merges it into the thread's pair (kWidth + 1 per
// vector) or runs chapter 02's update per entry, then merges 10 times (5 in the warp, 5 over
// the 8 warps).
int fast_steps(const FastPlan& plan, int cols, Dtype t) {
  if (plan.path == FastPath::warp_registers) return plan.cols_per_lane + 5;
  const int width = plan.vectorized ? vec_width(t) : 1;
  const int per_thread = (cols + width * 256 - 1) / (width * 256);
  return per_thread * (width + 1) + 10;
}

// The shapes: the bucket edges and the required irregular ones, rows never a multiple of the
// 4 rows per block of warp_registers.
const std::vector<Shape> kFastShapes = {{5, 1},    {3, 2},    {7, 31},   {5, 32},  {6, 33},
                                        {3, 64},   {5, 65},   {2, 127},  {3, 128}, {5, 129},
                                        {3, 256},  {2, 257},  {3, 512},  {2, 513}, {3, 1000},
                                        {5, 1023}, {3, 1024}, {2, 1025}, {3, 4096}};
const std::vector<Shape> kFastRaceShapes = {{2, 1}, {3, 33}, {5, 136}, {2, 1040}};

// Runs `k` on x rounded to `t`, checks it against the CPU step on the same rounded values,
// and checks that fully -inf rows give zeros. `offset`: bytes past a 16-byte boundary where x
// and y start (one element forces the scalar path).
template <Backend B>
void check_fast_kernel(const FastKernel& k, Dtype t, int rows, int cols, InputKind kind,
                       std::size_t offset) {
  const std::vector<float> x = make_input(kind, rows, cols, kSeed);
  const std::vector<float> rounded = round_elements(x, t);            // the values the kernel sees
  const std::vector<double> ref = ref::softmax(rounded, rows, cols);  // fp64 from them
  const ErrorReport cpu = compare(softmax_blocked(rounded, rows, cols, kCpuBlock), ref);

  const std::vector<unsigned char> in = encode_elements(x, t);
  const std::size_t bytes = in.size();
  std::vector<unsigned char> padded(offset + bytes + 16, 0);
  std::copy(in.begin(), in.end(), padded.begin() + static_cast<std::ptrdiff_t>(offset));
  DeviceBuffer<unsigned char> dx(B, padded);
  DeviceBuffer<unsigned char> dy(B, padded.size());
  dy.fill_zero();
  const FastPlan plan = plan_fast_softmax(dx.data() + offset, dy.data() + offset, cols, t);
  if (offset % kVecBytes != 0) REQUIRE_FALSE(plan.vectorized);
  k.launch(dx.data() + offset, dy.data() + offset, rows, cols, t);
  const std::vector<unsigned char> out = dy.download();
  const std::vector<float> y = decode_elements(out.data() + offset, x.size(), t);

  // The float computation: at most twice the CPU step's error plus the floor (6) gives the
  // kernel with CUDA's exp. Then the rounding to t, relative half_ulp (1 + a) of |y|:
  // |round(y) - ref| <= (a + half_ulp (1 + a)) max(|ref|, tiny).
  const double a =
      chain_bound(cpu.max_rel, kernel_floor_for_steps(cols, fast_steps(plan, cols, t)));
  const OutputRounding r = output_rounding(t);
  const double bound = a + r.half_ulp * (1 + a);
  const RelError e = rel_error(y, ref, r.tiny);
  const ErrorReport kinds = compare(y, ref);
  CHECK_MESSAGE(kinds.nonfinite_mismatches == 0, "non-finite output: ", kinds.describe());
  CHECK_MESSAGE(e.max_rel <= bound, "relative error ", e.max_rel, " at [", e.worst,
                "] = ", y[e.worst], " vs ", ref[e.worst], " exceeds ", bound);
  // The padding around y is untouched: no write before the row or past its end.
  std::size_t touched = 0;
  for (std::size_t i = 0; i < out.size(); ++i)
    touched += (i < offset || i >= offset + bytes) && out[i] != 0;
  CHECK(touched == 0);

  for (int row = 0; row < rows; ++row) {  // a fully -inf row: exactly zeros, never NaN
    const std::size_t begin = static_cast<std::size_t>(row) * cols;
    bool all_inf = true;
    for (int c = 0; c < cols; ++c) all_inf = all_inf && rounded[begin + c] == -kInf;
    if (!all_inf) continue;
    for (int c = 0; c < cols; ++c) CHECK(y[begin + c] == 0.f);
  }
}

template <Backend B>
void every_fast_kernel_equals_the_cpu_step() {
  for (const FastKernel& k : fast_ladder<B>()) {
    for (Dtype t : kDtypes) {
      for (const Shape& s : test::kRaceMode ? kFastRaceShapes : kFastShapes) {
        const std::string kernel_name = k.name;
        const std::string dtype = to_string(t);
        CAPTURE(kernel_name);
        CAPTURE(dtype);
        CAPTURE(s.rows);
        CAPTURE(s.cols);
        if (s.cols > k.max_cols) {  // warp_registers past 1024: a clear error, no launch
          CHECK_THROWS_AS(k.launch(nullptr, nullptr, s.rows, s.cols, t), std::invalid_argument);
          continue;
        }
        for (InputKind kind : all_input_kinds()) {
          const std::string input = to_string(kind);
          CAPTURE(input);
          check_fast_kernel<B>(k, t, s.rows, s.cols, kind, 0);
        }
      }
    }
  }
}

// One element past the 16-byte boundary: the same kernels on the scalar path, on shapes
// whose aligned run takes vectors.
template <Backend B>
void misaligned_rows_take_the_scalar_path() {
  const std::vector<Shape> shapes =
      test::kRaceMode ? std::vector<Shape>{{3, 136}, {2, 1040}}
                      : std::vector<Shape>{{5, 256}, {3, 1024}, {2, 1032}, {3, 4096}};
  for (const FastKernel& k : fast_ladder<B>()) {
    for (Dtype t : kDtypes) {
      for (const Shape& s : shapes) {
        if (s.cols > k.max_cols) continue;
        const std::string kernel_name = k.name;
        const std::string dtype = to_string(t);
        CAPTURE(kernel_name);
        CAPTURE(dtype);
        CAPTURE(s.rows);
        CAPTURE(s.cols);
        for (InputKind kind :
             {InputKind::outliers, InputKind::large_offset, InputKind::neg_inf_rows}) {
          const std::string input = to_string(kind);
          CAPTURE(input);
          check_fast_kernel<B>(k, t, s.rows, s.cols, kind, dtype_bytes(t));
        }
      }
    }
  }
}

}  // namespace

WB_KERNEL_TEST_CASE("the fast kernels equal the CPU step in fp32 fp16 and bf16",
                    every_fast_kernel_equals_the_cpu_step)
WB_KERNEL_TEST_CASE("the fast kernels on misaligned rows take the scalar path and stay exact",
                    misaligned_rows_take_the_scalar_path)
