#include "core/engine_factory.h"

#include "core/common/assert.h"
#include "core/contiguous/contiguous_scheduler.h"
#include "core/v1/scheduler.h"

namespace kvsim {

std::unique_ptr<EngineCore> make_engine(const EngineParams& params) {
  switch (profile_info(params.profile).family) {
    case EngineFamily::kV1:
      return std::make_unique<Scheduler>(params.scheduler, params.cache);
    case EngineFamily::kContiguous: {
      ContiguousPolicy policy = contiguous_policy(params.profile);
      policy.fit = params.contiguous_fit;
      return std::make_unique<ContiguousScheduler>(params.profile, policy, params.scheduler,
                                                   params.cache);
    }
  }
  KVSIM_ASSERT(false, "make_engine: no implementation for this profile's family");
  return nullptr;
}

}  // namespace kvsim
