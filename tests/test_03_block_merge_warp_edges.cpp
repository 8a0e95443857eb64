// Chapter 03's warp merge (md_warp_merge.cuh) at the edges of float's range: the monoid laws
// of tests/block_merge_extreme_laws.hpp through the butterfly of shuffles, on lanes holding
// maxima at +-FLT_MAX, +-3e38, +-1e30, exp's edges and -0, d from the smallest subnormal to
// FLT_MAX, and the identity (-inf, 0) (a lane past the row's end, a masked block). A test
// kernel calls warp_merge directly, one result per lane written out, for the whole warp and for
// groups of 4. Simulator only: test files are compiled by the host compiler (the kernels that
// call warp_merge run on both backends in test_03_block_merge_kernels.cpp and the chapters
// after it).
#include <doctest/doctest.h>

// The CUDA dialect (common/sim for the host compiler) before any header that spells
// __host__ __device__, as in a kernel file.
#include "common/kernel.cuh"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "chapters/03_block_merge/md_warp_merge.cuh"
#include "common/buffer.hpp"
#include "tests/block_merge_extreme_laws.hpp"
#include "tests/block_merge_laws.hpp"

using namespace wb;
using namespace wb::test::block_merge;

namespace {

constexpr int kWarpsPerBlock = 8;

// m, d: each lane's pair; merged_m, merged_d: what each lane got back from its group's merge.
template <int kGroup>
__global__ void warp_merge_kernel(const float* m, const float* d, float* merged_m,
                                  float* merged_d) {
  const int t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const ch03::MD md = ch03::warp_merge<kGroup>({m[t], d[t]});
  merged_m[t] = md.m;
  merged_d[t] = md.d;
}

// Every lane's pair merged over its group of kGroup lanes on the simulator (whole warps of
// lanes: `lanes` a multiple of 8 warps).
template <int kGroup>
std::vector<MD> merge_groups(const std::vector<MD>& lanes) {
  REQUIRE(lanes.size() % (kWarpSize * kWarpsPerBlock) == 0);
  std::vector<float> m, d;
  for (const MD& x : lanes) {
    m.push_back(x.m);
    d.push_back(x.d);
  }
  DeviceBuffer<float> dm(Backend::sim, m), dd(Backend::sim, d);
  DeviceBuffer<float> out_m(Backend::sim, lanes.size()), out_d(Backend::sim, lanes.size());
  const int blocks = static_cast<int>(lanes.size()) / (kWarpSize * kWarpsPerBlock);
  launch<warp_merge_kernel<kGroup>>(dim3(blocks), dim3(kWarpSize * kWarpsPerBlock), 0, dm.data(),
                                    dd.data(), out_m.data(), out_d.data());
  const std::vector<float> got_m = out_m.download(), got_d = out_d.download();
  std::vector<MD> out;
  for (std::size_t i = 0; i < lanes.size(); ++i) out.push_back({got_m[i], got_d[i]});
  return out;
}

// Lanes padded with the identity to whole blocks of warps.
void pad_to_blocks(std::vector<MD>& lanes) {
  while (lanes.size() % (kWarpSize * kWarpsPerBlock) != 0) lanes.push_back(ch03::md_identity());
}

// Identity: in every group one lane holds an extreme operand and the others the identity, at a
// lane that moves with the operand; every lane of the group gets the operand back bit for bit.
// Groups of identities only (every other group, and the padding) give the identity, bit for bit.
template <int kGroup>
void identity_in_groups() {
  const std::vector<MD> ops = extreme_operands();
  std::vector<MD> lanes, want;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    for (int k = 0; k < 2; ++k) {  // the operand's group, then a group of identities
      for (int l = 0; l < kGroup; ++l) {
        const bool holds = k == 0 && l == static_cast<int>((i * 7) % kGroup);
        lanes.push_back(holds ? ops[i] : ch03::md_identity());
        want.push_back(k == 0 ? ops[i] : ch03::md_identity());
      }
    }
  }
  pad_to_blocks(lanes);
  while (want.size() < lanes.size()) want.push_back(ch03::md_identity());
  const std::vector<MD> got = merge_groups<kGroup>(lanes);
  int wrong = 0;
  for (std::size_t t = 0; t < got.size(); ++t) {
    if (same_bits(got[t], want[t])) continue;
    if (wrong++ == 0)
      FAIL_CHECK("lane " << t % kWarpSize << " of warp " << t / kWarpSize << " got " << str(got[t])
                         << " where its group holds " << str(want[t]) << " and identities");
  }
  CHECK(wrong == 0);
}

// Seeded groups of extreme lanes: each lane's max from the extreme maxima or -inf (the
// identity, one lane in 4), its d from the smallest subnormal to 1e30 (32 of them stay below
// FLT_MAX). Every lane of a group gets the same bits (lanes l and l ^ k compute merge(a, b)
// and merge(b, a): but for the sign of a zero max, same_but_zero_sign), the group's exact
// max, and a d within log2(kGroup) merges' bound of the exact merge (a lane's pair passes that
// many merges).
template <int kGroup>
void seeded_groups_agree_and_stay_within_the_bound() {
  constexpr int kGroups = 64 * kWarpSize / kGroup;
  std::mt19937_64 rng(kSeed);
  const std::vector<float>& maxima = extreme_maxima();
  const std::vector<float> dens = {kFloatMinSub, 1e-40f, std::numeric_limits<float>::min(),
                                   1.f, 3.f, 1e30f};
  std::vector<MD> lanes;
  for (int g = 0; g < kGroups; ++g) {
    // Groups draw their maxima from a few of the list, so that equal and near maxima meet.
    const std::size_t first = rng() % maxima.size();
    for (int l = 0; l < kGroup; ++l) {
      if (rng() % 4 == 0) {
        lanes.push_back(ch03::md_identity());
        continue;
      }
      const float m = maxima[(first + rng() % 3) % maxima.size()];
      lanes.push_back({m, dens[rng() % dens.size()]});
    }
  }
  pad_to_blocks(lanes);
  const std::vector<MD> got = merge_groups<kGroup>(lanes);
  int steps = 0;
  for (int g = kGroup; g > 1; g /= 2) ++steps;
  int wrong = 0;
  for (std::size_t g0 = 0; g0 < lanes.size(); g0 += kGroup) {
    const std::vector<MD> group(lanes.begin() + static_cast<std::ptrdiff_t>(g0),
                                lanes.begin() + static_cast<std::ptrdiff_t>(g0 + kGroup));
    const ExactMD exact = exact_merge(group);
    double sum_d = 0.0;
    for (const MD& x : group) sum_d += x.d;
    bool ok = got[g0].m == exact.m && d_within(got[g0].d, exact, merge_bound(steps, sum_d));
    for (int l = 1; l < kGroup; ++l) ok = ok && same_but_zero_sign(got[g0 + l], got[g0]);
    if (!ok && wrong++ == 0)
      FAIL_CHECK("group at lane " << g0 << ": lane 0 got " << str(got[g0]) << ", exact ("
                                  << exact.m << ", " << exact.d << ")");
  }
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("sim: at the edges of float's range warp_merge returns the one non-empty lane bit for bit" *
          doctest::test_suite("sim")) {
  SUBCASE("the whole warp") { identity_in_groups<32>(); }
  SUBCASE("groups of 4 lanes") { identity_in_groups<4>(); }
}

TEST_CASE("sim: at the edges of float's range warp_merge gives every lane the merge within its bound" *
          doctest::test_suite("sim")) {
  SUBCASE("the whole warp") { seeded_groups_agree_and_stay_within_the_bound<32>(); }
  SUBCASE("groups of 4 lanes") { seeded_groups_agree_and_stay_within_the_bound<4>(); }
}
