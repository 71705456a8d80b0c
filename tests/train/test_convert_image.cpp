// convert_vit's task (experiments/convert/convert_image): top-k accuracy on hand-computed cases, the data layouts
// and their errors, the class-count check, and stage 1 on a tiny ViT (only feature maps change,
// the distillation loss falls, the attention is bidirectional). Fixtures: tests/fixtures/vit, made
// by tools/make_vit_fixtures.py.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "nn/models/hf_model.h"
#include "experiments/convert/convert_image.h"

using namespace hh;
namespace fs = std::filesystem;

namespace {

const std::string kVit = std::string(HH_SOURCE_DIR) + "/tests/fixtures/vit";
const std::string kHf = std::string(HH_SOURCE_DIR) + "/tests/fixtures/hf";

std::string temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("hh_convert_image_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::map<std::string, std::vector<float>> values(const nn::Module& m) {
  std::map<std::string, std::vector<float>> v;
  for (auto& [name, t] : m.state_dict()) v[name] = to_vector<float>(t);
  return v;
}

// The CIFAR fixture and its 10-label ViT, split as convert_vit splits them.
struct CifarTask {
  train::ImageData data = train::read_image_data(kVit + "/cifar-tiny", 0.2, 0);
  train::ImageSplit train_split, val_split, test_split;
  CifarTask() {
    auto [tr, va] = train::hold_out(data.train_rows, 0.25, 1);
    train_split = {data.train, tr};
    val_split = {data.train, va};
    test_split = {data.test, data.test_rows};
  }
  std::unique_ptr<train::ImageConversionTask> task(const std::string& mixer) const {
    nn::HFModelOptions o;
    o.mixer = nn::parse_mixer(mixer, "test");
    o.seed = 3;
    auto m = std::dynamic_pointer_cast<nn::ViTForImageClassification>(nn::load_hf_model(kVit + "/vit-cifar-tiny", o));
    REQUIRE(m != nullptr);
    train::ImageTaskConfig tc;
    tc.batch = 8;
    tc.preprocess = train::vit_preprocess(kVit + "/vit-cifar-tiny", 32);
    return std::make_unique<train::ImageConversionTask>(m, train_split, val_split, test_split, tc);
  }
};

}  // namespace

TEST_CASE("convert_image: top-k accuracy on hand-computed cases") {
  // Row 0: label 2 is the largest (top-1 hit). Row 1: label 0 is 2nd (top-2 hit, top-1 miss).
  // Row 2: label 1 ties with class 0 and loses the tie (index order), so it is 2nd. Row 3: last.
  Tensor logits = from_vector(std::vector<float>{0.1f, 0.2f, 0.9f, 0.5f, 0.7f, 0.1f, 0.3f, 0.3f, 0.1f, 0.9f, 0.8f, 0.1f},
                              {4, 3});
  Tensor labels = from_vector(std::vector<int64_t>{2, 0, 1, 2}, {4});
  CHECK(train::topk_accuracy(logits, labels, 1) == doctest::Approx(0.25));
  CHECK(train::topk_accuracy(logits, labels, 2) == doctest::Approx(0.75));
  CHECK(train::topk_accuracy(logits, labels, 3) == doctest::Approx(1.0));
  CHECK(error_of([&] { train::topk_accuracy(logits, from_vector(std::vector<int64_t>{0, 1, 5, 0}, {4}), 1); })
            .find("label 5 of row 2") != std::string::npos);
}

TEST_CASE("convert_image: hold_out and cap_rows are seeded, disjoint and complete") {
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < 50; ++i) rows.push_back(100 + i);
  auto [kept, held] = train::hold_out(rows, 0.2, 7);
  CHECK(kept.size() == 40);
  CHECK(held.size() == 10);
  std::set<int64_t> all(kept.begin(), kept.end());
  all.insert(held.begin(), held.end());
  CHECK(all.size() == 50);
  CHECK(std::is_sorted(kept.begin(), kept.end()));
  CHECK(train::hold_out(rows, 0.2, 7).second == held);
  CHECK(train::hold_out(rows, 0.2, 8).second != held);
  CHECK(train::hold_out({1, 2, 3}, 0.01, 0).second.size() == 1);  // a positive fraction holds out one row
  std::vector<int64_t> capped = train::cap_rows(rows, 5, 3);
  CHECK(capped.size() == 5);
  CHECK(std::is_sorted(capped.begin(), capped.end()));
  CHECK(capped != std::vector<int64_t>{100, 101, 102, 103, 104});  // a random choice, not the first rows
  CHECK(train::cap_rows(rows, 0, 3) == rows);
}

TEST_CASE("convert_image: the data layouts are detected and read") {
  train::ImageData c = train::read_image_data(kVit + "/cifar-tiny", 0.2, 0);
  CHECK(c.layout == "cifar10");
  CHECK(c.train->size() == 32);
  CHECK(c.test->size() == 12);
  CHECK(c.train->classes.size() == 10);
  CHECK(c.train->classes[9] == "truck");
  CHECK(c.train->labels[13] == 3);  // the fixture's label i % 10
  train::ImageData f = train::read_image_data(kVit + "/folders-tiny", 0.2, 0);
  CHECK(f.layout == "folders");
  CHECK(f.train->size() == 20);
  CHECK(f.test->size() == 10);
  CHECK(f.train->classes == std::vector<std::string>{"LABEL_0", "LABEL_1", "LABEL_2", "LABEL_3", "LABEL_4"});
  train::ImageData one = train::read_image_data(kVit + "/folders-tiny/train", 0.25, 0);
  CHECK(one.layout == "folder");
  CHECK(one.train == one.test);
  CHECK(one.train_rows.size() == 15);
  CHECK(one.test_rows.size() == 5);
}

TEST_CASE("convert_image: bad data folders give errors naming the file") {
  CHECK(error_of([] { train::read_image_data("/nonexistent/hh_images", 0.2, 0); }).find("/nonexistent/hh_images") !=
        std::string::npos);
  const std::string d = temp_dir("bad");
  fs::copy_file(kVit + "/cifar-tiny/data_batch_1.bin", d + "/data_batch_1.bin");
  CHECK(error_of([&] { train::read_image_data(d, 0.2, 0); }).find("test_batch.bin") != std::string::npos);
  {
    std::ofstream bad(d + "/test_batch.bin", std::ios::binary);
    bad << "not a cifar record";
  }
  const std::string e = error_of([&] { train::read_image_data(d, 0.2, 0); });
  CHECK(e.find("test_batch.bin") != std::string::npos);
  CHECK(e.find("not a multiple") != std::string::npos);
  fs::remove_all(d);
}

TEST_CASE("convert_image: the data's class count must match the model's num_labels") {
  train::ImageData c = train::read_image_data(kVit + "/cifar-tiny", 0.2, 0);
  auto m = std::dynamic_pointer_cast<nn::ViTForImageClassification>(nn::load_hf_model(kHf + "/vit-tiny"));
  REQUIRE(m != nullptr);
  train::ImageSplit s{c.train, c.train_rows};
  const std::string e = error_of([&] { train::ImageConversionTask(m, s, s, s, {}); });
  CHECK(e.find("10 classes") != std::string::npos);
  CHECK(e.find("num_labels = 5") != std::string::npos);
}

TEST_CASE("convert_image: the task's loss and metrics; stage 1 changes only the feature maps") {
  CifarTask ct;
  auto teacher = ct.task("softmax");
  train::Metrics tm = teacher->evaluate(train::Split::test);
  REQUIRE(tm.size() == 2);
  CHECK(tm[0].first == "top1");
  CHECK(tm[1].first == "top5");
  CHECK(tm[1].second >= tm[0].second);
  CHECK(teacher->tokens(train::Split::train, 0) == 8 * 17);  // (32/8)^2 patches + CLS
  // The loss is the mean cross-entropy of the classifier's logits (checked against the formula).
  {
    NoGradGuard ng;
    const double l = teacher->loss(train::Split::val, 0, nullptr).item<double>();
    std::vector<int64_t> rows = ct.val_split.rows;
    rows.resize(std::min<size_t>(rows.size(), 8));
    Tensor logits = teacher->vit().forward(ct.data.train->batch(rows, train::vit_preprocess(kVit + "/vit-cifar-tiny", 32)));
    std::vector<float> lg = to_vector<float>(logits);
    double ce = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      double mx = -1e30, z = 0;
      for (int c = 0; c < 10; ++c) mx = std::max(mx, double(lg[i * 10 + c]));
      for (int c = 0; c < 10; ++c) z += std::exp(lg[i * 10 + c] - mx);
      ce += mx + std::log(z) - lg[i * 10 + ct.data.train->labels[rows[i]]];
    }
    CHECK(l == doctest::Approx(ce / rows.size()).epsilon(1e-5));
  }
  // The teacher's attention is bidirectional: the CLS query attends to later patches.
  {
    NoGradGuard ng;
    nn::TraceRequest tr;
    tr.teacher = true;
    teacher->loss(train::Split::val, 0, &tr);
    REQUIRE(tr.layers.size() == 2);
    std::vector<float> w = to_vector<float>(tr.layers[0].teacher);  // (B,H,17,17)
    double upper = 0;
    for (int j = 1; j < 17; ++j) upper += w[j];
    CHECK(upper > 0.5);
  }

  auto student = ct.task("hedgehog");
  const auto before = values(student->model());
  train::ConvertConfig cfg;
  cfg.quiet = true;
  cfg.distill.epochs = 3;
  cfg.distill.patience = 3;
  cfg.finetune.epochs = 0;
  train::ConvertResult r = train::convert(*student, cfg);
  REQUIRE(r.distill.val.size() == 3);
  CHECK(r.distill.val.back() < r.distill.val.front());
  CHECK(r.distill.tokens == 3 * 24 * 17);
  const auto after = values(student->model());
  int changed_maps = 0;
  for (auto& kv : before) {
    const std::string name = kv.first;
    const std::vector<float>& v = kv.second;
    if (train::is_feature_map_param(name)) {
      changed_maps += v != after.at(name);
    } else {
      CHECK_MESSAGE(v == after.at(name), name);
    }
  }
  CHECK(changed_maps > 0);
  CHECK(r.distilled.size() == 2);
}
