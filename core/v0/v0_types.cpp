#include "core/v0/v0_types.h"

#include <cctype>
#include <iterator>

namespace kvsim::v0 {

namespace {
constexpr const char* kStatusNames[] = {
    "WAITING",          "RUNNING",         "SWAPPED", "FINISHED_STOPPED", "FINISHED_LENGTH_CAPPED",
    "FINISHED_ABORTED", "FINISHED_IGNORED"};
}  // namespace

const char* status_name(SeqStatus s) { return kStatusNames[static_cast<std::size_t>(s)]; }

bool parse_status(std::string_view name, SeqStatus& out) {
  for (std::size_t i = 0; i < std::size(kStatusNames); ++i) {
    const std::string_view n = kStatusNames[i];
    if (n.size() != name.size()) continue;
    bool eq = true;
    for (std::size_t k = 0; k < n.size() && eq; ++k)
      eq = std::toupper(static_cast<unsigned char>(name[k])) == n[k];
    if (eq) {
      out = static_cast<SeqStatus>(i);
      return true;
    }
  }
  return false;
}

const char* alloc_status_name(AllocStatus s) {
  switch (s) {
    case AllocStatus::kOk:
      return "OK";
    case AllocStatus::kLater:
      return "LATER";
    case AllocStatus::kNever:
      return "NEVER";
  }
  return "?";
}

void raise(const char* type, std::string message) { throw VllmError(type, message); }

}  // namespace kvsim::v0
