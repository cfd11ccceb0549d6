// kvsim replay [FILE|-] [--profile NAME] [--check-invariants]: op-trace replay
// (shared/spec/ops-format*.md; the profile picks the protocol).

#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/cli_args.h"
#include "cli/commands.h"
#include "sim/common/errors.h"
#include "sim/common/yaml_util.h"
#include "sim/replay/replayer.h"

namespace kvsim::cli {
namespace {

constexpr std::size_t kChunkBytes = 1 << 20;
constexpr std::size_t kFlushBytes = 1 << 20;

}  // namespace

int replay(const Args& args) {
  std::string path = "-";
  ReplayOptions options;
  Profile profile = kDefaultProfile;
  CommandLine cl("replay", "[FILE|-] [options]",
                 "Reads an op trace (JSON Lines, one op per line; FILE, or - for stdin, the "
                 "default) and writes one JSON result line per op.");
  cl.positional("FILE", text(&path, "FILE"), 1, /*required=*/false);
  cl.options()  //
      ("profile", cli::profile(&profile), "the engine release whose op protocol and answers to "
                                          "replay (default vllm-0.20)")
      ("check-invariants", flag(&options.check_invariants),
       "verify the pool/manager/scheduler invariants after every op");
  if (!cl.parse(args)) return 0;
  std::FILE* in = path == "-" ? stdin : std::fopen(path.c_str(), "rb");
  if (!in) throw ConfigError(path + ": cannot open: " + std::strerror(errno));

  const std::unique_ptr<Replayer> replayer_ptr = make_replayer(profile, options);
  Replayer& replayer = *replayer_ptr;
  std::string buf;  // unconsumed input
  OutBuf out;
  std::string chunk(kChunkBytes, '\0');
  bool eof = false;
  while (!eof) {
    const std::size_t n = std::fread(chunk.data(), 1, chunk.size(), in);
    if (n < chunk.size()) eof = true;
    buf.append(chunk.data(), n);
    std::size_t start = 0;
    while (true) {
      const std::size_t nl = buf.find('\n', start);
      if (nl == std::string::npos) break;
      replayer.process_line(std::string_view(buf).substr(start, nl - start), out);
      start = nl + 1;
      if (out.size() >= kFlushBytes) {
        std::fwrite(out.data(), 1, out.size(), stdout);
        out.clear();
      }
    }
    buf.erase(0, start);
  }
  if (!buf.empty()) replayer.process_line(buf, out);  // last line without '\n'
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  const bool read_error = std::ferror(in);
  if (in != stdin) std::fclose(in);
  if (read_error) throw ConfigError(path + ": read error");
  if (replayer.num_errors() > 0)
    std::fprintf(stderr, "kvsim replay: %lld op(s) produced an error line\n",
                 static_cast<long long>(replayer.num_errors()));
  return 0;
}

}  // namespace kvsim::cli
