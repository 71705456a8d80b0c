// A completion's text as it grows, token by token, for streaming: the whole completion is decoded
// after every token (so characters spread over several byte tokens and a tokenizer's leading-space
// rule come out exactly as one decode of all the ids gives them) and only text that can no longer
// change is released: not a trailing U+FFFD (half a UTF-8 character so far), not a tail that may
// be the start of a stop string, not the text of a trailing run of byte-fallback tokens ("<0xNN>",
// which decode together: bytes that are not UTF-8 all turn into U+FFFD). The pieces released
// concatenate to the final text, streamed or not, and that text is the decode of all the ids.
// The completion is decoded after the prompt's last few tokens and that context's own text is cut
// off, so its first word keeps the space a decode of prompt + completion gives it (SentencePiece
// drops a leading space at the start of a decode): echo's prompt + completion reads as one text.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace hh::serve {

class TextStream {
 public:
  // `stop`: strings that end the completion (the text ends before the first one found); `prompt`:
  // the ids before the completion (its last kContext are decoded with it).
  TextStream(const data::Tokenizer& tok, std::vector<std::string> stop, const std::vector<int64_t>& prompt = {});
  static constexpr size_t kContext = 8;
  // Adds one generated token; returns the text newly released (often "", never past a stop string).
  std::string push(int64_t id);
  // At the end of the generation: the text still held back.
  std::string finish();
  bool stopped() const { return stopped_; }     // a stop string was found
  const std::string& text() const { return released_; }  // everything released so far

 private:
  const data::Tokenizer& tok_;
  std::vector<std::string> stop_;
  // The text of the completion's first n ids: decode(context + ids[:n]) after the context's own text.
  std::string decode(size_t n) const;
  bool is_byte_token(int32_t id) const;

  std::vector<int32_t> context_, ids_;
  std::string context_text_;
  std::string released_;
  bool stopped_ = false;
};

}  // namespace hh::serve
