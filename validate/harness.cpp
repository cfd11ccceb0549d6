#include "validate/harness.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "core/common/assert.h"
#include "kernels/dense_reference.h"
#include "sim/common/errors.h"
#include "sim/common/rng.h"
#include "validate/harness_impl.h"
#include "validate/kv_content.h"

namespace kvsim::validate {

using detail::SeqWork;
using kernels::BackendKind;
using kernels::DType;

const char* fault_kind_name(FaultInjection::Kind kind) {
  switch (kind) {
    case FaultInjection::Kind::kNone:
      return "none";
    case FaultInjection::Kind::kWrongPrefixHit:
      return "wrong_prefix_hit";
    case FaultInjection::Kind::kBlockSharedInUse:
      return "block_shared_in_use";
    case FaultInjection::Kind::kSlotOffByOne:
      return "slot_off_by_one";
    case FaultInjection::Kind::kCorruptBlockTable:
      return "corrupt_block_table";
    case FaultInjection::Kind::kPermutedBlockTable:
      return "permuted_block_table";
    case FaultInjection::Kind::kWrongSwapIn:
      return "wrong_swap_in";
    case FaultInjection::Kind::kWrongCopyDst:
      return "wrong_copy_dst";
  }
  return "?";
}

SamplingRule sampling_rule(const ValidationOptions& options, std::uint64_t seed) {
  SamplingRule r;
  r.every_steps = options.sample_every_steps;
  r.prob = options.sample_prob;
  r.count = options.sample_steps;
  r.budget_s = options.sample_budget_s;
  r.seed = seed;
  return r;
}

double ValidationRecord::error_score() const {
  return err.num_nonfinite > 0 ? std::numeric_limits<double>::infinity() : err.max_abs;
}

namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    std::string name = line.substr(colon + 1);
    name.erase(0, name.find_first_not_of(" \t"));
    return name;
  }
  return "cpu";
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kProgressEvery_s = 0.25;

}  // namespace

// ---- setup ----------------------------------------------------------------------------------

ValidationHarness::ValidationHarness(const Scenario& scenario, const ValidationOptions& options) {
  const std::string& who = scenario.file;
  if (scenario.engine.mode != EngineConfig::Mode::kTimed)
    throw ConfigError(who +
                      ": engine.mode cache_only runs no batches; validation needs mode: timed");
  if (!is_paged(profile_info(scenario.engine.profile).family))
    throw ConfigError(who + ": engine.profile " + profile_name(scenario.engine.profile) +
                      " keeps one contiguous region per request, which no paged-attention kernel "
                      "reads; validation needs a paged profile (" +
                      profile_name(Profile::kVllm072) + ", ...)");
  if (scenario.cluster.replicas > 1)
    throw ConfigError(who + ": cluster.replicas is " + std::to_string(scenario.cluster.replicas) +
                      "; validation checks one engine's block tables against one KV pool "
                      "(--set cluster.replicas=1 validates the engine alone under the whole "
                      "workload)");
  if (!scenario.model)
    throw ConfigError(who + ": model: required (the attention shape comes from it)");
  const ModelConfig& m = *scenario.model;
  if (m.mla)
    throw ConfigError(who + ": model " + m.name +
                      " uses MLA; the paged kernels implement multi-head/grouped attention only");
  const std::int64_t tp = std::max<std::int64_t>(scenario.hardware.tensor_parallel_size, 1);
  const std::int64_t hq = m.num_attention_heads / tp;
  const std::int64_t hkv = std::max<std::int64_t>(m.num_key_value_heads / tp, 1);
  const std::int64_t d = m.head_dim;
  if (hq < 1 || d < 1 || hq % hkv != 0)
    throw ConfigError(
        fmt::format("{}: model {}: {} query heads and {} KV heads per GPU (tp {}) "
                    "is not a grouped-attention shape",
                    who, m.name, hq, hkv, tp));
  const std::int64_t bs = scenario.cache.sizing.block_size;
  const std::int64_t blocks = scenario.num_gpu_blocks;

  setup_.backend = options.backend;
  setup_.dtype = options.dtype;
  setup_.num_q_heads = static_cast<std::int32_t>(hq);
  setup_.num_layers = m.num_hidden_layers;
  setup_.pool.dtype = options.dtype;
  setup_.pool.num_blocks = static_cast<std::int32_t>(blocks);
  setup_.pool.block_size = static_cast<std::int32_t>(bs);
  setup_.pool.num_kv_heads = static_cast<std::int32_t>(hkv);
  setup_.pool.head_size = static_cast<std::int32_t>(d);
  setup_.tol = kernels::default_tolerance(options.dtype);
  setup_.block_bytes = kernels::block_elements(setup_.pool) *
                       static_cast<std::int64_t>(kernels::dtype_size_bytes(options.dtype));
  setup_.pool_bytes = blocks * setup_.block_bytes;
  // vLLM V0: its steps' block moves are applied, with a swap pool of the engine's CPU blocks (one
  // layer), whose shadow (8 bytes per slot) is bookkeeping.
  setup_.block_moves = profile_info(scenario.engine.profile).family == EngineFamily::kV0;
  setup_.num_cpu_blocks = setup_.block_moves ? scenario.num_cpu_blocks : 0;
  setup_.swap_pool_bytes = setup_.num_cpu_blocks * setup_.block_bytes;
  const std::int64_t swap_fixed = setup_.num_cpu_blocks * bs * 8;
  // The shadow (8 bytes per slot) and per-block state always; the CUDA pool (and its timing
  // mirror, alike) whole; the CPU pool only as far as checked steps read it (PoolSync).
  const std::int64_t per_block_fixed =
      bs * 8 + detail::PoolSync::kBytesPerBlock +
      (setup_.block_moves ? bs * detail::PoolSync::kBytesPerMovedSlot : 0);
  setup_.bookkeeping_bytes = blocks * per_block_fixed + swap_fixed;
  // The CUDA backend's swap pool is pinned host memory, whole; the CPU backend's, the blocks
  // swapped out (PoolSync counts them). Its shadow always.
  const bool dense = options.backend == BackendKind::kCuda;
  const std::int64_t swap_held = swap_fixed + (dense ? setup_.swap_pool_bytes : 0);
  const std::int64_t pool_fixed = blocks * per_block_fixed + (dense ? setup_.pool_bytes : 0);
  if (pool_fixed <= options.max_pool_bytes && pool_fixed + swap_held > options.max_pool_bytes)
    throw ConfigError(fmt::format(
        "{}: the validation swap pool of {} CPU blocks (cache.swap_space, one layer) would hold "
        "{:.2f} GiB ({}an 8-byte shadow per slot), which with the pool is over the {:.2f} GiB "
        "limit; lower cache.swap_space",
        who, setup_.num_cpu_blocks, static_cast<double>(swap_held) / kGiB,
        dense ? "pinned host memory for its blocks and " : "",
        static_cast<double>(options.max_pool_bytes) / kGiB));
  const std::int64_t fixed =
      setup_.bookkeeping_bytes + (dense ? setup_.pool_bytes + setup_.swap_pool_bytes : 0);
  if (fixed > options.max_pool_bytes) {
    const std::int64_t fit =
        options.max_pool_bytes / (per_block_fixed + (dense ? setup_.block_bytes : 0));
    if (dense)
      throw ConfigError(fmt::format(
          "{}: the validation KV pool would take {:.2f} GiB on the device ({} blocks x {} tokens "
          "x {} KV heads x head {} x {}, K and V, one layer, plus an 8-byte shadow per slot on "
          "the host), over the {:.2f} GiB limit; shrink it with --set "
          "cache.num_gpu_blocks_override={} (or fewer), or validate a smaller model (fewer KV "
          "heads, smaller head_dim, or tensor_parallel_size)",
          who, static_cast<double>(fixed) / kGiB, blocks, bs, hkv, d,
          kernels::dtype_name(options.dtype), static_cast<double>(options.max_pool_bytes) / kGiB,
          fit));
    throw ConfigError(fmt::format(
        "{}: the validation harness's bookkeeping for the pool's {} blocks (an 8-byte shadow per "
        "slot and {} bytes per block) would take {:.2f} GiB, over the {:.2f} GiB limit; shrink "
        "the pool with --set cache.num_gpu_blocks_override={} (or fewer)",
        who, blocks, detail::PoolSync::kBytesPerBlock, static_cast<double>(fixed) / kGiB,
        static_cast<double>(options.max_pool_bytes) / kGiB, fit));
  }
  if (options.backend == BackendKind::kCuda) {
    if (options.dtype == DType::kF32)
      throw ConfigError(who +
                        ": the cuda backend stores fp16 or bf16 only (use --dtype fp16|bf16)");
    if (d != 64 && d != 128 && d != 256)
      throw ConfigError(
          fmt::format("{}: the cuda kernels support head_dim 64, 128 or 256, not {}", who, d));
    if (bs != 8 && bs != 16 && bs != 32)
      throw ConfigError(
          fmt::format("{}: the cuda kernels support block_size 8, 16 or 32, not {}", who, bs));
#if defined(KVSIM_KERNELS_HAVE_CUDA)
    if (!kernels::cuda_device_available())
      throw ConfigError(
          "--backend cuda: no usable CUDA device here (no driver or no GPU); "
          "use --backend cpu");
#else
    throw ConfigError(
        "--backend cuda: this kvsim was built without CUDA "
        "(configure with -DKVSIM_ENABLE_CUDA=ON where nvcc is installed); use --backend cpu");
#endif
  }
  setup_.warmup =
      options.warmup >= 0 ? options.warmup : (options.backend == BackendKind::kCuda ? 3 : 0);
  setup_.repeats =
      options.repeats >= 1 ? options.repeats : (options.backend == BackendKind::kCuda ? 20 : 3);

  impl_ = std::make_unique<Impl>(options, scenario.seed, static_cast<int>(hq),
                                 static_cast<int>(hkv), static_cast<int>(d));
  Impl& im = *impl_;
  im.block_size = bs;
  im.num_q_heads = static_cast<std::int32_t>(hq);
  im.warmup = setup_.warmup;
  im.repeats = setup_.repeats;
  im.shadow.assign(static_cast<std::size_t>(blocks * bs), 0);
  im.backend = kernels::make_attention_backend(options.backend);
  im.backend->init_pool(setup_.pool);
  im.backend->init_swap_pool(setup_.num_cpu_blocks);
  im.swap_shadow.assign(static_cast<std::size_t>(setup_.num_cpu_blocks * bs), 0);
  setup_.device =
      options.backend == BackendKind::kCuda ? kernels::cuda_device_name() : cpu_model_name();
  im.pool = std::make_unique<detail::PoolSync>(im, *im.backend, im.content, setup_.block_bytes,
                                               setup_.bookkeeping_bytes, options.max_pool_bytes,
                                               options.write_every_step, setup_.block_moves);
}

ValidationHarness::~ValidationHarness() = default;

CheckCostModel ValidationHarness::cost_model() const {
  return CheckCostModel::for_shape(setup_.num_q_heads, setup_.pool.num_kv_heads,
                                   setup_.pool.head_size);
}

void ValidationHarness::set_plan(SamplePlan plan, std::vector<StepTraits> traits) {
  KVSIM_ASSERT(plan.num_steps() == static_cast<std::int64_t>(traits.size()),
               "the plan and the survey cover different runs");
  if (setup_.backend == BackendKind::kCpu) {
    std::int64_t worst = -1;
    for (std::int64_t s = 0; s < plan.num_steps(); ++s)
      if (plan.reason(s) != 0 &&
          (worst < 0 || traits[static_cast<std::size_t>(s)].read_blocks >
                            traits[static_cast<std::size_t>(worst)].read_blocks))
        worst = s;
    const std::int64_t read =
        worst < 0 ? 0 : std::int64_t{traits[static_cast<std::size_t>(worst)].read_blocks};
    if (setup_.bookkeeping_bytes + read * setup_.block_bytes > impl_->opt.max_pool_bytes)
      throw ConfigError(fmt::format(
          "checked step {} reads {} blocks of the validation KV pool ({:.2f} GiB: {} tokens x {} "
          "KV heads x head {} x {}, K and V, one layer), which with {:.2f} GiB of bookkeeping is "
          "over the {:.2f} GiB limit; validate a smaller model (fewer KV heads, smaller head_dim, "
          "or tensor_parallel_size) or fewer concurrent requests (scheduler.max_num_seqs)",
          worst, read, static_cast<double>(read * setup_.block_bytes) / kGiB,
          setup_.pool.block_size, setup_.pool.num_kv_heads, setup_.pool.head_size,
          kernels::dtype_name(setup_.dtype), static_cast<double>(setup_.bookkeeping_bytes) / kGiB,
          static_cast<double>(impl_->opt.max_pool_bytes) / kGiB));
  }
  impl_->plan = std::move(plan);
  impl_->traits = std::move(traits);
  impl_->has_plan = true;
  impl_->t0 = impl_->last_report = std::chrono::steady_clock::now();
}

const SamplePlan& ValidationHarness::plan() const { return impl_->plan; }

PoolUsage ValidationHarness::pool_usage() const { return impl_->pool->usage(); }

BlockMoveCounts ValidationHarness::block_moves() const { return impl_->moves; }

// ---- one step -------------------------------------------------------------------------------

void ValidationHarness::Impl::load_batch(const StepView& view, bool full_tables) {
  const auto& sched = view.out->scheduled;
  num_seqs = sched.size();
  if (seqs.size() < num_seqs) seqs.resize(num_seqs);
  for (std::size_t i = 0; i < num_seqs; ++i) {
    const ScheduledRequest& sr = sched[i];
    const Request& r = *sr.request;
    SeqWork& s = seqs[i];
    s.request = &r;
    // The request id tells a reused index (slot) from the request that held it before, whose
    // cached keys must not carry over: the simulator always passes the map.
    KVSIM_ASSERT(static_cast<std::size_t>(r.index()) < view.request_id_of_index.size(),
                 "the step view has no request id for a scheduled request");
    s.request_id = view.request_id_of_index[static_cast<std::size_t>(r.index())];
    s.kind = sr.kind;
    s.computed = sr.num_computed_tokens;
    s.num_tokens = sr.num_tokens;
    s.context = sr.num_computed_tokens + sr.num_tokens;
    // Under async scheduling a step is scheduled before the outputs of the step in flight are
    // appended (Request::num_output_placeholders): it computes them from the tokens that step
    // samples, which the request's planned outputs say.
    KVSIM_ASSERT(s.context <= r.num_tokens() + r.num_output_placeholders,
                 "scheduled past the request's tokens");
    // Unchecked steps only write: the table entries from the first written position on do.
    const std::int64_t nblocks = cdiv(s.context, block_size);
    s.table_first = full_tables ? 0 : std::min(s.computed / block_size, nblocks);
    const std::span<const BlockId> table = view.engine->block_table(r);
    KVSIM_ASSERT(nblocks <= static_cast<std::int64_t>(table.size()),
                 "block table shorter than the scheduled context");
    s.table.resize(static_cast<std::size_t>(nblocks - s.table_first));
    for (std::int64_t b = s.table_first; b < nblocks; ++b)
      s.table[static_cast<std::size_t>(b - s.table_first)] =
          to_int(table[static_cast<std::size_t>(b)]);
    const auto idx = static_cast<std::size_t>(r.index());
    if (key_cache.size() <= idx) key_cache.resize(idx + 1);
    KeyCache& kc = key_cache[idx];
    if (kc.request_id != s.request_id) {
      kc.request_id = s.request_id;
      kc.keys.clear();
    }
    content.extend_prefix_keys(r.all_token_ids(), std::min(s.context, r.num_tokens()), kc.keys);
    // Positions past the request's tokens (async): the outputs the step in flight samples.
    for (auto p = static_cast<std::int64_t>(kc.keys.size()); p < s.context; ++p)
      content.append_key(r.planned_output(p - r.num_prompt_tokens()), kc.keys);
  }
  // Spans only once the cache has stopped growing (an outer resize moves the entries).
  for (std::size_t i = 0; i < num_seqs; ++i) {
    const auto& keys = key_cache[static_cast<std::size_t>(seqs[i].request->index())].keys;
    seqs[i].keys =
        std::span<const std::uint64_t>(keys.data(), static_cast<std::size_t>(seqs[i].context));
  }
}

void ValidationHarness::Impl::write_step(bool off_by_one) {
  written_blocks.clear();
  for (std::size_t i = 0; i < num_seqs; ++i) {
    const SeqWork& s = seqs[i];
    for (std::int64_t p = s.computed; p < s.context; ++p) {
      std::int64_t slot = slot_of(s, p);
      if (off_by_one) slot = (slot + 1) % num_slots();
      shadow[static_cast<std::size_t>(slot)] = s.keys[static_cast<std::size_t>(p)];
      pool->mark_stale(slot);
      if (opt.write_every_step) written_blocks.push_back(slot / block_size);
    }
  }
  if (opt.write_every_step) {
    pool->refresh_blocks(written_blocks);
    pool->flush();
  }
}

void ValidationHarness::Impl::report(std::int64_t steps_seen, bool done) {
  if (!opt.progress) return;
  const auto now = std::chrono::steady_clock::now();
  if (!done && std::chrono::duration<double>(now - last_report).count() < kProgressEvery_s) return;
  last_report = now;
  ValidationProgress p;
  p.step = steps_seen;
  p.num_steps = plan.num_steps();
  p.checked = checked;
  p.num_checked = plan.num_sampled;
  const double total = plan.check_s + plan.run_s;
  p.done_fraction = done ? 1.0 : total > 0 ? std::min(work_done_s / total, 1.0) : 0.0;
  p.elapsed_s = std::chrono::duration<double>(now - t0).count();
  p.finished = done;
  opt.progress(p);
}

void ValidationHarness::finish() {
  if (impl_->finished) return;
  impl_->finished = true;
  impl_->report(steps_seen_, true);
}

void ValidationHarness::on_step_begin(const StepView& view) {
  Impl& m = *impl_;
  KVSIM_ASSERT(m.has_plan, "ValidationHarness::set_plan before the first step");
  KVSIM_ASSERT(view.step < m.plan.num_steps(), "the run has more steps than its survey");
  ++steps_seen_;
  using Kind = FaultInjection::Kind;
  const FaultInjection& f = m.opt.fault;
  const bool fault_armed = f.kind != Kind::kNone && view.step >= f.from_step;
  std::uint8_t reasons = m.plan.reason(view.step);
  m.load_batch(view, reasons != 0 || (fault_armed && fault_step_ < 0));
  bool planted = false, moved = false;
  if (setup_.block_moves) {  // before the step's writes, as vLLM V0's worker
    m.load_moves(view);
    if (fault_armed && fault_step_ < 0 && f.kind == Kind::kWrongSwapIn)
      planted = detail::plant_wrong_swap_in(m);
    if (fault_armed && fault_step_ < 0 && f.kind == Kind::kWrongCopyDst)
      planted = detail::plant_wrong_copy_dst(m);
    if (!m.opt.ignore_block_moves) moved = m.apply_moves();
  }
  if (fault_armed && fault_step_ < 0 && f.kind == Kind::kBlockSharedInUse)
    planted = detail::plant_shared_in_use(m);
  const bool off_by_one = fault_armed && f.kind == Kind::kSlotOffByOne;
  if (off_by_one && fault_step_ < 0) planted = true;
  m.write_step(off_by_one);
  for (std::size_t i = 0; i < m.num_seqs; ++i) tokens_written_ += m.seqs[i].num_tokens;
  if (fault_armed && fault_step_ < 0) {
    if (f.kind == Kind::kWrongPrefixHit) planted = detail::plant_wrong_prefix_hit(m, *view.engine);
    if (f.kind == Kind::kCorruptBlockTable) planted = detail::plant_corrupt_table(m);
    if (f.kind == Kind::kPermutedBlockTable) planted = detail::plant_permuted_table(m);
  }
  if (planted) {
    fault_step_ = view.step;
    reasons |= SampleReason::kFault;
  }
  const StepTraits& t = m.traits[static_cast<std::size_t>(view.step)];
  m.work_done_s += t.run_s;
  if (reasons != 0) {
    ValidationRecord rec;
    rec.step = view.step;
    rec.time_s = static_cast<double>(view.start_ns) * 1e-9;
    rec.num_prefill_seqs = view.num_prefill_seqs;
    rec.prefill_tokens = view.prefill_tokens;
    rec.decode_tokens = view.decode_tokens;
    rec.sum_context_tokens = view.sum_context_tokens;
    rec.sum_context_sq = view.sum_context_sq;
    rec.fault_planted = planted;
    rec.reasons = reasons;
    m.check(rec, view.step);
    records_.push_back(rec);
    m.moves.checked_steps += moved;
    ++m.checked;
    m.work_done_s += t.check_s;
  }
  m.report(steps_seen_, false);
}

}  // namespace kvsim::validate
