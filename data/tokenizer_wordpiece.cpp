#include "data/tokenizer_wordpiece.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/unicode.h"
#include "data/vocab_ids.h"

namespace hh::data {

namespace {

bool is_cjk(char32_t c) {
  // BERT's definition: the CJK Unified Ideographs blocks (and extensions A-E) plus the
  // compatibility ideographs. Hangul, kana and the CJK punctuation are not in it.
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_bert_punctuation(char32_t c) {
  const bool ascii_punct = (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  return ascii_punct || unicode::is_punctuation(c);
}

bool is_bert_control(char32_t c) { return c != '\t' && c != '\n' && c != '\r' && unicode::is_other(c); }

}  // namespace

std::vector<std::string> WordPieceTokenizer::basic_tokenize(std::string_view text) const {
  std::string s;
  if (normalize_) {
    s.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
      const char32_t c = unicode::next_code_point(text, i);
      if (options_.clean_text) {
        if (c == 0 || c == unicode::kReplacement || is_bert_control(c)) continue;
        if (unicode::is_whitespace(c)) {
          s += ' ';
          continue;
        }
      }
      if (options_.handle_chinese_chars && is_cjk(c)) {
        s += ' ';
        unicode::append_utf8(s, c);
        s += ' ';
      } else {
        unicode::append_utf8(s, c);
      }
    }
    const bool strip = options_.strip_accents < 0 ? options_.lowercase : options_.strip_accents == 1;
    if (strip) {
      const std::string d = unicode::nfd(s);
      s.clear();
      for (size_t i = 0; i < d.size();) {
        const char32_t c = unicode::next_code_point(d, i);
        if (!unicode::is_nonspacing_mark(c)) unicode::append_utf8(s, c);
      }
    }
    if (options_.lowercase) s = unicode::lowercase(s);
  } else {
    s.assign(text);
  }
  std::vector<std::string> words;
  std::string cur;
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const char32_t c = unicode::next_code_point(s, i);
    if (unicode::is_whitespace(c)) {
      if (!cur.empty()) words.push_back(std::move(cur));
      cur.clear();
    } else if (is_bert_punctuation(c)) {
      if (!cur.empty()) words.push_back(std::move(cur));
      cur.clear();
      words.emplace_back(s.substr(start, i - start));
    } else {
      cur.append(s, start, i - start);
    }
  }
  if (!cur.empty()) words.push_back(std::move(cur));
  return words;
}

void WordPieceTokenizer::encode_word(const std::string& word, std::vector<int32_t>& out) const {
  // HF's cap (max_input_chars_per_word) is checked before anything is allocated for the word; the
  // greedy longest match below is then O(cap^2) lookups at worst.
  int64_t count = 0;
  for (size_t i = 0; i < word.size() && count <= options_.max_chars_per_word; ++count) unicode::next_code_point(word, i);
  if (count > options_.max_chars_per_word) {
    out.push_back(unk_id());
    return;
  }
  std::vector<size_t> bounds;  // byte offset of each character, then word.size()
  for (size_t i = 0; i < word.size();) {
    bounds.push_back(i);
    unicode::next_code_point(word, i);
  }
  const size_t nchars = bounds.size();
  bounds.push_back(word.size());
  const size_t first = out.size();
  std::string candidate;
  for (size_t start = 0; start < nchars;) {
    int32_t found = -1;
    size_t end = nchars;
    for (; end > start; --end) {
      candidate = start > 0 ? options_.prefix : std::string();
      candidate.append(word, bounds[start], bounds[end] - bounds[start]);
      found = token_to_id(candidate);
      if (found >= 0) break;
    }
    if (found < 0) {
      out.resize(first);
      out.push_back(unk_id());
      return;
    }
    out.push_back(found);
    start = end;
  }
}

std::vector<int32_t> WordPieceTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::string clean;
  if (!unicode::is_valid_utf8(text)) {
    clean = unicode::sanitize_utf8(text);
    text = clean;
  }
  std::vector<int32_t> ids;
  split_on_added_tokens(
      text,
      [&](std::string_view part) {
        for (const std::string& w : basic_tokenize(part)) encode_word(w, ids);
      },
      [&](int32_t id) { ids.push_back(id); });
  return add_special_tokens ? this->add_special_tokens(ids, nullptr, nullptr) : ids;
}

std::string WordPieceTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  check_ids(ids);
  static const std::pair<const char*, const char*> kCleanup[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    std::string tok = vocab_[static_cast<size_t>(id)];
    if (!first) {
      if (tok.compare(0, options_.prefix.size(), options_.prefix) == 0 && !options_.prefix.empty())
        tok.erase(0, options_.prefix.size());
      else
        tok.insert(0, " ");
    }
    first = false;
    if (options_.cleanup) {  // HF applies it to each token (after its leading space is added)
      for (const auto& [from, to] : kCleanup) {
        const std::string f(from), t(to);
        for (size_t pos = tok.find(f); pos != std::string::npos; pos = tok.find(f, pos + t.size()))
          tok.replace(pos, f.size(), t);
      }
    }
    out += tok;
  }
  return out;
}

void WordPieceTokenizer::finish(const std::string& where) {
  for (const char* name : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
    if (token_to_id(name) >= 0) add_added_token(name, true);
  special_ids().pad = token_to_id("[PAD]");
  special_ids().cls = token_to_id("[CLS]");
  special_ids().sep = token_to_id("[SEP]");
  special_ids().unk = token_to_id(options_.unk_token);
  HH_CHECK(unk_id() >= 0, where, ": the unknown token '", options_.unk_token, "' is not in the vocabulary");
  HH_CHECK(options_.max_chars_per_word > 0, where, ": max_input_chars_per_word must be > 0");
}

std::unique_ptr<WordPieceTokenizer> WordPieceTokenizer::from_vocab_txt(const std::string& path, WordPieceOptions options) {
  const std::string text = detail::read_file(path);
  std::vector<std::string> vocab;
  std::unordered_map<std::string, size_t> seen;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    HH_CHECK(!line.empty(), path, ":", line_no, ": empty token");
    HH_CHECK(unicode::is_valid_utf8(line), path, ":", line_no, ": the token is not valid UTF-8");
    const auto [it, fresh] = seen.emplace(line, line_no);
    HH_CHECK(fresh, path, ":", line_no, ": token '", line, "' repeats line ", it->second);
    vocab.push_back(std::move(line));
  }
  HH_CHECK(!vocab.empty(), path, ": no tokens");
  std::unique_ptr<WordPieceTokenizer> t(new WordPieceTokenizer());
  t->options_ = std::move(options);
  t->set_vocab(std::move(vocab));
  t->finish(path);
  if (t->cls_id() >= 0 && t->sep_id() >= 0) {
    const int32_t cls = t->cls_id(), sep = t->sep_id();
    t->set_template({{{cls}, -1, 0}, {{}, 0, 0}, {{sep}, -1, 0}},
                    {{{cls}, -1, 0}, {{}, 0, 0}, {{sep}, -1, 0}, {{}, 1, 1}, {{sep}, -1, 1}});
  }
  return t;
}

std::unique_ptr<WordPieceTokenizer> WordPieceTokenizer::from_tokenizer_json(const std::string& path) {
  try {
    const nlohmann::json j = nlohmann::json::parse(detail::read_file(path));
    HH_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), path, ": missing key \"model\"");
    const nlohmann::json& model = j["model"];
    HH_CHECK(model.contains("vocab") && model["vocab"].is_object(), path, ": missing object \"model.vocab\"");
    WordPieceOptions o;
    o.unk_token = model.value("unk_token", o.unk_token);
    o.prefix = model.value("continuing_subword_prefix", o.prefix);
    o.max_chars_per_word = model.value("max_input_chars_per_word", o.max_chars_per_word);
    std::unique_ptr<WordPieceTokenizer> t(new WordPieceTokenizer());
    const nlohmann::json norm = j.value("normalizer", nlohmann::json());
    if (norm.is_null()) {
      t->normalize_ = false;
    } else {
      HH_CHECK(norm.is_object() && norm.value("type", "") == "BertNormalizer", path, ": normalizer ", norm.dump(),
               " is not supported for WordPiece (BertNormalizer or null)");
      o.clean_text = norm.value("clean_text", true);
      o.handle_chinese_chars = norm.value("handle_chinese_chars", true);
      o.lowercase = norm.value("lowercase", true);
      const auto sa = norm.value("strip_accents", nlohmann::json());
      o.strip_accents = sa.is_null() ? -1 : sa.get<bool>() ? 1 : 0;
    }
    const nlohmann::json pre = j.value("pre_tokenizer", nlohmann::json());
    HH_CHECK(pre.is_object() && pre.value("type", "") == "BertPreTokenizer", path, ": pre_tokenizer ", pre.dump(),
             " is not supported for WordPiece (BertPreTokenizer)");
    const nlohmann::json dec = j.value("decoder", nlohmann::json());
    if (dec.is_object()) {
      HH_CHECK(dec.value("type", "") == "WordPiece", path, ": decoder ", dec.dump(), " is not supported (WordPiece)");
      o.cleanup = dec.value("cleanup", true);
      HH_CHECK(dec.value("prefix", o.prefix) == o.prefix, path, ": the decoder's prefix differs from the model's");
    }
    std::vector<std::pair<std::string, int64_t>> entries;
    int64_t max_id = -1;
    for (const auto& [k, v] : model["vocab"].items()) {
      HH_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < (int64_t{1} << 30), path,
               ": model.vocab: the id of '", k, "' is not an integer in [0, 2^30)");
      entries.emplace_back(k, v.get<int64_t>());
      max_id = std::max(max_id, v.get<int64_t>());
    }
    const int64_t gap = first_missing_id(entries, max_id, [](const auto& e) { return e.second; });
    HH_CHECK(gap < 0, path, ": model.vocab: no token has id ", gap);  // before max_id + 1 slots are allocated
    std::vector<std::string> vocab(static_cast<size_t>(max_id + 1));
    std::vector<bool> have(vocab.size(), false);
    for (const auto& [k, id] : entries) {
      HH_CHECK(!have[static_cast<size_t>(id)], path, ": model.vocab: id ", id, " is given twice");
      have[static_cast<size_t>(id)] = true;
      vocab[static_cast<size_t>(id)] = k;
    }
    for (size_t id = 0; id < vocab.size(); ++id) HH_CHECK(have[id], path, ": model.vocab: no token has id ", id);
    t->options_ = o;
    t->set_vocab(std::move(vocab));
    t->finish(path);
    if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
      for (const auto& a : j["added_tokens"]) {
        HH_CHECK(a.is_object() && a.contains("content") && a["content"].is_string(), path,
                 ": an entry of \"added_tokens\" has no string \"content\"");
      check_added_token_options(a["content"].get<std::string>(), a.value("lstrip", false), a.value("rstrip", false),
                                a.value("single_word", false), path);
        const std::string c = a["content"].get<std::string>();
        HH_CHECK(t->token_to_id(c) >= 0, path, ": added token '", c, "' is not in model.vocab");
        t->add_added_token(c, a.value("special", false));
      }
    }
    t->set_post_processor_json(j.value("post_processor", nlohmann::json()).dump(), path);
    return t;
  } catch (const nlohmann::json::exception& e) {
    fail(str(path, ": ", e.what()));
  }
}

}  // namespace hh::data
