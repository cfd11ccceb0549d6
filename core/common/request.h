#pragma once
// Request: vLLM v1's Request (vllm/v1/request.py) as the core needs it: tokens, progress, sampling
// limits, multimodal placeholders, the per-request block-hash list and the block table.

#include <boost/container/small_vector.hpp>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/common/types.h"

namespace kvsim {

enum class RequestStatus : std::uint8_t {
  kWaiting,
  kRunning,
  kPreempted,
  kWaitingForRemoteKvs,  // vLLM v0.20: waiting for a KV connector's load (core/v1/kv_connector.h)
  kFinishedStopped,
  kFinishedLengthCapped,
  kFinishedAborted,
};

/// vLLM's status name (WAITING, RUNNING, PREEMPTED, FINISHED_STOPPED, ...).
const char* status_name(RequestStatus s);
/// vLLM's finish reason for a finished status ("stop", "length", "abort"), nullptr otherwise.
const char* finish_reason(RequestStatus s);
inline bool is_finished(RequestStatus s) { return s >= RequestStatus::kFinishedStopped; }

/// A multimodal placeholder: prompt positions [offset, offset + length) and its content hash.
struct MMPlaceholder {
  std::int64_t offset = 0;
  std::int64_t length = 0;
  std::string hash;
};

/// Sampling limits checked after each generated token (vLLM's SamplingParams subset).
struct SamplingLimits {
  std::int64_t max_tokens = 16;
  /// vLLM v0.20's check_stop: no stop of any kind before this many outputs (earlier V1 releases
  /// kvsim reproduces have no min_tokens in their scheduler).
  std::int64_t min_tokens = 0;
  std::optional<Token> eos_token_id;
  bool ignore_eos = false;
  std::vector<Token> stop_token_ids;
};

/// One KV cache group's part of a request under vLLM v0.9+'s KV cache coordinator: the group's
/// single-type manager's req_to_blocks[request_id] and num_cached_block[request_id] entries.
struct KVGroupTable {
  std::vector<BlockId> blocks;         // the group's block table (block 0 = the null block)
  std::int64_t num_cached_block = -1;  // -1: no num_cached_block entry
  bool has_entry = false;  // req_to_blocks has an entry (a defaultdict: an empty table counts)
  // Mamba 'align' (MambaManager): blocks were allocated since the request's tables were last
  // freed (_allocated_block_reqs), and the index of the state block to free once passed
  // (last_state_block_idx; -1: none).
  bool mamba_allocated = false;
  std::int64_t mamba_last_state_block = -1;
};

class Request {
 public:
  /// `index` is a dense caller-chosen id (the simulator's request number, the replay's slot).
  /// The token list gets room for `output_capacity` generated tokens, so decoding does not
  /// reallocate it; -1 means min(limits.max_tokens, 2^16).
  Request(std::int64_t index, std::vector<Token> prompt, SamplingLimits limits,
          std::vector<MMPlaceholder> mm = {}, std::int64_t output_capacity = -1);

  std::int64_t index() const { return index_; }
  std::int64_t num_tokens() const { return static_cast<std::int64_t>(all_token_ids_.size()); }
  std::int64_t num_prompt_tokens() const { return num_prompt_tokens_; }
  std::int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens_; }
  const std::vector<Token>& all_token_ids() const { return all_token_ids_; }
  void append_output_token(Token t) { all_token_ids_.push_back(t); }
  /// Moves the tokens out (prompt then outputs) of a request that is done: afterwards it has no
  /// tokens and must not be scheduled again.
  std::vector<Token> take_token_ids() { return std::move(all_token_ids_); }

  std::int64_t num_computed_tokens = 0;
  RequestStatus status = RequestStatus::kWaiting;
  std::optional<Token> stop_reason;  // the stop token that finished it, if any
  SamplingLimits limits;
  std::vector<MMPlaceholder> mm_positions;  // sorted by offset

  /// vLLM's request.kv_block_hashes: computed once (when empty) by get_computed_blocks, extended
  /// by caching, never truncated. Each entry holds a BlockHashTable reference (owned by the
  /// KVCacheManager that created it; call KVCacheManager::release_request before dropping it).
  std::vector<HashId> block_hashes;
  /// vLLM's req_to_blocks[request_id]: the block table. Only KVCacheManager mutates it.
  std::vector<BlockId> blocks;
  /// vLLM v0.8.5's num_cached_block[request_id]: how many blocks of the table are cached; -1 when
  /// it has no entry (before its first allocation, after free). Only KVCacheManager mutates it.
  std::int64_t num_cached_block = -1;
  /// The request asks for prompt logprobs (sampling_params.prompt_logprobs is not None): vLLM
  /// v0.8.5 gives it no prefix-cache hit.
  bool wants_prompt_logprobs = false;

  // ---- vLLM v0.20 (policy kv_cache_coordinator) ----------------------------------------------
  /// One table per KV cache group (sized by the manager; `blocks` and `num_cached_block` above
  /// are unused). Only KVCacheManager mutates them. Two groups live inside the request (one
  /// cache miss less per request and step).
  boost::container::small_vector<KVGroupTable, 2> kv_groups;
  /// vLLM hashes a prompt when the request is created and extends the list on every append;
  /// kvsim computes the list when something reads it (KVCacheCoordinator::sync_block_hashes),
  /// exactly what vLLM would hold: the prompt's blocks as of when it was added (this count; -1:
  /// hashed already, or no caching), then the blocks appended tokens completed since.
  std::int64_t deferred_hash_tokens = -1;
  /// AsyncScheduler: outputs scheduled but not yet received; set when a reset of the prefix
  /// cache preempted the request while its token was in flight (that token is dropped).
  std::int64_t num_output_placeholders = 0;
  bool discard_latest_async_tokens = false;
  /// Extra keys of its block hashes: the LoRA adapter's name (every block) and the cache salt
  /// (block 0 only, when not empty); multimodal items come from mm_positions.
  std::optional<std::string> lora_name;
  std::optional<std::string> cache_salt;
  /// The priority policy's order: lower (priority, arrival_time, request_id) first, then the
  /// index. request_id is the caller's name of the request (the replayer's id; may stay empty).
  std::int64_t priority = 0;
  double arrival_time = 0;
  std::string request_id;

  /// Scheduler bookkeeping for the step in flight: tokens scheduled (0 = not scheduled) and the
  /// token the model sampled for it, set by the caller before Scheduler::update_from_output.
  std::int64_t num_scheduled_tokens = 0;
  Token sampled_token = 0;
  /// The tokens the model will sample for this request, in order, when the caller knows them up
  /// front (the simulator plans every output): engines then take output k from here rather than
  /// from sampled_token, which needs no per-step write (nor one for steps still in flight).
  std::span<const Token> planned_outputs;
  /// Output `k` (0-based) as an engine appends it: planned_outputs[k] while the plan lasts, else
  /// sampled_token.
  Token planned_output(std::int64_t k) const {
    return static_cast<std::size_t>(k) < planned_outputs.size()
               ? planned_outputs[static_cast<std::size_t>(k)]
               : sampled_token;
  }
  /// What an engine appends as the next output.
  Token next_sampled_token() const { return planned_output(num_output_tokens()); }
  /// Appends the next `n` outputs, those n appends of next_sampled_token() would (a fast-forward
  /// run's tokens, at once).
  void append_next_outputs(std::int64_t n);
  /// Times this request was preempted.
  std::int32_t num_preemptions = 0;
  /// The tokens (prompt + every generated token) the request will hold when it finishes, -1
  /// when unknown. Known to oracle policies only: the simulator sets it (it decides every output
  /// length), a real engine cannot know it. Read by the contiguous orca-pow2 and orca-oracle
  /// profiles to size their reservations.
  std::int64_t oracle_final_num_tokens = -1;

 private:
  std::int64_t index_;
  std::int64_t num_prompt_tokens_;
  std::vector<Token> all_token_ids_;
};

}  // namespace kvsim
