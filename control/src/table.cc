#include "control/src/table.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace mt::control {

Table::Table(std::vector<std::string> header, std::vector<bool> right_aligned)
    : header_(std::move(header)), right_(std::move(right_aligned)) {
  right_.resize(header_.size(), false);
}

void Table::AddRow(std::vector<std::string> row) {
  row.resize(header_.size());
  rows_.push_back(std::move(row));
}

void Table::Print(std::ostream& out) const {
  std::vector<std::size_t> width(header_.size());
  for (std::size_t c = 0; c < header_.size(); ++c) width[c] = header_[c].size();
  for (const auto& row : rows_) {
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  auto print_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      const bool last = c + 1 == row.size();
      if (right_[c]) {
        line += pad + row[c];
      } else {
        line += row[c] + (last ? "" : pad);
      }
      if (!last) line += "  ";
    }
    out << line << "\n";
  };
  print_row(header_);
  for (const auto& row : rows_) print_row(row);
}

std::string Duration(double seconds) {
  if (seconds <= 0) return "0";
  if (seconds < 1e-3) return absl::StrFormat("%.0f us", seconds * 1e6);
  if (seconds < 1) return absl::StrFormat("%.2f ms", seconds * 1e3);
  if (seconds < 120) return absl::StrFormat("%.2f s", seconds);
  if (seconds < 7200) return absl::StrFormat("%.1f min", seconds / 60);
  return absl::StrFormat("%.1f h", seconds / 3600);
}

std::string Count(unsigned long long n) {
  if (n < 10'000) return absl::StrFormat("%d", n);
  if (n < 10'000'000) return absl::StrFormat("%.1fk", n / 1e3);
  return absl::StrFormat("%.1fM", n / 1e6);
}

std::string Clip(const std::string& text, std::size_t width) {
  if (text.size() <= width) return text;
  return width <= 3 ? text.substr(0, width) : text.substr(0, width - 3) + "...";
}

}  // namespace mt::control
