#pragma once
// Minimal CSV handling for traces and measurement files: comma-separated, optional double quotes
// around a field ("" inside quotes is a quote), no newlines inside fields, CRLF tolerated.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvsim {

/// Splits one CSV line into fields (trailing '\r' dropped). Returns false on an unterminated quote.
[[nodiscard]] bool split_csv_line(std::string_view line, std::vector<std::string>& fields);
/// Index of the field named `name` in a header row, or nullopt (names compared after trimming).
[[nodiscard]] std::optional<std::size_t> csv_column(const std::vector<std::string>& header,
                                                    std::string_view name);
/// Parses a whole CSV field or YAML scalar as a finite double (surrounding spaces allowed).
[[nodiscard]] std::optional<double> parse_double_text(std::string_view field);
/// Parses a whole CSV field or YAML scalar as an integer (surrounding spaces allowed; integral
/// floats such as 4e9 accepted).
[[nodiscard]] std::optional<std::int64_t> parse_int_text(std::string_view field);

}  // namespace kvsim
