// Earley sets over lexeme and token-set symbols, with the Aycock-Horspool treatment of nullable
// symbols (a nullable symbol is stepped over at prediction time, so completions never need to
// revisit the set being built).
#include <algorithm>
#include <mutex>
#include <optional>
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

bool KeySet::contains(uint64_t key) const {
  if (keys_.empty()) return false;
  const size_t mask = keys_.size() - 1;
  size_t slot = static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
  while (stamps_[slot] == generation_) {
    if (keys_[slot] == key) return true;
    slot = (slot + 1) & mask;
  }
  return false;
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

inline uint64_t item_key(uint32_t dotted, uint32_t origin) {
  return (static_cast<uint64_t>(dotted) << 32) | origin;
}

// Per-thread buffers of ItemAdder, reached once per set: a thread_local of a shared library
// costs a call per access, and ItemAdder::add runs for every item of every set.
struct MergeScratch {
  uint32_t generation = 0;
  std::vector<uint32_t> first_stamp, first_index, parents;
  // Futures of this set's items (by dotted id and future) -> the item kept with it.
  std::unordered_map<uint64_t, uint32_t> futures_seen;
  KeySet dropped_keys, revived_keys;
};

// Adds items to the set being built (index `self`), keeping items that behave alike once.
//
// An item's future is the rest of its production, then whatever follows its left-hand side at
// its origin. Items of one dotted id whose futures are equal can be kept once: the mask, the
// acceptance of every continuation and every later set depend only on the futures. Without
// this, nested ambiguous repeats keep one item per earlier position that waits at it (each
// origin differing from the last by one more such item), and sets, commits and fills grow
// with the text. Two tests, cheapest first:
// * origins with equal structural hashes have equal futures (the mask caches key on exactly
//   that): a hash per item;
// * otherwise, when a dotted id arrives again with another origin, and only once the chart
//   has seen enough such arrivals in one set (see compares_futures), the future languages of
//   both (future.cpp), compared exactly, from the origins' anchors. This needs the chart's
//   anchors (not in hypothetical sets or the trie search's copy) and the future lock, taken
//   at the first comparison and held until the set is closed.
// An item is never dropped for one it descends from in this set: the kept item may reach its
// future only through it. In `R -> x R | y` (right recursion), completing R at the innermost
// level derives `R -> x R .` at every level below, all with one future, each the way on for
// the one before. Each item added notes the item whose processing added it (its parent).
// Only sets of the matcher's own chart merge: a hypothetical set has no whole hash.
class ItemAdder {
 public:
  ItemAdder(const Runtime& rt, const ChartView& view, Chart& chart, uint32_t self, KeySet& seen)
      : rt_(rt),
        chart_(chart),
        self_(self),
        seen_(seen),
        begin_(chart.items.size()),
        scratch_(merge_scratch()) {
    hashed_ = view.base == nullptr;
    by_future_ =
        hashed_ && chart.future_mergeable && !rt.futures->exhausted.load(std::memory_order_relaxed);
    if (by_future_) {
      if (++scratch_.generation == 0) {
        std::fill(scratch_.first_stamp.begin(), scratch_.first_stamp.end(), 0);
        scratch_.generation = 1;
      }
      generation_ = scratch_.generation;
      if (scratch_.first_stamp.size() < rt.dotted_next.size()) {
        scratch_.first_stamp.resize(rt.dotted_next.size(), 0);
        scratch_.first_index.resize(rt.dotted_next.size(), 0);
      }
      first_stamp_ = scratch_.first_stamp.data();
      first_index_ = scratch_.first_index.data();
      scratch_.parents.clear();
    }
  }
  ItemAdder(const ItemAdder&) = delete;
  ItemAdder& operator=(const ItemAdder&) = delete;

  // Items added from now on are derived from item `index` of the chart (close_set's loop).
  void processing(size_t index) { current_ = index; }
  void add(uint32_t dotted, uint32_t origin) {
    const uint64_t k = key(dotted, origin);
    // A dropped item stays in `seen` (one probe per add). It may arrive again through a
    // descendant of the item kept instead, and must then be added after all (once).
    bool again = false;
    if (!seen_.insert(k)) {
      if (dropped_ == 0 || !scratch_.dropped_keys.contains(k) ||
          scratch_.revived_keys.contains(k)) {
        return;
      }
      again = true;
    }
    if (by_future_ && origin != self_) {
      const size_t index = chart_.items.size();
      if (!first_of(dotted, index) && compares_futures() && repeats_a_future(dotted, origin)) {
        if (dropped_++ == 0) {
          scratch_.dropped_keys.clear();
          scratch_.revived_keys.clear();
        }
        scratch_.dropped_keys.insert(k);
        return;
      }
      if (again) scratch_.revived_keys.insert(k);
      if (current_ != kNone) {
        std::vector<uint32_t>& parents = scratch_.parents;
        if (parents.size() <= local(index)) parents.resize(local(index) + 1, kNone);
        parents[local(index)] = static_cast<uint32_t>(current_);
      }
    }
    chart_.items.push_back(Item{dotted, origin});
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
  uint32_t local(size_t index) const { return static_cast<uint32_t>(index - begin_); }
  // The item whose processing added item `index` of this set, or kNone (scanned items, and
  // predictions, which the adder does not add).
  uint32_t parent_of(size_t index) const {
    const uint32_t at = local(index);
    return at < scratch_.parents.size() ? scratch_.parents[at] : kNone;
  }
  // Whether the item about to be added descends from item `ancestor` (chart index).
  bool descends_from(uint32_t ancestor) const {
    for (size_t at = current_; at != kNone; at = parent_of(at)) {
      if (at == ancestor) return true;
    }
    return false;
  }
  // True (and the item noted) when no item of this dotted id with another origin came yet.
  bool first_of(uint32_t dotted, size_t index) {
    if (first_stamp_[dotted] == generation_) return false;
    first_stamp_[dotted] = generation_;
    first_index_[dotted] = static_cast<uint32_t>(index);
    return true;
  }
  // Whether a dotted id that arrived again with another origin is compared by futures: once
  // the chart merges by futures, or when this set has had FutureLanguages::merge_after such
  // arrivals (then the chart merges by futures from here on, with anchors for every set).
  // Unambiguous grammars see a few per set (C-like's unit rules: up to ~5) and so never pay
  // for anchors and comparisons; nested ambiguous repeats see one per earlier position.
  bool compares_futures() {
    if (chart_.merge_anchored) return true;
    if (++arrivals_again_ < rt_.futures->merge_after) return false;
    if (!anchors_complete(rt_, chart_)) anchor_earlier_sets(rt_, chart_, self_);
    chart_.merge_anchored = true;
    return true;
  }
  bool anchored(uint32_t set) const {
    return chart_.anchors_hash[2 * set] != 0 || chart_.anchors_hash[2 * set + 1] != 0;
  }
  // Whether an item of this dotted id with the same future as (dotted, origin) is in the set,
  // and the item about to be added does not descend from it; notes the future (and the item
  // that has it) when no item has it yet. The first item of the dotted id is compared lazily.
  bool repeats_a_future(uint32_t dotted, uint32_t origin) {
    FutureLanguages& fl = *rt_.futures;
    if (!lock_.owns_lock()) {
      lock_ = std::unique_lock<std::mutex>(fl.mutex);
      budget_.emplace(kMergeLanguages);
      scratch_.futures_seen.clear();
    }
    const uint32_t first = first_index_[dotted];
    if (first != kNone) {
      const uint32_t first_origin = chart_.items[first].origin;
      if (anchored(first_origin)) {
        scratch_.futures_seen.emplace(
            future_key(dotted, future_after(rt_, fl, chart_, dotted, first_origin)), first);
      }
      first_index_[dotted] = kNone;  // compared from here on through futures_seen
    }
    if (!anchored(origin)) return false;
    const auto [seen, added] = scratch_.futures_seen.emplace(
        future_key(dotted, future_after(rt_, fl, chart_, dotted, origin)),
        static_cast<uint32_t>(chart_.items.size()));
    return !added && !descends_from(seen->second);
  }
  static uint64_t future_key(uint32_t dotted, const Future& future) {
    const uint64_t tag = mix64((static_cast<uint64_t>(dotted) << 32 | future.chain) + 0x51ed27);
    return mix64(tag ^ future.lo) ^ mix64(tag + future.hi);
  }
  static MergeScratch& merge_scratch() {
    thread_local MergeScratch scratch;
    return scratch;
  }
  // New languages the future comparisons of one set may canonicalise; what is left
  // uncombined only merges less. More than a commit's anchors may (kLanguagesPerStep in
  // future.cpp): this runs only where ambiguity multiplies items, and each language is
  // canonicalised once per runtime.
  static constexpr uint32_t kMergeLanguages = 64;
  static constexpr uint32_t kNone = 0xffffffffu;
  const Runtime& rt_;
  Chart& chart_;
  uint32_t self_;
  KeySet& seen_;
  size_t begin_;
  MergeScratch& scratch_;
  size_t current_ = kNone;
  uint32_t dropped_ = 0;         // items dropped in this set (their keys in dropped_keys)
  uint32_t arrivals_again_ = 0;  // dotted ids that arrived again with another origin
  uint32_t generation_ = 0;
  uint32_t* first_stamp_ = nullptr;
  uint32_t* first_index_ = nullptr;
  bool hashed_ = false, by_future_ = false;
  std::unique_lock<std::mutex> lock_;
  std::optional<FutureBudget> budget_;  // released before lock_ (declared after it)
};

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
  auto add = [&](uint32_t dotted, uint32_t origin) { adder.add(dotted, origin); };
  const bool closures = !rt.closure_offsets.empty();
  for (size_t i = begin; i < chart.items.size(); ++i) {
    const Item item = chart.items[i];
    if (closures && item.origin == self) continue;
    adder.processing(i);
    const uint32_t next = rt.dotted_next[item.dotted];
    if (next == kComplete) {
      if (item.origin == self) continue;  // covered by the nullable step at prediction time
      const uint32_t lhs = rt.prod_lhs[rt.dotted_prod[item.dotted]];
      uint32_t local;
      const Chart& origin_chart = view.chart_of(item.origin, &local);
      if (reads) reads->push_back(item.origin);
      // The origin set is closed and indexed; `chart` may be the same object and grow, so
      // items are copied out before adding.
      for_waiting(origin_chart, local, lhs, [&](const Item waiting) {
        add(waiting.dotted + 1, waiting.origin);
      });
      continue;
    }
    if (next < rt.num_nonterminals) predict(rt, chart, self, seen, next);
    if (next < rt.symbol_nullable.size() && rt.symbol_nullable[next]) {
      add(item.dotted + 1, item.origin);
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
    ItemAdder adder(rt, view, chart, self, seen);  // holds the future lock until closed
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
  chart.set_begin.push_back(static_cast<uint32_t>(chart.items.size()));
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
  predict(rt, chart, 0, seen, rt.start);
  ChartView view{nullptr, &chart, 0};
  chart.depth_hash.clear();
  {
    ItemAdder adder(rt, view, chart, 0, seen);
    close_set(rt, view, chart, 0, 0, adder, nullptr);
  }
  hash_new_set(rt, view, chart, 0, 0);
  hash_set_depths(rt, view, 0, 0);
  anchor_new_set(rt, chart, 0, 0);
  index_new_set(rt, chart, 0);
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
