// `chNN --list`: each rung of a chapter's ladder with the one thing it changes and its limits,
// as a table, or as CSV (`--list --csv FILE`, `-` for standard output), which
// bench/bench_vs_torch.py reads instead of knowing the chapters itself.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "common/rung.hpp"

namespace wb {

/// A rung without its launch: what --list prints.
struct RungInfo {
  std::string name;
  std::string change;
  RungLimits limits;
};

template <typename Args>
std::vector<RungInfo> rung_infos(const Ladder<Args>& ladder) {
  std::vector<RungInfo> infos;
  for (const Rung<Args>& r : ladder) infos.push_back({r.name, r.change, r.limits});
  return infos;
}

/// The CSV columns of --list, comma-separated, no newline.
std::string ladder_csv_header();

/// Prints the ladder of `chapter` (its op: softmax, layernorm or attention) as a table on
/// `out`, or as CSV to `csv_path` when it is not empty ("-": to `out`). Throws
/// std::runtime_error when the file cannot be written.
void print_ladder(std::ostream& out, const std::string& chapter, const std::string& op,
                  const std::vector<RungInfo>& rungs, const std::string& csv_path);

}  // namespace wb
