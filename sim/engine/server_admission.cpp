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
    case Profile::kVllm072V0:  // the same server in front of the V0 engine (its empty-prompt check:
                               // engine/llm_engine.py _validate_model_inputs)
    case Profile::kVllm085:    // _validate_input unchanged (v0.8.5.post1 serving_engine.py:214-267)
      return kRefuseOverflowAdmission;
    case Profile::kOrcaMax:
    case Profile::kOrcaPow2:
    case Profile::kOrcaOracle:
      // The contiguous baselines have no server of their own: they are served as vLLM v0.7.2
      // serves, so a workload is refused alike under every profile it is compared across.
      return kRefuseOverflowAdmission;
    case Profile::kVllm020:  // clamps (v0.20.1 entrypoints/utils.py:174-202)
      return kClampOverflowAdmission;
  }
  KVSIM_ASSERT(false, "server_admission: a profile without a server rule");
  return kRefuseOverflowAdmission;
}

}  // namespace kvsim
