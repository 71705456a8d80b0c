// Training infrastructure: batching cursor, LR schedules, early stopping, progress output,
// JSONL / CSV logging and SVG plots; temp files of atomic writes and checkpoint extras.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/tensor.h"
#include "data/batching.h"
#include "nn/layers.h"
#include "train/checkpoint.h"
#include "train/early_stopping.h"
#include "train/metrics_log.h"
#include "train/schedule.h"
#include "train/report/svg.h"

using namespace hh;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& tag) {
  fs::path p = fs::temp_directory_path() / ("hh_test_" + tag + "_" + std::to_string(::getpid()));
  fs::create_directories(p);
  return p;
}

size_t count_of(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = s.find(needle); pos != std::string::npos; pos = s.find(needle, pos + needle.size())) ++n;
  return n;
}

// Minimal XML well-formedness check: every tag closes in order, attribute quotes balance, and
// text holds no raw '<' or '&' that is not an entity.
bool well_formed_xml(const std::string& s, std::string& why) {
  std::vector<std::string> stack;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '&') {
      const size_t semi = s.find(';', i);
      if (semi == std::string::npos || semi - i > 6) return why = "bare & at " + std::to_string(i), false;
      i = semi + 1;
      continue;
    }
    if (s[i] != '<') {
      if (s[i] == '>') return why = "stray > at " + std::to_string(i), false;
      ++i;
      continue;
    }
    size_t j = i + 1;
    bool in_quote = false;
    while (j < s.size() && (in_quote || s[j] != '>')) {
      if (s[j] == '"') in_quote = !in_quote;
      if (!in_quote && s[j] == '<') return why = "< inside a tag at " + std::to_string(j), false;
      ++j;
    }
    if (j >= s.size()) return why = "unterminated tag", false;
    std::string tag = s.substr(i + 1, j - i - 1);
    i = j + 1;
    if (tag.empty()) return why = "empty tag", false;
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name) return why = "unexpected </" + name + ">", false;
      stack.pop_back();
    } else if (tag.back() != '/') {
      stack.push_back(tag.substr(0, tag.find_first_of(" \n\t")));
    }
  }
  if (!stack.empty()) return why = "unclosed <" + stack.back() + ">", false;
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Batching

TEST_CASE("batcher: every row once per epoch, short last batch, drop_last") {
  const int64_t N = 10;
  std::vector<int64_t> ids(N), labels(N);
  for (int64_t i = 0; i < N; ++i) ids[static_cast<size_t>(i)] = 100 + i, labels[static_cast<size_t>(i)] = i % 3;
  Tensor x = from_vector(ids, {N, 1}), y = from_vector(labels, {N});
  Batcher b(x, y, {4, true, false, 9});
  CHECK(b.batches_per_epoch() == 3);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::multiset<int64_t> seen;
    std::vector<int64_t> sizes;
    Batch batch;
    while (b.next(batch)) {
      CHECK(batch.epoch == epoch);
      const auto bx = to_vector<int64_t>(batch.inputs()), by = to_vector<int64_t>(batch.targets());
      REQUIRE(batch.inputs().shape() == Shape{batch.size(), 1});
      for (int64_t k = 0; k < batch.size(); ++k) {
        const int64_t r = batch.rows[static_cast<size_t>(k)];
        CHECK(bx[static_cast<size_t>(k)] == 100 + r);  // rows of both fields stay aligned
        CHECK(by[static_cast<size_t>(k)] == r % 3);
        seen.insert(r);
      }
      sizes.push_back(batch.size());
    }
    CHECK(sizes == std::vector<int64_t>{4, 4, 2});
    CHECK(seen.size() == 10);
    CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == 10);
    CHECK(b.epoch() == epoch + 1);
  }
  CHECK(b.epoch_order(0) != b.epoch_order(1));  // reshuffled each epoch

  Batcher d(x, y, {4, true, true, 9});
  CHECK(d.batches_per_epoch() == 2);
  Batch batch;
  int count = 0;
  while (d.next(batch)) {
    CHECK(batch.size() == 4);
    ++count;
  }
  CHECK(count == 2);

  Batcher plain(x, y, {3, false, false, 0});
  CHECK(plain.epoch_order(4) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
}

TEST_CASE("batcher: cursor save / restore gives the same next batches") {
  const int64_t N = 23;
  Generator g(1);
  Tensor x = randn({N, 3, 2}, g), y = arange(N, DType::i64);
  const BatcherOptions opt{5, true, false, 77};
  Batcher a(x, y, opt);
  Batch batch;
  for (int k = 0; k < 7; ++k) {  // into the second epoch (5 batches per epoch, one false at the end)
    if (!a.next(batch)) a.next(batch);
  }
  const BatchCursor saved = a.cursor();
  CHECK(saved.epoch == 1);
  std::vector<std::vector<float>> expected;
  std::vector<std::vector<int64_t>> expected_rows;
  for (int k = 0; k < 8; ++k) {
    if (!a.next(batch)) continue;
    expected.push_back(to_vector<float>(batch.inputs()));
    expected_rows.push_back(batch.rows);
  }

  Batcher b(x, y, opt);
  b.set_cursor(saved);
  size_t idx = 0;
  for (int k = 0; k < 8; ++k) {
    if (!b.next(batch)) continue;
    REQUIRE(idx < expected.size());
    CHECK(batch.rows == expected_rows[idx]);
    CHECK(to_vector<float>(batch.inputs()) == expected[idx]);
    ++idx;
  }
  CHECK(idx == expected.size());

  CHECK_THROWS_WITH_AS(b.set_cursor({0, N + 1}), doctest::Contains("position"), hh::Error);
}

TEST_CASE("batcher: gather_rows and errors") {
  Tensor m = from_vector(std::vector<double>{0, 1, 2, 3, 4, 5}, {2, 3}, DType::f32);
  Tensor mt = m.t();  // (3, 2), non-contiguous
  Tensor rows = gather_rows(mt, {2, 0, 2});
  CHECK(rows.shape() == Shape{3, 2});
  CHECK(to_vector<float>(rows) == std::vector<float>{2, 5, 0, 3, 2, 5});
  CHECK_THROWS_WITH_AS(gather_rows(m, {2}), doctest::Contains("out of range"), hh::Error);
  CHECK_THROWS_WITH_AS(Batcher(m, zeros({3}), {1, false, false, 0}), doctest::Contains("first dimensions"), hh::Error);
  CHECK_THROWS_WITH_AS(Batcher(m, zeros({2}), {0, false, false, 0}), doctest::Contains("batch_size"), hh::Error);
  CHECK_THROWS_WITH_AS(Batcher(m, zeros({2}), {3, false, true, 0}), doctest::Contains("drop_last"), hh::Error);
}

// ---------------------------------------------------------------------------------------------
// Schedules

TEST_CASE("lr schedule: values at key steps") {
  ScheduleConfig c;
  c.base_lr = 1.0;
  c.warmup_steps = 10;
  c.total_steps = 110;

  LrSchedule constant("constant", c);
  CHECK(constant.lr_at(0) == doctest::Approx(0.0));
  CHECK(constant.lr_at(5) == doctest::Approx(0.5));
  CHECK(constant.lr_at(10) == doctest::Approx(1.0));
  CHECK(constant.lr_at(100000) == doctest::Approx(1.0));

  c.min_lr = 0.1;
  LrSchedule cosine("cosine", c);
  CHECK(cosine.lr_at(5) == doctest::Approx(0.5));
  CHECK(cosine.lr_at(10) == doctest::Approx(1.0));
  CHECK(cosine.lr_at(60) == doctest::Approx(0.55));                       // halfway: mean of base and min
  CHECK(cosine.lr_at(35) == doctest::Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(3.14159265358979323846 / 4))));
  CHECK(cosine.lr_at(110) == doctest::Approx(0.1));
  CHECK(cosine.lr_at(1000) == doctest::Approx(0.1));                      // held, not cycled back up

  LrSchedule linear("linear", c);
  CHECK(linear.lr_at(10) == doctest::Approx(1.0));
  CHECK(linear.lr_at(35) == doctest::Approx(0.775));
  CHECK(linear.lr_at(60) == doctest::Approx(0.55));
  CHECK(linear.lr_at(110) == doctest::Approx(0.1));

  // OneCycleLR(max_lr=1, total_steps=100, pct_start=0.3): up over steps 0..29, down over 29..99.
  ScheduleConfig o;
  o.base_lr = 1.0;
  o.total_steps = 100;
  LrSchedule one("onecycle", o);
  CHECK(one.lr_at(0) == doctest::Approx(1.0 / 25));
  CHECK(one.lr_at(29) == doctest::Approx(1.0));
  CHECK(one.lr_at(64) == doctest::Approx((1.0 + 0.04 / 1e4) / 2));        // halfway down
  CHECK(one.lr_at(99) == doctest::Approx(0.04 / 1e4));
  CHECK(one.lr_at(500) == doctest::Approx(0.04 / 1e4));
  for (int64_t s = 1; s < 29; ++s) CHECK(one.lr_at(s) > one.lr_at(s - 1));
  for (int64_t s = 30; s < 100; ++s) CHECK(one.lr_at(s) < one.lr_at(s - 1));
  // pct_start 0.21 puts the peak at step 20; step 10 is halfway up.
  o.pct_start = 0.21;
  CHECK(LrSchedule("one_cycle", o).lr_at(10) == doctest::Approx((0.04 + 1.0) / 2));
}

TEST_CASE("lr schedule: names and config errors") {
  CHECK(parse_schedule_kind("warmup_cosine") == ScheduleKind::cosine);
  CHECK(parse_schedule_kind("one-cycle") == ScheduleKind::onecycle);
  CHECK_THROWS_WITH_AS(parse_schedule_kind("cosin"), doctest::Contains("constant, cosine, linear, onecycle"), hh::Error);
  ScheduleConfig c;
  c.total_steps = 10;
  c.warmup_steps = 20;
  CHECK_THROWS_WITH_AS(LrSchedule("cosine", c), doctest::Contains("warmup_steps 20 exceeds total_steps 10"), hh::Error);
  c.warmup_steps = 0;
  c.total_steps = 0;
  CHECK_THROWS_WITH_AS(LrSchedule("linear", c), doctest::Contains("total_steps must be > 0"), hh::Error);
  CHECK_NOTHROW(LrSchedule("constant", c));
  c.total_steps = 100;
  c.pct_start = 1.0;
  CHECK_THROWS_WITH_AS(LrSchedule("onecycle", c), doctest::Contains("pct_start"), hh::Error);
  c.pct_start = 0.3;
  c.base_lr = -1;
  CHECK_THROWS_WITH_AS(LrSchedule("onecycle", c), doctest::Contains("base_lr"), hh::Error);
  c.base_lr = 1;
  c.min_lr = 2;
  CHECK_THROWS_WITH_AS(LrSchedule("cosine", c), doctest::Contains("min_lr"), hh::Error);
  CHECK_THROWS_WITH_AS(LrSchedule("constant", ScheduleConfig{}).lr_at(-1), doctest::Contains("negative step"), hh::Error);
}

// ---------------------------------------------------------------------------------------------
// Early stopping

TEST_CASE("early stopping: patience, modes, min_delta, NaN, state") {
  EarlyStopping es(3, EarlyStopMode::min);
  CHECK(es.update(1.0));
  CHECK(es.update(0.8));
  CHECK_FALSE(es.update(0.9));
  CHECK_FALSE(es.update(0.8));  // equal is not better
  CHECK_FALSE(es.should_stop());
  CHECK(es.update(0.7));        // improvement resets the count
  CHECK(es.bad_count() == 0);
  CHECK_FALSE(es.update(std::nan("")));
  CHECK_FALSE(es.update(0.75));
  CHECK_FALSE(es.should_stop());
  const EarlyStoppingState saved = es.state();
  CHECK_FALSE(es.update(0.71));
  CHECK(es.should_stop());
  CHECK(es.best() == 0.7);
  CHECK(es.best_index() == 4);

  EarlyStopping restored(3, EarlyStopMode::min);
  restored.set_state(saved);
  CHECK_FALSE(restored.should_stop());
  restored.update(0.9);
  CHECK(restored.should_stop());

  EarlyStopping acc(2, parse_early_stop_mode("max"), 0.01);
  CHECK(acc.update(0.50));
  CHECK_FALSE(acc.update(0.505));  // within min_delta
  CHECK(acc.update(0.52));
  CHECK_FALSE(acc.update(0.1));
  CHECK_FALSE(acc.update(0.529));
  CHECK(acc.should_stop());
  CHECK(acc.best() == 0.52);

  CHECK_THROWS_WITH_AS(EarlyStopping(0), doctest::Contains("patience"), hh::Error);
  CHECK_THROWS_WITH_AS(parse_early_stop_mode("up"), doctest::Contains("expected min or max"), hh::Error);
}

// ---------------------------------------------------------------------------------------------
// Progress

TEST_CASE("progress: plain lines every N steps, bar redraws, durations") {
  CHECK(format_duration(7.2) == "0:07");
  CHECK(format_duration(725) == "12:05");
  CHECK(format_duration(3723) == "1:02:03");
  CHECK(format_duration(-1) == "?");

  std::ostringstream os;
  ProgressOptions po;
  po.label = "train";
  po.total = 35;
  po.mode = ProgressMode::plain;
  po.every_steps = 10;
  po.every_seconds = 0;
  po.out = &os;
  {
    Progress p(po);
    CHECK_FALSE(p.uses_bar());
    for (int64_t s = 1; s <= 35; ++s) p.update_at(s, 0.5 * static_cast<double>(s), {{"loss", 1.0 / s}, {"acc", 0.5}});
    CHECK(p.lines_printed() == 3);
    p.finish_at(18.0, {{"loss", 0.03}});
    CHECK(p.lines_printed() == 4);
  }
  std::vector<std::string> lines;
  std::istringstream is(os.str());
  for (std::string l; std::getline(is, l);) lines.push_back(l);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0].find("train 10/35") == 0);
  CHECK(lines[0].find("2.00 it/s") != std::string::npos);  // 10 steps in 5 s
  CHECK(lines[0].find("ETA 0:13") != std::string::npos);   // 25 steps left at 2 it/s: 12.5 s
  CHECK(lines[0].find("loss=0.1 ") != std::string::npos);
  CHECK(lines[0].find("acc=0.5") != std::string::npos);
  CHECK(lines[3].find("35/35") != std::string::npos);
  CHECK(os.str().find('\r') == std::string::npos);

  // Time-based lines only.
  std::ostringstream os2;
  po.every_steps = 0;
  po.every_seconds = 5;
  po.out = &os2;
  Progress timed(po);
  timed.update_at(1, 1.0, {});
  timed.update_at(2, 4.0, {});
  timed.update_at(3, 5.5, {});
  timed.update_at(4, 7.0, {});
  timed.update_at(5, 10.6, {});
  CHECK(timed.lines_printed() == 2);

  std::ostringstream os3;
  po.mode = ProgressMode::bar;
  po.out = &os3;
  {
    Progress bar(po);
    CHECK(bar.uses_bar());
    bar.update_at(5, 1.0, {{"loss", 2.0}});
    bar.update_at(6, 1.01, {});  // throttled
    bar.finish_at(2.0, {});
    CHECK(bar.lines_printed() == 2);
  }
  CHECK(os3.str().find("\r") == 0);
  CHECK(os3.str().find("[") != std::string::npos);
  CHECK(os3.str().back() == '\n');

  po.mode = ProgressMode::automatic;
  std::ostringstream os4;
  po.out = &os4;
  CHECK_FALSE(Progress(po).uses_bar());  // not a terminal
}

// ---------------------------------------------------------------------------------------------
// Metrics log and CSV

TEST_CASE("metrics log: JSONL lines parse, keep key order, NaN is null") {
  const fs::path dir = temp_dir("metrics");
  const std::string path = (dir / "m.jsonl").string();
  {
    MetricsLog log(path);
    log.write({{"split", "train"}, {"step", 10}, {"loss", 0.25}, {"ok", true}});
    log.write({{"split", "val"}, {"step", int64_t{20}}, {"loss", std::nan("")}, {"note", std::string("a \"q\"\n")}});
    CHECK(log.lines_written() == 2);
    // Flushed per write: readable before the log is closed.
    std::ifstream early(path);
    std::string first;
    std::getline(early, first);
    CHECK(first == R"({"split":"train","step":10,"loss":0.25,"ok":true})");
    CHECK_THROWS_WITH_AS(log.write({{"a", 1}, {"a", 2}}), doctest::Contains("duplicate key 'a'"), hh::Error);
  }
  {
    MetricsLog log(path, /*append=*/true);
    log.write({{"split", "test"}, {"acc", 0.97f}});
  }
  std::ifstream in(path);
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  REQUIRE(rows.size() == 3);
  CHECK(rows[0]["step"].get<int64_t>() == 10);
  CHECK(rows[0]["ok"].get<bool>());
  CHECK(rows[1]["loss"].is_null());
  CHECK(rows[1]["note"].get<std::string>() == "a \"q\"\n");
  CHECK(rows[2]["acc"].get<double>() == doctest::Approx(0.97));

  MetricsLog closed;
  CHECK_THROWS_WITH_AS(closed.write({{"a", 1}}), doctest::Contains("not open"), hh::Error);
  CHECK_THROWS_WITH_AS(MetricsLog((dir / "no" / "such" / "dir.jsonl").string()), doctest::Contains("cannot open"),
                       hh::Error);
  fs::remove_all(dir);
}

TEST_CASE("csv table: quoting, values, atomic save") {
  CHECK(csv_escape("plain") == "plain");
  CHECK(csv_escape("a,b") == "\"a,b\"");
  CHECK(csv_escape("say \"hi\"") == "\"say \"\"hi\"\"\"");
  CsvTable t({"map", "acc", "note"}, 4);
  t.add_values({"hedgehog", 1.0, "ok"});
  t.add_values({"elu", 0.1703125, MetricValue()});
  t.add_row({"taylor", "100", "x,y"});
  CHECK(t.str() == "map,acc,note\nhedgehog,1,ok\nelu,0.1703,\ntaylor,100,\"x,y\"\n");
  CHECK_THROWS_WITH_AS(t.add_row({"a"}), doctest::Contains("1 cells for 3 columns"), hh::Error);
  const fs::path dir = temp_dir("csv");
  const std::string path = (dir / "t.csv").string();
  t.save(path);
  CHECK(read_file(path) == t.str());
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------------
// SVG

TEST_CASE("svg: helpers") {
  CHECK(rgb_hex(viridis(0.0)) == "#440154");
  CHECK(rgb_hex(viridis(1.0)) == "#fde725");
  CHECK(rgb_hex(viridis(0.5)) == "#21918c");
  CHECK(rgb_hex(viridis(2.0)) == "#fde725");
  const auto mid = viridis(0.05);  // halfway between the first two anchors
  CHECK(mid[0] == 70);
  CHECK(mid[2] == 101);
  const auto t = nice_ticks(0.0, 1.0, 5);
  REQUIRE(t.size() == 6);
  CHECK(t[1] == doctest::Approx(0.2));
  CHECK(t[5] == doctest::Approx(1.0));
  const auto t2 = nice_ticks(-3.7, 12.1, 6);
  CHECK(t2.front() >= -3.7);
  CHECK(t2.back() <= 12.1);
  CHECK(t2[1] - t2[0] == doctest::Approx(2.0));
  CHECK(xml_escape("a<b & \"c\"") == "a&lt;b &amp; &quot;c&quot;");
}

TEST_CASE("svg: scatter with labels (Figure 4 style) is well formed") {
  ScatterSeries s;
  s.x = {0.1, 1.5, 2.9, 3.2, std::nan("")};
  s.y = {100, 17, 17, 100, 50};
  s.labels = {"softmax", "1+ELU", "Performer", "Hedgehog <HH>", "skip"};
  PlotOptions o;
  o.title = "AR accuracy vs attention entropy";
  o.x.label = "entropy";
  o.y.label = "accuracy (%)";
  const std::string svg = scatter_plot({s}, o);
  std::string why;
  CHECK_MESSAGE(well_formed_xml(svg, why), why);
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(count_of(svg, "<circle") == 4);  // NaN point dropped; unnamed series: no legend
  CHECK(count_of(svg, "Hedgehog &lt;HH&gt;") == 1);
  CHECK(count_of(svg, "skip") == 0);
  CHECK(svg.find("AR accuracy vs attention entropy") != std::string::npos);

  // Many translucent points, two named series (legend adds one swatch each).
  ScatterSeries a, b;
  a.name = "softmax";
  b.name = "hedgehog";
  Generator g(3);
  const auto xa = to_vector<double>(randn({500}, g, DType::f64));
  a.x = xa;
  for (double v : xa) a.y.push_back(std::exp(v));
  b.x = xa;
  for (double v : xa) b.y.push_back(v * v);
  a.radius = b.radius = 1.5;
  a.opacity = b.opacity = 0.3;
  const std::string many = scatter_plot({a, b}, PlotOptions{});
  CHECK_MESSAGE(well_formed_xml(many, why), why);
  CHECK(count_of(many, "<circle") == 1002);
  CHECK_THROWS_WITH_AS(scatter_plot({ScatterSeries{"x", {1, 2}, {1}, {}, "", 4, 1}}, o), doctest::Contains("1 y values"),
                       hh::Error);
}

TEST_CASE("svg: line plot breaks at non-finite points and supports log axes") {
  LineSeries train{"train", {0, 1, 2, 3, 4, 5}, {2.0, 1.0, std::nan(""), 0.5, 0.3, 0.2}, "", 1.8, false};
  LineSeries val{"val", {0, 5}, {2.1, 0.4}, "#000000", 1.8, true};
  PlotOptions o;
  o.x.label = "step";
  o.y.label = "loss";
  o.y.log = true;
  const std::string svg = line_plot({train, val}, o);
  std::string why;
  CHECK_MESSAGE(well_formed_xml(svg, why), why);
  CHECK(count_of(svg, "<polyline") == 3);  // train split in two by the NaN, val in one
  CHECK(count_of(svg, "<circle") == 2);    // val markers
  CHECK(svg.find(">train</text>") != std::string::npos);
  CHECK(svg.find(">0.5</text>") != std::string::npos);  // a 1-2-5 tick on the log y axis
  // Empty data still renders a valid frame.
  CHECK(well_formed_xml(line_plot({}, PlotOptions{}), why));
  o.y.min = -1;
  CHECK_THROWS_WITH_AS(line_plot({train}, o), doctest::Contains("log axis"), hh::Error);
}

TEST_CASE("svg: heatmap (Figure 2 style) and atomic save") {
  const int64_t L = 12;
  std::vector<double> w(static_cast<size_t>(L * L), 0.0);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j <= i; ++j) w[static_cast<size_t>(i * L + j)] = 1.0 / static_cast<double>(i + 1);
  w[5] = std::nan("");
  HeatmapOptions o;
  o.title = "causal attention";
  const std::string svg = heatmap(w, L, L, o);
  std::string why;
  CHECK_MESSAGE(well_formed_xml(svg, why), why);
  const size_t cells_begin = svg.find("<g class=\"cells\""), cells_end = svg.find("</g>", cells_begin);
  REQUIRE(cells_begin != std::string::npos);
  CHECK(count_of(svg.substr(cells_begin, cells_end - cells_begin), "<rect") == static_cast<size_t>(L * L));
  CHECK(svg.find("fill=\"#fde725\"") != std::string::npos);  // the max weight (1.0 at (0,0))
  CHECK(svg.find("fill=\"#440154\"") != std::string::npos);  // zeros above the diagonal
  CHECK(svg.find("fill=\"#d0d0d0\"") != std::string::npos);  // the NaN cell
  CHECK(svg.find("linearGradient") != std::string::npos);

  // Tensor overload with token labels.
  Tensor m = from_vector(std::vector<double>{0.1, 0.9, 0.5, 0.5}, {2, 2});
  HeatmapOptions lo;
  lo.row_labels = {"a", "b"};
  lo.col_labels = {"<k>", "v"};
  const std::string small = heatmap(m, lo);
  CHECK(well_formed_xml(small, why));
  CHECK(small.find("&lt;k&gt;") != std::string::npos);
  CHECK_THROWS_WITH_AS(heatmap(w, L, L + 1, o), doctest::Contains("values for a 12x13 matrix"), hh::Error);
  CHECK_THROWS_WITH_AS(heatmap(arange(4), o), doctest::Contains("2-D"), hh::Error);

  const fs::path dir = temp_dir("svg");
  const std::string path = (dir / "attn.svg").string();
  save_svg(path, svg);
  CHECK(read_file(path) == svg);
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------------
// Temp files of atomic writes, checkpoint extras, output folders

namespace {

// Temp files ("<name>.tmp.<pid>.<n>") next to `dir`/`name`.
std::vector<std::string> temps_of(const fs::path& dir, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(name + ".tmp.", 0) == 0) out.push_back(e.path().filename().string());
  return out;
}

// A pid that no process has: a child that has exited and been reaped.
pid_t dead_pid() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  REQUIRE(pid > 0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

void make_old_file(const fs::path& p, const std::string& bytes) {
  { std::ofstream(p) << bytes; }
  fs::last_write_time(p, fs::last_write_time(p) - std::chrono::hours(24));
}

}  // namespace

TEST_CASE("atomic file: a write that fails midway leaves no temp file and the old file intact") {
  // The file-size limit makes write() fail with EFBIG after the first 4 KiB: a real failure in the
  // middle of the data, as a full disk would give.
  const fs::path dir = temp_dir("atomic_fail");
  const std::string path = (dir / "big.bin").string();
  write_file_atomic(path, "old");
  struct rlimit old_limit;
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  struct rlimit small = old_limit;
  small.rlim_cur = 4096;
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  bool threw = false;
  std::string message;
  try {
    write_file_atomic(path, std::string(1 << 20, 'x'));
  } catch (const hh::Error& e) {
    threw = true;
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::signal(SIGXFSZ, old_handler);
  CHECK(threw);
  CHECK(message.find("big.bin") != std::string::npos);
  CHECK(temps_of(dir, "big.bin").empty());
  CHECK(read_file(path) == "old");
  fs::remove_all(dir);
}

TEST_CASE("atomic file: stale temp files of killed writers are swept, live writers' are kept") {
  const fs::path dir = temp_dir("stale_temps");
  const std::string target = (dir / "ck.safetensors").string();
  const std::string dead = "ck.safetensors.tmp." + std::to_string(dead_pid()) + ".0";
  const std::string mine = "ck.safetensors.tmp." + std::to_string(::getpid()) + ".7";
  const std::string live = "ck.safetensors.tmp.1.3";                     // pid 1 always runs
  const std::string other = "other.bin.tmp." + std::to_string(dead_pid()) + ".0";  // not this target's
  const std::string odd = "ck.safetensors.tmp.notapid";
  for (const auto& n : {dead, mine, live, other, odd}) make_old_file(dir / n, std::string(4096, 'x'));
  // A dead writer's temp that is newer than this process could be another machine's live write.
  const std::string fresh = "ck.safetensors.tmp." + std::to_string(dead_pid()) + ".1";
  { std::ofstream(dir / fresh) << "x"; }
  CHECK(remove_stale_temps(target) == 1);
  CHECK(!fs::exists(dir / dead));
  for (const auto& n : {mine, live, other, odd, fresh}) CHECK_MESSAGE(fs::exists(dir / n), n);
  CHECK(remove_stale_temps(target) == 0);
  CHECK(remove_stale_temps((dir / "missing_dir" / "x").string()) == 0);  // nothing to sweep, no error
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: saving sweeps stale temps of its target and keeps extra tensors") {
  const fs::path dir = temp_dir("ckpt_sweep");
  const std::string path = (dir / "ck.safetensors").string();
  const std::string dead = "ck.safetensors.tmp." + std::to_string(dead_pid()) + ".0";
  make_old_file(dir / dead, std::string(1 << 16, 'x'));
  Generator gen(1);
  nn::Linear model(3, 2, true, {gen});
  train::CheckpointMeta meta;
  meta.step = 5;
  meta.tensors["best.weight"] = from_vector(std::vector<float>{1, 2, 3}, {3});
  train::save_checkpoint(path, model, nullptr, meta);
  CHECK(!fs::exists(dir / dead));
  CHECK(temps_of(dir, "ck.safetensors").empty());
  Generator gen2(2);
  nn::Linear restored(3, 2, true, {gen2});
  train::CheckpointMeta back;
  train::load_checkpoint(path, restored, nullptr, back);
  CHECK(back.step == 5);
  REQUIRE(back.tensors.count("best.weight") == 1);
  CHECK(to_vector<float>(back.tensors["best.weight"]) == std::vector<float>{1, 2, 3});
  fs::remove_all(dir);
}

TEST_CASE("output folder: created and probed before any work; bad paths are named") {
  const fs::path dir = temp_dir("outdir");
  const std::string nested = (dir / "a" / "b").string();
  ensure_writable_dir(nested);
  CHECK(fs::is_directory(nested));
  CHECK(fs::is_empty(nested));  // the probe file is gone
  CHECK_THROWS_WITH_AS(ensure_writable_dir(""), doctest::Contains("empty"), hh::Error);
  const std::string file = (dir / "file").string();
  { std::ofstream(file) << "x"; }
  const std::string not_folder = "'" + file + "' exists and is not a folder", sub = file + "/sub";
  CHECK_THROWS_WITH_AS(ensure_writable_dir(file), doctest::Contains(not_folder.c_str()), hh::Error);
  CHECK_THROWS_WITH_AS(ensure_writable_dir(sub), doctest::Contains(sub.c_str()), hh::Error);
  CHECK_THROWS_WITH_AS(ensure_writable_dir("/proc/hh_no_such_dir"), doctest::Contains("/proc/hh_no_such_dir"),
                       hh::Error);
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: fingerprint_diff names the settings that differ") {
  const std::string a = R"({"lr": 0.001, "model": {"n_embd": 32, "n_head": 2}, "seed": 0})";
  CHECK(train::fingerprint_diff(a, a) == "");
  CHECK(train::fingerprint_diff(a, R"({"seed": 0, "model": {"n_head": 2, "n_embd": 32}, "lr": 0.001})") == "");
  CHECK(train::fingerprint_diff(a, R"({"lr": 0.01, "model": {"n_embd": 64, "n_head": 2}, "seed": 0})") ==
        "/lr, /model/n_embd");
  CHECK(train::fingerprint_diff(a, R"({"lr": 0.001, "model": {"n_embd": 32, "n_head": 2}})") == "/seed");
  CHECK(train::fingerprint_diff("{not json", a) == "its unreadable fingerprint");
}

TEST_CASE("svg: an integer axis (epochs) has ticks on whole numbers only") {
  hh::LineSeries s;
  s.x = {1, 2, 3};
  s.y = {0.5, 0.4, 0.3};
  hh::PlotOptions o;
  o.x.label = "epoch";
  const std::string plain = hh::line_plot({s}, o);
  CHECK(plain.find(">1.5</text>") != std::string::npos);  // without it: half-epoch ticks
  o.x.integer = true;
  const std::string whole = hh::line_plot({s}, o);
  CHECK(whole.find(">1.5</text>") == std::string::npos);
  CHECK(whole.find(">2</text>") != std::string::npos);
}

TEST_CASE("svg: a title longer than its figure is set smaller or on two lines, never past the edges") {
  const Tensor m = ones({4, 4});
  hh::HeatmapOptions o;
  o.width = 320;
  o.height = 320;
  o.title = "Hedgehog: KL(teacher || student) per query position, layer 3 head 0, on the test split";
  const std::string svg = hh::heatmap(m, o);
  // Every bold (title) line: its estimated width (0.6 em per character) fits inside the figure.
  size_t at = 0, lines = 0;
  while ((at = svg.find("font-weight=\"bold\">", at)) != std::string::npos) {
    const size_t size_at = svg.rfind("font-size=\"", at) + 11;
    const double px = std::stod(svg.substr(size_at));
    const size_t body = at + 19, end = svg.find("</text>", body);
    const double width = 0.6 * px * static_cast<double>(end - body);
    CHECK(width <= o.width - 16 + 1e-9);
    ++lines;
    at = end;
  }
  CHECK(lines == 2);
  o.title = "short";
  CHECK(hh::heatmap(m, o).find("font-size=\"15\" font-weight=\"bold\">short</text>") != std::string::npos);
}
