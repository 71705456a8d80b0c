// HFConfig: typed access to config.json with errors that name the file and the key.
#include <doctest/doctest.h>

#include "core/error.h"
#include "nn/models/hf_config.h"

using hh::nn::HFConfig;

TEST_CASE("HFConfig: typed values, defaults, null as not given, nested objects") {
  HFConfig c = HFConfig::parse(
      R"({"hidden_size": 32, "rms_norm_eps": 1e-6, "rope_theta": 10000, "hidden_act": "silu", "tie_word_embeddings": false,
          "architectures": ["LlamaForCausalLM"], "rope_scaling": null, "rope_parameters": {"rope_type": "default"}})",
      "cfg.json");
  CHECK(c.get_int("hidden_size") == 32);
  CHECK(c.get_double("rms_norm_eps") == 1e-6);
  CHECK(c.get_double("rope_theta") == 10000.0);  // an integer is a valid number
  CHECK(c.get_string("hidden_act") == "silu");
  CHECK_FALSE(c.get_bool("tie_word_embeddings"));
  CHECK(c.get_strings("architectures") == std::vector<std::string>{"LlamaForCausalLM"});
  CHECK_FALSE(c.has("rope_scaling"));  // null = not given
  CHECK(c.get_int("num_key_value_heads", 4) == 4);
  CHECK(c.child("rope_parameters").get_string("rope_type") == "default");
  CHECK(c.child("rope_parameters").origin() == "cfg.json: rope_parameters");
}

TEST_CASE("HFConfig: errors name the file and the key") {
  HFConfig c = HFConfig::parse(R"({"hidden_size": "32", "n": 1.5, "rope_scaling": null})", "m/config.json");
  CHECK_THROWS_WITH_AS(c.get_int("hidden_size"), doctest::Contains("m/config.json: \"hidden_size\" must be an integer"),
                       hh::Error);
  CHECK_THROWS_WITH_AS(c.get_int("n"), doctest::Contains("\"n\" must be an integer"), hh::Error);
  HFConfig z = HFConfig::parse(R"({"heads": 0, "layers": 2})", "z.json");
  CHECK(z.get_positive_int("layers") == 2);
  CHECK_THROWS_WITH_AS(z.get_positive_int("heads"), doctest::Contains("z.json: \"heads\" must be positive, got 0"),
                       hh::Error);
  CHECK_THROWS_WITH_AS(c.get_int("vocab_size"), doctest::Contains("m/config.json: missing key \"vocab_size\""), hh::Error);
  CHECK_THROWS_WITH_AS(c.get_int("hidden_size", 3), doctest::Contains("must be an integer"), hh::Error);  // present: no default
  CHECK_THROWS_WITH_AS(c.child("rope_scaling"), doctest::Contains("missing key \"rope_scaling\""), hh::Error);
  CHECK_THROWS_WITH_AS(HFConfig::parse("[1, 2]", "a.json"), doctest::Contains("a.json: expected a JSON object"), hh::Error);
  CHECK_THROWS_WITH_AS(HFConfig::parse("{\"a\": ", "b.json"), doctest::Contains("b.json: invalid JSON"), hh::Error);
  CHECK_THROWS_WITH_AS(HFConfig::parse(std::string(100, '[') + std::string(100, ']'), "d.json"),
                       doctest::Contains("nested deeper"), hh::Error);
  CHECK_THROWS_WITH_AS(HFConfig::load("/nonexistent/config.json"), doctest::Contains("cannot open /nonexistent/config.json"),
                       hh::Error);
}
