// Whole-file I/O with clear errors: atomic writes (temp file in the same folder, fsync, rename,
// fsync the folder) so a crash never leaves a half-written checkpoint under the final name, and
// reads that name the path and the OS error. InputFile reads pieces of a large file at offsets
// (safetensors loads tensors straight into their storage without a second copy of the file).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace hh {

// Writes `bytes` to `path` atomically: a temp file next to `path` is written, flushed and fsynced,
// renamed over `path`, then the folder is fsynced. On any failure the temp file is removed and
// hh::Error names the path and strerror; `path` is then left as it was. Tests: HH_TEST_WRITE_FAULT=S
// in the environment makes every write whose path contains S fail as on a full disk (ENOSPC).
void write_file_atomic(const std::string& path, const std::string& bytes);

// Removes the temp files that write_file_atomic left next to `path` when its process died in the
// middle of a write (SIGKILL, Ctrl-C, power loss: no unwinding runs, so nothing else removes them;
// a failure that throws removes its own temp file). A sibling "<name of path>.tmp.<pid>.<n>" is
// removed only when both hold: no process <pid> exists on this machine (so no live writer, this
// process included, can still rename it), and the file was last modified before this process
// started (so a writer on another machine sharing the folder is not raced either; when the start
// time cannot be read, the first rule alone decides). Returns how many were removed; errors while
// sweeping are ignored (the sweep is housekeeping, the write that follows reports real trouble).
int remove_stale_temps(const std::string& path);

// Whether the temp file or folder at `path`, made by process `pid`, was left by a writer that is
// gone, by the two rules above (no process `pid` exists here, and `path` was last modified before
// this process started). For writers of whole folders (data/lm_prepare.cpp) that sweep their own
// temp folders the same way.
bool temp_owner_gone(const std::string& path, long long pid);

// Tests only: write_file_atomic fails with ENOSPC ("No space left on device", as on a full disk)
// once `bytes` more bytes have been written through it by this process, after writing as much of
// the file as fits; a negative value (the default) turns the limit off.
// The test hook of a full disk (for machines where a small file system cannot be mounted): true when
// HH_TEST_WRITE_FAULT is set, not empty and part of `path`; every atomic write and metrics line to
// such a path then fails as a full disk does (ENOSPC).
bool write_fault_injected(const std::string& path);

void set_write_limit_for_tests(int64_t bytes);

// Makes sure `dir` is a folder this process can create files in, before any long work: creates it
// (and its parents) when missing, then creates and removes a probe file in it. hh::Error names
// `dir` and the reason (empty path, a file in the way, read-only file system, permission denied).
void ensure_writable_dir(const std::string& dir);

// Reads a whole regular file; hh::Error naming the path (and "No such file or directory" etc.).
std::string read_file(const std::string& path);

// A read-only regular file read at explicit offsets (pread). Errors name the path.
class InputFile {
 public:
  explicit InputFile(const std::string& path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Reads exactly n bytes at `offset` into dst; throws when the file ends first or on an I/O error.
  void read_at(uint64_t offset, void* dst, uint64_t n) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// A whole file mapped copy-on-write (MAP_PRIVATE): tensors may view its bytes without a copy, and
// a write into such a view stays private to this process (the file itself never changes). Errors
// name the path and the OS error. (Another process truncating the file while it is mapped makes
// reads of the lost pages fault, as with every mmap-based loader.)
class MappedFile {
 public:
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  unsigned char* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  unsigned char* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace hh
