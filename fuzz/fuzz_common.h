// Shared bits of the libFuzzer harnesses: a per-process scratch file, tensor comparison, and the rule every harness
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
#include "core/safetensors.h"
#include "core/tensor.h"

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

// The bytes of a contiguous CPU tensor.
inline std::string bytes_of(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw_data()), static_cast<size_t>(t.numel()) * itemsize(t.dtype()));
}

// Same names in the same order with the same dtypes, shapes and bytes.
inline bool same_tensors(const SafeTensors& a, const SafeTensors& b) {
  if (a.order != b.order || a.tensors.size() != b.tensors.size()) return false;
  for (const std::string& name : a.order) {
    const Tensor& x = a.tensors.at(name);
    const Tensor& y = b.tensors.at(name);
    if (x.dtype() != y.dtype() || x.shape() != y.shape() || bytes_of(x) != bytes_of(y)) return false;
  }
  return true;
}

}  // namespace hh::fuzz
