#ifndef MT_CONTROL_SRC_TABLE_H_
#define MT_CONTROL_SRC_TABLE_H_

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace mt::control {

// A text table for mtctl: a header row and data rows, columns padded to
// their widest cell; numeric columns are right-aligned. Every cell goes
// through Escape(), so what a process put in a task name cannot drive the
// operator's terminal, and widths count code points, not bytes.
class Table {
 public:
  explicit Table(std::vector<std::string> header, std::vector<bool> right_aligned = {});
  void AddRow(std::vector<std::string> row);
  void Print(std::ostream& out) const;
  bool empty() const { return rows_.empty(); }

  // A table of `shape`'s columns with `label` first and no rows: several
  // targets' tables in one (mtctl --target A --target B).
  static Table Labeled(const std::string& label, const Table& shape);
  // Every row of `other` (this table's columns after the first) under
  // `value` in the first column.
  void AddRowsOf(const std::string& value, const Table& other);

 private:
  std::vector<std::string> header_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

// Human units: "1.23 ms", "4.5 s", "12 us".
std::string Duration(double seconds);
// "3.2k", "1.5M" for large counts.
std::string Count(unsigned long long n);
// `text` cut to `width` code points with "..." when longer; a cut never
// falls inside a UTF-8 sequence.
std::string Clip(const std::string& text, std::size_t width);
// `text` safe to print on a terminal: C0 controls, DEL and bytes that are
// not UTF-8 become \xNN; C1 controls and the bidirectional overrides that
// reorder what the eye reads become \uNNNN; other text is kept.
std::string Escape(std::string_view text);
// Columns `text` takes when printed, counted in code points.
std::size_t DisplayWidth(std::string_view text);

}  // namespace mt::control

#endif  // MT_CONTROL_SRC_TABLE_H_
