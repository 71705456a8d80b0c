// Atomic whole-file writes and checked reads (POSIX: open/pwrite/fsync/rename/pread).
#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace hh {

namespace {

std::string errno_str(int err) { return std::strerror(err); }

// The folder holding `path` ("." for a bare file name).
std::string parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Closes an fd on scope exit unless released.
struct FdGuard {
  int fd = -1;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

void write_all(int fd, const char* p, size_t n, const std::string& tmp, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(str("write_file_atomic: writing '", tmp, "' (for '", path, "') failed: ", errno_str(errno)));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& bytes) {
  HH_CHECK(!path.empty(), "write_file_atomic: empty path");
  static std::atomic<uint64_t> counter{0};
  const std::string dir = parent_dir(path);
  std::string tmp;
  FdGuard f;
  for (int attempt = 0; attempt < 100 && f.fd < 0; ++attempt) {
    tmp = str(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
    // 0666 & ~umask, like a plain fopen(path, "w") would create.
    f.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (f.fd < 0 && errno != EEXIST) {
      fail(str("write_file_atomic: cannot create a temp file '", tmp, "' for '", path, "': ", errno_str(errno)));
    }
  }
  HH_CHECK(f.fd >= 0, "write_file_atomic: cannot create a unique temp file next to '", path, "'");
  try {
    write_all(f.fd, bytes.data(), bytes.size(), tmp, path);
    // No user-space buffer here (raw write), so fsync alone makes the data durable.
    if (::fsync(f.fd) != 0)
      fail(str("write_file_atomic: fsync of '", tmp, "' (for '", path, "') failed: ", errno_str(errno)));
    int fd = f.fd;
    f.fd = -1;
    if (::close(fd) != 0)
      fail(str("write_file_atomic: close of '", tmp, "' (for '", path, "') failed: ", errno_str(errno)));
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      fail(str("write_file_atomic: rename of '", tmp, "' to '", path, "' failed: ", errno_str(errno)));
    }
  } catch (...) {
    if (f.fd >= 0) {
      ::close(f.fd);
      f.fd = -1;
    }
    ::unlink(tmp.c_str());
    throw;
  }
  // The rename is durable only once the folder entry is on disk.
  FdGuard d;
  d.fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  HH_CHECK(d.fd >= 0, "write_file_atomic: cannot open folder '", dir, "' of '", path,
           "' to fsync it: ", errno_str(errno));
  // Some filesystems do not support fsync on a folder (EINVAL); the rename itself has happened.
  if (::fsync(d.fd) != 0 && errno != EINVAL) {
    fail(str("write_file_atomic: fsync of folder '", dir, "' after writing '", path, "' failed: ", errno_str(errno)));
  }
}

InputFile::InputFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  HH_CHECK(fd_ >= 0, "read_file: cannot open '", path, "': ", errno_str(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    int err = errno;
    ::close(fd_);
    fail(str("read_file: cannot stat '", path, "': ", errno_str(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    fail(str("read_file: '", path, "' is not a regular file", S_ISDIR(st.st_mode) ? " (it is a folder)" : ""));
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::read_at(uint64_t offset, void* dst, uint64_t n) const {
  HH_CHECK(offset <= size_ && n <= size_ - offset, "read_file: '", path_, "': reading ", n, " bytes at offset ", offset,
           " runs past the end of the file (", size_, " bytes)");
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
    ssize_t r = ::pread(fd_, p, chunk, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      fail(str("read_file: reading '", path_, "' at offset ", offset, " failed: ", errno_str(errno)));
    }
    HH_CHECK(r > 0, "read_file: '", path_, "' ended at offset ", offset, " while ", n,
             " more bytes were expected (was it truncated while being read?)");
    p += r;
    offset += static_cast<uint64_t>(r);
    n -= static_cast<uint64_t>(r);
  }
}

std::string read_file(const std::string& path) {
  InputFile f(path);
  HH_CHECK(f.size() <= static_cast<uint64_t>(std::string().max_size()), "read_file: '", path, "' is too large (",
           f.size(), " bytes)");
  std::string out(static_cast<size_t>(f.size()), '\0');
  if (!out.empty()) f.read_at(0, &out[0], f.size());
  return out;
}

}  // namespace hh
