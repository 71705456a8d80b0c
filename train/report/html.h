// The page shell every report shares (doctype, UTF-8, "hedgehog: <title>" in the tab, one style
// sheet, the body), the file-name slug of a run label, and the escaping of text put into HTML or
// SVG: one place for each, used by every experiment's report and by hf_run.
#pragma once
#include <string>

namespace hh {

// Escapes & < > " ' for HTML/XML text and attribute values (also used by the SVG plots).
std::string xml_escape(const std::string& s);
inline std::string html_escape(const std::string& s) { return xml_escape(s); }

struct HtmlPageOptions {
  int max_width = 1200;  // px: the body's column width
  std::string css;       // rules added after the shared ones (body, img, pre, table cells)
};

// A complete HTML document: `title` (escaped here) in the tab and `body` (HTML) as the page.
std::string html_page(const std::string& title, const std::string& body, const HtmlPageOptions& options = {});

// A run label as a file-name part: "exp (t=2)" -> "exp_t2" (letters, digits and '-' kept, a space
// becomes '_' unless one precedes it, anything else dropped, no '_' at the end). Run folders of
// earlier runs are named by it: changing it would orphan them on --resume.
std::string file_slug(const std::string& label);

}  // namespace hh
