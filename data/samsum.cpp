#include "data/samsum.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/regular_file.h"

namespace hh::data {

namespace {

constexpr int kMaxJsonDepth = 16;  // the format nests two deep (array of objects)

}  // namespace

std::vector<SamsumExample> read_samsum(const std::string& path, int64_t max_examples) {
  const std::string where = "samsum: " + path;
  HH_CHECK(max_examples == -1 || max_examples > 0, "samsum: max_examples must be -1 (all) or > 0, got ",
           max_examples);
  std::error_code ec;
  HH_CHECK(!std::filesystem::is_directory(path, ec), where, ": is a directory, not a JSON file");
  check_regular_file(path, "samsum");  // a FIFO would block the open below forever
  std::ifstream f(path, std::ios::binary);
  HH_CHECK(f.good(), where, ": cannot open the file");
  std::ostringstream ss;
  ss << f.rdbuf();
  HH_CHECK(!f.bad(), where, ": read error");
  const std::string text = ss.str();
  HH_CHECK(!text.empty(), where, ": the file is empty");

  bool too_deep = false;
  auto depth_guard = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json&) {
    if (ev == nlohmann::json::parse_event_t::object_start || ev == nlohmann::json::parse_event_t::array_start)
      too_deep = too_deep || depth >= kMaxJsonDepth;
    return !too_deep;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text, depth_guard);
  } catch (const nlohmann::json::parse_error& e) {
    fail(str(where, ": invalid JSON at byte ", e.byte, " (", e.what(), ")"));
  } catch (const nlohmann::json::exception& e) {
    fail(str(where, ": invalid JSON (", e.what(), ")"));
  }
  HH_CHECK(!too_deep, where, ": JSON nested deeper than ", kMaxJsonDepth);
  HH_CHECK(j.is_array(), where, ": expected a JSON array of records at the top level, found ", j.type_name());
  HH_CHECK(!j.empty(), where, ": the array holds no records");

  std::vector<SamsumExample> out;
  for (size_t i = 0; i < j.size(); ++i) {
    if (max_examples >= 0 && static_cast<int64_t>(out.size()) >= max_examples) break;
    const nlohmann::json& r = j[i];
    HH_CHECK(r.is_object(), where, ": record ", i, ": expected an object, found ", r.type_name());
    const auto id_it = r.find("id");
    const std::string id_note = id_it != r.end() && id_it->is_string() ? " (id '" + id_it->get<std::string>() + "')" : "";
    auto field = [&](const char* name) -> std::string {
      const auto it = r.find(name);
      HH_CHECK(it != r.end(), where, ": record ", i, id_note, ": missing field '", name, "'");
      HH_CHECK(it->is_string(), where, ": record ", i, id_note, ": field '", name, "' is a ", it->type_name(),
               ", expected a string");
      return it->get<std::string>();
    };
    SamsumExample ex;
    ex.id = field("id");
    ex.dialogue = field("dialogue");
    ex.summary = field("summary");
    out.push_back(std::move(ex));
  }
  return out;
}

std::string samsum_prompt(const SamsumExample& example) {
  return "Summarize this dialog:\n" + example.dialogue + "\n---\nSummary:\n";
}

}  // namespace hh::data
