#include "common/table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace wb {

void Table::add_row(std::vector<std::string> cells) {
  if (cells.size() != header_.size()) throw std::logic_error("Table row width differs from header");
  rows_.push_back(std::move(cells));
}

void Table::print(std::ostream& out) const {
  std::vector<std::size_t> width(header_.size());
  for (std::size_t c = 0; c < header_.size(); ++c) width[c] = header_[c].size();
  for (const auto& row : rows_)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  auto print_row = [&](const std::vector<std::string>& row) {
    for (std::size_t c = 0; c < row.size(); ++c) {
      out << "  " << row[c] << std::string(width[c] - row[c].size(), ' ');
    }
    out << '\n';
  };
  print_row(header_);
  std::size_t total = 0;
  for (std::size_t w : width) total += w + 2;
  out << "  " << std::string(total - 2, '-') << '\n';
  for (const auto& row : rows_) print_row(row);
}

namespace {
// NaN and inf spelled the same on every platform (printf gives "nan", "-nan" or "NaN").
const char* non_finite(double value) {
  if (std::isnan(value)) return "NaN";
  return value > 0 ? "inf" : "-inf";
}
}  // namespace

std::string fixed(double value, int digits) {
  if (!std::isfinite(value)) return non_finite(value);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

std::string sci(double value, int digits) {
  if (!std::isfinite(value)) return non_finite(value);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*e", digits, value);
  return buf;
}

}  // namespace wb
