#include "core/v1/kv_cache_coordinator.h"

#include <algorithm>
#include <numeric>

#include "core/common/assert.h"
#include "core/common/hot.h"

namespace kvsim {

std::vector<KVGroupSpec> KVCacheCoordinator::groups_of(const KVCacheConfig& config) {
  if (!config.kv_cache_groups.empty()) return config.kv_cache_groups;
  KVGroupSpec g;
  g.block_size = config.block_size;
  if (config.sliding_window > 0) {
    g.kind = KVGroupKind::kSlidingWindow;
    g.sliding_window = config.sliding_window;
  }
  return {g};
}

std::int32_t KVCacheCoordinator::hash_block_size_of(const KVCacheConfig& config) {
  const std::vector<KVGroupSpec> groups = groups_of(config);
  if (groups.size() == 1) return groups[0].block_size;
  if (config.hash_block_size > 0) return config.hash_block_size;
  std::int32_t g = 0;
  for (const KVGroupSpec& s : groups) g = std::gcd(g, s.block_size);
  return g;
}

std::string KVCacheCoordinator::check_layout(const KVCacheConfig& config) {
  const std::vector<KVGroupSpec> groups = groups_of(config);
  if (groups.empty()) return "ValueError: kv_cache_groups must not be empty";
  if (groups.size() > 256) return "ValueError: at most 256 KV cache groups";
  for (const KVGroupSpec& s : groups) {
    if (s.block_size <= 0 || s.block_size > (1 << 20))
      return "ValueError: a group's block_size must be in 1..2^20";
    if (s.kind == KVGroupKind::kSlidingWindow && s.sliding_window <= 0)
      return "ValueError: a sliding_window group needs sliding_window > 0";
    if (s.kind == KVGroupKind::kChunkedLocal && s.attention_chunk_size <= 0)
      return "ValueError: a chunked_local group needs attention_chunk_size > 0";
    if (s.kind == KVGroupKind::kMamba && s.num_speculative_blocks < 0)
      return "ValueError: num_speculative_blocks must be >= 0";
  }
  if (groups.size() > 1 && config.enable_caching) {
    const std::int32_t hbs = hash_block_size_of(config);
    for (const KVGroupSpec& s : groups)
      if (s.block_size % hbs != 0)
        return "ValueError: Invalid hash_block_size; all KV cache group block sizes must be "
               "divisible by hash_block_size";
    bool distinct = false;
    for (const KVGroupSpec& s : groups) distinct = distinct || !s.same_spec(groups[0]);
    if (!distinct)
      return "AssertionError: HybridKVCacheCoordinator requires at least two attention groups.";
  }
  return {};
}

KVCacheCoordinator::KVCacheCoordinator(const KVCacheConfig& config, BlockPool& pool,
                                       BlockHashTable& hashes, bool admission_cap)
    : config_(config), pool_(pool), hashes_(hashes), hash_block_(hash_block_size_of(config)) {
  KVSIM_ASSERT(check_layout(config).empty(), "invalid KV cache group layout");
  const std::vector<KVGroupSpec> groups = groups_of(config);
  const std::int64_t batched =
      config.max_num_batched_tokens > 0 ? config.max_num_batched_tokens : config.max_model_len;
  lcm_block_size_ = 1;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const KVGroupSpec& s = groups[g];
    lcm_block_size_ = std::lcm(lcm_block_size_, std::int64_t{s.block_size});
    // max_admission_blocks_per_request (kv_cache_interface.py:379, :421).
    std::int64_t cap = 0;
    if (!admission_cap)
      cap = 0;
    else if (s.kind == KVGroupKind::kSlidingWindow)
      cap = cdiv(std::min(s.sliding_window - 1 + batched, config.max_model_len), s.block_size) + 1;
    else if (s.kind == KVGroupKind::kChunkedLocal)
      cap = cdiv(std::min(s.attention_chunk_size + batched, config.max_model_len), s.block_size);
    managers_.emplace_back(s, static_cast<std::int32_t>(g), cap, pool);
    hash_ratio_.emplace_back(s.block_size / hash_block_.value());
    has_mamba_ = has_mamba_ || s.kind == KVGroupKind::kMamba;
    mamba_align_ = mamba_align_ || s.mamba_align();
  }
  bool any_eagle = false;
  for (const KVGroupSpec& s : groups) any_eagle = any_eagle || s.eagle;
  for (const KVGroupSpec& s : groups)
    eagle_groups_.push_back(s.eagle || (config.use_eagle && !any_eagle));
  // Identical specs are looked up together; full attention first (a stable sort).
  for (std::size_t g = 0; g < groups.size(); ++g) {
    auto it = std::find_if(attention_groups_.begin(), attention_groups_.end(), [&](auto& a) {
      return groups[static_cast<std::size_t>(a.manager)].same_spec(groups[g]);
    });
    if (it == attention_groups_.end()) {
      attention_groups_.push_back({static_cast<std::int32_t>(g), {}, false});
      it = attention_groups_.end() - 1;
    }
    it->group_ids.push_back(static_cast<std::int32_t>(g));
    it->eagle = it->eagle || eagle_groups_[g];
  }
  std::stable_partition(attention_groups_.begin(), attention_groups_.end(), [&](auto& a) {
    return groups[static_cast<std::size_t>(a.manager)].kind == KVGroupKind::kFullAttention;
  });
  new_blocks_.assign(groups.size(), 0);
  assigned_.assign(groups.size(), 0);
}

KVSIM_HOT void KVCacheCoordinator::init_request(Request& request,
                                                std::int64_t reserve_tokens) const {
  if (request.kv_groups.size() > managers_.size()) request.kv_groups.resize(managers_.size());
  // (Appended one by one: the small vector's resize takes its general insertion path.)
  while (request.kv_groups.size() < managers_.size()) request.kv_groups.emplace_back();
  if (reserve_tokens <= 0) return;
  for (std::size_t g = 0; g < managers_.size(); ++g)
    request.kv_groups[g].blocks.reserve(
        static_cast<std::size_t>(managers_[g].blocks_for(reserve_tokens)));
  request.block_hashes.reserve(static_cast<std::size_t>(hash_block_.div(reserve_tokens)));
}

// ---- hashing --------------------------------------------------------------------------------

// generate_block_hash_extra_keys (kv_cache_utils.py:501): the LoRA name, (identifier, offset in
// the block) per overlapping multimodal item, the cache salt (block 0). Strings are stored as
// "s<text>", items as "p<identifier>\0<offset>": equal exactly when vLLM's tuples are.
KVSIM_HOT ExtraKeysId KVCacheCoordinator::extra_keys(const Request& request, std::int64_t start,
                                                     std::int64_t end, std::int64_t& mm_idx) {
  extra_scratch_.clear();
  if (request.lora_name) extra_scratch_.push_back("s" + *request.lora_name);
  const auto& mm = request.mm_positions;
  if (!mm.empty() && mm.back().offset + mm.back().length > start) {
    if (mm_idx < 0) mm_idx += static_cast<std::int64_t>(mm.size());
    std::int64_t cur = mm_idx;
    while (cur < static_cast<std::int64_t>(mm.size())) {
      const MMPlaceholder& p = mm[static_cast<std::size_t>(cur)];
      if (end <= p.offset) break;          // the block has not reached this item
      if (start >= p.offset + p.length) {  // the block is past this item
        ++cur;
        continue;
      }
      std::string key = "p" + p.hash;
      key.push_back('\0');
      key += std::to_string(p.offset - start);
      extra_scratch_.push_back(std::move(key));
      if (end >= p.offset + p.length)
        ++cur;  // the block may also reach the next item
      else
        break;
    }
    mm_idx = cur;
  }
  if (start == 0 && request.cache_salt && !request.cache_salt->empty())
    extra_scratch_.push_back("s" + *request.cache_salt);
  if (extra_scratch_.empty()) return kExtraNone;
  return hashes_.intern_extra(extra_scratch_);
}

KVSIM_HOT void KVCacheCoordinator::hash_deferred_prompt(Request& request) {
  const std::int64_t n = request.deferred_hash_tokens;
  request.deferred_hash_tokens = -1;
  hash_blocks(request, n);
}

KVSIM_HOT void KVCacheCoordinator::hash_blocks(Request& request, const std::int64_t n) {
  if (!hashing_) return;
  const std::int64_t bs = hash_block_.value();
  std::int64_t start = static_cast<std::int64_t>(request.block_hashes.size()) * bs;
  if (start + bs > n) return;
  const std::vector<Token>& tokens = request.all_token_ids();
  HashId parent = request.block_hashes.empty() ? kNoHash : request.block_hashes.back();
  std::int64_t mm_idx = start == 0 ? 0 : -1;
  const bool salted = request.cache_salt && !request.cache_salt->empty();
  if (request.mm_positions.empty() && !(start == 0 && salted)) {
    // Every block has the same extra keys (the LoRA name or none): one chain.
    const ExtraKeysId extra =
        request.lora_name ? extra_keys(request, start, start + bs, mm_idx) : kExtraNone;
    const std::int64_t end = hash_block_.div(n) * bs;
    hashes_.intern_chain(
        parent,
        std::span<const Token>(tokens.data() + start, static_cast<std::size_t>(end - start)), extra,
        request.block_hashes);
    return;
  }
  for (; start + bs <= n; start += bs) {
    const ExtraKeysId extra = extra_keys(request, start, start + bs, mm_idx);
    parent = hashes_.intern(
        parent, std::span<const Token>(tokens.data() + start, static_cast<std::size_t>(bs)), extra);
    request.block_hashes.push_back(parent);
  }
}

// ---- lookup ---------------------------------------------------------------------------------

KVSIM_HOT std::int64_t KVCacheCoordinator::find_longest_cache_hit(const Request& request,
                                                                  std::int64_t max_length,
                                                                  GroupBlockLists& hits,
                                                                  AllocStatus& status) {
  if (managers_.size() == 1) {  // UnitaryKVCacheCoordinator
    const SingleTypeManager& m = managers_[0];
    const std::int32_t ids[1] = {0};
    status = m.find_longest_cache_hit(view(request, m), max_length, ids, eagle_groups_[0],
                                      m.block_size(), hits);
    return static_cast<std::int64_t>(hits[0].size()) * m.block_size();
  }
  // HybridKVCacheCoordinator: a fixed point; each attention type accepts the candidate length or
  // shortens it. With one full-attention type and one other, one pass suffices.
  std::fill(assigned_.begin(), assigned_.end(), 0);
  std::int64_t hit_length = max_length;
  const auto kind_of = [&](const AttentionGroup& a) {
    return managers_[static_cast<std::size_t>(a.manager)].spec().kind;
  };
  const bool simple =
      attention_groups_.size() == 2 && kind_of(attention_groups_[0]) == KVGroupKind::kFullAttention;
  std::vector<char>& eagle_verified = eagle_verified_;
  eagle_verified.assign(attention_groups_.size(), 0);
  while (true) {
    std::int64_t curr = hit_length;
    for (std::size_t idx = 0; idx < attention_groups_.size(); ++idx) {
      const AttentionGroup& a = attention_groups_[idx];
      const SingleTypeManager& m = managers_[static_cast<std::size_t>(a.manager)];
      const std::int64_t bs = m.block_size();
      if (m.spec().kind == KVGroupKind::kFullAttention &&
          assigned_[static_cast<std::size_t>(a.group_ids[0])]) {
        curr = m.full_blocks(curr) * bs;  // looked up once, then only shortened
        continue;
      }
      const bool use_eagle = a.eagle && !eagle_verified[idx];
      const std::int64_t max_len = use_eagle ? std::min(curr + bs, max_length) : curr;
      status = m.find_longest_cache_hit(view(request, m), max_len, a.group_ids, use_eagle,
                                        lcm_block_size_, hits);
      if (status != AllocStatus::kOk) return 0;
      const std::int64_t len =
          static_cast<std::int64_t>(hits[static_cast<std::size_t>(a.group_ids[0])].size()) * bs;
      if (use_eagle)
        eagle_verified[idx] = 1;
      else if (len < curr)
        std::fill(eagle_verified.begin(), eagle_verified.end(), 0);
      curr = len;
      for (std::int32_t g : a.group_ids) assigned_[static_cast<std::size_t>(g)] = 1;
    }
    if (curr >= hit_length) break;
    hit_length = curr;
    if (simple) break;
  }
  const AttentionGroup& first = attention_groups_[0];
  if (kind_of(first) == KVGroupKind::kFullAttention) {
    const std::int64_t blocks =
        managers_[static_cast<std::size_t>(first.manager)].full_blocks(hit_length);
    for (std::int32_t g : first.group_ids) {
      auto& h = hits[static_cast<std::size_t>(g)];
      if (assigned_[static_cast<std::size_t>(g)] && static_cast<std::int64_t>(h.size()) > blocks)
        h.resize(static_cast<std::size_t>(blocks));
    }
  }
  for (std::size_t g = 0; g < managers_.size(); ++g)
    if (!assigned_[g]) hits[g].clear();
  return hit_length;
}

KVSIM_HOT std::int64_t KVCacheCoordinator::get_computed_blocks(Request& request,
                                                               GroupBlockLists& hits,
                                                               AllocStatus& status) {
  status = AllocStatus::kOk;
  sync_block_hashes(request);
  if (hits.size() != managers_.size()) hits.resize(managers_.size());
  for (auto& h : hits) h.clear();
  if (!config_.enable_caching || request.wants_prompt_logprobs) return 0;
  const std::int64_t n = find_longest_cache_hit(request, request.num_tokens() - 1, hits, status);
  if (status != AllocStatus::kOk) return 0;
  if (request.num_preemptions > 0) {
    ++stats_.preempted_requests;
    stats_.preempted_queries += request.num_tokens();
    stats_.preempted_hits += n;
  } else {
    ++stats_.requests;
    stats_.queries += request.num_tokens();
    stats_.hits += n;
  }
  return n;
}

// ---- allocation -----------------------------------------------------------------------------

KVSIM_HOT std::int64_t KVCacheCoordinator::num_blocks_to_allocate(
    const Request& request, std::int64_t num_tokens, const GroupBlockLists& hits,
    std::int64_t total_computed, std::int64_t main_tokens, AllocStatus& status) const {
  if (managers_.size() == 1 && !hits.empty())
    return managers_[0].num_blocks_to_allocate(request, num_tokens, hits[0], total_computed,
                                               main_tokens, status);
  std::int64_t n = 0;
  for (std::size_t g = 0; g < managers_.size(); ++g) {
    const std::vector<BlockId>& h = g < hits.size() ? hits[g] : no_blocks_;
    n += managers_[g].num_blocks_to_allocate(request, num_tokens, h, total_computed, main_tokens,
                                             status);
  }
  return n;
}

KVSIM_HOT bool KVCacheCoordinator::can_fit_full_sequence(const Request& request,
                                                         std::int64_t num_new_computed_tokens,
                                                         const GroupBlockLists& hits,
                                                         AllocStatus& status,
                                                         std::int64_t num_external) const {
  status = AllocStatus::kOk;
  const std::int64_t total = std::min(
      request.num_computed_tokens + num_new_computed_tokens + num_external, config_.max_model_len);
  const std::int64_t full = std::min(request.num_tokens(), config_.max_model_len);
  return num_blocks_to_allocate(request, full, hits, total, full, status) <=
         pool_.num_free_blocks();
}

KVSIM_HOT AllocStatus KVCacheCoordinator::allocate_slots(
    Request& request, std::int64_t num_new_tokens, std::int64_t num_new_computed_tokens,
    const GroupBlockLists& hits, std::int64_t num_lookahead_tokens, bool delay_cache_blocks,
    std::int64_t num_external) {
  if (managers_.size() == 1)
    return allocate_slots_one_group(request, num_new_tokens, num_new_computed_tokens, hits,
                                    num_lookahead_tokens, delay_cache_blocks, num_external);
  std::fill(new_blocks_.begin(), new_blocks_.end(), 0);
  if (num_new_tokens == 0 && num_external == 0) return AllocStatus::kZeroTokens;
  // (`local` below is vLLM's local + external computed tokens.)
  const std::int64_t local = request.num_computed_tokens + num_new_computed_tokens + num_external;
  const std::int64_t total = std::min(local, config_.max_model_len);
  const std::int64_t main = total + num_new_tokens;
  const std::int64_t need = std::min(main + num_lookahead_tokens, config_.max_model_len);
  // Blocks that left a window are freed first, whether or not this allocation succeeds.
  for (SingleTypeManager& m : managers_)
    if (m.skips_blocks()) m.remove_skipped_blocks(request, total);
  AllocStatus st = AllocStatus::kOk;
  const std::int64_t n = num_blocks_to_allocate(request, need, hits, local, main, st);
  if (st != AllocStatus::kOk) return st;
  if (n > pool_.num_free_blocks()) return AllocStatus::kNoFreeBlocks;
  bool any_hits = false;
  for (const auto& h : hits) any_hits = any_hits || !h.empty();
  if (any_hits || num_external > 0)  // not vLLM's shared empty KVCacheBlocks
    for (std::size_t g = 0; g < managers_.size(); ++g) {
      const std::vector<BlockId>& h = g < hits.size() ? hits[g] : no_blocks_;
      st = managers_[g].allocate_new_computed_blocks(request, h, local - num_external,
                                                     num_external);
      if (st != AllocStatus::kOk) return st;
    }
  for (std::size_t g = 0; g < managers_.size(); ++g) {
    st = managers_[g].allocate_new_blocks(request, need, main, new_blocks_[g]);
    if (st != AllocStatus::kOk) return st;
  }
  if (!config_.enable_caching || delay_cache_blocks) return AllocStatus::kOk;
  // Lookahead slots and unverified drafts are not cached.
  return cache_blocks(request, std::min(total + num_new_tokens, request.num_tokens()));
}

// The same steps for one group, without the loops over groups (most models).
KVSIM_HOT AllocStatus KVCacheCoordinator::allocate_slots_one_group(
    Request& request, std::int64_t num_new_tokens, std::int64_t num_new_computed_tokens,
    const GroupBlockLists& hits, std::int64_t num_lookahead_tokens, bool delay_cache_blocks,
    std::int64_t num_external) {
  new_blocks_[0] = 0;
  if (num_new_tokens == 0 && num_external == 0) return AllocStatus::kZeroTokens;
  SingleTypeManager& m = managers_[0];
  // (`local` below is vLLM's local + external computed tokens.)
  const std::int64_t local = request.num_computed_tokens + num_new_computed_tokens + num_external;
  const std::int64_t total = std::min(local, config_.max_model_len);
  const std::int64_t main = total + num_new_tokens;
  const std::int64_t need = std::min(main + num_lookahead_tokens, config_.max_model_len);
  if (m.skips_blocks()) m.remove_skipped_blocks(request, total);
  const std::vector<BlockId>& h = hits.empty() ? no_blocks_ : hits[0];
  AllocStatus st = AllocStatus::kOk;
  const std::int64_t n = m.num_blocks_to_allocate(request, need, h, local, main, st);
  if (st != AllocStatus::kOk) return st;
  if (n > pool_.num_free_blocks()) return AllocStatus::kNoFreeBlocks;
  bool any_hits = false;  // (lists beyond the group's count too, as allocate_slots does)
  for (const auto& l : hits) any_hits = any_hits || !l.empty();
  if (any_hits || num_external > 0) {
    st = m.allocate_new_computed_blocks(request, h, local - num_external, num_external);
    if (st != AllocStatus::kOk) return st;
  }
  return grow_and_cache_one_group(request, need, main, delay_cache_blocks);
}

KVSIM_HOT AllocStatus KVCacheCoordinator::cache_blocks_of_groups(Request& request,
                                                                 std::int64_t num_computed_tokens) {
  if (!config_.enable_caching) return AllocStatus::kOk;
  if (managers_.size() == 1)  // (its cache_blocks returns at once when nothing is new)
    return cache_one_group(request, num_computed_tokens);
  sync_block_hashes(request);
  for (SingleTypeManager& m : managers_) {
    const KVGroupTable& t = request.kv_groups[static_cast<std::size_t>(m.group_id())];
    if (t.num_cached_block >= m.full_blocks(num_computed_tokens)) continue;  // nothing new
    const AllocStatus st = m.cache_blocks(request, num_computed_tokens, view(request, m));
    if (st != AllocStatus::kOk) return st;
  }
  return AllocStatus::kOk;
}

KVSIM_HOT void KVCacheCoordinator::free(Request& request) {
  if (request.kv_groups.size() != managers_.size()) return;  // never allocated
  for (SingleTypeManager& m : managers_) m.free(request);
}

void KVCacheCoordinator::num_common_prefix_blocks(Request& request,
                                                  std::vector<std::int32_t>& out) {
  out.assign(managers_.size(), 0);
  if (!config_.enable_caching) return;  // KVCacheCoordinatorNoPrefixCache
  init_request(request);
  for (std::size_t g = 0; g < managers_.size(); ++g)
    out[g] = managers_[g].num_common_prefix_blocks(request);
}

double KVCacheCoordinator::usage() const {
  const std::int64_t total = std::int64_t{pool_.num_blocks()} - 1;
  if (total == 0) return 0.0;
  return 1.0 - static_cast<double>(pool_.num_free_blocks()) / static_cast<double>(total);
}

bool KVCacheCoordinator::reset_prefix_cache() {
  if (!pool_.reset_prefix_cache()) return false;
  stats_.reset = true;
  return true;
}

PrefixCacheStats KVCacheCoordinator::take_prefix_cache_stats() {
  const PrefixCacheStats s = stats_;
  stats_ = PrefixCacheStats{};
  return s;
}

// ---- invariants -----------------------------------------------------------------------------

std::string KVCacheCoordinator::find_violation(std::span<const Request* const> live,
                                               std::span<const HashId> extra_hash_refs) const {
  const auto num_blocks = static_cast<std::size_t>(pool_.num_blocks());
  std::vector<std::int32_t> refs(num_blocks, 0);
  std::vector<std::int32_t> owner(num_blocks, -1);  // the group whose tables hold the block
  std::vector<std::int64_t> entries(managers_.size(), 0);
  const BlockId null = pool_.null_block();
  for (const Request* r : live) {
    if (r->kv_groups.empty()) continue;
    KVSIM_CHECK(r->kv_groups.size() == managers_.size(),
                "a request has the wrong number of tables");
    for (std::size_t g = 0; g < managers_.size(); ++g) {
      const KVGroupTable& t = r->kv_groups[g];
      entries[g] += t.has_entry;
      KVSIM_CHECK(t.has_entry || t.blocks.empty(), "a table without a req_to_blocks entry");
      // Nulls lead a table, except in mamba 'align' mode, where the passed state blocks and
      // the moved speculative ones leave nulls between real blocks.
      bool in_nulls = true;
      const bool nulls_lead = !managers_[g].spec().mamba_align();
      for (BlockId b : t.blocks) {
        KVSIM_CHECK(to_int(b) >= 0 && static_cast<std::size_t>(to_int(b)) < num_blocks,
                    "block id out of range");
        if (b == null) {
          KVSIM_CHECK(managers_[g].skips_blocks(), "a null block in a full-attention table");
          KVSIM_CHECK(in_nulls || !nulls_lead, "a null block after a real one in a table");
          continue;
        }
        in_nulls = false;
        const auto i = static_cast<std::size_t>(to_int(b));
        ++refs[i];
        KVSIM_CHECK(owner[i] < 0 || owner[i] == static_cast<std::int32_t>(g),
                    "a block is in the tables of two KV cache groups");
        owner[i] = static_cast<std::int32_t>(g);
        const HashId key = pool_.block(b).block_hash;
        KVSIM_CHECK(key == kNoHash || pool_.group_of_key(key) == static_cast<std::int32_t>(g),
                    "a table holds a block cached under another group's key");
      }
    }
  }
  for (std::size_t g = 0; g < managers_.size(); ++g)
    KVSIM_CHECK(entries[g] == managers_[g].num_entries(), "req_to_blocks entry count mismatch");
  for (std::size_t i = 0; i < num_blocks; ++i) {
    if (BlockId{static_cast<std::int32_t>(i)} == null) continue;  // not maintained (vLLM)
    KVSIM_CHECK(pool_.block(BlockId{static_cast<std::int32_t>(i)}).ref_cnt == refs[i],
                "a block's ref count differs from the number of tables holding it");
  }
  std::vector<std::int32_t> hash_refs(hashes_.capacity(), 0);
  for (const Request* r : live)
    for (HashId h : r->block_hashes) ++hash_refs[static_cast<std::size_t>(to_int(h))];
  for (const HashId h : extra_hash_refs) {
    KVSIM_CHECK(to_int(h) >= 0 && static_cast<std::size_t>(to_int(h)) < hash_refs.size(),
                "a connector holds a hash that is not in the table");
    ++hash_refs[static_cast<std::size_t>(to_int(h))];
  }
  for (std::size_t i = 0; i < num_blocks; ++i) {
    const HashId key = pool_.block(BlockId{static_cast<std::int32_t>(i)}).block_hash;
    if (key != kNoHash) ++hash_refs[static_cast<std::size_t>(to_int(pool_.hash_of_key(key)))];
  }
  return hashes_.find_ref_count_violation(hash_refs);
}

}  // namespace kvsim
