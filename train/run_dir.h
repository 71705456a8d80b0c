// The run folder: what every app that writes an output folder (--out) does with it, in one place.
// Before any long work: the folder checks (not empty, not the root or a system folder after ".."
// and symlinks are resolved, created when missing, writable) and, with --resume, the check that the
// settings the run was started with are the settings now (one comparison, used for a settings file
// in the folder and for a fingerprint inside a checkpoint alike). A fresh run writes its settings
// file (config.json: each app keeps its own name and content, so folders written before resume).
//
// The rule for a previous result: a run that fails never replaces the previous complete result. A
// fresh run into a folder that holds one first sets the previous run's files aside (renames into
// <out>/.previous/, which needs no free space); when the new run completes, the previous files are
// dropped; when it fails (a run ended with an error, or an error escaped), this run's files move to
// <out>/failed_run/ (deleted where even that cannot be done, e.g. on a full disk) and the previous
// files are renamed back, as they were. A run stopped early (--stop-after-steps, or killed) leaves
// both in place: --resume continues it, with the same rule at its end.
#pragma once
#include <string>
#include <vector>

namespace hh::train {

// The system folder that `path` lies in or is, after resolving ".." and symlinks ("/" for the root);
// "" when none. System folders: the root, /home, /tmp, the OS folders /bin /boot /dev /etc /lib*
// /proc /run /sbin /snap /sys /usr /var and everything inside them, except what lies inside the
// shared temp folders /dev/shm, /var/tmp and /run/user (those three themselves are refused).
std::string system_folder_of(const std::string& path);

// Refuses an empty `path` ("<flag>: empty path") and a system folder ("<flag> <path>: ..."). Makes
// no change on disk (for ranks that only check).
void refuse_system_folder(const std::string& path, const std::string& flag = "--out");

// One writer per folder: an exclusive advisory lock (flock) on <path>/.hh-lock, whose text names
// the holder ("pid 1234 on host gpu3"). Held until this process ends (the kernel then drops it,
// however the process ends, so the file a killed run leaves is a stale lock the next run takes
// over); a second call in the same process is a no-op. Another live process holding it is an
// error: "<flag> <path>: another run is writing into this folder (pid 1234 on host gpu3; lock file
// ...)". A file system without flock gives a warning and no lock. The folder must exist.
void lock_output_folder(const std::string& path, const std::string& flag = "--out");

// The output-folder checks of every app, before any long work: refuse_system_folder, then the
// folder is created when missing and must take new files (core/atomic_file.h ensure_writable_dir),
// then lock_output_folder. Errors read "<flag> <path>: ...".
void check_output_folder(const std::string& path, const std::string& flag = "--out");

// How --resume compares the settings a run was started with against the settings now.
struct ResumeCheck {
  std::vector<std::string> not_compared;  // keys recorded but not compared (threads, jobs: no effect on results)
  bool show_saved = true;                 // "lr 0.001 now 0.01" (else "lr now 0.01")
};

// Settings are JSON text here (installed headers do not include nlohmann/json).
// The differing keys of `now` (top level): "" when every compared key of `now` has the same value in
// `saved`, else "key saved now new, ..." (an absent key reads "(absent)"). Text that is not JSON is
// an error naming it.
std::string settings_diff(const std::string& saved_json, const std::string& now_json, const ResumeCheck& c = {});

// Fails with "--resume: <what> (<diff>); <advice>" when settings_diff is not empty.
void check_same_settings(const std::string& what, const std::string& saved_json, const std::string& now_json,
                         const ResumeCheck& c, const std::string& advice);

class RunDir {
 public:
  struct Options {
    std::string flag = "--out";
    std::string settings_file = "config.json";  // relative to the folder
    ResumeCheck resume;
  };
  enum class End { complete, failed, partial };

  // check_output_folder(path).
  RunDir(std::string path, Options o);
  // A started run that was not finished (an error escaped) ends as End::failed. Never throws.
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::string& path() const { return path_; }
  std::string at(const std::string& rel) const { return path_ + "/" + rel; }

  // `results`: the files of one run, relative to the folder (the settings file is added): what a
  // fresh run sets aside and a failed run puts back; a last component may hold one '*' ("*.svg").
  // resume: the folder's settings file must exist and hold `settings` (the keys of
  // Options::resume.not_compared aside), else "--resume: ..." naming the file or the keys. Fresh:
  // a previous run's files are set aside (see the top of this file), then the settings file is
  // written (the settings, indented by 2). Call before any long work.
  // `reports`: the files among `results` that a resumed run writes anew (tables, pages, figures): a
  // resumed run sets those aside and puts them back if it fails, as a fresh run does with all of
  // them (its checkpoints and logs stay in place: the run continues from them).
  void start(const std::string& settings_json, bool resume, std::vector<std::string> results,
             std::vector<std::string> reports = {});

  // Writes `bytes` to `path` (a path inside the folder) atomically, removing dead writers' temps.
  void write(const std::string& path, const std::string& bytes) const;

  // The run's end: complete drops the previous files, failed restores them (when there are any),
  // partial leaves both for --resume. Returns a note for the user ("" when nothing to say).
  std::string finish(End e);

  // Whether a previous run's files are set aside (in <out>/.previous) while this run goes on.
  bool holds_previous() const;

 private:
  std::vector<std::string> existing_results() const;
  std::string restore_previous() noexcept;

  std::string path_;
  Options o_;
  std::vector<std::string> results_;
  bool started_ = false;
};

}  // namespace hh::train
