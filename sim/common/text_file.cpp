#include "sim/common/text_file.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "sim/common/errors.h"

namespace kvsim {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot open file");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::pair<std::int64_t, std::int64_t> line_col_of(const std::string& text, std::size_t index) {
  index = std::min(index, text.size());
  std::int64_t line = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < index; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return {line, static_cast<std::int64_t>(index - line_start) + 1};
}

}  // namespace kvsim
