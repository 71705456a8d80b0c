#include "serve/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

namespace hh::serve {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, jinja::json special_tokens, std::string origin)
    : special_tokens_(std::move(special_tokens)) {
  try {
    template_ = std::make_shared<const jinja::Template>(source, origin);
    problem_.clear();
  } catch (const jinja::Error& e) {
    problem_ = e.what();
  }
}

ChatTemplate ChatTemplate::load(const std::string& folder) {
  namespace fs = std::filesystem;
  const std::string config_path = folder + "/tokenizer_config.json";
  jinja::json config = jinja::json::object();
  std::string problem;
  if (fs::is_regular_file(config_path)) {
    try {
      config = jinja::json::parse(read_text(config_path));
      if (!config.is_object()) throw std::runtime_error("not a JSON object");
    } catch (const std::exception& e) {
      problem = config_path + ": " + e.what();
      config = jinja::json::object();
    }
  }
  // The special tokens, as strings (tokenizer_config.json may hold AddedToken objects).
  jinja::json special = jinja::json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"}) {
    if (!config.contains(key)) continue;
    const jinja::json& v = config[key];
    if (v.is_string()) special[key] = v;
    else if (v.is_object() && v.contains("content") && v["content"].is_string()) special[key] = v["content"];
  }
  std::string source, origin;
  const std::string jinja_path = folder + "/chat_template.jinja";
  if (fs::is_regular_file(jinja_path)) {
    source = read_text(jinja_path);
    origin = jinja_path;
  } else if (config.contains("chat_template")) {
    const jinja::json& t = config["chat_template"];
    origin = config_path + ": chat_template";
    if (t.is_string()) {
      source = t.get<std::string>();
    } else if (t.is_array()) {  // [{"name": ..., "template": ...}]: the default one
      for (const jinja::json& named : t)
        if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
            named["template"].is_string())
          source = named["template"].get<std::string>();
      if (source.empty()) problem = origin + ": a list of templates without a \"default\" one";
    } else {
      problem = origin + ": must be a string or a list of named templates";
    }
  } else if (problem.empty()) {
    problem = "the model folder has no chat template (chat_template.jinja or tokenizer_config.json's chat_template)";
  }
  if (source.empty()) {
    ChatTemplate none;
    none.problem_ = problem.empty() ? origin + ": empty" : problem;
    return none;
  }
  return ChatTemplate(source, special, origin);
}

std::string ChatTemplate::render(const jinja::json& messages, bool add_generation_prompt, const jinja::json& extra) const {
  if (!template_) throw jinja::Error(problem_);
  jinja::json context = special_tokens_;
  for (auto it = extra.begin(); it != extra.end(); ++it) context[it.key()] = it.value();
  context["messages"] = messages;
  context["add_generation_prompt"] = add_generation_prompt;
  if (!context.contains("tools")) context["tools"] = nullptr;
  if (!context.contains("documents")) context["documents"] = nullptr;
  return template_->render(context);
}

}  // namespace hh::serve
