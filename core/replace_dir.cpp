// replace_dir (core/replace_dir.h): stage, swap by two renames, sweep what dead writers left.
#include "core/replace_dir.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"

namespace hh {

namespace fs = std::filesystem;

namespace {

// The pid in "<name>.<tag>.<pid>", or -1 when `entry` is not such a sibling of `name`.
long long sibling_pid(const std::string& entry, const std::string& name, const std::string& tag) {
  const std::string prefix = name + "." + tag + ".";
  if (entry.size() <= prefix.size() || entry.compare(0, prefix.size(), prefix) != 0) return -1;
  const std::string rest = entry.substr(prefix.size());
  if (rest.find_first_not_of("0123456789") != std::string::npos || rest.size() > 18) return -1;
  return std::stoll(rest);
}

// Removes the stages, and restores or removes the old copies, that dead writers left beside dir.
void sweep(const fs::path& dir) {
  std::error_code ec;
  const std::string name = dir.filename().string();
  std::vector<fs::path> stages, olds;
  for (const fs::directory_entry& e : fs::directory_iterator(dir.parent_path().empty() ? "." : dir.parent_path(), ec)) {
    const std::string entry = e.path().filename().string();
    long long pid = sibling_pid(entry, name, "stage");
    if (pid > 0 && temp_owner_gone(e.path().string(), pid)) stages.push_back(e.path());
    pid = sibling_pid(entry, name, "old");
    if (pid > 0 && temp_owner_gone(e.path().string(), pid)) olds.push_back(e.path());
  }
  for (const fs::path& p : stages) fs::remove_all(p, ec);
  for (const fs::path& p : olds) {
    if (!fs::exists(dir, ec) && ::rename(p.c_str(), dir.c_str()) == 0) continue;  // died mid-swap: put it back
    fs::remove_all(p, ec);
  }
}

}  // namespace

void replace_dir(const std::string& dir_text, const std::function<void(const std::string& stage)>& fill) {
  HH_CHECK(!dir_text.empty(), "replace_dir: empty folder path");
  const fs::path dir = fs::path(dir_text).lexically_normal();
  HH_CHECK(!dir.filename().empty() && dir.filename() != "." && dir.filename() != "..", "replace_dir: ", dir_text,
           " does not name a folder");
  std::error_code ec;
  if (!dir.parent_path().empty()) fs::create_directories(dir.parent_path(), ec);
  sweep(dir);
  const std::string pid = std::to_string(::getpid());
  const fs::path stage = dir.string() + ".stage." + pid, old = dir.string() + ".old." + pid;
  fs::remove_all(stage, ec);
  ensure_writable_dir(stage.string());
  try {
    fill(stage.string());
  } catch (...) {
    fs::remove_all(stage, ec);
    throw;
  }
  const bool had = fs::exists(dir, ec);
  if (had && ::rename(dir.c_str(), old.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    fs::remove_all(stage, ec);
    fail(str("replace_dir: cannot move ", dir.string(), " aside to ", old.string(), ": ", why));
  }
  if (::rename(stage.c_str(), dir.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    if (had) ::rename(old.c_str(), dir.c_str());  // put the previous folder back
    fs::remove_all(stage, ec);
    fail(str("replace_dir: cannot move ", stage.string(), " to ", dir.string(), ": ", why));
  }
  if (had) fs::remove_all(old, ec);
}

}  // namespace hh
