// nn::Mixer: text parsed once against the feature-map registry, named back unchanged, errors that
// name the flag and the value.
#include <doctest/doctest.h>

#include <string>

#include "nn/attention.h"
#include "nn/feature_maps.h"
#include "nn/mixer.h"
#include "nn/models/hf_weights.h"

using namespace hh;
using namespace hh::nn;

TEST_CASE("mixer: softmax is the default and round-trips through its name") {
  const Mixer d;
  CHECK(d.is_softmax());
  CHECK_FALSE(d.is_linear());
  CHECK(d.feature_map().empty());
  CHECK(name(d) == "softmax");
  CHECK(d == Mixer::softmax());
  CHECK(parse_mixer("softmax", "--mixer") == d);
  // What every config starts with.
  CHECK(AttentionConfig{}.mixer.is_softmax());
  CHECK(MixerConfig{}.mixer.is_softmax());
  CHECK(HFModelOptions{}.mixer.is_softmax());
}

TEST_CASE("mixer: every registered feature map parses to a linear mixer and names back the same text") {
  for (const std::string& map : feature_map_names()) {
    CAPTURE(map);
    const Mixer m = parse_mixer(map, "--mixer");
    CHECK(m.is_linear());
    CHECK_FALSE(m.is_softmax());
    CHECK(m.feature_map() == map);
    CHECK(name(m) == map);
    CHECK(parse_mixer(name(m), "--mixer") == m);
    CHECK(m != Mixer::softmax());
  }
  CHECK(parse_mixer("hedgehog", "a") != parse_mixer("elu", "b"));
  CHECK_FALSE(parse_mixer("hedgehog", "a").is_hybrid());
}

TEST_CASE("mixer: hybrid-<map> parses for every map, names back the same text, and differs from the map") {
  for (const std::string& map : feature_map_names()) {
    CAPTURE(map);
    const Mixer m = parse_mixer("hybrid-" + map, "--mixer");
    CHECK(m.is_hybrid());
    CHECK(m.is_linear());  // has a feature map
    CHECK_FALSE(m.is_softmax());
    CHECK(m.feature_map() == map);
    CHECK(name(m) == "hybrid-" + map);
    CHECK(parse_mixer(name(m), "--mixer") == m);
    CHECK(m != parse_mixer(map, "--mixer"));
    CHECK(m != Mixer::softmax());
  }
  CHECK(MixerConfig{}.window == 64);
  CHECK(AttentionConfig{}.window == 64);
  CHECK(HFModelOptions{}.window == 64);
}

TEST_CASE("mixer: malformed hybrid names are errors naming the flag and the value") {
  for (const char* bad : {"hybrid", "hybrid-", "hybrid-softmax", "hybrid-nope", "Hybrid-elu", "hybrid-hybrid-elu",
                          "hybrid_elu", "hybrid-elu "}) {
    CAPTURE(bad);
    const std::string want = std::string("--mixer: unknown attention '") + bad + "'";
    CHECK_THROWS_WITH_AS(parse_mixer(bad, "--mixer"), doctest::Contains(want.c_str()), Error);
  }
  CHECK_THROWS_WITH_AS(parse_mixer("nope", "--mixer"), doctest::Contains("hybrid-<feature map>"), Error);
}

TEST_CASE("mixer: an unknown name is an error naming the flag, the value and what is valid") {
  CHECK_THROWS_WITH_AS(parse_mixer("nope", "--attentions"),
                       doctest::Contains("--attentions: unknown attention 'nope' (expected softmax, a feature map or "
                                         "hybrid-<feature map>: "),
                       Error);
  CHECK_THROWS_WITH_AS(parse_mixer("nope", "config.json: hedgehog.mixer"),
                       doctest::Contains("config.json: hedgehog.mixer: unknown attention 'nope'"), Error);
  CHECK_THROWS_WITH_AS(parse_mixer("nope", "--mixer"), doctest::Contains("hedgehog-untrained"), Error);
  // Names are exact: no case folding, no trimming, no parameters (ar_probe's exp:T is split off first).
  for (const char* bad : {"", "Softmax", "HEDGEHOG", " elu", "elu ", "exp:2", "softmax,elu"}) {
    CAPTURE(bad);
    const std::string want = std::string("--feature-map: unknown attention '") + bad + "'";
    CHECK_THROWS_WITH_AS(parse_mixer(bad, "--feature-map"), doctest::Contains(want.c_str()), Error);
  }
}
