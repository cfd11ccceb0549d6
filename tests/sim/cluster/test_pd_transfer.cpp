// P/D's KV transfer-time model (sim/cluster/pd_transfer.h; spec §7.5): hand cases with exact ns,
// the bytes of a block for plain, MLA and hybrid models against `kvsim kv-size`'s pages, and
// transfers.csv.

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sim/cluster/pd_transfer.h"
#include "sim/config/scenario.h"
#include "sim/metrics/transfers_csv.h"
#include "sim_test_util.h"

using namespace kvsim;
using kvsim::test::parse_text;

namespace {

/// 40 bytes/ns per GPU (50 GB/s at 0.8); no handshake and no setup unless a case sets them.
PdConfig bare() {
  PdConfig c;
  c.setup_ns = 0;
  c.handshake_ns = 0;
  return c;
}

/// The records of the reads ended by t (default: all of these cases'), by (end, id).
std::vector<PdTransferRecord> drain(PdTransferModel& m, SimTimeNs t = 1'000'000'000'000) {
  std::vector<PdTransferRecord> out;
  m.pop_completions(t, out);
  return out;
}

const PdTransferRecord& of(const std::vector<PdTransferRecord>& v, std::uint64_t id) {
  for (const PdTransferRecord& r : v)
    if (r.id == id) return r;
  FAIL("no read " << id);
  return v.front();
}

}  // namespace

TEST_CASE("a read alone takes handshake, setup and its bytes over the link's rate", "[sim]") {
  PdTransferModel m(PdConfig{}, {1, 1});  // the defaults: 50 GB/s x 0.8, 0.5 ms, 50 ms
  m.start(7, 0, 1, 3, 1'000'000, 1'000);
  CHECK(m.handshake_started(0, 1));
  CHECK_FALSE(m.handshake_started(1, 0));
  // Bytes move from 1,000 + 50,000,000 + 500,000; 1e6 B at 40 B/ns = 25,000 ns.
  CHECK(m.next_event_ns() == 50'501'000);
  CHECK(m.next_completion_ns() == 50'526'000);
  std::vector<PdTransferRecord> out;
  m.pop_completions(50'525'999, out);
  CHECK(out.empty());
  m.pop_completions(50'526'000, out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].id == 7);
  CHECK(out[0].blocks == 3);
  CHECK(out[0].bytes == 1'000'000);
  CHECK(out[0].start_ns == 1'000);
  CHECK(out[0].move_ns == 50'501'000);
  CHECK(out[0].end_ns == 50'526'000);
  CHECK(out[0].concurrent == 1);
  CHECK(out[0].handshake);
  CHECK(m.num_in_flight() == 0);
  // A byte more: 25,000.025 ns, rounded up.
  PdTransferModel b(bare(), {1, 1});
  b.start(1, 0, 1, 1, 1'000'001, 0);
  CHECK(drain(b)[0].end_ns == 25'001);
}

TEST_CASE("reads on one link share it: together and staggered", "[sim]") {
  SECTION("together: each at half the rate until the smaller ends") {
    PdTransferModel m(bare(), {1, 1});
    m.start(1, 0, 1, 0, 4'000'000, 0);
    m.start(2, 0, 1, 0, 2'000'000, 0);
    // 20 B/ns each: read 2 ends at 100,000; read 1 has 2e6 B left at 40 B/ns: 150,000.
    CHECK(m.next_completion_ns() == 100'000);
    const auto out = drain(m);
    REQUIRE(out.size() == 2);
    CHECK(out[0].id == 2);
    CHECK(out[0].end_ns == 100'000);
    CHECK(out[1].end_ns == 150'000);
    CHECK(out[0].concurrent == 2);
    CHECK(out[1].concurrent == 2);
  }
  SECTION("staggered: the first has moved alone before the second joins") {
    PdTransferModel m(bare(), {1, 1});
    m.start(1, 0, 1, 0, 4'000'000, 0);
    m.start(2, 0, 1, 0, 2'000'000, 50'000);
    // 2e6 B moved alone by 50,000; then 2e6 B each at 20 B/ns: both end at 150,000, by id.
    const auto out = drain(m);
    REQUIRE(out.size() == 2);
    CHECK(out[0].id == 1);
    CHECK(out[0].end_ns == 150'000);
    CHECK(out[1].id == 2);
    CHECK(out[1].end_ns == 150'000);
  }
  SECTION("staggered by an odd time") {
    PdTransferModel m(bare(), {1, 1});
    m.start(1, 0, 1, 0, 1'000'000, 0);
    m.start(2, 0, 1, 0, 1'000'000, 10'001);
    // 400,040 B alone, then 599,960 B at 20 B/ns: 29,998 ns; read 2 has moved as much and
    // ends its 400,040 B alone at 40 B/ns: 10,001 ns later.
    const auto out = drain(m);
    CHECK(of(out, 1).end_ns == 39'999);
    CHECK(of(out, 2).end_ns == 50'000);
  }
  SECTION("three at a third of the rate: remaining bytes rounded down, ends up") {
    PdTransferModel m(bare(), {1, 1});
    m.start(1, 0, 1, 0, 1'000'001, 0);
    m.start(2, 0, 1, 0, 500'000, 0);
    m.start(3, 0, 1, 0, 250'001, 0);
    // Read 3: 250,001 B at 40/3 B/ns = 18,750.075 -> 18,751. Then read 2 has
    // 249,986.666666666667 B left at 20 B/ns -> 12,500 ns (31,251); read 1 then has
    // 499,987.666666666667 B left at 40 B/ns -> 12,500 ns (43,751).
    const auto out = drain(m);
    REQUIRE(out.size() == 3);
    CHECK(out[0].id == 3);
    CHECK(out[0].end_ns == 18'751);
    CHECK(out[1].end_ns == 31'251);
    CHECK(out[2].end_ns == 43'751);
    for (const auto& r : out) CHECK(r.concurrent == 3);
  }
}

TEST_CASE("reads on different links do not interact unless they share a NIC", "[sim]") {
  SECTION("different links, different replicas") {
    PdTransferModel m(bare(), {1, 1, 1, 1});
    m.start(1, 0, 2, 0, 4'000'000, 0);
    m.start(2, 1, 3, 0, 2'000'000, 0);
    const auto out = drain(m);
    CHECK(of(out, 1).end_ns == 100'000);
    CHECK(of(out, 2).end_ns == 50'000);
    CHECK(of(out, 1).concurrent == 1);
  }
  SECTION("one prefill replica, two links: independent without shared_nic") {
    PdTransferModel m(bare(), {1, 1, 1});
    m.start(1, 0, 1, 0, 4'000'000, 0);
    m.start(2, 0, 2, 0, 2'000'000, 0);
    const auto out = drain(m);
    CHECK(of(out, 1).end_ns == 100'000);
    CHECK(of(out, 2).end_ns == 50'000);
  }
  SECTION("shared_nic: P's NIC couples its two links") {
    PdConfig c = bare();
    c.shared_nic = true;
    PdTransferModel m(c, {1, 1, 1});
    m.start(1, 0, 1, 0, 4'000'000, 0);
    m.start(2, 0, 2, 0, 2'000'000, 0);
    // 20 B/ns each through NIC 0: read 2 ends at 100,000, read 1 then alone: 150,000.
    const auto out = drain(m);
    CHECK(of(out, 2).end_ns == 100'000);
    CHECK(of(out, 1).end_ns == 150'000);
    CHECK(of(out, 1).concurrent == 1);  // its link's count, not the NIC's
  }
  SECTION("shared_nic: NICs are full duplex (a replica's reads in and out do not share)") {
    PdConfig c = bare();
    c.shared_nic = true;
    PdTransferModel m(c, {1, 1, 1});
    m.start(1, 0, 1, 0, 4'000'000, 0);
    m.start(2, 1, 2, 0, 2'000'000, 0);
    const auto out = drain(m);
    CHECK(of(out, 1).end_ns == 100'000);
    CHECK(of(out, 2).end_ns == 50'000);
  }
  SECTION("shared_nic: a chain 0->2, 0->3, 1->3 through NICs 0 and 3") {
    PdConfig c = bare();
    c.shared_nic = true;
    PdTransferModel m(c, {1, 1, 1, 1});
    m.start(1, 0, 2, 0, 4'000'000, 0);
    m.start(2, 0, 3, 0, 2'000'000, 0);
    m.start(3, 1, 3, 0, 2'000'000, 0);
    // Each gets the smallest share: 20 B/ns (NIC 0 for read 1, NICs 0 and 3 for read 2, NIC 3
    // for read 3). Reads 2 and 3 end at 100,000; read 1's last 2e6 B alone: 150,000.
    const auto out = drain(m);
    CHECK(of(out, 2).end_ns == 100'000);
    CHECK(of(out, 3).end_ns == 100'000);
    CHECK(of(out, 1).end_ns == 150'000);
  }
}

TEST_CASE("the handshake comes once per (prefill, decode) pair, before setup", "[sim]") {
  PdTransferModel m(PdConfig{}, {1, 1, 1, 1});
  m.start(1, 0, 2, 0, 4'000'000, 0);
  m.start(2, 0, 2, 0, 4'000'000, 10'000'000);  // during the pair's handshake: waits for it
  // Both move from 50,000,000 + 500,000 and share the link: 4e6 B each at 20 B/ns.
  auto out = drain(m, 60'000'000);
  CHECK(of(out, 1).end_ns == 50'700'000);
  CHECK(of(out, 2).end_ns == 50'700'000);
  CHECK(of(out, 1).handshake);
  CHECK_FALSE(of(out, 2).handshake);
  m.start(3, 0, 2, 0, 4'000'000, 60'000'000);  // the pair is ready: setup only
  m.start(4, 1, 2, 0, 4'000'000, 60'000'000);  // a new pair
  m.start(5, 0, 3, 0, 4'000'000, 60'000'000);  // another new pair
  out = drain(m);
  CHECK(of(out, 3).end_ns == 60'600'000);
  CHECK_FALSE(of(out, 3).handshake);
  CHECK(of(out, 4).end_ns == 110'600'000);
  CHECK(of(out, 4).handshake);
  CHECK(of(out, 5).end_ns == 110'600'000);
}

TEST_CASE("setup delays a read's bytes and takes no bandwidth", "[sim]") {
  PdConfig c = bare();
  c.setup_ns = 500'000;
  PdTransferModel m(c, {1, 1});
  m.start(1, 0, 1, 0, 40, 1'000);
  CHECK(m.next_completion_ns() == 501'001);
  m.start(2, 0, 1, 0, 4'000'000, 2'000);    // moves from 502,000
  m.start(3, 0, 1, 0, 4'000'000, 550'000);  // in setup while read 2 moves: moves from 1,050,000
  const auto out = drain(m);
  CHECK(of(out, 1).end_ns == 501'001);
  CHECK(of(out, 2).end_ns == 602'000);  // alone all the way
  CHECK(of(out, 2).concurrent == 1);
  CHECK(of(out, 3).end_ns == 1'150'000);
}

TEST_CASE("with tensor parallelism each rank pair moves its share in parallel", "[sim]") {
  PdTransferModel m(bare(), {2, 2, 4, 1});
  m.start(1, 0, 1, 0, 4'000'000, 0);  // tp 2 -> 2: 80 B/ns
  m.start(2, 2, 1, 0, 4'000'000, 0);  // tp 4 -> 2: the smaller side's 2 links
  m.start(3, 2, 3, 0, 4'000'000, 0);  // tp 4 -> 1: 40 B/ns
  const auto out = drain(m);
  CHECK(of(out, 1).end_ns == 50'000);
  CHECK(of(out, 2).end_ns == 50'000);
  CHECK(of(out, 3).end_ns == 100'000);
  // shared_nic: replica 2's 4 NICs carry reads 2 and 3 (80 B/ns each); replica 1's 2 NICs carry
  // reads 1 and 2 (40 B/ns each). Read 3 keeps its link's 40 B/ns.
  PdConfig c = bare();
  c.shared_nic = true;
  PdTransferModel s(c, {2, 2, 4, 1});
  s.start(1, 0, 1, 0, 4'000'000, 0);
  s.start(2, 2, 1, 0, 4'000'000, 0);
  s.start(3, 2, 3, 0, 4'000'000, 0);
  const auto o2 = drain(s);
  CHECK(of(o2, 1).end_ns == 100'000);
  CHECK(of(o2, 2).end_ns == 100'000);
  CHECK(of(o2, 3).end_ns == 100'000);
}

TEST_CASE("one link's reads started together end by size, the last when all bytes are moved",
          "[sim]") {
  // Processor sharing on one link is work conserving: the last read ends when the link has
  // moved every byte at its full rate (up to 1 ns of rounding per rate change), and reads
  // started together end smallest first.
  std::uint64_t seed = 12345;
  const auto next = [&seed] {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<std::int64_t>(seed >> 33);
  };
  for (int iter = 0; iter < 200; ++iter) {
    INFO("iteration " << iter);
    PdTransferModel m(bare(), {1, 2});
    const int n = 1 + static_cast<int>(next() % 12);
    std::int64_t total = 0;
    std::vector<std::int64_t> bytes;
    for (int i = 0; i < n; ++i) {
      bytes.push_back(1 + next() % 5'000'000);
      total += bytes.back();
      m.start(static_cast<std::uint64_t>(i), 0, 1, 0, bytes.back(), 1'000);
    }
    const auto out = drain(m);
    REQUIRE(out.size() == static_cast<std::size_t>(n));
    const std::int64_t ideal = 1'000 + (total + 39) / 40;  // 40 B/ns, rounded up
    CHECK(out.back().end_ns >= ideal);
    CHECK(out.back().end_ns <= ideal + n);
    for (std::size_t i = 1; i < out.size(); ++i) CHECK(bytes[out[i - 1].id] <= bytes[out[i].id]);
    for (const auto& r : out) CHECK(r.concurrent == n);
  }
}

TEST_CASE("a read of no bytes only notifies and shares nothing", "[sim]") {
  PdConfig c = bare();
  c.setup_ns = 100;
  PdTransferModel m(c, {1, 1});
  m.start(1, 0, 1, 0, 4'000'000, 0);
  m.start(2, 0, 1, 0, 0, 50);
  const auto out = drain(m);
  CHECK(of(out, 2).end_ns == 150);
  CHECK(of(out, 2).concurrent == 0);
  CHECK(of(out, 1).end_ns == 100'100);
}

TEST_CASE("completions pop by (end, id), per decode replica on request, at any instants", "[sim]") {
  const auto script = [](PdTransferModel& m, std::vector<SimTimeNs> pops) {
    std::vector<PdTransferRecord> out;
    const std::uint64_t ids[] = {9, 4, 6, 1, 8, 3};
    SimTimeNs t = 0;
    std::size_t next_pop = 0;
    for (int i = 0; i < 6; ++i) {
      t += 3'333 * (i % 3);
      while (next_pop < pops.size() && pops[next_pop] <= t)
        m.pop_completions(pops[next_pop++], out);
      m.start(ids[i], i % 2, 2 + i % 3, 1, 333'333 + 77'777 * i, t);
    }
    while (next_pop < pops.size()) m.pop_completions(pops[next_pop++], out);
    m.pop_completions(1'000'000'000'000, out);
    return out;
  };
  PdConfig c = bare();
  c.shared_nic = true;
  PdTransferModel once(c, {1, 1, 1, 1, 1});
  const auto a = script(once, {});
  REQUIRE(a.size() == 6);
  for (std::size_t i = 1; i < a.size(); ++i)
    CHECK((a[i - 1].end_ns < a[i].end_ns ||
           (a[i - 1].end_ns == a[i].end_ns && a[i - 1].id < a[i].id)));
  // Popping (and asking) at many other instants changes no end.
  std::vector<SimTimeNs> pops;
  for (SimTimeNs t = 0; t < 200'000; t += 1'777) pops.push_back(t);
  PdTransferModel often(c, {1, 1, 1, 1, 1});
  const auto b = script(often, pops);
  REQUIRE(b.size() == a.size());
  for (const auto& r : a) CHECK(of(b, r.id).end_ns == r.end_ns);
  // Only one decode replica's: the others stay.
  PdTransferModel m(bare(), {1, 1, 1});
  m.start(1, 0, 1, 0, 400, 0);
  m.start(2, 0, 2, 0, 400, 0);
  std::vector<PdTransferRecord> out;
  m.pop_completions(1'000, out, 2);
  REQUIRE(out.size() == 1);
  CHECK(out[0].id == 2);
  CHECK(m.next_completion_ns() == 10);  // read 1 ended at 10, not popped yet
  m.pop_completions(1'000, out, 1);
  REQUIRE(out.size() == 2);
  CHECK(out[1].id == 1);
  CHECK(m.next_completion_ns() == PdTransferModel::kNever);
}

TEST_CASE("the next completion looks through reads that start moving before it", "[sim]") {
  PdConfig c = bare();
  c.handshake_ns = 10'000;
  PdTransferModel m(c, {1, 1});
  m.start(1, 0, 1, 0, 4'000'000, 0);
  m.start(2, 0, 1, 0, 2'000'000, 5'000);  // waits for the handshake too
  CHECK(m.next_event_ns() == 10'000);
  CHECK(m.next_completion_ns() == 110'000);  // both move from 10,000 at 20 B/ns
  std::vector<PdTransferRecord> out;
  m.pop_completions(109'999, out);
  CHECK(out.empty());
  m.pop_completions(110'000, out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].id == 2);
  CHECK(m.next_completion_ns() == 160'000);
}

TEST_CASE("a block's bytes are kv-size's pages over all layers, groups and TP ranks", "[sim]") {
  const auto scenario = [](const std::string& model, const std::string& extra) {
    return parse_text(
        "name: c\nengine: {profile: vllm-0.20, mode: timed}\n"
        "model: {config: " +
        std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/" + model + ".json}\n" + extra +
        "scheduler: {max_model_len: 4096}\n"
        "workload: {num_requests: 1, prompt_tokens: 8, output_tokens: 2}\n");
  };
  // `kvsim kv-size --model qwen2-1.5b --max-model-len 4096`: FullAttentionSpec, 28 layers,
  // page 16,384 B.
  CHECK(pd_block_bytes(scenario("qwen2-1.5b", "cache: {block_size: 16}\n")) == 28 * 16'384);
  // `kv-size --model deepseek-v3 --tensor-parallel-size 8 --kv-cache-memory-bytes 1e10`:
  // MLAAttentionSpec, 61 layers, page 18,432 B on each of the 8 ranks.
  CHECK(pd_block_bytes(scenario("deepseek-v3",
                                "hardware: {gpu: H200, tensor_parallel_size: 8}\n"
                                "cache: {kv_cache_memory_bytes: 1e10}\n")) == 61 * 18'432 * 8);
  // `kv-size --model gpt-oss-20b --kv-cache-memory-bytes 1e10`: SlidingWindowSpec and
  // FullAttentionSpec groups, 12 layers each, page 32,768 B.
  CHECK(pd_block_bytes(scenario("gpt-oss-20b", "cache: {kv_cache_memory_bytes: 1e10}\n")) ==
        (12 + 12) * 32'768);
  // A read of n blocks moves n times that.
  PdTransferModel m(bare(), {1, 1});
  const std::int64_t bb = pd_block_bytes(scenario("qwen2-1.5b", ""));
  m.start(1, 0, 1, 5, 5 * bb, 0);
  const auto out = drain(m);
  CHECK(out[0].bytes == 2'293'760);
  CHECK(out[0].end_ns == 57'344);  // 2,293,760 B at 40 B/ns
}

TEST_CASE("transfers.csv rows are exact", "[sim]") {
  std::string line;
  append_transfer_row(
      line, TransferRow{12, 0, 3, 5, 2'293'760, 1'500'000'001, 1'550'557'344, 1'551'000'000, 2});
  CHECK(line == "12,0,3,5,2293760,1.500000001,1.550557344,1.551000000,2\n");
  const auto dir = std::filesystem::temp_directory_path() / "kvsim_test_transfers_csv";
  std::filesystem::create_directories(dir);
  const std::vector<TransferRow> rows = {{1, 0, 1, 0, 0, 0, 50, 1'000'000, 0},
                                         {2, 1, 2, 3, 300, 7, 9, 20, 1}};
  write_transfers_csv(dir / "transfers.csv", rows);
  std::ifstream f(dir / "transfers.csv");
  std::stringstream ss;
  ss << f.rdbuf();
  CHECK(ss.str() ==
        "request_id,prefill_replica,decode_replica,blocks,bytes,start_s,end_s,seen_s,concurrent\n"
        "1,0,1,0,0,0.000000000,0.000000050,0.001000000,0\n"
        "2,1,2,3,300,0.000000007,0.000000009,0.000000020,1\n");
  std::filesystem::remove_all(dir);
}
