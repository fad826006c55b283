// Internal layout of a loaded runtime, shared by the builder, the loader and the matcher.
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "gramkiln/core.hpp"

namespace gramkiln {

constexpr uint32_t kBlobMagic = 0x54524b47;  // "GKRT" little-endian
constexpr uint32_t kBlobVersion = 6;
constexpr uint32_t kComplete = 0xffffffffu;  // dotted_next value of a completed production
// A read (see build_earley_set) of sets that no depth hash pins down: a walk that made it is
// never stored under a depth key (depth_needed never finds it among the sets it searches).
constexpr uint32_t kUnknownRead = 0xffffffffu;

// The context-free part of the mask work after a lexeme ends inside a token. A group is a set
// of trie nodes entered in one DFA state of one lexeme: `tokens` are the tokens at or below
// them that stay inside that lexeme, and `exit_children` (by byte) are the children of the
// nodes where the lexeme can end with token bytes left over. Which lexemes follow, and so which
// child groups are visited, depends on the parser and is decided at run time; the groups
// themselves are computed once, on first use, and shared by every matcher and thread.
// Byte -> DFA states entered on that byte by a set of expected lexemes. One table per distinct
// set of lexemes, shared by every Earley set that expects exactly those.
struct FollowTable {
  std::vector<uint32_t> offsets;  // 257 entries into states
  std::vector<int32_t> states;
};

struct ExitGroup;

// The trie below one node entered in one DFA state: the tokens at or below it that stay inside
// the lexeme, and the nodes where the lexeme can end with token bytes left over. Independent of
// the parent group the node was reached from, so shared by all of them (see build_groups).
struct NodeWalk {
  std::vector<uint32_t> tokens;
  std::vector<uint32_t> exits;
  static uint64_t key(uint32_t node, int32_t state) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(state)) << 32) | node;
  }
  size_t footprint() const { return 4 * (tokens.size() + exits.size()) + 96; }
};

// For one group and one follow table: the union of the tokens of every child group entered
// (so a fill ORs one set instead of many), and the children that have exits of their own.
struct LevelCache {
  std::vector<uint32_t> tokens;  // sparse form
  std::vector<uint32_t> bits;    // dense form
  std::vector<const ExitGroup*> deeper;
  std::vector<std::unique_ptr<ExitGroup>> transient;  // children not kept by the cache
  // Children with exits that share a lexeme continue from the same Earley set, so they are
  // merged into one group (one visit per following lexeme instead of one per child). Merged
  // groups normally live in the parent's merged_by_lexeme; only those built past the memory
  // budget are owned here.
  std::vector<std::unique_ptr<ExitGroup>> merged;
  size_t footprint() const;
};

struct ExitGroup {
  uint32_t lexeme = 0;
  std::vector<uint32_t> tokens;         // sparse form
  std::vector<uint32_t> bits;           // dense form (when there are more tokens than mask words)
  std::vector<uint32_t> child_offsets;  // 257 entries into child_nodes, or empty if none
  std::vector<uint32_t> child_nodes;
  std::vector<uint8_t> child_bytes;  // bytes with at least one child, ascending
  // False for groups built for one use (past the memory budget): their address may be reused,
  // so walk results must not be cached under it.
  mutable bool persistent = true;
  // Bit d set once a walk of this group was stored at depth d (see walk_level): lookups skip
  // the depths never stored. Never cleared, so stale bits only cost a probe.
  mutable std::atomic<uint32_t> stored_depths{0};
  // The same for descents by items from this (top) group (see fill_exits_by_items): a thread's
  // lookups probe only the depths its own kind of thread was stored at.
  mutable std::atomic<uint32_t> descent_depths{0};
  // The depth at which a descent from this group was last found or stored: probed first.
  mutable std::atomic<uint32_t> descent_hint{0};
  // Memo members: filled lazily through const references, always under `mutex`.
  mutable std::mutex mutex;
  mutable std::unordered_map<uint64_t, std::unique_ptr<ExitGroup>> children;  // state << 8 | byte
  mutable std::unordered_map<const FollowTable*, std::unique_ptr<LevelCache>> levels;
  // Children with exits merged by lexeme (see LevelCache::merged): which children a lexeme
  // enters does not depend on the follow table, so one merged group per lexeme serves all.
  mutable std::unordered_map<uint32_t, std::unique_ptr<ExitGroup>> merged_by_lexeme;
  size_t footprint() const {
    return 4 * (tokens.size() + bits.size() + child_offsets.size() + child_nodes.size()) + 128;
  }
};

inline size_t LevelCache::footprint() const {
  size_t size = 4 * (tokens.size() + bits.size()) + 8 * deeper.size() + 96;
  for (const auto& group : merged) size += group->footprint();
  return size;
}

// Map from 128-bit structural keys (already well mixed: the low word indexes directly) to
// values, open addressing with linear probing. The node-based std::unordered_map it replaces
// paid a division and two dependent cache misses per lookup, and walk lookups probe up to
// eight keys per walk. Most lookups on the fill path miss (a computed fill probes every depth
// a key may be stored at), so a filter (two bits per key in one 64-bit word, four filter bits
// per slot, a sixty-fourth of the slots' size) answers most misses from one line, which stays
// in cache far more often than a slot of a table of megabytes does.
template <typename V>
class KeyMap {
 public:
  using Key = std::pair<uint64_t, uint64_t>;
  void reserve(size_t entries) {
    size_t capacity = 16;
    while (capacity < 2 * entries) capacity *= 2;
    if (capacity > slots_.size()) rehash(capacity);
  }
  const V* find(const Key& key) const {
    if (slots_.empty() || !may_contain(key)) return nullptr;
    const size_t mask = slots_.size() - 1;
    for (size_t i = key.first & mask;; i = (i + 1) & mask) {
      const Slot& slot = slots_[i];
      if (!slot.used) return nullptr;
      if (slot.key == key) return &slot.value;
    }
  }
  bool contains(const Key& key) const { return find(key) != nullptr; }
  // Ask for the lines that find(key) and emplace(key) read first: its filter word and slot.
  void prefetch(const Key& key) const {
    if (slots_.empty()) return;
    __builtin_prefetch(&filter_[filter_word(key)]);
    __builtin_prefetch(&slots_[key.first & (slots_.size() - 1)]);
  }
  // False (and no change) when the key is present.
  bool emplace(const Key& key, V value) {
    if (2 * (size_ + 1) > slots_.size()) rehash(slots_.empty() ? 16 : 2 * slots_.size());
    const size_t mask = slots_.size() - 1;
    size_t i = key.first & mask;
    for (; slots_[i].used; i = (i + 1) & mask) {
      if (slots_[i].key == key) return false;
    }
    slots_[i].used = true;
    slots_[i].key = key;
    add_to_filter(key);
    slots_[i].value = std::move(value);
    ++size_;
    return true;
  }
  // Like emplace, but replaces the value when the key is present.
  void assign(const Key& key, V value) {
    if (!slots_.empty() && may_contain(key)) {
      const size_t mask = slots_.size() - 1;
      for (size_t i = key.first & mask; slots_[i].used; i = (i + 1) & mask) {
        if (slots_[i].key == key) {
          slots_[i].value = std::move(value);
          return;
        }
      }
    }
    emplace(key, std::move(value));
  }
  void clear() {
    for (Slot& slot : slots_) slot = Slot{};
    std::fill(filter_.begin(), filter_.end(), 0);
    size_ = 0;
  }
  size_t size() const { return size_; }
  // Call `visit(address, bytes)` on each block of memory the table holds, and `visit_value`
  // on each stored value (see back_caches_with_huge_pages).
  template <typename Visit, typename VisitValue>
  void for_each_block(Visit&& visit, VisitValue&& visit_value) const {
    visit(slots_.data(), slots_.size() * sizeof(Slot));
    visit(filter_.data(), filter_.size() * sizeof(uint64_t));
    for (const Slot& slot : slots_) {
      if (slot.used) visit_value(slot.value);
    }
  }
  size_t num_slots() const { return slots_.size(); }
  // Call `visit(address, bytes)` on the slots in [begin, end) (clamped to the table) and on
  // the filter words that cover them.
  template <typename Visit>
  void visit_slots(size_t begin, size_t end, Visit&& visit) const {
    end = std::min(end, slots_.size());
    if (begin >= end) return;
    visit(&slots_[begin], (end - begin) * sizeof(Slot));
    const size_t first_word = begin / 16, end_word = (end + 15) / 16;
    visit(&filter_[first_word], (end_word - first_word) * sizeof(uint64_t));
  }

 private:
  struct Slot {
    Key key{0, 0};
    V value{};
    bool used = false;
  };
  // Filter bits: 4 per slot, in 64-bit words (slots are a power of two, at least 16). A key's
  // two bits lie in one word (a blocked filter): the filter of a large table is itself larger
  // than a core's L2 (a table of 1M slots has 512 KB of it), and with the two bits in different
  // words a probe waited on two filter lines before its slot (C-like computed fills: a sixth of
  // their misses past L2 were filter words, docs/design/runtime.md, "Session 43").
  size_t filter_word(const Key& key) const { return key.second & (filter_.size() - 1); }
  static uint64_t filter_bits(const Key& key) {
    return (uint64_t{1} << ((key.second >> 40) & 63)) | (uint64_t{1} << ((key.second >> 52) & 63));
  }
  bool may_contain(const Key& key) const {
    const uint64_t bits = filter_bits(key);
    return (filter_[filter_word(key)] & bits) == bits;
  }
  void add_to_filter(const Key& key) { filter_[filter_word(key)] |= filter_bits(key); }
  void rehash(size_t capacity) {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.resize(capacity);
    filter_.assign(capacity / 16, 0);
    size_ = 0;
    for (Slot& slot : old) {
      if (slot.used) emplace(slot.key, std::move(slot.value));
    }
  }
  std::vector<Slot> slots_;
  std::vector<uint64_t> filter_;
  size_t size_ = 0;
};

inline uint64_t mix64(uint64_t x);  // defined below

// 64-bit keys to ids in a KeyMap: the future-language memos (see FutureLanguages) are looked up
// for every anchor of every new set, on the fill path of future-key hits, where node-based map
// lookups were about a quarter of the time.
class IdMap {
 public:
  const uint32_t* find(uint64_t key) const { return map_.find(slot_key(key)); }
  void emplace(uint64_t key, uint32_t id) { map_.emplace(slot_key(key), id); }
  void reserve(size_t entries) { map_.reserve(entries); }
  size_t size() const { return map_.size(); }
  template <typename Visit>
  void for_each_block(Visit&& visit) const {
    map_.for_each_block(visit, [](uint32_t) {});
  }
  size_t num_slots() const { return map_.num_slots(); }
  template <typename Visit>
  void visit_slots(size_t begin, size_t end, Visit&& visit) const {
    map_.visit_slots(begin, end, visit);
  }

 private:
  // mix64 is a bijection, so the first word alone names the key; both are well mixed, as
  // KeyMap's slot index and filter need.
  static KeyMap<uint32_t>::Key slot_key(uint64_t key) {
    return {mix64(key), mix64(key ^ 0x6a09e667f3bcc909ull)};
  }
  KeyMap<uint32_t> map_;
};

// Whether the environment variable `name` holds a whole decimal number, stored in `out`.
inline bool env_number(const char* name, unsigned long long* out) {
  const char* env = std::getenv(name);
  // Digits only: strtoull alone would take a sign or leading spaces (and "-1" as 2^64 - 1).
  if (env == nullptr || *env < '0' || *env > '9') return false;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(env, &end, 10);
  if (end == env || *end != '\0') return false;
  *out = value;
  return true;
}

// A counter that threads of a batch fill add to without sharing a cache line: one line per
// shard, a thread's shard chosen once. read() sums them (statistics, not synchronisation).
class ShardedCounter {
 public:
  void add_one() { shards_[shard_of_this_thread()].value.fetch_add(1, std::memory_order_relaxed); }
  size_t read() const {
    size_t total = 0;
    for (const Shard& shard : shards_) total += shard.value.load(std::memory_order_relaxed);
    return total;
  }

 private:
  static constexpr size_t kShards = 16;
  struct alignas(64) Shard {
    std::atomic<size_t> value{0};
  };
  static size_t shard_of_this_thread() {
    static std::atomic<size_t> next{0};
    thread_local const size_t shard = next.fetch_add(1, std::memory_order_relaxed) % kShards;
    return shard;
  }
  Shard shards_[kShards];
};

// Every GroupCache's number, never reused in a process: a thread's own copies of mask table
// entries (see LocalMasks in matcher.cpp) name the cache they came from by it, since a new
// runtime may be allocated where a freed one was.
inline uint64_t next_group_cache_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

// Memo of exit groups with a memory budget: past it, new groups are built for one use only.
struct GroupCache {
  // Room for a few thousand entries up front: growing a table rehashes every entry within one
  // fill, which showed up among the slowest fills (~20k instructions of a 170k one).
  GroupCache() {
    masks.current.reserve(4096);
    depth_masks.current.reserve(4096);
    future_masks.current.reserve(4096);
    unsigned long long value = 0;
    // GRAMKILN_MASK_CACHE_BYTES overrides the mask tables' budget (tests of the rotation).
    if (env_number("GRAMKILN_MASK_CACHE_BYTES", &value) && value > 0) mask_budget_bytes = value;
    // GRAMKILN_WALK_CACHE_BYTES overrides the walk tables' budget (tests of their clearing).
    if (env_number("GRAMKILN_WALK_CACHE_BYTES", &value) && value > 0) walk_budget_bytes = value;
    // GRAMKILN_FILL_WALK_BUDGET overrides the walks a computed fill may compute before it
    // falls back to the trie search (tests run the search on every fill with 0).
    if (env_number("GRAMKILN_FILL_WALK_BUDGET", &value)) fill_walk_budget = value;
    // GRAMKILN_FILL_WALK_MS overrides kFillWalkTime (tests: 0, a search after 64 walks).
    if (env_number("GRAMKILN_FILL_WALK_MS", &value)) {
      fill_walk_time = std::chrono::milliseconds(std::min<unsigned long long>(value, 1ull << 40));
    }
    // GRAMKILN_ITEM_WALKS=on|off overrides where fills walk by items (see item_walks_mode).
    if (const char* mode = std::getenv("GRAMKILN_ITEM_WALKS")) {
      const std::string text(mode);
      if (text == "on" || text == "1") item_walks_mode = ItemWalks::kOn;
      if (text == "off" || text == "0") item_walks_mode = ItemWalks::kOff;
    }
    // GRAMKILN_FUTURE_DESCENTS=on|off overrides the decode's judgement (see
    // future_descents_mode).
    if (const char* mode = std::getenv("GRAMKILN_FUTURE_DESCENTS")) {
      const std::string text(mode);
      if (text == "on") future_descents_mode = FutureDescents::kOn;
      if (text == "off") future_descents_mode = FutureDescents::kOff;
    }
    // GRAMKILN_DESCENT_ADMISSION=first stores every descent a decode walks (see
    // DescentDoorkeeper); the default stores one walked before.
    if (const char* admission = std::getenv("GRAMKILN_DESCENT_ADMISSION")) {
      descent_doorkeeper.admit_first = std::strcmp(admission, "first") == 0;
    }
    walks.reserve(8192);
    future_walks.reserve(1024);
    walk_contents.reserve(8192);
    // GRAMKILN_HUGE_PAGES=off (or 0) leaves the caches in the pages the allocator gave them.
    // Read here, on the loading thread: the prewarm that reads `huge_pages` may run on another
    // thread, where getenv would race with a Python thread changing os.environ.
    auto switched_off = [](const char* name) {
      const char* value = std::getenv(name);
      return value && (std::strcmp(value, "off") == 0 || std::strcmp(value, "0") == 0);
    };
    huge_pages = !switched_off("GRAMKILN_HUGE_PAGES");
    // GRAMKILN_PREWARM_READBACK=off (or 0) leaves the prewarm's last step out.
    read_back = !switched_off("GRAMKILN_PREWARM_READBACK");
  }
  // Whether the prewarm backs the caches with huge pages at its end (see
  // back_caches_with_huge_pages in huge_pages.hpp).
  bool huge_pages = true;
  // Whether the prewarm reads the tables computed fills read back at its very end (see
  // read_back_fill_tables in matcher.cpp).
  bool read_back = true;
  // Whether computed fills follow exits by pending items (see compute_item_walk in
  // matcher.cpp; the default) or by hypothetical sets (walk_level; also for one fill when a
  // group or level built for one use is met). Measured in session 21 (bench decodes after the
  // prewarm, Llama 3): C-like computed fills 148 k -> 72 k instructions, p99 ~35% lower; JSON
  // 44 k -> 32 k. MaskBench's p99 was 30-50% higher by items until the prewarm computed every
  // item walk a decode can need (prewarm_item_walks, session 22): since then equal within the
  // host's noise, and JSON's and C-like's lower. GRAMKILN_ITEM_WALKS=on|off overrides.
  enum class ItemWalks { kOn, kOff };
  ItemWalks item_walks_mode = ItemWalks::kOn;
  static constexpr size_t kBudgetBytes = size_t{256} << 20;
  // Exit walks one computed fill may compute before it gives up on walks (see
  // Scratch::walks_left; a walk over a group built for one use counts for 16). The slowest
  // fills of the benchmark grammars, cold, compute a few hundred.
  static constexpr size_t kFillWalkBudget = 20000;
  // Lowered (to a quarter, not below kFillWalkFloor) after each searched fill: a grammar that
  // needed the search once usually needs it again at the next positions, and the walks spent
  // before it are wasted (a palindrome grammar's fills: 73 ms each at 20,000, 13 ms at 2,048).
  static constexpr size_t kFillWalkFloor = 2048;
  // Time one computed fill may spend on exit walks before it falls back to the trie search,
  // whatever is left of the walk budget. Walks over large groups cost ~0.25 ms each: a random
  // grammar with a sub-grammar whose ignored lexeme takes almost any byte (stress run, Qwen2)
  // spent 20,000 walks, 5 s, on its first fill before the search (0.5 s) gave the mask, and a
  // prewarm running that fill overran its 1 s bound by as much. The slowest fills that walks
  // serve better than the search take 50-180 ms (Open problems 4 (c)).
  static constexpr std::chrono::milliseconds kFillWalkTime{200};
  std::chrono::milliseconds fill_walk_time = kFillWalkTime;
  std::atomic<size_t> fill_walk_budget{kFillWalkBudget};
  // Trie nodes one computed fill may visit building exit groups before it computes no more
  // walks. Cold fills of the bench grammars and of 300 MaskBench schemas (no prewarm) visit up
  // to 246K; a lexeme that takes any byte and follows itself visits 8.4M in its first fill,
  // and past the group budget (groups built for one use) every fill does.
  static constexpr size_t kFillTrieNodes = 2000000;
  std::mutex top_mutex;                            // guards `owned`
  std::unique_ptr<std::atomic<ExitGroup*>[]> top;  // per DFA state, built on first use
  std::vector<std::unique_ptr<ExitGroup>> owned;
  std::unordered_map<uint64_t, std::vector<ExitGroup*>> by_content;  // guarded by top_mutex
  std::atomic<size_t> used{0};
  // Walk results are cleared when they outgrow walk_budget_bytes; each mask table keeps within
  // mask_budget_bytes in two generations (see MaskTable); both default to kMaskBudgetBytes.
  static constexpr size_t kMaskBudgetBytes = size_t{64} << 20;
  size_t mask_budget_bytes = kMaskBudgetBytes;
  size_t walk_budget_bytes = kMaskBudgetBytes;
  std::mutex mask_mutex;  // guards `masks` and `depth_masks`
  class MaskPool;
  // A stored mask's words: dense, in a slot of `mask_pool` (or, for an unexpected word count, a
  // buffer of its own), given back when the last reference goes; or compact, as the words (or
  // the bits) in which it differs from a dense base mask or from all zeros. A cold dense mask
  // is 16 KB for Llama 3, whose copy from memory (~1.5-1.8 us here) was the largest single part
  // of many computed fills; a compact one reads its base, which the other masks of its family keep
  // in cache, and a few lines of its own (see make_stored_mask). Made with its reference counts in
  // one allocation (make_shared), so that reaching the words from a table slot is one miss less.
  struct MaskWords {
    MaskWords(const uint32_t* words, uint32_t words_count, std::shared_ptr<MaskPool> from,
              std::unique_ptr<uint32_t[]> own)
        : data(words), count(words_count), pool(std::move(from)), owned(std::move(own)) {}
    // A compact mask: `base`'s words (all zeros without one) but at the `differing` entries of
    // `entries`, ascending: (word index, word) pairs, or with `flip_bits` the bits (token ids)
    // in which it differs.
    MaskWords(uint32_t words_count, std::shared_ptr<const MaskWords> dense_base,
              std::unique_ptr<uint32_t[]> entries, uint32_t differing, bool flip_bits)
        : data(nullptr),
          count(words_count),
          num_differing(differing),
          flips(flip_bits),
          base(std::move(dense_base)),
          owned(std::move(entries)) {}
    ~MaskWords();
    MaskWords(const MaskWords&) = delete;
    MaskWords& operator=(const MaskWords&) = delete;
    const uint32_t* data;  // the words of a dense mask; null for a compact one
    uint32_t count;
    uint32_t num_differing = 0;  // of a compact mask: its entries in `owned`
    bool flips = false;          // its entries are bits to flip, not (index, word) pairs
    // Per mask table (MaskTable::index), the generation whose `bytes` count this content; kept
    // here, a line the storing fill has just read, rather than in a set per table (whose cold
    // bucket and node were two misses per store). Guarded by mask_mutex.
    static constexpr size_t kTables = 3;  // masks, depth_masks, future_masks
    mutable uint64_t counted_in[kTables] = {};
    std::shared_ptr<const MaskWords> base;  // a compact mask's dense base; null: zeros
    std::shared_ptr<MaskPool> pool;         // takes `data` back; null when `owned` holds it
    std::unique_ptr<uint32_t[]> owned;      // dense words of its own, or a compact mask's entries
    bool dense() const { return data != nullptr; }
    size_t size() const { return count; }
    // Write the `count` words into `out`.
    void copy_to(uint32_t* out) const {
      if (data) {
        std::copy(data, data + count, out);
        return;
      }
      if (base) {
        std::copy(base->data, base->data + count, out);
      } else {
        std::fill(out, out + count, 0u);
      }
      const uint32_t* entry = owned.get();
      if (flips) {
        for (uint32_t k = 0; k < num_differing; ++k) out[entry[k] >> 5] ^= 1u << (entry[k] & 31);
        return;
      }
      for (uint32_t k = 0; k < num_differing; ++k, entry += 2) out[entry[0]] = entry[1];
    }
    // Whether the mask's words equal `words` (`count` of them).
    bool equals(const uint32_t* words) const {
      if (data) return std::equal(data, data + count, words);
      uint32_t at = 0;
      const uint32_t* entry = owned.get();
      auto same_as_base = [&](uint32_t end) {
        if (base) return std::equal(base->data + at, base->data + end, words + at);
        return std::all_of(words + at, words + end, [](uint32_t w) { return w == 0; });
      };
      auto base_word = [&](uint32_t i) { return base ? base->data[i] : 0u; };
      for (uint32_t k = 0; k < num_differing;) {
        uint32_t index, word;
        if (flips) {
          index = entry[k] >> 5;
          word = base_word(index);
          for (; k < num_differing && (entry[k] >> 5) == index; ++k) word ^= 1u << (entry[k] & 31);
        } else {
          index = entry[2 * k];
          word = entry[2 * k + 1];
          ++k;
        }
        if (!same_as_base(index) || words[index] != word) return false;
        at = index + 1;
      }
      return same_as_base(count);
    }
    // Bytes the mask holds of its own, as the mask budget counts them.
    size_t content_bytes() const {
      return data ? 4 * size_t{count} : 64 + (flips ? 4 : 8) * size_t{num_differing};
    }
  };
  // Stored masks are shared: a mask without end tokens is usually stored under both keys.
  using StoredMask = std::shared_ptr<const MaskWords>;
  // Slots for stored masks, carved from slabs and recycled when a mask is dropped. Every stored
  // mask of a runtime has the same size, and a fresh 16 KB malloc on the fill path could run
  // glibc's fastbin consolidation (~50 k of the ~95 k instructions of some of the slowest
  // MaskBench fills). Held by each mask's deleter, so it outlives them all.
  class MaskPool {
   public:
    // A slot `copy` handed out, free again.
    void give_back(const uint32_t* slot);
    // A copy of `words` in a free slot (every call with the same `count`).
    static StoredMask copy(const std::shared_ptr<MaskPool>& pool, const uint32_t* words,
                           uint32_t count);
    // Make sure at least `slots` free slots of `count` words are resident (their pages
    // touched), so that the masks a decode stores first take no page faults: a fault on each of
    // a mask's four pages made those fills 2x slower (JSON, C-like decodes after the prewarm).
    // Called off the fill path, by the prewarm.
    void keep_free(uint32_t count, size_t slots);
    // Call `visit(address, bytes)` on each slab.
    template <typename Visit>
    void for_each_block(Visit&& visit) {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& slab : slabs_) visit(slab.get(), 4 * size_t{slot_words_} * kSlotsPerSlab);
    }

   private:
    void add_slab(uint32_t count, bool touch);  // with mutex_ held
    static constexpr size_t kSlotsPerSlab = 16;
    std::mutex mutex_;
    uint32_t slot_words_ = 0;  // set by the first copy
    std::vector<std::unique_ptr<uint32_t[]>> slabs_;
    std::vector<uint32_t*> free_;
  };
  const std::shared_ptr<MaskPool> mask_pool = std::make_shared<MaskPool>();
  // Dense masks that new contents may be stored against (see make_stored_mask): the first
  // kMaxMaskBases contents that were not within a compact mask's reach of an earlier one. Weak:
  // the compact masks hold their bases. Guarded by mask_mutex.
  static constexpr size_t kMaxMaskBases = 32;
  std::vector<std::weak_ptr<const MaskWords>> mask_bases;
  // Unions of inside sets by sorted thread states (see assign_inside_sets), in mask slots: a
  // new union is stored in a slot the prewarm left resident, not a fresh 16 KB allocation
  // (whose page faults were ~40% of building a C-like union).
  std::mutex inside_mutex;  // guards `inside_unions`
  std::map<std::vector<int32_t>, StoredMask> inside_unions;
  // Masks in two generations, so that a full table does not start every decode cold: when the
  // current one would pass half the budget it becomes the previous one (the one before is
  // dropped), and a hit in the previous generation is stored again in the current one. What is
  // in use survives a turnover; memory stays within the budget whatever the traffic.
  struct MaskTable {
    explicit MaskTable(uint8_t table_index) : index(table_index) {}
    KeyMap<StoredMask> current, previous;
    size_t bytes = 0;         // of `current`: 64 per entry plus each distinct content once
    const uint8_t index;      // into MaskWords::counted_in, below MaskWords::kTables
    uint64_t generation = 1;  // of `current`; a content counted in it has this in counted_in
  };
  // Stored masks are interned by content (a fill's mask is one of a few dozen distinct ones
  // per grammar, under thousands of keys): hits then read a mask that is likely still in the
  // calling core's cache, and the tables hold megabytes instead of tens. By digest; weak, so a
  // content lives exactly as long as some entry of either table holds it. Guarded by
  // mask_mutex.
  std::unordered_map<uint64_t, std::vector<std::weak_ptr<const MaskWords>>> mask_contents;
  // Stored masks by what a computed fill ORed together: the set of thread states (their inside
  // union), the ids of the top-level walk results, the token sets expected at the frontier and
  // whether end tokens were added. Equal compositions have equal words, so a fill whose parts
  // recur in a combination seen before finds its stored copy without a digest or a compare (a
  // computed JSON fill compared ~2 stored masks of 16 KB, most of them not in cache). Walk ids
  // are never reused, so an entry cannot name other content after the walk tables are
  // cleared. Weak, like `mask_contents`; cleared when a mask table's generations turn over or
  // past 64K entries. Guarded by mask_mutex.
  KeyMap<std::weak_ptr<const MaskWords>> composed_masks;
  std::atomic<size_t> interned_by_parts{0};  // computed masks found under their composition
  std::atomic<size_t> mask_compares{0};      // stored masks compared with one being interned
  // Whole masks by parser configuration (128-bit structural key; see Chart).
  MaskTable masks{0};
  // Masks without the end tokens, by a bounded-depth key: the thread states with H_D of their
  // origin sets (and of the last set when one ends here), where D is the deepest dependency of
  // the fill's exit walks. The whole-stack key above rarely recurs when the stack differs below
  // what the mask depends on (JSON nesting, expression contexts); this one does. Guarded by
  // mask_mutex; `mask_depths` has bit D set once a mask was stored at depth D.
  MaskTable depth_masks{1};
  // Whole masks by future-language key (see future.cpp): equal for configurations whose charts
  // differ but whose futures do not (`x = e`, `return e`, `int x = e` inside one block).
  MaskTable future_masks{2};
  const uint64_t id = next_group_cache_id();
  // Whole-stack hits are the common fill, often on many threads at once (batch fills).
  ShardedCounter hits_whole_stack;
  std::atomic<size_t> hits_future{0}, hits_depth{0}, fills_computed{0};
  // Computed fills that ran past fill_walk_budget or kFillTrieNodes (and were searched).
  std::atomic<size_t> fills_searched{0};
  std::atomic<uint32_t> mask_depths{0};
  // Set at the end of a prewarm whose synthetic traffic, with future keys on, found almost no
  // mask under a bounded-depth key (C-like: 6 of 287 fills the future key missed): while future
  // keys are in use, fills then neither probe those keys nor find the depth a computed mask
  // would be stored at (see Matcher::uses_depth_keys). Where futures are equal the future key
  // answers already; what the depth key adds is nested constructs whose futures differ below
  // what tokens reach, which the traffic meets where a grammar has them (JSON-like nesting).
  std::atomic<bool> depth_keys_idle{false};
  // Exit walks by (group, lexeme, depth d, H_d of the set they start from); see walk_level.
  // Sparse token lists when short, else bitsets.
  std::mutex walk_mutex;  // guards `walks` and `walk_bytes`
  // One block: this header, then the words (token ids, or mask words when dense), so that
  // ORing a part reads its words right after the header instead of following a pointer to a
  // separate buffer (a second dependent miss per part in a computed fill).
  struct WalkResult {
    bool dense = false;
    uint32_t count = 0;
    uint64_t id = 0;  // unique per stored content, never reused (see `composed_masks`)
    const uint32_t* data() const { return reinterpret_cast<const uint32_t*>(this + 1); }
    size_t size() const { return count; }
    bool same_words(const std::vector<uint32_t>& words) const {
      return words.size() == count && std::equal(words.begin(), words.end(), data());
    }
    static std::shared_ptr<const WalkResult> make(bool dense, const std::vector<uint32_t>& words,
                                                  uint64_t id) {
      void* block = ::operator new(sizeof(WalkResult) + 4 * words.size());
      auto* result = new (block) WalkResult;
      result->dense = dense;
      result->count = static_cast<uint32_t>(words.size());
      result->id = id;
      std::copy(words.begin(), words.end(), const_cast<uint32_t*>(result->data()));
      return std::shared_ptr<const WalkResult>(result, [](const WalkResult* done) {
        done->~WalkResult();
        ::operator delete(const_cast<WalkResult*>(done));
      });
    }
  };
  static_assert(sizeof(WalkResult) == 16, "a walk result's words follow its 16-byte header");
  // Many walks give the same tokens, so results are interned by content and shared.
  KeyMap<std::shared_ptr<const WalkResult>> walks;
  // Item walks (see compute_item_walk in matcher.cpp): for a group and one pending item, the tokens
  // that go on inside the item's production after the symbol it waits for, and the groups at
  // which its left-hand side completes. A function of the two alone; cleared with `walks`.
  struct ItemWalk {
    std::shared_ptr<const WalkResult> tokens;  // null when none
    std::vector<const ExitGroup*> pops;
  };
  KeyMap<std::shared_ptr<const ItemWalk>> item_walks;
  // The item walks of one completion at one set (see compute_local_walk in matcher.cpp): by
  // (group, symbol, the set's kernel dotted ids), the tokens of every item the completion
  // reaches there, and where it goes on below: (group, symbol completed, dotted id of the
  // kernel items at whose origins it completes).
  struct Continuation {
    const ExitGroup* group;
    uint32_t symbol, dotted;
  };
  // A local walk as compute_local_walk builds it; the table keeps it packed (below).
  struct LocalWalk {
    std::vector<std::shared_ptr<const WalkResult>> parts;  // the item walks' tokens, distinct
    std::vector<Continuation> below;
  };
  // A walk result as fills collect it: its address and its id, without a reference count
  // (every result a local walk or descent names is owned by `walk_contents`, and every walk
  // table is cleared with it, at which `walk_generation` changes).
  struct PartRef {
    const WalkResult* result;
    uint64_t id;
  };
  // Local walks and descents as the fill path reads them: one block in `walk_arena`, the
  // header and then the arrays, so a lookup is the table's slot and one block (a shared
  // LocalWalk was the slot, the object, its parts array and each part's reference count).
  struct PackedLocalWalk {
    uint32_t num_parts, num_below;
    const PartRef* parts() const { return reinterpret_cast<const PartRef*>(this + 1); }
    const Continuation* below() const {
      return reinterpret_cast<const Continuation*>(parts() + num_parts);
    }
    size_t bytes() const {
      return sizeof(*this) + num_parts * sizeof(PartRef) + num_below * sizeof(Continuation);
    }
  };
  struct PackedDescent {
    uint32_t num_parts, unused;
    const PartRef* parts() const { return reinterpret_cast<const PartRef*>(this + 1); }
  };
  static_assert(sizeof(PackedLocalWalk) == 8 && sizeof(PackedDescent) == 8 &&
                    sizeof(PartRef) == 16 && sizeof(Continuation) == 16,
                "packed walk blocks are arrays of 8-byte-aligned 16-byte entries");
  // Bump allocation of packed blocks in 64 KB chunks, freed together by clear_walks_locked.
  class WalkArena {
   public:
    void* allocate(size_t bytes) {
      const size_t words = (bytes + 7) / 8;
      if (used_ + words > capacity_) {
        capacity_ = std::max<size_t>(kChunkWords, words);
        chunks_.emplace_back(new uint64_t[capacity_]);
        used_ = 0;
      }
      void* block = chunks_.back().get() + used_;
      used_ += words;
      return block;
    }
    void clear() {
      chunks_.clear();
      used_ = capacity_ = 0;
    }
    template <typename Visit>
    void for_each_block(Visit&& visit) const {
      for (size_t i = 0; i < chunks_.size(); ++i) visit_chunk(i, visit);
    }
    size_t num_chunks() const { return chunks_.size(); }
    // Visit (address, bytes) of chunk `i` (< num_chunks()).
    template <typename Visit>
    void visit_chunk(size_t i, Visit&& visit) const {
      visit(chunks_[i].get(), 8 * (i + 1 == chunks_.size() ? capacity_ : kChunkWords));
    }

   private:
    static constexpr size_t kChunkWords = 8192;
    std::vector<std::unique_ptr<uint64_t[]>> chunks_;
    size_t used_ = 0, capacity_ = 0;
  };
  WalkArena walk_arena;          // guarded by walk_mutex
  uint64_t walk_generation = 0;  // guarded by walk_mutex; changes whenever the walks are cleared
  // A local walk as a fill reads it: its packed block, or a copy of the part and continuation
  // its table slot holds (see LocalWalkTable).
  struct LocalWalkView {
    const PackedLocalWalk* block = nullptr;
    uint32_t num_parts = 0, num_below = 0;
    PartRef part{nullptr, 0};
    Continuation below_one{nullptr, 0, 0};
    const PartRef* parts() const { return block ? block->parts() : &part; }
    const Continuation* below() const { return block ? block->below() : &below_one; }
  };
  // Local walks by key (see compute_local_walk in matcher.cpp). Most of those a descent visits
  // have at most one part and one continuation (C-like decode: 75%, JSON: 96%), and those are
  // kept in their slot, one 64-byte line, so that a lookup is one cold miss instead of the slot
  // and then the block it points to. Open addressing without a filter: a descent's lookups
  // almost always hit. Slots move when the table grows, so readers copy what they read (a
  // view) under walk_mutex.
  class LocalWalkTable {
   public:
    using Key = std::pair<uint64_t, uint64_t>;
    bool find(const Key& key, LocalWalkView* view) const {
      if (slots_.empty()) return false;
      const size_t mask = slots_.size() - 1;
      for (size_t i = key.first & mask;; i = (i + 1) & mask) {
        const Slot& slot = slots_[i];
        if (slot.num_parts == kUnused) return false;
        if (slot.key == key) {
          view->block = slot.block;
          view->num_parts = slot.block ? slot.block->num_parts : slot.num_parts;
          view->num_below = slot.block ? slot.block->num_below : slot.num_below;
          view->part = slot.part;
          view->below_one = slot.below;
          return true;
        }
      }
    }
    // Ask for the line `find(key)` reads first. Not the next one too: the table keeps
    // headroom (C-like: 27,090 walks in 131,072 slots), so a lookup rarely goes on to it, and
    // since the prewarm reads the stored slots back into the last-level cache (see
    // read_back_fill_tables) that line is usually a miss to DRAM. Measured neutral (C-like slow
    // positions 0.95x over nine rounds, then 1.00x over six; docs/design/runtime.md, "Session
    // 54").
    void prefetch(const Key& key) const {
      if (slots_.empty()) return;
      const size_t mask = slots_.size() - 1;
      __builtin_prefetch(&slots_[key.first & mask]);
    }
    bool contains(const Key& key) const {
      LocalWalkView unused;
      return find(key, &unused);
    }
    // Whether a walk of these sizes is kept in its slot (no block).
    static bool fits_in_slot(size_t num_parts, size_t num_below) {
      return num_parts <= 1 && num_below <= 1;
    }
    // Store under `key` (absent): `block` when it is not null, else the one part and
    // continuation given (either count may be 0).
    void emplace(const Key& key, const PackedLocalWalk* block, uint32_t num_parts,
                 const PartRef& part, uint32_t num_below, const Continuation& below) {
      if (2 * (size_ + 1) > slots_.size()) rehash(slots_.empty() ? 16 : 2 * slots_.size());
      Slot& slot = free_slot(key);
      slot.key = key;
      slot.block = block;
      slot.num_parts = block ? 0 : num_parts;
      slot.num_below = block ? 0 : num_below;
      slot.part = block || num_parts == 0 ? PartRef{nullptr, 0} : part;
      slot.below = block || num_below == 0 ? Continuation{nullptr, 0, 0} : below;
      used_.push_back(static_cast<uint32_t>(&slot - slots_.data()));
      ++size_;
    }
    void reserve(size_t entries) {
      size_t capacity = 16;
      while (capacity < 2 * entries) capacity *= 2;
      if (capacity > slots_.size()) rehash(capacity);
    }
    void clear() {
      for (Slot& slot : slots_) slot = Slot{};
      used_.clear();
      size_ = 0;
    }
    size_t size() const { return size_; }
    template <typename Visit>
    void for_each_block(Visit&& visit) const {
      visit(slots_.data(), slots_.size() * sizeof(Slot));
      for (const Slot& slot : slots_) {
        if (slot.num_parts != kUnused && slot.block) visit(slot.block, sizeof(*slot.block));
      }
    }
    // Visit (address, bytes) of the slots of the walks stored [begin, end) in the order of
    // `used_` (clamped to size()), and of the blocks they point to; the empty slots, most of
    // a table with headroom, are not read.
    template <typename Visit>
    void visit_stored(size_t begin, size_t end, Visit&& visit) const {
      end = std::min(end, used_.size());
      for (size_t i = begin; i < end; ++i) {
        const Slot& slot = slots_[used_[i]];
        visit(&slot, sizeof(Slot));
        if (slot.block) visit(slot.block, slot.block->bytes());
      }
    }

   private:
    static constexpr uint32_t kUnused = 0xffffffffu;
    struct alignas(64) Slot {
      Key key{0, 0};
      uint32_t num_parts = kUnused, num_below = 0;
      PartRef part{nullptr, 0};
      Continuation below{nullptr, 0, 0};
      const PackedLocalWalk* block = nullptr;
    };
    static_assert(sizeof(Slot) == 64, "a local walk's slot is one cache line");
    Slot& free_slot(const Key& key) {
      const size_t mask = slots_.size() - 1;
      size_t i = key.first & mask;
      while (slots_[i].num_parts != kUnused) i = (i + 1) & mask;
      return slots_[i];
    }
    void rehash(size_t capacity) {
      std::vector<Slot> old(capacity);
      old.swap(slots_);
      used_.clear();
      for (const Slot& slot : old) {
        if (slot.num_parts == kUnused) continue;
        Slot& moved = free_slot(slot.key);
        moved = slot;
        used_.push_back(static_cast<uint32_t>(&moved - slots_.data()));
      }
    }
    std::vector<Slot> slots_;
    // The indices of the slots in use (see visit_stored).
    std::vector<uint32_t> used_;
    size_t size_ = 0;
  };
  LocalWalkTable local_walks;
  // The kernels the prewarm's matchers built (see record_kernel in matcher.cpp): per kernel
  // signature, one set with that kernel, copied into a chart of its own (set 1; set 0 empty,
  // the origin of its kernel items), so that after its exploration the prewarm can compute
  // the local walks of every completion it knows at every kernel it met (prewarm_local_walks)
  // instead of only the pairs its fills happened to meet. Guarded by kernel_mutex.
  struct KernelSnapshot {
    std::pair<uint64_t, uint64_t> signature;
    Chart chart;
  };
  std::mutex kernel_mutex;
  std::deque<KernelSnapshot> kernel_snapshots;  // appended only: references stay valid
  KeyMap<uint32_t> kernel_index;                // signature -> position in kernel_snapshots
  static constexpr size_t kMaxKernelSnapshots = 4096;
  // What a completion does among the items predicted from one nonterminal (see
  // compute_closure_walk in matcher.cpp): by (group, symbol, nonterminal Y), the tokens of the
  // items of Y's prediction closure it reaches, and every (group, symbol) completed on the way
  // (the start included), which kernel items waiting for them take up. A set's predicted items
  // are the union of such closures, and a completion's way up never leaves one, so a local
  // walk at a new kernel is one lookup per kernel nonterminal instead of one per item.
  struct ClosureWalk {
    std::vector<std::shared_ptr<const WalkResult>> parts;
    std::vector<std::pair<const ExitGroup*, uint32_t>> reached;
  };
  KeyMap<std::shared_ptr<const ClosureWalk>> closure_walks;
  // A thread's whole descent by items (its parts), by (top group, lexeme, d, H_d of its
  // origin), where d covers every set the descent read (ExitGroup::descent_depths has bit d
  // set once one from that group was stored at depth d).
  KeyMap<const PackedDescent*> descents;
  // The same descents by the thread's part of the future key (its lexeme, class of DFA states
  // and the future language after its lexeme at its origin), of which a descent's tokens are a
  // function: a neighbourhood new to `descents` often has a future seen before.
  KeyMap<const PackedDescent*> future_descents;
  std::atomic<size_t> hits_future_descents{0};
  // Whether a decode looks descents up by their thread's future (and stores them so). Each
  // probe is a miss in a table of megabytes, and a found descent is read part by part, where a
  // walk of the same descent is a few local-walk lookups the prewarm has made: where few probes
  // find one, the probes cost more than the walks they save (C-like: 8 found of ~300 probed
  // in a decode; its slow positions 0.94x without the probes, docs/design/runtime.md,
  // "Session 53"). Judged on a decode's first kJudgeFutureDescents probes of a table that
  // holds some: kept where at least one in kFutureDescentHitShare found a descent. Early, so
  // that the slow first visits of a decode do not pay for the judgement (C-like: 64 probes
  // were reached only in its third text; with 16 its second text's slow positions 0.93x).
  // GRAMKILN_FUTURE_DESCENTS=on|off, read at load, decides instead.
  enum class FutureDescents { kAuto, kOn, kOff };
  FutureDescents future_descents_mode = FutureDescents::kAuto;
  static constexpr size_t kJudgeFutureDescents = 16, kFutureDescentHitShare = 8;
  std::atomic<size_t> future_descent_probes{0};  // a decode's, until judged
  std::atomic<bool> future_descents_idle{false};
  // Whether a decode probes (and stores) descents by future now.
  bool decode_uses_future_descents() const {
    return future_descents_mode == FutureDescents::kOn ||
           (future_descents_mode == FutureDescents::kAuto &&
            !future_descents_idle.load(std::memory_order_relaxed));
  }
  // Count one fill's `probes` towards the judgement, and judge once there are enough.
  void judge_future_descents(size_t probes) {
    if (future_descents_mode != FutureDescents::kAuto || probes == 0) return;
    const size_t before = future_descent_probes.fetch_add(probes, std::memory_order_relaxed);
    if (before >= kJudgeFutureDescents || before + probes < kJudgeFutureDescents) return;
    const size_t hits = hits_future_descents.load(std::memory_order_relaxed);
    if (hits * kFutureDescentHitShare < before + probes) {
      future_descents_idle.store(true, std::memory_order_relaxed);
    }
  }
  // Admission of a decode's walked descents (the prewarm stores every one): a descent is
  // stored the second time a decode walks it, so that a first visit, which most of a decode's
  // walked descents are, does not pay for a store nobody reads. C-like: 228 descents walked
  // and stored in a decode, 13 found again, 7 of them ones the prewarm stored; without the
  // decode's stores its slow positions took 0.88x (docs/design/runtime.md, "Session 53").
  // One bit a key hash (a collision admits, as every descent was before); the bits are
  // cleared once a quarter of them are set, so a long-running process goes on admitting what
  // recurs. GRAMKILN_DESCENT_ADMISSION=first (read at load) admits every walked descent.
  class DescentDoorkeeper {
   public:
    // Whether the descent under `key` is to be stored: walked before since the last clear, or
    // every one where `admit_first`. Records the walk.
    bool admit(const std::pair<uint64_t, uint64_t>& key) {
      if (admit_first) return true;
      const uint64_t bit = ((key.first ^ key.second) * 0x9e3779b97f4a7c15ull) >> (64 - kLogBits);
      uint64_t& word = bits_[bit / 64];
      const uint64_t mask = uint64_t{1} << (bit % 64);
      if (word & mask) return true;
      word |= mask;
      if (++set_ == kBits / 4) {
        bits_.fill(0);
        set_ = 0;
      }
      return false;
    }
    bool admit_first = false;

   private:
    static constexpr unsigned kLogBits = 16;
    static constexpr size_t kBits = size_t{1} << kLogBits;
    std::array<uint64_t, kBits / 64> bits_{};
    size_t set_ = 0;
  };
  DescentDoorkeeper descent_doorkeeper;  // guarded by walk_mutex
  // Descents walked by computed fills (no table held them), and the nodes they walked.
  std::atomic<size_t> descents_walked{0};
  std::atomic<size_t> descent_nodes_walked{0};
  // Top-level exit walks by (thread state, future language after its lexeme at its origin),
  // where future keys are in use (see walk_level); cleared with `walks`.
  KeyMap<std::shared_ptr<const WalkResult>> future_walks;
  std::atomic<size_t> hits_future_walks{0};
  std::atomic<size_t> fills_by_items{0};  // computed fills that walked by items
  std::unordered_map<uint64_t, std::vector<std::shared_ptr<const WalkResult>>> walk_contents;
  size_t walk_bytes = 0;
  size_t walk_clears = 0;     // times the walk tables were cleared at their budget
  uint64_t next_walk_id = 1;  // guarded by walk_mutex
  std::mutex node_mutex;      // guards `node_walks`
  std::unordered_map<uint64_t, std::unique_ptr<NodeWalk>> node_walks;  // by NodeWalk::key
  std::mutex follow_mutex;                                             // guards `follows`
  std::map<std::vector<uint32_t>, std::unique_ptr<FollowTable>> follows;
  // Expires with this cache: threads' copies of its entries (LocalMasks) watch it, so that a
  // freed runtime's masks, and through them its mask pool, are not kept alive by them. Last,
  // so that the members the fill path reads keep their places.
  const std::shared_ptr<const int> liveness = std::make_shared<const int>(0);
};

// Ids of the static parts of future languages, for keys that merge parser configurations
// whose futures are equal although their charts differ (see future.cpp). Built lazily and
// shared by every matcher of a runtime; `mode` is fixed at construction, `exhausted` and
// `state` are atomics, and every other member is guarded by `mutex`.
struct FutureLanguages {
  std::mutex mutex;
  bool ready = false;
  // Per symbol, the dotted ids just after its left-corner occurrences: (P -> v A . m) for every
  // production P -> v A m with v nullable (where completing A at a set advances a prediction).
  std::vector<uint32_t> corner_offsets, corner_after;
  // Per nonterminal X (on first use), the nonterminals predicted with it (X included), as a
  // sorted list: what the closure of a set waiting for X contains.
  std::unordered_map<uint32_t, std::vector<uint32_t>> predicted;
  // Per nonterminal X (empty until first use), a bitset over symbols A: whether A completing
  // can lead to X completing (L("A just completed", X) is not empty); see starts_reaching.
  std::vector<std::vector<uint64_t>> reaching;
  // (start node << 32 | X) -> language id (0: empty). Start nodes are dotted ids, or
  // dotted count + symbol for "symbol just completed".
  IdMap ids;
  // Concatenations and unions of two ids, by (a << 32 | b).
  IdMap concatenations, unions;
  // GRAMKILN_FUTURE_KEYS, read at load: "on" (always use future keys), "off" (never), else
  // the prewarm decides (see future_keys_pay in matcher.cpp).
  enum class Mode { kAuto, kOn, kOff };
  Mode mode = Mode::kAuto;
  // Pending items sharing their dotted id in one Earley set past which a chart merges items by
  // their futures (see merge_equal_futures in earley.cpp); GRAMKILN_MERGE_AFTER overrides it
  // (tests: 1, from the first repeat).
  uint32_t merge_after = 16;
  // New languages one merge, or the anchors of one set of a merging chart, may canonicalise.
  // More than a commit's anchors may (kLanguagesPerStep in future.cpp): this is spent only
  // where ambiguity multiplies items, and each language is canonicalised once per runtime. An
  // anchor built short of it is not canonical, nor is any future built on it later, so equal
  // futures stop comparing equal and sets grow again (`s: s s | "a"` kept one pending item
  // per earlier position with 1).
  static constexpr uint32_t kMergeLanguages = 64;
  FutureLanguages() {
    futures.reserve(1024);
    recipes.reserve(1024);
    if (const char* env = std::getenv("GRAMKILN_FUTURE_KEYS")) {
      const std::string value(env);
      if (value == "on") mode = Mode::kOn;
      if (value == "off") mode = Mode::kOff;
    }
    unsigned long long after = 0;
    if (env_number("GRAMKILN_MERGE_AFTER", &after)) {
      merge_after = static_cast<uint32_t>(std::min<unsigned long long>(after, UINT32_MAX));
    }
    state.store(mode == Mode::kOn    ? kOn
                : mode == Mode::kOff ? kOff
                                     : kUndecided,
                std::memory_order_relaxed);
  }
  // future_after results by a 128-bit hash of (start, anchor-list hash of the set), in an
  // open-addressing table reserved up front (a node-based map's rehash was ~90 k instructions
  // inside one fill); cleared past kMaxMemo.
  struct MemoValue {
    uint32_t chain = 0;
    uint64_t lo = 0, hi = 0;
  };
  KeyMap<MemoValue> futures;
  // How future_after combines the anchors of a set, by (start, the set's shape) (see
  // Chart::anchors_shape): per pair of the result, its chain and the anchor (an offset in the
  // set's list, kWrapped in future.cpp for the leaf that anchor becomes alone) its leaf comes
  // from; entries [begin, begin + count) of recipe_entries. Cleared past kMaxMemo.
  struct RecipeEntry {
    uint32_t chain;
    uint32_t anchor;
  };
  struct Recipe {
    uint32_t begin = 0, count = 0;
  };
  KeyMap<Recipe> recipes;
  std::vector<RecipeEntry> recipe_entries;
  std::atomic<size_t> recipe_hits{0};
  static constexpr size_t kMaxMemo = size_t{1} << 16;  // ~6 MB of slots at most
  // Whole future mask keys by the configuration's anchors (see
  // Matcher::anchored_configuration_key): one probe where future_mask_key would probe
  // `futures` once per thread. Only canonical keys are kept; cleared past kMaxMemo.
  KeyMap<std::pair<uint64_t, uint64_t>> keys_by_anchors;
  std::atomic<size_t> keys_by_anchors_hits{0};
  // Canonical forms kept at most (each ~100 bytes); past it no new language is combined.
  static constexpr size_t kMaxLanguages = size_t{1} << 16;
  // Canonical minimal automata -> id, and back (forms[id - 1]); ids from kUniqueBase up stand
  // for one language each whose automaton was too large to canonicalise (exact: they only
  // never merge with another id).
  std::map<std::vector<uint32_t>, uint32_t> canonical;
  std::vector<const std::vector<uint32_t>*> forms;
  uint32_t next_unique = 0;
  // Provisional ids of (start, X) languages not yet canonicalised (see language_id).
  IdMap provisional;
  // Reserve, in each memo, room for `entries(size)` entries (see leave_table_headroom).
  template <typename Entries>
  void reserve_headroom(Entries entries) {
    futures.reserve(entries(futures.size()));
    recipes.reserve(entries(recipes.size()));
    keys_by_anchors.reserve(entries(keys_by_anchors.size()));
    ids.reserve(entries(ids.size()));
    concatenations.reserve(entries(concatenations.size()));
    unions.reserve(entries(unions.size()));
    provisional.reserve(entries(provisional.size()));
  }
  // Set (for good) if unique ids ever run short: future keys are then no longer used, so an
  // id can never be reused for another language.
  std::atomic<bool> exhausted{false};
  // Whether matchers use future keys. Undecided until the prewarm has measured them (only its
  // own matchers use them meanwhile); on where they pay, off otherwise (see future_keys_pay in
  // matcher.cpp). Off is for good.
  static constexpr int kUndecided = 0, kOn = 1, kOff = 2;
  std::atomic<int> state{kUndecided};
  bool off() const { return state.load(std::memory_order_relaxed) == kOff; }
  // Whether future keys stand for the futures of threads that start at the last set, and of
  // the token sets it expects, by that set's anchors (Matcher::future_mask_key). Only once the
  // key is on: the prewarm judges it (future_keys_pay) with every future computed, since its
  // early configurations share futures across stacks far more than a decode's new ones do
  // (C-like: the judgement fell from 56% to a few percent with anchors, while a decode's
  // computed fills stayed at 44-45; docs/design/runtime.md, "Session 45").
  bool frontier_by_anchors() const { return state.load(std::memory_order_relaxed) == kOn; }
  // The chain id of a future that stands for one by anchors: no language has it (canonical
  // ids are below kUniqueBase, unique ones below kUniqueBase + 2^30).
  static constexpr uint32_t kAnchorsChain = 0xfffffff0u;
  // Settle an undecided state (or switch on -> off); never back on.
  void decide(bool pays) {
    int expected = kUndecided;
    if (!state.compare_exchange_strong(expected, pays ? kOn : kOff) && !pays) {
      state.store(kOff, std::memory_order_relaxed);
    }
  }
  // The mask-table counters (GroupCache) when the prewarm ended: future_keys_pay measures the
  // share of fills the key answers since then.
  std::atomic<size_t> base_hits_future{0}, base_hits_depth{0}, base_fills_computed{0};
  void set_baseline(const GroupCache& cache) {
    base_hits_future.store(cache.hits_future.load(std::memory_order_relaxed),
                           std::memory_order_relaxed);
    base_hits_depth.store(cache.hits_depth.load(std::memory_order_relaxed),
                          std::memory_order_relaxed);
    base_fills_computed.store(cache.fills_computed.load(std::memory_order_relaxed),
                              std::memory_order_relaxed);
  }
  uint32_t epsilon_id = 0;  // the language {""}
  static constexpr uint32_t kUniqueBase = 0x80000000u;
};

// A read-only array that several runtimes may share; it reads like a const std::vector.
template <typename T>
class SharedTable {
 public:
  SharedTable() = default;
  // `owner` keeps `values` alive (values usually lives inside it).
  SharedTable(std::shared_ptr<const void> owner, const std::vector<T>& values)
      : owner_(std::move(owner)), data_(values.data()), size_(values.size()) {}
  const T& operator[](size_t i) const { return data_[i]; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  std::shared_ptr<const void> owner_;
  const T* data_ = nullptr;
  size_t size_ = 0;
};

// The vocabulary-dependent tables decoded from a blob's stored trie (see load_runtime), kept
// with the exact bytes they were decoded from so that a later blob storing the same bytes
// reuses them instead of decoding and validating again.
struct TrieTables {
  std::string stored;  // vocab_size, num_tokens, text bits and stored trie arrays, verbatim
  std::vector<uint8_t> token_bytes, trie_byte;
  std::vector<uint32_t> token_begin, token_length, trie_end, trie_tok_offsets, trie_tokens;
};

// Everything a matcher reads. Built once by load_runtime and never modified afterwards, so any
// number of matchers and threads may share it.
class Runtime {
 public:
  // Stored in the blob.
  uint32_t vocab_size = 0, num_tokens = 0, num_nonterminals = 0, num_lexemes = 0;
  uint32_t num_tokensets = 0, start = 0, num_states = 0, words = 0;
  std::vector<uint32_t> prod_lhs, prod_offsets, prod_rhs, lexeme_start;
  // DFA transitions by byte class (bytes every lexeme's DFA treats alike): state s, byte b ->
  // dfa_table[s * dfa_classes + dfa_byte_class[b]], -1 for none. Dense rows of 256 per state
  // were 100 MB for a `maxLength: 4096` string (~100,000 states) and most of its load time.
  std::vector<int32_t> dfa_table;
  uint32_t dfa_classes = 0;
  uint8_t dfa_byte_class[256] = {};
  int32_t next_state(int32_t state, uint8_t byte) const {
    return dfa_table[static_cast<size_t>(state) * dfa_classes + dfa_byte_class[byte]];
  }
  // State s's transitions, to be indexed by dfa_byte_class[byte].
  const int32_t* dfa_row(int32_t state) const {
    return &dfa_table[static_cast<size_t>(state) * dfa_classes];
  }
  std::vector<uint8_t> dfa_accepting;
  std::vector<uint32_t> dfa_lexeme;
  std::vector<uint32_t> tokenset_bits, end_bits, text_bits;
  // End tokens that a mask could also take up as something else: text tokens (an end id the
  // vocabulary does not mark special, or compile(end_tokens=[a text token])) and ids of a
  // token set (an artifact not written by this compiler, which leaves end ids out of them).
  // End tokens are never text nor grammar tokens: such a token is allowed, and accepted,
  // exactly where the input is accepted, as an end. Usually empty.
  std::vector<uint32_t> shadowed_end_ids;
  // The token trie and token bytes, derived at load from the stored trie. They depend only on
  // the vocabulary, so every runtime loaded for one vocabulary shares one copy (TrieTables).
  SharedTable<uint8_t> token_bytes;  // text tokens only
  SharedTable<uint32_t> token_begin, token_length;
  SharedTable<uint8_t> trie_byte;
  SharedTable<uint32_t> trie_end, trie_tok_offsets, trie_tokens;
  std::shared_ptr<const TrieTables> trie_tables;  // owner of the tables above
  std::vector<uint32_t> inside_index, inside_bits;
  // The inside sets small enough to be cheaper as token lists than as bitsets (see
  // assign_inside_sets): set i's tokens are inside_ids[inside_id_offsets[i] ..
  // inside_id_offsets[i + 1]) when inside_sparse[i], else it is only in inside_bits.
  std::vector<uint8_t> inside_sparse;
  std::vector<uint32_t> inside_id_offsets, inside_ids;
  // Children of the trie nodes where a lexeme can end mid-token ("exits"), per class of DFA
  // states and byte: state s, byte b, k = exit_class[s] ->
  // exit_children[exit_child_offsets[k*256+b] .. [k*256+b+1]) (see exit_row).
  std::vector<uint32_t> exit_class, exit_child_offsets, exit_children;
  // Where state s's 257 exit offsets start in exit_child_offsets.
  size_t exit_row(int32_t state) const { return static_cast<size_t>(exit_class[state]) * 256; }
  // Per DFA state, 1 where some token can leave its lexeme there (its exit row is not empty, so
  // its top group has children): a dense byte a state, read where a computed fill would
  // otherwise touch the group itself, a cold line per lexer thread, only to learn that.
  std::vector<uint8_t> state_has_exits;
  // Per DFA state, what mask keys hash in its place: a mix of its lexeme and its class of
  // states that agree on every byte string up to the longest token (the blob's state classes,
  // which share inside sets and exit lists). A thread's share of the mask is a function of its
  // lexeme, its class and its origin, so the positions of a long bounded string (`maxLength:
  // 500`: one DFA state per character) share their keys until the bound is a token away.
  std::vector<uint64_t> state_key;
  // Rule limits (see GrammarSpec and runtime/rule_limits.py). Per lexeme, empty when the
  // grammar has none; per state, empty when no lexeme has a char budget.
  std::vector<uint32_t> lexeme_max_tokens, lexeme_max_chars;
  std::vector<double> lexeme_temperature;
  uint32_t char_window = 0;
  std::vector<int32_t> state_budget_switch, state_near_remaining;
  bool has_token_budgets = false, has_char_budgets = false, has_temperatures = false;
  // Per state (empty without budgets): a thread in it counts from its own origin, so it is
  // never merged with a thread of another origin (see merge_equivalent_threads).
  std::vector<uint8_t> state_counts_from_origin;
  // Captures (see GrammarSpec): the names, the captured symbols' entries, and per symbol
  // the index of its entry or -1 (empty without captures).
  struct CapturedSymbol {
    uint32_t rule_name, marker_name, body_lexeme, marker_lexeme;
    bool stop;
  };
  std::vector<std::string> capture_names;
  std::vector<CapturedSymbol> captured_symbols;
  uint32_t capture_ignore_lexeme = 0xFFFFFFFFu;  // kNoCaptureName: none
  std::vector<int32_t> symbol_capture;
  // Per state (empty: none): see GrammarSpec::state_body_end.
  std::vector<uint8_t> state_body_end;
  bool ends_body(int32_t state) const {
    return !state_body_end.empty() && state_body_end[state] != 0;
  }
  uint32_t max_tokens_of(int32_t state) const {
    return has_token_budgets ? lexeme_max_tokens[dfa_lexeme[state]] : 0;
  }

  // Derived at load time (cheap, linear in the grammar size).
  std::vector<uint32_t> dotted_next;                // next symbol after the dot, or kComplete
  std::vector<uint32_t> dotted_prod;                // production of each dotted id
  std::vector<uint32_t> prod_dotted;                // first dotted id of each production
  std::vector<uint32_t> nt_prod_offsets, nt_prods;  // productions by left-hand side
  std::vector<uint8_t> symbol_nullable;             // nonterminals and lexemes
  std::vector<uint8_t> dotted_accepts;              // completed production of the start symbol
  std::vector<uint32_t> lexeme_first_offsets;       // bytes that can start each lexeme
  std::vector<uint8_t> lexeme_first_bytes;
  // Prediction closures (see close_set in earley.cpp): predicting nonterminal X adds the
  // dotted items closure_items[closure_offsets[X] .. [X + 1]) with the set itself as origin
  // (productions of every nonterminal predicted on the way, nullable symbols stepped over),
  // and predicts the nonterminals closure_nts[closure_nt_offsets[X] .. [X + 1]). Empty when
  // the closures would pass their size budget: sets are then closed item by item.
  std::vector<uint32_t> closure_offsets, closure_items, closure_nt_offsets, closure_nts;
  // Per nonterminal X, the symbols its closure's items wait for, sorted: closure_waits[
  // closure_wait_offsets[X] .. [X + 1]) (empty without closures).
  std::vector<uint32_t> closure_wait_offsets, closure_waits;

  // Lazily filled memo (see ExitGroup); not part of the blob, safe to share across threads.
  std::unique_ptr<GroupCache> groups = std::make_unique<GroupCache>();
  std::unique_ptr<FutureLanguages> futures = std::make_unique<FutureLanguages>();

  uint32_t lexeme_base() const { return num_nonterminals; }
  uint32_t tokenset_base() const { return num_nonterminals + num_lexemes; }
  uint32_t num_symbols() const { return num_nonterminals + num_lexemes + num_tokensets; }
};

// Open-addressing set of 64-bit keys, cleared in O(1) by bumping a generation counter, so that
// building an Earley set allocates nothing in the steady state.
class KeySet {
 public:
  void clear();
  bool insert(uint64_t key);  // true if newly inserted
  // Per-set marks by index (dotted items and nonterminals predicted with the set itself as
  // origin), cleared by the same generation bump. reserve_marks before marking.
  void reserve_marks(size_t dotted, size_t nonterminals);
  bool mark_dotted(uint32_t dotted) { return mark(dotted_marks_, dotted); }
  bool mark_nonterminal(uint32_t nt) { return mark(nonterminal_marks_, nt); }

 private:
  void grow();
  bool mark(std::vector<uint32_t>& marks, uint32_t index) {  // true if newly marked
    if (marks[index] == generation_) return false;
    marks[index] = generation_;
    return true;
  }
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> stamps_;
  std::vector<uint32_t> dotted_marks_, nonterminal_marks_;
  uint32_t generation_ = 1;
  uint32_t size_ = 0;
};

// A view of the chart in which sets below base_sets live in `base` and the rest in `top`. Mask
// computation builds hypothetical sets on a scratch `top` without touching the matcher.
struct ChartView {
  const Chart* base;
  Chart* top;
  uint32_t base_sets;
  uint32_t num_sets() const { return base_sets + top->num_sets(); }
  const Chart& chart_of(uint32_t set, uint32_t* local) const {
    if (set < base_sets) {
      *local = set;
      return *base;
    }
    *local = set - base_sets;
    return *top;
  }
};

// Per-thread reusable buffers.
struct Scratch {
  // Per thread of the configuration whose future mask key was computed last on this OS
  // thread (that key in thread_futures_key): its state and the future after its lexeme, hashed
  // (see Matcher::future_mask_key); the keys of its top-level exit walks.
  std::vector<std::pair<uint64_t, uint64_t>> thread_futures;
  std::pair<uint64_t, uint64_t> thread_futures_key{0, 0};
  Chart overlay;
  KeySet seen;
  std::vector<uint32_t> lexemes;
  std::vector<std::pair<uint32_t, uint32_t>> scans;
  // Per mask fill: (set << 32 | lexeme) -> the hypothetical set after scanning that lexeme,
  // and the follow table of each overlay set. Many tokens cross the same lexeme boundary, so
  // each hypothetical set is built once per fill.
  std::unordered_map<uint64_t, uint32_t> next_set;
  std::vector<uint32_t> next_lexemes;  // the lexemes the overlay set being built expects
  std::vector<const FollowTable*> overlay_follow;  // per overlay set
  std::vector<uint32_t> overlay_depths_done;       // per overlay set; see overlay_depth_hash
  // Per overlay set, the sets (main chart or overlay) whose pending items were read to build
  // it, sorted and distinct: overlay set i read overlay_read_sets[overlay_read_offsets[i] ..
  // overlay_read_offsets[i + 1]). Flat, so that a warm fill allocates nothing for them.
  std::vector<uint32_t> overlay_read_offsets, overlay_read_sets;
  std::vector<uint32_t> reads;  // build_earley_set's record for one build
  // Item walks: the one-item chart they start from.
  Chart item_chart;
  // What the mask ORs, valid while the walk tables' generation is item_parts_generation.
  std::vector<GroupCache::PartRef> item_parts;
  uint64_t item_parts_generation = 0;
  bool item_walk_unkept = false;  // a group or level built for one use was met
  // One frame per nesting level of exit walks (see walk_level in matcher.cpp); owned through
  // pointers so that growing the list never moves a frame in use.
  struct WalkFrame {
    std::vector<uint32_t> built;  // hypothetical sets this walk built or reused as its own
    std::vector<uint32_t> reads;  // sets those read
    bool deps_unknown = false;    // a nested hit whose dependencies were too wide to collect
    // The walk's tokens: a list (duplicates allowed) while short, a bitset once `dense`, so
    // that walks reaching few tokens never touch a whole mask.
    bool dense = false;
    std::vector<uint32_t> tokens;
    std::vector<uint32_t> bits;
  };
  std::vector<std::unique_ptr<WalkFrame>> frames;
  std::vector<uint32_t> walk_touched;                       // pre-existing sets one walk depends on
  std::vector<std::pair<uint32_t, uint32_t>> hop_frontier;  // (set, hops) during a BFS
  // Sets already reached by the current breadth-first search: visited[set] == visit_epoch
  // (a flat array instead of a hash set: the search runs on every walk-cache miss).
  std::vector<uint32_t> visited;
  uint32_t visit_epoch = 0;
  // Start a new search over `num_sets` sets with `root` marked.
  void begin_visit(uint32_t num_sets, uint32_t root) {
    if (visited.size() < num_sets) visited.resize(num_sets + num_sets / 2 + 16, 0);
    if (++visit_epoch == 0) {
      std::fill(visited.begin(), visited.end(), 0);
      visit_epoch = 1;
    }
    visited[root] = visit_epoch;
  }
  // Mark `set`; false when the current search had already reached it.
  bool visit(uint32_t set) {
    if (visited[set] == visit_epoch) return false;
    visited[set] = visit_epoch;
    return true;
  }
  std::vector<uint32_t> sorted_lexemes;
  std::vector<int32_t> thread_states;
  std::vector<uint32_t> dense_inside_sets;  // see assign_inside_sets
  // What the current computed fill ORed together (see GroupCache::composed_masks): ids of the
  // top-level walk results and the frontier's token sets; `composition_known` is false once a
  // walk's result had no id (computed and not stored).
  std::vector<uint64_t> composition;
  bool composition_known = true;
  // Once `composition` is sorted, deduplicated and final, its key without the end tokens (see
  // composition_key), so that the fill hashes it once however many tables it asks.
  bool composition_hashed = false;
  std::pair<uint64_t, uint64_t> composition_hash{0, 0};
  // The stored mask the current fill copied, found by its composition without end tokens
  // (see copy_composed_mask); released when the fill ends, so that no thread keeps a freed
  // runtime's mask alive.
  GroupCache::StoredMask composed_found;
  // Exit walks a computed fill may still compute (cache hits are free). Walks follow one
  // lexeme segmentation of the token bytes at a time, so a token that can be cut into lexemes
  // in exponentially many ways (a run of 80 '=' under `s: "=" s "=" | "==" s "==" |`) costs
  // exponentially many walks; past the budget the fill is recomputed by a trie search that
  // merges segmentations per byte (see Matcher::search_text_tokens).
  size_t walks_left = 0;
  bool walks_exhausted = false;
  // The current fill's deadline for exit walks (GroupCache::fill_walk_time), checked every 64;
  // set at the first check (walk_clock_started), walk_time after it.
  std::chrono::steady_clock::time_point walk_deadline{};
  std::chrono::milliseconds walk_time{0};
  bool walk_clock_started = false;
  uint32_t walks_since_clock = 0;
  // Trie nodes visited by walk_trie on this OS thread (building exit groups), ever, and the
  // count past which the current fill computes no more walks (GroupCache::kFillTrieNodes).
  size_t trie_nodes_walked = 0;
  size_t trie_nodes_limit = 0;
};

Scratch& thread_scratch();

// Call f(item) for every item of set `local` of `chart` waiting for `symbol`.
template <typename F>
inline void for_waiting(const Chart& chart, uint32_t local, uint32_t symbol, F&& f) {
  const uint64_t* lo = chart.waits.data() + chart.wait_begin[local];
  const uint64_t* hi = chart.waits.data() + chart.wait_begin[local + 1];
  const uint64_t key = static_cast<uint64_t>(symbol) << 32;
  for (const uint64_t* it = std::lower_bound(lo, hi, key); it != hi && (*it >> 32) == symbol;
       ++it) {
    f(chart.items[static_cast<uint32_t>(*it)]);
  }
}

// The Leo item of set `local` of `chart` for `symbol`, or null.
inline const LeoItem* find_leo(const Chart& chart, uint32_t local, uint32_t symbol) {
  const uint32_t begin = chart.leo_begin[local], end = chart.leo_begin[local + 1];
  if (begin == end) return nullptr;
  const LeoItem* lo = chart.leo.data() + begin;
  const LeoItem* hi = chart.leo.data() + end;
  const LeoItem* it = std::lower_bound(
      lo, hi, symbol, [](const LeoItem& entry, uint32_t value) { return entry.symbol < value; });
  return it != hi && it->symbol == symbol ? it : nullptr;
}

// Append to view.top a new Earley set: the items of the given (origin set, symbol) scans moved
// past the symbol, closed under prediction and completion. Returns its index.
// When `reads` is given, every set whose pending items the build consults is appended to it
// (possibly repeatedly): the sets the new one depends on. A build on the matcher's own chart
// (view.base null) fills the new set's hashes; a hypothetical one leaves its depth hashes to
// overlay_depth_hash and its whole-stack hash zero (never read).
uint32_t build_earley_set(const Runtime& rt, ChartView& view,
                          const std::vector<std::pair<uint32_t, uint32_t>>& scans, KeySet& seen,
                          std::vector<uint32_t>* reads = nullptr);
// H_depth of `set` (see Chart::depth_hash) as {lo, hi}. Sets of view.base have theirs already;
// hypothetical sets of view.top get each depth computed on first request (most walks need one
// or two of the eight), recorded as bit `depth` of done[local index].
const uint64_t* overlay_depth_hash(const Runtime& rt, const ChartView& view,
                                   std::vector<uint32_t>& done, uint32_t set, uint32_t depth);
// The initial set (prediction of the start symbol).
void build_initial_set(const Runtime& rt, Chart& chart, KeySet& seen);
// Distinct lexeme symbols (as lexeme indices) expected by a set, in first-seen order.
void expected_lexemes(const Runtime& rt, const ChartView& view, uint32_t set,
                      std::vector<uint32_t>& out);

// Future-language hashes (future.cpp). A future is `chain` (a language id) followed by the
// future hashed in `lo`, `hi` (the end of input, or a union of such pairs); see future.cpp.
struct Future {
  uint32_t chain;
  uint64_t lo, hi;
};
constexpr uint64_t kEndOfInputLo = 0x82efa98ec4e6c894ull, kEndOfInputHi = 0xa4093822299f31d0ull;
// What may follow when the production position or symbol `start` (a dotted id, or dotted count
// + symbol for that symbol completed) finishes at `set` of `chart`. Call with
// rt.futures->mutex held.
Future future_after(const Runtime& rt, FutureLanguages& fl, const Chart& chart, uint32_t start,
                    uint32_t set);
// Append the anchors of set `self` (items [begin, end) of `chart`, the matcher's own chart),
// or an empty list when the chart does not keep anchors (see anchors_complete).
void anchor_new_set(const Runtime& rt, Chart& chart, uint32_t self, size_t begin);
// Keep set `set` of a prewarm matcher's chart as the representative of its kernel, unless one
// is kept already (see GroupCache::kernel_snapshots; matcher.cpp).
void record_prewarm_kernel(const Runtime& rt, const Chart& chart, uint32_t set);
// Whether every set of `chart` so far has its anchors and new sets get them: while the
// chart's matcher uses future keys, or once item merging needed them (Chart::merge_anchored).
inline bool anchors_complete(const Runtime& rt, const Chart& chart) {
  return chart.merge_anchored || (chart.anchored && !rt.futures->off());
}
// Compute the anchors of sets [0, sets) of `chart` anew (the sets from `sets` on are dropped
// from the anchor lists): for a chart that starts keeping anchors mid-text.
void anchor_earlier_sets(const Runtime& rt, Chart& chart, uint32_t sets);
// How many new languages future computations on this thread may still canonicalise (set for a
// scope by FutureBudget; see kLanguagesPerStep in future.cpp); unlimited while `prewarming` is
// set (the prewarm thread).
struct FutureWork {
  static thread_local bool prewarming;
  static thread_local uint32_t left;
  static thread_local bool short_of_budget;  // some language was left uncombined
};
class FutureBudget {
 public:
  explicit FutureBudget(uint32_t languages) : saved_(FutureWork::left) {
    FutureWork::left = FutureWork::prewarming ? 0xffffffffu : languages;
  }
  ~FutureBudget() { FutureWork::left = saved_; }

 private:
  uint32_t saved_;
};

// splitmix64 finaliser: a cheap, well-mixing 64-bit hash step.
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

inline bool test_bit(const uint32_t* words, uint32_t index) {
  return (words[index >> 5] >> (index & 31)) & 1u;
}
inline void set_bit(uint32_t* words, uint32_t index) { words[index >> 5] |= 1u << (index & 31); }

}  // namespace gramkiln
