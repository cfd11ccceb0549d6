#include "core/common/request.h"

#include <algorithm>
#include <utility>

namespace kvsim {

Request::Request(std::int64_t index, std::vector<Token> prompt, SamplingLimits lim,
                 std::vector<MMPlaceholder> mm, std::int64_t output_capacity)
    : limits(std::move(lim)),
      mm_positions(std::move(mm)),
      index_(index),
      num_prompt_tokens_(static_cast<std::int64_t>(prompt.size())),
      all_token_ids_(std::move(prompt)) {
  if (output_capacity < 0) output_capacity = std::min<std::int64_t>(limits.max_tokens, 1 << 16);
  all_token_ids_.reserve(all_token_ids_.size() + static_cast<std::size_t>(output_capacity));
}

void Request::append_next_outputs(std::int64_t n) {
  const auto k = static_cast<std::size_t>(num_output_tokens());
  const std::size_t from_plan =
      k < planned_outputs.size()
          ? std::min(planned_outputs.size() - k, static_cast<std::size_t>(n))
          : 0;
  all_token_ids_.insert(all_token_ids_.end(), planned_outputs.begin() + static_cast<std::ptrdiff_t>(k),
                        planned_outputs.begin() + static_cast<std::ptrdiff_t>(k + from_plan));
  all_token_ids_.resize(all_token_ids_.size() + (static_cast<std::size_t>(n) - from_plan),
                        sampled_token);
}

const char* status_name(RequestStatus s) {
  switch (s) {
    case RequestStatus::kWaiting:
      return "WAITING";
    case RequestStatus::kRunning:
      return "RUNNING";
    case RequestStatus::kPreempted:
      return "PREEMPTED";
    case RequestStatus::kWaitingForRemoteKvs:
      return "WAITING_FOR_REMOTE_KVS";
    case RequestStatus::kFinishedStopped:
      return "FINISHED_STOPPED";
    case RequestStatus::kFinishedLengthCapped:
      return "FINISHED_LENGTH_CAPPED";
    case RequestStatus::kFinishedAborted:
      return "FINISHED_ABORTED";
  }
  return "?";
}

const char* finish_reason(RequestStatus s) {
  switch (s) {
    case RequestStatus::kFinishedStopped:
      return "stop";
    case RequestStatus::kFinishedLengthCapped:
      return "length";
    case RequestStatus::kFinishedAborted:
      return "abort";
    default:
      return nullptr;
  }
}

}  // namespace kvsim
