// V1Replayer's vllm-0.20 parts (shared/spec/ops-format-v0.20.md): KV cache groups in init ops,
// flat or grouped block-id fields, and the manager ops of that release.

#include <algorithm>
#include <string>

#include "sim/replay/v1_replayer.h"

namespace kvsim {
namespace {
using Index = JsonLine::Index;
using Type = JsonLine::Type;
}  // namespace

void V1Replayer::read_v020_kv_fields(KVCacheConfig& c) const {
  const Index algo = json_.find(JsonLine::root(), "hash_algo");
  if (!json_.is_null_or_absent(algo)) {
    const std::string_view a = get_string("hash_algo");
    // Hash values never change behaviour: every algorithm keys blocks by equal content.
    if (a != "sha256" && a != "sha256_cbor" && a != "xxhash" && a != "xxhash_cbor")
      throw OpError{"ValueError: unknown prefix_caching_hash_algo '" + std::string(a) + "'"};
  }
  const std::int64_t hbs = get_int_or("hash_block_size", 0);
  if (hbs < 0 || hbs > (1 << 20)) throw OpError{"ValueError: hash_block_size must be in 1..2^20"};
  c.hash_block_size = static_cast<std::int32_t>(hbs);
  const Index groups = json_.find(JsonLine::root(), "kv_cache_groups");
  if (!json_.is_null_or_absent(groups)) {
    if (json_[groups].type != Type::kArray)
      throw OpError{"TypeError: kv_cache_groups must be a list"};
    for (Index e = JsonLine::first_child(groups), k = 0; k < json_[groups].size;
         ++k, e = json_.next(e)) {
      if (json_[e].type != Type::kObject)
        throw OpError{"TypeError: a kv_cache_groups entry must be an object"};
      const auto int_field = [&](const char* key, std::int64_t dflt) {
        const Index f = json_.find(e, key);
        return json_.is_null_or_absent(f) ? dflt : int_value(f, key);
      };
      const auto str_field = [&](const char* key, std::string_view dflt) {
        const Index f = json_.find(e, key);
        if (json_.is_null_or_absent(f)) return dflt;
        if (json_[f].type != Type::kString)
          throw OpError{std::string("TypeError: '") + key + "' must be a string"};
        return json_[f].s;
      };
      KVGroupSpec g;
      const std::string_view type = str_field("type", "full");
      if (type == "full") {
        g.kind = KVGroupKind::kFullAttention;
      } else if (type == "sliding_window") {
        g.kind = KVGroupKind::kSlidingWindow;
        g.sliding_window = int_field("sliding_window", 0);
      } else if (type == "chunked_local") {
        g.kind = KVGroupKind::kChunkedLocal;
        g.attention_chunk_size = int_field("attention_chunk_size", 0);
      } else if (type == "mamba") {
        g.kind = KVGroupKind::kMamba;
        const std::string_view mode =
            str_field("mamba_cache_mode", c.enable_caching ? "all" : "none");
        if (mode == "all")
          g.mamba_cache_mode = MambaGroupMode::kAll;
        else if (mode == "none")
          g.mamba_cache_mode = MambaGroupMode::kNone;
        else if (mode == "align")
          g.mamba_cache_mode = MambaGroupMode::kAlign;
        else
          throw OpError{"ValueError: unknown mamba_cache_mode '" + std::string(mode) + "'"};
        g.num_speculative_blocks = int_field("num_speculative_blocks", 0);
      } else {
        throw OpError{"ValueError: unknown KV cache group type '" + std::string(type) + "'"};
      }
      const std::int64_t bs = int_field("block_size", c.block_size);
      if (bs <= 0 || bs > (1 << 20)) throw OpError{"ValueError: block_size must be in 1..2^20"};
      g.block_size = static_cast<std::int32_t>(bs);
      const Index eagle = json_.find(e, "eagle");
      if (!json_.is_null_or_absent(eagle)) {
        if (json_[eagle].type != Type::kBool) throw OpError{"TypeError: 'eagle' must be a boolean"};
        g.eagle = json_[eagle].b;
      }
      c.kv_cache_groups.push_back(g);
    }
  }
  if (const std::string why = KVCacheCoordinator::check_layout(c); !why.empty()) throw OpError{why};
}

// ---- block-id fields, flat or grouped -------------------------------------------------------

void V1Replayer::read_group_hits(const KVCacheManager& kv) {
  const auto groups = static_cast<std::size_t>(kv.num_groups());
  group_hits_.resize(groups);
  for (auto& h : group_hits_) h.clear();
  const Index hits = json_.find(JsonLine::root(), "new_computed_blocks");
  if (json_.is_null_or_absent(hits)) return;
  if (json_[hits].type != Type::kArray)
    throw OpError{"TypeError: new_computed_blocks must be a list"};
  const auto read_list = [&](Index arr, std::vector<BlockId>& out) {
    if (json_[arr].type != Type::kArray)
      throw OpError{"TypeError: new_computed_blocks must hold one list per group"};
    for (Index e = JsonLine::first_child(arr), k = 0; k < json_[arr].size; ++k, e = json_.next(e)) {
      const std::int64_t b = int_value(e, "block id");
      if (b < 0 || b >= kv.pool().num_blocks()) throw OpError{"IndexError: block id out of range"};
      out.push_back(BlockId{static_cast<std::int32_t>(b)});
    }
  };
  if (!grouped_) {
    read_list(hits, group_hits_[0]);
  } else {
    if (json_[hits].size != groups)
      throw OpError{"ValueError: new_computed_blocks needs one list per KV cache group"};
    Index e = JsonLine::first_child(hits);
    for (std::size_t g = 0; g < groups; ++g, e = json_.next(e)) read_list(e, group_hits_[g]);
  }
  // Only what a lookup can return (traces carry the hits vLLM's lookup just gave): blocks cached
  // under the group's key, each once, after the null blocks of a group that skips positions.
  const BlockPool& pool = kv.pool();
  scratch_blocks_.clear();
  for (std::size_t g = 0; g < groups; ++g) {
    const bool skips = kv.coordinator()->manager(static_cast<std::int32_t>(g)).skips_blocks();
    bool nulls = skips;
    for (BlockId b : group_hits_[g]) {
      if (b == pool.null_block() && nulls) continue;
      nulls = false;
      const HashId key = pool.block(b).block_hash;
      if (key == kNoHash || pool.group_of_key(key) != static_cast<std::int32_t>(g))
        throw OpError{"ValueError: new_computed_blocks: block " + std::to_string(to_int(b)) +
                      " is not a cached block of KV cache group " + std::to_string(g)};
      scratch_blocks_.push_back(b);
    }
  }
  std::sort(scratch_blocks_.begin(), scratch_blocks_.end());
  if (std::adjacent_find(scratch_blocks_.begin(), scratch_blocks_.end()) != scratch_blocks_.end())
    throw OpError{"ValueError: new_computed_blocks names a block twice"};
}

void V1Replayer::write_group_lists(JsonWriter& w, const GroupBlockLists& lists) const {
  if (!grouped_) return write_blocks(w, lists[0]);
  w.begin_array();
  for (const auto& l : lists) write_blocks(w, l);
  w.end_array();
}

void V1Replayer::write_tables(JsonWriter& w, const Request& r) const {
  if (!v020_) return write_blocks(w, r.blocks);
  static const std::vector<BlockId> kNone;
  const auto table = [&](std::size_t g) -> const std::vector<BlockId>& {
    return g < r.kv_groups.size() ? r.kv_groups[g].blocks : kNone;
  };
  if (!grouped_) return write_blocks(w, table(0));
  w.begin_array();
  const auto groups = static_cast<std::size_t>(mode_ == Mode::kSched ? sched_->num_kv_cache_groups()
                                                                     : kvm_->num_groups());
  for (std::size_t g = 0; g < groups; ++g) write_blocks(w, table(g));
  w.end_array();
}

void V1Replayer::write_new_blocks(JsonWriter& w, const Request& r,
                                  std::span<const std::int32_t> n) const {
  const auto one = [&](std::size_t g) {
    const auto& t = r.kv_groups[g].blocks;
    w.begin_array();
    for (std::size_t i = t.size() - static_cast<std::size_t>(n[g]); i < t.size(); ++i)
      w.value(std::int64_t{to_int(t[i])});
    w.end_array();
  };
  if (!grouped_) return one(0);
  w.begin_array();
  for (std::size_t g = 0; g < n.size(); ++g) one(g);
  w.end_array();
}

void V1Replayer::write_group_counts(JsonWriter& w, std::span<const std::int32_t> counts) const {
  if (!grouped_) {
    w.value(std::int64_t{counts[0]});
    return;
  }
  w.begin_array();
  for (std::int32_t c : counts) w.value(std::int64_t{c});
  w.end_array();
}

// ---- kvm ops --------------------------------------------------------------------------------

void V1Replayer::op_get_computed_blocks_v020(JsonWriter& w) {
  require_kvm_mode("get_computed_blocks");
  Request& r = live_request(get_string("id"));
  AllocStatus st = AllocStatus::kOk;
  const std::int64_t n = kvm_->get_computed_blocks(r, group_hits_, st);
  if (st != AllocStatus::kOk) throw OpError{alloc_status_message(st)};
  w.begin_object().key("blocks");
  write_group_lists(w, group_hits_);
  w.key("num_computed_tokens").value(n).end_object();
}

namespace {
// num_new_computed_tokens of an op: given, or group 0's hits times its block size.
std::int64_t hit_tokens_or(std::int64_t given, const GroupBlockLists& hits,
                           const KVCacheManager& kv) {
  if (given >= 0) return given;
  return static_cast<std::int64_t>(hits[0].size()) * kv.coordinator()->manager(0).block_size();
}
}  // namespace

void V1Replayer::op_allocate_slots_v020(JsonWriter& w) {
  require_kvm_mode("allocate_slots");
  Request& r = live_request(get_string("id"));
  const std::int64_t n = get_int("num_tokens");
  if (n < 0 || n > (std::int64_t{1} << 40))
    throw OpError{"ValueError: num_tokens must be greater than 0"};
  const std::int64_t lookahead = get_int_or("num_lookahead_tokens", 0);
  if (lookahead < 0 || lookahead > (1 << 30))
    throw OpError{"ValueError: num_lookahead_tokens must be in 0..2^30"};
  read_group_hits(*kvm_);
  const std::int64_t given = get_int_or("num_new_computed_tokens", -1);
  if (given < -1 || given > (std::int64_t{1} << 40))
    throw OpError{"ValueError: num_new_computed_tokens must be >= 0"};
  const std::int64_t hit_tokens = hit_tokens_or(given, group_hits_, *kvm_);
  const bool delay = get_bool_or("delay_cache_blocks", false);
  const AllocStatus st = kvm_->allocate_slots(r, n, hit_tokens, group_hits_, lookahead, delay);
  if (st == AllocStatus::kNoFreeBlocks) {
    w.begin_object().key("blocks").null().end_object();
    return;
  }
  if (st != AllocStatus::kOk) throw OpError{alloc_status_message(st)};
  const KVCacheCoordinator& c = *kvm_->coordinator();
  scratch_counts_.clear();
  for (std::int32_t g = 0; g < c.num_groups(); ++g) scratch_counts_.push_back(c.new_blocks(g));
  w.begin_object().key("blocks");
  write_new_blocks(w, r, scratch_counts_);
  w.end_object();
}

void V1Replayer::op_can_fit_full_sequence(JsonWriter& w) {
  require_kvm_mode("can_fit_full_sequence");
  Request& r = live_request(get_string("id"));
  read_group_hits(*kvm_);
  const std::int64_t given = get_int_or("num_new_computed_tokens", -1);
  if (given < -1 || given > (std::int64_t{1} << 40))
    throw OpError{"ValueError: num_new_computed_tokens must be >= 0"};
  AllocStatus st = AllocStatus::kOk;
  const bool ok = kvm_->coordinator()->can_fit_full_sequence(
      r, hit_tokens_or(given, group_hits_, *kvm_), group_hits_, st);
  if (st != AllocStatus::kOk) throw OpError{alloc_status_message(st)};
  w.begin_object().key("ok").value(ok).end_object();
}

void V1Replayer::op_cache_blocks(JsonWriter& w) {
  require_kvm_mode("cache_blocks");
  Request& r = live_request(get_string("id"));
  const std::int64_t n = get_int("n");
  if (n < 0 || n > (std::int64_t{1} << 40)) throw OpError{"ValueError: n must be >= 0"};
  const AllocStatus st = kvm_->coordinator()->cache_blocks(r, n);
  if (st != AllocStatus::kOk) throw OpError{alloc_status_message(st)};
  w.begin_object().end_object();
}

void V1Replayer::op_new_step(JsonWriter& w) {
  require_kvm_mode("new_step");
  kvm_->coordinator()->new_step_starts();
  w.begin_object().end_object();
}

void V1Replayer::op_prefix_cache_stats(JsonWriter& w) {
  const PrefixCacheStats s = manager().coordinator()->take_prefix_cache_stats();
  w.begin_object();
  w.key("requests").value(s.requests).key("queries").value(s.queries).key("hits").value(s.hits);
  w.key("preempted_requests").value(s.preempted_requests);
  w.key("preempted_queries").value(s.preempted_queries);
  w.key("preempted_hits").value(s.preempted_hits);
  w.key("reset").value(s.reset).end_object();
}

void V1Replayer::op_common_prefix_v020(JsonWriter& w) {
  KVCacheManager& kv = manager();
  Request& r = live_request(get_string("id"));
  kv.coordinator()->num_common_prefix_blocks(r, scratch_counts_);
  w.begin_object().key("n");
  write_group_counts(w, scratch_counts_);
  w.end_object();
}

}  // namespace kvsim
