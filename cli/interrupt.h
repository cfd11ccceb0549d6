#pragma once
// Ctrl-C and SIGTERM for the commands that write run folders (run, sweep, validate): while an
// InterruptScope lives, SIGINT and SIGTERM only record the signal; the simulator polls the flag
// (RunOptions::interrupt) and throws, the run folder's temporary `<name>.tmp-<pid>/` is removed
// on the way out, and main() exits 128 + the signal's number (130 for SIGINT, 143 for SIGTERM)
// with the error on one line.

#include <signal.h>

#include <csignal>

namespace kvsim::cli {

/// SIGINT / SIGTERM recorded instead of ending the process, for as long as it lives.
class InterruptScope {
 public:
  /// Installs the recording handlers for SIGINT and SIGTERM. One scope at a time.
  InterruptScope();
  /// Restores the previous handlers (a signal already recorded stays recorded).
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

  /// For RunOptions::interrupt: 0 until a signal arrives, then that signal's number.
  [[nodiscard]] static const volatile std::sig_atomic_t* flag();

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

/// The signal an InterruptScope recorded in this process, 0 when none.
[[nodiscard]] int interrupt_signal();

/// "SIGINT", "SIGTERM", or "a signal" for any other number.
[[nodiscard]] const char* signal_name(int sig);

}  // namespace kvsim::cli
