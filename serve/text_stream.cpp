#include "serve/text_stream.h"

#include <algorithm>
#include <utility>

namespace hh::serve {

TextStream::TextStream(const data::Tokenizer& tok, std::vector<std::string> stop, const std::vector<int64_t>& prompt)
    : tok_(tok), stop_(std::move(stop)) {
  context_.assign(prompt.end() - static_cast<std::ptrdiff_t>(std::min(prompt.size(), kContext)), prompt.end());
  context_text_ = tok_.decode(context_, /*skip_special_tokens=*/true);
}

std::string TextStream::decode(size_t n) const {
  std::vector<int32_t> all = context_;
  all.insert(all.end(), ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(n));
  const std::string full = tok_.decode(all, /*skip_special_tokens=*/true);
  // The context's text must come first; when the decode does not keep it, the completion alone.
  if (full.compare(0, context_text_.size(), context_text_) == 0) return full.substr(context_text_.size());
  return tok_.decode(std::vector<int32_t>(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(n)), true);
}

bool TextStream::is_byte_token(int32_t id) const {
  const std::string t = tok_.id_to_token(id);  // SentencePiece byte fallback: "<0xNN>"
  return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>';
}

std::string TextStream::push(int64_t id) {
  if (stopped_) return "";
  ids_.push_back(static_cast<int32_t>(id));
  // A run of byte-fallback tokens decodes as one: bytes that are not UTF-8 all become U+FFFD, the
  // ones already shown included. So the text of a trailing run waits until the run ends.
  size_t stable = ids_.size();
  while (stable > 0 && is_byte_token(ids_[stable - 1])) --stable;
  const std::string full = decode(stable);
  // The decode of more ids must extend what was released; wait while it does not (it may again).
  if (full.compare(0, released_.size(), released_) != 0) return "";
  // The first stop string, searched from just before the released end (nothing released holds one).
  size_t cut = std::string::npos;
  for (const std::string& s : stop_) {
    const size_t from = released_.size() >= s.size() ? released_.size() - s.size() + 1 : 0;
    cut = std::min(cut, full.find(s, from));
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = full.substr(released_.size(), cut - std::min(cut, released_.size()));
    released_ += out;
    return out;
  }
  size_t safe = full.size();
  // decode() gives valid UTF-8, a character whose bytes are not all generated yet as U+FFFD.
  static const std::string kReplacement = "\xEF\xBF\xBD";
  if (safe >= kReplacement.size() && full.compare(safe - kReplacement.size(), kReplacement.size(), kReplacement) == 0)
    safe -= kReplacement.size();
  size_t hold = 0;  // the longest tail that a stop string starts with
  for (const std::string& s : stop_)
    for (size_t k = std::min(s.size() - 1, safe); k > hold; --k)
      if (full.compare(safe - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  safe -= hold;
  if (safe <= released_.size()) return "";
  std::string out = full.substr(released_.size(), safe - released_.size());
  released_ += out;
  return out;
}

std::string TextStream::finish() {
  if (stopped_) return "";
  const std::string full = decode(ids_.size());
  if (full.compare(0, released_.size(), released_) != 0) return "";  // cannot take released text back
  std::string out = full.substr(released_.size());
  released_ = full;
  return out;
}

}  // namespace hh::serve
