#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "sim/engine/latency_model.h"
#include "sim/common/rng.h"
#include "sim/workload/samplers.h"
#include "sim_test_util.h"

using namespace kvsim;

namespace {

/// The model of a `latency:` section as a scenario parses it.
std::unique_ptr<LatencyModel> latency_model(const YAML::Node& latency, const YamlContext& ctx,
                                            const ModelConfig& m, const GpuPreset& gpu, int tp) {
  return make_latency_model(parse_latency_config(latency, ctx), m, gpu, tp);
}
std::string model_path(const std::string& name) {
  return std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/" + name + ".json";
}
const std::array<double, 6> kTruth = {800.0, 0.12, 9.0, 0.004, 2e-7, 15.0};

std::vector<BatchFeatures> random_batches(std::size_t n, std::vector<double>& y, double noise_us) {
  RngStream r = make_stream(5, "calibrate");
  std::vector<BatchFeatures> out;
  for (std::size_t i = 0; i < n; ++i) {
    BatchFeatures b;
    b.num_seqs = uniform_int(r, 1, 256);
    b.num_prefill_seqs = uniform_int(r, 0, std::min<std::int64_t>(4, b.num_seqs));
    b.prefill_tokens = b.num_prefill_seqs * uniform_int(r, 0, 2048);
    b.decode_tokens = b.num_seqs - b.num_prefill_seqs;
    double sq = 0;
    std::int64_t sum = 0;
    for (std::int64_t s = 0; s < b.num_seqs; ++s) {
      const std::int64_t c = uniform_int(r, 1, 8192);
      sum += c;
      sq += static_cast<double>(c) * static_cast<double>(c);
    }
    b.sum_context_tokens = sum;
    b.sum_context_sq = sq;
    LatencyFit truth;
    truth.coefficients_us = kTruth;
    y.push_back(truth.predict_us(b) + noise_us * standard_normal(r));
    out.push_back(b);
  }
  return out;
}
}  // namespace

TEST_CASE("calibration recovers known coefficients from synthetic steps", "[sim]") {
  std::vector<double> y;
  const auto batches = random_batches(2000, y, 0.0);
  const LatencyFit fit = fit_latency(batches, y);
  for (std::size_t i = 0; i < 6; ++i)
    CHECK(fit.coefficients_us[i] == Approx(kTruth[i]).epsilon(1e-6));
  CHECK(fit.r2 == Approx(1.0).margin(1e-9));
  CHECK(fit.rmse_us < 1e-6);

  std::vector<double> noisy;
  const auto b2 = random_batches(4000, noisy, 20.0);
  const LatencyFit nf = fit_latency(b2, noisy);
  CHECK(nf.rmse_us == Approx(20.0).epsilon(0.1));
  CHECK(nf.coefficients_us[2] == Approx(kTruth[2]).epsilon(0.05));
  CHECK(nf.r2 > 0.99);
}

TEST_CASE("a fit written as YAML is read back by the fitted latency model", "[sim]") {
  std::vector<double> y;
  const auto batches = random_batches(200, y, 0.0);
  const LatencyFit fit = fit_latency(batches, y);
  const auto dir = std::filesystem::temp_directory_path() / "kvsim_test_latency";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "fit.yaml").string();
  std::ofstream(path) << fit_to_yaml(fit, "measurements.csv");
  const ModelConfig m = load_model_config_file(model_path("qwen2-1.5b"));
  const YamlContext ctx{"s.yaml", "latency"};
  auto model = latency_model(YAML::Load("{model: fitted, file: '" + path + "'}"), ctx, m,
                             gpu_preset("H100-80GB"), 1);
  for (std::size_t i = 0; i < 10; ++i)
    CHECK(static_cast<double>(model->step_time_ns(batches[i])) == Approx(y[i] * 1e3).margin(1.0));
  CHECK_THROWS_WITH(latency_model(YAML::Load("{model: fited}"), ctx, m, gpu_preset("H100-80GB"), 1),
                    Catch::Contains("did you mean 'fitted'?"));
}

TEST_CASE("the roofline model is memory-bound in decode and compute-bound in long prefill",
          "[sim]") {
  const ModelConfig m = load_model_config_file(model_path("llama-3.1-8b"));
  const GpuPreset h100 = gpu_preset("H100-80GB");
  const YamlContext ctx{"s.yaml", "latency"};
  auto model = latency_model(YAML::Node(), ctx, m, h100, 1);
  BatchFeatures decode{.num_seqs = 1,
                       .prefill_tokens = 0,
                       .decode_tokens = 1,
                       .sum_context_tokens = 1,
                       .sum_context_sq = 1,
                       .num_prefill_seqs = 0};
  // One decode step reads the weights once: 16.06 GB / (3.35 TB/s * 0.8) = 5.99 ms, + 1 ms
  // overhead.
  const double expect_ms = static_cast<double>(m.weight_bytes()) / (3.35e12 * 0.8) * 1e3 + 1.0;
  CHECK(static_cast<double>(model->step_time_ns(decode)) / 1e6 == Approx(expect_ms).epsilon(1e-3));
  BatchFeatures prefill{.num_seqs = 1,
                        .prefill_tokens = 8192,
                        .decode_tokens = 0,
                        .sum_context_tokens = 8192,
                        .sum_context_sq = 8192.0 * 8192.0,
                        .num_prefill_seqs = 1};
  const double flops = 2.0 * static_cast<double>(m.num_active_parameters) * 8192 +
                       4.0 * 32 * 4096 * (0.5 * (8192.0 * 8192.0 + 8192));
  CHECK(static_cast<double>(model->step_time_ns(prefill)) / 1e6 ==
        Approx(flops / (989.4e12 * 0.5) * 1e3 + 1.0).epsilon(1e-3));
  // More context costs more; tensor parallelism makes a step cheaper.
  BatchFeatures big = decode;
  big.num_seqs = big.decode_tokens = 64;
  big.sum_context_tokens = 64 * 4000;
  CHECK(model->step_time_ns(big) > model->step_time_ns(decode));
  auto tp4 = latency_model(YAML::Load("{model: roofline, mbu: 0.8}"), ctx, m, h100, 4);
  CHECK(tp4->step_time_ns(big) < model->step_time_ns(big));
  auto c = latency_model(YAML::Load("{model: constant, step_time_us: 2500}"), ctx, m, h100, 1);
  CHECK(c->step_time_ns(big) == 2'500'000);
}

TEST_CASE("kvsim calibrate writes a model file and rejects bad input", "[sim]") {
  const std::string exe = kvsim::test::kvsim_exe();
  const kvsim::test::TempDir tmp("calibrate");
  const auto& dir = tmp.path;
  std::vector<double> y;
  const auto batches = random_batches(100, y, 0.0);
  {
    std::ofstream csv(dir / "m.csv");
    csv << "num_seqs,prefill_tokens,decode_tokens,sum_context_tokens,sum_context_sq,num_prefill_"
           "seqs,step_time_us\n";
    for (std::size_t i = 0; i < batches.size(); ++i) {
      const auto& b = batches[i];
      csv << b.num_seqs << ',' << b.prefill_tokens << ',' << b.decode_tokens << ','
          << b.sum_context_tokens << ',' << fmt::format("{:.17g}", b.sum_context_sq) << ','
          << b.num_prefill_seqs << ',' << fmt::format("{:.17g}", y[i]) << '\n';
    }
    std::ofstream bad(dir / "bad.csv");
    bad << "num_seqs,prefill_tokens,decode_tokens,sum_context_tokens,sum_context_sq,step_time_"
           "us\n1,2,3,4,5,x\n";
  }
  const std::string d = dir.string();
  CHECK(std::system(
            (exe + " calibrate " + d + "/m.csv -o " + d + "/fit.yaml > /dev/null").c_str()) == 0);
  const LatencyFit fit = load_fit_file(d + "/fit.yaml");
  CHECK(fit.coefficients_us[2] == Approx(kTruth[2]).epsilon(1e-6));
  const int rc = std::system(
      (exe + " calibrate " + d + "/bad.csv -o " + d + "/x.yaml 2> " + d + "/err.txt").c_str());
  CHECK(WEXITSTATUS(rc) == 2);
  std::ifstream err(d + "/err.txt");
  std::string line;
  std::getline(err, line);
  CHECK(line.find("bad.csv:2:1: step_time_us: expected a number >= 0, got 'x'") !=
        std::string::npos);
}
