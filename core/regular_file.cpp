// Opening input files without blocking on FIFOs or reading devices (see core/regular_file.h).
#include "core/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace hh {

namespace {

std::string prefix(const std::string& what) { return what.empty() ? std::string() : what + ": "; }

[[noreturn]] void refuse(const std::string& path, const std::string& what, unsigned mode) {
  fail(str(prefix(what), path, ": not a regular file (", file_kind(mode), ")"));
}

}  // namespace

std::string file_kind(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFIFO: return "a FIFO";
    case S_IFDIR: return "a folder";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    default: return "not a regular file";
  }
}

void check_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;  // the reader's own open names the OS error
  if (!S_ISREG(st.st_mode)) refuse(path, what, st.st_mode);
}

int open_regular_file(const std::string& path, const std::string& what, uint64_t* size) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) refuse(path, what, st.st_mode);
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) fail(str(prefix(what), "cannot open '", path, "': ", std::strerror(errno)));
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(str(prefix(what), "cannot stat '", path, "': ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    refuse(path, what, st.st_mode);
  }
  // Regular files ignore O_NONBLOCK for reads, but clear it so the descriptor is an ordinary one.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  if (size) *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

}  // namespace hh
