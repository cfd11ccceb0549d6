#include <catch2/catch.hpp>
#include <string>

#include "sim/common/yaml_util.h"
#include "sim_test_util.h"

using namespace kvsim;

namespace {
using kvsim::test::error_of;
}  // namespace

TEST_CASE("an unknown key is reported with a did-you-mean suggestion and its position", "[sim]") {
  YAML::Node root = load_yaml_string("cache:\n  blok_size: 16\n", "s.yaml");
  const std::string msg = error_of([&] {
    check_keys(root["cache"], {"block_size", "gpu_memory_utilization"},
               YamlContext{"s.yaml", "cache"});
  });
  CHECK(msg == "s.yaml:2:3: unknown key 'blok_size' in cache (did you mean 'block_size'?)");
}

TEST_CASE("an unknown key far from every allowed key lists the allowed keys", "[sim]") {
  YAML::Node root = load_yaml_string("zzz: 1\n", "s.yaml");
  const std::string msg = error_of([&] {
    check_keys(root, {"model", "cache"}, YamlContext{"s.yaml", ""});
  });
  CHECK(msg == "s.yaml:1:1: unknown key 'zzz' in top level (allowed: model, cache)");
}

TEST_CASE("a type error names file, line, column, key and value", "[sim]") {
  YAML::Node root = load_yaml_string("cache:\n  block_size: sixteen\n", "s.yaml");
  YamlContext ctx{"s.yaml", "cache"};
  const std::string msg =
      error_of([&] { (void)get_int(root["cache"], "block_size", ctx, 16, 1, 1024); });
  CHECK(msg == "s.yaml:2:15: cache.block_size: expected an integer, got 'sixteen'");
}

TEST_CASE("an out-of-range value names the allowed range", "[sim]") {
  YAML::Node root = load_yaml_string("cache: {block_size: 0, u: 1.5}\n", "s.yaml");
  YamlContext ctx{"s.yaml", "cache"};
  CHECK(error_of([&] { (void)get_int(root["cache"], "block_size", ctx, 16, 1, 1024); }) ==
        "s.yaml:1:21: cache.block_size: 0 is out of range (must be in [1, 1024])");
  CHECK(error_of([&] {
          (void)get_double(root["cache"], "u", ctx, 0.9, 0.0, 1.0);
        }).find("cache.u: 1.5 is out of range (must be in [0, 1])") != std::string::npos);
}

TEST_CASE("getters return values, defaults, and complain about missing required keys", "[sim]") {
  YAML::Node root = load_yaml_string("a: 4e9\nb: 0.25\nc: yes\nd: hello\ne: ~\n", "s.yaml");
  YamlContext ctx{"s.yaml", "x"};
  CHECK(get_int(root, "a", ctx, std::nullopt) == 4000000000LL);
  CHECK(get_double(root, "b", ctx, std::nullopt) == 0.25);
  CHECK(get_bool(root, "c", ctx, std::nullopt));
  CHECK(get_string(root, "d", ctx, std::nullopt) == "hello");
  CHECK(get_int(root, "e", ctx, 7) == 7);
  CHECK(get_int(root, "missing", ctx, 3) == 3);
  CHECK_FALSE(get_optional_int(root, "missing", ctx).has_value());
  CHECK(error_of([&] { (void)get_int(root, "missing", ctx, std::nullopt); }) ==
        "s.yaml:1:1: missing required key 'missing' in x");
  CHECK(error_of([&] {
          (void)get_choice(root, "d", ctx, std::nullopt, {"hallo", "bye"});
        }).find("x.d: unknown value 'hello' (did you mean 'hallo'?)") != std::string::npos);
}

TEST_CASE("a YAML syntax error is a ConfigError with a position", "[sim]") {
  const std::string msg = error_of([&] { (void)load_yaml_string("a: [1, 2\nb: 3\n", "bad.yaml"); });
  CHECK(msg.rfind("bad.yaml:", 0) == 0);
  CHECK(msg.find("YAML syntax error") != std::string::npos);
}

TEST_CASE("edit distance counts a transposition as one edit", "[sim]") {
  CHECK(edit_distance("block_size", "blokc_size") == 1);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("kitten", "sitting") == 3);
}

TEST_CASE("a scalar where a mapping belongs is an error, not a section of defaults", "[sim]") {
  YAML::Node root = load_yaml_string("cache: 16\n", "s.yaml");
  YamlContext ctx{"s.yaml", "cache"};
  CHECK(error_of([&] { (void)get_int(root["cache"], "block_size", ctx, 16); }) ==
        "s.yaml:1:8: cache must be a mapping of keys, got '16'");
  CHECK_FALSE(has_key(root["cache"], "block_size"));
  CHECK(get_int(root["absent"], "block_size", ctx, 16) == 16);
}

TEST_CASE("a value a command-line argument wrote is reported at the argument", "[sim]") {
  YAML::Node root =
      load_yaml_string("cache: {block_size: 0}\nscheduler: {max_num_seqs: -1}\n", "s.yaml");
  auto origins = std::make_shared<ArgumentOrigins>();
  origins->add("scheduler.max_num_seqs", "--set scheduler.max_num_seqs=-1");
  origins->add("workload.arrival", "--set workload.arrival={process: timestamps}");
  const YamlContext top{"s.yaml", "", origins};
  CHECK(error_of([&] {
          (void)get_int(root["scheduler"], "max_num_seqs", top.child("scheduler"), 256, 1);
        }) ==
        "--set scheduler.max_num_seqs=-1: scheduler.max_num_seqs: -1 is out of range (must be >= "
        "1)");
  // A value of the file keeps its position.
  CHECK(error_of([&] { (void)get_int(root["cache"], "block_size", top.child("cache"), 16, 1); }) ==
        "s.yaml:1:21: cache.block_size: 0 is out of range (must be >= 1)");
  // A path covers the keys and elements below it, not its siblings or its parent.
  CHECK(*origins->find("workload.arrival.times_s[2]") ==
        "--set workload.arrival={process: timestamps}");
  CHECK(origins->find("workload.arrival_x") == nullptr);
  CHECK(origins->find("workload") == nullptr);
  CHECK(origins->find("scheduler.max_num_seqs") != nullptr);
  // The last argument that wrote a path wins.
  origins->add("scheduler", "--set scheduler={max_num_seqs: 0}");
  CHECK(*origins->find("scheduler.max_num_seqs") == "--set scheduler={max_num_seqs: 0}");
}

TEST_CASE("source_loc keeps a node's position, and config_error formats it", "[sim]") {
  YAML::Node root = load_yaml_string("trace:\n  path: t.csv\n", "s.yaml");
  const SourceLoc at = source_loc(root["trace"]["path"], YamlContext{"s.yaml", "trace.path"});
  CHECK(at.file == "s.yaml");
  CHECK(at.line == 2);
  CHECK(at.col == 9);
  CHECK(std::string(config_error(at, "no").what()) == "s.yaml:2:9: no");
  CHECK(std::string(config_error(SourceLoc{"--set a=1", 0, 0}, "no").what()) == "--set a=1: no");
  CHECK(key_node(root["trace"], "path").Mark().column == 2);
  CHECK_FALSE(key_node(root["trace"], "nope").IsDefined());
}
