#pragma once
// Whole input files (scenarios, model configs, summaries, baselines) and the file:line:col of a
// byte in one, for error messages.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace kvsim {

/// The file's bytes; ConfigError "PATH: cannot open file" when it cannot be opened.
[[nodiscard]] std::string read_text_file(const std::string& path);

/// 1-based line and column of byte `index` (0-based, clamped to the text's end) of `text`.
[[nodiscard]] std::pair<std::int64_t, std::int64_t> line_col_of(const std::string& text,
                                                                std::size_t index);

}  // namespace kvsim
