#include "cli/drivers.h"

#include <string>
#include <vector>

namespace hh::cli {

int run_driver(int (*driver)(int, char**), const std::string& program, const std::vector<std::string>& args) {
  std::vector<std::string> owned;  // argv's strings, alive for the call (a driver may keep no pointer after)
  owned.reserve(args.size() + 1);
  owned.push_back(program);
  owned.insert(owned.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(owned.size() + 1);
  for (std::string& s : owned) argv.push_back(s.data());
  argv.push_back(nullptr);
  return driver(static_cast<int>(owned.size()), argv.data());
}

}  // namespace hh::cli
