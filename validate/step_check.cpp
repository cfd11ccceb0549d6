// The check of one sampled step (ValidationHarness, harness.h): the batch's attention call
// through the block tables against a dense reference from each request's own tokens, and the
// content audit.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/dense_reference.h"
#include "validate/harness_impl.h"

namespace kvsim::validate {

using detail::ReferenceScratch;
using detail::SeqWork;

void ValidationHarness::Impl::check(ValidationRecord& rec, std::int64_t step) {
  const std::int64_t d = backend->pool_shape().head_size;
  const std::int32_t hkv = backend->pool_shape().num_kv_heads;
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

  // The stale blocks the batch reads are brought up to date first, serially (one pool), each
  // slot's K/V generated from its key. Then the references, one request per task on the
  // reference workers: each request's K/V regenerated from its own keys (never read from the
  // pool), its reference written to its own rows of ref_f, so any number of workers gives the
  // same bytes.
  pool->reserve(step);
  for (std::size_t i = 0; i < num_seqs; ++i) pool->refresh(seqs[i]);
  ref_f.resize(static_cast<std::size_t>(rows * qe));
  const float scale = batch.scale;
  reference_workers.run(num_seqs, kv_tokens * ke, [&](std::size_t i, ReferenceScratch& scratch) {
    const SeqWork& s = seqs[i];
    std::vector<float>& kf = scratch.k;
    std::vector<float>& vf = scratch.v;
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
        ds, num_q_heads, hkv, static_cast<int>(d), scale);
    std::copy(ref.begin(), ref.end(), ref_f.begin() + std::int64_t{q_indptr[i]} * qe);
  });
  pool->flush();
  pool->count_moved_reads();

  out.resize(q.size());
  const kernels::KernelTiming timing =
      backend->time_attention(batch, q.data(), warmup, repeats, out.data());
  if (backend->kind() == kernels::BackendKind::kCuda) {
    // One more call outside the timing loop must give the same bits (no race, no state kept
    // between launches).
    out_timer.resize(out.size());
    backend->attention(batch, q.data(), out_timer.data());
    rec.timer_output_mismatch = std::memcmp(out.data(), out_timer.data(), out.size()) != 0;
  }
  rec.latency_us = timing.median_us;
  rec.latency_p10_us = timing.p10_us;
  rec.latency_p90_us = timing.p90_us;
  rec.repeats = timing.repeats;
  rec.bytes = static_cast<std::int64_t>(dsize()) * (2 * kv_tokens * ke + 2 * rows * qe) +
              4 * (ns * max_blocks + 2 * static_cast<std::int64_t>(ns) + 1);
  rec.achieved_gb_per_s =
      rec.latency_us > 0 ? static_cast<double>(rec.bytes) / (rec.latency_us * 1e3) : 0;

  out_f.resize(static_cast<std::size_t>(rows * qe));
  for (std::int64_t e = 0; e < rows * qe; ++e)
    out_f[static_cast<std::size_t>(e)] = kernels::load_as_float(out.data(), opt.dtype, e);
  double worst = -1;
  for (std::size_t i = 0; i < num_seqs; ++i) {
    double seq_max = 0;
    for (std::int64_t e = std::int64_t{q_indptr[i]} * qe; e < std::int64_t{q_indptr[i + 1]} * qe;
         ++e) {
      const double diff = std::fabs(static_cast<double>(out_f[static_cast<std::size_t>(e)]) -
                                    static_cast<double>(ref_f[static_cast<std::size_t>(e)]));
      seq_max =
          std::isfinite(diff) ? std::max(seq_max, diff) : std::numeric_limits<double>::infinity();
    }
    if (seq_max > worst) {
      worst = seq_max;
      rec.worst_request_id = seqs[i].request_id;
    }
  }
  const kernels::tolerance tol = kernels::default_tolerance(opt.dtype);
  rec.err = kernels::compare_outputs(out_f.data(), ref_f.data(), rows * qe, tol);
  rec.pass = kernels::passes(rec.err, tol) && rec.mismatched_slots == 0;
}

}  // namespace kvsim::validate
