#include "common/sass_view.hpp"

#include <unistd.h>

#include <cstddef>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/table.hpp"

namespace wb {
namespace {

using Row = std::map<std::string, std::string>;

// Unused in a build without nvcc, where --sass only refuses: [[maybe_unused]].

/// The fields of one CSV line (RFC 4180: quoted fields may hold commas and "" for a quote).
[[maybe_unused]] std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      fields.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      fields.emplace_back();
    } else if (c != '\r') {
      fields.back() += c;
    }
  }
  return fields;
}

/// The table the build wrote beside this program: chNN_sass.csv next to chNN.
[[maybe_unused]] std::string table_path() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "";
  return std::string(self, static_cast<std::size_t>(n)) + "_sass.csv";
}

// The columns shown (sass_mix.py's, in its order) and their short headers.
[[maybe_unused]] const std::vector<std::pair<std::string, std::string>> kShown = {
    {"HMMA", "HMMA"},       {"HGMMA", "HGMMA"},     {"LDSM", "LDSM"},   {"cp.async/TMA", "async"},
    {"LDG/STG", "LDG/STG"}, {"LDS/STS", "LDS/STS"}, {"FP32", "FP32"},   {"MUFU.EX2", "EX2"},
    {"MUFU", "MUFU"},       {"convert", "cvt"},     {"integer", "int"}, {"move", "move"},
    {"barrier", "bar"},     {"SHFL", "SHFL"},       {"other", "other"}, {"total", "total"}};

}  // namespace

int print_sass_view(const Cli& cli, const std::string& chapter,
                    const std::vector<std::string>& rungs) {
#if !WB_HAVE_CUDA
  (void)chapter;
  (void)rungs;
  return cli.error(
      "--sass shows the machine code nvcc made of the kernels: this build has no nvcc (its "
      "kernels run on the simulator only)");
#else
  const std::string path = table_path();
  std::ifstream file(path);
  std::string line;
  if (!file || !std::getline(file, line)) {
    cli.error("--sass: no SASS table at '" + path +
              "': it is built with the program when cuobjdump and nvdisasm are found (the "
              "configure step's warning says what is missing)");
    return 1;
  }
  const std::vector<std::string> header = csv_fields(line);
  std::vector<Row> rows;
  while (std::getline(file, line)) {
    const std::vector<std::string> fields = csv_fields(line);
    if (fields.size() != header.size()) continue;
    Row row;
    for (std::size_t i = 0; i < fields.size(); ++i) row[header[i]] = fields[i];
    // The main loop of each rung's main kernel, and the rungs with no kernel of their own.
    if (row["scope"] == "loop" && (row["role"] == "main" || row["role"] == "none"))
      rows.push_back(row);
  }
  std::vector<std::string> columns = {"#", "rung"};
  for (const auto& [column, shown] : kShown) columns.push_back(shown);
  Table table(columns);
  std::vector<std::string> notes;
  for (std::size_t i = 0; i < rungs.size(); ++i) {
    bool found = false;
    for (const Row& row : rows) {
      if (row.at("rung") != rungs[i]) continue;
      found = true;
      std::vector<std::string> cells = {std::to_string(i + 1), rungs[i]};
      for (const auto& [column, shown] : kShown)
        cells.push_back(row.at(column).empty() ? "-" : row.at(column));
      table.add_row(cells);
      if (row.at("role") == "none") {
        notes.push_back(rungs[i] + ": " + row.at("via"));
      } else {
        std::string note =
            rungs[i] + ": " + row.at("kernel") + " on " + row.at("arch") + ", " + row.at("range");
        if (!row.at("via").empty()) note += " (" + row.at("via") + ")";
        notes.push_back(note);
      }
    }
    if (!found) {
      cli.error("--sass: the table '" + path + "' has no row for rung " + rungs[i] +
                ": rebuild the program (it rebuilds the table)");
      return 1;
    }
  }
  std::cout << "Chapter " << chapter
            << ": the main loop of each rung's kernel in nvcc's machine code (SASS), "
               "instructions by kind\n"
               "  Static counts: each instruction of the loop once, as ptxas laid it out, and "
               "each is a warp's;\n"
               "  one trip of an attention kernel's main loop is one tile (K/V in a forward "
               "kernel, Q in chapter 10's\n  backward), an inner loop's body counted once. A "
               "kernel without a loop is counted whole.\n\n";
  table.print(std::cout);
  std::cout << "\nThe kernel each row shows and its main loop (addresses in cuobjdump -sass):\n";
  for (const std::string& note : notes) std::cout << "  " << note << '\n';
  std::cout << "\nasync: cp.async and TMA copies; cvt: conversions and packed 16-bit math; int: "
               "integer and address arithmetic;\nbar: barriers, mbarriers and fences; other: "
               "branches, NOP, predicates. Every kernel and its whole-kernel counts:\n  "
            << path << " (common/cmake/sass_mix.py)\n";
  return 0;
#endif
}

}  // namespace wb
