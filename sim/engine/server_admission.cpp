#include "sim/engine/server_admission.h"

#include <algorithm>

#include "core/common/assert.h"

namespace kvsim {

std::optional<std::int64_t> ServerAdmission::engine_max_tokens(
    std::int64_t prompt_tokens, std::optional<std::int64_t> client_max_tokens,
    std::int64_t max_model_len) const {
  KVSIM_ASSERT(!client_max_tokens || *client_max_tokens >= 1, "max_tokens must be at least 1");
  // An empty prompt, or one that leaves no room for a generated token, is refused whatever the
  // client asks (processor.py; serving_engine.py without max_tokens).
  if (prompt_tokens <= 0 || prompt_tokens >= max_model_len) return std::nullopt;
  const std::int64_t room = max_model_len - prompt_tokens;
  if (!client_max_tokens) return room;
  if (*client_max_tokens > room && overflow == Overflow::kRefuse) return std::nullopt;
  return std::min(*client_max_tokens, room);
}

ServerAdmission server_admission(Profile profile) {
  switch (profile) {
    case Profile::kVllm072:
      return ServerAdmission{ServerAdmission::Overflow::kRefuse};
  }
  KVSIM_ASSERT(false, "unknown profile");
  return {};
}

}  // namespace kvsim
