// The word-order task of the offline conversion demo: word splitting, vocabulary, labels and splits.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "data/word_order.h"

using namespace hh;
namespace fs = std::filesystem;

TEST_CASE("word order: words, vocabulary, labels and splits") {
  CHECK(data::split_words("The GPL's 3rd (v3) -- license.") ==
        std::vector<std::string>{"the", "gpl", "s", "3rd", "v3", "license"});
  const fs::path dir = fs::temp_directory_path() / ("hh_test_word_order_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream a(dir / "a.txt");
    for (int i = 0; i < 60; ++i) a << "alpha beta gamma delta word" << i % 7 << " epsilon\n";
  }
  fs::create_symlink(dir / "a.txt", dir / "b.txt");  // a duplicate through a link is read once
  const auto files = data::text_files_in(dir.string());
  REQUIRE(files.size() == 1);
  data::WordOrderConfig cfg;
  cfg.window = 6;
  cfg.seed = 1;
  data::WordOrderData d = data::make_word_order(files, cfg);
  CHECK(d.words == 360);
  CHECK(d.train.ids.size(0) + d.val.ids.size(0) + d.test.ids.size(0) == 60);
  CHECK(d.val.ids.size(0) == 6);
  CHECK(d.train.ids.size(1) == 7);
  CHECK(d.vocab[2] == "[CLS]");
  CHECK(std::find(d.vocab.begin(), d.vocab.end(), "alpha") != d.vocab.end());
  // Label 1 rows keep the text's order; label 0 rows hold the same words in another order.
  auto ids = to_vector<int64_t>(d.train.ids);
  auto labels = to_vector<int64_t>(d.train.labels);
  auto id_of = [&](const std::string& w) {
    return static_cast<int64_t>(std::find(d.vocab.begin(), d.vocab.end(), w) - d.vocab.begin());
  };
  int64_t shuffled = 0;
  for (size_t r = 0; r < labels.size(); ++r) {
    // Window r is line r of the text.
    const std::vector<int64_t> orig = {id_of("alpha"), id_of("beta"),  id_of("gamma"),
                                       id_of("delta"), id_of("word" + std::to_string(r % 7)), id_of("epsilon")};
    std::vector<int64_t> w(ids.begin() + static_cast<long>(r * 7 + 1), ids.begin() + static_cast<long>(r * 7 + 7));
    CHECK(ids[r * 7] == 2);
    if (labels[r] == 1) {
      CHECK(w == orig);
    } else {
      CHECK(w != orig);
      ++shuffled;
    }
    std::sort(w.begin(), w.end());
    std::vector<int64_t> o = orig;
    std::sort(o.begin(), o.end());
    CHECK(w == o);  // the same words either way
  }
  CHECK(shuffled > 10);
  CHECK(shuffled < 38);
  // Overlapping training windows: every 2 words over the 48 training windows' 288 words.
  cfg.train_stride = 2;
  data::WordOrderData o = data::make_word_order(files, cfg);
  CHECK(o.train.ids.size(0) == (288 - 6) / 2 + 1);
  CHECK(o.val.ids.size(0) == 6);
  CHECK_THROWS_WITH_AS(data::make_word_order({(dir / "missing.txt").string()}, cfg), doctest::Contains("missing.txt"),
                       Error);
  cfg.window = 100;
  CHECK_THROWS_WITH_AS(data::make_word_order(files, cfg), doctest::Contains("too few"), Error);
  fs::remove_all(dir);
}
