#include "data/tokenizer_spbpe.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/unicode.h"
#include "data/vocab_ids.h"

namespace hh::data {

namespace {

// `s` with every occurrence of `from` (left to right, not overlapping) replaced by `to`, built in one
// pass: O(|s| + |result|). (An in-place std::string::replace per match was quadratic when `to` is
// longer than `from`, as " " -> "\u2581" is.)
std::string replaced(std::string_view s, const std::string& from, const std::string& to) {
  if (from.empty()) return std::string(s);
  size_t count = 0;
  for (size_t pos = s.find(from); pos != std::string_view::npos; pos = s.find(from, pos + from.size())) ++count;
  std::string out;
  out.reserve(s.size() - count * from.size() + count * to.size());
  size_t start = 0;
  for (size_t pos = s.find(from); pos != std::string_view::npos; pos = s.find(from, pos + from.size())) {
    out.append(s, start, pos - start);
    out += to;
    start = pos + from.size();
  }
  out.append(s, start, std::string_view::npos);
  return out;
}

std::string byte_token(unsigned b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "<0x%02X>", b);
  return buf;
}

// "<0xNN>" -> NN, else -1 (HF's test: six characters, "<0x" ... ">", two hex digits).
int parse_byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int v = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = t[static_cast<size_t>(k)];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

std::string string_pattern(const nlohmann::json& step, const std::string& where) {
  HH_CHECK(step.contains("pattern") && step["pattern"].is_object() && step["pattern"].contains("String") &&
               step["pattern"]["String"].is_string(),
           where, ": Replace step ", step.dump(), ": only {\"String\": ...} patterns are supported");
  return step["pattern"]["String"].get<std::string>();
}

}  // namespace

std::string SpBpeTokenizer::normalize(std::string_view text) const {
  std::string s(text);
  for (const NormStep& n : norm_) {
    if (n.prepend) {
      if (!s.empty()) s.insert(0, n.text);
    } else {
      s = replaced(s, n.from, n.text);
    }
  }
  return s;
}

std::string SpBpeTokenizer::metaspace(std::string_view text, bool first) const {
  std::string s = replaced(text, " ", meta_.replacement);
  const bool starts = s.compare(0, meta_.replacement.size(), meta_.replacement) == 0;
  if (!starts && (meta_.scheme == Metaspace::always || (meta_.scheme == Metaspace::first && first)))
    s.insert(0, meta_.replacement);
  return s;
}

int32_t SpBpeTokenizer::char_id(std::string_view word, size_t start, size_t end, char32_t c) const {
  if (c < 0x80) return ascii_ids_[c];
  if (c == unicode::kReplacement && !(end - start == 3 && word.compare(start, 3, "\xEF\xBF\xBD") == 0))
    return token_to_id(word.substr(start, end - start));  // ill-formed bytes (not in a sanitized text)
  const auto it = char_ids_.find(c);
  return it == char_ids_.end() ? -1 : it->second;
}

void SpBpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  size_t chars = 0;  // one symbol per character (byte fallback may add more)
  for (char b : word) chars += (static_cast<unsigned char>(b) & 0xC0) != 0x80;
  std::vector<int32_t> sym;
  sym.reserve(chars);
  bool pending_unk = false;
  for (size_t i = 0; i < word.size();) {
    const size_t start = i;
    const char32_t c = unicode::next_code_point(word, i);
    const int32_t id = char_id(word, start, i, c);
    if (id >= 0) {
      if (pending_unk) sym.push_back(unk_id());
      pending_unk = false;
      sym.push_back(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (size_t k = start; k < i; ++k) all = all && byte_ids_[static_cast<unsigned char>(word[k])] >= 0;
      if (all) {
        for (size_t k = start; k < i; ++k) sym.push_back(byte_ids_[static_cast<unsigned char>(word[k])]);
        continue;
      }
    }
    if (unk_id() >= 0) {  // as HF: an unknown character without a fallback is dropped when there is no unk
      if (pending_unk && !fuse_unk_) sym.push_back(unk_id());
      pending_unk = true;
    }
  }
  if (pending_unk) sym.push_back(unk_id());
  merges_.apply(sym);
  out.insert(out.end(), sym.begin(), sym.end());
}

std::vector<int32_t> SpBpeTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::string clean;
  if (!unicode::is_valid_utf8(text)) {
    clean = unicode::sanitize_utf8(text);
    text = clean;
  }
  std::vector<int32_t> ids;
  split_on_added_tokens(
      text,
      [&](std::string_view part) {
        // No pre-tokenizer (Llama-2): the whole normalized part is one word; BPE's merge is
        // O(n log n) in its length (BpeMerges::apply), everything else here is linear.
        if (!meta_.on) return encode_word(normalize(part), ids);
        const std::string s = metaspace(normalize(part), part.data() == text.data());
        if (!meta_.split) return encode_word(s, ids);
        // Each replacement starts a piece (HF: MergedWithNext), except at position 0.
        const std::string_view all(s);
        const std::string& rep = meta_.replacement;
        size_t start = 0;
        for (size_t pos = all.find(rep, 1); pos != std::string_view::npos; pos = all.find(rep, pos + 1)) {
          encode_word(all.substr(start, pos - start), ids);
          start = pos;
        }
        encode_word(all.substr(start), ids);
      },
      [&](int32_t id) { ids.push_back(id); });
  return add_special_tokens ? this->add_special_tokens(ids, nullptr, nullptr) : ids;
}

std::string SpBpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  check_ids(ids);
  std::vector<std::string> toks;
  for (int32_t id : ids)
    if (!(skip_special_tokens && is_special(id))) toks.push_back(vocab_[static_cast<size_t>(id)]);
  for (const DecodeStep& d : decoder_) {
    if (d.kind == DecodeStep::replace) {
      for (std::string& t : toks) t = replaced(t, d.from, d.to);
    } else if (d.kind == DecodeStep::fuse) {
      std::string all;
      for (const std::string& t : toks) all += t;
      toks.assign(1, all);
    } else if (d.kind == DecodeStep::strip) {
      for (std::string& t : toks) {
        size_t a = 0, b = t.size();
        for (int64_t k = 0; k < d.start && t.compare(a, d.content.size(), d.content) == 0; ++k) a += d.content.size();
        for (int64_t k = 0; k < d.stop && b >= a + d.content.size() &&
                            t.compare(b - d.content.size(), d.content.size(), d.content) == 0;
             ++k)
          b -= d.content.size();
        t = t.substr(a, b - a);
      }
    } else {  // byte_fallback: runs of <0xNN> become their bytes when those are UTF-8
      std::vector<std::string> out;
      std::string run;
      size_t run_tokens = 0;
      const auto flush = [&] {
        if (run_tokens == 0) return;
        if (unicode::is_valid_utf8(run)) {
          out.push_back(run);
        } else {
          for (size_t k = 0; k < run_tokens; ++k) out.emplace_back("\xEF\xBF\xBD");
        }
        run.clear();
        run_tokens = 0;
      };
      for (std::string& t : toks) {
        const int b = parse_byte_token(t);
        if (b >= 0) {
          run += static_cast<char>(b);
          ++run_tokens;
        } else {
          flush();
          out.push_back(std::move(t));
        }
      }
      flush();
      toks = std::move(out);
    }
  }
  std::string all;
  for (const std::string& t : toks) all += t;
  return unicode::sanitize_utf8(all);
}

void SpBpeTokenizer::index_chars() {
  for (unsigned c = 0; c < 0x80; ++c) ascii_ids_[c] = token_to_id(std::string(1, static_cast<char>(c)));
  char_ids_.clear();
  for (const std::string& token : vocab_) {
    if (token.empty() || static_cast<unsigned char>(token[0]) < 0x80) continue;
    size_t i = 0;
    const char32_t c = unicode::next_code_point(token, i);
    if (i == token.size() && c != unicode::kReplacement) char_ids_.emplace(c, token_to_id(token));
  }
  const int32_t fffd = token_to_id("\xEF\xBF\xBD");
  if (fffd >= 0) char_ids_.emplace(unicode::kReplacement, fffd);
}

std::unique_ptr<SpBpeTokenizer> SpBpeTokenizer::from_tokenizer_json(const std::string& path) {
  try {
    const nlohmann::json j = nlohmann::json::parse(detail::read_file(path));
    HH_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), path, ": missing key \"model\"");
    const nlohmann::json& model = j["model"];
    HH_CHECK(model.value("type", "") == "BPE", path, ": model.type is not \"BPE\"");
    HH_CHECK(model.contains("vocab") && model["vocab"].is_object(), path, ": missing object \"model.vocab\"");
    HH_CHECK(model.contains("merges") && model["merges"].is_array(), path, ": missing array \"model.merges\"");
    HH_CHECK(model.value("dropout", nlohmann::json()).is_null(), path, ": model.dropout is not supported");
    HH_CHECK(!model.value("ignore_merges", false), path, ": model.ignore_merges=true is not supported");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const auto v = model.value(key, nlohmann::json());
      HH_CHECK(v.is_null() || (v.is_string() && v.get<std::string>().empty()), path, ": model.", key, " is not supported");
    }
    std::unique_ptr<SpBpeTokenizer> t(new SpBpeTokenizer());
    // Vocabulary (with added tokens beyond it) by id.
    std::vector<std::pair<std::string, int64_t>> entries;
    for (const auto& [k, v] : model["vocab"].items()) {
      HH_CHECK(v.is_number_integer(), path, ": model.vocab: the id of '", k, "' is not an integer");
      entries.emplace_back(k, v.get<int64_t>());
    }
    const nlohmann::json added = j.value("added_tokens", nlohmann::json::array());
    HH_CHECK(added.is_array(), path, ": \"added_tokens\" is not an array");
    for (const auto& a : added) {
      HH_CHECK(a.is_object() && a.contains("id") && a["id"].is_number_integer() && a.contains("content") &&
                   a["content"].is_string(),
               path, ": an entry of \"added_tokens\" lacks an integer \"id\" or a string \"content\"");
      check_added_token_options(a["content"].get<std::string>(), a.value("lstrip", false), a.value("rstrip", false),
                                a.value("single_word", false), path);
      if (!model["vocab"].contains(a["content"].get<std::string>()))
        entries.emplace_back(a["content"].get<std::string>(), a["id"].get<int64_t>());
    }
    int64_t max_id = -1;
    for (const auto& e : entries) {
      HH_CHECK(e.second >= 0 && e.second < (int64_t{1} << 30), path, ": token '", e.first, "' has id ", e.second,
               ", outside [0, 2^30)");
      max_id = std::max(max_id, e.second);
    }
    const int64_t gap = first_missing_id(entries, max_id, [](const auto& e) { return e.second; });
    HH_CHECK(gap < 0, path, ": no token has id ", gap);  // before max_id + 1 slots are allocated
    std::vector<std::string> vocab(static_cast<size_t>(max_id + 1));
    std::vector<bool> have(vocab.size(), false);
    for (const auto& [k, id] : entries) {
      HH_CHECK(!have[static_cast<size_t>(id)], path, ": id ", id, " is given to two tokens");
      have[static_cast<size_t>(id)] = true;
      vocab[static_cast<size_t>(id)] = k;
    }
    for (size_t id = 0; id < vocab.size(); ++id) HH_CHECK(have[id], path, ": no token has id ", id);
    t->set_vocab(std::move(vocab));
    for (const auto& a : added) t->add_added_token(a["content"].get<std::string>(), a.value("special", false));

    const nlohmann::json& merges = model["merges"];
    for (size_t k = 0; k < merges.size(); ++k) {
      const auto& m = merges[k];
      std::string a, b;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ');
        HH_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < s.size() && s.find(' ', sp + 1) == std::string::npos, path,
                 ": model.merges[", k, "]: expected \"a b\", got \"", s, "\"");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {
        HH_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), path, ": model.merges[", k,
                 "]: expected \"a b\" or [\"a\", \"b\"]");
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      }
      const int32_t ia = t->token_to_id(a), ib = t->token_to_id(b), im = t->token_to_id(a + b);
      HH_CHECK(ia >= 0 && ib >= 0 && im >= 0, path, ": model.merges[", k, "] '", a, " ", b, "': '",
               ia < 0 ? a : ib < 0 ? b : a + b, "' is not in the vocabulary");
      t->merges_.add(ia, ib, im);
    }
    t->byte_fallback_ = model.value("byte_fallback", false);
    t->fuse_unk_ = model.value("fuse_unk", false);
    for (unsigned b = 0; b < 256; ++b) t->byte_ids_[b] = t->token_to_id(byte_token(b));
    t->index_chars();
    const auto unk = model.value("unk_token", nlohmann::json());
    if (!unk.is_null()) {
      HH_CHECK(unk.is_string() && t->token_to_id(unk.get<std::string>()) >= 0, path, ": model.unk_token ", unk.dump(),
               " is not in the vocabulary");
      t->special_ids().unk = t->token_to_id(unk.get<std::string>());
    }
    t->special_ids().bos = t->token_to_id("<s>");
    t->special_ids().eos = t->token_to_id("</s>");
    t->special_ids().pad = t->token_to_id("<pad>");

    // normalizer: Prepend / Replace steps, alone or in a Sequence
    const nlohmann::json norm = j.value("normalizer", nlohmann::json());
    std::vector<nlohmann::json> steps;
    if (norm.is_object() && norm.value("type", "") == "Sequence" && norm.contains("normalizers") && norm["normalizers"].is_array())
      steps.assign(norm["normalizers"].begin(), norm["normalizers"].end());
    else if (!norm.is_null())
      steps.push_back(norm);
    for (const auto& s : steps) {
      const std::string type = s.is_object() ? s.value("type", "") : "";
      if (type == "Prepend" && s.contains("prepend") && s["prepend"].is_string()) {
        t->norm_.push_back({true, "", s["prepend"].get<std::string>()});
      } else if (type == "Replace" && s.contains("content") && s["content"].is_string()) {
        t->norm_.push_back({false, string_pattern(s, path), s["content"].get<std::string>()});
      } else {
        fail(str(path, ": normalizer step ", s.dump(), " is not supported (Prepend, Replace with a String pattern)"));
      }
    }
    const nlohmann::json pre = j.value("pre_tokenizer", nlohmann::json());
    if (pre.is_object() && pre.value("type", "") == "Metaspace") {
      t->meta_.on = true;
      t->meta_.replacement = pre.value("replacement", std::string("\xE2\x96\x81"));
      HH_CHECK(!t->meta_.replacement.empty(), path, ": pre_tokenizer Metaspace: empty replacement");
      const std::string scheme = pre.value("prepend_scheme", std::string(pre.value("add_prefix_space", true) ? "always" : "never"));
      HH_CHECK(scheme == "always" || scheme == "first" || scheme == "never", path,
               ": pre_tokenizer Metaspace: prepend_scheme \"", scheme, "\" (always, first or never)");
      t->meta_.scheme = scheme == "always" ? Metaspace::always : scheme == "first" ? Metaspace::first : Metaspace::never;
      t->meta_.split = pre.value("split", true);
    } else {
      HH_CHECK(pre.is_null(), path, ": pre_tokenizer ", pre.dump(),
               " is not supported for SentencePiece BPE (null or Metaspace)");
    }

    // decoder
    const nlohmann::json dec = j.value("decoder", nlohmann::json());
    std::vector<nlohmann::json> dsteps;
    if (dec.is_object() && dec.value("type", "") == "Sequence" && dec.contains("decoders") && dec["decoders"].is_array())
      dsteps.assign(dec["decoders"].begin(), dec["decoders"].end());
    else if (!dec.is_null())
      dsteps.push_back(dec);
    for (const auto& s : dsteps) {
      const std::string type = s.is_object() ? s.value("type", "") : "";
      DecodeStep d{DecodeStep::fuse, "", "", "", 0, 0};
      if (type == "Replace" && s.contains("content") && s["content"].is_string()) {
        d.kind = DecodeStep::replace;
        d.from = string_pattern(s, path);
        d.to = s["content"].get<std::string>();
      } else if (type == "ByteFallback") {
        d.kind = DecodeStep::byte_fallback;
      } else if (type == "Fuse") {
        d.kind = DecodeStep::fuse;
      } else if (type == "Strip" && s.contains("content") && s["content"].is_string()) {
        d.kind = DecodeStep::strip;
        d.content = s["content"].get<std::string>();
        d.start = s.value("start", int64_t{0});
        d.stop = s.value("stop", int64_t{0});
        HH_CHECK(!d.content.empty() && d.start >= 0 && d.stop >= 0, path, ": decoder step ", s.dump(), " is not valid");
      } else {
        fail(str(path, ": decoder step ", s.dump(), " is not supported (Replace, ByteFallback, Fuse, Strip)"));
      }
      t->decoder_.push_back(d);
    }
    t->set_post_processor_json(j.value("post_processor", nlohmann::json()).dump(), path);
    return t;
  } catch (const nlohmann::json::exception& e) {
    fail(str(path, ": ", e.what()));
  }
}

}  // namespace hh::data
