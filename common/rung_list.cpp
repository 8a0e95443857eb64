#include "common/rung_list.hpp"

#include <fstream>
#include <ostream>
#include <stdexcept>

#include "common/bench.hpp"
#include "common/rung_args.hpp"
#include "common/table.hpp"

namespace wb {
namespace {

std::string head_dims_field(const RungLimits& l) {
  std::string s;
  for (int h : l.head_dims) s += (s.empty() ? "" : ";") + std::to_string(h);
  return s;
}

void write_csv(std::ostream& out, const std::string& chapter, const std::string& op,
               const std::vector<RungInfo>& rungs) {
  out << ladder_csv_header() << '\n';
  for (std::size_t i = 0; i < rungs.size(); ++i) {
    const RungLimits& l = rungs[i].limits;
    const std::vector<std::string> fields = {
        chapter, op, std::to_string(i + 1), rungs[i].name, rungs[i].change,
        dtypes_string(l.dtypes, ";"), std::to_string(l.max_cols), std::to_string(l.max_row_bytes),
        std::to_string(l.max_head_dim), head_dims_field(l), std::to_string(l.max_bh),
        l.max_bh > 0 ? (l.causal ? "1" : "0") : ""};
    for (std::size_t f = 0; f < fields.size(); ++f)
      out << (f ? "," : "") << csv_escape(fields[f]);
    out << '\n';
  }
}

}  // namespace

std::string ladder_csv_header() {
  return "chapter,op,rung,name,change,dtypes,max_cols,max_row_bytes,max_head_dim,head_dims,"
         "max_bh,causal";
}

void print_ladder(std::ostream& out, const std::string& chapter, const std::string& op,
                  const std::vector<RungInfo>& rungs, const std::string& csv_path) {
  if (csv_path == "-") {
    write_csv(out, chapter, op, rungs);
    return;
  }
  if (!csv_path.empty()) {
    std::ofstream file(csv_path);
    write_csv(file, chapter, op, rungs);
    if (!file) throw std::runtime_error("--csv: cannot write '" + csv_path + "'");
    return;
  }
  out << "Chapter " << chapter << ": the " << op << " ladder, each rung one idea better than the "
      << "one before\n";
  Table t({"#", "rung", "what it changes", "takes"});
  for (std::size_t i = 0; i < rungs.size(); ++i)
    t.add_row({std::to_string(i + 1), rungs[i].name, rungs[i].change, describe(rungs[i].limits)});
  t.print(out);
}

}  // namespace wb
