// wgmma in the simulator (common/hopper.cuh; the emulation in common/sim/hopper.cpp): one
// warpgroup writes A and B into dynamic shared memory with ordinary stores, in tiles built the
// way the PTX ISA's figures draw them (tests/sim/wgmma_tiles.hpp, not the simulator's address
// functions), fences them to the async proxy and multiplies them with wgmma_ss or wgmma_rs; D,
// stored by the documented accumulator layout, must be C plus the products in k order rounded
// after each addition (k16 steps in issue order) bit for bit, within Higham's bound of the
// exact sum, and exactly the element of B that A selects when A is a selection. Suite `wgmma`:
// every swizzle, both majors, N from 24 to 256, A from registers, chained and separate
// groups. Suite `wgmma_planted`: the misuses a kernel makes (no wait, no commit, no fence, a
// warp that skips the wgmma, a descriptor that disagrees with its tile or is off its pattern).
// Suite `race_planted_wgmma_fence`: a tile wgmma reads without fence_proxy_async, for race mode.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/hopper.cuh"
#include "common/kernel.cuh"
#include "common/ptx.cuh"
#include "tests/sim/fault_of.hpp"
#include "tests/sim/ptx_support.hpp"
#include "tests/sim/wgmma_tiles.hpp"

namespace {

using Kind = wb::sim::Fault::Kind;
using wb::ptx::Major;
using wb::ptx::Swizzle;
using wb::sim::WgmmaMajor;
using wb::sim::WgmmaSwizzle;
using wb::test::check_says;
using wb::test::fault_of;
using wb::test::to16;

constexpr int kM = 64;         // D's rows: the warpgroup's 4 warps, 16 rows each
constexpr int kStepK = 16;     // one wgmma's k (16-bit operands)
constexpr int kMaxSteps = 4;   // K up to 64: four wgmmas
constexpr int kThreads = 128;  // one warpgroup
constexpr int kWarpSize = 32;
constexpr int kWarpRows = 16;             // rows of D (and of a register A) per warp
constexpr int kFragmentCols = 8;          // columns of D per group of 4 accumulator registers
constexpr std::uint32_t kPattern = 1024;  // the largest swizzle pattern: where B's tile starts
// K-major swizzled operands do not use LBO: a value no layout would take, to show it is not.
constexpr unsigned kUnusedLbo = 0x3ff0;

// ---- What a kernel receives ---------------------------------------------------------------------

/// What a kernel's descriptors say: for A and B, the swizzle, the two offsets and where each
/// k16 step's operand starts.
struct DescriptorFields {
  int steps;  // K / 16 wgmmas
  Swizzle swizzle_a, swizzle_b;
  unsigned lbo_a, sbo_a, lbo_b, sbo_b;              // in bytes
  unsigned start_a[kMaxSteps], start_b[kMaxSteps];  // bytes into the window
  bool advance;  // steps by advance_descriptor from step 0's descriptor, else a new descriptor
};

/// A kernel's operands: the values, which of them each 16-bit cell of the block's dynamic
/// shared memory takes (the tiles' layout, built on the host), and the descriptors' fields.
template <typename T>
struct Operands : DescriptorFields {
  const T* values;        // A (64 x K), B (K x N as (k, n)), both row-major, then one NaN
  const int* cell_value;  // (cells): the index into `values` of each 16-bit cell
  int cells;
};

/// Row and column of D that accumulator register j of warpgroup thread `thread` holds
/// (common/hopper.cuh): g = lane / 4, t = lane % 4; d[4i], d[4i + 1] = D(16w + g, 8i + 2t (+1)),
/// d[4i + 2], d[4i + 3] the same 8 rows down.
struct Coord {
  int row, col;
};
__host__ __device__ Coord accumulator_coord(int thread, int j) {
  const int warp = thread / kWarpSize, lane = thread % kWarpSize, g = lane / 4, t = lane % 4;
  return {kWarpRows * warp + g + 8 * (j % 4 / 2), kFragmentCols * (j / 4) + 2 * t + j % 2};
}

// ---- Kernel pieces ------------------------------------------------------------------------------

/// Every cell of the window, written with ordinary stores: the tiles in their layout, NaN in
/// between (a descriptor that reads outside its tile reads NaN).
template <typename T>
__device__ void write_tiles(const Operands<T>& in) {
  T* cells = wb::dynamic_shared<T>();
  for (int i = static_cast<int>(threadIdx.x); i < in.cells; i += kThreads)
    cells[i] = in.values[in.cell_value[i]];
}

// c, out: (64, N) row-major.
template <int N>
__device__ void load_accumulators(float (&d)[N / 2], const float* c) {
  for (int j = 0; j < N / 2; ++j) {
    const Coord e = accumulator_coord(static_cast<int>(threadIdx.x), j);
    d[j] = c[e.row * N + e.col];
  }
}

template <int N>
__device__ void store_accumulators(const float (&d)[N / 2], float* out) {
  for (int j = 0; j < N / 2; ++j) {
    const Coord e = accumulator_coord(static_cast<int>(threadIdx.x), j);
    out[e.row * N + e.col] = d[j];
  }
}

struct Descriptors {
  std::uint64_t a, b;
};

/// The descriptors of k16 step s.
template <typename T>
__device__ Descriptors step_descriptors(const Operands<T>& in, int s) {
  const unsigned char* window = wb::dynamic_shared<unsigned char>();
  if (!in.advance) {
    return {
        wb::ptx::make_smem_descriptor(window + in.start_a[s], in.swizzle_a, in.lbo_a, in.sbo_a),
        wb::ptx::make_smem_descriptor(window + in.start_b[s], in.swizzle_b, in.lbo_b, in.sbo_b)};
  }
  const std::uint64_t a0 =
      wb::ptx::make_smem_descriptor(window + in.start_a[0], in.swizzle_a, in.lbo_a, in.sbo_a);
  const std::uint64_t b0 =
      wb::ptx::make_smem_descriptor(window + in.start_b[0], in.swizzle_b, in.lbo_b, in.sbo_b);
  return {wb::ptx::advance_descriptor(a0, in.start_a[s] - in.start_a[0]),
          wb::ptx::advance_descriptor(b0, in.start_b[s] - in.start_b[0])};
}

// ---- Kernels ------------------------------------------------------------------------------------

constexpr int kSsWgmmaLine = __LINE__ + 15;
// D = A B + C over K = 16 * in.steps, one wgmma per k16 step, all in one group; the step
// `fresh_step` (-1: none) passes accumulate = false, dropping C and the steps before it.
// c, out: (64, N) row-major.
template <typename T, int N, Major kMajorA, Major kMajorB>
__global__ void wgmma_ss_kernel(const Operands<T> in, const float* c, int fresh_step, float* out) {
  write_tiles(in);
  wb::ptx::fence_proxy_async();  // the stores above, visible to wgmma's reads (the async proxy)
  __syncthreads();
  float d[N / 2];
  load_accumulators<N>(d, c);
  wb::ptx::wgmma_fence();  // d, written above, is what the first wgmma adds to
  for (int s = 0; s < in.steps; ++s) {
    const Descriptors desc = step_descriptors(in, s);
    // Each wgmma adds to the one before it on the same registers (chained), in issue order.
    wb::ptx::wgmma_ss<T, N, kMajorA, kMajorB>(d, desc.a, desc.b, s != fresh_step);
  }
  wb::ptx::wgmma_commit_group();
  wb::ptx::wgmma_wait_group<0>();
  store_accumulators<N>(d, out);
}

// The same with A from registers: warp w holds rows 16w..16w+15 of each k16 step's A in
// mma.m16n8k16's A layout, gathered here from a (64 x K, row-major) by that layout.
template <typename T, int N, Major kMajorB>
__global__ void wgmma_rs_kernel(const Operands<T> in, const T* a, int k, const float* c,
                                float* out) {
  write_tiles(in);  // B only
  wb::ptx::fence_proxy_async();
  __syncthreads();
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize, g = lane / 4, t = lane % 4;
  const int row = kWarpRows * (static_cast<int>(threadIdx.x) / kWarpSize) + g;
  std::uint32_t fa[kMaxSteps][4];
  for (int s = 0; s < in.steps; ++s) {
    const T* at = a + row * k + kStepK * s + 2 * t;  // A(16w + g, 16s + 2t)
    fa[s][0] = wb::ptx::load_pair(at);               // A(16w + g,     16s + 2t .. + 1)
    fa[s][1] = wb::ptx::load_pair(at + 8 * k);       // A(16w + g + 8, 16s + 2t .. + 1)
    fa[s][2] = wb::ptx::load_pair(at + 8);           // A(16w + g,     16s + 2t + 8 .. + 9)
    fa[s][3] = wb::ptx::load_pair(at + 8 * k + 8);   // A(16w + g + 8, 16s + 2t + 8 .. + 9)
  }
  float d[N / 2];
  load_accumulators<N>(d, c);
  wb::ptx::wgmma_fence();  // fa and d, written above
  for (int s = 0; s < in.steps; ++s) {
    wb::ptx::wgmma_rs<T, N, kMajorB>(d, fa[s], step_descriptors(in, s).b, true);
  }
  wb::ptx::wgmma_commit_group();
  wb::ptx::wgmma_wait_group<0>();
  store_accumulators<N>(d, out);
}

// Two k16 steps in two groups: the first waited for, its result multiplied by `scale` in the
// registers (as attention rescales O), then fenced and added to by the second.
template <typename T, int N>
__global__ void two_groups_kernel(const Operands<T> in, const float* c, float scale, float* out) {
  write_tiles(in);
  wb::ptx::fence_proxy_async();
  __syncthreads();
  float d[N / 2];
  load_accumulators<N>(d, c);
  wb::ptx::wgmma_fence();
  const Descriptors first = step_descriptors(in, 0);
  wb::ptx::wgmma_ss<T, N>(d, first.a, first.b, true);
  wb::ptx::wgmma_commit_group();
  wb::ptx::wgmma_wait_group<0>();
  for (float& x : d) x *= scale;
  wb::ptx::wgmma_fence();  // the registers just written: what the next wgmma adds to
  const Descriptors second = step_descriptors(in, 1);
  wb::ptx::wgmma_ss<T, N>(d, second.a, second.b, true);
  wb::ptx::wgmma_commit_group();
  wb::ptx::wgmma_wait_group<0>();
  store_accumulators<N>(d, out);
}

// ---- The host side: inputs, tiles, references ---------------------------------------------------

enum class Inputs {
  // A selects: A(m, k) = 1 for k = sigma(m) % K (sigma a seeded permutation), else 0; B's
  // elements all distinct; C = 0. D(m, n) = B(sigma(m) % K, n) exactly, so an element of B read
  // from the wrong place, a misplaced 1 of A, or any cell outside the tiles (NaN, and 0 x NaN is
  // NaN) shows.
  selection,
  // randn with x20 outliers, C = 4 randn with +1e4 on rows 0-7: the additions round and cancel,
  // so only the documented order gives D bit for bit.
  random,
};

/// `count` distinct finite 16-bit values (normal, both signs, in the binades around 1), in a
/// seeded order. f16 fits 16384 of them within 2^-5..2^6, bf16 needs 2^-33..2^34.
template <typename T>
std::vector<T> distinct_values(int count, unsigned seed) {
  constexpr int kMantissaBits = std::is_same_v<T, __half> ? 10 : 7;
  constexpr int kBias = std::is_same_v<T, __half> ? 15 : 127;
  const int per_binade = 2 << kMantissaBits;  // both signs
  const int half_width = (count + per_binade - 1) / per_binade / 2 + 1;
  std::vector<std::uint16_t> bits;
  for (int e = kBias - half_width; e <= kBias + half_width; ++e) {
    for (int sign = 0; sign < 2; ++sign) {
      for (int mantissa = 0; mantissa < (1 << kMantissaBits); ++mantissa)
        bits.push_back(static_cast<std::uint16_t>(sign << 15 | e << kMantissaBits | mantissa));
    }
  }
  std::shuffle(bits.begin(), bits.end(), std::mt19937(seed));
  using Raw = std::conditional_t<std::is_same_v<T, __half>, __half_raw, __nv_bfloat16_raw>;
  std::vector<T> values;
  for (int i = 0; i < count; ++i) values.push_back(T(Raw{bits[i]}));
  return values;
}

/// D (64 x N) = A (64 x K) B (K x N) + C, inputs on the host.
template <typename T>
struct Problem {
  Problem(int n_cols, int depth, Inputs kind, unsigned seed)
      : n(n_cols), k(depth), inputs(kind), a(kM * depth), b(depth * n_cols), c(kM * n_cols) {
    std::mt19937 rng(seed);
    if (inputs == Inputs::selection) {
      std::vector<int> sigma(kM);
      for (int m = 0; m < kM; ++m) sigma[m] = m;
      std::shuffle(sigma.begin(), sigma.end(), rng);
      for (int m = 0; m < kM; ++m) {
        selected.push_back(sigma[m] % k);
        for (int kk = 0; kk < k; ++kk) a[m * k + kk] = to16<T>(kk == selected[m] ? 1.f : 0.f);
      }
      b = distinct_values<T>(k * n, seed + 1);
      std::fill(c.begin(), c.end(), 0.f);
    } else {
      std::normal_distribution<float> randn(0.f, 1.f);
      constexpr int kOutlierEvery = 37;
      constexpr float kOutlier = 20.f, kCScale = 4.f, kOffset = 1e4f;
      constexpr int kOffsetRows = 8;
      for (std::size_t i = 0; i < a.size(); ++i)
        a[i] = to16<T>(randn(rng) * (i % kOutlierEvery == 0 ? kOutlier : 1.f));
      for (std::size_t i = 0; i < b.size(); ++i)
        b[i] = to16<T>(randn(rng) * (i % kOutlierEvery == 0 ? kOutlier : 1.f));
      for (std::size_t i = 0; i < c.size(); ++i)
        c[i] = kCScale * randn(rng) + (static_cast<int>(i) / n < kOffsetRows ? kOffset : 0.f);
    }
    a_float.assign(a.begin(), a.end());
    b_float.assign(b.begin(), b.end());
  }
  float a_at(int m, int kk) const { return a_float[m * k + kk]; }
  float b_at(int kk, int nn) const { return b_float[kk * n + nn]; }

  int n, k;
  Inputs inputs;
  std::vector<T> a, b;                  // A: (64, k) row-major; B: (k, n) row-major
  std::vector<float> c;                 // C: (64, n) row-major
  std::vector<float> a_float, b_float;  // A and B widened, for the references
  std::vector<int> selected;            // selection inputs: the k that row m of A selects
};

/// How an operand's tile lies in shared memory: its major, its swizzle, and the order of its
/// atoms (8 rows of the swizzle's row, or 8 x 8 core matrices without swizzle).
struct Layout {
  Major major;
  Swizzle swizzle;
  bool mn_first = true;      // atoms adjacent along m|n, then along k (else k first)
  std::uint32_t spread = 1;  // atoms `spread` atom sizes apart in the first direction (gaps)
};

WgmmaSwizzle sim_swizzle(Swizzle s) {
  return s == Swizzle::b128  ? WgmmaSwizzle::b128
         : s == Swizzle::b64 ? WgmmaSwizzle::b64
         : s == Swizzle::b32 ? WgmmaSwizzle::b32
                             : WgmmaSwizzle::none;
}

std::string describe(const Layout& l) {
  const char* swizzle = l.swizzle == Swizzle::b128  ? "128B"
                        : l.swizzle == Swizzle::b64 ? "64B"
                        : l.swizzle == Swizzle::b32 ? "32B"
                                                    : "no swizzle";
  return std::string(l.major == Major::k ? "K-major " : "MN-major ") + swizzle +
         (l.mn_first ? ", atoms along m|n first" : ", atoms along k first") +
         (l.spread > 1 ? ", spread " + std::to_string(l.spread) : "");
}

/// A layout's tile for an operand of mn x k, and what its descriptors say: the offsets by the
/// table of common/sim/wgmma_layout.hpp (PTX ISA, "Shared Memory Matrix Layout") and where each
/// k16 step starts.
struct Tile {
  wb::test::TileSpec spec;
  unsigned lbo, sbo;
  unsigned step_start[kMaxSteps];  // bytes from the tile's first byte
};

Tile tile_of(const Layout& l, int mn, int k) {
  const WgmmaSwizzle swizzle = sim_swizzle(l.swizzle);
  const std::uint32_t row_bytes = wb::test::row_bytes_of(swizzle);
  const int row_elems = static_cast<int>(row_bytes / wb::test::kElem);
  const std::uint32_t atom_bytes = wb::test::kAtomRows * row_bytes;
  const bool k_major = l.major == Major::k;
  const int atom_mn = k_major ? wb::test::kAtomRows : row_elems;
  const int atom_k = k_major ? row_elems : wb::test::kAtomRows;
  REQUIRE(mn % atom_mn == 0);
  const int k_extent = (k + atom_k - 1) / atom_k * atom_k;  // a K-major row filled past K (NaN)
  const int atoms_mn = mn / atom_mn, atoms_k = k_extent / atom_k;
  const std::uint32_t first = l.spread * atom_bytes;
  const std::uint32_t mn_step = l.mn_first ? first : first * atoms_k;
  const std::uint32_t k_step = l.mn_first ? first * atoms_mn : first;
  Tile t{
      {k_major ? WgmmaMajor::k : WgmmaMajor::mn, swizzle, mn, k_extent, mn_step, k_step}, 0, 0, {}};
  if (l.swizzle == Swizzle::none) {
    t.lbo = k_step;   // between core matrices along k
    t.sbo = mn_step;  // along m|n
  } else if (k_major) {
    t.lbo = kUnusedLbo;
    t.sbo = mn_step;  // between atoms along m|n
  } else {
    t.lbo = mn_step;  // between atoms along m|n
    t.sbo = k_step;   // along k
  }
  for (int s = 0; s < kMaxSteps; ++s) {
    const int k0 = kStepK * s;  // the atom along k, then (K-major swizzled) 32 bytes a step
    t.step_start[s] = k0 / atom_k * k_step + k0 % atom_k * wb::test::kElem;
  }
  return t;
}

/// The window a kernel writes, for a problem of N x K: the value each 16-bit cell takes, as
/// an index into A (64 x K) | B (K x N) | NaN, A's tile at 0 and B's at the next 1024-byte
/// boundary plus `b_shift`, NaN elsewhere; and what the descriptors say.
struct Window {
  std::vector<int> cell_value;
  std::size_t bytes = 0;
  DescriptorFields fields{};
};

/// The window of A in layout `a` (none for wgmma_rs) and B in `b`, built once for each layouts
/// and shape (both element types and both kinds of inputs share it) and kept.
const Window& window_of(const Layout* a, const Layout& b, int n, int k, std::uint32_t b_shift) {
  static std::map<std::string, Window> windows;
  const std::string key = (a == nullptr ? "registers" : describe(*a)) + "; " + describe(b) + "; " +
                          std::to_string(n) + " x " + std::to_string(k) + " + " +
                          std::to_string(b_shift);
  const auto found = windows.find(key);
  if (found != windows.end()) return found->second;
  Window& w = windows[key];
  const int b_first = kM * k, nan = b_first + k * n;  // B's first value, the NaN
  std::vector<std::pair<std::uint32_t, int>> cells;   // (byte address, value index)
  std::uint32_t a_bytes = 0;
  DescriptorFields& o = w.fields;
  REQUIRE(k % kStepK == 0);
  o.steps = k / kStepK;
  REQUIRE(o.steps <= kMaxSteps);
  if (a != nullptr) {
    const Tile t = tile_of(*a, kM, k);
    wb::test::for_each_tile_element(t.spec, 0, [&](std::uint32_t addr, wb::test::Element e) {
      cells.emplace_back(addr, e.k < k ? e.mn * k + e.k : nan);
      a_bytes = std::max(a_bytes, addr + wb::test::kElem);
    });
    o.swizzle_a = a->swizzle;
    o.lbo_a = t.lbo;
    o.sbo_a = t.sbo;
    std::copy(t.step_start, t.step_start + kMaxSteps, o.start_a);
  }
  const std::uint32_t b_base = (a_bytes + kPattern - 1) / kPattern * kPattern + b_shift;
  const Tile t = tile_of(b, n, k);
  std::uint32_t end = b_base;
  wb::test::for_each_tile_element(t.spec, b_base, [&](std::uint32_t addr, wb::test::Element e) {
    cells.emplace_back(addr, e.k < k ? b_first + e.k * n + e.mn : nan);
    end = std::max(end, addr + wb::test::kElem);
  });
  o.swizzle_b = b.swizzle;
  o.lbo_b = t.lbo;
  o.sbo_b = t.sbo;
  for (int s = 0; s < kMaxSteps; ++s) o.start_b[s] = b_base + t.step_start[s];
  o.advance = true;
  w.bytes = (end + kPattern - 1) / kPattern * kPattern;
  constexpr int kUnwritten = -1;
  w.cell_value.assign(w.bytes / wb::test::kElem, kUnwritten);
  int overlaps = 0;  // the tiles themselves must not overlap (their atoms, or A and B)
  for (const auto& [addr, value] : cells) {
    int& cell = w.cell_value[addr / wb::test::kElem];
    overlaps += cell != kUnwritten;
    cell = value;
  }
  REQUIRE(overlaps == 0);
  std::replace(w.cell_value.begin(), w.cell_value.end(), kUnwritten, nan);
  return w;
}

/// A problem's values in a window: what a kernel launch takes.
template <typename T>
struct Placed {
  std::vector<T> values;  // A, B, NaN
  std::size_t window_bytes = 0;
  Operands<T> operands{};
};

/// The values the cells take theirs from: p's A, then B, then NaN.
template <typename T>
void fill_values(Placed<T>& w, const Problem<T>& p) {
  w.values = p.a;
  w.values.insert(w.values.end(), p.b.begin(), p.b.end());
  w.values.push_back(to16<T>(NAN));
  w.operands.values = w.values.data();
}

/// Places p's A (in `a`'s layout; none for wgmma_rs) and B (in `b`'s) in a window.
template <typename T>
Placed<T> place(const Problem<T>& p, const Layout* a, const Layout& b, std::uint32_t b_shift = 0) {
  const Window& window = window_of(a, b, p.n, p.k, b_shift);
  Placed<T> w;
  fill_values(w, p);
  w.window_bytes = window.bytes;
  static_cast<DescriptorFields&>(w.operands) = window.fields;
  w.operands.cell_value = window.cell_value.data();
  w.operands.cells = static_cast<int>(window.cell_value.size());
  return w;
}

/// Checks D (64 x N) element by element. Selection inputs: every partial sum is exact (0 + 1 b
/// and zeros), so D(m, n) is exactly B(k, n) for the k row m selects (0 if `fresh_step` drops
/// it). Random inputs, with check_product_sum: C (0 when `fresh_step` is not -1) plus the
/// products from step `fresh_step` on, in k order, one rounding per addition, bit for bit, and
/// within Higham's bound gamma_K (|C| + sum |a b|) of the exact sum.
template <typename T>
void check_d(const Problem<T>& p, const std::vector<float>& d, int fresh_step = -1) {
  const int k0 = fresh_step < 0 ? 0 : kStepK * fresh_step;
  if (p.inputs == Inputs::selection) {
    int wrong = 0;
    std::string first;
    for (int m = 0; m < kM; ++m) {
      for (int n = 0; n < p.n; ++n) {
        const int kk = p.selected[m];
        const float got = d[m * p.n + n], want = kk >= k0 ? p.b_at(kk, n) : 0.f;
        if (got == want || wrong++ > 0) continue;
        char buf[160];
        std::snprintf(buf, sizeof buf, "D(%d, %d) = %.9g, not B(%d, %d) = %.9g", m, n, got, kk, n,
                      want);
        first = buf;
      }
    }
    INFO("selection inputs; the first wrong element: " << first);
    CHECK(wrong == 0);
    return;
  }
  INFO("random inputs");
  for (int m = 0; m < kM; ++m) {
    for (int n = 0; n < p.n; ++n) {
      CAPTURE(m);
      CAPTURE(n);
      const float got = d[m * p.n + n];
      const float c = fresh_step < 0 ? p.c[m * p.n + n] : 0.f;
      const auto factors = [&](int kk) {
        return std::pair{p.a_at(m, k0 + kk), p.b_at(k0 + kk, n)};
      };
      wb::test::check_product_sum(got, c, p.k - k0, factors);
    }
  }
}

template <typename T, int N, Major kMajorA, Major kMajorB>
std::vector<float> run_ss(const Problem<T>& p, const Placed<T>& w, int fresh_step = -1) {
  REQUIRE(p.n == N);
  std::vector<float> out(kM * N, -1.f);
  wb::launch<wgmma_ss_kernel<T, N, kMajorA, kMajorB>>(
      dim3(1), dim3(kThreads), w.window_bytes, w.operands, p.c.data(), fresh_step, out.data());
  return out;
}

/// Which inputs a case runs: selection (the layouts, every element of B read into its place)
/// and random (the order of the additions and C), or selection only where the random inputs
/// would check again what a smaller N of the same layout checks.
enum class Runs { both, selection };

/// wgmma_ss on A and B in layouts a and b, checked.
template <typename T, int N, Major kMajorA, Major kMajorB>
void check_ss(const Layout& a, const Layout& b, int k, unsigned seed, Runs runs = Runs::both) {
  CAPTURE(N);
  CAPTURE(k);
  INFO("A " << describe(a) << "; B " << describe(b));
  const Problem<T> selection(N, k, Inputs::selection, seed);
  Placed<T> w = place(selection, &a, b);
  check_d(selection, run_ss<T, N, kMajorA, kMajorB>(selection, w));
  if (runs == Runs::selection) return;
  const Problem<T> random(N, k, Inputs::random, seed);
  fill_values(w, random);  // the same tiles
  check_d(random, run_ss<T, N, kMajorA, kMajorB>(random, w));
}

/// wgmma_ss with K-major A and B in one swizzle, for N = 64, 128, 256 and an odd N (200 with
/// 128-byte rows, 24 with the others).
template <typename T>
void check_k_major(Swizzle swizzle, unsigned seed) {
  constexpr int kK = 64;
  const Layout a{Major::k, swizzle, true};
  const Layout b{Major::k, swizzle, false};
  check_ss<T, 64, Major::k, Major::k>(a, b, kK, seed);
  check_ss<T, 128, Major::k, Major::k>(a, b, kK, seed + 1, Runs::selection);
  check_ss<T, 256, Major::k, Major::k>(a, b, kK, seed + 2, Runs::selection);
  if (swizzle == Swizzle::b128) {
    check_ss<T, 200, Major::k, Major::k>(a, b, kK, seed + 3);
  } else {
    check_ss<T, 24, Major::k, Major::k>(a, b, kK, seed + 3);
  }
}

constexpr Swizzle kSwizzles[] = {Swizzle::none, Swizzle::b32, Swizzle::b64, Swizzle::b128};

}  // namespace

// ---- wgmma_ss -----------------------------------------------------------------------------------

TEST_CASE("wgmma_ss multiplies K-major A and B in every swizzle for N 64 128 256 24 and 200" *
          doctest::test_suite("wgmma")) {
  // K = 64: four k16 steps, by advance_descriptor (within a swizzled row, 32 bytes a step;
  // without swizzle, or across 32-byte rows, to the next atoms along k).
  SUBCASE("half") {
    for (const Swizzle s : kSwizzles) check_k_major<__half>(s, 10 * static_cast<unsigned>(s));
  }
  SUBCASE("bfloat16") {
    for (const Swizzle s : kSwizzles)
      check_k_major<__nv_bfloat16>(s, 50 + static_cast<unsigned>(s));
  }
}

namespace {

/// B MN-major as attention's V: (K x N) with N contiguous, atoms along k first as a TMA box of
/// whole rows writes them.
template <typename T>
void check_mn_major_b(Swizzle swizzle, unsigned seed) {
  constexpr int kK = 64;
  const Layout a{Major::k, Swizzle::b128, true};
  const Layout b{Major::mn, swizzle, false};
  check_ss<T, 64, Major::k, Major::mn>(a, b, kK, seed);
  check_ss<T, 128, Major::k, Major::mn>(a, b, kK, seed + 1, Runs::selection);
  // attention's V at head dimension 256, which FA3 stores with the 128-byte swizzle
  if (swizzle == Swizzle::b128) {
    check_ss<T, 256, Major::k, Major::mn>(a, b, kK, seed + 2, Runs::selection);
  }
}

}  // namespace

TEST_CASE("wgmma_ss reads B MN-major as attention's V in every swizzle" *
          doctest::test_suite("wgmma")) {
  SUBCASE("half") {
    for (const Swizzle s : kSwizzles) check_mn_major_b<__half>(s, 100 + static_cast<unsigned>(s));
  }
  SUBCASE("bfloat16") {
    for (const Swizzle s : kSwizzles)
      check_mn_major_b<__nv_bfloat16>(s, 110 + static_cast<unsigned>(s));
  }
  SUBCASE("odd N 24 without swizzle") {
    check_ss<__half, 24, Major::k, Major::mn>({Major::k, Swizzle::none, true},
                                              {Major::mn, Swizzle::none, true}, 32, 120);
  }
}

TEST_CASE("wgmma_ss reads A MN-major" * doctest::test_suite("wgmma")) {
  const Layout a{Major::mn, Swizzle::b128, false};
  SUBCASE("half, B K-major") {
    check_ss<__half, 64, Major::mn, Major::k>(a, {Major::k, Swizzle::b128}, 64, 130);
  }
  SUBCASE("bfloat16, B MN-major") {
    check_ss<__nv_bfloat16, 128, Major::mn, Major::mn>(a, {Major::mn, Swizzle::b64, true}, 32, 131);
  }
  SUBCASE("half, no swizzle, atoms along m first") {
    check_ss<__half, 64, Major::mn, Major::k>({Major::mn, Swizzle::none, true},
                                              {Major::k, Swizzle::b32}, 48, 132);
  }
}

TEST_CASE("wgmma_ss reads tiles whose atoms lie apart with NaN between" *
          doctest::test_suite("wgmma")) {
  // The offsets step over the gaps; a descriptor that read a gap would read NaN.
  check_ss<__half, 64, Major::k, Major::k>({Major::k, Swizzle::b128, true, 2},
                                           {Major::k, Swizzle::b64, true, 3}, 64, 140);
  check_ss<__nv_bfloat16, 128, Major::k, Major::mn>({Major::k, Swizzle::none, false, 2},
                                                    {Major::mn, Swizzle::b128, true, 2}, 32, 141);
}

TEST_CASE("k16 steps by new descriptors read what advance_descriptor reads" *
          doctest::test_suite("wgmma")) {
  const auto both = [](const Layout& a, const Layout& b, unsigned seed) {
    INFO("A " << describe(a) << "; B " << describe(b));
    const Problem<__half> p(128, 64, Inputs::random, seed);
    Placed<__half> w = place(p, &a, b);
    const std::vector<float> advanced = run_ss<__half, 128, Major::k, Major::mn>(p, w);
    w.operands.advance = false;
    const std::vector<float> fresh = run_ss<__half, 128, Major::k, Major::mn>(p, w);
    check_d(p, fresh);
    CHECK(fresh == advanced);
  };
  both({Major::k, Swizzle::b128}, {Major::mn, Swizzle::b128, false}, 150);
  both({Major::k, Swizzle::b32}, {Major::mn, Swizzle::none, true}, 151);
}

// ---- wgmma_rs -----------------------------------------------------------------------------------

namespace {

template <typename T, int N, Major kMajorB>
void check_rs(const Layout& b, int k, unsigned seed) {
  CAPTURE(N);
  INFO("B " << describe(b));
  Placed<T> w;
  for (const Inputs inputs : {Inputs::selection, Inputs::random}) {
    const Problem<T> p(N, k, inputs, seed);
    if (inputs == Inputs::selection) {
      w = place(p, nullptr, b);
    } else {
      fill_values(w, p);  // the same tile
    }
    std::vector<float> out(kM * N, -1.f);
    wb::launch<wgmma_rs_kernel<T, N, kMajorB>>(dim3(1), dim3(kThreads), w.window_bytes, w.operands,
                                               p.a.data(), k, p.c.data(), out.data());
    check_d(p, out);
  }
}

}  // namespace

TEST_CASE("wgmma_rs takes A from registers in mma.m16n8k16's layout warp w holding rows 16w on" *
          doctest::test_suite("wgmma")) {
  SUBCASE("half, B K-major") {
    check_rs<__half, 64, Major::k>({Major::k, Swizzle::b128}, 64, 160);
    check_rs<__half, 256, Major::k>({Major::k, Swizzle::none, false}, 32, 161);
  }
  SUBCASE("bfloat16, B K-major") {
    check_rs<__nv_bfloat16, 128, Major::k>({Major::k, Swizzle::b64}, 64, 162);
  }
  SUBCASE("half, B MN-major") {
    check_rs<__half, 128, Major::mn>({Major::mn, Swizzle::b128, false}, 64, 163);
  }
  SUBCASE("bfloat16, B MN-major") {
    check_rs<__nv_bfloat16, 64, Major::mn>({Major::mn, Swizzle::b32, false}, 48, 164);
    check_rs<__nv_bfloat16, 24, Major::mn>({Major::mn, Swizzle::none, true}, 16, 165);
  }
}

// ---- Accumulation -------------------------------------------------------------------------------

TEST_CASE("Two wgmmas of one group chain into the same accumulators in issue order" *
          doctest::test_suite("wgmma")) {
  // K = 32: the second wgmma adds its 16 products to the first's result, after it. The random
  // inputs' +1e4 rows make the additions round, so the order shows in the bits: adding the
  // second step's products first gives another float for many elements.
  const Layout a{Major::k, Swizzle::b128}, b{Major::k, Swizzle::b128};
  const Problem<__nv_bfloat16> p(64, 32, Inputs::random, 170);
  const std::vector<float> d = run_ss<__nv_bfloat16, 64, Major::k, Major::k>(p, place(p, &a, b));
  check_d(p, d);
  int other_order = 0;
  for (int m = 0; m < kM; ++m) {
    for (int n = 0; n < p.n; ++n) {
      float reversed = p.c[m * p.n + n];
      for (int kk = kStepK; kk < 2 * kStepK; ++kk) reversed += p.a_at(m, kk) * p.b_at(kk, n);
      for (int kk = 0; kk < kStepK; ++kk) reversed += p.a_at(m, kk) * p.b_at(kk, n);
      other_order += reversed != d[m * p.n + n];
    }
  }
  CHECK(other_order > 0);  // the check above can tell issue order from the reverse
}

TEST_CASE("accumulate false ignores what the accumulators held" * doctest::test_suite("wgmma")) {
  const Layout a{Major::k, Swizzle::b64}, b{Major::mn, Swizzle::b128, false};
  Problem<__half> p(64, 64, Inputs::random, 180);
  SUBCASE("the first wgmma: C, NaN here, is not read") {
    std::fill(p.c.begin(), p.c.end(), NAN);
    check_d(p, run_ss<__half, 64, Major::k, Major::mn>(p, place(p, &a, b), 0), 0);
  }
  SUBCASE("the third of four chained wgmmas: C and the first two products are dropped") {
    check_d(p, run_ss<__half, 64, Major::k, Major::mn>(p, place(p, &a, b), 2), 2);
  }
}

namespace {

/// two_groups_kernel's D against the reference: the first group's in-order sum times `scale`,
/// then the second group's products added to it (check_product_sum from that value).
template <typename T>
std::vector<float> check_two_groups(const Problem<T>& p, float scale) {
  constexpr int kN = 64;
  REQUIRE(p.n == kN);
  const Layout a{Major::k, Swizzle::b128}, b{Major::k, Swizzle::b128};
  const Placed<T> w = place(p, &a, b);
  std::vector<float> out(kM * kN, -1.f);
  wb::launch<two_groups_kernel<T, kN>>(dim3(1), dim3(kThreads), w.window_bytes, w.operands,
                                       p.c.data(), scale, out.data());
  for (int m = 0; m < kM; ++m) {
    for (int n = 0; n < kN; ++n) {
      CAPTURE(m);
      CAPTURE(n);
      float first = p.c[m * kN + n];
      for (int kk = 0; kk < kStepK; ++kk) first += p.a_at(m, kk) * p.b_at(kk, n);
      const auto second = [&](int kk) {
        return std::pair{p.a_at(m, kStepK + kk), p.b_at(kStepK + kk, n)};
      };
      wb::test::check_product_sum(out[m * kN + n], first * scale, kStepK, second);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("A second group after a wait and a fence adds to the first's result" *
          doctest::test_suite("wgmma")) {
  const Problem<__half> p(64, 32, Inputs::random, 190);
  SUBCASE("unscaled: the same bits as one group of two chained wgmmas") {
    const Layout a{Major::k, Swizzle::b128}, b{Major::k, Swizzle::b128};
    const std::vector<float> chained = run_ss<__half, 64, Major::k, Major::k>(p, place(p, &a, b));
    CHECK(check_two_groups(p, 1.f) == chained);
  }
  SUBCASE("rescaled in the registers between the groups, as attention rescales O") {
    constexpr float kScale = 0.3f;  // not a power of two: the product rounds
    check_two_groups(p, kScale);
  }
}

// ---- Planted misuses ----------------------------------------------------------------------------

namespace {

std::string at_line(int line) {
  return "tests/sim/test_wgmma.cpp:" + std::to_string(line);
}

bool poison(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits == 0xffffffffu;  // what an accumulator holds while its wgmma is in flight
}

/// The planted misuse of planted_kernel.
enum Planted : int {
  kNoWait,               // the accumulators stored without wgmma_wait_group
  kNoCommit,             // wgmma_wait_group<0> with no group committed
  kNoFence,              // no wgmma_fence before the first wgmma
  kNoFenceAfterRescale,  // the registers rescaled after the wait, then a wgmma without a fence
  kWarpReturns,          // warp 3 returns before the wgmma
  kWarpSkipsWgmma,       // warp 3 goes past the wgmma to the commit
  kWarpAtBarrier,        // warp 3 waits at a __syncthreads before the wgmma
};

constexpr int kPlantedN = 64;
constexpr int kPlantedFenceLine = __LINE__ + 14;
constexpr int kPlantedBarrierLine = kPlantedFenceLine + 2;
constexpr int kPlantedWgmmaLine = kPlantedFenceLine + 5;
constexpr int kPlantedCommitLine = kPlantedFenceLine + 7;
constexpr int kPlantedRescaledWgmmaLine = kPlantedFenceLine + 12;
// A one- or two-step wgmma_ss with one misuse planted (`planted`).
template <typename T>
__global__ void planted_kernel(const Operands<T> in, const float* c, int planted, float* out) {
  write_tiles(in);
  wb::ptx::fence_proxy_async();
  __syncthreads();
  float d[kPlantedN / 2];
  load_accumulators<kPlantedN>(d, c);
  const bool last_warp = threadIdx.x / kWarpSize == 3;
  if (planted != kNoFence) wb::ptx::wgmma_fence();
  if (planted == kWarpReturns && last_warp) return;
  if (planted == kWarpAtBarrier && last_warp) __syncthreads();
  const Descriptors first = step_descriptors(in, 0);
  if (planted != kWarpSkipsWgmma || !last_warp) {
    wb::ptx::wgmma_ss<T, kPlantedN>(d, first.a, first.b, true);
  }
  if (planted != kNoCommit) wb::ptx::wgmma_commit_group();
  if (planted != kNoWait) wb::ptx::wgmma_wait_group<0>();
  if (planted == kNoFenceAfterRescale) {
    for (float& x : d) x *= 0.5f;  // registers written after the wait: a wgmma_fence must follow
    const Descriptors second = step_descriptors(in, 1);
    wb::ptx::wgmma_ss<T, kPlantedN>(d, second.a, second.b, true);
    wb::ptx::wgmma_commit_group();
    wb::ptx::wgmma_wait_group<0>();
  }
  store_accumulators<kPlantedN>(d, out);
}

/// The planted kernel's operands: K-major A and B, 128-byte swizzle, K = 32.
struct PlantedRun {
  Problem<__half> p{kPlantedN, 32, Inputs::random, 200};
  Layout a{Major::k, Swizzle::b128}, b{Major::k, Swizzle::b128};
  Placed<__half> w = place(p, &a, b);
  std::vector<float> out = std::vector<float>(kM * kPlantedN, -1.f);

  void run(Planted planted) {
    wb::launch<planted_kernel<__half>>(dim3(1), dim3(kThreads), w.window_bytes, w.operands,
                                       p.c.data(), static_cast<int>(planted), out.data());
  }
};

}  // namespace

TEST_CASE("Accumulators read without wgmma_wait_group are NaN" *
          doctest::test_suite("wgmma_planted")) {
  // In flight the accumulators have no defined value; the simulator makes them NaN (all ones)
  // from the issue until the wait that covers the group, on every run.
  PlantedRun r;
  r.run(kNoWait);
  CHECK(std::all_of(r.out.begin(), r.out.end(), poison));
}

TEST_CASE("A wait without a commit before it leaves the accumulators NaN" *
          doctest::test_suite("wgmma_planted")) {
  // wgmma_wait_group<0> waits for the committed groups only: the wgmma, in no group, is still
  // in flight when the registers are stored.
  PlantedRun r;
  r.run(kNoCommit);
  CHECK(std::all_of(r.out.begin(), r.out.end(), poison));
}

TEST_CASE("A wgmma without a wgmma_fence before it is reported naming its line" *
          doctest::test_suite("wgmma_planted")) {
  PlantedRun r;
  SUBCASE("before the first wgmma") {
    check_says(fault_of(Kind::warp_collective, [&] { r.run(kNoFence); }),
               {"kernel planted_kernel", "wgmma_ss at " + at_line(kPlantedWgmmaLine),
                "no wgmma_fence() since the warpgroup began"});
  }
  SUBCASE("after a wait whose result the registers rescaled") {
    check_says(fault_of(Kind::warp_collective, [&] { r.run(kNoFenceAfterRescale); }),
               {"kernel planted_kernel", "wgmma_ss at " + at_line(kPlantedRescaledWgmmaLine),
                "no wgmma_fence() since the warpgroup last waited"});
  }
}

TEST_CASE("A warp of the warpgroup that does not issue the wgmma is reported naming it" *
          doctest::test_suite("wgmma_planted")) {
  // wgmma is .sync.aligned over the warpgroup: warps 0-2 wait at it for warp 3, whose first
  // thread, (96,0,0), each report names.
  PlantedRun r;
  SUBCASE("warp 3 returned") {
    check_says(fault_of(Kind::warp_collective, [&] { r.run(kWarpReturns); }),
               {"thread (96,0,0): exits without reaching wgmma_ss at " + at_line(kPlantedWgmmaLine),
                "where 96 threads of its warpgroup wait"});
  }
  SUBCASE("warp 3 went on to the commit") {
    check_says(fault_of(Kind::warp_collective, [&] { r.run(kWarpSkipsWgmma); }),
               {"wgmma_ss at " + at_line(kPlantedWgmmaLine),
                "does not match wgmma_commit_group at " + at_line(kPlantedCommitLine),
                "where warp 3 of the warpgroup waits"});
  }
  SUBCASE("warp 3 waits at a __syncthreads the others never reach") {
    check_says(fault_of(Kind::warp_collective, [&] { r.run(kWarpAtBarrier); }),
               {"wgmma_ss at " + at_line(kPlantedWgmmaLine) + " can never complete",
                "warp 3 of the warpgroup (thread (96,0,0)) waits at __syncthreads",
                at_line(kPlantedBarrierLine)});
  }
}

TEST_CASE(
    "A descriptor whose swizzle disagrees with how the tile was written reads other elements" *
    doctest::test_suite("wgmma_planted")) {
  // B written with the 128-byte swizzle, described as 64-byte. Nothing in shared memory records
  // the layout its ordinary stores meant, and the descriptor is a legal one (a 64-byte pattern
  // starts on every 1024-byte boundary, each k16 slice within a 64-byte row): the hardware reads
  // the addresses it names without complaint, and so does the simulator. Only the product shows
  // it, against a reference.
  const Problem<__half> p(128, 64, Inputs::selection, 210);
  const Layout a{Major::k, Swizzle::b128}, b{Major::k, Swizzle::b128};
  Placed<__half> w = place(p, &a, b);
  w.operands.swizzle_b = Swizzle::b64;
  const std::vector<float> d = run_ss<__half, 128, Major::k, Major::k>(p, w);
  int wrong = 0;
  for (int m = 0; m < kM; ++m) {
    for (int n = 0; n < p.n; ++n) {
      float want = 0.f;  // C = 0; the in-order sum
      for (int kk = 0; kk < p.k; ++kk) want += p.a_at(m, kk) * p.b_at(kk, n);
      wrong += !(d[m * p.n + n] == want);
    }
  }
  CHECK(wrong > kM * p.n / 2);
}

TEST_CASE("A 128-byte-swizzled operand off its 1024-byte boundary is reported" *
          doctest::test_suite("wgmma_planted")) {
  // B's tile placed 512 bytes past a boundary: its rows would take the XOR of other rows.
  const Problem<__half> p(64, 64, Inputs::random, 220);
  const Layout a{Major::k, Swizzle::b128}, b{Major::k, Swizzle::b128};
  const Placed<__half> w = place(p, &a, b, 512);
  check_says(
      fault_of(Kind::invalid_argument, [&] { run_ss<__half, 64, Major::k, Major::k>(p, w); }),
      {"wgmma_ss at " + at_line(kSsWgmmaLine), "operand B",
       "a 128-byte-swizzled operand must start on a 1024-byte boundary",
       "512 bytes past a boundary"});
}

// ---- Race mode ----------------------------------------------------------------------------------

namespace {

// Planted: the tiles written by ordinary stores and a __syncthreads, with no fence_proxy_async
// between them and the wgmma, whose operand reads (the async proxy's) need not see them.
template <typename T, int N>
__global__ void unfenced_tiles_kernel(const Operands<T> in, float* out) {
  write_tiles(in);
  __syncthreads();
  float d[N / 2] = {};
  wb::ptx::wgmma_fence();
  const Descriptors first = step_descriptors(in, 0);
  wb::ptx::wgmma_ss<T, N>(d, first.a, first.b, false);
  wb::ptx::wgmma_commit_group();
  wb::ptx::wgmma_wait_group<0>();
  store_accumulators<N>(d, out);
}

}  // namespace

TEST_CASE("wgmma reading a tile written without fence_proxy_async is a race in race mode" *
          doctest::test_suite("race_planted_wgmma_fence")) {
  const Problem<__half> p(64, 16, Inputs::selection, 230);
  const Layout a{Major::k, Swizzle::b32}, b{Major::k, Swizzle::b32};
  const Placed<__half> w = place(p, &a, b);
  std::vector<float> out(kM * 64, -1.f);
  wb::launch<unfenced_tiles_kernel<__half, 64>>(dim3(1), dim3(kThreads), w.window_bytes, w.operands,
                                                out.data());
}
