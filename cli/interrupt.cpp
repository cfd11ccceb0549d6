#include "cli/interrupt.h"

#include "core/common/assert.h"

namespace kvsim::cli {
namespace {

volatile std::sig_atomic_t g_signal = 0;
bool g_scope_alive = false;

extern "C" void record_signal(int sig) { g_signal = sig; }

}  // namespace

InterruptScope::InterruptScope() {
  KVSIM_ASSERT(!g_scope_alive, "one InterruptScope at a time");
  g_scope_alive = true;
  struct sigaction sa {};
  sa.sa_handler = record_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking wait returns EINTR
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
}

InterruptScope::~InterruptScope() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  g_scope_alive = false;
}

const volatile std::sig_atomic_t* InterruptScope::flag() { return &g_signal; }

int interrupt_signal() { return g_signal; }

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "a signal";
  }
}

}  // namespace kvsim::cli
