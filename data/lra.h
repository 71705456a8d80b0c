// Long Range Arena data (REFERENCE.md §4, §5): the task table and readers for the files of the
// official LRA release, for all five tasks. Every example becomes token ids with 0 as padding:
//   ListOps:            1..N for its symbols (see lra_listops_vocab()); '(' and ')' are dropped,
//                       as the PyTorch LRA code does.
//   Text, Retrieval:    byte b -> b + 1 (vocab 257).
//   Image, Pathfinder:  grey level g -> g + 1 (vocab 257).
// Longer inputs are truncated to max_len, as the protocol does. Errors name the file, the line (or
// record, or image) and what was wrong; the layout and rules are in docs/ARCHITECTURE.md "LRA data".
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hh::data {

enum class LraTask { listops, text, retrieval, image, pathfinder };

// "listops", "text", "retrieval", "image", "pathfinder"; anything else is an error listing them.
LraTask parse_lra_task(const std::string& name);
const char* lra_task_name(LraTask t);

struct LraTaskInfo {
  int64_t vocab_size;   // ids 0 .. vocab_size-1, 0 = padding
  int64_t num_classes;
  int64_t max_len;      // the paper's per-task length: 2000, 4000, 4000, 1024, 1024
  bool two_documents;   // retrieval: two token sequences per example
};
LraTaskInfo lra_task_info(LraTask t);

struct LraExample {
  std::vector<int32_t> tokens;   // ids, no padding, length <= max_len
  std::vector<int32_t> tokens2;  // retrieval's second document, else empty
  int32_t label = 0;             // 0 .. num_classes-1
};

struct LraSplit {
  LraTask task;
  std::vector<LraExample> examples;
};

// Reads one split ("train", "val" or "test") of a task from `dir` in the release layout:
//   listops:    <dir>/basic_{train,val,test}.tsv (header "Source\tTarget")
//   text:       <dir>/{train,val,test}.tsv ("label\ttext" lines: the project's own layout of IMDB)
//   retrieval:  <dir>/new_aan_pairs.{train,eval,test}.tsv ("label\tid1\tid2\ttext1\ttext2")
//   image:      <dir>/data_batch_{1..5}.bin, test_batch.bin (CIFAR-10 binary, converted to grey)
//   pathfinder: <dir>/curv_contour_length_14/{metadata/<n>.npy, imgs/<n>/sample_<i>.png}
// max_len <= 0 means the task's default. The split rules (image val, pathfinder) are documented in
// docs/ARCHITECTURE.md and at the definitions.
LraSplit read_lra_split(LraTask task, const std::string& dir, const std::string& split, int64_t max_len = 0);

// ---- Additions beyond the shared contract ----

// The ListOps symbols in id order: lra_listops_vocab()[id - 1] is the symbol of id (id 0 = padding).
const std::vector<std::string>& lra_listops_vocab();

}  // namespace hh::data
