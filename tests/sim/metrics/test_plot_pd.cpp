// plots/pd.py on synthetic P/D folders (tests/sim/fixtures/make_pd_fixtures.py, hand-chosen
// numbers that follow sim/OUTPUTS.md): a run's TTFT breakdown part by part, and a layout x rate
// sweep's goodput per layout (DistServe's: the highest swept rate at which 90% of requests meet
// both the TTFT and the TPOT target), which one request over a target moves. The tests require
// matplotlib under Debian's /usr/bin/python3 (scripts/install-deps.sh installs it).

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "sim_test_util.h"

namespace fs = std::filesystem;
using kvsim::test::slurp;
using kvsim::test::TempDir;

namespace {

const fs::path kSource = KVSIM_SOURCE_DIR;
const std::string kPython = "MPLBACKEND=Agg /usr/bin/python3";

int shell(const std::string& cmd) {
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool have_matplotlib() {
  return fs::exists("/usr/bin/python3") &&
         shell(kPython + " -c 'import matplotlib, numpy' > /dev/null 2>&1") == 0;
}

/// The P/D fixtures, made afresh into a temporary folder: root/pd-run and root/pd-ratio.
struct PdFixtures {
  TempDir dir{"plot-pd"};
  const fs::path& root = dir.path;
  PdFixtures() {
    REQUIRE(shell(kPython + " " + (kSource / "tests/sim/fixtures/make_pd_fixtures.py").string() +
                  " " + root.string()) == 0);
  }
};

int plot(const std::string& args, const fs::path& log) {
  return shell(kPython + " " + (kSource / "plots/kvsim_plot.py").string() + " -q " + args + " > " +
               log.string() + " 2>&1");
}

void require_figure(const fs::path& out, const std::string& stem) {
  for (const char* ext : {".png", ".svg"}) {
    const fs::path p = out / (stem + ext);
    INFO(p);
    REQUIRE(fs::exists(p));
    CHECK(fs::file_size(p) > 1000);
  }
  CHECK(slurp(out / "index.html").find(stem + ".png") != std::string::npos);
}

/// What `code` prints in Python with plots/ on the path (stdout, stripped).
std::string python(const std::string& code, const fs::path& dir) {
  const fs::path out = dir / "eval.txt";
  const int rc = shell(kPython + " -c \"import sys; sys.path.insert(0, '" +
                       (kSource / "plots").string() + "'); " + code + "\" > " + out.string() +
                       " 2>&1");
  std::string s = slurp(out);
  INFO(s);
  REQUIRE(rc == 0);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

/// The goodput of every layout of the sweep folder, "layout=goodput;..." in layout order.
std::string goodputs(const fs::path& sweep, const fs::path& dir, const std::string& args) {
  return python("import pd; g = pd.sweep_goodput('" + sweep.string() + "'" + args +
                    "); print(';'.join('%s=%g' % kv for kv in g.items()))",
                dir);
}

/// Rewrites the cell `column` of request `id` in `csv_path` (a planted change).
void set_cell(const fs::path& csv_path, int id, const std::string& column,
              const std::string& value, const fs::path& dir) {
  (void)python("import csv; p = '" + csv_path.string() +
                   "'; rows = list(csv.reader(open(p))); c = rows[0].index('" + column +
                   "'); [r.__setitem__(c, '" + value + "') for r in rows[1:] if r[0] == '" +
                   std::to_string(id) + "']; csv.writer(open(p, 'w'), lineterminator=chr(10))"
                   ".writerows(rows); print('ok')",
               dir);
}

}  // namespace

TEST_CASE("a P/D run draws its TTFT as the sum of its seven parts", "[sim][plots]") {
  // The plots are part of what is tested: scripts/install-deps.sh installs matplotlib.
  REQUIRE(have_matplotlib());
  PdFixtures fx;
  const fs::path run = fx.root / "pd-run";
  const fs::path out = fx.root / "plots";
  int rc = plot(run.string() + " -o " + out.string(), fx.root / "log.txt");
  INFO(slurp(fx.root / "log.txt"));
  REQUIRE(rc == 0);
  require_figure(out, "pd_ttft_breakdown");
  require_figure(out, "replica_requests");  // from prefill_replica and decode_replica
  require_figure(out, "pd_transfers");
  CHECK(slurp(out / "pd_transfers.svg").find("38 KV reads") != std::string::npos);
  const std::string svg = slurp(out / "pd_ttft_breakdown.svg");
  for (const char* label : {"P queue", "P prefill", "D queue", "KV read", "D wait",
                            "D first-token step", "proxy hops", "1P3D", "40 requests",
                            "2 served on D alone", "&gt; p99"})
    CHECK(svg.find(label) != std::string::npos);
  CHECK(slurp(fx.root / "log.txt").find("differ from ttft_ms") == std::string::npos);

  // 40 requests with parts (the refused one has none), 2 of them on D alone; the mean KV read
  // is (38 x 6.4 + 3 x 50 handshake) / 40 ms; the slowest request (the > p99 band of 40 holds
  // one) is id 39: 3 + 78 + 44 + 195 + 6.4 + 1.5 + 12 ms.
  const std::string load = "import pd; from rundata import Run; d = pd.ttft_parts(Run('" +
                           run.string() + "')); ";
  CHECK(python(load + "print(d['ttft_ms'].size, int(d['d_only'].sum()), d['max_gap_ms'] < 1e-9)",
               fx.root) == "40 2 True");
  CHECK(python(load + "print(round(d['parts'][:, 4].mean(), 9))", fx.root) == "9.83");
  // Ranked by TTFT, p90-p99 of 40 is ranks 36-38 (ids 36-38: 300.9, 313.9, 326.9 ms).
  CHECK(python(load +
                   "print(';'.join('%s %d %g' % (l, n, round(m.sum(), 6)) for l, n, m in "
                   "pd.band_means(d['ttft_ms'], d['parts'])))",
               fx.root) ==
        "all (mean) 40 " + python(load + "print('%g' % round(d['ttft_ms'].mean(), 6))", fx.root) +
            ";p0-p50 20 " +
            python(load + "import numpy as np; print('%g' % round(np.sort(d['ttft_ms'])[:20]"
                          ".mean(), 6))",
                   fx.root) +
            ";p50-p90 16 " +
            python(load + "import numpy as np; print('%g' % round(np.sort(d['ttft_ms'])[20:36]"
                          ".mean(), 6))",
                   fx.root) +
            ";p90-p99 3 313.9;> p99 1 339.9");

  // A planted fault: one request's TTFT no longer its parts' sum is reported.
  set_cell(run / "requests.csv", 12, "ttft_ms", "999.000000", fx.root);
  rc = plot(run.string() + " -o " + out.string(), fx.root / "log.txt");
  REQUIRE(rc == 0);
  CHECK(slurp(fx.root / "log.txt").find("the TTFT parts differ from ttft_ms by up to") !=
        std::string::npos);

  // An aggregated run draws no P/D figure.
  const fs::path agg = fx.root / "pd-ratio/workload.arrival.rate_per_s=2";
  REQUIRE(plot(agg.string() + " -o " + (fx.root / "agg").string(), fx.root / "log.txt") == 0);
  CHECK_FALSE(fs::exists(fx.root / "agg/pd_ttft_breakdown.png"));
  CHECK(slurp(fx.root / "agg/index.html").find("pd_ttft") == std::string::npos);
}

TEST_CASE("goodput per P/D layout is the highest rate at which 90% of requests meet both targets",
          "[sim][plots]") {
  REQUIRE(have_matplotlib());
  PdFixtures fx;
  const fs::path sweep = fx.root / "pd-ratio";
  const std::string slo = ", ttft_slo_ms=1000, tpot_slo_ms=50";
  // MISSES of make_pd_fixtures.py: 20 requests per run; a target met exactly counts, a
  // one-token request has no TPOT and meets it, refused and aborted requests miss.
  CHECK(goodputs(sweep, fx.root, slo) == "4 aggregated=4;1P3D=6;2P2D=8;3P1D=2");
  CHECK(goodputs(sweep, fx.root, slo + ", attainment=1.0") ==
        "4 aggregated=2;1P3D=4;2P2D=6;3P1D=0");
  // Just under the TTFT target, request 0 of every run (TTFT exactly 1000 ms) misses it too.
  CHECK(goodputs(sweep, fx.root, ", ttft_slo_ms=999.999, tpot_slo_ms=50") ==
        "4 aggregated=4;1P3D=4;2P2D=8;3P1D=2");

  // The figure, its table, and the targets as options.
  const fs::path out = fx.root / "plots";
  int rc = plot(sweep.string() + " -o " + out.string() + " --ttft-slo-ms 1000 --tpot-slo-ms 50",
                fx.root / "log.txt");
  INFO(slurp(fx.root / "log.txt"));
  REQUIRE(rc == 0);
  require_figure(out, "pd_goodput");
  const std::string svg = slurp(out / "pd_goodput.svg");
  for (const char* label : {"4 aggregated", "1P3D", "2P2D", "3P1D", "6 req/s",
                            "TTFT &lt;= 1000 ms and TPOT &lt;= 50 ms"})
    CHECK(svg.find(label) != std::string::npos);
  const std::string table = slurp(out / "pd_goodput.csv");
  CHECK(table.find("1P3D,6,20,0.900000,0.950000,0.950000,6,1000,50,0.9\n") != std::string::npos);
  CHECK(table.find("4 aggregated,8,20,0.500000,0.650000,0.650000,4,1000,50,0.9\n") !=
        std::string::npos);
  CHECK(slurp(out / "index.html").find("1P3D 6 req/s") != std::string::npos);
  // Same inputs, same bytes.
  const fs::path again = fx.root / "plots-again";
  REQUIRE(plot(sweep.string() + " -o " + again.string() + " --ttft-slo-ms 1000 --tpot-slo-ms 50",
               fx.root / "log.txt") == 0);
  for (const char* f : {"pd_goodput.png", "pd_goodput.svg", "pd_goodput.csv"}) {
    INFO(f);
    CHECK(slurp(out / f) == slurp(again / f));
  }

  // One request over the TTFT target at 1P3D's highest passing rate moves its goodput down.
  set_cell(sweep / "cluster.prefill_replicas=1,cluster.decode_replicas=3,"
                   "workload.arrival.rate_per_s=6/requests.csv",
           3, "ttft_ms", "1000.000001", fx.root);
  CHECK(goodputs(sweep, fx.root, slo) == "4 aggregated=4;1P3D=4;2P2D=8;3P1D=2");
  rc = plot(sweep.string() + " -o " + out.string() + " --ttft-slo-ms 1000 --tpot-slo-ms 50",
            fx.root / "log.txt");
  REQUIRE(rc == 0);
  CHECK(slurp(out / "pd_goodput.csv").find("1P3D,6,20,0.850000,0.900000,0.950000,4,") !=
        std::string::npos);

  // Bad targets are errors (exit 2), and pd.py draws the figure on its own.
  CHECK(plot(sweep.string() + " -o " + out.string() + " --attainment 0", fx.root / "log.txt") == 2);
  CHECK(slurp(fx.root / "log.txt").find("--attainment must be in (0, 1]") != std::string::npos);
  CHECK(plot(sweep.string() + " -o " + out.string() + " --tpot-slo-ms -5", fx.root / "log.txt") ==
        2);
  const fs::path alone = fx.root / "alone";
  REQUIRE(shell(kPython + " " + (kSource / "plots/pd.py").string() + " " + sweep.string() +
                " -o " + alone.string() + " --tpot-slo-ms 50 --ttft-slo-ms 1000 > " +
                (fx.root / "log.txt").string() + " 2>&1") == 0);
  CHECK(fs::exists(alone / "pd_goodput.png"));
  CHECK(slurp(fx.root / "log.txt").find("1P3D 4 req/s") != std::string::npos);
}
