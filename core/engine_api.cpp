#include "core/engine_api.h"

#include <array>

#include "core/common/assert.h"

namespace kvsim {
namespace {

constexpr std::array<ProfileInfo, 7> kProfiles = {{
    {Profile::kVllm072, "vllm-0.7.2", EngineFamily::kV1,
     "vLLM v0.7.2 V1: KVCacheManager + Scheduler (preallocation, chunked prefill, recompute "
     "preemption)"},
    {Profile::kVllm085, "vllm-0.8.5", EngineFamily::kV1,
     "vLLM v0.8.5.post1 V1: null block 0, no preallocation, last-block rule in the lookup, "
     "sliding-window manager, long_prefill_token_threshold"},
    {Profile::kVllm020, "vllm-0.20", EngineFamily::kV1,
     "vLLM v0.20.1 V1: KV cache coordinator with hybrid groups (full, sliding window, chunked "
     "local), full-sequence admission, stop tokens before length, priority policy, async "
     "scheduling"},
    {Profile::kVllm072V0, "vllm-0.7.2-v0", EngineFamily::kV0,
     "vLLM v0.7.2 V0: block space manager with GPU+CPU allocators, swapped queue, swap or "
     "recompute preemption, copy-on-write, watermark"},
    {Profile::kOrcaMax, "orca-max", EngineFamily::kContiguous,
     "Orca-style contiguous reservations of max_model_len slots per request (PagedAttention's "
     "Orca (Max))"},
    {Profile::kOrcaPow2, "orca-pow2", EngineFamily::kContiguous,
     "Orca-style contiguous reservations of the true length rounded up to a power of two "
     "(Orca (Pow2))"},
    {Profile::kOrcaOracle, "orca-oracle", EngineFamily::kContiguous,
     "Orca-style contiguous reservations of exactly the true length (Orca (Oracle))"},
}};

}  // namespace

std::span<const ProfileInfo> profiles() { return kProfiles; }

const ProfileInfo& profile_info(Profile p) {
  const auto i = static_cast<std::size_t>(p);
  KVSIM_ASSERT(i < kProfiles.size() && kProfiles[i].profile == p, "profile table out of order");
  return kProfiles[i];
}

std::optional<Profile> find_profile(std::string_view name) {
  for (const ProfileInfo& p : kProfiles)
    if (name == p.name) return p.profile;
  return std::nullopt;
}

std::string profile_names() {
  std::string s;
  for (const ProfileInfo& p : kProfiles) {
    if (!s.empty()) s += ", ";
    s += p.name;
  }
  return s;
}

void EngineCore::check_invariants() const { KVSIM_ASSERT_NO_VIOLATION(find_violation()); }

KVBreakdown EngineCore::kv_breakdown_by_group(std::span<const std::int64_t> final_kv_tokens,
                                              std::span<KVGroupShare> by_group) const {
  KVSIM_ASSERT(by_group.size() == 1, "kv_breakdown_by_group: one share per KV cache group");
  const KVBreakdown b = kv_breakdown(final_kv_tokens);
  const KVPoolStats pool = pool_stats();
  by_group[0] = KVGroupShare{pool.num_blocks - pool.num_free_blocks, b.token_states, b.reservation,
                             b.internal_fragmentation, b.cached_free};
  return b;
}

void EngineCore::add_forking_request(Request& /*parent*/, std::span<Request* const> /*children*/) {
  KVSIM_ASSERT(false, "add_forking_request: this engine family has no forks");
}

}  // namespace kvsim
