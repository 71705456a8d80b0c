// The shared HTML page shell, escaping and file-name slugs (see train/report/html.h).
#include "train/report/html.h"

#include <cctype>

namespace hh {

std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string html_page(const std::string& title, const std::string& body, const HtmlPageOptions& options) {
  std::string h = "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>hedgehog: " + xml_escape(title) +
                  "</title>\n<style>body{font-family:sans-serif;max-width:" + std::to_string(options.max_width) +
                  "px;margin:2em auto}img{max-width:48%;margin:.5%}pre{background:#f4f4f4;padding:1em;"
                  "white-space:pre-wrap}td,th{padding:.2em .8em}" +
                  options.css + "</style></head><body>\n";
  return h + body + "</body></html>\n";
}

std::string file_slug(const std::string& label) {
  std::string s;
  for (char c : label) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-')
      s += c;
    else if (c == ' ' && !s.empty() && s.back() != '_')
      s += '_';
  }
  while (!s.empty() && s.back() == '_') s.pop_back();
  return s;
}

}  // namespace hh
