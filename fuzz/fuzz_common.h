// Shared bits of the libFuzzer harnesses: a per-process scratch file and the rule every harness
// checks: an input is either accepted or rejected with hh::Error; any other exception is a bug
// (abort, so libFuzzer saves the input), as are crashes, leaks and hangs found by the sanitizers.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>

#include "core/error.h"

namespace hh::fuzz {

// A file in the temp folder private to this process (libFuzzer may run several).
inline std::string scratch_path(const char* suffix) {
  const char* t = std::getenv("TMPDIR");
  return std::string(t && *t ? t : "/tmp") + "/hh_fuzz_" + std::to_string(::getpid()) + "_" + suffix;
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) {
    std::fprintf(stderr, "fuzz: cannot write scratch file %s\n", path.c_str());
    std::abort();
  }
}

[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::abort();
}

// Runs f: returns true when it completed, false on hh::Error; aborts on any other exception.
template <typename F>
bool accepted(F&& f) {
  try {
    f();
    return true;
  } catch (const Error&) {
    return false;
  } catch (const std::exception& e) {
    finding(std::string("exception other than hh::Error: ") + e.what());
  } catch (...) {
    finding("non-standard exception");
  }
}

}  // namespace hh::fuzz
