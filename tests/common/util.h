#pragma once
// Helpers shared by the test folders (sim, cli, validate): the kvsim binary of this build, files
// and lines, temporary folders. Nothing here depends on kvsim's libraries.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace kvsim::test {

/// The kvsim executable of this build tree. A missing binary fails the test (the test executables
/// depend on kvsim, so it is always built first) rather than skipping it.
inline std::string kvsim_exe() {
  const std::filesystem::path p = std::filesystem::path(KVSIM_BINARY_DIR) / "kvsim";
  if (!std::filesystem::exists(p)) throw std::runtime_error("kvsim not built: " + p.string());
  return p.string();
}

/// The whole file as text ("" when it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The lines of `text` (a last line without '\n' counts; no trailing empty line).
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream s(text);
  for (std::string line; std::getline(s, line);) out.push_back(line);
  return out;
}

/// The file's lines (none when it cannot be read).
inline std::vector<std::string> read_lines(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

/// A fresh empty folder under the system temp dir (named by `tag` and the pid), removed at scope
/// exit.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag)
      : path(std::filesystem::temp_directory_path() /
             ("kvsim-test-" + tag + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;  // a destructor must not throw; a leftover temp folder is harmless
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace kvsim::test
