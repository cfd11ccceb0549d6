#pragma once
// The op-line fuzzers' mutation: up to three random edits (replace, delete a run, insert,
// truncate) of one line, drawn from `alphabet` (JSON punctuation, digits, literals).

#include <cstddef>
#include <random>
#include <string>
#include <string_view>

namespace kvsim::test {

inline constexpr std::string_view kJsonAlphabet = "{}[]\",:0123456789-.eE truefalsnul\\";

/// `line` with 0-3 random edits; deterministic for a given `rng` state.
inline std::string mutate_line(std::string line, std::mt19937_64& rng,
                               std::string_view alphabet = kJsonAlphabet) {
  const int edits = static_cast<int>(rng() % 4);
  for (int e = 0; e < edits && !line.empty(); ++e) {
    const std::size_t pos = rng() % line.size();
    switch (rng() % 4) {
      case 0:
        line[pos] = alphabet[rng() % alphabet.size()];
        break;
      case 1:
        line.erase(pos, 1 + rng() % 8);
        break;
      case 2:
        line.insert(pos, 1, alphabet[rng() % alphabet.size()]);
        break;
      default:
        line.resize(pos);
        break;
    }
  }
  return line;
}

}  // namespace kvsim::test
