#include "control/src/table.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace mt::control {

Table::Table(std::vector<std::string> header, std::vector<bool> right_aligned)
    : header_(std::move(header)), right_(std::move(right_aligned)) {
  right_.resize(header_.size(), false);
  for (auto& cell : header_) cell = Escape(cell);
}

void Table::AddRow(std::vector<std::string> row) {
  row.resize(header_.size());
  for (auto& cell : row) cell = Escape(cell);
  rows_.push_back(std::move(row));
}

Table Table::Labeled(const std::string& label, const Table& shape) {
  Table table({label}, {false});
  // The shape's header is escaped already: taken as it is.
  table.header_.insert(table.header_.end(), shape.header_.begin(), shape.header_.end());
  table.right_.insert(table.right_.end(), shape.right_.begin(), shape.right_.end());
  return table;
}

void Table::AddRowsOf(const std::string& value, const Table& other) {
  const std::string label = Escape(value);
  for (const auto& row : other.rows_) {
    std::vector<std::string> labeled = {label};
    labeled.insert(labeled.end(), row.begin(), row.end());  // Escaped already.
    labeled.resize(header_.size());
    rows_.push_back(std::move(labeled));
  }
}

void Table::Print(std::ostream& out) const {
  std::vector<std::size_t> width(header_.size());
  for (std::size_t c = 0; c < header_.size(); ++c) width[c] = DisplayWidth(header_[c]);
  for (const auto& row : rows_) {
    for (std::size_t c = 0; c < row.size(); ++c) {
      width[c] = std::max(width[c], DisplayWidth(row[c]));
    }
  }
  auto print_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - DisplayWidth(row[c]), ' ');
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

namespace {

bool IsContinuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

// The length of the well-formed UTF-8 sequence at the start of `text`
// (no overlong forms, no surrogates, nothing past U+10FFFF), or 0.
std::size_t SequenceLength(std::string_view text, char32_t* code_point) {
  const auto at = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = at(0);
  std::size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;  // Bounds of the second byte.
  char32_t value = 0;
  if (lead < 0x80) {
    *code_point = lead;
    return 1;
  } else if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, value = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3, value = lead & 0x0F;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4, value = lead & 0x07;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (text.size() < length || at(1) < low || at(1) > high) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    if (!IsContinuation(at(i))) return 0;
    value = (value << 6) | (at(i) & 0x3F);
  }
  *code_point = value;
  return length;
}

bool IsBidiControl(char32_t c) {
  return (c >= 0x202A && c <= 0x202E) || (c >= 0x2066 && c <= 0x2069) || c == 0x200E ||
         c == 0x200F || c == 0x061C;
}

}  // namespace

std::string Clip(const std::string& text, std::size_t width) {
  if (DisplayWidth(text) <= width) return text;
  const std::size_t keep = width <= 3 ? width : width - 3;
  std::size_t end = 0, kept = 0;
  while (end < text.size()) {
    if (!IsContinuation(static_cast<unsigned char>(text[end]))) {
      if (kept == keep) break;
      ++kept;
    }
    ++end;
  }
  return width <= 3 ? text.substr(0, end) : text.substr(0, end) + "...";
}

std::string Escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    char32_t c = 0;
    const std::size_t length = SequenceLength(text, &c);
    if (length == 0 || c < 0x20 || c == 0x7F) {
      out += absl::StrFormat("\\x%02x", static_cast<unsigned char>(text[0]));
      text.remove_prefix(1);
      continue;
    }
    if ((c >= 0x80 && c <= 0x9F) || IsBidiControl(c)) {
      out += absl::StrFormat("\\u%04x", static_cast<unsigned>(c));
    } else {
      out.append(text.substr(0, length));
    }
    text.remove_prefix(length);
  }
  return out;
}

std::size_t DisplayWidth(std::string_view text) {
  std::size_t width = 0;
  for (const char byte : text) width += !IsContinuation(static_cast<unsigned char>(byte));
  return width;
}

}  // namespace mt::control
