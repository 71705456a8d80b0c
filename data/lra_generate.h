// Generators for the two synthetic LRA tasks, written by the project from the published task
// definitions (docs/ARCHITECTURE.md "LRA data" says how they differ from the originals). Seeded,
// deterministic for any thread count, parallel over all cores with a progress bar; they write the
// files read_lra_split (data/lra.h) reads.
#pragma once
#include <cstdint>
#include <string>

namespace hh::data {

// ListOps: <dir>/basic_{train,val,test}.tsv.
struct ListOpsOptions {
  int64_t train = 2000, val = 200, test = 200;
  int64_t min_len = 500, max_len = 2000;  // in tokens as the official generator counts them
  int max_depth = 10, max_args = 10;
  uint64_t seed = 0;
  int threads = 0;  // 0 = all cores
  bool progress = true;
};
void generate_listops(const std::string& dir, const ListOpsOptions& o);

// Pathfinder: <dir>/curv_contour_length_<contour_length>/{metadata/<n>.npy, imgs/<n>/sample_<i>.png}.
struct PathfinderOptions {
  int64_t train = 2000, val = 200, test = 200;
  int contour_length = 14;  // difficulty: dashes per path (14 = the paper's hard split)
  int size = 32;            // images are size x size
  uint64_t seed = 0;
  int threads = 0;  // 0 = all cores
  bool progress = true;
};
void generate_pathfinder(const std::string& dir, const PathfinderOptions& o);

}  // namespace hh::data
