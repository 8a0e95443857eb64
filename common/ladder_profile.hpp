// `chNN --profile`: every rung of a chapter's ladder run once on the simulator's profile mode
// (common/sim/access.hpp), one table row per rung: the global bytes it moved per element (or per
// attention row) next to what its header states (Rung::traffic), how well its requests
// coalesce (32-byte sectors per request), its shared-memory bank conflicts (wavefronts per
// request against the conflict-free count), and the time that traffic alone would take at a
// measured copy bandwidth. Under it, the source lines that moved the most bytes.
//
// Only an instrumented twin can count (chNN_instrumented, built next to chNN); parse_program
// runs it for `chNN --profile`. Included by chapter programs, which link the simulator.
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/bench.hpp"
#include "common/buffer.hpp"
#include "common/program.hpp"
#include "common/rung.hpp"
#include "common/sim/access.hpp"
#include "common/table.hpp"

namespace wb {

/// The copy bandwidth the ideal times assume: NVIDIA H100 80GB HBM3, measured by
/// bench/bench_vs_torch.py on 2026-11-22 (torch copy_ of 1 GiB: 3000.6 GB/s; the programs'
/// device-to-device copy: 3005-3007 GB/s).
inline constexpr double kProfileCopyBytesPerSecond = 3.0e12;
inline constexpr const char* kProfileCopyDevice = "H100 80GB HBM3 copy, 3.0 TB/s";

namespace detail {

inline std::string per_unit(std::uint64_t bytes, std::uint64_t units) {
  return fixed(static_cast<double>(bytes) / static_cast<double>(units), 2);
}

inline std::string ratio(std::uint64_t a, std::uint64_t b) {
  return b == 0 ? std::string("-") : fixed(static_cast<double>(a) / static_cast<double>(b), 2);
}

/// The CSV columns of `chNN --profile --csv FILE`, one row per rung and shape: what the docs
/// build draws its traffic tables and figures from (docs/figures/traffic_figures.py). source:
/// "counted" (a rung's launch, counted by profile mode; loaded and stored are the counts) or
/// "formula" (a header's formula at another tile size, tile and tile_size: nothing ran).
/// shared_loaded_bytes: the bytes the counted launches read from shared memory.
inline const char* profile_csv_header() {
  return "shape,rung,units,unit,loaded_bytes,stored_bytes,stated_loaded_bytes,"
         "stated_stored_bytes,formula,sectors_per_load,sectors_per_store,"
         "shared_wavefronts_per_request,conflict_degree,buffers,source,tile,tile_size,"
         "shared_loaded_bytes";
}

/// One CSV row of the fields, escaped.
inline std::string csv_row(const std::vector<std::string>& fields) {
  std::string row;
  for (const std::string& f : fields) row += (row.empty() ? "" : ",") + csv_escape(f);
  return row;
}

/// Appends `lines` to the CSV file at `path` (the header first when the file is new or empty).
inline void append_profile_csv(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream out(path, std::ios::app);
  if (!out) throw std::runtime_error("--csv: cannot write '" + path + "'");
  if (out.tellp() == 0) out << profile_csv_header() << '\n';
  for (const std::string& l : lines) out << l << '\n';
  if (!out) throw std::runtime_error("--csv: writing '" + path + "' failed");
}

/// "name:loaded:stored" for every buffer the launches touched, summed over the launches.
inline std::string buffer_summary(const std::vector<sim::LaunchProfile>& launches) {
  std::vector<sim::BufferTraffic> sum;
  for (const sim::LaunchProfile& p : launches) {
    for (const sim::BufferTraffic& b : p.buffers) {
      auto it = std::find_if(sum.begin(), sum.end(),
                             [&](const sim::BufferTraffic& s) { return s.name == b.name; });
      if (it == sum.end()) {
        sum.push_back(b);
      } else {
        it->loaded += b.loaded;
        it->stored += b.stored;
      }
    }
  }
  std::string out;
  for (const sim::BufferTraffic& b : sum)
    out += (out.empty() ? "" : " ") + b.name + ":" + std::to_string(b.loaded) + ":" +
           std::to_string(b.stored);
  return out;
}

}  // namespace detail

/// The CSV of --access-csv: every global access of each rung's launches, in the order the
/// simulator ran them (docs/figures/tile_order.py draws from it), then every lane of each
/// shared request as it completed: buffer "shared", offset from the start of the shared
/// array, the request's number, the lane's bank phase, and whether it gave an ldmatrix row
/// (docs/figures/bank_map.py). The program's first write starts the file; the rest append
/// (a program may profile its ladder once per element type).
inline void write_access_csv(const std::string& path, const std::string& rung,
                             const std::vector<sim::LaunchProfile>& launches) {
  static bool started = false;
  const bool header = !started;
  started = true;
  std::ofstream out(path, header ? std::ios::trunc : std::ios::app);
  if (!out) throw std::runtime_error("--access-csv: cannot write '" + path + "'");
  if (header)
    out << "rung,launch,kernel,block,thread,buffer,offset,bytes,store,request,phase,ldmatrix\n";
  for (std::size_t l = 0; l < launches.size(); ++l) {
    const sim::LaunchProfile& p = launches[l];
    const std::string kernel = csv_escape(p.kernel);
    for (const sim::GlobalAccess& a : p.trace)
      out << rung << ',' << l << ',' << kernel << ',' << a.block << ',' << a.thread << ','
          << p.buffers[std::size_t(a.buffer)].name << ',' << a.offset << ',' << a.bytes << ','
          << (a.store ? 1 : 0) << ",,,\n";
    for (const sim::SharedAccess& a : p.shared_trace)
      out << rung << ',' << l << ',' << kernel << ',' << a.block << ',' << a.warp * 32 + a.lane
          << ",shared," << a.offset << ',' << a.bytes << ',' << (a.store ? 1 : 0) << ','
          << a.request << ',' << a.phase << ',' << (a.ldmatrix ? 1 : 0) << '\n';
  }
  if (!out) throw std::runtime_error("--access-csv: writing '" + path + "' failed");
}

/// Names the device buffers of a profiled call for the simulator (sim::label_device_buffer),
/// each followed by its name, so that the profile's per-buffer bytes and the access trace speak
/// of "q" and "o", not of addresses: name_buffers(buffers.q, "q", buffers.o, "o").
template <typename T, typename... More>
void name_buffers(const DeviceBuffer<T>& buffer, const char* name, const More&... more) {
  sim::label_device_buffer(buffer.data(), name);
  if constexpr (sizeof...(more) > 0) name_buffers(more...);
}

/// Runs each rung of `ladder` (sim kernels) that takes `args` under profile mode (only the one
/// --rung names, when given) and prints the table; `units` is what the bytes are divided by
/// (rows * cols elements, or attention rows), `unit` its name. With a `csv_path`, also appends
/// a row per rung to that CSV file (detail::profile_csv_header). Returns the program's exit
/// code.
template <typename Args>
int profile_ladder(const Ladder<Args>& ladder, const Args& args, std::uint64_t units,
                   const std::string& unit, const std::string& shape,
                   const std::string& csv_path = "") {
  using sim::LaunchProfile;
  const std::string& only = profile_rung();
  if (!only.empty() && std::none_of(ladder.begin(), ladder.end(),
                                    [&](const Rung<Args>& r) { return only == r.name; }))
    throw std::invalid_argument("--rung: this ladder has no rung '" + only +
                                "' (--list names them)");
  std::cout << "Profile: global-memory traffic counted by the simulator, " << shape << " ("
            << units << " " << unit << "s)\n";
  Table t({"rung", "loaded B/" + unit, "stored B/" + unit, "header states", "sectors/req ld",
           "sectors/req st", "shared ld B/" + unit, "shared wavefronts/req", "conflict",
           "ideal us at 3.0 TB/s"});
  std::vector<std::string> skipped, lines, csv;
  for (const Rung<Args>& rung : ladder) {
    if (!only.empty() && only != rung.name) continue;
    if (const std::string why = why_refused(rung, args); !why.empty()) {
      skipped.push_back(std::string(rung.name) + ": " + why);
      continue;
    }
    const std::string& access_csv = profile_access_csv();
    sim::start_profile(/*trace_global=*/!access_csv.empty());
    rung.launch(args);
    const std::vector<LaunchProfile> launches = sim::stop_profile();
    if (!access_csv.empty()) write_access_csv(access_csv, rung.name, launches);
    sim::TrafficCounts total;
    std::vector<sim::LineTraffic> by_line;
    for (const LaunchProfile& p : launches) {
      total += p.counts;
      by_line.insert(by_line.end(), p.lines.begin(), p.lines.end());
    }
    std::string stated = "-";
    Traffic tr;
    if (rung.traffic != nullptr) {
      tr = rung.traffic(args);
      stated = detail::per_unit(tr.loaded, units) + " + " + detail::per_unit(tr.stored, units);
      if (tr.loaded != total.global_load.bytes || tr.stored != total.global_store.bytes)
        stated += " (differs!)";
    }
    const sim::AccessCounts shared_all = [&] {
      sim::AccessCounts c = total.shared_load;
      c += total.shared_store;
      return c;
    }();
    const double bytes = static_cast<double>(total.global_load.bytes + total.global_store.bytes);
    const std::string sectors_load =
        detail::ratio(total.global_load.units, total.global_load.requests);
    const std::string sectors_store =
        detail::ratio(total.global_store.units, total.global_store.requests);
    const std::string wavefronts = detail::ratio(shared_all.units, shared_all.requests);
    const std::string conflict = detail::ratio(shared_all.units, shared_all.ideal_units);
    t.add_row({rung.name, detail::per_unit(total.global_load.bytes, units),
               detail::per_unit(total.global_store.bytes, units), stated, sectors_load,
               sectors_store, detail::per_unit(total.shared_load.bytes, units), wavefronts,
               conflict, fixed(bytes / kProfileCopyBytesPerSecond * 1e6, 2)});
    const std::vector<std::string> fields = {
        shape,
        rung.name,
        std::to_string(units),
        unit,
        std::to_string(total.global_load.bytes),
        std::to_string(total.global_store.bytes),
        rung.traffic != nullptr ? std::to_string(tr.loaded) : "",
        rung.traffic != nullptr ? std::to_string(tr.stored) : "",
        tr.formula,
        sectors_load,
        sectors_store,
        wavefronts,
        conflict,
        detail::buffer_summary(launches),
        "counted",
        "",
        "",
        std::to_string(total.shared_load.bytes)};
    csv.push_back(detail::csv_row(fields));
    std::stable_sort(by_line.begin(), by_line.end(), [](const auto& a, const auto& b) {
      return a.counts.global_load.bytes + a.counts.global_store.bytes >
             b.counts.global_load.bytes + b.counts.global_store.bytes;
    });
    for (std::size_t i = 0; i < std::min<std::size_t>(3, by_line.size()); ++i) {
      const sim::TrafficCounts& c = by_line[i].counts;
      if (c.global_load.bytes + c.global_store.bytes == 0) break;
      lines.push_back(std::string(rung.name) + ": " + by_line[i].where + " moves " +
                      detail::per_unit(c.global_load.bytes + c.global_store.bytes, units) + " B/" +
                      unit);
    }
  }
  // Not a table of nothing and exit 0: the shape is bad input for every rung asked for.
  if (csv.empty() && !skipped.empty())
    throw std::invalid_argument("--profile: no rung takes " + shape + " (" + skipped.front() + ")");
  t.print(std::cout);
  std::cout << "  header states: loaded + stored bytes per " << unit
            << " by the rung's traffic formula. sectors/req: 32-byte sectors per warp request "
               "(4 for 32 consecutive floats). shared ld: bytes read from shared memory. "
               "conflict: shared wavefronts over the "
               "conflict-free count (1 = no bank conflicts). ideal: the counted bytes at the "
            << kProfileCopyDevice << ".\n";
  if (!lines.empty()) {
    std::cout << "The source lines that move the most bytes:\n";
    for (const std::string& l : lines) std::cout << "  " << l << "\n";
  }
  for (const std::string& s : skipped) std::cout << "  skipped " << s << "\n";
  std::cout << "\n";
  if (!csv_path.empty()) detail::append_profile_csv(csv_path, csv);
  return 0;
}

}  // namespace wb
