#pragma once
// The mamba prefix-caching mode of a model with mamba layers (Qwen3-Next's gated delta net,
// Mamba, Jamba, ...), chosen as vLLM v0.20.1 chooses it at start-up, and the settings it refuses
// with 'align'. vLLM's code, all at v0.20.1:
//   default of enable_prefix_caching   off for hybrid and attention-free models
//                                      (config/model.py:1749 is_prefix_caching_supported)
//   --mamba-cache-mode                 none | align | all, default none (config/cache.py:132)
//   the choice                         MambaModelConfig.verify_and_update_config
//                                      (model_executor/models/config.py:338-406), run for every
//                                      hybrid model (HybridAttentionMambaModelConfig, :195) and the
//                                      attention-free mamba models (config/vllm.py:1696-1719)
//   the refusals of 'align'            chunked prefill off (models/config.py:384); block_size >
//                                      max_num_batched_tokens, 0 < long_prefill_token_threshold <
//                                      block_size (config/vllm.py:1871-1880 validate_block_size,
//                                      with the block size after the hybrid alignment)
//   which models support 'all'         the classes declaring SupportsMambaPrefixCaching
//                                      (model_executor/models/interfaces.py:949; the table in
//                                      mamba_cache.cpp)
// The block sizes each mode gives (sim/config/model_layers.cpp, Platform._align_hybrid_block_size,
// platforms/interface.py:502-632): none: a mamba block holds max_model_len tokens (one state per
// request); align: the attention block size; all: the attention block size rounded to the
// model's mamba chunk size.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/common/kv_cache_spec.h"
#include "core/common/kv_pool_sizing.h"

namespace kvsim {

/// vLLM's name of a mode: "none", "align", "all".
[[nodiscard]] const char* mamba_cache_mode_name(MambaCacheMode m);
/// The mode named `name` ("none", "align", "all"), or nullopt.
[[nodiscard]] std::optional<MambaCacheMode> parse_mamba_cache_mode(std::string_view name);

/// True when vLLM v0.20.1's model class registered for `architecture` (a name of config.json's
/// `architectures`, e.g. "JambaForCausalLM") declares SupportsMambaPrefixCaching.
/// Qwen3NextForCausalLM does not. O(table).
[[nodiscard]] bool supports_mamba_prefix_caching(std::string_view architecture);
/// The architectures that do, comma-separated (for messages and docs).
[[nodiscard]] const char* mamba_prefix_caching_architectures();

/// What the engine is asked for, as far as the choice depends on it.
struct MambaCacheRequest {
  std::optional<bool> enable_prefix_caching;                // unset: vLLM's default for the model
  MambaCacheMode mamba_cache_mode = MambaCacheMode::kNone;  // --mamba-cache-mode as given
  bool speculative_decoding = false;  // a speculative config (kvsim simulates none)
};

/// The model facts the choice depends on.
struct MambaModelFacts {
  bool has_mamba_layers = false;               // hybrid or attention-free mamba model
  bool supports_mamba_prefix_caching = false;  // its architecture's class (table above)
  std::string architecture;                    // for vLLM's log lines
};

/// The resolved settings.
struct MambaCacheChoice {
  bool enable_prefix_caching = true;
  MambaCacheMode mode = MambaCacheMode::kNone;
  std::vector<std::string> log;  // vLLM's log lines of the choice ("warning: ...", "info: ...")
};

/// vLLM v0.20.1's choice. A model without mamba layers keeps the requested mode untouched (vLLM
/// runs no mamba config for it) and prefix caching on by default. With mamba layers: prefix
/// caching off by default; off -> none; on with mode none -> align when speculative decoding is
/// on and the model supports mamba prefix caching, else all if it supports it, else align; on
/// with all but no support -> align. O(1).
[[nodiscard]] MambaCacheChoice choose_mamba_cache_mode(const MambaModelFacts& model,
                                                       const MambaCacheRequest& request);

struct ModelConfig;
struct PoolRequest;

/// The choice for `model` asked `request` under a release's sizing rules: vLLM v0.20.1's
/// (choose_mamba_cache_mode with the model's facts; kvsim simulates no speculative decoding);
/// the older releases have no mamba modes (none) and the same prefix-caching default.
[[nodiscard]] MambaCacheChoice choose_mamba_cache_mode(const ModelConfig& model,
                                                       const PoolRequest& request,
                                                       KVSizingRules rules);

/// The scheduler settings 'align' is checked against.
struct MambaAlignLimits {
  std::int64_t block_size = 16;  // the attention block size after the hybrid alignment
  std::int64_t max_num_batched_tokens = 8192;
  std::int64_t long_prefill_token_threshold = 0;
  bool enable_chunked_prefill = true;
  bool has_mamba_layers = true;  // chunked prefill is checked for such a model only
};

/// A setting vLLM refuses: the scheduler key at fault (vLLM's name: "enable_chunked_prefill",
/// "max_num_batched_tokens", "long_prefill_token_threshold") and vLLM's error ("AssertionError:
/// ..."), naming the rule.
struct MambaAlignRefusal {
  std::string key;
  std::string message;
};

/// The first of vLLM's 'align' checks that `limits` fail, in vLLM's order; nullopt for another
/// mode or when all pass. The block-size checks (validate_block_size) apply to any model asked
/// for 'align'; the chunked-prefill one (MambaModelConfig) to models with mamba layers. O(1).
[[nodiscard]] std::optional<MambaAlignRefusal> check_mamba_align(MambaCacheMode mode,
                                                                 const MambaAlignLimits& limits);

}  // namespace kvsim
