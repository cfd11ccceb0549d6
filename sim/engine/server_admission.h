#pragma once
// ServerAdmission: what vLLM's OpenAI server does with a request before the engine sees it --
// refuse it, or hand the engine a max_tokens. A named policy per release (kRefuseOverflowAdmission,
// kClampOverflowAdmission), selected by the profile (server_admission(profile)); the simulator
// applies it at each arrival. vllm-0.7.2-v0 has v0.7.2's server; the contiguous orca-* baselines
// are served like vLLM v0.7.2.
//
// vLLM v0.7.2 and v0.8.5.post1 (the same code): the server's _validate_input
// (vllm/entrypoints/openai/serving_engine.py:238-252 at v0.7.2, :251-265 at v0.8.5.post1) refuses
// prompt + max_tokens > max_model_len when the client sends max_tokens, and prompt >= max_model_len
// when it does not; the V1 processor refuses an empty prompt (vllm/v1/engine/processor.py:208-209
// at v0.7.2, :346-350 at v0.8.5.post1). The engine's max_tokens is then
// min(max_model_len - prompt, the client's max_tokens) (vllm/entrypoints/openai/protocol.py:420-424
// with default_max_tokens = max_model_len - prompt, serving_completion.py:120), so a request
// without one is capped at max_model_len ("length").
// vLLM v0.20 clamps an oversized max_tokens to max_model_len - prompt instead of refusing
// (entrypoints/utils.py:174-202; kClampOverflowAdmission), refusing only prompt >= max_model_len;
// its profile, when it lands, selects that rule in server_admission().

#include <cstdint>
#include <optional>

#include "core/engine_api.h"

namespace kvsim {

struct ServerAdmission {
  /// What the server does when prompt + the client's max_tokens exceeds max_model_len.
  enum class Overflow : std::uint8_t {
    kRefuse,  // HTTP 400 (v0.7.2, v0.8.5)
    kClamp,   // max_tokens = max_model_len - prompt (v0.20)
  };
  Overflow overflow = Overflow::kRefuse;

  /// The max_tokens the engine gets for a prompt of `prompt_tokens` tokens and the client's
  /// `client_max_tokens` (nullopt: not sent; else >= 1), or nullopt when the server refuses the
  /// request. The result is in [1, max_model_len - prompt_tokens]. O(1).
  std::optional<std::int64_t> engine_max_tokens(std::int64_t prompt_tokens,
                                                std::optional<std::int64_t> client_max_tokens,
                                                std::int64_t max_model_len) const;
};

/// vLLM v0.7.2 (V1 and V0) and v0.8.5.post1: refuse prompt + max_tokens > max_model_len.
inline constexpr ServerAdmission kRefuseOverflowAdmission{ServerAdmission::Overflow::kRefuse};
/// vLLM v0.20 (profile vllm-0.20): clamp max_tokens to max_model_len - prompt.
inline constexpr ServerAdmission kClampOverflowAdmission{ServerAdmission::Overflow::kClamp};

/// The server rule of `profile`'s release (every profile names one: a switch over Profile).
ServerAdmission server_admission(Profile profile);

}  // namespace kvsim
