// `chNN --profile` for the attention chapters (04-06, 08): the ladder on one shape, its traffic
// counted per attention row by the simulator (common/ladder_profile.hpp), and the steps their
// programs share (attention_steps). Included by the chapter programs, which link the simulator.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "common/attention_inputs.hpp"
#include "common/attention_report.hpp"
#include "common/chapter_program.hpp"
#include "common/ladder_profile.hpp"
#include "common/rung_buffers.hpp"

namespace wb {

/// A rung's traffic formula at a tile size other than its kernel's: what larger (or smaller)
/// tiles would move, by the formula the profile suite proves exact at the kernel's own size.
struct TileSweepPoint {
  std::string rung;  ///< "fa1"
  std::string tile;  ///< the tile dimension swept: "Bc"
  int size;          ///< 64
  Traffic traffic;
  bool own = false;  ///< the kernel's own tile size
};
using TileSweep = std::function<std::vector<TileSweepPoint>(const AttentionArgs&)>;

/// `rung`'s formula `traffic(args, size)` at tiles of 8, 16, ..., 512 along `tile` ("Bc"),
/// the kernel running `own`.
inline TileSweep tile_sweep(std::string rung, std::string tile, int own,
                            std::function<Traffic(const AttentionArgs&, int)> traffic) {
  return [=](const AttentionArgs& a) {
    std::vector<TileSweepPoint> points;
    for (int size = 8; size <= 512; size *= 2)
      points.push_back({rung, tile, size, traffic(a, size), size == own});
    return points;
  };
}

namespace detail {

/// Prints the sweep under the profile's table and appends its CSV rows (source "formula").
inline void print_tile_sweep(const std::vector<TileSweepPoint>& points, AttentionShape shape,
                             const std::string& shape_name, const std::string& csv_path) {
  if (points.empty()) return;
  std::cout << "The header's formula at other tile sizes (nothing runs; the counts above check "
               "it at the kernel's own):\n";
  Table t({"rung", "tile", "loaded B/row", "stored B/row", "bytes vs the kernel's tile"});
  const std::uint64_t rows = shape.rows();
  std::vector<std::string> csv;
  const auto bytes = [](const TileSweepPoint& p) { return p.traffic.loaded + p.traffic.stored; };
  std::uint64_t own = bytes(points.front());
  for (const TileSweepPoint& p : points)
    if (p.own) own = bytes(p);
  for (const TileSweepPoint& p : points) {
    t.add_row({p.rung, p.tile + " = " + std::to_string(p.size) + (p.own ? " (the kernel's)" : ""),
               per_unit(p.traffic.loaded, rows), per_unit(p.traffic.stored, rows),
               ratio(bytes(p), own)});
    csv.push_back(
        csv_row({shape_name, p.rung, std::to_string(rows), "row", std::to_string(p.traffic.loaded),
                 std::to_string(p.traffic.stored), std::to_string(p.traffic.loaded),
                 std::to_string(p.traffic.stored), p.traffic.formula, "", "", "", "", "",
                 p.own ? "formula, own" : "formula", p.tile + " = " + std::to_string(p.size),
                 std::to_string(p.size), ""}));
  }
  t.print(std::cout);
  std::cout << "\n";
  if (!csv_path.empty()) append_profile_csv(csv_path, csv);
}

}  // namespace detail

/// Every rung of `ladder` (sim kernels) on randn Q, K, V of `shape` in `dtype`; the rows also
/// appended to `csv_path` when given; then `sweep`'s formula at other tile sizes, if any.
inline int profile_attention(const Ladder<AttentionArgs>& ladder, AttentionShape shape,
                             std::uint64_t seed, bool causal, Dtype dtype,
                             const std::string& csv_path = "", const TileSweep& sweep = {}) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.d));
  const AttentionInputs in = make_attention_inputs(ScoreKind::randn, shape, scale, seed);
  AttentionBuffers buffers(Backend::sim, in, shape, scale, causal, dtype, ladder_outputs(ladder));
  name_buffers(buffers.q, "q", buffers.k, "k", buffers.v, "v", buffers.o, "o", buffers.lse, "lse",
               buffers.md, "md", buffers.p, "p");
  const std::string name =
      "attention " + to_string(shape) + (causal ? " causal " : " ") + to_string(dtype);
  const int code = profile_ladder(ladder, buffers.args, shape.rows(), "row", name, csv_path);
  if (code == 0 && sweep) detail::print_tile_sweep(sweep(buffers.args), shape, name, csv_path);
  return code;
}

/// An attention chapter's report: its CPU steps and the rungs of `ladder` (kernels of `backend`)
/// on Q, K, V of `shape` from `seed`, against the fp64 reference.
using AttentionReport = std::function<void(Backend backend, const Ladder<AttentionArgs>& ladder,
                                           AttentionShape shape, std::uint64_t seed)>;

/// What the attention chapters' programs (04-06, 08) share besides their checks, intro and
/// trace: --list's op; --profile on randn Q, K, V of `shape` with the mask and element type
/// `causal` and `dtype` (profile_attention, then `sweep`); --bench of the same where the program
/// offers it (bench_attention); and `report` on the program's backend and seed. `options` is
/// read when a step runs, after the options are parsed.
inline ChapterSteps<AttentionArgs> attention_steps(const ProgramOptions& options,
                                                   AttentionShape shape, bool causal, Dtype dtype,
                                                   AttentionReport report, TileSweep sweep = {}) {
  ChapterSteps<AttentionArgs> steps;
  steps.op = "attention";
  steps.profile = [&options, shape, causal, dtype, sweep](const Ladder<AttentionArgs>& ladder) {
    return profile_attention(ladder, shape, options.seed, causal, dtype, options.bench.csv_path,
                             sweep);
  };
  if (options.offers_bench)
    steps.bench = [&options, shape, causal, dtype](const Ladder<AttentionArgs>& ladder) {
      return bench_attention(kChapter, ladder, options.bench, shape, causal, dtype, options.seed);
    };
  steps.report = [&options, shape, report](const Ladder<AttentionArgs>& ladder) {
    report(options.backend, ladder, shape, options.seed);
  };
  return steps;
}

}  // namespace wb
