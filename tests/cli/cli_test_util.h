#pragma once
// Helpers of the command-line tests: the kvsim binary of this build, run with its output in
// files, as a child process the test can signal.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/util.h"

extern char** environ;

namespace kvsim::test {

/// Starts `kvsim args...` with stdout and stderr into `out` and `err`; with `own_group` in a new
/// process group (its pid is the group's id), so a signal to the group spares the test.
inline pid_t spawn_kvsim(const std::vector<std::string>& args, const std::filesystem::path& out,
                         const std::filesystem::path& err, bool own_group = false) {
  std::vector<std::string> argv_s = {kvsim_exe()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&files, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  if (own_group) {
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
  }
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, argv[0], &files, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw std::runtime_error("cannot start kvsim");
  return pid;
}

/// Waits for `pid`; its exit status, or -(signal) when a signal killed it.
inline int wait_exit(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw std::runtime_error("waitpid failed");
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

/// Runs `kvsim args...` to the end; its exit status (see wait_exit), stdout and stderr.
struct Outcome {
  int status = 0;
  std::string out, err;
};
inline Outcome run_kvsim(const std::vector<std::string>& args, const std::filesystem::path& dir) {
  const pid_t pid = spawn_kvsim(args, dir / "stdout.txt", dir / "stderr.txt");
  Outcome o;
  o.status = wait_exit(pid);
  o.out = slurp(dir / "stdout.txt");
  o.err = slurp(dir / "stderr.txt");
  return o;
}

/// Polls `done` every 10 ms for up to `timeout_s` seconds; whether it became true.
inline bool wait_until(const std::function<bool()>& done, double timeout_s = 60) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace kvsim::test
