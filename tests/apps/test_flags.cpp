// cli/flags.h: every boolean spelling users type, and the help layout (one default, continuation
// lines indented under the first).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cli/flags.h"

namespace {

using hh::cli::Flags;

// Parses `args` (without the program name) into a Flags with a bool --eos (default true), a bool
// --affine declared only by its "false" default, and a string --out.
Flags parsed(std::vector<std::string> args) {
  Flags f("prog", "about");
  f.add("eos", "true", "stop at end of sequence", true);
  f.add("affine", "false", "affine window factors");
  f.add("out", "", "folder");
  std::vector<char*> argv{const_cast<char*>("prog")};
  for (auto& a : args) argv.push_back(a.data());
  f.parse(static_cast<int>(argv.size()), argv.data());
  return f;
}

}  // namespace

TEST_CASE("flags: a boolean takes --name, --name=v, --name v and --no-name") {
  CHECK(parsed({}).boolean("eos"));
  CHECK_FALSE(parsed({}).boolean("affine"));
  CHECK(parsed({"--affine"}).boolean("affine"));
  CHECK(parsed({"--affine=true"}).boolean("affine"));
  CHECK_FALSE(parsed({"--eos=false"}).boolean("eos"));
  CHECK_FALSE(parsed({"--eos", "false"}).boolean("eos"));
  CHECK(parsed({"--affine", "yes"}).boolean("affine"));
  CHECK_FALSE(parsed({"--no-eos"}).boolean("eos"));
  CHECK(parsed({"--no-affine", "--eos"}).boolean("eos"));
  CHECK_FALSE(parsed({"--no-affine", "--eos"}).boolean("affine"));
}

TEST_CASE("flags: a boolean never swallows the next flag, and contradictions are errors") {
  // Declared only by its "false" default, --affine used to take "--out" as its value.
  const Flags f = parsed({"--affine", "--out", "dir"});
  CHECK(f.boolean("affine"));
  CHECK(f.str("out") == "dir");
  CHECK_THROWS_WITH(parsed({"--affine", "--no-affine"}), doctest::Contains("given twice"));
  CHECK_THROWS_WITH(parsed({"--no-eos=true"}), doctest::Contains("takes no value"));
  CHECK_THROWS_WITH(parsed({"--no-out"}), doctest::Contains("unknown flag --no-out"));
  CHECK_THROWS_WITH(parsed({"--eos=maybe"}).boolean("eos"), doctest::Contains("expected true or false"));
  CHECK_THROWS_WITH(parsed({}).boolean("out"), doctest::Contains("not declared as a boolean"));
}

TEST_CASE("flags: help shows one default and indents continuation lines") {
  Flags f("prog", "about");
  f.add("precision", "f32", "first line\nsecond line\n      third line (hand-indented)");
  f.add("jobs", "", "runs at once (default: as many as fit)");
  f.add("name-longer-than-the-column", "x", "help");
  const std::string p = f.help_entry("precision");
  CHECK(p == "  --precision          first line\n"
             "                       second line\n"
             "                       third line (hand-indented) (default: f32)\n");
  const std::string j = f.help_entry("jobs");
  CHECK(j.find("(default: as many as fit)") != std::string::npos);
  CHECK(j.find("(default: \"\")") == std::string::npos);
  CHECK(f.help_entry("name-longer-than-the-column") ==
        "  --name-longer-than-the-column\n                       help (default: x)\n");
}


TEST_CASE("flags: a comma list of integers is checked item by item") {
  Flags f("prog", "about");
  f.add("threads", "1,2", "thread counts");
  std::vector<std::string> args = {"prog", "--threads", "4,8"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  f.parse(static_cast<int>(argv.size()), argv.data());
  CHECK(f.integers("threads", 1, 16) == std::vector<int64_t>{4, 8});
  CHECK_THROWS_WITH(f.integers("threads", 1, 4), doctest::Contains("flag --threads: expected integers in [1, 4], got '8'"));
  Flags g("prog", "about");
  g.add("threads", "1,x", "thread counts");
  CHECK_THROWS_WITH(g.integers("threads", 1, 16), doctest::Contains("got 'x'"));
}
