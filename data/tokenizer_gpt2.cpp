#include "data/tokenizer_gpt2.h"

#include <algorithm>
#include <climits>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/quote.h"
#include "data/unicode.h"
#include "data/vocab_ids.h"

namespace hh::data {

// ---- BpeMerges ----

void BpeMerges::add(int32_t left, int32_t right, int32_t merged) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  table_[key] = Merge{next_rank_++, merged};
}

const BpeMerges::Merge* BpeMerges::find(int32_t left, int32_t right) const {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  const auto it = table_.find(key);
  return it == table_.end() ? nullptr : &it->second;
}

namespace {

// A 4-ary min-heap of 64-bit keys: half the levels of a binary heap, the four children of a node
// in one or two cache lines.
class QuadHeap {
 public:
  bool empty() const { return v_.empty(); }
  uint64_t top() const { return v_[0]; }
  void push(uint64_t key) {
    size_t i = v_.size();
    v_.push_back(key);
    while (i > 0) {
      const size_t parent = (i - 1) / 4;
      if (v_[parent] <= key) break;
      v_[i] = v_[parent];
      i = parent;
    }
    v_[i] = key;
  }
  void pop() {
    const uint64_t key = v_.back();
    v_.pop_back();
    const size_t n = v_.size();
    if (n == 0) return;
    size_t i = 0;
    for (;;) {
      const size_t first = 4 * i + 1;
      if (first >= n) break;
      size_t best = first;
      for (size_t c = first + 1; c < std::min(first + 4, n); ++c)
        if (v_[c] < v_[best]) best = c;
      if (v_[best] >= key) break;
      v_[i] = v_[best];
      i = best;
    }
    v_[i] = key;
  }

 private:
  std::vector<uint64_t> v_;
};

}  // namespace

void BpeMerges::apply(std::vector<int32_t>& sym) const {
  // HF's Word::merge_all: candidate merges keyed (rank, position of the left symbol), always the
  // smallest key next, the symbols a doubly linked list over their first positions, stale
  // candidates skipped when taken. Each merge removes a symbol and adds at most two candidates, so
  // there are at most 3n: O(n log n) time, O(n) memory (12 bytes a symbol, 8 a candidate).
  // The priority queue is the word's own candidates sorted once (a counting sort by rank for long
  // words, read front to back) beside a heap of the candidates that merges create; the smaller
  // front of the two is the next key, exactly the order of one heap holding all of them (and the
  // created candidates that arrive in order skip the heap: see `sorted` below).
  // There is no cap on a word's length: HF's BPE has none (only WordPiece has
  // max_input_chars_per_word), so a cap would change the ids of long words; the cost is what
  // bounds it.
  HH_CHECK(sym.size() < static_cast<size_t>(INT32_MAX), "BPE: a word of ", sym.size(),
           " symbols is longer than 2^31 - 1");
  const int32_t n = static_cast<int32_t>(sym.size());
  if (n < 2) return;
  const auto key = [](int32_t rank, int32_t pos) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(rank)) << 32) | static_cast<uint32_t>(pos);
  };
  struct Link {
    int32_t prev, next;
  };
  std::vector<Link> link(static_cast<size_t>(n));
  std::vector<uint64_t> initial;  // (rank, pos) of the pairs of the word as it comes
  // Long words: each position's rank (-1 where none) goes to link[].prev for the counting sort,
  // which sets the links after.
  const bool counting = n >= 4096 && static_cast<size_t>(n) * 4 >= static_cast<size_t>(next_rank_);
  size_t n_initial = 0;
  for (int32_t i = 0; i < n; ++i) {
    const Merge* m = i + 1 < n ? find(sym[static_cast<size_t>(i)], sym[static_cast<size_t>(i) + 1]) : nullptr;
    link[static_cast<size_t>(i)] = {counting ? (m ? m->rank : -1) : i - 1, i + 1 < n ? i + 1 : -1};
    if (m) {
      ++n_initial;
      if (!counting) initial.push_back(key(m->rank, i));
    }
  }
  if (n_initial == 0) return;
  if (counting) {  // stable by position: a scatter in position order into each rank's slots
    std::vector<uint32_t> start(static_cast<size_t>(next_rank_) + 1, 0);
    for (const Link& l : link)
      if (l.prev >= 0) ++start[static_cast<size_t>(l.prev) + 1];
    for (size_t r = 1; r < start.size(); ++r) start[r] += start[r - 1];
    initial.resize(n_initial);
    for (int32_t i = 0; i < n; ++i) {
      const int32_t r = link[static_cast<size_t>(i)].prev;
      if (r >= 0) initial[start[static_cast<size_t>(r)]++] = key(r, i);
      link[static_cast<size_t>(i)].prev = i - 1;
    }
  } else {
    std::sort(initial.begin(), initial.end());
  }
  // Created candidates: those that come in increasing order (a sweep of one rank along the word
  // creates its successors left to right) queue in `sorted`, the others in the heap.
  QuadHeap heap;
  std::vector<uint64_t> sorted;
  size_t next_sorted = 0;
  const auto push = [&](uint64_t k) {
    if (next_sorted == sorted.size()) {
      sorted.clear();
      next_sorted = 0;
    }
    if (sorted.empty() || k >= sorted.back()) {
      if (next_sorted >= (size_t{1} << 16) && 2 * next_sorted >= sorted.size()) {  // drop what was taken
        sorted.erase(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(next_sorted));
        next_sorted = 0;
      }
      sorted.push_back(k);
    } else {
      heap.push(k);
    }
  };
  size_t next_initial = 0;
  const auto at = [&](int32_t i) -> int32_t& { return sym[static_cast<size_t>(i)]; };
  const auto ln = [&](int32_t i) -> Link& { return link[static_cast<size_t>(i)]; };
  bool merged_any = false;
  for (;;) {
    // The smallest of the three fronts.
    constexpr uint64_t kNone = ~uint64_t{0};
    const uint64_t a = next_initial < initial.size() ? initial[next_initial] : kNone;
    const uint64_t b = next_sorted < sorted.size() ? sorted[next_sorted] : kNone;
    const uint64_t c = heap.empty() ? kNone : heap.top();
    uint64_t k;
    if (a <= b && a <= c && a != kNone) {
      k = a;
      ++next_initial;
    } else if (b <= c && b != kNone) {
      k = b;
      ++next_sorted;
    } else if (c != kNone) {
      k = c;
      heap.pop();
    } else {
      break;
    }
    const int32_t rank = static_cast<int32_t>(k >> 32), pos = static_cast<int32_t>(k & 0xFFFFFFFFu);
    if (at(pos) < 0) continue;  // merged into its left neighbour meanwhile
    const int32_t right = ln(pos).next;
    if (right < 0) continue;
    // Ranks are unique to a pair, so an equal rank means the pair there is still this one.
    const Merge* m = find(at(pos), at(right));
    if (!m || m->rank != rank) continue;  // the pair there changed
    merged_any = true;
    at(pos) = m->merged;
    at(right) = -1;
    const int32_t p = ln(pos).prev, q = ln(right).next;
    ln(pos).next = q;
    if (q >= 0) ln(q).prev = pos;
    if (p >= 0)
      if (const Merge* pm = find(at(p), at(pos))) push(key(pm->rank, p));
    if (q >= 0)
      if (const Merge* qm = find(at(pos), at(q))) push(key(qm->rank, pos));
  }
  if (merged_any) sym.erase(std::remove(sym.begin(), sym.end(), -1), sym.end());
}

// ---- byte <-> printable stand-in ----

char32_t gpt2_byte_to_char(uint8_t b) {
  // Printable ASCII and Latin-1 (except soft hyphen) stand for themselves; the other 68 bytes map,
  // in byte order, to U+0100, U+0101, ...
  const auto kept = [](unsigned v) { return (v >= 0x21 && v <= 0x7E) || (v >= 0xA1 && v <= 0xAC) || (v >= 0xAE); };
  if (kept(b)) return b;
  unsigned shifted = 0;
  for (unsigned v = 0; v < b; ++v) shifted += kept(v) ? 0 : 1;
  return 0x100 + shifted;
}

namespace {

// The raw bytes a vocabulary token stands for; a token with a character outside the table (an
// added token such as "<|endoftext|>" is all ASCII, so inside it) keeps its own UTF-8 bytes.
std::string token_bytes(const std::string& token, const std::unordered_map<char32_t, uint8_t>& char_to_byte) {
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    const auto it = char_to_byte.find(unicode::next_code_point(token, i));
    if (it == char_to_byte.end()) return token;
    out += static_cast<char>(it->second);
  }
  return out;
}

// Qwen2's pre-tokenizer regex, as its tokenizer.json spells it.
constexpr const char* kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Classes of the pre-tokenizer pattern.
enum : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

uint8_t char_class(char32_t c) {
  if (unicode::is_letter(c)) return kLetter;
  if (unicode::is_number(c)) return kNumber;
  if (unicode::is_whitespace(c)) return kSpace;
  return kOther;
}

std::vector<std::string> dense_vocab(const std::vector<std::pair<std::string, int64_t>>& entries, const std::string& where) {
  int64_t max_id = -1;
  for (const auto& e : entries) {
    HH_CHECK(e.second >= 0 && e.second < (int64_t{1} << 30), where, ": token '", e.first, "' has id ", e.second,
             ", outside [0, 2^30)");
    max_id = std::max(max_id, e.second);
  }
  const int64_t gap = first_missing_id(entries, max_id, [](const auto& e) { return e.second; });
  HH_CHECK(gap < 0, where, ": no token has id ", gap, " (ids must be 0..N-1)");  // before max_id + 1 slots
  std::vector<std::string> vocab(static_cast<size_t>(max_id + 1));
  std::vector<bool> seen(vocab.size(), false);
  for (const auto& e : entries) {
    const size_t id = static_cast<size_t>(e.second);
    HH_CHECK(!seen[id], where, ": id ", id, " is given to both '", vocab[id], "' and '", e.first, "'");
    seen[id] = true;
    vocab[id] = e.first;
  }
  for (size_t id = 0; id < vocab.size(); ++id) HH_CHECK(seen[id], where, ": no token has id ", id, " (ids must be 0..N-1)");
  return vocab;
}

nlohmann::json parse_json(const std::string& path) {
  try {
    return nlohmann::json::parse(detail::read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail(str(path, ": not valid JSON: ", e.what()));
  }
}

}  // namespace

// ---- loading ----

void Gpt2Tokenizer::build(std::vector<std::string> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                          const std::string& merges_where) {
  set_vocab(std::move(vocab));
  std::unordered_map<char32_t, uint8_t> char_to_byte;
  for (unsigned b = 0; b < 256; ++b) char_to_byte[gpt2_byte_to_char(static_cast<uint8_t>(b))] = static_cast<uint8_t>(b);
  raw_.resize(vocab_.size());
  for (size_t i = 0; i < vocab_.size(); ++i) raw_[i] = token_bytes(vocab_[i], char_to_byte);
  for (unsigned b = 0; b < 256; ++b) {
    std::string s;
    unicode::append_utf8(s, gpt2_byte_to_char(static_cast<uint8_t>(b)));
    byte_id_[b] = token_to_id(s);
    HH_CHECK(byte_id_[b] >= 0, merges_where, ": the vocabulary has no token for byte 0x", std::hex, b, " ('", s, "')");
  }
  for (size_t k = 0; k < merges.size(); ++k) {
    const auto& [a, b] = merges[k];
    const int32_t ia = token_to_id(a), ib = token_to_id(b), im = token_to_id(a + b);
    HH_CHECK(ia >= 0 && ib >= 0 && im >= 0, merges_where, ": merge ", k + 1, " ", quote_text(a + " " + b), ": ",
             quote_text(ia < 0 ? a : ib < 0 ? b : a + b), " is not in the vocabulary");
    merges_.add(ia, ib, im);
  }
}

std::unique_ptr<Gpt2Tokenizer> Gpt2Tokenizer::from_files(const std::string& vocab_json, const std::string& merges_txt) {
  const nlohmann::json j = parse_json(vocab_json);
  HH_CHECK(j.is_object(), vocab_json, ": expected a JSON object {\"token\": id, ...}");
  std::vector<std::pair<std::string, int64_t>> entries;
  for (const auto& [k, v] : j.items()) {
    HH_CHECK(v.is_number_integer(), vocab_json, ": the id of '", k, "' is not an integer");
    entries.emplace_back(k, v.get<int64_t>());
  }
  std::vector<std::pair<std::string, std::string>> merges;
  const std::string text = detail::read_file(merges_txt);
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    HH_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < line.size() && line.find(' ', sp + 1) == std::string::npos,
             merges_txt, ":", line_no, ": expected two tokens separated by one space, got ", quote_text(line));
    merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  std::unique_ptr<Gpt2Tokenizer> t(new Gpt2Tokenizer());
  t->build(dense_vocab(entries, vocab_json), merges, merges_txt);
  const int32_t eot = t->token_to_id("<|endoftext|>");
  if (eot >= 0) {
    t->add_added_token("<|endoftext|>", true);
    t->special_ids().bos = t->special_ids().eos = t->special_ids().unk = eot;
  }
  return t;
}

std::unique_ptr<Gpt2Tokenizer> Gpt2Tokenizer::from_tokenizer_json(const std::string& path) {
  try {
    return from_tokenizer_json_unchecked(path);
  } catch (const nlohmann::json::exception& e) {  // a key of the wrong type
    fail(str(path, ": ", e.what()));
  }
}

std::unique_ptr<Gpt2Tokenizer> Gpt2Tokenizer::from_tokenizer_json_unchecked(const std::string& path) {
  const nlohmann::json j = parse_json(path);
  const auto need = [&](const nlohmann::json& obj, const char* key, const char* where) -> const nlohmann::json& {
    HH_CHECK(obj.is_object() && obj.contains(key), path, ": missing key \"", where, "\"");
    return obj[key];
  };
  const nlohmann::json& model = need(j, "model", "model");
  const nlohmann::json& vocab = need(model, "vocab", "model.vocab");
  const nlohmann::json& merges_j = need(model, "merges", "model.merges");
  HH_CHECK(vocab.is_object(), path, ": \"model.vocab\" is not an object");
  HH_CHECK(merges_j.is_array(), path, ": \"model.merges\" is not an array");
  std::vector<std::pair<std::string, int64_t>> entries;
  for (const auto& [k, v] : vocab.items()) {
    HH_CHECK(v.is_number_integer(), path, ": model.vocab: the id of '", k, "' is not an integer");
    entries.emplace_back(k, v.get<int64_t>());
  }
  std::vector<std::pair<std::string, bool>> added;  // content, special
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    HH_CHECK(j["added_tokens"].is_array(), path, ": \"added_tokens\" is not an array");
    for (const auto& a : j["added_tokens"]) {
      HH_CHECK(a.is_object() && a.contains("id") && a["id"].is_number_integer() && a.contains("content") &&
                   a["content"].is_string(),
               path, ": an entry of \"added_tokens\" lacks an integer \"id\" or a string \"content\"");
      check_added_token_options(a["content"].get<std::string>(), a.value("lstrip", false), a.value("rstrip", false),
                                a.value("single_word", false), path);
      const std::string content = a["content"].get<std::string>();
      const int64_t id = a["id"].get<int64_t>();
      if (!vocab.contains(content)) entries.emplace_back(content, id);
      added.emplace_back(content, a.value("special", false) == true);
    }
  }
  std::vector<std::pair<std::string, std::string>> merges;
  for (size_t k = 0; k < merges_j.size(); ++k) {
    const auto& m = merges_j[k];
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      HH_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < s.size() && s.find(' ', sp + 1) == std::string::npos, path,
               ": model.merges[", k, "]: expected \"a b\", got \"", s, "\"");
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else {
      HH_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), path, ": model.merges[", k,
               "]: expected \"a b\" or [\"a\", \"b\"]");
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    }
  }
  std::unique_ptr<Gpt2Tokenizer> t(new Gpt2Tokenizer());
  t->build(dense_vocab(entries, path + " (model.vocab + added_tokens)"), merges, path);
  // The ByteLevel pre-tokenizer's options (alone or in a Sequence), after Qwen2's Split if any.
  const nlohmann::json pre = j.value("pre_tokenizer", nlohmann::json());
  std::vector<nlohmann::json> steps;
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers"))
    steps.assign(pre["pretokenizers"].begin(), pre["pretokenizers"].end());
  else
    steps.push_back(pre);
  bool byte_level = false;
  for (size_t k = 0; k < steps.size(); ++k) {
    const nlohmann::json& s = steps[k];
    if (k == 0 && steps.size() > 1 && s.is_object() && s.value("type", "") == "Split") {
      const nlohmann::json pattern = s.value("pattern", nlohmann::json());
      HH_CHECK(pattern.is_object() && pattern.value("Regex", "") == kQwen2Pattern && s.value("behavior", "") == "Isolated" &&
                   !s.value("invert", false),
               path, ": pre_tokenizer ", s.dump(), " is not supported (a Split: only Qwen2's pattern, Isolated)");
      t->qwen2_pattern_ = true;
      continue;
    }
    HH_CHECK(s.is_object() && s.value("type", "") == "ByteLevel", path, ": pre_tokenizer ", s.dump(),
             " is not supported for a byte-level BPE (ByteLevel, after Qwen2's Split or alone)");
    // After the Split, ByteLevel's own GPT-2 regex would cut the pieces again: Qwen2 turns it off.
    HH_CHECK(s.value("use_regex", true) != t->qwen2_pattern_, path, ": pre_tokenizer ByteLevel with use_regex=",
             t->qwen2_pattern_ ? "true after a Split" : "false", " is not supported");
    t->add_prefix_space_ = s.value("add_prefix_space", false);
    byte_level = true;
  }
  HH_CHECK(byte_level, path, ": pre_tokenizer ", pre.dump(), " has no ByteLevel step");
  // What this class does not implement is refused, never ignored.
  const nlohmann::json norm = j.value("normalizer", nlohmann::json());
  HH_CHECK(norm.is_null() || (norm.is_object() && norm.size() == 1 && norm.value("type", "") == "NFC"), path,
           ": normalizer ", norm.dump(), " is not supported for a byte-level BPE (null or NFC)");
  t->nfc_ = !norm.is_null();
  const nlohmann::json dec = j.value("decoder", nlohmann::json());
  HH_CHECK(dec.is_null() || (dec.is_object() && dec.value("type", "") == "ByteLevel"), path, ": decoder ", dec.dump(),
           " is not supported for a byte-level BPE (ByteLevel)");
  HH_CHECK(model.value("dropout", nlohmann::json()).is_null(), path, ": model.dropout is not supported");
  HH_CHECK(!model.value("ignore_merges", false), path, ": model.ignore_merges=true is not supported");
  HH_CHECK(!model.value("byte_fallback", false), path, ": model.byte_fallback=true is not supported for a byte-level BPE");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto v = model.value(key, nlohmann::json());
    HH_CHECK(v.is_null() || (v.is_string() && v.get<std::string>().empty()), path, ": model.", key, " is not supported");
  }
  for (const auto& [content, special] : added) t->add_added_token(content, special);
  const int32_t eot = t->token_to_id("<|endoftext|>");
  if (eot >= 0) t->special_ids().bos = t->special_ids().eos = t->special_ids().unk = eot;
  t->set_post_processor_json(j.value("post_processor", nlohmann::json()).dump(), path);
  return t;
}

// ---- encode / decode ----

namespace {
// The code points of valid UTF-8 `text`: off[k] = the byte offset of code point k (then text.size()),
// cls[k] its class.
void classify(std::string_view text, std::vector<uint32_t>& off, std::vector<uint8_t>& cls) {
  off.reserve(text.size() + 1);
  cls.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    off.push_back(static_cast<uint32_t>(i));
    const unsigned char b = static_cast<unsigned char>(text[i]);
    if (b < 0x80) {  // ASCII without a table lookup
      ++i;
      cls.push_back((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') ? kLetter
                    : (b >= '0' && b <= '9')                         ? kNumber
                    : (b == ' ' || (b >= 0x09 && b <= 0x0D))          ? kSpace
                                                                      : kOther);
    } else {
      cls.push_back(char_class(unicode::next_code_point(text, i)));
    }
  }
  off.push_back(static_cast<uint32_t>(text.size()));
}

// The length of a contraction at code point i ('s 't 'm 'd: 2, 're 've 'll: 3, else 0); byte_at
// gives a code point's first byte. Qwen2 matches them in either case.
template <typename ByteAt>
size_t contraction(size_t i, const ByteAt& byte_at, bool any_case) {
  if (byte_at(i) != '\'') return 0;
  const auto low = [&](char c) { return any_case && c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  const char a = low(byte_at(i + 1)), b = low(byte_at(i + 2));
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}
}  // namespace

std::vector<std::pair<size_t, size_t>> Gpt2Tokenizer::pre_tokenize(std::string_view text) {
  std::vector<uint32_t> off;
  std::vector<uint8_t> cls;
  classify(text, off, cls);
  const size_t n = cls.size();
  const auto byte_at = [&](size_t k) { return k < n ? text[off[k]] : '\0'; };  // ASCII check of char k

  std::vector<std::pair<size_t, size_t>> pieces;
  size_t i = 0;
  while (i < n) {
    const char c = byte_at(i);
    size_t end = i + contraction(i, byte_at, false);  // 's 't 're 've 'm 'll 'd
    if (end == i) {
      const size_t j = (c == ' ' && i + 1 < n) ? i + 1 : i;  // " ?" before letters, numbers, others
      const uint8_t k = cls[j];
      if (k != kSpace) {
        end = j + 1;
        while (end < n && cls[end] == k) ++end;
      } else {  // \s+(?!\S) | \s+ : a run before a non-space leaves its last character to it
        end = i;
        while (end < n && cls[end] == kSpace) ++end;
        if (end < n && end - i >= 2) --end;
      }
    }
    pieces.emplace_back(off[i], off[end]);
    i = end;
  }
  return pieces;
}

std::vector<std::pair<size_t, size_t>> Gpt2Tokenizer::pre_tokenize_qwen2(std::string_view text) {
  std::vector<uint32_t> off;
  std::vector<uint8_t> cls;
  classify(text, off, cls);
  const size_t n = cls.size();
  const auto byte_at = [&](size_t k) { return k < n ? text[off[k]] : '\0'; };  // ASCII check of char k
  const auto newline = [&](size_t k) { return byte_at(k) == '\r' || byte_at(k) == '\n'; };
  const auto run = [&](size_t k, uint8_t c) {  // the end of the run of class c from k
    while (k < n && cls[k] == c) ++k;
    return k;
  };
  std::vector<std::pair<size_t, size_t>> pieces;
  size_t i = 0;
  while (i < n) {
    size_t end = i + contraction(i, byte_at, true);  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    const uint8_t c = cls[i];
    if (end > i) {  // the contraction
    } else if (c == kLetter) {  // \p{L}+
      end = run(i, kLetter);
    } else if (c != kNumber && !newline(i) && i + 1 < n && cls[i + 1] == kLetter) {  // [^\r\n\p{L}\p{N}]\p{L}+
      end = run(i + 1, kLetter);
    } else if (c == kNumber) {  // \p{N}: one digit at a time
      end = i + 1;
    } else if (c == kOther || (byte_at(i) == ' ' && i + 1 < n && cls[i + 1] == kOther)) {  //  ?[^\s\p{L}\p{N}]+[\r\n]*
      end = run(c == kOther ? i : i + 1, kOther);
      while (end < n && newline(end)) ++end;
    } else {  // whitespace
      const size_t e = run(i, kSpace);
      size_t last_newline = e;
      for (size_t k = i; k < e; ++k)
        if (newline(k)) last_newline = k;
      if (last_newline < e)  // \s*[\r\n]+: up to the run's last newline
        end = last_newline + 1;
      else  // \s+(?!\S) leaves a run's last space to what follows it; \s+ takes a lone one
        end = e < n && e - i >= 2 ? e - 1 : e;
    }
    pieces.emplace_back(off[i], off[end]);
    i = end;
  }
  return pieces;
}

void Gpt2Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  // HF caches words too; the cache is bounded so that a stream of unique pieces cannot grow it.
  constexpr size_t kMaxCached = 1 << 18, kMaxPiece = 256;
  const bool cacheable = piece.size() <= kMaxPiece;
  std::string key(cacheable ? piece : std::string_view());  // no copy of a long piece
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> sym(piece.size());
  for (size_t k = 0; k < piece.size(); ++k) sym[k] = byte_id_[static_cast<unsigned char>(piece[k])];
  merges_.apply(sym);
  out.insert(out.end(), sym.begin(), sym.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kMaxCached) cache_.emplace(std::move(key), std::move(sym));
  }
}

std::vector<int32_t> Gpt2Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::string clean;
  if (!unicode::is_valid_utf8(text)) {
    clean = unicode::sanitize_utf8(text);
    text = clean;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  split_on_added_tokens(
      text,
      [&](std::string_view part) {
        std::string normalized;
        if (nfc_) {
          normalized = unicode::nfc(part);
          part = normalized;
        }
        std::string prefixed;
        if (add_prefix_space_ && !part.empty() && part[0] != ' ') {
          prefixed = " " + std::string(part);
          part = prefixed;
        }
        for (const auto& [b, e] : qwen2_pattern_ ? pre_tokenize_qwen2(part) : pre_tokenize(part))
          encode_piece(part.substr(b, e - b), ids);
      },
      [&](int32_t id) { ids.push_back(id); });
  // GPT-2 itself adds nothing; a tokenizer.json may bring a template (a BOS, say).
  return add_special_tokens && has_template() ? this->add_special_tokens(ids, nullptr, nullptr) : ids;
}

std::string Gpt2Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  check_ids(ids);
  std::string bytes;
  for (int32_t id : ids)
    if (!(skip_special_tokens && is_special(id))) bytes += raw_[static_cast<size_t>(id)];
  return unicode::sanitize_utf8(bytes);
}

}  // namespace hh::data
