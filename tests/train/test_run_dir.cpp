// The run folder (train/run_dir.h): a fresh folder, --resume with the same and with other settings,
// the root and system folders refused (also through "..", a symlink), and a failed run leaving the
// previous results as they were (also on an injected full disk).
#include <doctest/doctest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "core/atomic_file.h"
#include "core/error.h"
#include "tests/temp_dir.h"
#include "train/run_dir.h"

using namespace hh;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// A previous complete run in `out`: config.json, the summary and one per-run result.
void write_previous(const std::string& out) {
  fs::create_directories(out + "/a");
  fs::create_directories(out + "/b");  // a run's folder, as an app makes it
  write_file_atomic(out + "/config.json", "{\"lr\": 1}\n");
  write_file_atomic(out + "/results.csv", "map,accuracy\na,0.9\n");
  write_file_atomic(out + "/plot.svg", "<svg>old</svg>");
  write_file_atomic(out + "/a/result.json", "{\"accuracy\": 0.9}\n");
}

void check_previous(const std::string& out) {
  CHECK(read_file(out + "/config.json") == "{\"lr\": 1}\n");
  CHECK(read_file(out + "/results.csv") == "map,accuracy\na,0.9\n");
  CHECK(read_file(out + "/plot.svg") == "<svg>old</svg>");
  CHECK(read_file(out + "/a/result.json") == "{\"accuracy\": 0.9}\n");
  CHECK_FALSE(fs::exists(out + "/.previous"));
}

const std::vector<std::string> kResults = {"results.csv", "*.svg", "a/result.json", "b/result.json"};

}  // namespace

TEST_CASE("run_dir: a fresh folder is created and gets the settings file") {
  test::TempDir tmp("run_dir_fresh");
  const std::string out = tmp.file("runs/one");
  train::RunDir rd(out, {});
  CHECK(fs::is_directory(out));
  rd.start(json{{"lr", 0.5}, {"threads", 2}}.dump(), false, kResults);
  CHECK(json::parse(read_file(out + "/config.json")) == json{{"lr", 0.5}, {"threads", 2}});
  CHECK_FALSE(rd.holds_previous());
  CHECK(rd.finish(train::RunDir::End::complete).empty());
}

TEST_CASE("run_dir: --resume with the same settings passes; other settings name the key") {
  test::TempDir tmp("run_dir_resume");
  const std::string out = tmp.file("run");
  train::RunDir::Options o;
  o.resume.not_compared = {"threads"};
  {
    train::RunDir rd(out, o);
    rd.start(json{{"lr", 0.5}, {"batch", 8}, {"threads", 2}}.dump(), false, kResults);
    rd.finish(train::RunDir::End::partial);
  }
  {
    train::RunDir rd(out, o);
    CHECK(error_of([&] { rd.start(json{{"lr", 0.5}, {"batch", 8}, {"threads", 4}}.dump(), true, kResults); }).empty());
    rd.finish(train::RunDir::End::complete);
  }
  train::RunDir rd(out, o);
  const std::string e = error_of([&] { rd.start(json{{"lr", 0.25}, {"batch", 8}, {"threads", 2}}.dump(), true, kResults); });
  CHECK(e.find("--resume: the run in '" + out + "' used other settings (lr 0.5 now 0.25)") != std::string::npos);
  CHECK(e.find("batch") == std::string::npos);
  o.resume.show_saved = false;  // lra's wording
  train::RunDir rd2(out, o);
  CHECK(error_of([&] { rd2.start(json{{"lr", 0.25}, {"seed", 1}}.dump(), true, kResults); })
            .find("other settings (lr now 0.25, seed now 1)") != std::string::npos);
  // Nothing to resume.
  train::RunDir none(tmp.file("empty"), o);
  CHECK(error_of([&] { none.start(json{{"lr", 1}}.dump(), true, kResults); }).find("config.json not found") !=
        std::string::npos);
}

TEST_CASE("run_dir: the root and system folders are refused, also through .. and a symlink") {
  test::TempDir tmp("run_dir_system");
  for (const char* p : {"/", "/usr", "/usr/", "/usr/local/out", "/etc/hh", "/var", "/var/lib/hh", "/proc/hh", "/sys",
                        "/lib64", "/tmp", "/home", "/dev", "/dev/shm", "//", "/tmp/.."}) {
    CAPTURE(p);
    const std::string e = error_of([&] { train::check_output_folder(p); });
    CHECK(e.rfind(std::string("--out ") + p + ": ", 0) == 0);
    CHECK(e.find("system folder") != std::string::npos);
  }
  CHECK(error_of([&] { train::check_output_folder(tmp.file("a/../../../../../../../../..")); }).find("resolves to '/'") !=
        std::string::npos);
  const std::string link = tmp.file("root_link");
  fs::create_directory_symlink("/", link);
  CHECK(error_of([&] { train::check_output_folder(link); }).find("resolves to '/'") != std::string::npos);
  CHECK(error_of([&] { train::RunDir rd(link + "/usr", {}); }).find("system folder") != std::string::npos);
  CHECK(error_of([&] { train::check_output_folder(""); }).find("--out: empty path") != std::string::npos);
  CHECK(error_of([&] { train::check_output_folder(tmp.file("x"), "--save-dir"); }).empty());
  CHECK(train::system_folder_of("/var/tmp/hh_run").empty());
  CHECK(train::system_folder_of("/dev/shm/hh_run").empty());
  CHECK(train::system_folder_of("/usr/share/x") == "/usr");
  CHECK(train::system_folder_of(tmp.file("ok")).empty());
}

TEST_CASE("run_dir: a failed run leaves the previous results as they were") {
  test::TempDir tmp("run_dir_failed");
  const std::string out = tmp.file("run");
  write_previous(out);
  {
    train::RunDir rd(out, {});
    rd.start(json{{"lr", 2}}.dump(), false, kResults);
    CHECK(rd.holds_previous());
    CHECK_FALSE(fs::exists(out + "/a/result.json"));  // set aside: not taken for this run's
    CHECK(read_file(out + "/.previous/a/result.json") == "{\"accuracy\": 0.9}\n");
    rd.write(out + "/results.csv", "map,accuracy\na,error\n");
    rd.write(out + "/b/result.json", "{}");
    const std::string note = rd.finish(train::RunDir::End::failed);
    CHECK(note.find("kept as they were") != std::string::npos);
  }
  check_previous(out);
  CHECK_FALSE(fs::exists(out + "/b/result.json"));
  CHECK(read_file(out + "/failed_run/results.csv") == "map,accuracy\na,error\n");
  CHECK(json::parse(read_file(out + "/failed_run/config.json")) == json{{"lr", 2}});

  // An error that escapes the run (no finish) does the same.
  {
    train::RunDir rd(out, {});
    rd.start(json{{"lr", 3}}.dump(), false, kResults);
    rd.write(out + "/results.csv", "partial\n");
  }
  check_previous(out);

  // A full disk (the test hook of core/atomic_file.h): the run's first result write fails.
  ::setenv("HH_TEST_WRITE_FAULT", "results.csv", 1);
  const std::string e = error_of([&] {
    train::RunDir rd(out, {});
    rd.start(json{{"lr", 4}}.dump(), false, kResults);
    rd.write(out + "/results.csv", "new\n");
  });
  ::unsetenv("HH_TEST_WRITE_FAULT");
  CHECK(e.find("No space left on device") != std::string::npos);
  check_previous(out);

  // A complete run replaces the previous results.
  {
    train::RunDir rd(out, {});
    rd.start(json{{"lr", 5}}.dump(), false, kResults);
    rd.write(out + "/results.csv", "new\n");
    CHECK(rd.finish(train::RunDir::End::complete).empty());
  }
  CHECK(read_file(out + "/results.csv") == "new\n");
  CHECK_FALSE(fs::exists(out + "/a/result.json"));
  CHECK_FALSE(fs::exists(out + "/.previous"));
}

TEST_CASE("run_dir: a stopped run keeps the previous results aside until its resume ends") {
  test::TempDir tmp("run_dir_partial");
  const std::string out = tmp.file("run");
  write_previous(out);
  {
    train::RunDir rd(out, {});
    rd.start(json{{"lr", 2}}.dump(), false, kResults);
    rd.write(out + "/b/result.json", "{}");
    rd.finish(train::RunDir::End::partial);
  }
  CHECK(fs::exists(out + "/.previous/results.csv"));
  CHECK(fs::exists(out + "/b/result.json"));  // --resume continues from it
  {
    train::RunDir rd(out, {});
    rd.start(json{{"lr", 2}}.dump(), true, kResults);
    CHECK(rd.holds_previous());
    rd.finish(train::RunDir::End::failed);
  }
  check_previous(out);
  // A fresh run over a stopped one: the stopped run's files go, the previous complete one stays aside.
  {
    train::RunDir rd(out, {});
    rd.start(json{{"lr", 2}}.dump(), false, kResults);
    rd.write(out + "/b/result.json", "{}");
    rd.finish(train::RunDir::End::partial);
  }
  {
    train::RunDir rd(out, {});
    rd.start(json{{"lr", 3}}.dump(), false, kResults);
    CHECK_FALSE(fs::exists(out + "/b/result.json"));
    CHECK(read_file(out + "/.previous/results.csv") == "map,accuracy\na,0.9\n");
  }
  check_previous(out);
}

// Issue 36: two runs writing one --out mixed their files (metrics.jsonl held both runs' lines, some
// glued together). A second process is refused while the first holds the folder, the message
// naming the holder's pid and host; once the holder is dead (killed: its lock file stays behind),
// the next run takes the stale lock over.
TEST_CASE("run_dir: one writer per output folder; a dead holder's lock is taken over") {
  hh::test::TempDir tmp("run_dir_lock");
  const std::string out = tmp.file("out");
  int ready[2], go[2];
  REQUIRE(pipe(ready) == 0);
  REQUIRE(pipe(go) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // the first run: takes the folder, says so, waits until killed
    char c = 0;
    try {
      train::check_output_folder(out);
      c = 'y';
    } catch (...) {
      c = 'n';
    }
    if (write(ready[1], &c, 1) != 1) _exit(2);
    if (read(go[0], &c, 1) < 0) _exit(2);
    _exit(0);
  }
  char c = 0;
  REQUIRE(read(ready[0], &c, 1) == 1);
  REQUIRE(c == 'y');
  const std::string e = error_of([&] { train::check_output_folder(out); });
  CHECK(e.find("--out " + out + ": another run is writing into this folder (pid " + std::to_string(child) +
               " on host ") != std::string::npos);
  CHECK(e.find(".hh-lock") != std::string::npos);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(error_of([&] { train::check_output_folder(out); }).empty());  // the stale lock is taken over
  CHECK(read_file(out + "/.hh-lock").find("pid " + std::to_string(getpid()) + " on host ") == 0);
  CHECK(error_of([&] { train::check_output_folder(out); }).empty());  // this process again: a no-op
  for (int fd : {ready[0], ready[1], go[0], go[1]}) close(fd);
}
