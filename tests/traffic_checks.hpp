// The traffic check: every rung of a ladder moves exactly the global-memory bytes its header
// states (Rung::traffic, common/rung.hpp), counted by the simulator's profile mode. Runs only
// in a chapter's instrumented twin (suite "profile", CTest NN_name/sim-profile), on odd shapes
// (rows and cols that are multiples of nothing), so a formula that holds only for whole tiles
// or whole vectors fails. A chapter's test names its ladder and its cases (check_traffic).
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
#include "common/inputs.hpp"
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

// A ladder's cases, one struct per kind of ladder: what check_traffic runs its rungs on.

/// Row ladders (softmax): every shape in every type, over a constant x (traffic does not depend
/// on the values).
struct RowTrafficCases {
  std::vector<RowShape> shapes;
  std::vector<Dtype> dtypes;
};

/// LayerNorm ladders: every shape in every type, with gamma and beta where `affine`, else
/// without (nullptr, which a kernel must not read).
struct LayerNormTrafficCases {
  std::vector<RowShape> shapes;
  std::vector<Dtype> dtypes;
  bool affine;
};

/// Attention ladders: every shape in every type, without and (where `causal`) with the causal
/// mask, with the outputs every rung of the ladder writes; where tiles_br > 0 (the smallest Br
/// of the rungs), each masked case again with a tiles_visited buffer of (bh, ceil(lq /
/// tiles_br)) ints.
struct AttentionTrafficCases {
  std::vector<AttentionShape> shapes;
  std::vector<Dtype> dtypes;
  bool causal;
  int tiles_br = 0;
};

/// Attention's backward ladders: every shape in every type, without and (where `causal`) with
/// the causal mask; in fp32 with the P a standard forward keeps (the baseline reads it).
struct BackwardTrafficCases {
  std::vector<AttentionShape> shapes;
  std::vector<Dtype> dtypes;
  bool causal;
};

/// "rows x cols type", naming a row case.
inline std::string row_case_name(const RowShape& s, Dtype t) {
  return std::to_string(s.rows) + " x " + std::to_string(s.cols) + " " + to_string(t);
}

/// check_ladder_traffic on each of `cases`; returns the rungs that took some case (and so for
/// each kind of cases below).
inline std::vector<std::string> check_traffic_cases(const Ladder<RowArgs>& ladder,
                                                    const RowTrafficCases& cases) {
  std::vector<std::string> took;
  for (const Dtype t : cases.dtypes) {
    for (const RowShape& s : cases.shapes) {
      RowBuffers buffers(Backend::sim,
                         std::vector<float>(static_cast<std::size_t>(s.rows) * s.cols, 0.5f),
                         s.rows, s.cols, t);
      const std::vector<std::string> r =
          check_ladder_traffic(ladder, buffers.args, row_case_name(s, t));
      took.insert(took.end(), r.begin(), r.end());
    }
  }
  return took;
}

inline std::vector<std::string> check_traffic_cases(const Ladder<LayerNormArgs>& ladder,
                                                    const LayerNormTrafficCases& cases) {
  constexpr float kEps = 1e-5f;  // any eps > 0: traffic does not depend on it
  std::vector<std::string> took;
  for (const Dtype t : cases.dtypes) {
    for (const RowShape& s : cases.shapes) {
      const std::vector<float> x(static_cast<std::size_t>(s.rows) * s.cols, 0.5f);
      const std::vector<float> gamma(cases.affine ? s.cols : 0, 2.f),
          beta(cases.affine ? s.cols : 0, 1.f);
      LayerNormBuffers buffers(Backend::sim, x, gamma, beta, s.rows, s.cols, kEps, t);
      const std::vector<std::string> r =
          check_ladder_traffic(ladder, buffers.args,
                               row_case_name(s, t) + (cases.affine ? " with gamma and beta"
                                                                   : " without gamma and beta"));
      took.insert(took.end(), r.begin(), r.end());
    }
  }
  return took;
}

inline std::vector<std::string> check_traffic_cases(const Ladder<AttentionArgs>& ladder,
                                                    const AttentionTrafficCases& cases) {
  constexpr std::uint64_t kSeed = 7;
  std::vector<std::string> took;
  const auto add = [&took](const std::vector<std::string>& r) {
    took.insert(took.end(), r.begin(), r.end());
  };
  for (const Dtype t : cases.dtypes) {
    for (const AttentionShape& s : cases.shapes) {
      const float scale = default_scale(s.d);
      const AttentionInputs in = make_attention_inputs(ScoreKind::randn, s, scale, kSeed);
      for (const bool masked : {false, true}) {
        if (masked && !cases.causal) continue;
        AttentionBuffers buffers(Backend::sim, in, s, scale, masked, t, ladder_outputs(ladder));
        const std::string where = to_string(s) + " " + to_string(t) + (masked ? " causal" : "");
        add(check_ladder_traffic(ladder, buffers.args, where));
        if (masked && cases.tiles_br > 0) {  // again, with the K/V tiles each block visits written
          DeviceBuffer<int> visited(
              Backend::sim,
              static_cast<std::size_t>(s.bh) * ((s.lq + cases.tiles_br - 1) / cases.tiles_br));
          buffers.args.tiles_visited = visited.data();
          add(check_ladder_traffic(ladder, buffers.args, where + ", tiles_visited"));
        }
      }
    }
  }
  return took;
}

inline std::vector<std::string> check_traffic_cases(const Ladder<AttentionBackwardArgs>& ladder,
                                                    const BackwardTrafficCases& cases) {
  std::vector<std::string> took;
  for (const AttentionShape& s : cases.shapes) {
    for (const Dtype t : cases.dtypes) {
      for (const bool masked : {false, true}) {
        if (masked && !cases.causal) continue;
        const BackwardInputs in{make_attention_inputs(ScoreKind::randn, s, 1.f, 9),
                                randn(s.q_elems(), 10), std::vector<float>(s.rows(), 0.f),
                                randn(s.q_elems(), 11),
                                t == Dtype::fp32 ? randn(s.p_elems(), 12) : std::vector<float>()};
        AttentionBackwardBuffers buffers(Backend::sim, in, s, 1.f, masked, t);
        const std::vector<std::string> r = check_ladder_traffic(
            ladder, buffers.args, to_string(s) + ", " + to_string(t) + (masked ? ", causal" : ""));
        took.insert(took.end(), r.begin(), r.end());
      }
    }
  }
  return took;
}

/// The traffic check of a whole ladder: every rung that takes them moves exactly the bytes its
/// header states on each of `cases` (the structs above), and every rung takes some case.
template <typename Args, typename... Cases>
void check_traffic(const Ladder<Args>& ladder, const Cases&... cases) {
  std::vector<std::string> took;
  for (const std::vector<std::string>& r : {check_traffic_cases(ladder, cases)...})
    took.insert(took.end(), r.begin(), r.end());
  check_every_rung_counted(ladder, took);
}

}  // namespace wb::test
