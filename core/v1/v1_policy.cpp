#include "core/v1/v1_policy.h"

#include "core/common/assert.h"

namespace kvsim {

const V1Policy& v1_policy(Profile p) {
  switch (p) {
    case Profile::kVllm072:
      return kVllm072Policy;
    case Profile::kVllm085:
      return kVllm085Policy;
    default:  // the other families' profiles
      break;
  }
  KVSIM_ASSERT(false, "v1_policy: not a profile of the V1 family");
  return kVllm072Policy;
}

}  // namespace kvsim
