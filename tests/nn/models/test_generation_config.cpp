// nn::read_generation_config: transformers' generate() defaults for a folder.
#include <doctest/doctest.h>

#include "nn/models/generate.h"
#include "tests/temp_dir.h"

using hh::nn::GenerationDefaults;
using hh::nn::read_generation_config;

TEST_CASE("generation config: absent or without do_sample is greedy; do_sample takes GenerationConfig's defaults") {
  hh::test::TempDir d("genconfig");
  GenerationDefaults g = read_generation_config(d.path.string());
  CHECK_FALSE(g.found);
  CHECK(g.sampling.temperature == 0.0);
  CHECK(g.eos.empty());

  d.write("generation_config.json", R"({"eos_token_id": 2, "temperature": 0.6})");
  g = read_generation_config(d.path.string());
  CHECK(g.found);
  CHECK(g.sampling.temperature == 0.0);  // no do_sample: transformers decodes greedily
  CHECK(g.eos == std::vector<int64_t>{2});

  d.write("generation_config.json", R"({"do_sample": true, "top_p": 0.9, "eos_token_id": [128001, 128008, 128009]})");
  g = read_generation_config(d.path.string());
  CHECK(g.do_sample);
  CHECK(g.sampling.temperature == 1.0);
  CHECK(g.sampling.top_k == 50);
  CHECK(g.sampling.top_p == doctest::Approx(0.9));
  CHECK(g.eos == std::vector<int64_t>{128001, 128008, 128009});
}

TEST_CASE("generation config: a value of the wrong type or range names the file and key") {
  hh::test::TempDir d("genconfig_bad");
  d.write("generation_config.json", R"({"do_sample": "yes"})");
  CHECK_THROWS_WITH(read_generation_config(d.path.string()), doctest::Contains("do_sample"));
  d.write("generation_config.json", R"({"do_sample": true, "temperature": 0})");
  CHECK_THROWS_WITH(read_generation_config(d.path.string()), doctest::Contains("generation_config.json"));
  d.write("generation_config.json", R"({"eos_token_id": "two"})");
  CHECK_THROWS_WITH(read_generation_config(d.path.string()), doctest::Contains("eos_token_id"));
  d.write("generation_config.json", "{not json");
  CHECK_THROWS_WITH(read_generation_config(d.path.string()), doctest::Contains("generation_config.json"));
}
