// Task metrics (train/task_metrics.h) against hand-computed values; the arithmetic is in the comments.
#include <doctest/doctest.h>

#include <cmath>

#include "tests/op_table.h"
#include "train/task_metrics.h"

using namespace hh;
using namespace hh::train;

namespace {
const std::vector<int64_t> kPred = {1, 0, 1, 1, 0};
const std::vector<int64_t> kLabel = {1, 1, 1, 0, 0};
}  // namespace

TEST_CASE("task metrics: accuracy and binary F1") {
  // Hits at positions 0, 2, 4: 3 / 5.
  CHECK(accuracy(kPred, kLabel) == doctest::Approx(0.6).epsilon(1e-15));
  // Class 1: TP = {0, 2} = 2, FP = {3} = 1, FN = {1} = 1 -> 2·2 / (4 + 1 + 1) = 2/3.
  CHECK(f1_binary(kPred, kLabel) == doctest::Approx(2.0 / 3.0).epsilon(1e-15));
  // Class 0: TP = {4} = 1, FP = {1} = 1, FN = {3} = 1 -> 2 / (2 + 1 + 1) = 1/2.
  CHECK(f1_binary(kPred, kLabel, 0) == doctest::Approx(0.5).epsilon(1e-15));
  // No positive predicted and none true: 0/0 -> 0 (sklearn zero_division=0).
  CHECK(f1_binary({0, 0, 0}, {0, 0, 0}) == 0.0);
  // No positive predicted, one true: TP = 0, FN = 1 -> 0.
  CHECK(f1_binary({0, 0}, {1, 0}) == 0.0);
  CHECK(f1_binary({1, 1}, {1, 1}) == 1.0);
}

TEST_CASE("task metrics: Matthews correlation, binary and 3-class") {
  // Binary: t = (class 0: 2, class 1: 3), p = (2, 3), correct = 3, n = 5.
  // (3·5 − (2·2 + 3·3)) / sqrt((25 − 13)(25 − 13)) = 2 / 12 = 1/6; the 2x2 formula agrees:
  // TP 2, TN 1, FP 1, FN 1 -> (2·1 − 1·1) / sqrt(3·3·2·2) = 1/6.
  CHECK(matthews_corrcoef(kPred, kLabel) == doctest::Approx(1.0 / 6.0).epsilon(1e-14));
  // 3 classes: label {0,0,1,1,2,2}, pred {0,1,1,1,2,0}. Correct at 0, 2, 3, 4 -> 4; n = 6;
  // t = (2, 2, 2), p = (2, 3, 1): Σ t·p = 4 + 6 + 2 = 12, Σ p² = 14, Σ t² = 12.
  // (4·6 − 12) / sqrt((36 − 14)(36 − 12)) = 12 / sqrt(528) = 0.52223296786709...
  CHECK(matthews_corrcoef({0, 1, 1, 1, 2, 0}, {0, 0, 1, 1, 2, 2}) ==
        doctest::Approx(12.0 / std::sqrt(528.0)).epsilon(1e-14));
  CHECK(matthews_corrcoef({0, 1, 2}, {0, 1, 2}) == doctest::Approx(1.0));
  CHECK(matthews_corrcoef({1, 0, 1, 0}, {0, 1, 0, 1}) == doctest::Approx(-1.0));
  // Constant prediction: Σ p² = n², the denominator is 0 -> 0 (sklearn).
  CHECK(matthews_corrcoef({1, 1, 1, 1}, {0, 1, 0, 1}) == 0.0);
  // Labels that are not 0..K-1 are just class ids.
  CHECK(matthews_corrcoef({7, -3, 7}, {7, -3, -3}) == doctest::Approx(matthews_corrcoef({1, 0, 1}, {1, 0, 0})));
}

TEST_CASE("task metrics: Pearson and Spearman (ties get average ranks)") {
  // x {1,2,3,4}, y {2,4,5,9}: dx {-1.5,-.5,.5,1.5}, dy {-3,-1,0,4};
  // Σdxdy = 4.5 + .5 + 0 + 6 = 11, Σdx² = 5, Σdy² = 26 -> 11 / sqrt(130) = 0.96476382...
  CHECK(pearson({1, 2, 3, 4}, {2, 4, 5, 9}) == doctest::Approx(11.0 / std::sqrt(130.0)).epsilon(1e-14));
  CHECK(pearson({1, 2, 3}, {3, 2, 1}) == doctest::Approx(-1.0));
  // Ranks of {3,1,3,3,2}: 1 -> 1, 2 -> 2, the three 3s share ranks 3,4,5 -> 4.
  CHECK(average_ranks({3, 1, 3, 3, 2}) == std::vector<double>{4, 1, 4, 4, 2});
  // x {1,2,2,3} -> ranks {1, 2.5, 2.5, 4}; y {1,3,2,4} -> ranks {1,3,2,4}. Both mean 2.5;
  // dx {-1.5,0,0,1.5}, dy {-1.5,.5,-.5,1.5}: Σdxdy = 4.5, Σdx² = 4.5, Σdy² = 5 -> 4.5/sqrt(22.5) = 3/sqrt(10).
  CHECK(spearman({1, 2, 2, 3}, {1, 3, 2, 4}) == doctest::Approx(3.0 / std::sqrt(10.0)).epsilon(1e-14));
  // Monotone but not linear: Spearman 1, Pearson below 1.
  std::vector<double> x = {1, 2, 3, 4, 5}, cube = {1, 8, 27, 64, 125};
  CHECK(spearman(x, cube) == doctest::Approx(1.0));
  CHECK(pearson(x, cube) < 0.99);
  // Constant input: undefined (scipy: NaN); we return 0, as documented.
  CHECK(pearson({2, 2, 2}, {1, 2, 3}) == 0.0);
  CHECK(spearman({1, 2, 3}, {5, 5, 5}) == 0.0);
}

TEST_CASE("task metrics: glue_metrics by name and by task") {
  std::vector<double> p(kPred.begin(), kPred.end()), l(kLabel.begin(), kLabel.end());
  auto m = glue_metrics({"accuracy", "f1"}, p, l);
  REQUIRE(m.size() == 2);
  CHECK(m[0].first == "accuracy");
  CHECK(m[0].second == doctest::Approx(0.6));
  CHECK(m[1].first == "f1");
  CHECK(m[1].second == doctest::Approx(2.0 / 3.0));
  CHECK(glue_metrics({"mcc"}, p, l)[0].second == doctest::Approx(1.0 / 6.0));
  auto corr = glue_metrics({"pearson", "spearman"}, {1, 2, 3, 4}, {2, 4, 5, 9});
  CHECK(corr[0].second == doctest::Approx(11.0 / std::sqrt(130.0)));
  CHECK(corr[1].second == doctest::Approx(1.0));  // y is increasing too
  CHECK(glue_task_metrics("cola") == std::vector<std::string>{"mcc"});
  CHECK(glue_task_metrics("mrpc") == std::vector<std::string>{"accuracy", "f1"});
  CHECK(glue_task_metrics("stsb") == std::vector<std::string>{"pearson", "spearman"});
  CHECK(glue_task_metrics("rte") == std::vector<std::string>{"accuracy"});
  hh::test::check_throws([&] { glue_metrics({"auc"}, p, l); }, {"glue_metrics", "unknown metric 'auc'", "mcc"});
  hh::test::check_throws([&] { glue_metrics({"accuracy"}, {0.5, 1}, {0, 1}); },
                         {"glue_metrics", "predictions[0] = 0.5", "not a class id"});
  hh::test::check_throws([&] { glue_task_metrics("squad"); }, {"glue_task_metrics", "squad", "cola"});
}

TEST_CASE("task metrics: bad input names the function") {
  hh::test::check_throws([&] { accuracy({}, {}); }, {"accuracy", "empty"});
  hh::test::check_throws([&] { f1_binary({1}, {1, 0}); }, {"f1_binary", "different sizes (1 and 2)"});
  hh::test::check_throws([&] { matthews_corrcoef({1, 0}, {1}); }, {"matthews_corrcoef", "different sizes"});
  hh::test::check_throws([&] { pearson({1}, {2}); }, {"pearson", "at least 2"});
  hh::test::check_throws([&] { pearson({1, NAN}, {2, 3}); }, {"pearson", "x[1]", "not finite"});
  hh::test::check_throws([&] { spearman({1, 2}, {2, INFINITY}); }, {"spearman", "y[1]", "not finite"});
  hh::test::check_throws([&] { rouge_corpus({"a"}, {}); }, {"rouge_corpus", "different sizes"});
  hh::test::check_throws([&] { rouge_corpus({}, {}); }, {"rouge_corpus", "empty"});
}

TEST_CASE("task metrics: ROUGE tokenizer as rouge_score's") {
  // Lower-case, every run of non-[a-z0-9] is a separator (punctuation, apostrophes, UTF-8 bytes).
  CHECK(rouge_tokenize("Hello, World! It's 2024... naïve") ==
        std::vector<std::string>{"hello", "world", "it", "s", "2024", "na", "ve"});
  CHECK(rouge_tokenize("  \t\n!!! ").empty());
  CHECK(rouge_tokenize("A_B-c") == std::vector<std::string>{"a", "b", "c"});
}

TEST_CASE("task metrics: ROUGE-1/2/L on sentence pairs") {
  auto approx = [](double v) { return doctest::Approx(v).epsilon(1e-14); };
  // pred: the cat sat on the mat (6 tokens); ref: the cat is on the mat (6).
  // Unigrams: the min(2,2) + cat + on + mat = 5 -> P = R = F = 5/6.
  // Bigrams (5 each): the-cat, on-the, the-mat shared = 3 -> 3/5.
  // LCS: the cat on the mat = 5 -> 5/6.
  Rouge a = rouge("The cat sat on the mat.", "the cat is on the mat");
  CHECK(a.rouge1.f1 == approx(5.0 / 6.0));
  CHECK(a.rouge2.precision == approx(0.6));
  CHECK(a.rouge2.f1 == approx(0.6));
  CHECK(a.rougeL.f1 == approx(5.0 / 6.0));

  // Precision is over the prediction, recall over the reference.
  // pred: the fox jumps over a dog quickly (7); ref: the quick brown fox jumps over the lazy dog (9).
  // Unigrams: the min(1,2)=1, fox, jumps, over, dog -> 5: P = 5/7, R = 5/9, F = 2·5/(7+9) = 0.625.
  // Bigrams: pred 6, ref 8, shared fox-jumps, jumps-over = 2: P = 1/3, R = 1/4, F = 4/14 = 2/7.
  // LCS: the fox jumps over dog = 5 ("quickly" is not "quick"): as ROUGE-1.
  Rouge b = rouge("the fox jumps over a dog quickly", "The quick brown fox jumps over the lazy dog");
  CHECK(b.rouge1.precision == approx(5.0 / 7.0));
  CHECK(b.rouge1.recall == approx(5.0 / 9.0));
  CHECK(b.rouge1.f1 == approx(0.625));
  CHECK(b.rouge2.precision == approx(1.0 / 3.0));
  CHECK(b.rouge2.recall == approx(0.25));
  CHECK(b.rouge2.f1 == approx(2.0 / 7.0));
  CHECK(b.rougeL.precision == approx(5.0 / 7.0));
  CHECK(b.rougeL.recall == approx(5.0 / 9.0));

  // Order matters for ROUGE-2 and ROUGE-L only: pred "cat the sat", ref "the cat sat".
  // Unigrams 3/3; bigrams cat-the, the-sat vs the-cat, cat-sat: none; LCS "the sat" or "cat sat" = 2 -> 2/3.
  Rouge c = rouge("cat the sat", "the cat sat");
  CHECK(c.rouge1.f1 == approx(1.0));
  CHECK(c.rouge2.f1 == 0.0);
  CHECK(c.rougeL.f1 == approx(2.0 / 3.0));

  // Clipped counts: pred "the the the the", ref "the cat": unigram matches min(4,1) = 1:
  // P = 1/4, R = 1/2, F = 2·1/(4+2) = 1/3. LCS = 1: the same.
  Rouge d = rouge("the the the the", "the cat");
  CHECK(d.rouge1.precision == approx(0.25));
  CHECK(d.rouge1.f1 == approx(1.0 / 3.0));
  CHECK(d.rouge2.f1 == 0.0);
  CHECK(d.rougeL.f1 == approx(1.0 / 3.0));

  // No tokens on either side -> 0; one token each -> no bigrams -> ROUGE-2 is 0 (rouge_score
  // divides by max(count, 1)).
  Rouge e = rouge("...", "a reference");
  CHECK(e.rouge1.f1 == 0.0);
  CHECK(e.rougeL.f1 == 0.0);
  CHECK(rouge("a reference", "").rougeL.recall == 0.0);
  Rouge f = rouge("Hello", "hello!");
  CHECK(f.rouge1.f1 == 1.0);
  CHECK(f.rouge2.f1 == 0.0);
  CHECK(f.rougeL.f1 == 1.0);

  // Corpus: the mean of the per-example scores of pairs a and c.
  // ROUGE-1 (5/6 + 1)/2 = 11/12, ROUGE-2 (0.6 + 0)/2 = 0.3, ROUGE-L (5/6 + 2/3)/2 = 0.75.
  Rouge corpus = rouge_corpus({"The cat sat on the mat.", "cat the sat"}, {"the cat is on the mat", "the cat sat"});
  CHECK(corpus.rouge1.f1 == approx(11.0 / 12.0));
  CHECK(corpus.rouge2.f1 == approx(0.3));
  CHECK(corpus.rougeL.f1 == approx(0.75));
}
