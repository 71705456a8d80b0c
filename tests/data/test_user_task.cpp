// A task in the user's own files (data/user_task): TSV and JSONL, classes and regression, and the
// errors that name the file and line.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "data/user_task.h"
#include "tests/op_table.h"
#include "tests/temp_dir.h"

using namespace hh;

namespace {
const std::string kFixtures = std::string(HH_SOURCE_DIR) + "/tests/fixtures/user_task";
}

TEST_CASE("user task: a TSV classification task, classes in sorted order, extra columns ignored") {
  const data::UserTask u = data::read_user_task(kFixtures + "/tsv");
  CHECK(u.task.name == "custom");
  CHECK(u.task.num_labels == 3);
  CHECK(!u.task.pair);
  CHECK(u.task.label_names == std::vector<std::string>{"negative", "neutral", "positive"});
  CHECK(u.task.metrics == std::vector<std::string>{"accuracy"});
  REQUIRE(u.train.size() == 50);
  CHECK(u.train[0].text_a == "a fine movie");
  CHECK(u.train[0].label == 2);
  CHECK(u.dev.size() == 9);
}

TEST_CASE("user task: a JSONL pair task with fractional labels is a regression") {
  const data::UserTask u = data::read_user_task(kFixtures + "/jsonl");
  CHECK(u.task.num_labels == 1);
  CHECK(u.task.pair);
  CHECK(u.task.metrics == std::vector<std::string>{"pearson", "spearman"});
  CHECK(u.train[0].text_b == "a weak story");
  CHECK(std::fabs(u.train[0].score - 0.20135938604021575) < 1e-15);
}

TEST_CASE("user task: integer labels are classes in numeric order; binary tasks add F1") {
  hh::test::TempDir d("user_task_int");
  d.write("train.jsonl", "{\"text\": \"a\", \"label\": 10}\n{\"text\": \"b\", \"label\": 2}\n\n{\"text\": \"c\", \"label\": 10}\n");
  d.write("dev.jsonl", "{\"text\": \"d\", \"label\": 2}\n");
  const data::UserTask u = data::read_user_task(d.path.string());
  CHECK(u.task.label_names == std::vector<std::string>{"2", "10"});
  CHECK(u.task.metrics == std::vector<std::string>{"accuracy", "f1"});
  CHECK(u.train[0].label == 1);
  CHECK(u.dev[0].label == 0);
}

TEST_CASE("user task: errors name the file and the line") {
  hh::test::TempDir d("user_task_bad");
  const std::string dir = d.path.string();
  auto both = [&](const std::string& train, const std::string& dev) {
    d.write("train.tsv", train);
    d.write("dev.tsv", dev);
  };
  const std::string ok = "text\tlabel\nx\tA\ny\tB\n";
  both("sentence\tlabel\nx\tA\n", ok);
  hh::test::check_throws([&] { data::read_user_task(dir); }, {"train.tsv:1", "\"text\" and \"label\""});
  both("text\tlabel\nx\tA\ny\tB\tC\n", ok);
  hh::test::check_throws([&] { data::read_user_task(dir); }, {"train.tsv:3", "3 tab-separated fields", "has 2"});
  both(ok, "text\tlabel\nz\tC\n");
  hh::test::check_throws([&] { data::read_user_task(dir); }, {"dev.tsv:2", "'C'", "not one of train's classes"});
  both("text\tlabel\nx\tA\ny\tA\n", ok);
  hh::test::check_throws([&] { data::read_user_task(dir); }, {"train.tsv", "one class only"});
  both("text\tlabel\n", ok);
  hh::test::check_throws([&] { data::read_user_task(dir); }, {"train.tsv", "no examples"});
  both("text\tlabel\nx\t0.5\ny\t1.5\n", "text\tlabel\nz\tmuch\n");
  hh::test::check_throws([&] { data::read_user_task(dir); }, {"dev.tsv:2", "'much'", "regression"});
  d.write("train.jsonl", "{\"text\": \"a\", \"label\": 1}\n");
  hh::test::check_throws([&] { data::read_user_task(dir); }, {"train.tsv and train.jsonl", "both"});
  hh::test::TempDir j("user_task_jsonl_bad");
  j.write("train.jsonl", "{\"text\": \"a\", \"label\": 1}\n{\"text\": \"b\", \"text_pair\": \"c\", \"label\": 2}\n");
  j.write("dev.jsonl", "{\"text\": \"a\", \"label\": 1}\n");
  hh::test::check_throws([&] { data::read_user_task(j.path.string()); }, {"train.jsonl:2", "text_pair"});
  j.write("train.jsonl", "{\"text\": \"a\", \"label\": true}\n");
  hh::test::check_throws([&] { data::read_user_task(j.path.string()); }, {"train.jsonl:1", "\"label\""});
  j.write("train.jsonl", "[1, 2]\n");
  hh::test::check_throws([&] { data::read_user_task(j.path.string()); }, {"train.jsonl:1", "JSON object"});
  hh::test::check_throws([] { data::read_user_task("/nonexistent/task"); }, {"/nonexistent/task", "not a folder"});
}

// Issue 36: an invalid UTF-8 byte (nlohmann's type_error.316 with no file or line, at the end) and a
// label that reads as a non-finite number (one "nan" among fractions made a 4-class task) are
// errors naming the file and the line.
TEST_CASE("user task: invalid UTF-8 and non-finite labels are errors naming the file and the line") {
  hh::test::TempDir d("user_task_hostile");
  const std::string dir = d.path.string();
  d.write("dev.tsv", "text\tlabel\nz\t0.5\n");
  d.write("train.tsv", "text\tlabel\nx\t0.5\ny\tgo\xff\n");
  hh::test::check_throws([&] { data::read_user_task(dir); }, {"train.tsv:3", "invalid UTF-8", "byte 5"});
  d.write("train.tsv", "text\tlabel\nx\t0.5\n\xc3\x28\t1.5\n");
  hh::test::check_throws([&] { data::read_user_task(dir); }, {"train.tsv:3", "invalid UTF-8", "byte 1"});
  for (const char* bad : {"nan", "NaN", "inf", "-Infinity", "1e999"}) {
    CAPTURE(bad);
    d.write("train.tsv", std::string("text\tlabel\nx\t0.5\ny\t1.25\nz\t") + bad + "\n");
    hh::test::check_throws([&] { data::read_user_task(dir); }, {"train.tsv:4", "not a finite number"});
  }
  d.write("train.tsv", "text\tlabel\nx\t0.5\ny\t1.25\n");
  d.write("dev.tsv", "text\tlabel\nz\tnan\n");
  hh::test::check_throws([&] { data::read_user_task(dir); }, {"dev.tsv:2", "not a finite number"});
  hh::test::TempDir j("user_task_hostile_jsonl");
  j.write("dev.jsonl", "{\"text\": \"a\", \"label\": 0.5}\n");
  j.write("train.jsonl", "{\"text\": \"a\", \"label\": 0.5}\n{\"text\": \"b\", \"label\": \"inf\"}\n");
  hh::test::check_throws([&] { data::read_user_task(j.path.string()); }, {"train.jsonl:2", "not a finite number"});
  j.write("train.jsonl", "{\"text\": \"a\", \"label\": 0.5}\n{\"text\": \"b\xff\", \"label\": 1.5}\n");
  hh::test::check_throws([&] { data::read_user_task(j.path.string()); }, {"train.jsonl:2", "invalid UTF-8"});
}

// Issue 36: the classes are found in time linear in the rows (a search per row was quadratic: 125 s
// at 100k labels), and more than kMaxUserClasses is an error naming the file and the count.
TEST_CASE("user task: many classes are read quickly; more than kMaxUserClasses is refused") {
  hh::test::TempDir d("user_task_classes");
  auto labels = [&](int64_t n) {
    std::string t = "text\tlabel\n";
    for (int64_t i = 0; i < n; ++i) t += "x\tc" + std::to_string(i) + "\n";
    return t;
  };
  d.write("dev.tsv", "text\tlabel\nz\tc1\n");
  d.write("train.tsv", labels(data::kMaxUserClasses));
  const data::UserTask u = data::read_user_task(d.path.string());
  CHECK(u.task.num_labels == data::kMaxUserClasses);
  CHECK(u.task.label_names.front() == "c0");
  d.write("train.tsv", labels(data::kMaxUserClasses + 1));
  hh::test::check_throws([&] { data::read_user_task(d.path.string()); },
                         {"train.tsv", "10001 distinct labels", "more than the 10000 classes"});
}
