#include "sim/replay/replayer.h"
#include "sim/replay/v0_replayer.h"
#include "sim/replay/v1_replayer.h"

namespace kvsim {

std::unique_ptr<Replayer> make_replayer(Profile profile, ReplayOptions options) {
  switch (profile_info(profile).family) {
    case EngineFamily::kV1:
      return std::make_unique<V1Replayer>(profile, options);
    case EngineFamily::kV0:
      return std::make_unique<V0Replayer>(options);
    case EngineFamily::kContiguous:  // no op-trace protocol: nothing to replay against
      return nullptr;
  }
  return nullptr;
}

}  // namespace kvsim
