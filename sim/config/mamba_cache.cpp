#include "sim/config/mamba_cache.h"

#include <fmt/format.h>

#include <algorithm>

#include "sim/config/hardware.h"
#include "sim/config/layer_specs.h"
#include "sim/config/model_config.h"

namespace kvsim {

namespace {

// The architectures (model_executor/models/registry.py names) whose class declares
// SupportsMambaPrefixCaching at v0.20.1, with where. Every other hybrid or mamba model -- among
// them Qwen3NextForCausalLM (qwen3_next.py:685), Qwen3.5, Kimi Linear, MiniMax, Lfm2, Plamo2 and
// OlmoHybrid -- gets 'align' when prefix caching is on.
constexpr std::string_view kSupportingArchitectures[] = {
    "BambaForCausalLM",                // bamba.py:396
    "FalconH1ForCausalLM",             // falcon_h1.py:557
    "FalconMambaForCausalLM",          // registry.py:108 -> mamba.py MambaForCausalLM
    "GraniteMoeHybridForCausalLM",     // granitemoehybrid.py:582
    "JambaForCausalLM",                // jamba.py:463
    "JambaForSequenceClassification",  // jamba.py:584 (subclass of JambaForCausalLM)
    "Mamba2ForCausalLM",               // mamba2.py:190
    "MambaForCausalLM",                // mamba.py:192
    "NemotronHForCausalLM",            // nemotron_h.py:765
    "NemotronHPuzzleForCausalLM",      // registry.py:177 -> nemotron_h.py NemotronHForCausalLM
    "Zamba2ForCausalLM",               // zamba2.py:836
};

}  // namespace

const char* mamba_cache_mode_name(MambaCacheMode m) {
  switch (m) {
    case MambaCacheMode::kNone:
      return "none";
    case MambaCacheMode::kAlign:
      return "align";
    case MambaCacheMode::kAll:
      return "all";
  }
  return "none";
}

std::optional<MambaCacheMode> parse_mamba_cache_mode(std::string_view name) {
  for (MambaCacheMode m : {MambaCacheMode::kNone, MambaCacheMode::kAlign, MambaCacheMode::kAll})
    if (name == mamba_cache_mode_name(m)) return m;
  return std::nullopt;
}

bool supports_mamba_prefix_caching(std::string_view architecture) {
  return std::find(std::begin(kSupportingArchitectures), std::end(kSupportingArchitectures),
                   architecture) != std::end(kSupportingArchitectures);
}

const char* mamba_prefix_caching_architectures() {
  static const std::string names = [] {
    std::string s;
    for (std::string_view a : kSupportingArchitectures)
      s += (s.empty() ? "" : ", ") + std::string(a);
    return s;
  }();
  return names.c_str();
}

MambaCacheChoice choose_mamba_cache_mode(const MambaModelFacts& model,
                                         const MambaCacheRequest& request) {
  MambaCacheChoice c;
  c.mode = request.mamba_cache_mode;
  // is_prefix_caching_supported (config/model.py:1749): off for hybrid and attention-free models.
  c.enable_prefix_caching = request.enable_prefix_caching.value_or(!model.has_mamba_layers);
  if (!model.has_mamba_layers) return c;
  const bool supports = model.supports_mamba_prefix_caching;
  const std::string& arch = model.architecture;
  if (!c.enable_prefix_caching) {  // models/config.py:399-406
    if (c.mode != MambaCacheMode::kNone) {
      c.mode = MambaCacheMode::kNone;
      c.log.emplace_back(
          "warning: Mamba cache mode is set to 'none' when prefix caching is disabled");
    }
    return c;
  }
  if (c.mode == MambaCacheMode::kNone) {  // :352-372
    if (supports && request.speculative_decoding) {
      c.mode = MambaCacheMode::kAlign;
      c.log.push_back(fmt::format(
          "warning: Mamba cache mode is set to 'align' for {} by default when prefix caching and "
          "speculative decoding are enabled",
          arch));
    } else {
      c.mode = supports ? MambaCacheMode::kAll : MambaCacheMode::kAlign;
      c.log.push_back(fmt::format(
          "warning: Mamba cache mode is set to '{}' for {} by default when prefix caching is "
          "enabled",
          mamba_cache_mode_name(c.mode), arch));
    }
  }
  if (c.mode == MambaCacheMode::kAll && !supports) {  // :373-382
    c.mode = MambaCacheMode::kAlign;
    c.log.emplace_back(
        "warning: Hybrid or mamba-based model detected without support for prefix caching with "
        "Mamba cache 'all' mode: falling back to 'align' mode.");
  }
  c.log.push_back(fmt::format(
      "info: Warning: Prefix caching in Mamba cache '{}' mode is currently enabled. Its support "
      "for Mamba layers is experimental. Please report any issues you may observe.",
      mamba_cache_mode_name(c.mode)));
  return c;
}

MambaCacheChoice choose_mamba_cache_mode(const ModelConfig& model, const PoolRequest& request,
                                         KVSizingRules rules) {
  MambaModelFacts facts;
  facts.has_mamba_layers = has_mamba_layers(model);
  facts.supports_mamba_prefix_caching = model.supports_mamba_prefix_caching();
  facts.architecture = model.architecture();
  MambaCacheRequest r;
  r.enable_prefix_caching = request.enable_prefix_caching;
  if (rules != KVSizingRules::kV020Hybrid) {
    MambaCacheChoice c;
    c.enable_prefix_caching = r.enable_prefix_caching.value_or(!facts.has_mamba_layers);
    return c;
  }
  r.mamba_cache_mode = request.mamba_cache_mode;
  return choose_mamba_cache_mode(facts, r);
}

std::optional<MambaAlignRefusal> check_mamba_align(MambaCacheMode mode,
                                                   const MambaAlignLimits& limits) {
  if (mode != MambaCacheMode::kAlign) return std::nullopt;
  if (limits.has_mamba_layers && !limits.enable_chunked_prefill)  // models/config.py:383-386
    return MambaAlignRefusal{
        "enable_chunked_prefill",
        "AssertionError: Chunked prefill is required for mamba cache mode 'align'. "
        "(vllm/model_executor/models/config.py:384)"};
  if (limits.block_size > limits.max_num_batched_tokens)  // config/vllm.py:1872-1877
    return MambaAlignRefusal{
        "max_num_batched_tokens",
        fmt::format("AssertionError: In Mamba cache align mode, block_size ({}) must be <= "
                    "max_num_batched_tokens ({}). (vllm/config/vllm.py:1873)",
                    limits.block_size, limits.max_num_batched_tokens)};
  if (limits.long_prefill_token_threshold > 0 &&
      limits.long_prefill_token_threshold < limits.block_size)  // config/vllm.py:1879-1880
    return MambaAlignRefusal{
        "long_prefill_token_threshold",
        fmt::format("AssertionError: in Mamba cache align mode, long_prefill_token_threshold ({}) "
                    "must be >= block_size ({}) (vllm/config/vllm.py:1880)",
                    limits.long_prefill_token_threshold, limits.block_size)};
  return std::nullopt;
}

}  // namespace kvsim
