// The run folder (train/run_dir.h): output-folder checks, the resume check, and the previous result
// set aside while a fresh run replaces it.
#include "train/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <system_error>
#include <thread>

#include "core/atomic_file.h"
#include "core/error.h"

namespace hh::train {

namespace fs = std::filesystem;

namespace {

const char* kPrevious = ".previous";
const char* kFailed = "failed_run";
const char* kLockFile = ".hh-lock";

// The path with ".." and symlinks resolved (the existing part through the file system, the rest
// lexically); the path as given when even that fails.
fs::path resolved(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) return fs::path(path).lexically_normal();
  fs::path r = fs::weakly_canonical(p, ec);
  if (ec) return p.lexically_normal();
  return r.lexically_normal();
}

// "a/b/*.svg" -> the existing files it names under `dir` (relative paths).
void expand(const std::string& dir, const std::string& pattern, std::vector<std::string>& out) {
  std::error_code ec;
  const size_t star = pattern.find('*');
  if (star == std::string::npos) {
    if (fs::is_regular_file(fs::symlink_status(dir + "/" + pattern, ec))) out.push_back(pattern);
    return;
  }
  const size_t slash = pattern.rfind('/');
  const std::string sub = slash == std::string::npos ? "" : pattern.substr(0, slash + 1);
  const std::string name = slash == std::string::npos ? pattern : pattern.substr(slash + 1);
  const size_t s = name.find('*');
  const std::string prefix = name.substr(0, s), suffix = name.substr(s + 1);
  for (fs::directory_iterator it(dir + "/" + sub, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.size() < prefix.size() + suffix.size() || n.compare(0, prefix.size(), prefix) != 0 ||
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    if (n.find(".tmp.") != std::string::npos) continue;  // a writer's temp file, not a result
    if (fs::is_regular_file(it->symlink_status(ec))) out.push_back(sub + n);
  }
}

// Renames `from` to `to`, creating the folders `to` needs; an error names both.
void move_file(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::create_directories(to.parent_path(), ec);
  if (ec) fail(str("cannot create '", to.parent_path().string(), "': ", ec.message()));
  fs::rename(from, to, ec);
  if (ec) fail(str("cannot move '", from.string(), "' to '", to.string(), "': ", ec.message()));
}

}  // namespace

std::string system_folder_of(const std::string& path) {
  const fs::path p = resolved(path);
  std::vector<std::string> parts;
  for (const auto& c : p.relative_path()) {
    const std::string s = c.string();
    if (!s.empty() && s != ".") parts.push_back(s);
  }
  if (parts.empty()) return "/";
  const std::string top = "/" + parts[0];
  // The shared temp folders inside OS folders: their sub-folders are for users' files.
  if (parts.size() >= 3 && ((parts[0] == "dev" && parts[1] == "shm") || (parts[0] == "var" && parts[1] == "tmp") ||
                            (parts[0] == "run" && parts[1] == "user")))
    return "";
  if (parts.size() == 2 && ((parts[0] == "dev" && parts[1] == "shm") || (parts[0] == "var" && parts[1] == "tmp") ||
                            (parts[0] == "run" && parts[1] == "user")))
    return top + "/" + parts[1];
  // Folders that hold everyone's files: refused as a whole, their sub-folders are fine.
  if (parts.size() == 1 && (parts[0] == "home" || parts[0] == "tmp")) return top;
  static const char* kOs[] = {"bin", "boot", "dev", "etc", "proc", "run", "sbin", "snap", "sys", "usr", "var"};
  for (const char* s : kOs)
    if (parts[0] == s) return top;
  if (parts[0].rfind("lib", 0) == 0) return top;  // /lib /lib32 /lib64 /libx32
  return "";
}

void refuse_system_folder(const std::string& path, const std::string& flag) {
  HH_CHECK(!path.empty(), flag, ": empty path (give the folder for the results)");
  const std::string sys = system_folder_of(path);
  if (sys.empty()) return;
  const std::string where = resolved(path).string();
  fail(str(flag, " ", path, ": ", where != path ? str("resolves to '", where, "', ") : std::string(),
           sys == where ? str("'", sys, "' is a system folder") : str("inside the system folder '", sys, "'"),
           "; a run's files go in a folder of their own (e.g. ", flag, " out/run1)"));
}

namespace {

// The folders this process holds the lock of (resolved path -> the lock file's descriptor), kept
// open until the process ends: the kernel then drops the lock, however the process ends.
std::mutex g_locks_mutex;
std::map<std::string, int> g_locks;

std::string this_host() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) return "?";
  return host;
}

}  // namespace

void lock_output_folder(const std::string& path, const std::string& flag) {
  const std::string key = resolved(path).string();
  std::lock_guard<std::mutex> g(g_locks_mutex);
  if (g_locks.count(key)) return;  // this process holds it already (a RunDir after the app's check)
  const std::string file = (fs::path(path) / kLockFile).string();
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  HH_CHECK(fd >= 0, flag, " ", path, ": cannot open the lock file ", file, ": ", std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) {  // a file system without flock: go on unlocked, and say so
      ::close(fd);
      std::fprintf(stderr, "warning: %s %s: cannot lock the folder (%s): another run into it would not be refused\n",
                   flag.c_str(), path.c_str(), std::strerror(err));
      return;
    }
    // Held by a live process: what it wrote (it writes just after taking the lock: waited for up
    // to a second).
    char buf[256] = {};
    ssize_t n = 0;
    for (int tries = 0; tries < 100 && (n = ::pread(fd, buf, sizeof buf - 1, 0)) <= 0; ++tries)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ::close(fd);
    std::string holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\r')) holder.pop_back();
    fail(str(flag, " ", path, ": another run is writing into this folder (",
             holder.empty() ? std::string("its pid not written yet") : holder, "; lock file ", file,
             "); wait for it to end or choose another folder"));
  }
  // Ours: a lock file a dead process left (its lock went with it) is taken over and rewritten.
  const std::string me = str("pid ", ::getpid(), " on host ", this_host());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    // The lock holds without its note (a full disk): the refusal then cannot name us.
  }
  g_locks.emplace(key, fd);
}

void check_output_folder(const std::string& path, const std::string& flag) {
  refuse_system_folder(path, flag);
  try {
    ensure_writable_dir(path);
  } catch (const Error& e) {
    fail(str(flag, " ", path, ": ", e.what()));
  }
  lock_output_folder(path, flag);
}

namespace {

nlohmann::json parse_settings(const std::string& text, const char* which) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(str("settings: the ", which, " settings are not JSON: ", e.what()));
  }
}

std::string diff_json(const nlohmann::json& saved, const nlohmann::json& now, const ResumeCheck& c) {
  std::string diff;
  if (!now.is_object()) return saved == now ? "" : "the whole settings";
  for (auto it = now.begin(); it != now.end(); ++it) {
    bool skip = false;
    for (const auto& k : c.not_compared) skip = skip || k == it.key();
    if (skip) continue;
    const bool has = saved.is_object() && saved.contains(it.key());
    if (has && saved[it.key()] == it.value()) continue;
    diff += str(diff.empty() ? "" : ", ", it.key(), " ");
    if (c.show_saved) diff += str(has ? saved[it.key()].dump() : "(absent)", " ");
    diff += str("now ", it.value().dump());
  }
  return diff;
}

void check_same_json(const std::string& what, const nlohmann::json& saved, const nlohmann::json& now,
                     const ResumeCheck& c, const std::string& advice) {
  const std::string diff = diff_json(saved, now, c);
  HH_CHECK(diff.empty(), "--resume: ", what, " (", diff, "); ", advice);
}

}  // namespace

std::string settings_diff(const std::string& saved_json, const std::string& now_json, const ResumeCheck& c) {
  return diff_json(parse_settings(saved_json, "saved"), parse_settings(now_json, "current"), c);
}

void check_same_settings(const std::string& what, const std::string& saved_json, const std::string& now_json,
                         const ResumeCheck& c, const std::string& advice) {
  check_same_json(what, parse_settings(saved_json, "saved"), parse_settings(now_json, "current"), c, advice);
}

RunDir::RunDir(std::string path, Options o) : path_(std::move(path)), o_(std::move(o)) {
  check_output_folder(path_, o_.flag);
}

RunDir::~RunDir() {
  if (!started_) return;
  try {
    const std::string note = finish(End::failed);
    if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
  } catch (...) {
  }
}

bool RunDir::holds_previous() const {
  std::error_code ec;
  return fs::is_directory(at(kPrevious), ec);
}

std::vector<std::string> RunDir::existing_results() const {
  std::vector<std::string> found;
  for (const auto& p : results_) expand(path_, p, found);
  return found;
}

void RunDir::start(const std::string& settings_json, bool resume, std::vector<std::string> results,
                   std::vector<std::string> reports) {
  const nlohmann::json settings = parse_settings(settings_json, "current");
  results_ = std::move(results);
  if (!o_.settings_file.empty()) results_.push_back(o_.settings_file);
  if (resume) {
    if (!o_.settings_file.empty()) {
      const std::string file = at(o_.settings_file);
      std::error_code ec;
      HH_CHECK(fs::exists(file, ec), "--resume: ", file, " not found: there is no run in '", path_,
               "' to resume (start it without --resume)");
      const nlohmann::json saved = nlohmann::json::parse(read_file(file), nullptr, false);
      HH_CHECK(saved.is_object(), "--resume: ", file, " is not a JSON object");
      check_same_json(str("the run in '", path_, "' used other settings"), saved, settings, o_.resume,
                          "resume with the original flags, or start afresh without --resume");
    }
    results_ = std::move(reports);  // what a resumed run replaces: set aside below, like a fresh run's
    if (results_.empty()) {
      started_ = true;
      return;
    }
  }
  const std::vector<std::string> found = existing_results();
  if (holds_previous()) {
    // A fresh run set the previous result aside and did not finish: its files are no result.
    for (const auto& rel : found) ::remove(at(rel).c_str());
  } else if (!found.empty()) {
    std::vector<std::string> moved;
    try {
      for (const auto& rel : found) {
        move_file(at(rel), fs::path(at(kPrevious)) / rel);
        moved.push_back(rel);
      }
    } catch (const Error& e) {
      for (const auto& rel : moved) {
        std::error_code ec;
        fs::rename(fs::path(at(kPrevious)) / rel, at(rel), ec);
      }
      std::error_code ec;
      fs::remove_all(at(kPrevious), ec);
      fail(str(o_.flag, " ", path_, ": cannot set the previous run's results aside: ", e.what()));
    }
  }
  started_ = true;
  if (!resume && !o_.settings_file.empty()) write(at(o_.settings_file), settings.dump(2) + "\n");
}

void RunDir::write(const std::string& path, const std::string& bytes) const {
  remove_stale_temps(path);
  write_file_atomic(path, bytes);
}

std::string RunDir::restore_previous() noexcept {
  std::error_code ec;
  const fs::path failed = at(kFailed), previous = at(kPrevious);
  fs::remove_all(failed, ec);
  bool all_kept = true;
  size_t moved = 0;
  std::vector<std::string> mine;
  try {
    mine = existing_results();
  } catch (...) {
  }
  for (const auto& rel : mine) {
    try {
      move_file(at(rel), failed / rel);
      ++moved;
    } catch (...) {
      all_kept = false;
      ::remove(at(rel).c_str());  // no room even for a folder entry: the failed run's file goes
    }
  }
  bool restored = true;
  std::vector<fs::path> files;
  for (fs::recursive_directory_iterator it(previous, ec), end; !ec && it != end; it.increment(ec))
    if (!it->is_directory(ec)) files.push_back(it->path());
  for (const auto& f : files) {
    try {
      move_file(f, fs::path(path_) / f.lexically_relative(previous));
    } catch (...) {
      restored = false;
    }
  }
  if (restored) fs::remove_all(previous, ec);
  return str("note: this run did not complete; the previous results in ", path_,
             restored ? " are kept as they were" : str(" could not all be put back (they are in ", previous.string(), ")"),
             moved == 0   ? std::string()
             : all_kept ? str(" and this run's files are in ", failed.string())
                        : str(" (this run's files are in ", failed.string(), " where there was room, else removed)"));
}

std::string RunDir::finish(End e) {
  if (!started_) return "";
  started_ = false;
  if (e == End::partial) return "";
  if (!holds_previous()) return "";
  if (e == End::complete) {
    std::error_code ec;
    fs::remove_all(at(kPrevious), ec);
    return "";
  }
  return restore_previous();
}

}  // namespace hh::train
