#include "data/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/regular_file.h"
#include "data/tokenizer_gpt2.h"
#include "data/tokenizer_spbpe.h"
#include "data/tokenizer_wordpiece.h"

namespace hh::data {

std::vector<int32_t> Tokenizer::add_special_tokens(const std::vector<int32_t>& a, const std::vector<int32_t>* b,
                                                   std::vector<int32_t>* type_ids) const {
  if (has_template_) {
    std::vector<int32_t> out, types;
    for (const TemplateItem& item : b ? pair_ : single_) {
      const std::vector<int32_t>& part = item.sequence < 0 ? item.special : item.sequence == 0 ? a : *b;
      out.insert(out.end(), part.begin(), part.end());
      types.resize(out.size(), item.type_id);
    }
    if (type_ids) *type_ids = std::move(types);
    return out;
  }
  std::vector<int32_t> out = a;
  if (b) out.insert(out.end(), b->begin(), b->end());
  if (type_ids) {
    type_ids->assign(a.size(), 0);
    if (b) type_ids->resize(out.size(), 1);
  }
  return out;
}

int64_t Tokenizer::num_special_tokens(bool pair) const {
  const std::vector<int32_t> none;
  return static_cast<int64_t>(add_special_tokens(none, pair ? &none : nullptr, nullptr).size());
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  const auto it = token_ids_.find(std::string(token));
  return it == token_ids_.end() ? -1 : it->second;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  HH_CHECK(id >= 0 && static_cast<size_t>(id) < vocab_.size(), "id_to_token: id ", id, " is outside the vocabulary [0, ",
           vocab_.size(), ")");
  return vocab_[static_cast<size_t>(id)];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < special_mask_.size() && special_mask_[static_cast<size_t>(id)];
}

void Tokenizer::check_ids(const std::vector<int32_t>& ids) const {
  for (int32_t id : ids)
    HH_CHECK(id >= 0 && static_cast<size_t>(id) < vocab_.size(), "decode: id ", id, " is outside the vocabulary [0, ",
             vocab_.size(), ")");
}

void Tokenizer::set_vocab(std::vector<std::string> id_to_token) {
  vocab_ = std::move(id_to_token);
  token_ids_.clear();
  token_ids_.reserve(vocab_.size());
  for (size_t i = 0; i < vocab_.size(); ++i) token_ids_.emplace(vocab_[i], static_cast<int32_t>(i));
  special_mask_.assign(vocab_.size(), false);
}

void Tokenizer::add_added_token(const std::string& token, bool special) {
  HH_CHECK(!token.empty(), "added token: empty string");
  const int32_t id = token_to_id(token);
  HH_CHECK(id >= 0, "added token '", token, "' is not in the vocabulary");
  if (special) special_mask_[static_cast<size_t>(id)] = true;
  for (const AddedToken& a : added_)
    if (a.text == token) return;
  added_.push_back({token, id});
  std::stable_sort(added_.begin(), added_.end(),
                   [](const AddedToken& x, const AddedToken& y) { return x.text.size() > y.text.size(); });
  added_first_byte_[static_cast<unsigned char>(token[0])] = true;
}

void Tokenizer::set_template(std::vector<TemplateItem> single, std::vector<TemplateItem> pair) {
  single_ = std::move(single);
  pair_ = std::move(pair);
  has_template_ = true;
}

void Tokenizer::set_post_processor_json(const std::string& json_text, const std::string& where) {
  const nlohmann::json p = nlohmann::json::parse(json_text);
  if (p.is_null()) return;
  const std::string type = p.is_object() ? p.value("type", "") : "";
  const auto id_of = [&](const std::string& token) {
    const int32_t id = token_to_id(token);
    HH_CHECK(id >= 0, where, ": post_processor: special token '", token, "' is not in the vocabulary");
    return id;
  };
  if (type == "ByteLevel") return;  // offsets only
  if (type == "BertProcessing") {
    HH_CHECK(p.contains("cls") && p["cls"].is_array() && !p["cls"].empty() && p["cls"][0].is_string() &&
                 p.contains("sep") && p["sep"].is_array() && !p["sep"].empty() && p["sep"][0].is_string(),
             where, ": post_processor BertProcessing needs \"cls\" and \"sep\" as [token, id]");
    const int32_t cls = id_of(p["cls"][0].get<std::string>()), sep = id_of(p["sep"][0].get<std::string>());
    set_template({{{cls}, -1, 0}, {{}, 0, 0}, {{sep}, -1, 0}},
                 {{{cls}, -1, 0}, {{}, 0, 0}, {{sep}, -1, 0}, {{}, 1, 1}, {{sep}, -1, 1}});
    return;
  }
  HH_CHECK(type == "TemplateProcessing", where, ": post_processor type \"", type,
           "\" is not supported (TemplateProcessing, BertProcessing, ByteLevel or null)");
  const auto items = [&](const char* key) {
    HH_CHECK(p.contains(key) && p[key].is_array(), where, ": post_processor.", key, " is not an array");
    std::vector<TemplateItem> out;
    for (const auto& it : p[key]) {
      TemplateItem item;
      if (it.is_object() && it.contains("SpecialToken") && it["SpecialToken"].is_object()) {
        const auto& st = it["SpecialToken"];
        HH_CHECK(st.contains("id") && st["id"].is_string(), where, ": post_processor.", key, ": SpecialToken without an id");
        const std::string name = st["id"].get<std::string>();
        const auto& specials = p.value("special_tokens", nlohmann::json::object());
        if (specials.is_object() && specials.contains(name) && specials[name].contains("ids") && specials[name]["ids"].is_array()) {
          for (const auto& v : specials[name]["ids"]) {
            HH_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < static_cast<int64_t>(vocab_.size()),
                     where, ": post_processor.special_tokens.", name, ".ids holds ", v.dump(), ", not an id of the vocabulary");
            item.special.push_back(v.get<int32_t>());
          }
        } else {
          item.special.push_back(id_of(name));
        }
        item.type_id = st.value("type_id", 0);
      } else if (it.is_object() && it.contains("Sequence") && it["Sequence"].is_object()) {
        const auto& sq = it["Sequence"];
        const std::string id = sq.value("id", "");
        HH_CHECK(id == "A" || id == "B", where, ": post_processor.", key, ": Sequence id \"", id, "\" (A or B)");
        item.sequence = id == "A" ? 0 : 1;
        item.type_id = sq.value("type_id", 0);
      } else {
        fail(str(where, ": post_processor.", key, ": item ", it.dump(), " is neither SpecialToken nor Sequence"));
      }
      out.push_back(std::move(item));
    }
    return out;
  };
  set_template(items("single"), items("pair"));
}

void Tokenizer::check_added_token_options(const std::string& token, bool lstrip, bool rstrip, bool single_word,
                                          const std::string& where) {
  HH_CHECK(!lstrip && !rstrip && !single_word, where, ": added token '", token,
           "': lstrip, rstrip and single_word are not supported (the token is matched as written)");
}

// ---- load_tokenizer ----

namespace {
// Present and not a folder: a FIFO or device under a tokenizer file's name is then refused by
// detail::read_file, naming it, rather than skipped.
bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode);
}
}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& folder) {
  const std::string dir = folder.empty() || folder.back() == '/' ? folder : folder + "/";
  struct stat st {};
  HH_CHECK(::stat(folder.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "load_tokenizer: '", folder,
           "' is not a folder");
  if (is_file(dir + "tokenizer.json")) {
    const std::string path = dir + "tokenizer.json";
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(detail::read_file(path));
    } catch (const nlohmann::json::exception& e) {
      fail(str(path, ": not valid JSON: ", e.what()));
    }
    const auto model = j.find("model");
    HH_CHECK(j.is_object() && model != j.end() && model->is_object() && model->contains("type") &&
                 (*model)["type"].is_string(),
             path, ": no string key \"model.type\"");
    const std::string type = (*model)["type"].get<std::string>();
    if (type == "WordPiece") return WordPieceTokenizer::from_tokenizer_json(path);
    if (type == "BPE") {
      // GPT-2 style: a ByteLevel pre-tokenizer (alone or inside a Sequence).
      const std::string pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"].dump() : "null";
      if (pre.find("\"ByteLevel\"") != std::string::npos) return Gpt2Tokenizer::from_tokenizer_json(path);
      return SpBpeTokenizer::from_tokenizer_json(path);
    }
    fail(str(path, ": model type \"", type, "\" is not supported (BPE or WordPiece)"));
  }
  if (is_file(dir + "vocab.json") || is_file(dir + "merges.txt")) {
    HH_CHECK(is_file(dir + "vocab.json"), "load_tokenizer: ", dir, "merges.txt has no vocab.json beside it");
    HH_CHECK(is_file(dir + "merges.txt"), "load_tokenizer: ", dir, "vocab.json has no merges.txt beside it");
    return Gpt2Tokenizer::from_files(dir + "vocab.json", dir + "merges.txt");
  }
  if (is_file(dir + "vocab.txt")) return WordPieceTokenizer::from_vocab_txt(dir + "vocab.txt");
  fail(str("load_tokenizer: ", folder, " has no tokenizer.json, vocab.json + merges.txt or vocab.txt"));
}

std::string detail::read_file(const std::string& path) {
  check_regular_file(path, "tokenizer");  // a FIFO would block the open below forever
  std::ifstream in(path, std::ios::binary);
  HH_CHECK(in, "cannot open ", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  HH_CHECK(!in.bad(), "cannot read ", path);
  return ss.str();
}

// ---- batches ----

namespace {

// HF's "longest_first" for a pair cut to `target` ids in all (specials excluded).
void truncate_pair(std::vector<int32_t>& a, std::vector<int32_t>& b, size_t target) {
  if (a.size() + b.size() <= target) return;
  const bool swap = a.size() > b.size();
  size_t small = swap ? b.size() : a.size(), large;
  large = small > target ? small : std::max(small, target - small);
  if (small + large > target) {
    small = target / 2;
    large = small + target % 2;
  }
  const size_t na = swap ? large : small, nb = swap ? small : large;
  if (a.size() > na) a.resize(na);
  if (b.size() > nb) b.resize(nb);
}

BatchEncoding encode_rows(const Tokenizer& tok, const std::vector<std::string_view>& first,
                          const std::vector<std::string_view>* second, const BatchOptions& o) {
  const bool pair = second != nullptr;
  HH_CHECK(!first.empty(), "encode_batch: empty batch");
  HH_CHECK(!(o.truncation || o.padding == Padding::max_length) || o.max_length > 0,
           "encode_batch: truncation and padding to max_length need max_length > 0 (got ", o.max_length, ")");
  const int64_t specials = o.add_special_tokens ? tok.num_special_tokens(pair) : 0;
  HH_CHECK(!o.truncation || o.max_length >= specials + (pair ? 2 : 1), "encode_batch: max_length ", o.max_length,
           " leaves no room for text beside the ", specials, " special tokens");
  std::vector<std::vector<int32_t>> rows(first.size()), types(first.size());
  size_t longest = 0;
  for (size_t r = 0; r < first.size(); ++r) {
    std::vector<int32_t> a = tok.encode(first[r], false), b;
    if (pair) b = tok.encode((*second)[r], false);
    if (o.truncation) {
      const size_t target = static_cast<size_t>(o.max_length - specials);
      if (pair) {
        truncate_pair(a, b, target);
      } else if (a.size() > target) {
        a.resize(target);
      }
    }
    if (o.add_special_tokens) {
      rows[r] = tok.add_special_tokens(a, pair ? &b : nullptr, &types[r]);
    } else {
      rows[r] = a;
      types[r].assign(a.size(), 0);
      if (pair) {
        rows[r].insert(rows[r].end(), b.begin(), b.end());
        types[r].resize(rows[r].size(), 1);
      }
    }
    longest = std::max(longest, rows[r].size());
  }
  size_t width = longest;
  if (o.padding == Padding::max_length) width = std::max(longest, static_cast<size_t>(o.max_length));
  if (o.padding == Padding::none) {
    for (size_t r = 0; r < rows.size(); ++r)
      HH_CHECK(rows[r].size() == longest, "encode_batch: without padding every row needs the same length; row ", r,
               " has ", rows[r].size(), " ids, another ", longest);
  }
  const int32_t pad = o.pad_id >= 0 ? o.pad_id : tok.pad_id();
  bool needs_pad = false;
  for (const auto& row : rows) needs_pad = needs_pad || row.size() < width;
  HH_CHECK(!needs_pad || pad >= 0, "encode_batch: padding needs a pad id, and this tokenizer has none (set BatchOptions::pad_id)");

  const size_t B = rows.size();
  std::vector<int64_t> ids(B * width, pad), tt(B * width, 0), mask(B * width, 0);
  BatchEncoding out;
  for (size_t r = 0; r < B; ++r) {
    const size_t n = rows[r].size(), off = r * width + (o.pad_left ? width - n : 0);
    for (size_t k = 0; k < n; ++k) {
      ids[off + k] = rows[r][k];
      tt[off + k] = types[r][k];
      mask[off + k] = 1;
    }
    out.lengths.push_back(static_cast<int64_t>(n));
  }
  const Shape shape{static_cast<int64_t>(B), static_cast<int64_t>(width)};
  out.input_ids = from_vector(ids, shape, DType::i64);
  out.attention_mask = from_vector(mask, shape, DType::boolean);
  out.token_type_ids = from_vector(tt, shape, DType::i64);
  return out;
}

}  // namespace

BatchEncoding encode_batch(const Tokenizer& tok, const std::vector<std::string>& texts, const BatchOptions& options) {
  std::vector<std::string_view> first(texts.begin(), texts.end());
  return encode_rows(tok, first, nullptr, options);
}

BatchEncoding encode_batch_pairs(const Tokenizer& tok, const std::vector<std::pair<std::string, std::string>>& pairs,
                           const BatchOptions& options) {
  std::vector<std::string_view> first, second;
  for (const auto& p : pairs) {
    first.emplace_back(p.first);
    second.emplace_back(p.second);
  }
  return encode_rows(tok, first, &second, options);
}

}  // namespace hh::data
