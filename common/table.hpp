// Aligned text tables for the chapter programs' traces and reports.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace wb {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  /// Adds a row; it must have as many cells as the header.
  void add_row(std::vector<std::string> cells);
  /// Prints with columns padded to their widest cell and a rule under the header.
  void print(std::ostream& out) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

/// Fixed-point with `digits` after the point ("0.1235").
std::string fixed(double value, int digits = 4);
/// Scientific with `digits` significant digits after the point ("1.23e-07").
std::string sci(double value, int digits = 2);

}  // namespace wb
