// The planted faults of FaultInjection (tests only): each edits the harness's own copy of a
// step's block tables, never core/.

#include <algorithm>

#include "validate/step_batch.h"

namespace kvsim::validate::detail {
namespace {

/// True when every slot of block `x` has been written and some slot holds other K/V than
/// `keys[0, block_size)`: pointing a table entry with those keys at `x` changes what is read.
bool written_with_other_content(const StepBatch& batch, std::int32_t x, const std::uint64_t* keys) {
  bool written = true, differs = false;
  for (std::int64_t o = 0; o < batch.block_size; ++o) {
    const std::uint64_t have = batch.shadow[static_cast<std::size_t>(x * batch.block_size + o)];
    written = written && have != 0;
    differs = differs || have != keys[o];
  }
  return written && differs;
}

/// The batch index of the request with the shortest context >= min_context, or num_seqs.
std::size_t shortest_with_context(const StepBatch& batch, std::int64_t min_context) {
  const std::vector<SeqWork>& seqs = batch.seqs;
  std::size_t best = batch.num_seqs;
  for (std::size_t i = 0; i < batch.num_seqs; ++i)
    if (seqs[i].context >= min_context &&
        (best == batch.num_seqs || seqs[i].context < seqs[best].context))
      best = i;
  return best;
}

/// How much of what the batch reads from pool block `x` at positions it does not write in this
/// step differs from what the shadow says `x` holds now: the largest share, over the requests
/// reading `x` at least half a block of other K/V there, of a request's context that differs
/// (0: none does).
double read_with_other_content(const StepBatch& batch, std::int64_t x) {
  const std::int64_t block_size = batch.block_size;
  double worst = 0;
  for (std::size_t i = 0; i < batch.num_seqs; ++i) {
    const SeqWork& s = batch.seqs[i];
    for (std::size_t j = 0; j < s.table.size(); ++j) {
      if (s.table[j] != x) continue;
      const std::int64_t first = (static_cast<std::int64_t>(j) + s.table_first) * block_size;
      std::int64_t differ = 0;
      for (std::int64_t p = first; p < std::min(first + block_size, s.computed); ++p)
        differ += batch.shadow[static_cast<std::size_t>(x * block_size + p - first)] !=
                  s.keys[static_cast<std::size_t>(p)];
      if (2 * differ >= block_size)
        worst = std::max(worst, static_cast<double>(differ) / static_cast<double>(s.context));
    }
  }
  return worst;
}

/// The first pool block after `from` (cyclically) that no move of the step names and no request
/// of the batch reads, or -1.
std::int64_t unused_block(const StepBatch& batch, std::int64_t from) {
  const std::int64_t num_blocks = batch.num_slots() / batch.block_size;
  const auto named = [](const std::vector<std::int64_t>& pairs, std::int64_t b, std::size_t pos) {
    for (std::size_t i = pos; i < pairs.size(); i += 2)
      if (pairs[i] == b) return true;
    return false;
  };
  for (std::int64_t k = 1; k < num_blocks; ++k) {
    const std::int64_t b = (from + k) % num_blocks;
    if (named(batch.swap_in, b, 1) || named(batch.swap_out, b, 0) || named(batch.copies, b, 0) ||
        named(batch.copies, b, 1))
      continue;
    bool read = false;
    for (std::size_t i = 0; i < batch.num_seqs && !read; ++i)
      read = std::find(batch.seqs[i].table.begin(), batch.seqs[i].table.end(), b) !=
             batch.seqs[i].table.end();
    if (!read) return b;
  }
  return -1;
}

/// Of the pool blocks `pairs` ([n, 2]: (src, pool block)) moves into, the one whose readers in
/// the batch would see the most other K/V if the move did not come (see read_with_other_content)
/// is moved into an unused block instead, by every pair that names it (vLLM V0 lists a block
/// shared by a group's sequences once per sequence).
bool redirect_move(StepBatch& batch, std::vector<std::int64_t>& pairs) {
  double best_score = 0;
  std::int64_t best = -1;
  for (std::size_t i = 1; i < pairs.size(); i += 2) {
    const double score = read_with_other_content(batch, pairs[i]);
    if (score > best_score) best_score = score, best = pairs[i];
  }
  if (best < 0) return false;
  const std::int64_t x = unused_block(batch, best);
  if (x < 0) return false;
  for (std::size_t i = 1; i < pairs.size(); i += 2)
    if (pairs[i] == best) pairs[i] = x;
  return true;
}

}  // namespace

bool plant_wrong_swap_in(StepBatch& batch) { return redirect_move(batch, batch.swap_in); }

bool plant_wrong_copy_dst(StepBatch& batch) { return redirect_move(batch, batch.copies); }

bool plant_shared_in_use(StepBatch& batch) {
  const std::int64_t block_size = batch.block_size;
  std::vector<SeqWork>& seqs = batch.seqs;
  const std::size_t num_seqs = batch.num_seqs;
  // Writer B's first block of its write range becomes block X, a fully computed block of another
  // request A of the batch: B's writes overwrite A's K/V, which A reads in this very step. Planted
  // only where B overwrites at least half a block of A's K/V with different content (a prefill
  // chunk), preferring the A whose context it corrupts most.
  double best_score = 0;
  std::size_t best_b = 0, best_a = 0;
  std::int64_t best_i = 0, best_j = 0;
  for (std::size_t b = 0; b < num_seqs; ++b) {
    const SeqWork& B = seqs[b];
    const std::int64_t i = B.computed / block_size;
    const std::int64_t p_end = std::min(B.context, (i + 1) * block_size);
    for (std::size_t a = 0; a < num_seqs; ++a) {
      const SeqWork& A = seqs[a];
      if (a == b || A.computed < block_size) continue;
      const std::int64_t j = A.computed / block_size - 1;
      const std::int32_t x = A.table[static_cast<std::size_t>(j)];
      if (std::find(B.table.begin(), B.table.end(), x) != B.table.end()) continue;
      std::int64_t differ = 0;
      for (std::int64_t p = B.computed; p < p_end; ++p)
        differ += B.keys[static_cast<std::size_t>(p)] !=
                  A.keys[static_cast<std::size_t>(j * block_size + p % block_size)];
      if (2 * differ < block_size) continue;
      const double score = static_cast<double>(differ) / static_cast<double>(A.context);
      if (score > best_score) {
        best_score = score;
        best_b = b, best_a = a, best_i = i, best_j = j;
      }
    }
  }
  if (best_score == 0) return false;
  seqs[best_b].table[static_cast<std::size_t>(best_i)] =
      seqs[best_a].table[static_cast<std::size_t>(best_j)];
  return true;
}

bool plant_wrong_prefix_hit(StepBatch& batch, const EngineCore& engine) {
  const std::int64_t block_size = batch.block_size;
  std::vector<SeqWork>& seqs = batch.seqs;
  const std::size_t num_seqs = batch.num_seqs;
  // Candidates: requests admitted this step with a prefix hit of at least one block (their
  // num_computed_tokens are the hits), shortest context first (one wrong block weighs most there).
  // The last hit block is served from a cached block of another prefix.
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < num_seqs; ++i)
    if (seqs[i].kind != ScheduledRequest::Kind::kRunning && seqs[i].computed >= block_size)
      order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return seqs[x].context < seqs[y].context; });
  // Cached blocks: free-but-cached ones (eviction candidates) first, then cached blocks in use.
  std::vector<BlockId> cached_ids;
  engine.cached_blocks(cached_ids);
  std::vector<std::int32_t> cached;
  for (BlockId b : cached_ids) cached.push_back(to_int(b));
  for (std::size_t ri : order) {
    SeqWork& R = seqs[ri];
    const std::int64_t j = R.computed / block_size - 1;
    for (std::int32_t x : cached) {
      if (x == R.table[static_cast<std::size_t>(j)] ||
          !written_with_other_content(batch, x, R.keys.data() + j * block_size))
        continue;
      R.table[static_cast<std::size_t>(j)] = x;
      return true;
    }
  }
  return false;
}

bool plant_corrupt_table(StepBatch& batch) {
  const std::int64_t block_size = batch.block_size;
  // The first entry of the shortest request with a full block gets a bit flipped (id ^ 1, ^ 2,
  // ^ 4, ...): the first such id that is a fully written block of the pool with other K/V and
  // not in the request's table. NOTE: swapping two entries would not do: attention over a
  // decode row is a sum over its keys, so a permuted block table gives the same output (only the
  // content audit sees it).
  const std::size_t best = shortest_with_context(batch, block_size);
  if (best == batch.num_seqs) return false;
  SeqWork& R = batch.seqs[best];
  const auto num_blocks = static_cast<std::int32_t>(batch.num_slots() / block_size);
  for (std::int32_t bit = 1; bit < num_blocks; bit <<= 1) {
    const std::int32_t x = R.table[0] ^ bit;
    if (x >= num_blocks || std::find(R.table.begin(), R.table.end(), x) != R.table.end() ||
        !written_with_other_content(batch, x, R.keys.data()))
      continue;
    R.table[0] = x;
    return true;
  }
  return false;
}

bool plant_permuted_table(StepBatch& batch) {
  const std::size_t best = shortest_with_context(batch, 2 * batch.block_size);
  if (best == batch.num_seqs) return false;
  std::swap(batch.seqs[best].table[0], batch.seqs[best].table[1]);
  return true;
}

}  // namespace kvsim::validate::detail
