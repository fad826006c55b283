// Earley sets over lexeme and token-set symbols, with the Aycock-Horspool treatment of nullable
// symbols (a nullable symbol is stepped over at prediction time, so completions never need to
// revisit the set being built).
#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime_internal.hpp"

namespace gramkiln {

void KeySet::clear() {
  if (++generation_ == 0) {  // wrapped: stale stamps could collide, so wipe them once
    std::fill(stamps_.begin(), stamps_.end(), 0);
    std::fill(dotted_marks_.begin(), dotted_marks_.end(), 0);
    std::fill(nonterminal_marks_.begin(), nonterminal_marks_.end(), 0);
    generation_ = 1;
  }
  size_ = 0;
}

void KeySet::reserve_marks(size_t dotted, size_t nonterminals) {
  // Scratch is per thread and shared by every runtime, so it grows to the largest grammar.
  if (dotted_marks_.size() < dotted) dotted_marks_.resize(dotted, 0);
  if (nonterminal_marks_.size() < nonterminals) nonterminal_marks_.resize(nonterminals, 0);
}

void KeySet::grow() {
  std::vector<uint64_t> old_keys;
  std::vector<uint32_t> old_stamps;
  old_keys.swap(keys_);
  old_stamps.swap(stamps_);
  const size_t capacity = old_keys.empty() ? 256 : old_keys.size() * 2;
  keys_.assign(capacity, 0);
  stamps_.assign(capacity, 0);
  const uint32_t live = generation_;
  size_ = 0;
  for (size_t i = 0; i < old_keys.size(); ++i) {
    if (old_stamps[i] == live) insert(old_keys[i]);
  }
}

bool KeySet::insert(uint64_t key) {
  if ((size_ + 1) * 2 > keys_.size()) grow();
  const size_t mask = keys_.size() - 1;
  size_t slot = static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
  while (stamps_[slot] == generation_) {
    if (keys_[slot] == key) return false;
    slot = (slot + 1) & mask;
  }
  stamps_[slot] = generation_;
  keys_[slot] = key;
  ++size_;
  return true;
}

namespace {

// Whether an item of set `self` enters its structural hashes (the whole-stack one and the depth
// hashes): the kernel (items from earlier sets) determines the predictions, whose origin is the
// set itself, so those are left out (in C-like sets they are most of the items). The initial
// set has no kernel: all of it counts.
inline bool in_kernel(const Item& item, uint32_t self) { return item.origin != self || self == 0; }

// Order-independent structural hash of the set at chart.set_begin.back() .. items.size(), over
// its kernel (see in_kernel). Completed items are left out (they have done all their work when the
// set was closed) unless they make the input accepted, so sets that differ only in finished history
// hash alike.
void hash_new_set(const Runtime& rt, const ChartView& view, Chart& chart, uint32_t self,
                  size_t begin) {
  uint64_t lo = 0x243f6a8885a308d3ull, hi = 0x13198a2e03707344ull;
  for (size_t i = begin; i < chart.items.size(); ++i) {
    const Item item = chart.items[i];
    if (rt.dotted_next[item.dotted] == kComplete &&
        !(item.origin == 0 && rt.dotted_accepts[item.dotted])) {
      continue;
    }
    if (!in_kernel(item, self)) continue;
    uint64_t origin_lo = 0x9e3779b97f4a7c15ull, origin_hi = 0x7f4a7c159e3779b9ull;  // self
    if (item.origin != self) {
      uint32_t local;
      const Chart& origin_chart = view.chart_of(item.origin, &local);
      origin_lo = origin_chart.hash_lo[local];
      origin_hi = origin_chart.hash_hi[local];
    }
    lo += mix64(mix64(item.dotted + 0x1234567ull) ^ origin_lo);
    hi += mix64(mix64(item.dotted ^ 0xabcdef0123ull) + origin_hi * 0x2545f4914f6cdd1dull);
  }
  chart.hash_lo.push_back(mix64(lo));
  chart.hash_hi.push_back(mix64(hi ^ lo));
}

// Index the pending items of the set just closed (items [begin, end) of `chart`).
void index_new_set(const Runtime& rt, Chart& chart, size_t begin) {
  const size_t first = chart.waits.size();
  for (size_t j = begin; j < chart.items.size(); ++j) {
    const uint32_t next = rt.dotted_next[chart.items[j].dotted];
    if (next != kComplete) chart.waits.push_back((static_cast<uint64_t>(next) << 32) | j);
  }
  std::sort(chart.waits.begin() + first, chart.waits.end());
  chart.wait_begin.push_back(static_cast<uint32_t>(chart.waits.size()));
}

// Append the Leo items of the set just closed and indexed (`self`, of the matcher's own chart;
// see Chart::leo). Its waits are sorted by symbol, so a symbol with one waiter is a run of one.
// A waiter predicted in this set (origin `self`) continues the chain through this set's own
// entry for its left-hand side (unit and wrapper rules between the recursive ones), so
// entries are resolved in dependency order; a cycle of such waiters gets no entry.
void add_leo_items(const Runtime& rt, Chart& chart, uint32_t self) {
  if (chart.exact) {
    chart.leo_begin.push_back(static_cast<uint32_t>(chart.leo.size()));
    return;
  }
  struct Candidate {
    uint32_t symbol;
    Item waiter;
    uint8_t state;  // 0 unresolved, 1 resolving, 2 resolved
    bool has_entry;
    LeoItem entry;
  };
  // On the stack (this runs for every set a commit closes; a thread_local in a shared library
  // costs a call per access). Symbols past the first kMaxCandidates get no entry: exact, their
  // completions just take the chain step by step.
  constexpr size_t kMaxCandidates = 32;
  Candidate candidates[kMaxCandidates];
  size_t count = 0;
  bool any_from_earlier_set = false;  // without one, no chain leaves this set: no entries
  const uint64_t* waits = chart.waits.data();
  const uint32_t first = chart.wait_begin[self], last = chart.wait_begin[self + 1];
  for (uint32_t w = first; w < last && count < kMaxCandidates; ++w) {
    const uint32_t symbol = static_cast<uint32_t>(waits[w] >> 32);
    if (symbol >= rt.num_nonterminals) break;  // nonterminals sort first; only they complete
    if ((w > first && (waits[w - 1] >> 32) == symbol) ||
        (w + 1 < last && (waits[w + 1] >> 32) == symbol)) {
      continue;
    }
    const Item waiter = chart.items[static_cast<uint32_t>(waits[w])];
    if (rt.dotted_next[waiter.dotted + 1] != kComplete) continue;  // X must end the production
    candidates[count++] = Candidate{symbol, waiter, 0, false, LeoItem{}};
    any_from_earlier_set = any_from_earlier_set || waiter.origin != self;
  }
  if (!any_from_earlier_set) count = 0;
  Candidate* const end = candidates + count;
  auto find_candidate = [&](uint32_t symbol) -> Candidate* {
    Candidate* it = std::lower_bound(
        candidates, end, symbol,
        [](const Candidate& candidate, uint32_t value) { return candidate.symbol < value; });
    return it != end && it->symbol == symbol ? it : nullptr;
  };
  // Resolves candidate c; chains through this set stay short (wrapper rules), so recursion is
  // bounded by the number of candidates.
  auto resolve = [&](auto&& self_ref, Candidate& c) -> void {
    if (c.state != 0) return;
    c.state = 1;
    const Item waiter = c.waiter;
    const uint32_t lhs = rt.prod_lhs[rt.dotted_prod[waiter.dotted]];
    if (waiter.origin == self) {
      Candidate* below = find_candidate(lhs);
      if (below) self_ref(self_ref, *below);
      if (below && below->state == 2 && below->has_entry) {
        c.has_entry = true;
        c.entry = below->entry;
        c.entry.symbol = c.symbol;
      }
    } else if (const LeoItem* below = find_leo(chart, waiter.origin, lhs)) {
      c.has_entry = true;
      c.entry = LeoItem{c.symbol, below->dotted, below->origin, below->hops + 1};
    } else {
      c.has_entry = true;
      c.entry = LeoItem{c.symbol, waiter.dotted + 1, waiter.origin, 1};
    }
    c.state = 2;
  };
  for (Candidate* c = candidates; c != end; ++c) resolve(resolve, *c);
  for (const Candidate* c = candidates; c != end; ++c) {
    if (c->has_entry) chart.leo.push_back(c->entry);
  }
  chart.leo_begin.push_back(static_cast<uint32_t>(chart.leo.size()));
}

inline uint64_t item_key(uint32_t dotted, uint32_t origin) {
  return (static_cast<uint64_t>(dotted) << 32) | origin;
}

// Adds items to the set being built (index `self`), keeping once the items of one dotted id
// whose origin sets have equal structural hashes: equal hashes mean isomorphic stacks, hence
// equal futures (the mask caches key on exactly that). A hash per item, in the key of the
// set's dedup table. Only sets of a hashed chart (the matcher's own, not hypothetical sets).
class ItemAdder {
 public:
  ItemAdder(const ChartView& view, Chart& chart, uint32_t self, KeySet& seen)
      : chart_(chart), self_(self), seen_(seen), hashed_(view.base == nullptr && !chart.exact) {}
  void add(uint32_t dotted, uint32_t origin) {
    if (seen_.insert(key(dotted, origin))) chart_.items.push_back(Item{dotted, origin});
  }
  KeySet& seen() { return seen_; }

 private:
  uint64_t key(uint32_t dotted, uint32_t origin) const {
    if (hashed_ && origin != self_) {
      // The hash is well mixed already; the top bit keeps these apart from item_key's.
      return (chart_.hash_lo[origin] ^ (dotted * 0x9e3779b97f4a7c15ull)) | (uint64_t{1} << 63);
    }
    return item_key(dotted, origin);
  }
  Chart& chart_;
  uint32_t self_;
  KeySet& seen_;
  bool hashed_;
};

// Per-thread buffers of merge_equal_futures.
struct MergeScratch {
  uint32_t generation = 0;
  std::vector<uint32_t> stamp, first;           // per dotted id: set generation, first item's index
  std::unordered_map<uint64_t, uint32_t> kept;  // (dotted id, future) -> index of the item kept
  std::vector<uint8_t> drop;
};

MergeScratch& merge_scratch() {
  thread_local MergeScratch scratch;
  return scratch;
}

uint64_t future_item_key(uint32_t dotted, const Future& future) {
  const uint64_t tag = mix64((static_cast<uint64_t>(dotted) << 32 | future.chain) + 0x51ed27);
  return mix64(tag ^ future.lo) ^ mix64(tag + future.hi);
}

bool has_anchors(const Chart& chart, uint32_t set) {
  return chart.anchors_hash[2 * set] != 0 || chart.anchors_hash[2 * set + 1] != 0;
}

// After the set `self` (items [begin, end) of the matcher's own chart) is closed: of its
// pending items of one dotted id whose futures are equal, keep the one of the earliest origin.
//
// An item's future is the rest of its production, then whatever follows its left-hand side at
// its origin (future_after; canonical automata, so equality is exact). A later set reads this
// one only through its pending items, advancing those that wait for a symbol completed or
// scanned here; two of one dotted id with equal futures accept the same continuations, so one
// does for both. Without this, nested ambiguous repeats keep one item per earlier position
// that waits at it (each origin differing from the last by one more such item: no structural
// hash matches), and sets, commits and fills grow with the text.
//
// Only after the closure, and only pending items: during the closure a complete item (or one
// before nullable symbols) completes its left-hand side in this set, and an item with the same
// future may reach that future only through it. In `R -> x R | y` (right recursion),
// completing R at the innermost level derives `R -> x R .` at every level below, all with one
// future, each the way on for the one before; dropping them at arrival lost documents (found
// by test_keys_of_objects_with_many_properties_are_one_lexeme), and so did a rule that kept
// an item's derivation ancestors (an item may reach its future through one derived before it
// by another path).
//
// Comparing futures needs anchors for the origins, which a chart keeps only while its matcher
// uses future keys. So a chart merges only once one of its sets has more than
// FutureLanguages::merge_after pending items (of other origins) whose dotted id another such
// item shares (16: unambiguous grammars have a few per set, nested ambiguous repeats one per
// earlier position); it then computes the anchors of every earlier set and keeps them from
// then on (Chart::merge_anchored).
void merge_equal_futures(const Runtime& rt, Chart& chart, uint32_t self, size_t begin) {
  constexpr uint32_t kNoItem = 0xffffffffu;
  if (!chart.future_mergeable || rt.futures->exhausted.load(std::memory_order_relaxed)) return;
  MergeScratch& sc = merge_scratch();
  if (++sc.generation == 0) {
    std::fill(sc.stamp.begin(), sc.stamp.end(), 0);
    sc.generation = 1;
  }
  if (sc.stamp.size() < rt.dotted_next.size()) {
    sc.stamp.resize(rt.dotted_next.size(), 0);
    sc.first.resize(rt.dotted_next.size(), 0);
  }
  bool any_repeated = false;
  const size_t end = chart.items.size();
  for (size_t i = begin; i < end; ++i) {
    const Item item = chart.items[i];
    if (item.origin == self || rt.dotted_next[item.dotted] == kComplete) continue;
    if (sc.stamp[item.dotted] != sc.generation) {
      sc.stamp[item.dotted] = sc.generation;
      sc.first[item.dotted] = static_cast<uint32_t>(i);
    } else {
      sc.first[item.dotted] = kNoItem;  // met again
      any_repeated = true;
    }
  }
  if (!any_repeated) return;
  // Pending items (of other origins) whose dotted id some other such item shares: only those
  // were stamped in this generation.
  auto repeated = [&](const Item& item) {
    return item.origin != self && sc.stamp[item.dotted] == sc.generation &&
           sc.first[item.dotted] == kNoItem;
  };
  if (!chart.merge_anchored) {
    uint32_t repeats = 0;
    for (size_t i = begin; i < end; ++i) repeats += repeated(chart.items[i]) ? 1 : 0;
    if (repeats <= rt.futures->merge_after) return;
    // Anchors computed before (for future keys) may be short of the merge budget; all are
    // computed again with it.
    anchor_earlier_sets(rt, chart, self);
    chart.merge_anchored = true;
  }
  FutureLanguages& fl = *rt.futures;
  sc.kept.clear();
  sc.drop.assign(end - begin, 0);
  size_t dropped = 0;
  {
    FutureBudget budget(FutureLanguages::kMergeLanguages);
    std::lock_guard<std::mutex> lock(fl.mutex);
    for (size_t i = begin; i < end; ++i) {
      const Item item = chart.items[i];
      if (!repeated(item) || !has_anchors(chart, item.origin)) continue;
      const Future future = future_after(rt, fl, chart, item.dotted, item.origin);
      const auto placed =
          sc.kept.emplace(future_item_key(item.dotted, future), static_cast<uint32_t>(i));
      if (placed.second) continue;
      // Of equal items, the one of the earliest origin is kept: a later set that completes
      // its left-hand side then cascades down to that origin directly, instead of through
      // every set in between (each holding the item of the set before it, in `s: s s | "a"`
      // every set completed the item at every earlier position).
      uint32_t& kept = placed.first->second;
      if (item.origin < chart.items[kept].origin) {
        sc.drop[kept - begin] = 1;
        kept = static_cast<uint32_t>(i);
      } else {
        sc.drop[i - begin] = 1;
      }
      ++dropped;
    }
  }
  if (dropped == 0) return;
  size_t out = begin;
  for (size_t i = begin; i < end; ++i) {
    if (!sc.drop[i - begin]) chart.items[out++] = chart.items[i];
  }
  chart.items.resize(out);
}

// Add to the set being built (index `self`) the items that predicting `nt` adds, from its
// precomputed closure: they are complete with respect to prediction and nullable steps.
void predict_closure(const Runtime& rt, Chart& chart, uint32_t self, KeySet& seen, uint32_t nt) {
  if (!seen.mark_nonterminal(nt)) return;
  for (uint32_t k = rt.closure_nt_offsets[nt]; k < rt.closure_nt_offsets[nt + 1]; ++k) {
    seen.mark_nonterminal(rt.closure_nts[k]);
  }
  for (uint32_t k = rt.closure_offsets[nt]; k < rt.closure_offsets[nt + 1]; ++k) {
    const uint32_t dotted = rt.closure_items[k];
    if (seen.mark_dotted(dotted)) chart.items.push_back(Item{dotted, self});
  }
}

// Add to the set being built the productions of `nt`, with the set itself as origin: its whole
// closure when the runtime has closures, else its productions' first items (which the
// closing loop then processes in turn).
void predict(const Runtime& rt, Chart& chart, uint32_t self, KeySet& seen, uint32_t nt) {
  if (!rt.closure_offsets.empty()) {
    predict_closure(rt, chart, self, seen, nt);
    return;
  }
  for (uint32_t k = rt.nt_prod_offsets[nt]; k < rt.nt_prod_offsets[nt + 1]; ++k) {
    const uint32_t dotted = rt.prod_dotted[rt.nt_prods[k]];
    if (seen.insert(item_key(dotted, self))) chart.items.push_back(Item{dotted, self});
  }
}

// Closes the set that starts at chart.items[begin] (the current set, index `self`).
//
// With prediction closures, the items whose origin is the set itself are exactly those
// closures' items (scans and completions carry earlier origins), which need no processing:
// predicting copies whole closures, deduplicated by per-set marks instead of hashed keys.
// Predicted items were ~2/3 of a C-like set, each hashed, looked up and visited again.
void close_set(const Runtime& rt, const ChartView& view, Chart& chart, size_t begin, uint32_t self,
               ItemAdder& adder, std::vector<uint32_t>* reads) {
  KeySet& seen = adder.seen();
  const bool closures = !rt.closure_offsets.empty();
  for (size_t i = begin; i < chart.items.size(); ++i) {
    const Item item = chart.items[i];
    if (closures && item.origin == self) continue;
    const uint32_t next = rt.dotted_next[item.dotted];
    if (next == kComplete) {
      if (item.origin == self) continue;  // covered by the nullable step at prediction time
      const uint32_t lhs = rt.prod_lhs[rt.dotted_prod[item.dotted]];
      uint32_t local;
      const Chart& origin_chart = view.chart_of(item.origin, &local);
      // A deterministic chain of completions is one step (see Chart::leo).
      if (view.base == nullptr || item.origin < view.base_sets) {
        const LeoItem* leo = find_leo(origin_chart, local, lhs);
        if (leo && (view.base == nullptr || leo->hops >= Chart::kDepthHashes)) {
          if (reads && view.base != nullptr) reads->push_back(kUnknownRead);
          adder.add(leo->dotted, leo->origin);
          continue;
        }
      }
      if (reads) reads->push_back(item.origin);
      // The origin set is closed and indexed; `chart` may be the same object and grow, so
      // items are copied out before adding.
      for_waiting(origin_chart, local, lhs,
                  [&](const Item waiting) { adder.add(waiting.dotted + 1, waiting.origin); });
      continue;
    }
    if (next < rt.num_nonterminals) predict(rt, chart, self, seen, next);
    if (next < rt.symbol_nullable.size() && rt.symbol_nullable[next]) {
      adder.add(item.dotted + 1, item.origin);
    }
  }
}

// The sum behind Chart::depth_hash, written once: hash_set_depths (a new set of the matcher's
// own chart, every depth) and overlay_depth_hash (a hypothetical set, one depth on demand) must
// give equal hashes for equal items, or walk-cache keys would not match across the two.
struct DepthItem {
  uint64_t lo, hi;  // the item's own terms: they do not depend on the depth
  uint32_t origin;
};

DepthItem depth_item(const Item& item) {
  return {mix64(item.dotted + 0x7654321ull), mix64(item.dotted ^ 0x3210fedcbaull), item.origin};
}

class DepthSum {
 public:
  explicit DepthSum(uint32_t depth)
      : lo_(0x452821e638d01377ull + depth), hi_(0xbe5466cf34e90c6cull ^ depth), depth_(depth) {}
  // Add a pending item of set `self`; `origin_hash()` gives {lo, hi} of its origin's
  // H_{depth-1}, read only when the origin is another set and depth > 1 (H_0 is a constant).
  template <typename OriginHash>
  void add(const DepthItem& item, uint32_t self, OriginHash origin_hash) {
    uint64_t origin_lo = 0xc0ac29b7c97c50ddull, origin_hi = 0x3f84d5b5b5470917ull;  // H_0
    if (item.origin == self) {
      origin_lo = 0x9216d5d98979fb1bull;  // the set itself
      origin_hi = 0xd1310ba698dfb5acull;
    } else if (depth_ > 1) {
      const uint64_t* origin = origin_hash(item.origin);
      origin_lo = origin[0];
      origin_hi = origin[1];
    }
    lo_ += mix64(item.lo ^ origin_lo);
    hi_ += mix64(item.hi + origin_hi * 0x2545f4914f6cdd1dull);
  }
  uint64_t lo() const { return mix64(lo_); }
  uint64_t hi() const { return mix64(hi_ ^ lo_); }

 private:
  uint64_t lo_, hi_;
  uint32_t depth_;
};

// Depth hashes of the set `self` (items [begin, end) of view.top); see Chart::depth_hash.
void hash_set_depths(const Runtime& rt, const ChartView& view, uint32_t self, size_t begin) {
  constexpr uint32_t depths = Chart::kDepthHashes;
  Chart& chart = *view.top;
  const size_t local_self = self - view.base_sets;
  chart.depth_hash.resize(local_self * depths * 2);
  // Each pending item's own terms are mixed once for all depths.
  thread_local std::vector<DepthItem> pending;
  pending.clear();
  for (size_t i = begin; i < chart.items.size(); ++i) {
    const Item item = chart.items[i];
    if (rt.dotted_next[item.dotted] == kComplete) continue;  // finished: no future effect
    if (!in_kernel(item, self)) continue;
    pending.push_back(depth_item(item));
  }
  for (uint32_t d = 1; d <= depths; ++d) {
    DepthSum sum(d);
    for (const DepthItem& item : pending) {
      sum.add(item, self, [&](uint32_t origin) {
        uint32_t local;
        const Chart& origin_chart = view.chart_of(origin, &local);
        return &origin_chart.depth_hash[(static_cast<size_t>(local) * depths + (d - 2)) * 2];
      });
    }
    chart.depth_hash.push_back(sum.lo());
    chart.depth_hash.push_back(sum.hi());
  }
}

}  // namespace

uint32_t build_earley_set(const Runtime& rt, ChartView& view,
                          const std::vector<std::pair<uint32_t, uint32_t>>& scans, KeySet& seen,
                          std::vector<uint32_t>* reads) {
  Chart& chart = *view.top;
  const uint32_t self = view.num_sets();
  const size_t begin = chart.items.size();
  seen.clear();
  seen.reserve_marks(rt.dotted_next.size(), rt.num_nonterminals);
  {
    ItemAdder adder(view, chart, self, seen);
    for (const auto& [origin, symbol] : scans) {
      uint32_t local;
      const Chart& origin_chart = view.chart_of(origin, &local);
      if (reads) reads->push_back(origin);
      for_waiting(origin_chart, local, symbol,
                  [&](const Item waiting) { adder.add(waiting.dotted + 1, waiting.origin); });
    }
    close_set(rt, view, chart, begin, self, adder, reads);
  }
  if (view.base == nullptr) {
    merge_equal_futures(rt, chart, self, begin);
    hash_new_set(rt, view, chart, self, begin);
    if (chart.depth_hashed) {
      hash_set_depths(rt, view, self, begin);
    } else {
      chart.depth_hash.resize((static_cast<size_t>(self) + 1) * Chart::kDepthHashes * 2);
    }
    anchor_new_set(rt, chart, self, begin);
  } else {
    // Hypothetical sets: nothing reads their whole-stack hash (mask keys are built from the
    // matcher's own chart), and their depth hashes are filled on demand by overlay_depth_hash.
    chart.hash_lo.push_back(0);
    chart.hash_hi.push_back(0);
    const size_t sets = static_cast<size_t>(self - view.base_sets) + 1;
    chart.depth_hash.resize(sets * Chart::kDepthHashes * 2);
  }
  index_new_set(rt, chart, begin);
  if (view.base == nullptr) {
    add_leo_items(rt, chart, self);
  } else {
    chart.leo_begin.push_back(static_cast<uint32_t>(chart.leo.size()));
  }
  chart.set_begin.push_back(static_cast<uint32_t>(chart.items.size()));
  // The prewarm keeps one set of every kernel its matchers build (see prewarm_local_walks).
  if (view.base == nullptr && FutureWork::prewarming && chart.depth_hashed) {
    record_prewarm_kernel(rt, chart, self);
  }
  return self;
}

void build_initial_set(const Runtime& rt, Chart& chart, KeySet& seen) {
  seen.clear();
  seen.reserve_marks(rt.dotted_next.size(), rt.num_nonterminals);
  chart.items.clear();
  chart.set_begin.assign(1, 0);
  chart.hash_lo.clear();
  chart.hash_hi.clear();
  chart.wait_begin.assign(1, 0);
  chart.waits.clear();
  chart.future_begin.assign(1, 0);
  chart.future_symbol.clear();
  chart.future_chain.clear();
  chart.future_hash.clear();
  chart.anchors_hash.clear();
  chart.anchors_shape.clear();
  chart.leo_begin.assign(1, 0);
  chart.leo.clear();
  predict(rt, chart, 0, seen, rt.start);
  ChartView view{nullptr, &chart, 0};
  chart.depth_hash.clear();
  {
    ItemAdder adder(view, chart, 0, seen);
    close_set(rt, view, chart, 0, 0, adder, nullptr);
  }
  hash_new_set(rt, view, chart, 0, 0);
  hash_set_depths(rt, view, 0, 0);
  anchor_new_set(rt, chart, 0, 0);
  index_new_set(rt, chart, 0);
  add_leo_items(rt, chart, 0);
  chart.set_begin.push_back(static_cast<uint32_t>(chart.items.size()));
}

const uint64_t* overlay_depth_hash(const Runtime& rt, const ChartView& view,
                                   std::vector<uint32_t>& done, uint32_t set, uint32_t depth) {
  constexpr uint32_t depths = Chart::kDepthHashes;
  uint32_t local;
  const Chart& chart = view.chart_of(set, &local);
  const size_t at = (static_cast<size_t>(local) * depths + (depth - 1)) * 2;
  if (&chart != view.top || ((done[local] >> depth) & 1u)) return &chart.depth_hash[at];
  // The same sum as hash_set_depths, for one depth, over the set's pending kernel items.
  DepthSum sum(depth);
  for (uint32_t w = chart.wait_begin[local]; w < chart.wait_begin[local + 1]; ++w) {
    const Item item = chart.items[static_cast<uint32_t>(chart.waits[w])];
    if (!in_kernel(item, set)) continue;
    sum.add(depth_item(item), set,
            [&](uint32_t origin) { return overlay_depth_hash(rt, view, done, origin, depth - 1); });
  }
  Chart& top = *view.top;
  top.depth_hash[at] = sum.lo();
  top.depth_hash[at + 1] = sum.hi();
  done[local] |= 1u << depth;
  return &top.depth_hash[at];
}

void expected_lexemes(const Runtime& rt, const ChartView& view, uint32_t set,
                      std::vector<uint32_t>& out) {
  out.clear();
  uint32_t local;
  const Chart& chart = view.chart_of(set, &local);
  // Waits are sorted by symbol, and lexeme symbols form one contiguous range.
  const uint64_t* lo = chart.waits.data() + chart.wait_begin[local];
  const uint64_t* hi = chart.waits.data() + chart.wait_begin[local + 1];
  for (const uint64_t* it = std::lower_bound(lo, hi, static_cast<uint64_t>(rt.lexeme_base()) << 32);
       it != hi && (*it >> 32) < rt.tokenset_base(); ++it) {
    const uint32_t lexeme = static_cast<uint32_t>(*it >> 32) - rt.lexeme_base();
    if (out.empty() || out.back() != lexeme) out.push_back(lexeme);
  }
}

}  // namespace gramkiln
