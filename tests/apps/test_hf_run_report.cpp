// apps/hf_run_report.h: hf_run's report.html shows its figures rounded and wraps long lines.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/hf_run_report.h"

TEST_CASE("hf_run report: figures rounded, long id lines and texts wrap inside the page") {
  const nlohmann::json r = {{"model", "m"}, {"load_seconds", 0.05624571}, {"count", 3}, {"text", "a long text"},
                            {"prompt_ids", std::vector<int>(300, 7)}, {"generated_ids", std::vector<int>(300, 9)}};
  const std::string page = hh::apps::hf_run_report_html(r);
  CHECK(page.find("<td>0.05625</td>") != std::string::npos);
  CHECK(page.find("0.05624571") == std::string::npos);
  CHECK(page.find("<td>3</td>") != std::string::npos);
  CHECK(page.find("white-space:pre-wrap") != std::string::npos);
}
