// GLUE TSV reader (data/glue.h): small files in the official layouts of the eight tasks, read field
// by field, and malformed ones whose errors must name the file and the line.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/temp_dir.h"
#include "data/glue.h"

using namespace hh;
using namespace hh::data;
namespace fs = std::filesystem;

namespace {

using TempDir = test::TempDir;

// The message read_glue(task, a file holding `text`) fails with ("" when it reads).
std::string read_error(const std::string& task, const std::string& text, const std::string& name = "train.tsv") {
  TempDir dir("glue");
  try {
    read_glue(glue_task(task), dir.write(name, text));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const std::string kMnliTrainHeader =
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
    "sentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label\n";
const std::string kMnliDevHeader =
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
    "sentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n";
const std::string kStsbHeader =
    "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n";

}  // namespace

TEST_CASE("glue: task names, metrics and labels") {
  CHECK(glue_task("sst2").name == "SST-2");
  CHECK(glue_task("SST-2").name == "SST-2");
  CHECK(glue_task("Sts_B").name == "STS-B");
  CHECK(glue_task("cola").metrics == std::vector<std::string>{"matthews_corr"});
  CHECK(glue_task("mrpc").metrics == std::vector<std::string>{"accuracy", "f1"});
  CHECK(glue_task("stsb").metrics == std::vector<std::string>{"pearson", "spearman"});
  CHECK(glue_task("stsb").num_labels == 1);
  CHECK(glue_task("mnli").num_labels == 3);
  CHECK(glue_task("mnli").label_names == std::vector<std::string>{"entailment", "neutral", "contradiction"});
  CHECK(glue_task("rte").label_names == std::vector<std::string>{"entailment", "not_entailment"});
  CHECK_FALSE(glue_task("CoLA").pair);
  CHECK_FALSE(glue_task("sst-2").pair);
  CHECK(glue_task("qqp").pair);
  CHECK(glue_tasks().size() == 8);
  CHECK_THROWS_WITH_AS(glue_task("wnli"), doctest::Contains("unknown task 'wnli' (valid: CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE)"),
                       Error);
}

TEST_CASE("glue: CoLA has no header; quotes are literal text") {
  TempDir dir("glue");
  dir.write("train.tsv",
            "gj04\t1\t\tOur friends won't buy this analysis, let alone the next one we propose.\n"
            "gj04\t0\t*\tThe \"sailor\" 'left\n"
            "clc95\t1\t\t\"Quoted, with\ttab\"\n");
  // The third row has a tab inside the quotes: quotes are not CSV quoting, so it is 5 fields.
  CHECK_THROWS_WITH_AS(read_glue(glue_task("cola"), dir.file("train.tsv")),
                       doctest::Contains("train.tsv:3: has 5 tab-separated fields, expected 4"), Error);
  dir.write("train.tsv",
            "gj04\t1\t\tOur friends won't buy this analysis, let alone the next one we propose.\n"
            "gj04\t0\t*\tThe \"sailor\" 'left\n");
  const auto ex = read_glue(glue_task("cola"), dir.file("train.tsv"));
  REQUIRE(ex.size() == 2);
  CHECK(ex[0].text_a == "Our friends won't buy this analysis, let alone the next one we propose.");
  CHECK(ex[0].text_b.empty());
  CHECK(ex[0].label == 1);
  CHECK(ex[0].score == 1.0);
  CHECK(ex[1].text_a == "The \"sailor\" 'left");
  CHECK(ex[1].label == 0);
}

TEST_CASE("glue: SST-2, MRPC, QQP, QNLI and RTE columns and labels") {
  TempDir dir("glue");
  auto sst = read_glue(glue_task("sst2"),
                       dir.write("sst.tsv", "sentence\tlabel\nhide new secretions \t0\n\"the greatest\" film \t1\n"));
  REQUIRE(sst.size() == 2);
  CHECK(sst[0].text_a == "hide new secretions ");
  CHECK(sst[0].label == 0);
  CHECK(sst[1].text_a == "\"the greatest\" film ");
  CHECK(sst[1].label == 1);

  auto mrpc = read_glue(glue_task("MRPC"), dir.write("mrpc.tsv",
                                                      "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                                                      "1\t702876\t702977\tAmrozi accused his brother .\tHe accused \"him\" .\n"
                                                      "0\t2108705\t2108831\tYucaipa owned Dominick 's .\tIt sold it .\n"));
  REQUIRE(mrpc.size() == 2);
  CHECK(mrpc[0].text_a == "Amrozi accused his brother .");
  CHECK(mrpc[0].text_b == "He accused \"him\" .");
  CHECK(mrpc[0].label == 1);
  CHECK(mrpc[1].label == 0);
  CHECK(mrpc[1].text_b == "It sold it .");

  auto qqp = read_glue(glue_task("qqp"), dir.write("qqp.tsv",
                                                    "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                                                    "133273\t213221\t213222\tHow is the life?\tWhat is life?\t0\n"
                                                    "5\t11\t12\tWhy?\t\t1\n"));
  REQUIRE(qqp.size() == 2);
  CHECK(qqp[0].text_a == "How is the life?");
  CHECK(qqp[0].text_b == "What is life?");
  CHECK(qqp[0].label == 0);
  CHECK(qqp[1].text_b.empty());  // an empty field is a field
  CHECK(qqp[1].label == 1);

  auto qnli = read_glue(glue_task("QNLI"), dir.write("qnli.tsv",
                                                      "index\tquestion\tsentence\tlabel\n"
                                                      "0\tWhat came into force?\tThe law came.\tentailment\n"
                                                      "1\tWho?\tNobody.\tnot_entailment\n"));
  REQUIRE(qnli.size() == 2);
  CHECK(qnli[0].text_a == "What came into force?");
  CHECK(qnli[0].text_b == "The law came.");
  CHECK(qnli[0].label == 0);
  CHECK(qnli[1].label == 1);

  auto rte = read_glue(glue_task("rte"), dir.write("rte.tsv",
                                                    "index\tsentence1\tsentence2\tlabel\n"
                                                    "0\tNo weapons.\tWeapons found.\tnot_entailment\n"));
  REQUIRE(rte.size() == 1);
  CHECK(rte[0].text_a == "No weapons.");
  CHECK(rte[0].text_b == "Weapons found.");
  CHECK(rte[0].label == 1);
}

TEST_CASE("glue: STS-B scores and MNLI train/dev (label in the last column)") {
  TempDir dir("glue");
  auto sts = read_glue(glue_task("sts-b"), dir.write("sts.tsv", kStsbHeader +
                                                                    "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking off.\tAn air plane is taking off.\t5.000\n"
                                                                    "1\tmain-news\tx\t2012\t0002\tnone\tnone\tA man\tA woman\t0.25\n"));
  REQUIRE(sts.size() == 2);
  CHECK(sts[0].text_a == "A plane is taking off.");
  CHECK(sts[0].text_b == "An air plane is taking off.");
  CHECK(sts[0].score == 5.0);
  CHECK(sts[0].label == 0);
  CHECK(sts[1].score == 0.25);

  const std::string parses = "(x)\t(y)\t(ROOT x)\t(ROOT y)\t";
  auto train = read_glue(glue_task("mnli"), dir.write("train.tsv", kMnliTrainHeader +
                                                                        "0\t31193\t31193n\tgovernment\t" + parses +
                                                                        "Conceptually cream skimming.\tProduct and geography.\tneutral\tneutral\n"
                                                                        "1\t101457\t101457e\ttelephone\t" + parses +
                                                                        "you know\tYou lose the things.\tentailment\tentailment\n"));
  REQUIRE(train.size() == 2);
  CHECK(train[0].text_a == "Conceptually cream skimming.");
  CHECK(train[0].text_b == "Product and geography.");
  CHECK(train[0].label == 1);
  CHECK(train[1].label == 0);
  auto dev = read_glue(glue_task("mnli"), dir.write("dev_matched.tsv",
                                                     kMnliDevHeader + "0\t63735\t63735n\tslate\t" + parses +
                                                         "The new rights.\tEveryone loves them.\tneutral\tentailment\tneutral\tneutral\tneutral\tcontradiction\n"));
  REQUIRE(dev.size() == 1);
  CHECK(dev[0].text_b == "Everyone loves them.");
  CHECK(dev[0].label == 2);  // gold_label (last column), not label1
}

TEST_CASE("glue: a trailing CR and a leading BOM are dropped; max_examples stops early") {
  TempDir dir("glue");
  const std::string path = dir.write("sst.tsv", "\xEF\xBB\xBFsentence\tlabel\r\na\t1\r\nb\t0\r\nc\t1\r\n");
  auto all = read_glue(glue_task("sst2"), path);
  REQUIRE(all.size() == 3);
  CHECK(all[0].text_a == "a");
  CHECK(all[2].label == 1);
  auto two = read_glue(glue_task("sst2"), path, 2);
  REQUIRE(two.size() == 2);
  CHECK(two[1].text_a == "b");
  CHECK_THROWS_WITH_AS(read_glue(glue_task("sst2"), path, 0), doctest::Contains("max_examples"), Error);
}

TEST_CASE("glue: malformed files name the file and the line") {
  CHECK(contains(read_error("sst2", "sentence\tlabel\nfine\t1\nno label here\n"), "train.tsv:3: has 1 tab-separated fields, expected 2"));
  CHECK(contains(read_error("sst2", "sentence\tlabel\nfine\t1\nbad\t2\n"), "train.tsv:3: label '2' is not one of 0..1"));
  CHECK(contains(read_error("sst2", "sentence\tlabel\nfine\t1\n\nx\t0\n"), "train.tsv:3: has 1 tab-separated fields"));
  CHECK(contains(read_error("cola", "gj04\tx\t\tA sentence.\n"), "train.tsv:1: label 'x' is not one of 0..1"));
  CHECK(contains(read_error("cola", "gj04\t1\t\tA sentence.\ngj04\t1\tA sentence.\n"), "train.tsv:2: has 3 tab-separated fields, expected 4"));
  CHECK(contains(read_error("rte", "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tneutral\n"),
                 "train.tsv:2: label 'neutral' is not one of entailment, not_entailment"));
  CHECK(contains(read_error("mnli", kMnliTrainHeader + "0\t1\t1n\tg\tx\ty\tx\ty\ta\tb\tneutral\tNeutral\n"),
                 "train.tsv:2: label 'Neutral' is not one of entailment, neutral, contradiction"));
  CHECK(contains(read_error("stsb", kStsbHeader + "0\tg\tf\ty\t1\tn\tn\ta\tb\t5.5\n"), "train.tsv:2: score '5.5' is not a number in [0, 5]"));
  CHECK(contains(read_error("stsb", kStsbHeader + "0\tg\tf\ty\t1\tn\tn\ta\tb\tabc\n"), "train.tsv:2: score 'abc'"));
  CHECK(contains(read_error("stsb", kStsbHeader + "0\tg\tf\ty\t1\tn\tn\ta\tb\t\n"), "train.tsv:2: score ''"));
  // strtod reads hex floats, inf and nan; a GLUE score is decimal (issue 27: 0x1p1 was read as 2).
  for (const char* s : {"0x1p1", "0X2", "inf", "nan", " 1"})
    CHECK(contains(read_error("stsb", kStsbHeader + "0\tg\tf\ty\t1\tn\tn\ta\tb\t" + s + "\n"), "train.tsv:2: score '"));
  CHECK(contains(read_error("stsb", kStsbHeader + "0\tg\tf\ty\t1\tn\tn\ta\tb\t 1\n"), "train.tsv:2: score ' 1'"));
  CHECK(contains(read_error("qqp", ""), "train.tsv: the file is empty"));
  CHECK(contains(read_error("qqp", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"), "train.tsv: no examples"));
  // Test files (no labels) and files of another task are refused at the header.
  CHECK(contains(read_error("sst2", "index\tsentence\n0\tit 's a charming journey .\n", "test.tsv"),
                 "test.tsv:1: the header has no 'label' column"));
  CHECK(contains(read_error("rte", "index\tsentence1\tsentence2\n0\ta\tb\n", "test.tsv"), "GLUE test files have no labels"));
  CHECK(contains(read_error("cola", "index\tsentence\n0\tBill whistled past the house.\n", "test.tsv"),
                 "test.tsv:1: this is a GLUE test file"));
  CHECK(contains(read_error("rte", "index\tquestion\tsentence\tlabel\n0\ta\tb\tentailment\n"),
                 "train.tsv:1: expected column 2 of the header to be 'sentence1'"));
  // Missing or unreadable files name the path.
  TempDir dir("glue");
  CHECK_THROWS_WITH_AS(read_glue(glue_task("rte"), dir.file("nope.tsv")), doctest::Contains("nope.tsv: cannot open"), Error);
  CHECK_THROWS_WITH_AS(read_glue(glue_task("rte"), dir.path.string()), doctest::Contains("is a directory"), Error);
}

TEST_CASE("glue: skip_malformed skips and counts bad rows; the default refuses them") {
  TempDir dir("glue");
  const std::string path = dir.write("train.tsv",
                                     "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                                     "1\t1\t2\tA?\tB?\t0\n"
                                     "2\t3\t4\tHow do I\n"
                                     "5\t6\t7\tC?\tD?\t1\n"
                                     "8\t9\t10\tE?\tF?\tyes\n");
  CHECK_THROWS_WITH_AS(read_glue(glue_task("qqp"), path), doctest::Contains("train.tsv:3: has 4 tab-separated fields, expected 6"),
                       Error);
  GlueReadOptions opt;
  opt.skip_malformed = true;
  GlueReadStats stats;
  const auto ex = read_glue(glue_task("qqp"), path, opt, &stats);
  REQUIRE(ex.size() == 2);
  CHECK(ex[0].text_a == "A?");
  CHECK(ex[1].text_a == "C?");
  CHECK(ex[1].label == 1);
  CHECK(stats.lines == 4);
  CHECK(stats.skipped == 2);
  REQUIRE(stats.skipped_rows.size() == 2);
  CHECK(contains(stats.skipped_rows[0], "train.tsv:3:"));
  CHECK(contains(stats.skipped_rows[1], "train.tsv:5: label 'yes'"));
  // A file of nothing but malformed rows is still an error.
  const std::string bad = dir.write("bad.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n1\t2\n");
  CHECK_THROWS_WITH_AS(read_glue(glue_task("qqp"), bad, opt), doctest::Contains("no examples (all 1 rows malformed)"), Error);
}

TEST_CASE("glue: split paths are the official file names") {
  TempDir cola("glue");
  cola.write("train.tsv", "");
  cola.write("dev.tsv", "");
  CHECK(glue_split_path(glue_task("cola"), cola.path.string(), "train") == cola.file("train.tsv"));
  CHECK(glue_split_path(glue_task("cola"), cola.path.string(), "dev") == cola.file("dev.tsv"));
  CHECK_THROWS_WITH_AS(glue_split_path(glue_task("cola"), cola.path.string(), "dev_mismatched"),
                       doctest::Contains("only for MNLI"), Error);
  CHECK_THROWS_WITH_AS(glue_split_path(glue_task("cola"), cola.path.string(), "test"),
                       doctest::Contains("unknown split 'test' (valid: train, dev)"), Error);
  TempDir mnli("glue");
  for (const char* f : {"train.tsv", "dev_matched.tsv", "dev_mismatched.tsv"}) mnli.write(f, "");
  CHECK(glue_split_path(glue_task("mnli"), mnli.path.string(), "dev") == mnli.file("dev_matched.tsv"));
  CHECK(glue_split_path(glue_task("mnli"), mnli.path.string(), "dev_mismatched") == mnli.file("dev_mismatched.tsv"));
  TempDir empty("glue");
  CHECK_THROWS_WITH_AS(glue_split_path(glue_task("rte"), empty.path.string(), "train"),
                       doctest::Contains(("glue: RTE train: no file " + empty.file("train.tsv")).c_str()), Error);
}
