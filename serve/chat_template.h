// A model folder's chat template, rendered as transformers' apply_chat_template(messages,
// tokenize=False, add_generation_prompt=...) renders it (serve/jinja.h): the template of
// chat_template.jinja, else tokenizer_config.json's "chat_template" (a string, or the list of named
// templates: "default"); the variables transformers passes (messages, add_generation_prompt,
// tools=None, documents=None and the special tokens of tokenizer_config.json: bos_token, eos_token,
// unk_token, pad_token, ...). The rendered text already holds the template's special tokens, so it
// is tokenized without adding any (apply_chat_template(tokenize=True) does the same).
#pragma once
#include <memory>
#include <string>

#include "serve/jinja.h"

namespace hh::serve {

class ChatTemplate {
 public:
  // Reads the folder's template. A folder without one, or whose template does not parse, still
  // loads: render() then throws jinja::Error saying so (the server answers 400, completions work).
  static ChatTemplate load(const std::string& folder);
  // A template from text, with the special tokens given as variables (tests, tools).
  ChatTemplate(const std::string& source, jinja::json special_tokens, std::string origin);
  ChatTemplate() = default;

  bool available() const { return template_ != nullptr; }
  const std::string& problem() const { return problem_; }  // why it is not available

  // messages: the list of {"role", "content", ...} objects; extra: more variables (date_string, ...).
  std::string render(const jinja::json& messages, bool add_generation_prompt,
                     const jinja::json& extra = jinja::json::object()) const;

 private:
  std::shared_ptr<const jinja::Template> template_;
  jinja::json special_tokens_ = jinja::json::object();
  std::string problem_ = "no chat template";
};

}  // namespace hh::serve
