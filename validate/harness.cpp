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
#include "validate/cuda_timer.h"
#include "validate/kv_content.h"
#include "validate/step_batch.h"

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
  }
  return "?";
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

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

struct ValidationHarness::Impl : detail::StepBatch {
  ValidationOptions opt;
  std::unique_ptr<kernels::AttentionBackend> backend;
  std::unique_ptr<CudaAttentionTimer> timer;  // cuda only
  KvContentModel content;
  std::int32_t num_q_heads = 0;
  std::int32_t warmup = 0, repeats = 1;  // resolved (ValidationSetup)
  std::uint64_t sample_seed = 0;
  /// Content keys of live requests by Request::index(), extended as their contexts grow; an
  /// entry belongs to the request whose requests.csv id it records (indices are reused).
  struct KeyCache {
    std::uint64_t request_id = ~std::uint64_t{0};
    std::vector<std::uint64_t> keys;
  };
  std::vector<KeyCache> key_cache;
  // Scratch, reused across steps.
  std::vector<std::byte> kbuf, vbuf;  // [tokens, Hkv, D] pool dtype
  std::vector<std::int64_t> slots;    // [tokens]
  std::vector<float> vec;             // one token's values
  std::vector<std::int32_t> tables, lens, q_indptr;
  std::vector<std::byte> q, out, out_timer;
  std::vector<float> qf, kf, vf, out_f, ref_f;

  Impl(const ValidationOptions& o, std::uint64_t seed, int hq, int hkv, int d)
      : opt(o),
        content(seed, hq, hkv, d, o.dtype),
        sample_seed(stream_seed(seed, "validate.sample")) {}

  std::size_t dsize() const { return kernels::dtype_size_bytes(opt.dtype); }

  bool sampled(std::int64_t step) const {
    if (opt.sample_every_steps > 0) return step % opt.sample_every_steps == 0;
    if (opt.sample_prob <= 0) return false;
    const double u =
        static_cast<double>(splitmix64(sample_seed ^ static_cast<std::uint64_t>(step)) >> 11) *
        0x1p-53;
    return u < opt.sample_prob;
  }

  void load_batch(const StepView& view);
  void write_step(bool off_by_one);
  void check(ValidationRecord& rec);
};

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
  const std::int64_t block_bytes =
      2 * bs * hkv * d * static_cast<std::int64_t>(kernels::dtype_size_bytes(options.dtype));
  setup_.pool_bytes = blocks * block_bytes;
  const std::int64_t host_bytes = setup_.pool_bytes + blocks * bs * 8;  // + the slot shadow
  if (host_bytes > options.max_pool_bytes) {
    const std::int64_t fit = options.max_pool_bytes / (block_bytes + bs * 8);
    throw ConfigError(fmt::format(
        "{}: the validation KV pool would take {:.2f} GiB ({} blocks x {} tokens x {} KV heads x "
        "head {} x {}, K and V, one layer, plus an 8-byte shadow per slot), over the {:.2f} GiB "
        "limit; shrink it with --set cache.num_gpu_blocks_override={} (or fewer), or validate a "
        "smaller model (fewer KV heads, smaller head_dim, or tensor_parallel_size)",
        who, static_cast<double>(host_bytes) / (1 << 30), blocks, bs, hkv, d,
        kernels::dtype_name(options.dtype), static_cast<double>(options.max_pool_bytes) / (1 << 30),
        fit));
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
  impl_->block_size = bs;
  impl_->num_q_heads = static_cast<std::int32_t>(hq);
  impl_->warmup = setup_.warmup;
  impl_->repeats = setup_.repeats;
  impl_->shadow.assign(static_cast<std::size_t>(blocks * bs), 0);
  impl_->backend = kernels::make_attention_backend(options.backend);
  impl_->backend->init_pool(setup_.pool);
  if (options.backend == BackendKind::kCuda) {
    impl_->timer = std::make_unique<CudaAttentionTimer>(setup_.pool);
    setup_.device = impl_->timer->device_name();
  } else {
    setup_.device = cpu_model_name();
  }
}

ValidationHarness::~ValidationHarness() = default;

// ---- one step -------------------------------------------------------------------------------

void ValidationHarness::Impl::load_batch(const StepView& view) {
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
    KVSIM_ASSERT(s.context <= r.num_tokens(), "scheduled past the request's tokens");
    const std::int64_t nblocks = cdiv(s.context, block_size);
    const std::span<const BlockId> table = view.engine->block_table(r);
    KVSIM_ASSERT(nblocks <= static_cast<std::int64_t>(table.size()),
                 "block table shorter than the scheduled context");
    s.table.resize(static_cast<std::size_t>(nblocks));
    for (std::int64_t b = 0; b < nblocks; ++b)
      s.table[static_cast<std::size_t>(b)] = to_int(table[static_cast<std::size_t>(b)]);
    const auto idx = static_cast<std::size_t>(r.index());
    if (key_cache.size() <= idx) key_cache.resize(idx + 1);
    KeyCache& kc = key_cache[idx];
    if (kc.request_id != s.request_id) {
      kc.request_id = s.request_id;
      kc.keys.clear();
    }
    content.extend_prefix_keys(r.all_token_ids(), s.context, kc.keys);
  }
  // Spans only once the cache has stopped growing (an outer resize moves the entries).
  for (std::size_t i = 0; i < num_seqs; ++i) {
    const auto& keys = key_cache[static_cast<std::size_t>(seqs[i].request->index())].keys;
    seqs[i].keys =
        std::span<const std::uint64_t>(keys.data(), static_cast<std::size_t>(seqs[i].context));
  }
}

void ValidationHarness::Impl::write_step(bool off_by_one) {
  std::int64_t n = 0;
  for (std::size_t i = 0; i < num_seqs; ++i) n += seqs[i].num_tokens;
  const std::int64_t elems = content.kv_elems();
  kbuf.resize(static_cast<std::size_t>(n * elems) * dsize());
  vbuf.resize(kbuf.size());
  slots.resize(static_cast<std::size_t>(n));
  vec.resize(static_cast<std::size_t>(elems));
  std::int64_t t = 0;
  for (std::size_t i = 0; i < num_seqs; ++i) {
    const SeqWork& s = seqs[i];
    for (std::int64_t p = s.computed; p < s.context; ++p, ++t) {
      const std::uint64_t key = s.keys[static_cast<std::size_t>(p)];
      content.values(key, KvPart::kKey, vec.data());
      for (std::int64_t e = 0; e < elems; ++e)
        kernels::store_from_float(kbuf.data(), opt.dtype, t * elems + e,
                                  vec[static_cast<std::size_t>(e)]);
      content.values(key, KvPart::kValue, vec.data());
      for (std::int64_t e = 0; e < elems; ++e)
        kernels::store_from_float(vbuf.data(), opt.dtype, t * elems + e,
                                  vec[static_cast<std::size_t>(e)]);
      std::int64_t slot = slot_of(s, p);
      if (off_by_one) slot = (slot + 1) % num_slots();
      slots[static_cast<std::size_t>(t)] = slot;
      shadow[static_cast<std::size_t>(slot)] = key;
    }
  }
  backend->write_kv(kbuf.data(), vbuf.data(), slots.data(), n);
  if (timer) timer->write_kv(kbuf.data(), vbuf.data(), slots.data(), n);
}

void ValidationHarness::Impl::check(ValidationRecord& rec) {
  const std::int64_t d = backend->pool_shape().head_size;
  const std::int64_t qe = content.q_elems();
  const std::int64_t ke = content.kv_elems();
  const auto ns = static_cast<std::int32_t>(num_seqs);
  std::int64_t max_blocks = 1, rows = 0;
  bool any_chunk = false;
  for (std::size_t i = 0; i < num_seqs; ++i) {
    max_blocks =
        std::max<std::int64_t>(max_blocks, static_cast<std::int64_t>(seqs[i].table.size()));
    rows += seqs[i].num_tokens;
    any_chunk = any_chunk || seqs[i].num_tokens != 1;
  }
  tables.assign(static_cast<std::size_t>(ns * max_blocks), 0);  // vLLM pads with block 0
  lens.resize(num_seqs);
  q_indptr.assign(num_seqs + 1, 0);
  q.resize(static_cast<std::size_t>(rows * qe) * dsize());
  qf.resize(static_cast<std::size_t>(rows * qe));
  rec.num_seqs = ns;
  rec.max_context = 0;
  std::int64_t kv_tokens = 0;
  for (std::size_t i = 0; i < num_seqs; ++i) {
    const SeqWork& s = seqs[i];
    std::copy(s.table.begin(), s.table.end(),
              tables.begin() + static_cast<std::ptrdiff_t>(i) * max_blocks);
    lens[i] = static_cast<std::int32_t>(s.context);
    q_indptr[i + 1] = q_indptr[i] + static_cast<std::int32_t>(s.num_tokens);
    for (std::int64_t p = s.computed; p < s.context; ++p) {
      const std::int64_t row = q_indptr[i] + (p - s.computed);
      float* dst = qf.data() + row * qe;
      content.values(s.keys[static_cast<std::size_t>(p)], KvPart::kQuery, dst);
      for (std::int64_t e = 0; e < qe; ++e)
        kernels::store_from_float(q.data(), opt.dtype, row * qe + e, dst[e]);
    }
    rec.max_context = std::max(rec.max_context, s.context);
    kv_tokens += s.context;
    // Content audit: does each context slot hold this request's own K/V?
    for (std::int64_t p = 0; p < s.context; ++p)
      rec.mismatched_slots +=
          shadow[static_cast<std::size_t>(slot_of(s, p))] != s.keys[static_cast<std::size_t>(p)];
  }

  kernels::attention_batch batch;
  batch.block_tables = tables.data();
  batch.max_blocks_per_seq = static_cast<std::int32_t>(max_blocks);
  batch.seq_lens = lens.data();
  batch.num_seqs = ns;
  batch.q_indptr = any_chunk ? q_indptr.data() : nullptr;
  batch.num_q_heads = num_q_heads;
  batch.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  out.resize(q.size());

  KernelTiming timing;
  if (timer) {
    backend->attention(batch, q.data(), out.data());
    out_timer.resize(out.size());
    timing = timer->time(batch, q.data(), warmup, repeats, out_timer.data());
    rec.timer_output_mismatch = std::memcmp(out.data(), out_timer.data(), out.size()) != 0;
  } else {
    for (std::int32_t i = 0; i < warmup; ++i) backend->attention(batch, q.data(), out.data());
    std::vector<double> samples(static_cast<std::size_t>(repeats));
    for (std::int32_t i = 0; i < repeats; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      backend->attention(batch, q.data(), out.data());
      samples[static_cast<std::size_t>(i)] = 1e6 * seconds_since(t0);
    }
    timing = timing_from_samples(samples.data(), repeats);
  }
  rec.latency_us = timing.median_us;
  rec.latency_p10_us = timing.p10_us;
  rec.latency_p90_us = timing.p90_us;
  rec.repeats = timing.repeats;
  rec.bytes = static_cast<std::int64_t>(dsize()) * (2 * kv_tokens * ke + 2 * rows * qe) +
              4 * (ns * max_blocks + 2 * static_cast<std::int64_t>(ns) + 1);
  rec.achieved_gb_per_s =
      rec.latency_us > 0 ? static_cast<double>(rec.bytes) / (rec.latency_us * 1e3) : 0;

  // The reference: every request from its own tokens, K/V regenerated (never read from the pool).
  const std::int32_t hkv = backend->pool_shape().num_kv_heads;
  out_f.resize(static_cast<std::size_t>(rows * qe));
  for (std::int64_t e = 0; e < rows * qe; ++e)
    out_f[static_cast<std::size_t>(e)] = kernels::load_as_float(out.data(), opt.dtype, e);
  ref_f.resize(out_f.size());
  double worst = -1;
  for (std::size_t i = 0; i < num_seqs; ++i) {
    const SeqWork& s = seqs[i];
    kf.resize(static_cast<std::size_t>(s.context * ke));
    vf.resize(kf.size());
    for (std::int64_t p = 0; p < s.context; ++p) {
      content.values(s.keys[static_cast<std::size_t>(p)], KvPart::kKey, kf.data() + p * ke);
      content.values(s.keys[static_cast<std::size_t>(p)], KvPart::kValue, vf.data() + p * ke);
    }
    kernels::dense_sequence ds;
    ds.q = qf.data() + std::int64_t{q_indptr[i]} * qe;
    ds.k = kf.data();
    ds.v = vf.data();
    ds.q_len = static_cast<std::int32_t>(s.num_tokens);
    ds.kv_len = static_cast<std::int32_t>(s.context);
    const std::vector<float> ref = kernels::dense_attention_reference<double>(
        ds, num_q_heads, hkv, static_cast<int>(d), batch.scale);
    const std::int64_t base = std::int64_t{q_indptr[i]} * qe;
    std::copy(ref.begin(), ref.end(), ref_f.begin() + base);
    double seq_max = 0;
    for (std::size_t e = 0; e < ref.size(); ++e) {
      const double diff =
          std::fabs(static_cast<double>(out_f[static_cast<std::size_t>(base) + e]) - ref[e]);
      seq_max =
          std::isfinite(diff) ? std::max(seq_max, diff) : std::numeric_limits<double>::infinity();
    }
    if (seq_max > worst) {
      worst = seq_max;
      rec.worst_request_id = s.request_id;
    }
  }
  const kernels::tolerance tol = kernels::default_tolerance(opt.dtype);
  rec.err = kernels::compare_outputs(out_f.data(), ref_f.data(), rows * qe, tol);
  rec.pass = kernels::passes(rec.err, tol) && rec.mismatched_slots == 0;
}

void ValidationHarness::on_step_begin(const StepView& view) {
  Impl& m = *impl_;
  ++steps_seen_;
  m.load_batch(view);
  using Kind = FaultInjection::Kind;
  const FaultInjection& f = m.opt.fault;
  const bool fault_armed = f.kind != Kind::kNone && view.step >= f.from_step;
  bool planted = false;
  if (fault_armed && fault_step_ < 0 && f.kind == Kind::kBlockSharedInUse)
    planted = detail::plant_shared_in_use(m);
  const bool off_by_one = fault_armed && f.kind == Kind::kSlotOffByOne;
  if (off_by_one && fault_step_ < 0) planted = true;
  m.write_step(off_by_one);
  for (std::size_t i = 0; i < m.num_seqs; ++i) tokens_written_ += m.seqs[i].num_tokens;
  if (fault_armed && fault_step_ < 0) {
    if (f.kind == Kind::kWrongPrefixHit)
      planted = detail::plant_wrong_prefix_hit(m, *view.engine);
    if (f.kind == Kind::kCorruptBlockTable) planted = detail::plant_corrupt_table(m);
    if (f.kind == Kind::kPermutedBlockTable) planted = detail::plant_permuted_table(m);
  }
  if (planted) fault_step_ = view.step;
  if (!planted && !m.sampled(view.step)) return;

  ValidationRecord rec;
  rec.step = view.step;
  rec.time_s = static_cast<double>(view.start_ns) * 1e-9;
  rec.num_prefill_seqs = view.num_prefill_seqs;
  rec.prefill_tokens = view.prefill_tokens;
  rec.decode_tokens = view.decode_tokens;
  rec.sum_context_tokens = view.sum_context_tokens;
  rec.sum_context_sq = view.sum_context_sq;
  rec.fault_planted = planted;
  m.check(rec);
  records_.push_back(rec);
}

}  // namespace kvsim::validate
