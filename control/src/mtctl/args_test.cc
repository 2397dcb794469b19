#include "control/src/mtctl/args.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mt::control::mtctl {
namespace {

class ParseGlobalTest : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv("MTCTL_TARGET"); }
  int Parse(std::vector<std::string> args) { return ParseGlobal(args, &opts_); }
  Options opts_;
};

TEST_F(ParseGlobalTest, CommandAndItsArgumentsAreKeptInOrder) {
  EXPECT_EQ(
      Parse({"--target", "unix:///run/x.sock", "tasks", "--state", "ready"}),
      -1);
  EXPECT_EQ(opts_.target, "unix:///run/x.sock");
  EXPECT_EQ(opts_.args,
            (std::vector<std::string>{"tasks", "--state", "ready"}));
  EXPECT_EQ(opts_.format, Format::kTable);
}

TEST_F(ParseGlobalTest, TargetsRepeatedAndFromAFile) {
  const std::string file = ::testing::TempDir() + "/targets";
  FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("# fleet\n  10.0.0.1:7443 \n\n\tunix:///run/b.sock\r\n", f);
  std::fclose(f);
  EXPECT_EQ(Parse({"--target", "1234", "--targets-file", file, "--target=77", "workers"}),
            -1);
  EXPECT_EQ(opts_.targets, (std::vector<std::string>{"1234", "10.0.0.1:7443",
                                                     "unix:///run/b.sock", "77"}));
  EXPECT_EQ(opts_.target, "1234");
  Options other;
  EXPECT_EQ(ParseGlobal({"--targets-file", file + ".missing", "info"}, &other), kExitUsage);
  Options empty_target;
  EXPECT_EQ(ParseGlobal({"--target=", "info"}, &empty_target), kExitUsage);
}

TEST_F(ParseGlobalTest, OutputFormats) {
  EXPECT_EQ(Parse({"-o", "wide", "workers"}), -1);
  EXPECT_EQ(opts_.format, Format::kWide);
  EXPECT_EQ(Parse({"--output=json", "info"}), -1);
  EXPECT_EQ(opts_.format, Format::kJson);
  Options other;
  EXPECT_EQ(ParseGlobal({"--json", "info"}, &other), -1);
  EXPECT_EQ(other.format, Format::kJson);
  EXPECT_EQ(Parse({"-o", "yaml", "info"}), kExitUsage);
}

TEST_F(ParseGlobalTest, TargetComesFromTheEnvironmentUnlessGiven) {
  setenv("MTCTL_TARGET", "1234", 1);
  EXPECT_EQ(Parse({"info"}), -1);
  EXPECT_EQ(opts_.target, "1234");
  Options given;
  EXPECT_EQ(ParseGlobal({"--target=99", "info"}, &given), -1);
  EXPECT_EQ(given.target, "99");
  unsetenv("MTCTL_TARGET");
}

TEST_F(ParseGlobalTest, TimeoutsAreBounded) {
  EXPECT_EQ(Parse({"--timeout", "2.5", "--connect-timeout=10", "info"}), -1);
  EXPECT_DOUBLE_EQ(opts_.timeout_seconds, 2.5);
  EXPECT_DOUBLE_EQ(opts_.connect_timeout_seconds, 10);
  EXPECT_EQ(Parse({"--timeout", "0", "info"}), kExitUsage);
  EXPECT_EQ(Parse({"--timeout", "soon", "info"}), kExitUsage);
  EXPECT_EQ(Parse({"--connect-timeout", "-1", "info"}), kExitUsage);
  EXPECT_EQ(Parse({"--connect-timeout", "3601", "info"}), kExitUsage);
}

TEST_F(ParseGlobalTest, BadUsage) {
  EXPECT_EQ(Parse({}), kExitUsage);                        // No command.
  EXPECT_EQ(Parse({"--frobnicate", "info"}), kExitUsage);  // Unknown option.
  EXPECT_EQ(Parse({"info", "--target"}),
            kExitUsage);  // Option without its value.
}

TEST_F(ParseGlobalTest, HelpEndsParsingSuccessfully) {
  EXPECT_EQ(Parse({"--help"}), kExitOk);
  EXPECT_NE(std::string(kUsage).find("shutdown [--grace SECONDS]"),
            std::string::npos);
}

TEST_F(ParseGlobalTest, TlsOptions) {
  EXPECT_EQ(
      Parse({"--tls-ca", "ca.pem", "--tls-cert=c.pem", "--tls-key", "k.pem",
             "--tls-server-name", "ctl", "--token-file", "t", "info"}),
      -1);
  EXPECT_EQ(opts_.tls_ca, "ca.pem");
  EXPECT_EQ(opts_.tls_cert, "c.pem");
  EXPECT_EQ(opts_.tls_key, "k.pem");
  EXPECT_EQ(opts_.tls_server_name, "ctl");
  EXPECT_EQ(opts_.token_file, "t");
}

TEST(CommandArgsTest, PositionalsValuesAndFlags) {
  CommandArgs a({"task", "42", "--frames", "8", "--msg=bye", "--all"}, 1);
  std::string id, msg;
  double frames = 0;
  EXPECT_TRUE(a.Positional(&id));
  EXPECT_EQ(id, "42");
  EXPECT_EQ(a.Number("--frames", &frames, 0, 1000), 1);
  EXPECT_DOUBLE_EQ(frames, 8);
  EXPECT_EQ(a.Value("--msg", &msg), 1);
  EXPECT_EQ(msg, "bye");
  EXPECT_TRUE(a.Flag("--all"));
  EXPECT_FALSE(a.Flag("--all"));  // Taken once.
  EXPECT_TRUE(a.Done());
}

TEST(CommandArgsTest, AbsentAndBadValues) {
  CommandArgs a({"tasks", "--limit", "0", "--name"}, 1);
  double limit = 500;
  std::string state, name;
  EXPECT_EQ(a.Value("--state", &state), 0);
  EXPECT_EQ(a.Number("--limit", &limit, 1, 1e9), -1);  // Below its range.
  EXPECT_EQ(a.Value("--name", &name), -1);             // No value follows.
}

TEST(CommandArgsTest, LeftoversAreRefused) {
  CommandArgs a({"info", "extra"}, 1);
  EXPECT_FALSE(a.Done());
  CommandArgs b({"info"}, 1);
  EXPECT_TRUE(b.Done());
}

TEST(CommandArgsTest, APositionalIsNotAFlagsValue) {
  CommandArgs a({"cancel", "--msg", "why", "7"}, 1);
  std::string id;
  EXPECT_TRUE(a.Positional(&id));
  EXPECT_EQ(id, "7");
}

TEST(ParseIdTest, PositiveIntegersOnly) {
  std::uint64_t id = 0;
  EXPECT_TRUE(ParseId("17", &id));
  EXPECT_EQ(id, 17u);
  EXPECT_FALSE(ParseId("0", &id));
  EXPECT_FALSE(ParseId("-3", &id));
  EXPECT_FALSE(ParseId("abc", &id));
}

}  // namespace
}  // namespace mt::control::mtctl
