#include <catch2/catch.hpp>

#include "core/common/block_hash.h"
#include "test_util.h"

using namespace kvsim;
using kvsim::test::iota_tokens;

namespace {
std::uint64_t always_collide(std::uint64_t, std::span<const Token>, std::int32_t) { return 42; }
}  // namespace

TEST_CASE("interning the same block content twice gives the same hash id", "[core]") {
  BlockHashTable t(4);
  const auto a = iota_tokens(4);
  const HashId h1 = t.intern(kNoHash, a, kExtraNone);
  const HashId h2 = t.intern(kNoHash, a, kExtraNone);
  CHECK(h1 == h2);
  CHECK(t.ref_count(h1) == 2);
  CHECK(t.size() == 1);
  CHECK(t.find_violation().empty());
}

TEST_CASE("equal tokens under different parents are different hashes", "[core]") {
  BlockHashTable t(4);
  const HashId p1 = t.intern(kNoHash, iota_tokens(4, 0), kExtraNone);
  const HashId p2 = t.intern(kNoHash, iota_tokens(4, 100), kExtraNone);
  const HashId c1 = t.intern(p1, iota_tokens(4, 7), kExtraNone);
  const HashId c2 = t.intern(p2, iota_tokens(4, 7), kExtraNone);
  CHECK(c1 != c2);
  CHECK(t.parent(c1) == p1);
  CHECK(t.parent(c2) == p2);
}

TEST_CASE("a bucket hash that always collides never produces a false match", "[core]") {
  BlockHashTable t(2, &always_collide);
  std::vector<HashId> ids;
  for (Token i = 0; i < 50; ++i)
    ids.push_back(t.intern(kNoHash, std::vector<Token>{i, i}, kExtraNone));
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::size_t j = i + 1; j < ids.size(); ++j) REQUIRE(ids[i] != ids[j]);
  // Re-interning finds each one again, exactly.
  for (Token i = 0; i < 50; ++i)
    CHECK(t.intern(kNoHash, std::vector<Token>{i, i}, kExtraNone) ==
          ids[static_cast<std::size_t>(i)]);
  // Deleting from the middle of one long probe chain keeps every other node findable.
  for (Token i = 0; i < 50; i += 2) {
    t.release(ids[static_cast<std::size_t>(i)]);
    t.release(ids[static_cast<std::size_t>(i)]);
  }
  CHECK(t.find_violation().empty());
  CHECK(t.size() == 25);
  for (Token i = 1; i < 50; i += 2)
    CHECK(t.intern(kNoHash, std::vector<Token>{i, i}, kExtraNone) ==
          ids[static_cast<std::size_t>(i)]);
}

TEST_CASE("extra keys None and the empty tuple are different hashes", "[core]") {
  BlockHashTable t(4);
  const auto a = iota_tokens(4);
  const ExtraKeysId empty = t.intern_extra({});
  const ExtraKeysId aaa = t.intern_extra({"aaa"});
  CHECK(empty == kExtraEmpty);
  CHECK(aaa != kExtraEmpty);
  CHECK(t.intern_extra({"aaa"}) == aaa);
  const HashId h_none = t.intern(kNoHash, a, kExtraNone);
  const HashId h_empty = t.intern(kNoHash, a, kExtraEmpty);
  const HashId h_aaa = t.intern(kNoHash, a, aaa);
  CHECK(h_none != h_empty);
  CHECK(h_empty != h_aaa);
  CHECK(t.extra_strings(aaa) == std::vector<std::string>{"aaa"});
}

TEST_CASE("a child keeps its parent alive and releasing the child frees both", "[core]") {
  BlockHashTable t(4);
  const HashId p = t.intern(kNoHash, iota_tokens(4), kExtraNone);
  const HashId c = t.intern(p, iota_tokens(4, 4), kExtraNone);
  CHECK(t.ref_count(p) == 2);
  t.release(p);  // the caller's own reference
  CHECK(t.size() == 2);
  CHECK(t.ref_count(p) == 1);
  t.release(c);
  CHECK(t.size() == 0);
  CHECK(t.find_violation().empty());
  // The slots are reused and the content is found fresh.
  const HashId p2 = t.intern(kNoHash, iota_tokens(4), kExtraNone);
  CHECK(t.size() == 1);
  CHECK(t.ref_count(p2) == 1);
}

TEST_CASE("the reference-count check catches a holder that was not counted", "[core]") {
  BlockHashTable t(4);
  const HashId p = t.intern(kNoHash, iota_tokens(4), kExtraNone);
  std::vector<std::int32_t> external(t.capacity(), 0);
  external[static_cast<std::size_t>(to_int(p))] = 1;
  CHECK(t.find_ref_count_violation(external).empty());
  external[static_cast<std::size_t>(to_int(p))] = 2;  // planted: one holder too many
  CHECK_FALSE(t.find_ref_count_violation(external).empty());
}

TEST_CASE("the table grows past its initial bucket count and stays consistent", "[core]") {
  BlockHashTable t(1);
  HashId parent = kNoHash;
  for (Token i = 0; i < 5000; ++i) parent = t.intern(parent, std::vector<Token>{i % 7}, kExtraNone);
  CHECK(t.size() == 5000);
  CHECK(t.find_violation().empty());
}

TEST_CASE("interning a chain gives the nodes that block-by-block interning gives", "[core]") {
  // 3 blocks shared with an earlier chain, then 600 new ones (the 1,024 buckets, at most half
  // full, grow mid-chain).
  BlockHashTable t(4);
  std::vector<Token> tokens = iota_tokens(4 * 603);
  std::vector<HashId> first;
  t.intern_chain(kNoHash, std::span<const Token>(tokens.data(), 12), kExtraNone, first);
  REQUIRE(first.size() == 3);
  std::vector<HashId> chain;
  t.intern_chain(kNoHash, tokens, kExtraNone, chain);
  REQUIRE(chain.size() == 603);
  CHECK(std::equal(first.begin(), first.end(), chain.begin()));
  CHECK(t.ref_count(chain[0]) == 3);  // both lists and its child
  HashId parent = kNoHash;
  for (std::size_t i = 0; i < chain.size(); ++i) {
    parent = t.intern(parent, std::span<const Token>(tokens.data() + 4 * i, 4), kExtraNone);
    CHECK(parent == chain[i]);
  }
  CHECK(t.size() == 603);
  CHECK(t.find_violation().empty());
}

TEST_CASE("a reserved table keeps its arrays in place up to the reservation and grows past it",
          "[core]") {
  BlockHashTable t(4);
  t.reserve(300);
  const HashId first = t.intern(kNoHash, iota_tokens(4, 0), kExtraNone);
  const Token* data = t.tokens(first).data();
  std::vector<HashId> ids{first};
  for (Token i = 1; i < 300; ++i)
    ids.push_back(t.intern(ids.back(), iota_tokens(4, 4 * i), kExtraNone));
  CHECK(t.tokens(first).data() == data);  // 300 nodes: not moved
  for (Token i = 300; i < 1000; ++i)
    ids.push_back(t.intern(ids.back(), iota_tokens(4, 4 * i), kExtraNone));
  CHECK(t.size() == 1000);
  CHECK(t.capacity() == 1000);
  // Every node kept its id, content, parent and content hash through the moves.
  std::uint64_t h = kRootContentHash;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto want = iota_tokens(4, 4 * static_cast<Token>(i));
    CHECK(std::equal(want.begin(), want.end(), t.tokens(ids[i]).begin()));
    CHECK(t.parent(ids[i]) == (i == 0 ? kNoHash : ids[i - 1]));
    h = block_content_hash(h, want, static_cast<std::int32_t>(kExtraNone));
    CHECK(t.content_hash(ids[i]) == h);
    CHECK(t.intern(i == 0 ? kNoHash : ids[i - 1], want, kExtraNone) == ids[i]);  // found again
  }
  CHECK(t.find_violation().empty());
}
