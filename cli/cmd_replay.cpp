// kvsim replay [FILE|-] [--profile NAME] [--check-invariants]: op-trace replay
// (shared/spec/ops-format*.md; the profile picks the protocol).

#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "cli/cli_args.h"
#include "cli/commands.h"
#include "sim/common/errors.h"
#include "sim/replay/replayer.h"

namespace kvsim::cli {
namespace {

constexpr const char* kUsage =
    "usage: kvsim replay [FILE|-] [--profile NAME] [--check-invariants]\n"
    "Reads an op trace (JSON Lines, one op per line) and writes one JSON result line per op.\n"
    "  --profile NAME       the engine whose op protocol the trace speaks (default vllm-0.7.2)\n"
    "  --check-invariants   verify the pool/manager/scheduler invariants after every op\n";

constexpr std::size_t kChunkBytes = 1 << 20;
constexpr std::size_t kFlushBytes = 1 << 20;

constexpr std::string_view kFlags[] = {"--check-invariants", "--profile", "--help"};

}  // namespace

int replay(const Args& args) {
  std::string path = "-";
  bool have_path = false;
  ReplayOptions options;
  Profile profile = Profile::kVllm072;
  ArgParser cli(args, "replay", kFlags);
  while (cli.next()) {
    if (cli.is("--help", "-h")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (cli.is("--check-invariants")) {
      options.check_invariants = true;
    } else if (cli.is("--profile")) {
      const std::string name = cli.value();
      const std::optional<Profile> p = find_profile(name);
      if (!p)
        throw ConfigError("--profile: unknown profile '" + name + "' (one of: " + profile_names() +
                          ")");
      profile = *p;
    } else if (!cli.is_flag() && !have_path) {  // "-" (stdin) is not a flag
      path = cli.arg();
      have_path = true;
    } else {
      cli.unknown();
    }
  }
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
