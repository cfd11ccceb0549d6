#include <catch2/catch.hpp>
#include <cstdint>

#include "core/common/types.h"

using kvsim::Divisor;

namespace {
// The plain arithmetic each Divisor operation stands for.
std::int64_t python_floor(std::int64_t a, std::int64_t d) {
  std::int64_t q = a / d;
  if (a % d != 0 && a < 0) --q;
  return q;
}
}  // namespace

TEST_CASE("Divisor agrees with division for powers of two and other divisors", "[core]") {
  for (const std::int64_t d : {1, 2, 3, 7, 16, 32, 48, 528, 1024, 1 << 20}) {
    const Divisor div(d);
    CHECK(div.value() == d);
    for (std::int64_t a = 0; a <= 5000; ++a) {
      REQUIRE(div.div(a) == a / d);
      REQUIRE(div.ceil(a) == kvsim::cdiv(a, d));
      REQUIRE(div.floor(a) == a / d);
    }
    for (const std::int64_t a : {std::int64_t{1} << 40, (std::int64_t{1} << 40) + 17}) {
      CHECK(div.div(a) == a / d);
      CHECK(div.ceil(a) == kvsim::cdiv(a, d));
    }
  }
}

TEST_CASE("Divisor::floor is Python's floor division for negative counts", "[core]") {
  // Mamba's skipped-token count is -1 before the first token: -1 // 16 == -1, not C++'s 0.
  for (const std::int64_t d : {1, 3, 16, 528}) {
    const Divisor div(d);
    for (std::int64_t a = -3000; a < 0; ++a) REQUIRE(div.floor(a) == python_floor(a, d));
  }
  CHECK(Divisor(16).floor(-1) == -1);
  CHECK(Divisor(16).floor(-16) == -1);
  CHECK(Divisor(16).floor(-17) == -2);
  CHECK(kvsim::floor_div(-1, 3) == -1);
  CHECK(kvsim::floor_div(-3, 3) == -1);
  CHECK(kvsim::floor_div(5, 3) == 1);
}

TEST_CASE("a default Divisor divides by one", "[core]") {
  const Divisor one;
  CHECK(one.value() == 1);
  CHECK(one.div(12345) == 12345);
  CHECK(one.ceil(12345) == 12345);
  CHECK(one.floor(-7) == -7);
}
