// Preparing text for LM training once: read the corpus, tokenize it on all cores, write token
// shards (data/token_shards.h) and meta.json into one folder that train_lm then maps.
//
// Inputs and splits:
//   - A WikiText folder (it has wiki.train.raw or wiki.train.tokens) must be the only input. Its
//     splits are train, valid and (when present) test, each from wiki.<split>.raw, else
//     wiki.<split>.tokens (wikitext_split_path); each file is one stream, tokenized whole.
//   - Otherwise every input is a file or a folder; a folder stands for every regular file under it
//     (recursive, sorted by path, hidden files and folders skipped, and the output folder skipped).
//     Each file is one document. Of a document's n tokens the first n - round(n * valid_fraction)
//     go to "train" and the rest to "valid" (there is no test split). Within a split, the parts of
//     consecutive documents are separated by one eos id (none when the tokenizer has no eos).
//   - Every input file must be non-empty UTF-8 text without NUL bytes; errors name the file (and
//     the line and byte, for bad bytes).
// Text the tokenizer treats as special (GPT-2: "<|endoftext|>" written in the text) becomes its id,
// as HF does; the byte tokenizer keeps such text as bytes.
//
// Parallel tokenizing: a text is cut into pieces of about chunk_bytes and the pieces are tokenized
// on all threads, then concatenated. A cut goes only where tokenizing the pieces gives exactly the
// ids of tokenizing the whole (lm_text_cuts): between a printable ASCII character (0x21-0x7E)
// and an ASCII whitespace character. For GPT-2's pre-tokenizer
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// such a position is always the end of a piece (no pattern that takes a non-space character goes on
// into a space), and no piece before it looks past it: the only lookahead, (?!\S), belongs to
// whitespace pieces, and the last piece before the cut is not whitespace. The pattern has no
// lookbehind, so the pieces after the cut do not depend on the text before it. (Cutting after any
// "\n" that precedes a non-space character is NOT safe: "a\n\nB" is "a", "\n", "\n", "B", while
// the piece "a\n\n" ends in the piece "\n\n", another token.) Tokenizers other than the byte
// tokenizer and GPT-2 BPE without add_prefix_space (checked by a probe) are not cut: their
// documents are tokenized whole, several documents at once. (Assumed: no added token of the GPT-2
// tokenizer contains whitespace, as "<|endoftext|>" does not; a cut could otherwise split one.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace hh::data {

struct PrepareOptions {
  std::vector<std::string> inputs;  // a WikiText folder (has wiki.train.{raw,tokens}), or any UTF-8 files/folders
  std::string out_dir;
  std::string tokenizer = "bytes";  // make_lm_tokenizer spec
  double valid_fraction = 0.05;     // non-WikiText inputs: the tail of each document goes to "valid"; [0, 1)
  int64_t shard_tokens = 100'000'000;
  int threads = 0;                  // 0 = all cores
  bool progress = true;             // a core/progress.h bar on stderr (MiB done / total)
  int bytes_per_id = 0;             // 0 = the smallest that fits the vocabulary; 2 or 4 forces a width
  int64_t chunk_bytes = 1 << 20;    // about how much text one thread tokenizes at a time
};

struct PrepareResult {
  int64_t vocab_size = 0;
  std::map<std::string, int64_t> tokens;  // per split
  std::vector<std::string> files;         // the shard files written (paths), then meta.json
};

// Writes <out_dir>/<split>_NNNNN.bin for each split and <out_dir>/meta.json (a folder without it is
// not prepared), all or nothing: the new shards and meta.json are built in a hidden stage folder
// <out_dir>/.hh-prepare.<pid>.<n> and swapped in only when complete (the old meta.json removed, the
// new shards renamed in, the old shards removed, the new meta.json renamed in last). A preparation
// that fails before the swap (bad input, a full disk) removes its stage and leaves out_dir exactly
// as it was; one killed at any point leaves out_dir prepared (old or new) or a complete stage that
// the next preparation into out_dir rolls forward (stages of dead processes are swept first, as
// remove_stale_temps does for files). Files in out_dir other than shards and meta.json are kept.
PrepareResult prepare_lm_data(const PrepareOptions& o);

// What <dir>/meta.json says. tokenizer: "bytes" or the absolute path of the HF tokenizer folder.
struct PreparedInfo {
  std::string tokenizer;
  int64_t vocab_size = 0;
  int32_t eos_id = -1;  // -1: none
  std::map<std::string, int64_t> tokens;
};
// Errors name the file when it is missing (the folder was not prepared) or malformed.
PreparedInfo read_prepared_info(const std::string& dir);

// ---- the parallel tokenizing, exposed for tests and other apps ----

// The byte offsets (strictly increasing, in (0, text.size())) where `text` is cut into pieces of at
// least chunk_bytes (the last may be shorter): each the first safe cut (header comment) at or past
// chunk_bytes after the previous one.
std::vector<size_t> lm_text_cuts(std::string_view text, size_t chunk_bytes);
// Whether `tok` gives the same ids for pieces cut by lm_text_cuts as for the whole text.
bool lm_tokenizer_allows_cuts(const Tokenizer& tok);
// tok.encode(text, false), computed on `threads` threads (0 = all cores) from pieces of about
// chunk_bytes when lm_tokenizer_allows_cuts(tok).
std::vector<int32_t> lm_encode_parallel(const Tokenizer& tok, std::string_view text, int threads,
                                        size_t chunk_bytes = size_t{1} << 20);

}  // namespace hh::data
