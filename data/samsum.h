// SAMSum dialogues (REFERENCE.md §4, §5): a JSON array of records with the string fields "id",
// "dialogue" and "summary" (the train.json / val.json / test.json of the SAMSum release), and the
// prompt the Llama conversion trains and generates with.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hh::data {

struct SamsumExample {
  std::string id;
  std::string dialogue;  // as stored: lines separated by "\r\n" or "\n", not rewritten
  std::string summary;
};

// Reads the records of one file (the first max_examples of them; -1: all). Other fields of a record
// are ignored. Errors name the file and, for a bad record, its 0-based index in the array (and its
// id when it has one); invalid JSON errors carry the parser's position.
std::vector<SamsumExample> read_samsum(const std::string& path, int64_t max_examples = -1);

// The prompt part of the template "Summarize this dialog:\n{input}\n---\nSummary:\n{output}{eos}":
// everything before {output}. The caller appends the summary and the end token for training.
std::string samsum_prompt(const SamsumExample& example);

}  // namespace hh::data
