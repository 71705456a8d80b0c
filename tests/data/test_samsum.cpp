// SAMSum JSON reader and prompt (data/samsum.h): records read field by field, and malformed files
// whose errors must name the file and the record (or the parser's position).
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "data/samsum.h"

using namespace hh;
using namespace hh::data;
namespace fs = std::filesystem;

namespace {

// A file in a fresh private folder, removed with it.
struct TempFile {
  fs::path dir;
  std::string path;
  explicit TempFile(const std::string& text, const std::string& name = "train.json") {
    static int counter = 0;
    dir = fs::temp_directory_path() / ("hh_samsum_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir);
    fs::create_directories(dir);
    path = (dir / name).string();
    std::ofstream(path, std::ios::binary) << text;
  }
  ~TempFile() { fs::remove_all(dir); }
};

// The message read_samsum fails with on a file holding `text` ("" when it reads).
std::string read_error(const std::string& text) {
  TempFile f(text);
  try {
    read_samsum(f.path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("samsum: records field by field; prompt template") {
  TempFile f(R"JSON([
  {"id": "13818513", "summary": "Amanda baked cookies and will bring Jerry some tomorrow.",
   "dialogue": "Amanda: I baked  cookies. Do you want some?\r\nJerry: Sure!\r\nAmanda: I'll bring you tomorrow :-)"},
  {"id": "13728867", "dialogue": "Olivia: Who are you voting for?\nOlivier: Liberals \"as always\".", "summary": "",
   "extra": [1, 2]},
  {"id": "x3", "dialogue": "A: caf\u00e9", "summary": "s"}
])JSON");
  const auto ex = read_samsum(f.path);
  REQUIRE(ex.size() == 3);
  CHECK(ex[0].id == "13818513");
  CHECK(ex[0].summary == "Amanda baked cookies and will bring Jerry some tomorrow.");
  CHECK(ex[0].dialogue == "Amanda: I baked  cookies. Do you want some?\r\nJerry: Sure!\r\nAmanda: I'll bring you tomorrow :-)");
  CHECK(ex[1].dialogue == "Olivia: Who are you voting for?\nOlivier: Liberals \"as always\".");
  CHECK(ex[1].summary.empty());
  CHECK(ex[2].dialogue == "A: caf\xC3\xA9");
  CHECK(read_samsum(f.path, 2).size() == 2);
  CHECK(samsum_prompt(ex[1]) ==
        "Summarize this dialog:\nOlivia: Who are you voting for?\nOlivier: Liberals \"as always\".\n---\nSummary:\n");
  CHECK_THROWS_WITH_AS(read_samsum(f.path, 0), doctest::Contains("max_examples"), Error);
}

TEST_CASE("samsum: malformed files name the file and the record") {
  CHECK(contains(read_error(R"([{"id": "1", "dialogue": "d", "summary": "s"}, {"id": "2", "dialogue": "d"}])"),
                 "train.json: record 1 (id '2'): missing field 'summary'"));
  CHECK(contains(read_error(R"([{"id": "1", "dialogue": 5, "summary": "s"}])"),
                 "train.json: record 0 (id '1'): field 'dialogue' is a number, expected a string"));
  CHECK(contains(read_error(R"([{"id": 7, "dialogue": "d", "summary": "s"}])"),
                 "train.json: record 0: field 'id' is a number, expected a string"));
  CHECK(contains(read_error(R"([{"id": "1", "dialogue": "d", "summary": "s"}, "oops"])"),
                 "train.json: record 1: expected an object, found string"));
  CHECK(contains(read_error(R"({"id": "1", "dialogue": "d", "summary": "s"})"),
                 "train.json: expected a JSON array of records at the top level, found object"));
  CHECK(contains(read_error("[]"), "train.json: the array holds no records"));
  CHECK(contains(read_error(""), "train.json: the file is empty"));
  CHECK(contains(read_error("[{\"id\": \"1\", \"dialogue\": \"d\" \"summary\": \"s\"}]"), "train.json: invalid JSON at byte 38"));
  CHECK(contains(read_error("[{\"id\": \"1\", \"dialogue\": \"\xFF\", \"summary\": \"s\"}]"), "train.json: invalid JSON at byte"));
  CHECK(contains(read_error(std::string(100, '[') + std::string(100, ']')), "nested deeper than"));
  CHECK_THROWS_WITH_AS(read_samsum("/nonexistent/hh/samsum.json"),
                       doctest::Contains("samsum: /nonexistent/hh/samsum.json: cannot open"), Error);
}
