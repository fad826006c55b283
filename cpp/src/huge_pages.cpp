// Backing a runtime's caches with transparent huge pages once its prewarm has built them (see
// back_caches_with_huge_pages in huge_pages.hpp and docs/design/runtime.md, "Session 51").

#include "huge_pages.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "runtime_internal.hpp"

namespace gramkiln {
namespace {

#if defined(__linux__) && !defined(MADV_COLLAPSE)
// Linux 6.1's value; older headers lack the name, and older kernels answer EINVAL.
#define MADV_COLLAPSE 25
#endif

// The size of a huge page the kernel can map with one page-table entry (2 MB on x86-64 and on
// arm64 with 4 KB pages), or 0 where there is none to ask for.
size_t huge_page_bytes() {
#if defined(__linux__)
  static const size_t bytes = [] {
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
    unsigned long long value = 0;
    if (!(in >> value) || value == 0 || (value & (value - 1)) != 0) return size_t{0};
    return static_cast<size_t>(value);
  }();
  return bytes;
#else
  return 0;
#endif
}

constexpr std::chrono::milliseconds kCollapseTime{1000};

// The huge-page-sized extents that blocks of memory lie in, by extent number.
class Extents {
 public:
  explicit Extents(size_t extent_bytes) : shift_(__builtin_ctzll(extent_bytes)) {}
  void add(const void* address, size_t bytes) {
    if (address == nullptr || bytes == 0) return;
    const uintptr_t first = reinterpret_cast<uintptr_t>(address) >> shift_;
    const uintptr_t last = (reinterpret_cast<uintptr_t>(address) + bytes - 1) >> shift_;
    for (uintptr_t extent = first; extent <= last; ++extent) extents_.push_back(extent);
    // Millions of small objects share a few hundred extents: keep the list short.
    if (extents_.size() >= compact_at_) {
      compact();
      compact_at_ = std::max<size_t>(kCompactAt, 2 * extents_.size());
    }
  }
  template <typename Vector>
  void add_vector(const Vector& values) {
    add(values.data(), values.size() * sizeof(*values.data()));
  }
  // The extents, ascending and distinct.
  const std::vector<uintptr_t>& sorted() {
    compact();
    return extents_;
  }
  unsigned shift() const { return shift_; }

 private:
  void compact() {
    std::sort(extents_.begin(), extents_.end());
    extents_.erase(std::unique(extents_.begin(), extents_.end()), extents_.end());
  }
  static constexpr size_t kCompactAt = size_t{1} << 16;
  unsigned shift_;
  size_t compact_at_ = kCompactAt;
  std::vector<uintptr_t> extents_;
};

// Exit groups, their memo members and every group they own (children, merged groups, the
// groups levels keep for one use). Each group is owned once, and none is ever freed before its
// runtime, so each is visited once and a pointer read under its owner's lock stays valid after.
// One group's lock at a time: fills take a child's lock while holding its parent's.
void add_groups(Extents& extents, std::vector<const ExitGroup*> pending) {
  while (!pending.empty()) {
    const ExitGroup& group = *pending.back();
    pending.pop_back();
    extents.add(&group, sizeof(group));
    extents.add_vector(group.tokens);
    extents.add_vector(group.bits);
    extents.add_vector(group.child_offsets);
    extents.add_vector(group.child_nodes);
    extents.add_vector(group.child_bytes);
    std::lock_guard<std::mutex> lock(group.mutex);
    for (const auto& [key, child] : group.children) {
      extents.add(&key, sizeof(key) + sizeof(child));  // the map's node
      pending.push_back(child.get());
    }
    for (const auto& [table, level] : group.levels) {
      extents.add(&table, sizeof(table) + sizeof(level));
      extents.add(level.get(), sizeof(*level));
      extents.add_vector(level->tokens);
      extents.add_vector(level->bits);
      extents.add_vector(level->deeper);
      for (const auto& kept : level->transient) pending.push_back(kept.get());
      for (const auto& kept : level->merged) pending.push_back(kept.get());
    }
    for (const auto& [lexeme, merged] : group.merged_by_lexeme) {
      extents.add(&lexeme, sizeof(lexeme) + sizeof(merged));
      pending.push_back(merged.get());
    }
  }
}

void add_walk_result(Extents& extents, const GroupCache::WalkResult* result) {
  if (result) extents.add(result, sizeof(*result) + 4 * size_t{result->count});
}

void add_mask(Extents& extents, const GroupCache::MaskWords* mask) {
  if (mask == nullptr) return;
  extents.add(mask, sizeof(*mask));
  if (!mask->dense() && mask->owned) {
    extents.add(mask->owned.get(), (mask->flips ? 4 : 8) * size_t{mask->num_differing});
  }
}

// The memory a computed fill reads: the runtime's tables and every cache the fill path probes
// or walks (exit groups and levels, walk results and the tables that key them, stored masks and
// the mask pool's slabs, the future languages' memos). Each part is read under the lock that
// guards it, so fills running meanwhile are safe; what they free later only means an extent
// collapsed for nothing.
void collect_extents(const Runtime& rt, Extents& extents) {
  for (const auto* table : {&rt.prod_lhs,
                            &rt.prod_offsets,
                            &rt.prod_rhs,
                            &rt.lexeme_start,
                            &rt.dfa_lexeme,
                            &rt.tokenset_bits,
                            &rt.end_bits,
                            &rt.text_bits,
                            &rt.inside_index,
                            &rt.inside_bits,
                            &rt.inside_id_offsets,
                            &rt.inside_ids,
                            &rt.exit_class,
                            &rt.exit_child_offsets,
                            &rt.exit_children,
                            &rt.dotted_next,
                            &rt.dotted_prod,
                            &rt.prod_dotted,
                            &rt.nt_prod_offsets,
                            &rt.nt_prods,
                            &rt.closure_offsets,
                            &rt.closure_items,
                            &rt.closure_nt_offsets,
                            &rt.closure_nts,
                            &rt.closure_wait_offsets,
                            &rt.closure_waits}) {
    extents.add_vector(*table);
  }
  extents.add_vector(rt.dfa_table);
  extents.add_vector(rt.dfa_accepting);
  extents.add_vector(rt.state_has_exits);
  extents.add_vector(rt.state_key);
  extents.add_vector(rt.symbol_nullable);
  extents.add_vector(rt.dotted_accepts);
  extents.add_vector(rt.trie_byte);
  extents.add_vector(rt.trie_end);
  extents.add_vector(rt.trie_tok_offsets);
  extents.add_vector(rt.trie_tokens);

  GroupCache& cache = *rt.groups;
  std::vector<const ExitGroup*> top_groups;
  {
    std::lock_guard<std::mutex> lock(cache.top_mutex);
    if (cache.top) extents.add(cache.top.get(), sizeof(cache.top[0]) * rt.num_states);
    extents.add_vector(cache.owned);
    for (const auto& group : cache.owned) top_groups.push_back(group.get());
  }
  add_groups(extents, std::move(top_groups));
  auto add_block = [&](const void* address, size_t bytes) { extents.add(address, bytes); };
  auto add_result = [&](const std::shared_ptr<const GroupCache::WalkResult>& result) {
    add_walk_result(extents, result.get());
  };
  {
    std::lock_guard<std::mutex> lock(cache.walk_mutex);
    cache.walks.for_each_block(add_block, add_result);
    cache.future_walks.for_each_block(add_block, add_result);
    cache.item_walks.for_each_block(add_block,
                                    [&](const std::shared_ptr<const GroupCache::ItemWalk>& walk) {
                                      if (!walk) return;
                                      extents.add(walk.get(), sizeof(*walk));
                                      extents.add_vector(walk->pops);
                                    });
    cache.closure_walks.for_each_block(
        add_block, [&](const std::shared_ptr<const GroupCache::ClosureWalk>& walk) {
          if (!walk) return;
          extents.add(walk.get(), sizeof(*walk));
          extents.add_vector(walk->parts);
          extents.add_vector(walk->reached);
        });
    cache.descents.for_each_block(add_block, [](const GroupCache::PackedDescent*) {});
    cache.future_descents.for_each_block(add_block, [](const GroupCache::PackedDescent*) {});
    cache.local_walks.for_each_block(add_block);
    cache.walk_arena.for_each_block(add_block);
    for (const auto& [digest, results] : cache.walk_contents) {
      extents.add(&digest, sizeof(digest) + sizeof(results));
      extents.add_vector(results);
      for (const auto& result : results) add_walk_result(extents, result.get());
    }
  }
  {
    std::lock_guard<std::mutex> lock(cache.node_mutex);
    for (const auto& [key, walk] : cache.node_walks) {
      extents.add(&key, sizeof(key) + sizeof(walk));
      extents.add(walk.get(), sizeof(*walk));
      extents.add_vector(walk->tokens);
      extents.add_vector(walk->exits);
    }
  }
  {
    std::lock_guard<std::mutex> lock(cache.mask_mutex);
    auto add_stored = [&](const GroupCache::StoredMask& mask) { add_mask(extents, mask.get()); };
    for (const GroupCache::MaskTable* table :
         {&cache.masks, &cache.depth_masks, &cache.future_masks}) {
      table->current.for_each_block(add_block, add_stored);
      table->previous.for_each_block(add_block, add_stored);
    }
    cache.composed_masks.for_each_block(add_block,
                                        [](const std::weak_ptr<const GroupCache::MaskWords>&) {});
  }
  cache.mask_pool->for_each_block(add_block);

  FutureLanguages& futures = *rt.futures;
  std::lock_guard<std::mutex> lock(futures.mutex);
  futures.futures.for_each_block(add_block, [](const FutureLanguages::MemoValue&) {});
  futures.recipes.for_each_block(add_block, [](const FutureLanguages::Recipe&) {});
  futures.keys_by_anchors.for_each_block(add_block, [](const std::pair<uint64_t, uint64_t>&) {});
  extents.add_vector(futures.recipe_entries);
  futures.ids.for_each_block(add_block);
  futures.concatenations.for_each_block(add_block);
  futures.unions.for_each_block(add_block);
  futures.provisional.for_each_block(add_block);
  extents.add_vector(futures.forms);
  for (const std::vector<uint32_t>* form : futures.forms) extents.add_vector(*form);
  extents.add_vector(futures.corner_offsets);
  extents.add_vector(futures.corner_after);
  for (const auto& reaching : futures.reaching) extents.add_vector(reaching);
}

}  // namespace

size_t back_caches_with_huge_pages(const Runtime& rt, const std::atomic<bool>* stop) {
#if defined(__linux__)
  const size_t bytes = huge_page_bytes();
  if (bytes == 0 || !rt.groups->huge_pages) return 0;
  Extents extents(bytes);
  collect_extents(rt, extents);
  size_t collapsed = 0;
  // A collapse waits for a free huge page, which under memory pressure means reclaim and
  // compaction: the step as a whole gets at most kCollapseTime (C-like's first, on a VM whose
  // host backs fresh memory lazily: ~0.3 s for 57 extents; later ones ~10 ms).
  const auto deadline = std::chrono::steady_clock::now() + kCollapseTime;
  for (const uintptr_t extent : extents.sorted()) {
    if (stop && stop->load(std::memory_order_relaxed)) break;
    if (std::chrono::steady_clock::now() > deadline) break;
    // Any error leaves the extent as it is, and masks never depend on it: a kernel before 6.1
    // (EINVAL, answered at once), no huge page free, pages pinned or shared, part of the extent
    // not mapped, memory that is not anonymous.
    if (madvise(reinterpret_cast<void*>(extent << extents.shift()), bytes, MADV_COLLAPSE) == 0) {
      ++collapsed;
    }
  }
  return collapsed;
#else
  (void)rt;
  (void)stop;
  return 0;
#endif
}

}  // namespace gramkiln
