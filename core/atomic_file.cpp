// Atomic whole-file writes and checked reads (POSIX: open/pwrite/fsync/rename/pread).
#include "core/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/regular_file.h"

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

std::atomic<int64_t> g_write_limit{-1};  // set_write_limit_for_tests: bytes left, or -1 (no limit)

void write_all(int fd, const char* p, size_t n, const std::string& tmp, const std::string& path) {
  while (n > 0) {
    size_t chunk = n;
    const int64_t left = g_write_limit.load();
    if (left >= 0) {  // the test hook: a disk with `left` bytes free
      if (left == 0) fail(str("write_file_atomic: writing '", tmp, "' (for '", path, "') failed: ", errno_str(ENOSPC)));
      chunk = static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(n)));
      g_write_limit -= static_cast<int64_t>(chunk);
    }
    ssize_t w = ::write(fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(str("write_file_atomic: writing '", tmp, "' (for '", path, "') failed: ", errno_str(errno)));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// When this process started, in seconds since the epoch (Linux: /proc/self/stat's start time in
// clock ticks after boot plus /proc/stat's boot time); -1 when it cannot be read.
double process_start_time() {
  std::ifstream stat_file("/proc/self/stat");
  std::string line;
  if (!std::getline(stat_file, line)) return -1;
  // Field 2 (the command name) may hold spaces: the fields after it follow the last ')'.
  size_t close = line.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(line.substr(close + 1));
  std::string field;
  unsigned long long start_ticks = 0;
  for (int i = 3; i <= 22 && fields >> field; ++i)
    if (i == 22) start_ticks = std::strtoull(field.c_str(), nullptr, 10);
  std::ifstream proc_stat("/proc/stat");
  unsigned long long boot = 0;
  while (std::getline(proc_stat, line))
    if (line.rfind("btime ", 0) == 0) boot = std::strtoull(line.c_str() + 6, nullptr, 10);
  const long ticks = ::sysconf(_SC_CLK_TCK);
  if (boot == 0 || start_ticks == 0 || ticks <= 0) return -1;
  return static_cast<double>(boot) + static_cast<double>(start_ticks) / static_cast<double>(ticks);
}

// "<digits>.<digits>" -> the first number (the writer's pid); -1 when `s` has another form.
long long temp_writer_pid(const std::string& s) {
  size_t dot = s.find('.');
  if (dot == 0 || dot == std::string::npos || dot + 1 == s.size()) return -1;
  for (size_t i = 0; i < s.size(); ++i)
    if (i != dot && !std::isdigit(static_cast<unsigned char>(s[i]))) return -1;
  if (dot > 9) return -1;  // larger than any pid
  return std::stoll(s.substr(0, dot));
}

}  // namespace

bool write_fault_injected(const std::string& path) {
  const char* f = std::getenv("HH_TEST_WRITE_FAULT");
  return f != nullptr && *f != '\0' && path.find(f) != std::string::npos;
}

void set_write_limit_for_tests(int64_t bytes) { g_write_limit = bytes < 0 ? -1 : bytes; }

bool temp_owner_gone(const std::string& path, long long pid) {
  if (pid <= 0 || pid == ::getpid()) return false;
  if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) return false;  // alive (or not ours to probe)
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return false;
  static const double started = process_start_time();  // constant for the process
  // st_mtime has whole seconds and the start time a fraction: a temp written in the second this
  // process started counts as possibly live (keeping a stale temp is harmless, removing a live one is not).
  return !(started >= 0 && static_cast<double>(st.st_mtime) >= std::floor(started));
}

int remove_stale_temps(const std::string& path) {
  const std::string dir = parent_dir(path);
  const size_t slash = path.find_last_of('/');
  const std::string prefix = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp.";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const long long pid = temp_writer_pid(name.substr(prefix.size()));
    const std::string full = dir + "/" + name;
    struct stat st;
    if (::lstat(full.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (!temp_owner_gone(full, pid)) continue;
    stale.push_back(full);
  }
  ::closedir(d);
  int removed = 0;
  for (const std::string& f : stale) removed += ::unlink(f.c_str()) == 0;
  return removed;
}

void ensure_writable_dir(const std::string& dir) {
  HH_CHECK(!dir.empty(), "output folder: the path is empty (give a folder name)");
  std::string part;
  if (dir[0] == '/') part = "/";
  std::stringstream ss(dir);
  std::string seg;
  while (std::getline(ss, seg, '/')) {
    if (seg.empty()) continue;
    part += seg + "/";
    if (::mkdir(part.c_str(), 0777) == 0 || errno == EEXIST) continue;
    fail(str("output folder '", dir, "': cannot create '", part, "': ", errno_str(errno)));
  }
  struct stat st;
  HH_CHECK(::stat(dir.c_str(), &st) == 0, "output folder '", dir, "': cannot stat it: ", errno_str(errno));
  HH_CHECK(S_ISDIR(st.st_mode), "output folder '", dir, "' exists and is not a folder");
  const std::string probe = str(dir, "/.hh_write_probe.", ::getpid());
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  HH_CHECK(fd >= 0, "output folder '", dir, "' is not writable: ", errno_str(errno));
  ::close(fd);
  HH_CHECK(::unlink(probe.c_str()) == 0, "output folder '", dir, "': cannot remove the probe file '", probe,
           "': ", errno_str(errno));
}

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
    if (write_fault_injected(path))
      fail(str("write_file_atomic: writing '", tmp, "' (for '", path, "') failed: ", errno_str(ENOSPC)));
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
  fd_ = open_regular_file(path, "read_file", &size_);  // a FIFO or device is refused, never opened blocking
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

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  int fd = open_regular_file(path, "", &m->size_);  // a FIFO or device is refused, never opened blocking
  if (m->size_ > 0) {
    void* p = ::mmap(nullptr, m->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    HH_CHECK(p != MAP_FAILED, "cannot map ", path, ": ", errno_str(err));
    m->data_ = static_cast<unsigned char*>(p);
  } else {
    ::close(fd);
  }
  return m;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

}  // namespace hh
