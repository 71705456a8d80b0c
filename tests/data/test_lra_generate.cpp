// LRA generators (data/lra_generate.h): generator -> reader round trips, the same files for any
// thread count, ListOps lengths and values (re-evaluated here by an independent evaluator), the
// release's TSV layout, Pathfinder's balanced labels and file layout, and bad options.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/lra.h"
#include "data/lra_generate.h"
#include "tests/temp_dir.h"

using namespace hh;
using namespace hh::data;
namespace fs = std::filesystem;

namespace {

using TempDir = test::TempDir;

std::string file_bytes(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Every file under `dir`, by relative path, with its bytes.
std::map<std::string, std::string> all_files(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = file_bytes(e.path());
  return out;
}

// An evaluator of ListOps token ids written for this test: a stack of open operators, each
// collecting its arguments; ']' closes the top one.
int evaluate_listops(const std::vector<int32_t>& tokens) {
  const auto& vocab = lra_listops_vocab();
  std::vector<std::pair<std::string, std::vector<int>>> stack;
  int result = -1;
  for (int32_t id : tokens) {
    const std::string& sym = vocab.at(static_cast<size_t>(id - 1));
    if (sym[0] == '[') {
      stack.push_back({sym, {}});
      continue;
    }
    int value = 0;
    if (sym == "]") {
      REQUIRE(!stack.empty());
      auto [op, args] = stack.back();
      stack.pop_back();
      REQUIRE(args.size() >= 2);
      std::sort(args.begin(), args.end());
      if (op == "[MAX") value = args.back();
      else if (op == "[MIN") value = args.front();
      else if (op == "[SM") {
        for (int a : args) value += a;
        value %= 10;
      } else {
        REQUIRE(op == "[MED");
        const size_t n = args.size();
        value = n % 2 ? args[n / 2] : (args[n / 2 - 1] + args[n / 2]) / 2;
      }
    } else {
      value = sym[0] - '0';
    }
    if (stack.empty()) {
      REQUIRE(result == -1);  // one tree per example
      result = value;
    } else {
      stack.back().second.push_back(value);
    }
  }
  REQUIRE(stack.empty());
  return result;
}

ListOpsOptions small_listops(int threads) {
  ListOpsOptions o;
  o.train = 40;
  o.val = 8;
  o.test = 8;
  o.min_len = 20;
  o.max_len = 80;
  o.seed = 11;
  o.threads = threads;
  o.progress = false;
  return o;
}

PathfinderOptions small_pathfinder(int threads) {
  PathfinderOptions o;
  o.train = 20;
  o.val = 6;
  o.test = 7;
  o.seed = 5;
  o.threads = threads;
  o.progress = false;
  return o;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("lra generate: ListOps round trip, values, lengths, distinct trees, release layout") {
  TempDir t("lra_listops");
  const ListOpsOptions o = small_listops(2);
  generate_listops(t.path.string(), o);
  std::set<std::vector<int32_t>> seen;
  int64_t total = 0;
  for (const auto& [split, n] : std::vector<std::pair<std::string, int64_t>>{{"train", 40}, {"val", 8}, {"test", 8}}) {
    const LraSplit s = read_lra_split(LraTask::listops, t.path.string(), split);
    REQUIRE(static_cast<int64_t>(s.examples.size()) == n);
    for (const LraExample& ex : s.examples) {
      // Without parentheses the token count is the official generator's length.
      CHECK(static_cast<int64_t>(ex.tokens.size()) > o.min_len);
      CHECK(static_cast<int64_t>(ex.tokens.size()) < o.max_len);
      CHECK(evaluate_listops(ex.tokens) == ex.label);
      seen.insert(ex.tokens);
      ++total;
    }
  }
  CHECK(static_cast<int64_t>(seen.size()) == total);
  // The release's layout: header, "\r\n" line ends, one space between tokens, parentheses.
  const std::string text = file_bytes(t.path / "basic_val.tsv");
  CHECK(text.rfind("Source\tTarget\r\n( ", 0) == 0);
  CHECK(text.find("  ") == std::string::npos);
  CHECK(text.find(" ] )\t") != std::string::npos);
  CHECK(text.substr(text.size() - 2) == "\r\n");
}

TEST_CASE("lra generate: ListOps files are the same for any thread count, differ by seed") {
  TempDir a("lra_listops_a"), b("lra_listops_b"), c("lra_listops_c");
  generate_listops(a.path.string(), small_listops(1));
  generate_listops(b.path.string(), small_listops(3));
  ListOpsOptions other = small_listops(2);
  other.seed = 12;
  generate_listops(c.path.string(), other);
  const auto fa = all_files(a.path);
  CHECK(fa.size() == 3);
  CHECK(fa == all_files(b.path));
  CHECK(fa.at("basic_train.tsv") != all_files(c.path).at("basic_train.tsv"));
}

TEST_CASE("lra generate: ListOps at the paper's lengths (500-2000) is fast") {
  TempDir t("lra_listops_full");
  ListOpsOptions o;
  o.train = 300;
  o.val = 30;
  o.test = 30;
  o.seed = 3;
  o.progress = false;
  const auto t0 = std::chrono::steady_clock::now();
  generate_listops(t.path.string(), o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("360 ListOps trees of 500-2000 tokens in " << seconds << " s");
  const LraSplit s = read_lra_split(LraTask::listops, t.path.string(), "train");
  REQUIRE(s.examples.size() == 300);
  std::vector<int> per_label(10, 0);
  for (const LraExample& ex : s.examples) {
    CHECK(ex.tokens.size() > 500);
    CHECK(ex.tokens.size() < 2000);
    CHECK(evaluate_listops(ex.tokens) == ex.label);
    ++per_label[static_cast<size_t>(ex.label)];
  }
  // Not one class: at least 5 of the 10 values occur.
  CHECK(std::count_if(per_label.begin(), per_label.end(), [](int n) { return n > 0; }) >= 5);
}

TEST_CASE("lra generate: ListOps bad options are clear errors") {
  TempDir t("lra_listops_bad");
  ListOpsOptions o = small_listops(1);
  o.max_len = o.min_len + 1;
  CHECK(error_of([&] { generate_listops(t.path.string(), o); }).find("min_len + 2 <= max_len") != std::string::npos);
  o = small_listops(1);
  o.max_depth = 3;
  o.max_args = 2;
  o.min_len = 100;
  o.max_len = 200;
  CHECK(error_of([&] { generate_listops(t.path.string(), o); }).find("at most") != std::string::npos);
  o = small_listops(1);
  o.val = 0;
  CHECK(error_of([&] { generate_listops(t.path.string(), o); }).find("must be > 0") != std::string::npos);
}

TEST_CASE("lra generate: Pathfinder round trip, balanced labels, layout, any thread count") {
  TempDir a("lra_pf_a"), b("lra_pf_b");
  generate_pathfinder(a.path.string(), small_pathfinder(1));
  generate_pathfinder(b.path.string(), small_pathfinder(3));
  const auto fa = all_files(a.path);
  CHECK(fa == all_files(b.path));
  CHECK(fa.count("curv_contour_length_14/split_sizes.txt") == 1);
  CHECK(fa.count("curv_contour_length_14/metadata/0.npy") == 1);
  CHECK(fa.count("curv_contour_length_14/imgs/0/sample_32.png") == 1);
  CHECK(fa.size() == 33 + 2);
  // A metadata line: folder, file name, number, label, settings.
  const std::string meta = fa.at("curv_contour_length_14/metadata/0.npy");
  CHECK(meta.rfind("imgs/0 sample_0.png 0 ", 0) == 0);

  for (const auto& [split, n] : std::vector<std::pair<std::string, int64_t>>{{"train", 20}, {"val", 6}, {"test", 7}}) {
    const LraSplit s = read_lra_split(LraTask::pathfinder, a.path.string(), split);
    REQUIRE(static_cast<int64_t>(s.examples.size()) == n);
    int64_t positives = 0;
    for (const LraExample& ex : s.examples) {
      positives += ex.label;
      REQUIRE(ex.tokens.size() == 1024);
      // Black background (token 1), white dots (token 256), some lines.
      const int64_t lit = std::count_if(ex.tokens.begin(), ex.tokens.end(), [](int32_t v) { return v > 1; });
      CHECK(lit > 60);
      CHECK(lit < 700);
      CHECK(*std::max_element(ex.tokens.begin(), ex.tokens.end()) == 256);
      CHECK(*std::min_element(ex.tokens.begin(), ex.tokens.end()) == 1);
    }
    CHECK(positives == n / 2);
  }
  // Another seed draws other images.
  TempDir c("lra_pf_c");
  PathfinderOptions other = small_pathfinder(2);
  other.seed = 6;
  generate_pathfinder(c.path.string(), other);
  CHECK(all_files(c.path).at("curv_contour_length_14/imgs/0/sample_0.png") !=
        fa.at("curv_contour_length_14/imgs/0/sample_0.png"));
}

TEST_CASE("lra generate: Pathfinder contour length and size options") {
  TempDir t("lra_pf_opts");
  PathfinderOptions o = small_pathfinder(2);
  o.contour_length = 6;
  o.size = 48;
  o.train = 4;
  o.val = 2;
  o.test = 2;
  generate_pathfinder(t.path.string(), o);
  CHECK(fs::is_directory(t.path / "curv_contour_length_6" / "metadata"));
  // The only curv_* folder is found; 48 x 48 images are 2304 pixels, cut to max_len.
  CHECK(read_lra_split(LraTask::pathfinder, t.path.string(), "train").examples[0].tokens.size() == 1024);
  const LraSplit s = read_lra_split(LraTask::pathfinder, t.path.string(), "val", 48 * 48);
  REQUIRE(s.examples.size() == 2);
  CHECK(s.examples[0].tokens.size() == 48 * 48);
  CHECK(s.examples[0].label + s.examples[1].label == 1);

  o.size = 8;
  CHECK(error_of([&] { generate_pathfinder(t.path.string(), o); }).find("size must be in 16..512") != std::string::npos);
  o.size = 32;
  o.contour_length = 0;
  CHECK(error_of([&] { generate_pathfinder(t.path.string(), o); }).find("contour_length") != std::string::npos);
}
