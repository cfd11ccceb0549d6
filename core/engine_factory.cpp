#include "core/engine_factory.h"

#include "core/common/assert.h"
#include "core/v0/scheduler.h"
#include "core/v1/scheduler.h"

namespace kvsim {

std::unique_ptr<EngineCore> make_engine(const EngineParams& params) {
  switch (profile_info(params.profile).family) {
    case EngineFamily::kV1:
      return std::make_unique<Scheduler>(params.scheduler, params.cache);
    case EngineFamily::kV0:
      return std::make_unique<v0::Scheduler>(
          v0::make_v0_config(params.scheduler, params.cache, params.v0));
  }
  KVSIM_ASSERT(false, "make_engine: no implementation for this profile's family");
  return nullptr;
}

}  // namespace kvsim
