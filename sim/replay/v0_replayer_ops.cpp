// V0Replayer's ops valid in both modes: add_seq_group (with vLLM's n / best_of fan-out in sched
// mode), append_token, computed, get_block_table.

#include <algorithm>
#include <limits>

#include "sim/replay/v0_replayer.h"

namespace kvsim {

namespace {
using Index = JsonLine::Index;
using Type = JsonLine::Type;
using v0::SeqStatus;
}  // namespace

// ---- ops of both modes --------------------------------------------------------------------

void V0Replayer::op_add_seq_group(JsonWriter& w) {
  const std::string_view id = get_string("id");
  read_tokens(field("prompt"), tokens_);
  v0::SamplingParams p;
  p.max_tokens = get_int_or("max_tokens", 16);
  p.min_tokens = get_int_or("min_tokens", 0);
  p.ignore_eos = get_bool_or("ignore_eos", false);
  const Index stops = json_.find(JsonLine::root(), "stop_token_ids");
  if (!json_.is_null_or_absent(stops)) read_tokens(stops, p.stop_token_ids);
  const Index eos_i = json_.find(JsonLine::root(), "eos_token_id");
  std::optional<Token> eos;
  if (!json_.is_null_or_absent(eos_i)) {
    const std::int64_t e = int_value(eos_i, "eos_token_id");
    if (e < std::numeric_limits<Token>::min() || e > std::numeric_limits<Token>::max())
      throw OpError{"ValueError: eos_token_id out of the 32-bit range"};
    eos = static_cast<Token>(e);
  }
  std::int64_t n = get_int_or("n", 1);
  const std::int64_t best_of = get_int_or("best_of", 0);
  const std::int64_t priority = get_int_or("priority", 0);
  const double now = mode_ == Mode::kBm ? bm_now_ : sched_->now();
  const double arrival = get_double_or("arrival_time", now);
  const std::int64_t num_seqs = get_int_or("num_seqs", 1);
  const Index explicit_ids = json_.find(JsonLine::root(), "seq_ids");
  // Protocol checks first: they change nothing.
  if (num_seqs < 1 || num_seqs > 4096) throw OpError{"ValueError: num_seqs must be in 1..4096"};
  if (mode_ == Mode::kSched && (num_seqs != 1 || !json_.is_null_or_absent(explicit_ids)))
    throw OpError{"ValueError: num_seqs and seq_ids are bm-mode fields"};
  std::vector<v0::SeqId> ids;
  if (!json_.is_null_or_absent(explicit_ids)) {
    if (json_[explicit_ids].type != Type::kArray ||
        static_cast<std::int64_t>(json_[explicit_ids].size) != num_seqs)
      throw OpError{"ValueError: seq_ids must list num_seqs ids"};
    for (Index e = JsonLine::first_child(explicit_ids), k = 0; k < json_[explicit_ids].size;
         ++k, e = json_.next(e)) {
      const std::int64_t s = int_value(e, "seq id");
      if (s < 0 || seqs_.count(s) || std::find(ids.begin(), ids.end(), s) != ids.end())
        throw OpError{"ValueError: sequence " + std::to_string(s) + " exists or is invalid"};
      ids.push_back(s);
    }
  }
  // vLLM's SamplingParams checks as the op protocol applies them (best_of, n, max_tokens; the
  // cases show min_tokens > max_tokens accepted).
  if (best_of != 0) {
    if (best_of < n) v0::raise("ValueError", "best_of must be greater than or equal to n");
    n = best_of;
  }
  if (n < 1) v0::raise("ValueError", "n must be at least 1");
  if (p.max_tokens < 1) v0::raise("ValueError", "max_tokens must be at least 1");
  if (n > 4096) throw OpError{"ValueError: n must be at most 4096"};

  if (mode_ == Mode::kBm || n == 1) {
    if (groups_.count(id)) throw OpError{"ValueError: request '" + std::string(id) + "' exists"};
  } else {
    for (std::int64_t i = 0; i < n; ++i)
      if (groups_.count(std::string(id) + "_parallel_sample_" + std::to_string(i)))
        throw OpError{"ValueError: request '" + std::string(id) + "' exists"};
  }
  if (mode_ == Mode::kBm) {
    v0::SequenceGroup* g;
    if (free_groups_.empty()) {
      g = group_pool_.emplace_back(std::make_unique<v0::SequenceGroup>()).get();
    } else {
      g = free_groups_.back();
      free_groups_.pop_back();
    }
    g->reset(id, nullptr, p, arrival, priority);
    w.begin_object().key("seq_ids").begin_array();
    for (std::int64_t i = 0; i < num_seqs; ++i) {
      v0::Sequence& s = new_seq(ids.empty() ? -1 : ids[static_cast<std::size_t>(i)], tokens_);
      s.eos_token_id = eos;
      g->add_initial(&s);
      seqs_.emplace(s.seq_id, &s);
      w.value(s.seq_id);
    }
    w.end_array().end_object();
    groups_.emplace(g->request_id, g);
    return;
  }
  // sched: LLMEngine.add_request, with ParallelSampleSequenceGroup's fan-out for n > 1.
  w.begin_object().key("groups").begin_array();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::string gid =
        n == 1 ? std::string(id) : std::string(id) + "_parallel_sample_" + std::to_string(i);
    v0::SamplingParams gp = p;
    gp.n = 1;
    v0::SequenceGroup& g = sched_->create_group(gid, nullptr, std::move(gp), arrival, priority);
    v0::Sequence& s = sched_->create_seq(-1, tokens_);
    s.eos_token_id = eos;
    g.add_initial(&s);
    seqs_.emplace(s.seq_id, &s);
    groups_.emplace(g.request_id, &g);
    sched_->add_seq_group(g);
    w.begin_array().value(std::string_view(gid)).begin_array().value(s.seq_id).end_array();
    w.end_array();
  }
  w.end_array().end_object();
}

void V0Replayer::op_append_token(JsonWriter& w) {
  const Index one = json_.find(JsonLine::root(), "token");
  if (!json_.is_null_or_absent(one)) {
    tokens_.clear();
    const std::int64_t t = int_value(one, "token");
    if (t < std::numeric_limits<Token>::min() || t > std::numeric_limits<Token>::max())
      throw OpError{"ValueError: token id out of the 32-bit range"};
    tokens_.push_back(static_cast<Token>(t));
  } else {
    read_tokens(field("tokens"), tokens_);
  }
  if (!json_.is_null_or_absent(json_.find(JsonLine::root(), "seq"))) {
    v0::Sequence& s = seq_field("seq");
    for (Token t : tokens_) s.append_token_id(t);
  } else {
    v0::SequenceGroup& g = group(get_string("id"));
    for (v0::Sequence* s : g.seqs())
      for (Token t : tokens_) s->append_token_id(t);
  }
  w.begin_object().end_object();
}

void V0Replayer::op_computed(JsonWriter& w) {
  v0::SequenceGroup& g = group(get_string("id"));
  g.update_num_computed_tokens(get_int("n"));
  w.begin_object().end_object();
}

void V0Replayer::op_get_block_table(JsonWriter& w) {
  const v0::Sequence& s = seq_field("seq");
  w.begin_object().key("table");
  if (manager().has_table(s))
    write_ids(w, manager().block_table(s));
  else
    w.null();
  w.end_object();
}

}  // namespace kvsim
