// Input files that are never special files: every reader opens (or checks) its file through these,
// so a FIFO, socket or device where a config, shard, tokenizer, image or checkpoint is expected is
// refused with an error naming the path and the kind of file, instead of blocking forever (a FIFO
// with no writer blocks open() and read()) or reading /dev/zero until memory runs out.
#pragma once
#include <cstdint>
#include <string>

namespace hh {

// "a FIFO", "a folder", "a character device", "a block device", "a socket", "a symbolic link"
// or "not a regular file" for a st_mode value.
std::string file_kind(unsigned mode);

// Throws hh::Error "<what>: <path>: not a regular file (a FIFO)" when `path` exists (following
// symbolic links) and is anything but a regular file. Returns quietly when it is a regular file or
// cannot be stat'ed at all (missing, no permission): the reader's own open then reports that as
// before. Opens nothing, so a device is never opened. For readers that open with std::ifstream.
void check_regular_file(const std::string& path, const std::string& what);

// Opens `path` read-only (O_CLOEXEC) and returns the descriptor, which the caller closes. A
// special file is refused by stat before it is opened, and the open itself is O_NONBLOCK with the
// descriptor's fstat checked again (so a FIFO put in place meanwhile neither blocks the open nor
// is read); O_NONBLOCK is cleared before returning. *size receives the file's size when given.
// Errors (hh::Error): "<what>: cannot open '<path>': <strerror>" and the message above.
int open_regular_file(const std::string& path, const std::string& what, uint64_t* size = nullptr);

}  // namespace hh
