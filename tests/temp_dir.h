// A fresh private folder under the temp directory for a test's files; removed on destruction.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace hh::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("hh_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Writes `bytes` to path/name (creating sub-folders) and returns the file's path.
  std::string write(const std::string& name, const std::string& bytes) const {
    std::filesystem::create_directories((path / name).parent_path());
    std::ofstream(path / name, std::ios::binary) << bytes;
    return file(name);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace hh::test
