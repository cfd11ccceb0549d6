// KV pool sizing by release (core/common/kv_pool_sizing.h): page sizes per spec kind, the
// per-request caps, the v0.20.1 grouping rules on small hand-checked models, the start-up check
// and its messages per release, and a randomized comparison against a naive reference.
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/common/kv_pool_sizing.h"

using namespace kvsim;

namespace {

LayerKVSpec attn(KVSpecKind kind, std::int64_t heads, std::int64_t head, std::int64_t window = 0,
                 std::int64_t block = 16) {
  LayerKVSpec s;
  s.kind = kind;
  s.block_size = block;
  s.num_kv_heads = heads;
  s.head_size = s.head_size_v = head;
  if (kind == KVSpecKind::kSlidingWindow) s.sliding_window = window;
  if (kind == KVSpecKind::kChunkedLocal) s.attention_chunk_size = window;
  if (kind == KVSpecKind::kMLA) s.cache_dtype_str = "auto";
  return s;
}

KVSizingInput model(const std::vector<LayerKVSpec>& specs, std::int64_t memory,
                    std::int64_t max_model_len) {
  KVSizingInput in;
  for (std::size_t i = 0; i < specs.size(); ++i)
    in.layers.push_back({"l" + std::to_string(i), specs[i]});
  in.available_memory_bytes = {memory};
  in.max_model_len = max_model_len;
  return in;
}

// gpt-oss-20b on one worker: 24 layers alternating sliding (window 128) and full, 8 KV heads of 64.
std::vector<LayerKVSpec> gpt_oss_20b() {
  std::vector<LayerKVSpec> v;
  for (int i = 0; i < 24; ++i)
    v.push_back(i % 2 == 0 ? attn(KVSpecKind::kSlidingWindow, 8, 64, 128)
                           : attn(KVSpecKind::kFull, 8, 64));
  return v;
}

constexpr std::int64_t kGiB = std::int64_t{1} << 30;

}  // namespace

TEST_CASE("page sizes follow vLLM's spec classes", "[core]") {
  CHECK(page_size_bytes(attn(KVSpecKind::kFull, 8, 128)) == 2 * 16 * 8 * 128 * 2);
  CHECK(page_size_bytes(attn(KVSpecKind::kSlidingWindow, 8, 64, 128)) == 32'768);
  CHECK(page_size_bytes(attn(KVSpecKind::kChunkedLocal, 1, 128, 8192)) == 8192);
  CHECK(page_size_bytes(attn(KVSpecKind::kMLA, 1, 576, 0, 64)) == 73'728);  // no K/V pair
  LayerKVSpec ds = attn(KVSpecKind::kMLA, 1, 576, 0, 64);
  ds.cache_dtype_str = "fp8_ds_mla";
  CHECK(page_size_bytes(ds) == 64 * 656);
  LayerKVSpec per_head = attn(KVSpecKind::kFull, 4, 128);
  per_head.dtype_bytes = 1;
  per_head.kv_quant_mode = KVQuantMode::kFp8PerTokenHead;
  CHECK(page_size_bytes(per_head) == 2 * 16 * 4 * 128 + 2 * 16 * 4 * 4);  // + float32 scales
  LayerKVSpec fp4 = attn(KVSpecKind::kFull, 4, 128);
  fp4.dtype_bytes = 1;
  fp4.kv_quant_mode = KVQuantMode::kNvfp4;
  CHECK(page_size_bytes(fp4) == 16 * 4 * (64 + 8 + 64 + 8));
  LayerKVSpec gdn;  // Qwen3-Next TP4
  gdn.kind = KVSpecKind::kMamba;
  gdn.block_size = 262'144;
  gdn.shapes = {{3, 2048}, {8, 128, 128}};
  gdn.dtypes = {"bfloat16", "bfloat16"};
  CHECK(page_size_bytes(gdn) == 274'432);
  gdn.page_size_padded = 278'528;
  CHECK(page_size_bytes(gdn) == 278'528);
}

TEST_CASE("one request's blocks: max_model_len for full, the window or chunk otherwise", "[core]") {
  RequestLimits r{131'072, 8192, MambaCacheMode::kNone};
  CHECK(max_blocks_per_request(attn(KVSpecKind::kFull, 8, 64), r) == 8192);
  // cdiv(min(127 + 8192, 131072), 16) + 1
  CHECK(max_blocks_per_request(attn(KVSpecKind::kSlidingWindow, 8, 64, 128), r) == 521);
  r.max_num_batched_tokens = 1;  // decode only: cdiv(128, 16) + 1 = 9 blocks
  CHECK(max_blocks_per_request(attn(KVSpecKind::kSlidingWindow, 8, 64, 128), r) == 9);
  r.max_num_batched_tokens = 8192;
  CHECK(max_blocks_per_request(attn(KVSpecKind::kChunkedLocal, 1, 128, 8192), r) == 1024);
  r.max_model_len = 100;  // never more than max_model_len tokens
  CHECK(max_blocks_per_request(attn(KVSpecKind::kSlidingWindow, 8, 64, 4096), r) == 8);
  LayerKVSpec m;
  m.kind = KVSpecKind::kMamba;
  m.block_size = 100;
  m.shapes = {{4}};
  m.dtypes = {"float32"};
  CHECK(max_blocks_per_request(m, r) == 1);
  r.mamba_cache_mode = MambaCacheMode::kAlign;
  CHECK(max_blocks_per_request(m, r) == 2);
}

TEST_CASE("gpt-oss-20b: two groups of 12 share one pool of memory // page // 12 blocks", "[core]") {
  const KVSizingResult r =
      size_kv_pool(model(gpt_oss_20b(), 40 * kGiB, 131'072), KVSizingRules::kV020Hybrid);
  REQUIRE(r.layout);
  const KVPoolLayout& L = *r.layout;
  CHECK(L.num_blocks == 40 * kGiB / 32'768 / 12);  // 109,226: twice the all-full count
  REQUIRE(L.groups.size() == 2);
  CHECK(L.group_size == 12);
  CHECK(L.groups[0].spec.kind == KVSpecKind::kSlidingWindow);
  CHECK(L.groups[0].layer_names.front() == "l0");
  CHECK(L.groups[1].layer_names.back() == "l23");
  CHECK(L.groups[0].max_blocks_per_request == 521);
  CHECK(L.groups[1].max_blocks_per_request == 8192);
  REQUIRE(L.tensors.size() == 12);
  CHECK(L.tensors[0].shared_by == std::vector<std::string>{"l0", "l1"});
  CHECK(L.tensors[0].size_bytes == L.num_blocks * 32'768);
  // 12 layers x page x (8192 + 521) blocks; concurrency 109226 / 8713.
  CHECK(L.max_memory_usage_bytes_per_request == std::int64_t{12} * 32'768 * (8192 + 521));
  CHECK(L.max_concurrency == Approx(109'226.0 / 8713.0).epsilon(1e-12));
  CHECK(L.gpu_kv_cache_tokens == 1'643'116);
  CHECK(r.log.back() == "info: Maximum concurrency for 131,072 tokens per request: 12.54x");

  // The same model under v0.7.2 and v0.8.5: every layer full, 24 layers per block.
  for (const KVSizingRules rules : {KVSizingRules::kV072Uniform, KVSizingRules::kV085Uniform}) {
    const KVSizingResult old = size_kv_pool(model(gpt_oss_20b(), 40 * kGiB, 131'072), rules);
    REQUIRE(old.layout);
    CHECK(old.layout->num_blocks == 40 * kGiB / 32'768 / 24);
    CHECK(old.layout->groups.size() == 1);
    CHECK(old.layout->groups[0].spec.kind == KVSpecKind::kFull);
  }
}

TEST_CASE("5 sliding : 1 full in 62 layers: group size 10, strided, 8 padding slots", "[core]") {
  std::vector<LayerKVSpec> specs;
  for (int i = 0; i < 62; ++i)
    specs.push_back((i + 1) % 6 == 0 ? attn(KVSpecKind::kFull, 2, 128)
                                     : attn(KVSpecKind::kSlidingWindow, 2, 128, 1024));
  const KVSizingResult r =
      size_kv_pool(model(specs, 60 * kGiB, 131'072), KVSizingRules::kV020Hybrid);
  REQUIRE(r.layout);
  const KVPoolLayout& L = *r.layout;
  REQUIRE(L.groups.size() == 7);
  CHECK(L.group_size == 10);
  std::vector<std::size_t> sizes;
  for (const KVCacheGroup& g : L.groups) sizes.push_back(g.layer_names.size());
  CHECK(sizes == std::vector<std::size_t>{9, 9, 9, 9, 8, 8, 10});
  CHECK(L.groups[0].layer_names[1] == "l7");  // layers[i::6] of the sliding bucket
  CHECK(L.num_blocks == 60 * kGiB / 16'384 / 10);
  CHECK(r.log.front() == "warning: Add 8 padding layers, may waste at most 15.38% KV cache memory");
  // Every layer is in exactly one group and shares exactly one tensor.
  std::multiset<std::string> grouped, shared;
  for (const KVCacheGroup& g : L.groups) grouped.insert(g.layer_names.begin(), g.layer_names.end());
  for (const KVCacheTensor& t : L.tensors) shared.insert(t.shared_by.begin(), t.shared_by.end());
  CHECK(grouped.size() == 62);
  CHECK(std::set<std::string>(grouped.begin(), grouped.end()).size() == 62);
  CHECK(shared == grouped);
}

TEST_CASE("the hybrid allocator unifies pages or refuses, and the manager can be disabled",
          "[core]") {
  // Sliding layers with half the page get twice the block size.
  KVSizingResult r = size_kv_pool(
      model({attn(KVSpecKind::kSlidingWindow, 4, 128, 512), attn(KVSpecKind::kFull, 4, 256)}, kGiB,
            8192),
      KVSizingRules::kV020Hybrid);
  REQUIRE(r.layout);
  CHECK(r.layout->groups[0].spec.block_size == 32);
  CHECK(r.layout->scheduler_block_size == 32);
  CHECK(r.layout->hash_block_size == 16);
  // 3 heads against 4: no integer ratio.
  r = size_kv_pool(
      model({attn(KVSpecKind::kSlidingWindow, 3, 128, 512), attn(KVSpecKind::kFull, 4, 128)}, kGiB,
            8192),
      KVSizingRules::kV020Hybrid);
  REQUIRE(r.error);
  CHECK(r.error->type == "NotImplementedError");
  // Disabled: sliding and chunked layers become full attention that remembers the window.
  KVSizingInput in =
      model({attn(KVSpecKind::kSlidingWindow, 4, 128, 512),
             attn(KVSpecKind::kChunkedLocal, 4, 128, 1024), attn(KVSpecKind::kFull, 4, 128)},
            kGiB, 8192);
  in.disable_hybrid_kv_cache_manager = true;
  r = size_kv_pool(in, KVSizingRules::kV020Hybrid);
  REQUIRE(r.layout);
  REQUIRE(r.layout->groups.size() == 1);
  CHECK(r.layout->groups[0].uniform_type_layers.size() == 3);
  CHECK(r.layout->groups[0].spec.kind == KVSpecKind::kFull);
  CHECK(r.layout->groups[0].spec.sliding_window == 512);
  CHECK(r.layout->num_blocks == kGiB / (3 * 32'768));
  CHECK(r.log.front().starts_with("warning: Hybrid KV cache manager is disabled"));
  // Two windows cannot merge into one full-attention group: vLLM's ValueError.
  in = model({attn(KVSpecKind::kSlidingWindow, 4, 128, 512),
              attn(KVSpecKind::kSlidingWindow, 4, 128, 1024), attn(KVSpecKind::kFull, 4, 128)},
             kGiB, 8192);
  in.disable_hybrid_kv_cache_manager = true;
  r = size_kv_pool(in, KVSizingRules::kV020Hybrid);
  REQUIRE(r.error);
  CHECK(r.error->message ==
        "All attention layers in the same KV cache group must have the same "
        "window size.");
  // Mamba and attention cannot become one type.
  LayerKVSpec m;
  m.kind = KVSpecKind::kMamba;
  m.block_size = 8192;
  m.shapes = {{1024}};
  m.dtypes = {"bfloat16"};
  in = model({m, attn(KVSpecKind::kFull, 4, 128)}, kGiB, 8192);
  in.disable_hybrid_kv_cache_manager = true;
  r = size_kv_pool(in, KVSizingRules::kV020Hybrid);
  REQUIRE(r.error);
  CHECK(r.error->message.starts_with("Hybrid KV cache manager is disabled but failed"));
}

TEST_CASE("the start-up check refuses in each release's words", "[core]") {
  // Llama-3.1-8B: 32 layers of 65,536 B pages; 131,072 tokens need 16 GiB.
  const std::vector<LayerKVSpec> llama(32, attn(KVSpecKind::kFull, 8, 128));
  KVSizingResult r = size_kv_pool(model(llama, 8 * kGiB, 131'072), KVSizingRules::kV020Hybrid);
  REQUIRE(r.error);
  CHECK(r.error->message.starts_with(
      "To serve at least one request with the models's max seq len (131072), (16.0 GiB KV cache "
      "is needed, which is larger than the available KV cache memory (8.0 GiB). Based on the "
      "available memory, the estimated maximum model length is 65536. "));
  r = size_kv_pool(model(llama, 8 * kGiB, 131'072), KVSizingRules::kV072Uniform);
  REQUIRE(r.error);
  CHECK(r.error->message ==
        "To serve at least one request with the models's max seq len (131072), (16.00 GB KV cache "
        "is needed, which is larger than the available KV cache memory (8.00 GB). Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.");
  r = size_kv_pool(model(llama, 8 * kGiB, 131'072), KVSizingRules::kV085Uniform);
  REQUIRE(r.error);
  CHECK(r.error->message.find("(8.00 GiB). Based on the available memory,  Try increasing") !=
        std::string::npos);
  r = size_kv_pool(model(llama, 0, 1024), KVSizingRules::kV072Uniform);
  REQUIRE(r.error);
  CHECK(r.error->message.starts_with("No available memory for the cache blocks."));
  // v0.8.5 counts a sliding window's need; v0.7.2 counts max_model_len on every layer.
  const std::vector<LayerKVSpec> mistral(32, attn(KVSpecKind::kSlidingWindow, 8, 128, 4096));
  CHECK(size_kv_pool(model(mistral, 2 * kGiB, 32'768), KVSizingRules::kV085Uniform).layout);
  CHECK(size_kv_pool(model(mistral, 2 * kGiB, 32'768), KVSizingRules::kV072Uniform).error);
  // The override applies before the v0.20 check, after it in v0.7.2.
  KVSizingInput in = model(llama, 40 * kGiB, 131'072);
  in.num_gpu_blocks_override = 1000;
  r = size_kv_pool(in, KVSizingRules::kV020Hybrid);
  REQUIRE(r.error);
  CHECK(r.log.front() == "info: Overriding num_gpu_blocks=20480 with num_gpu_blocks_override=1000");
  r = size_kv_pool(in, KVSizingRules::kV072Uniform);
  REQUIRE(r.layout);
  CHECK(r.layout->num_blocks == 1000);
}

TEST_CASE("max_model_len auto (-1) finds the largest length that fits", "[core]") {
  const std::vector<LayerKVSpec> llama(32, attn(KVSpecKind::kFull, 8, 128));
  KVSizingInput in = model(llama, 8 * kGiB, 131'072);
  in.auto_fit_max_model_len = true;
  const KVSizingResult r = size_kv_pool(in, KVSizingRules::kV020Hybrid);
  REQUIRE(r.layout);
  CHECK(r.layout->max_model_len == 65'536);
  CHECK(r.log.front() ==
        "info: Auto-fit max_model_len: reduced from 131072 to 65536 to fit in "
        "available GPU memory (8.0 GiB available for KV cache)");
}

TEST_CASE("mamba layers: one state block each, the old releases have no spec for them", "[core]") {
  LayerKVSpec gdn;
  gdn.kind = KVSpecKind::kMamba;
  gdn.block_size = 262'144;
  gdn.shapes = {{3, 2048}, {8, 128, 128}};
  gdn.dtypes = {"bfloat16", "bfloat16"};
  gdn.page_size_padded = 278'528;
  gdn.mamba_type = "gdn_attention";
  std::vector<LayerKVSpec> specs;
  for (int i = 0; i < 48; ++i)
    specs.push_back((i + 1) % 4 == 0 ? attn(KVSpecKind::kFull, 1, 256, 0, 272) : gdn);
  KVSizingInput in = model(specs, 20 * kGiB, 262'144);
  in.enable_prefix_caching = false;
  const KVSizingResult r = size_kv_pool(in, KVSizingRules::kV020Hybrid);
  REQUIRE(r.layout);
  CHECK(r.layout->num_blocks == 20 * kGiB / 278'528 / 12);
  CHECK(r.layout->groups.size() == 4);
  CHECK(r.layout->groups[0].max_blocks_per_request == 1);
  CHECK(r.layout->engine_block_size == 272);
  CHECK(size_kv_pool(in, KVSizingRules::kV072Uniform).error->type == "NotImplementedError");
}

TEST_CASE(
    "uniform full-attention models: v0.20 equals the v0.7.2 formula and the check is "
    "tight (randomized against a naive reference)",
    "[core]") {
  std::mt19937_64 rng(20240519);
  for (int iter = 0; iter < 300; ++iter) {
    const auto pick = [&](std::int64_t lo, std::int64_t hi) {
      return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
    };
    const std::int64_t layers = pick(1, 64), heads = pick(1, 16), head = 16 * pick(1, 16);
    const std::int64_t bs = 8 * pick(1, 8), len = pick(1, 20'000), memory = pick(0, 4 * kGiB);
    INFO("iter " << iter << " layers " << layers << " heads " << heads << " head " << head
                 << " block " << bs << " len " << len << " memory " << memory);
    const std::vector<LayerKVSpec> specs(static_cast<std::size_t>(layers),
                                         attn(KVSpecKind::kFull, heads, head, 0, bs));
    const std::int64_t page = 2 * bs * heads * head * 2;
    const std::int64_t need = layers * ((len + bs - 1) / bs) * page;  // the naive need
    const KVSizingResult v020 = size_kv_pool(model(specs, memory, len), KVSizingRules::kV020Hybrid);
    const KVSizingResult v072 =
        size_kv_pool(model(specs, memory, len), KVSizingRules::kV072Uniform);
    REQUIRE(v020.layout.has_value() == (memory > 0 && need <= memory));
    REQUIRE(v072.layout.has_value() == v020.layout.has_value());
    if (!v020.layout) continue;
    CHECK(v020.layout->num_blocks == memory / page / layers);
    CHECK(v072.layout->num_blocks == v020.layout->num_blocks);
    CHECK(v020.layout->max_memory_usage_bytes_per_request == need);
    std::int64_t total = 0;
    for (const KVCacheTensor& t : v020.layout->tensors) total += t.size_bytes;
    CHECK(total <= memory);
    // Auto-fit on one byte less than the need: the naive longest fitting length.
    KVSizingInput in = model(specs, need - 1, len);
    in.auto_fit_max_model_len = true;
    const KVSizingResult fit = size_kv_pool(in, KVSizingRules::kV020Hybrid);
    std::int64_t naive = 0;
    while (naive < len && layers * ((naive + 1 + bs - 1) / bs) * page <= need - 1) ++naive;
    if (naive == 0) {
      CHECK(fit.error);
    } else {
      REQUIRE(fit.layout);
      CHECK(fit.layout->max_model_len == naive);
    }
  }
}

TEST_CASE("format_gib prints vLLM's round(x, 2)", "[core]") {
  CHECK(format_gib(16 * kGiB) == "16.0");
  CHECK(format_gib(kGiB + kGiB / 2) == "1.5");
  CHECK(format_gib(5'139'136'512) == "4.79");
  CHECK(with_thousands(1'643'116) == "1,643,116");
  CHECK(with_thousands(999) == "999");
}
