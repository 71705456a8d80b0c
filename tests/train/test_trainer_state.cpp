// The training loop's state in a checkpoint ("trainer.state") is untrusted when a run resumes
// (issue 27, fuzz_json's resume branch): a count written as a float (1e300: nlohmann casts it to
// int64 with undefined behaviour; 1.5: it loaded as 1), beyond int64, or out of range (a negative
// evaluation count, a best step after the run's step, negative seconds, an early-stopping state
// that does not add up) is refused with an
// hh::Error naming the checkpoint and the key, never loaded.
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/safetensors.h"
#include "core/stop.h"
#include "nn/layers.h"
#include "tests/temp_dir.h"
#include "train/optim.h"
#include "train/schedule.h"
#include "train/trainer.h"

using namespace hh;

namespace {

// fuzz_json's resume run: Linear(2, 3) + AdamW, 3 steps, evaluating every step. `stop_after` > 0
// writes the checkpoint at that step; 0 resumes from it.
train::TrainerResult run(const std::string& path, int64_t stop_after) {
  Generator init_gen(1);
  nn::Linear model(2, 3, /*bias=*/true, nn::Init{init_gen});
  train::AdamW opt(train::single_group(model, 0.0), 1e-3);
  const LrSchedule schedule(ScheduleConfig{});
  train::TrainerConfig tc;
  tc.total_steps = 3;
  tc.eval_every = 1;
  tc.patience = 2;
  tc.checkpoint_path = path;
  tc.kind = "fz";
  tc.fingerprint = "{}";
  tc.resume = stop_after == 0;
  tc.stop_after_steps = stop_after;
  tc.quiet = true;
  tc.show_progress = false;
  const Tensor x = from_vector(std::vector<double>{1, -2, 0.5, 3}, {2, 2}, {DType::f32});
  train::TrainerHooks hooks;
  hooks.loss = [&](int64_t, int64_t) { return sum(square(model.forward(x))); };
  hooks.evaluate = [](int64_t step) { return train::Evaluation{static_cast<double>(step), {}, false}; };
  return train::Trainer(model, opt, schedule, tc, std::move(hooks)).fit();
}

}  // namespace

TEST_CASE("trainer: a resumed checkpoint's loop state must hold integers in range (found by fuzz_json)") {
  hh::test::TempDir dir("trainer_state");
  const std::string path = dir.file("run.safetensors");
  run(path, 2);
  const SafeTensors saved = load_safetensors(path);
  const nlohmann::json good = nlohmann::json::parse(saved.metadata.at("trainer.state"));
  REQUIRE(good.at("loss_count").is_number_integer());
  std::vector<std::pair<std::string, Tensor>> ts;
  for (const std::string& name : saved.order) ts.emplace_back(name, saved.tensors.at(name));
  auto with_state = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json st = good;
    edit(st);
    std::map<std::string, std::string> md = saved.metadata;
    md.erase("format");
    md["trainer.state"] = st.dump();
    save_safetensors(path, ts, md);
  };
  with_state([](nlohmann::json&) {});
  CHECK(run(path, 0).steps == 3);  // the untouched state resumes

  using J = nlohmann::json;
  const std::vector<std::pair<std::function<void(J&)>, std::string>> cases = {
      {[](J& s) { s["loss_count"] = 1.5; }, "\"loss_count\" must be an integer, got 1.5"},
      {[](J& s) { s["loss_count"] = 1e300; }, "\"loss_count\" must be an integer, got 1e+300"},
      {[](J& s) { s["loss_count"] = UINT64_MAX; }, "\"loss_count\" must be an integer, got 18446744073709551615"},
      {[](J& s) { s["steps"] = 1e19; }, "\"steps\" must be an integer"},
      {[](J& s) { s["evaluations"] = 2.5; }, "\"evaluations\" must be an integer"},
      {[](J& s) { s["best_step"] = "1"; }, "\"best_step\" must be an integer, got string"},
      {[](J& s) { s["early_stopping"][2] = 1e300; }, "\"early_stopping[2]\" must be an integer"},
      {[](J& s) { s["early_stopping"][3] = 0.5; }, "\"early_stopping[3]\" must be an integer"},
      {[](J& s) { s["early_stopping"][4] = -1e300; }, "\"early_stopping[4]\" must be an integer"},
      {[](J& s) { s["divergence"][2] = 1e300; }, "\"divergence[2]\" must be an integer"},
      {[](J& s) { s["early_stopping"][4] = -5; }, "early stopping: inconsistent state"},
      {[](J& s) { s["evaluations"] = -1; }, "(evaluations -1,"},
      {[](J& s) { s["best_step"] = 7; }, "best_step 7 of 2 steps"},
      {[](J& s) { s["divergence"][2] = -4; }, "divergence[2] -4"},
      {[](J& s) { s["seconds"] = -1.0; }, "seconds -1)"},
  };
  for (const auto& [edit, want] : cases) {
    with_state(edit);
    CAPTURE(saved.metadata.at("trainer.state"));
    CAPTURE(load_safetensors(path).metadata.at("trainer.state"));
    std::string msg;
    try {
      run(path, 0);
    } catch (const Error& e) {
      msg = e.what();
    }
    CAPTURE(msg);
    CHECK(msg.find("checkpoint " + path + ": bad training state in its metadata") != std::string::npos);
    CHECK(msg.find(want) != std::string::npos);
  }
}

TEST_CASE("trainer: a stop requested from outside (core/stop.h) checkpoints at that step; the resumed run ends "
          "bit for bit where an uninterrupted one does") {
  hh::test::TempDir dir("trainer_stop");
  // Linear(2, 3) + AdamW, 6 steps, evaluated every 4: the stop at step 2 falls between evaluations,
  // so only the interruption writes the checkpoint. Returns the result and the final weight.
  auto train = [&](const std::string& path, bool resume, int64_t stop_at) {
    Generator init_gen(1);
    nn::Linear model(2, 3, /*bias=*/true, nn::Init{init_gen});
    train::AdamW opt(train::single_group(model, 0.0), 1e-2);
    const LrSchedule schedule(ScheduleConfig{});
    train::TrainerConfig tc;
    tc.total_steps = 6;
    tc.eval_every = 4;
    tc.checkpoint_path = path;
    tc.kind = "stop";
    tc.fingerprint = "{}";
    tc.resume = resume;
    tc.show_progress = false;
    const Tensor x = from_vector(std::vector<double>{1, -2, 0.5, 3}, {2, 2}, {DType::f32});
    train::TrainerHooks hooks;
    hooks.loss = [&](int64_t, int64_t) { return sum(square(model.forward(x))); };
    hooks.evaluate = [](int64_t step) { return train::Evaluation{-static_cast<double>(step), {}, false}; };
    hooks.after_step = [&](int64_t step) {
      if (step == stop_at) request_stop();  // as the Python module's Ctrl-C handler does
    };
    const train::TrainerResult r = train::Trainer(model, opt, schedule, tc, std::move(hooks)).fit();
    clear_stop_request();
    return std::make_pair(r, to_vector<float>(model.weight));
  };
  const auto whole = train(dir.file("whole.safetensors"), false, -1);
  CHECK(whole.first.status == "ok");
  const std::string path = dir.file("stopped.safetensors");
  const auto stopped = train(path, false, 2);
  CHECK(stopped.first.status == "interrupted at step 2 (a stop was requested)");
  CHECK(stopped.first.interrupted());
  CHECK(stopped.first.steps == 2);
  REQUIRE(load_safetensors(path).metadata.count("trainer.state") == 1);
  CHECK_FALSE(stop_requested());
  const auto resumed = train(path, true, -1);
  CHECK(resumed.first.status == "ok");
  CHECK(resumed.first.start_step == 2);
  CHECK(resumed.first.steps == 6);
  CHECK(resumed.second == whole.second);
}
