// The traffic check: every rung of a ladder moves exactly the global-memory bytes its header
// states (Rung::traffic, common/rung.hpp), counted by the simulator's profile mode. Runs only
// in a chapter's instrumented twin (suite "profile", CTest NN_name/sim-profile), on odd shapes
// (rows and cols that are multiples of nothing), so a formula that holds only for whole tiles
// or whole vectors fails.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "common/attention_inputs.hpp"
#include "common/dtype.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"
#include "common/rung_buffers.hpp"
#include "common/sim/access.hpp"
#include "tests/row_shape.hpp"

namespace wb::test {

/// Global bytes read and written by everything `launch` runs, counted by profile mode.
struct CountedTraffic {
  std::uint64_t loaded = 0, stored = 0;
};

/// The profiles of the launches `launch` makes, in order (profile mode around it; with
/// `trace_global`, every global access too: LaunchProfile::trace).
template <typename Launch>
std::vector<wb::sim::LaunchProfile> profile_launches(Launch&& launch, bool trace_global = false) {
  wb::sim::start_profile(trace_global);
  try {
    launch();
  } catch (...) {
    wb::sim::stop_profile();
    throw;
  }
  return wb::sim::stop_profile();
}

/// The names of the kernels `launch` runs, in order, as the simulator names them (namespaces,
/// template arguments and all): what a dispatcher launched, seen from the launch itself and
/// not from what the dispatcher says it chose.
template <typename Launch>
std::vector<std::string> launched_kernels(Launch&& launch) {
  std::vector<std::string> names;
  for (const wb::sim::LaunchProfile& p : profile_launches(launch)) names.push_back(p.kernel);
  return names;
}

/// The widths in bytes of the global accesses `launch` makes, lane by lane (trace mode): to
/// every buffer, or only to those labelled (sim::label_device_buffer) with one of `buffers`.
template <typename Launch>
std::set<std::uint32_t> global_access_widths(Launch&& launch,
                                             const std::vector<std::string>& buffers = {}) {
  std::set<std::uint32_t> widths;
  for (const wb::sim::LaunchProfile& p : profile_launches(launch, /*trace_global=*/true)) {
    for (const wb::sim::GlobalAccess& a : p.trace) {
      const std::string& name = p.buffers[static_cast<std::size_t>(a.buffer)].name;
      if (buffers.empty() || std::find(buffers.begin(), buffers.end(), name) != buffers.end())
        widths.insert(a.bytes);
    }
  }
  return widths;
}

/// The rows of the vector-width checks: 16-byte vectors (cols a multiple of every type's
/// width, aligned rows) in a narrow group of lanes (24), whole vectors per lane of a warp
/// (136) and in the block rungs (1032); single elements (37, a multiple of no vector width).
inline const std::vector<RowShape> kVectorWidthShapes = {{7, 24}, {3, 136}, {2, 1032}, {5, 37}};

/// The one width every access of a row has: a 16-byte vector, or an element of `t`.
inline std::set<std::uint32_t> row_access_width(bool vectors, Dtype t) {
  return {vectors ? 16u : static_cast<std::uint32_t>(dtype_bytes(t))};
}

template <typename Launch>
CountedTraffic count_traffic(Launch&& launch) {
  CountedTraffic c;
  for (const wb::sim::LaunchProfile& p : profile_launches(launch)) {
    c.loaded += p.counts.global_load.bytes;
    c.stored += p.counts.global_store.bytes;
  }
  return c;
}

/// Every rung of `ladder` that takes `args` states its traffic, and moves exactly that.
/// Returns the names of the rungs that took `args` (for check_every_rung_counted).
template <typename Args>
std::vector<std::string> check_ladder_traffic(const Ladder<Args>& ladder, const Args& args,
                                              const std::string& where) {
  REQUIRE_MESSAGE(wb::sim::instrumented(),
                  "traffic checks need the instrumented twin (run NN_name/sim-profile)");
  std::vector<std::string> took;
  for (const Rung<Args>& rung : ladder) {
    if (!why_refused(rung, args).empty()) continue;
    took.emplace_back(rung.name);
    INFO(std::string(rung.name), " on ", where);
    const bool states_traffic = rung.traffic != nullptr;
    REQUIRE_MESSAGE(states_traffic, rung.name, " states no traffic (Rung::traffic)");
    const Traffic stated = rung.traffic(args);
    const CountedTraffic counted = count_traffic([&] { rung.launch(args); });
    INFO("the header says: ", stated.formula);
    CHECK(counted.loaded == stated.loaded);
    CHECK(counted.stored == stated.stored);
  }
  return took;
}

/// Each rung of `ladder` was counted on some case: `took` lists the rungs each case ran.
template <typename Args>
void check_every_rung_counted(const Ladder<Args>& ladder, const std::vector<std::string>& took) {
  for (const Rung<Args>& rung : ladder) {
    bool counted = false;
    for (const std::string& name : took) counted = counted || name == rung.name;
    CHECK_MESSAGE(counted, rung.name, " took none of the traffic check's cases");
  }
}

/// A launch that reads shared memory and whose shared-memory requests, loads and stores, take
/// the conflict-free count of wavefronts (common/sim/access.hpp).
inline void check_no_bank_conflicts(const sim::TrafficCounts& c) {
  CHECK(c.shared_load.requests > 0);
  CHECK(c.shared_load.units == c.shared_load.ideal_units);
  CHECK(c.shared_store.units == c.shared_store.ideal_units);
}

/// check_ladder_traffic on every shape, in every type of `dtypes`, over a constant x (traffic
/// does not depend on the values). Returns the rungs that took some case.
inline std::vector<std::string> check_row_ladder_traffic(const Ladder<RowArgs>& ladder,
                                                         const std::vector<RowShape>& shapes,
                                                         const std::vector<Dtype>& dtypes) {
  std::vector<std::string> took;
  for (const Dtype t : dtypes) {
    for (const RowShape& s : shapes) {
      RowBuffers buffers(Backend::sim,
                         std::vector<float>(static_cast<std::size_t>(s.rows) * s.cols, 0.5f),
                         s.rows, s.cols, t);
      const std::vector<std::string> r = check_ladder_traffic(
          ladder, buffers.args,
          std::to_string(s.rows) + " x " + std::to_string(s.cols) + " " + to_string(t));
      took.insert(took.end(), r.begin(), r.end());
    }
  }
  return took;
}

/// check_ladder_traffic on every shape, in every type of `dtypes`, with gamma and beta where
/// `affine`, else without (nullptr, which a kernel must not read). Returns the rungs that took
/// some case.
inline std::vector<std::string> check_layernorm_ladder_traffic(const Ladder<LayerNormArgs>& ladder,
                                                               const std::vector<RowShape>& shapes,
                                                               const std::vector<Dtype>& dtypes,
                                                               bool affine) {
  constexpr float kEps = 1e-5f;  // any eps > 0: traffic does not depend on it
  std::vector<std::string> took;
  for (const Dtype t : dtypes) {
    for (const RowShape& s : shapes) {
      const std::vector<float> x(static_cast<std::size_t>(s.rows) * s.cols, 0.5f);
      const std::vector<float> gamma(affine ? s.cols : 0, 2.f), beta(affine ? s.cols : 0, 1.f);
      LayerNormBuffers buffers(Backend::sim, x, gamma, beta, s.rows, s.cols, kEps, t);
      const std::vector<std::string> r = check_ladder_traffic(
          ladder, buffers.args,
          std::to_string(s.rows) + " x " + std::to_string(s.cols) + " " + to_string(t) +
              (affine ? " with gamma and beta" : " without gamma and beta"));
      took.insert(took.end(), r.begin(), r.end());
    }
  }
  return took;
}

/// check_ladder_traffic on every shape, in every type of `dtypes`, without and (where
/// `causal`) with the causal mask, with the outputs every rung of the ladder writes; where
/// tiles_br > 0 (the smallest Br of the rungs), each masked case again with a tiles_visited
/// buffer of (bh, ceil(lq / tiles_br)) ints. Returns the rungs that took some case.
inline std::vector<std::string> check_attention_ladder_traffic(
    const Ladder<AttentionArgs>& ladder, const std::vector<AttentionShape>& shapes,
    const std::vector<Dtype>& dtypes, bool causal, int tiles_br = 0) {
  constexpr std::uint64_t kSeed = 7;
  std::vector<std::string> took;
  for (const Dtype t : dtypes) {
    for (const AttentionShape& s : shapes) {
      const float scale = default_scale(s.d);
      const AttentionInputs in = make_attention_inputs(ScoreKind::randn, s, scale, kSeed);
      for (const bool masked : {false, true}) {
        if (masked && !causal) continue;
        AttentionBuffers buffers(Backend::sim, in, s, scale, masked, t, ladder_outputs(ladder));
        const std::string where = to_string(s) + " " + to_string(t) + (masked ? " causal" : "");
        std::vector<std::string> r = check_ladder_traffic(ladder, buffers.args, where);
        took.insert(took.end(), r.begin(), r.end());
        if (masked && tiles_br > 0) {  // again, with the K/V tiles each block visits written out
          DeviceBuffer<int> visited(
              Backend::sim, static_cast<std::size_t>(s.bh) * ((s.lq + tiles_br - 1) / tiles_br));
          buffers.args.tiles_visited = visited.data();
          r = check_ladder_traffic(ladder, buffers.args, where + ", tiles_visited");
          took.insert(took.end(), r.begin(), r.end());
        }
      }
    }
  }
  return took;
}

}  // namespace wb::test
