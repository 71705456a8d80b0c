// Whole-file I/O with clear errors: atomic writes (temp file in the same folder, fsync, rename,
// fsync the folder) so a crash never leaves a half-written checkpoint under the final name, and
// reads that name the path and the OS error. InputFile reads pieces of a large file at offsets
// (safetensors loads tensors straight into their storage without a second copy of the file).
#pragma once
#include <cstdint>
#include <string>

namespace hh {

// Writes `bytes` to `path` atomically: a temp file next to `path` is written, flushed and fsynced,
// renamed over `path`, then the folder is fsynced. On any failure the temp file is removed and
// hh::Error names the path and strerror; `path` is then left as it was.
void write_file_atomic(const std::string& path, const std::string& bytes);

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

}  // namespace hh
