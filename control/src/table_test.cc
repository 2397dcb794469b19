#include "control/src/table.h"

#include <sstream>

#include "gtest/gtest.h"

namespace mt::control {
namespace {

TEST(EscapeTest, KeepsTextAndUtf8) {
  EXPECT_EQ(Escape("worker-3 queue"), "worker-3 queue");
  EXPECT_EQ(Escape("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x99\x82"), "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x99\x82");
}

TEST(EscapeTest, ControlCharactersCannotReachTheTerminal) {
  // A title-setting OSC sequence ended by BEL, a CSI clear, a newline.
  EXPECT_EQ(Escape("a\x1b]0;owned\x07z"), "a\\x1b]0;owned\\x07z");
  EXPECT_EQ(Escape("\x1b[2J\n\r\t\x7f"), "\\x1b[2J\\x0a\\x0d\\x09\\x7f");
  // C1 CSI (U+009B) and a right-to-left override (U+202E).
  EXPECT_EQ(Escape("\xc2\x9b" "1m"), "\\u009b1m");
  EXPECT_EQ(Escape("x\xe2\x80\xaey"), "x\\u202ey");
}

TEST(EscapeTest, BytesThatAreNotUtf8AreEscapedOneByOne) {
  EXPECT_EQ(Escape("a\xff" "b"), "a\\xffb");
  EXPECT_EQ(Escape("\xc3"), "\\xc3");                  // Truncated.
  EXPECT_EQ(Escape("\xc0\xaf"), "\\xc0\\xaf");         // Overlong '/'.
  EXPECT_EQ(Escape("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // A surrogate.
  EXPECT_EQ(Escape("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // Past U+10FFFF.
  EXPECT_EQ(Escape(std::string("a\0b", 3)), "a\\x00b");
}

TEST(ClipTest, CutsByCodePointNeverInsideOne) {
  EXPECT_EQ(Clip("short", 10), "short");
  EXPECT_EQ(Clip("abcdefghij", 6), "abc...");
  const std::string e_acute = "\xc3\xa9";
  std::string accents;
  for (int i = 0; i < 10; ++i) accents += e_acute;
  EXPECT_EQ(Clip(accents, 10), accents);  // Ten code points fit in ten.
  EXPECT_EQ(Clip(accents, 6), e_acute + e_acute + e_acute + "...");
  EXPECT_EQ(Clip(accents, 2), e_acute + e_acute);
}

TEST(TableTest, PadsByCodePointAndEscapesEveryCell) {
  Table table({"ID", "NAME"}, {true, false});
  table.AddRow({"1", "caf\xc3\xa9"});
  table.AddRow({"22", "bell\x07"});
  std::ostringstream out;
  table.Print(out);
  EXPECT_EQ(out.str(),
            "ID  NAME\n"
            " 1  caf\xc3\xa9\n"
            "22  bell\\x07\n");
}

TEST(TableTest, TablesOfSeveralTargetsShareOneWithALabelColumn) {
  Table a({"ID", "NAME"}, {true, false});
  a.AddRow({"1", "x"});
  Table b({"ID", "NAME"}, {true, false});
  b.AddRow({"22", "y\x1b"});
  b.AddRow({"3", "z"});
  Table merged = Table::Labeled("TARGET", a);
  merged.AddRowsOf("unix:///a.sock", a);
  merged.AddRowsOf("host\x07:1", b);
  std::ostringstream out;
  merged.Print(out);
  EXPECT_EQ(out.str(),
            "TARGET          ID  NAME\n"
            "unix:///a.sock   1  x\n"
            "host\\x07:1      22  y\\x1b\n"
            "host\\x07:1       3  z\n");
}

}  // namespace
}  // namespace mt::control
