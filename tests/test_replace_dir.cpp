// core/replace_dir: a folder replaced all or nothing, and what dead writers left beside it.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "core/replace_dir.h"
#include "tests/temp_dir.h"

namespace hh::test {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}
int entries(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename() != "" ? 1 : 0;
  return n;
}
// Marks a leftover as a dead writer's: modified before this process started.
void age(const fs::path& p) { fs::last_write_time(p, fs::file_time_type::clock::now() - std::chrono::hours(48)); }
constexpr const char* kDeadPid = "4194303";  // above Linux's default pid_max: no such process

}  // namespace

TEST_CASE("replace_dir: fills a new folder, replaces an old one, leaves nothing beside it") {
  TempDir t("replace_dir");
  const fs::path dir = t.path / "data";
  replace_dir(dir.string(), [](const std::string& stage) { put(fs::path(stage) / "a.txt", "one"); });
  CHECK(slurp(dir / "a.txt") == "one");
  replace_dir(dir.string(), [](const std::string& stage) { put(fs::path(stage) / "sub" / "b.txt", "two"); });
  CHECK(!fs::exists(dir / "a.txt"));
  CHECK(slurp(dir / "sub" / "b.txt") == "two");
  CHECK(entries(t.path) == 1);  // no stage, no old copy
}

TEST_CASE("replace_dir: a fill that fails leaves the previous folder exactly as it was") {
  TempDir t("replace_dir_fail");
  const fs::path dir = t.path / "data";
  put(dir / "a.txt", "previous");
  CHECK_THROWS_WITH(replace_dir(dir.string(),
                                [](const std::string& stage) {
                                  put(fs::path(stage) / "a.txt", "half");
                                  throw std::runtime_error("disk full");
                                }),
                    "disk full");
  CHECK(slurp(dir / "a.txt") == "previous");
  CHECK(entries(dir) == 1);
  CHECK(entries(t.path) == 1);
}

TEST_CASE("replace_dir: a dead writer's stage is removed and its old copy put back when the folder is gone") {
  TempDir t("replace_dir_dead");
  const fs::path dir = t.path / "data";
  const fs::path stage = t.path / (std::string("data.stage.") + kDeadPid);
  const fs::path old = t.path / (std::string("data.old.") + kDeadPid);
  put(stage / "junk.txt", "half-built");
  put(old / "a.txt", "kept");
  age(stage);
  age(old);
  // The writer died between its two renames: no data/, its old copy beside it. A failing fill
  // shows what the sweep restored.
  CHECK_THROWS(replace_dir(dir.string(), [](const std::string&) { throw std::runtime_error("stop"); }));
  CHECK(slurp(dir / "a.txt") == "kept");
  CHECK(!fs::exists(stage));
  CHECK(!fs::exists(old));
  // A live writer's stage (this process's pid, or a recent one) is never touched.
  const fs::path live = t.path / ("data.stage." + std::to_string(::getpid()) + "9");
  put(live / "x", "busy");
  replace_dir(dir.string(), [](const std::string& s) { put(fs::path(s) / "b.txt", "new"); });
  CHECK(fs::exists(live / "x"));
  CHECK(slurp(dir / "b.txt") == "new");
}

}  // namespace hh::test
