// Text corpora for causal LM training and perplexity: WikiText-103 files (REFERENCE.md §5) read as
// UTF-8 text, and a token-id stream cut into fixed-length windows.
//
// Windows: a window of context L covers L+1 consecutive tokens ids[b .. b+L]; the model reads the
// first L and is scored on predicting the last L. Two layouts:
//   lm_blocks:  non-overlapping blocks (window k starts at k*L; consecutive windows share one
//               token, so every token but the first is predicted once); the incomplete tail is
//               dropped. For training and plain block evaluation.
//   lm_strided: windows every `stride` tokens, as HF's perplexity guide: the first window scores
//               all its predictions, every later one only those not scored before (its last
//               `stride`), so each token after the first is scored exactly once, each with at least
//               L - stride tokens of context. The last window may run past the end of the stream:
//               it is padded and the padding is not scored.
// The windows keep the stream and hand out rows on demand, so 100M tokens cost 400 MB, not
// N x (L+1) int64s.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hh::data {

// Target value of a position that is not scored (cross_entropy's default ignore_index).
constexpr int64_t kLmIgnoreIndex = -100;

// The whole file as a string. Invalid UTF-8 is an error naming the file, the 1-based line and the
// byte column; a missing or unreadable file is an error naming the path.
std::string read_text_file(const std::string& path);

// The file of a WikiText split in `dir`: wiki.<split>.raw, else wiki.<split>.tokens, for split
// "train", "valid" or "test". An error says which names it looked for.
std::string wikitext_split_path(const std::string& dir, const std::string& split);

struct LmWindows {
  std::vector<int32_t> ids;           // the token stream
  int64_t context = 0;                // L
  std::vector<int64_t> begin;         // window w covers ids[begin[w] .. min(begin[w] + L, T - 1)]
  std::vector<int64_t> first_scored;  // window w scores the predictions of ids[p], p >= first_scored[w]
  int64_t num_scored = 0;             // predictions scored over all windows

  int64_t size() const { return static_cast<int64_t>(begin.size()); }
  // (B, L+1) i64 token ids of windows `rows`; positions past the end of the stream hold pad_id.
  Tensor tokens(const std::vector<int64_t>& rows, int32_t pad_id = 0) const;
  // (B, L) i64: column j is the id the model should predict after reading token j (tokens[:, j+1])
  // where that prediction is scored, kLmIgnoreIndex elsewhere.
  Tensor targets(const std::vector<int64_t>& rows) const;
};

// Non-overlapping windows of context L >= 1; the stream needs at least L+1 tokens.
LmWindows lm_blocks(std::vector<int32_t> ids, int64_t context);
// Strided windows of context L >= 1 and stride in [1, L]; the stream needs at least 2 tokens.
LmWindows lm_strided(std::vector<int32_t> ids, int64_t context, int64_t stride);

}  // namespace hh::data
