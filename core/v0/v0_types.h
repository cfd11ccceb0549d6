#pragma once
// Basic types of the vLLM V0 engine (vllm/core/**, vllm/sequence.py at v0.7.2): sequence ids and
// statuses, allocation answers, devices, and VllmError, the exception that stands for a Python
// exception vLLM's own code raises (spec: shared/spec/vllm-v0-semantics.md).

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <utility>

namespace kvsim::v0 {

/// vLLM's seq_id: an integer from the engine's counter (or given explicitly by an op trace).
using SeqId = std::int64_t;

/// Dense index of a sequence's state inside the BlockManager (stable while the manager or a live
/// Sequence refers to it). Not a vLLM concept: it keeps the hot paths off the seq_id map.
using SeqSlot = std::int32_t;
constexpr SeqSlot kNoSlot = -1;

/// vLLM's SequenceStatus, in its numeric order (finished <=> > kSwapped).
enum class SeqStatus : std::uint8_t {
  kWaiting = 0,
  kRunning = 1,
  kSwapped = 2,
  kFinishedStopped = 3,
  kFinishedLengthCapped = 4,
  kFinishedAborted = 5,
  kFinishedIgnored = 6,
};
inline bool is_finished(SeqStatus s) { return s > SeqStatus::kSwapped; }
/// The SequenceStatus name ("WAITING", ..., "FINISHED_IGNORED").
const char* status_name(SeqStatus s);
/// Case-insensitive parse of a status name; false if unknown.
bool parse_status(std::string_view name, SeqStatus& out);

/// vLLM's AllocStatus.
enum class AllocStatus : std::uint8_t { kOk, kLater, kNever };
const char* alloc_status_name(AllocStatus s);  // "OK", "LATER", "NEVER"

enum class Device : std::uint8_t { kGpu = 0, kCpu = 1 };

enum class PreemptionMode : std::uint8_t { kSwap, kRecompute };

/// A (source, destination) block pair of a swap mapping or a copy-on-write.
using BlockIdPair = std::pair<std::int32_t, std::int32_t>;

/// An exception of vLLM's own code (AssertionError, KeyError, ValueError, RuntimeError,
/// NoFreeBlocksError, IndexError...). what() is "<Type>: <message>". The engine's state after one
/// is whatever vLLM's would be at the same point (the scheduler's engine treats it as fatal).
class VllmError : public std::exception {
 public:
  VllmError(std::string_view type, std::string_view message)
      : what_(std::string(type) + ": " + std::string(message)) {}
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

/// Throws VllmError(type, message). Out of line: keeps the throwing code off the hot paths.
[[noreturn]] void raise(const char* type, std::string message);

/// `assert cond` in vLLM's code: throws AssertionError(message) when cond is false.
inline void vllm_assert(bool cond, const char* message) {
  if (!cond) [[unlikely]]
    raise("AssertionError", message);
}

}  // namespace kvsim::v0
