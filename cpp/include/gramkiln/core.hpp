// Public surface of the gramkiln C++ core: no Python headers here.
//
// The core has two halves. The builder turns a flattened grammar (context-free productions over
// lexeme symbols whose languages are byte DFAs, plus token-set symbols) and a vocabulary into one
// little-endian blob with every per-state token table precomputed. The runtime validates such a
// blob (every size and index) and runs matchers over it: an Earley parser whose scanner advances
// lexer threads (origin set, DFA state) byte by byte, so lexing is exact and never greedy.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace gramkiln {

// Version of the core library; the bindings expose it so Python can check it matches.
std::string core_version();
// The compiler whose build profile (cpp/pgo) this core was compiled with, e.g. "GNU 12.2.0";
// empty for a build without one (see CMakeLists.txt, GRAMKILN_PGO).
std::string core_build_profile();

// Stage times of computed fills (built with the CMake option GRAMKILN_FILL_TRACE; see
// bench/fill_stages.py). Each stage's time runs from the previous stage border to its own.
enum class FillStage : uint8_t {
  kWholeProbe,     // the whole-stack key and its probe
  kFutureKey,      // the future-language key (futures at new sets computed here)
  kFutureProbe,    // its probe
  kDepthProbes,    // the bounded-depth mask keys and their probes
  kSetup,          // the computed fill's set-up
  kDescentProbes,  // each thread's descent looked up (by future, then by depth)
  kWalks,          // the descents no table holds, walked
  kDepths,         // the walked descents' depths
  kDescentStores,  // and their stores
  kComposition,    // the mask found by its parts and copied (or ORed)
  kDepthStore,     // stores of the mask: bounded-depth key,
  kWholeStore,     // whole-stack key,
  kFutureStore,    // future key
  kEnd,            // the end tokens settled
  kCount
};
enum class FillCount : uint8_t { kThreads, kWalkers, kNodes, kParts, kCount };
struct FillTraceRecord {
  uint64_t fill = 0;  // which fill since the last take_fill_trace (0, 1, ...)
  float stage_us[static_cast<size_t>(FillStage::kCount)] = {};
  uint32_t counts[static_cast<size_t>(FillCount::kCount)] = {};
};
bool fill_trace_built();
// The records of the computed fills since the last call (cached fills leave none), in order.
std::vector<FillTraceRecord> take_fill_trace();

// A blob that is truncated, corrupted or inconsistent. Never thrown for valid blobs.
class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Flattened grammar handed over by the Python compiler. Symbols are numbered: nonterminals
// [0, N), lexemes [N, N+L), token sets [N+L, N+L+S).
struct GrammarSpec {
  uint32_t num_nonterminals = 0;
  uint32_t start = 0;                   // nonterminal whose completion at origin 0 accepts
  std::vector<uint32_t> prod_lhs;       // one per production
  std::vector<uint32_t> prod_offsets;   // size P+1 into prod_rhs
  std::vector<uint32_t> prod_rhs;       // symbols
  std::vector<uint32_t> lexeme_start;   // global DFA state where each lexeme starts
  std::vector<int32_t> dfa_table;       // [num_states * 256], -1 = dead, global state ids
  std::vector<uint8_t> dfa_accepting;   // per global state
  std::vector<uint32_t> dfa_lexeme;     // lexeme owning each global state
  std::vector<uint32_t> tokenset_offsets;  // size S+1 into tokenset_ids
  std::vector<uint32_t> tokenset_ids;
  // Rule limits (runtime/rule_limits.py); all empty when the grammar has none. Per lexeme:
  // max tokens (0: none), max chars (kNoCharBudget: none), temperature as the two words of a
  // float64 (NaN: none). Per global state (empty when no lexeme has a char budget): the far-to-near
  // switch (the near copy with r chars left is switch + r; -1: not a far state) and a near state's
  // remaining budget (-1: not a near state). char_window: the most codepoints of any token.
  std::vector<uint32_t> lexeme_max_tokens, lexeme_max_chars, lexeme_temperature;
  // Per lexeme, 8 words: the bytes a lexeme that can follow it may start with (a superset,
  // from the grammar's FOLLOW sets). Exit children of other bytes can never be entered, so
  // the builder leaves them out. Empty: every byte.
  std::vector<uint32_t> lexeme_exit_bytes;
  // Per global state (empty: none), 1 where a suffix / stop lexeme with a token budget has
  // read a text its body alone accepts: once the budget is spent, a token that ends there
  // also ends the rule without its marker.
  std::vector<uint8_t> state_body_end;
  uint32_t char_window = 0;
  std::vector<int32_t> state_budget_switch, state_near_remaining;
  // Captures (rule option `capture`): the symbols (nonterminals or lexemes) whose
  // completions are recorded; per symbol the index of its capture name and of its marker's
  // (kNoCaptureName: none); for the lexeme of a suffix / stop rule, the lexemes of its body
  // and of its marker alone (kNoCaptureName: none), which split a completion into the two,
  // and whether the marker is a stop marker (hidden from the captures around it too); the
  // distinct names.
  std::vector<uint32_t> capture_symbols, capture_rule_name, capture_marker_name,
      capture_body_lexeme, capture_marker_lexeme;
  std::vector<uint8_t> capture_stop;
  std::vector<std::string> capture_names;
  // The lexeme of the grammar's ignored text, (ignore)+, when it has captures and %ignore
  // (at most one entry): a capture's longest completion leaves out trailing ignored text.
  std::vector<uint32_t> capture_ignore_lexeme;
};

constexpr uint32_t kNoCaptureName = 0xFFFFFFFFu;

constexpr uint32_t kNoCharBudget = 0xFFFFFFFFu;

// The vocabulary as the builder needs it.
struct VocabSpec {
  uint32_t vocab_size = 0;               // ids >= tokens.size() are padding, never allowed
  std::vector<std::string> tokens;       // bytes of every token id < tokens.size()
  std::vector<uint8_t> is_text;          // 1 if the token may match text (not special)
  std::vector<uint32_t> end_tokens;      // allowed iff the input so far is accepted
};

// Build the runtime blob (deterministic: same inputs, same bytes). Throws FormatError when the
// spec is inconsistent. Heavy: walks the token trie from every DFA state.
std::string build_runtime_blob(const GrammarSpec& grammar, const VocabSpec& vocab);

// The per-vocabulary part of the build (token trie, text-token set, the trie as blobs store
// it), computed once and shared, read-only, by any number of concurrent builds.
class VocabIndex;
std::shared_ptr<const VocabIndex> build_vocab_index(const VocabSpec& vocab);
uint32_t vocab_index_size(const VocabIndex& index);
// Drop the index's cache of trie walks (builds fill it again; blobs are the same either way).
// Returns the bytes it held.
size_t clear_walk_cache(const VocabIndex& index);
// Same blob as the VocabSpec overload, without rebuilding the vocabulary's tables.
std::string build_runtime_blob(const GrammarSpec& grammar, const VocabIndex& vocab,
                               const std::vector<uint32_t>& end_tokens);

class Runtime;
struct Scratch;

// Validate and load a blob. Throws FormatError with a reason on any inconsistency.
std::shared_ptr<const Runtime> load_runtime(std::string_view blob);

uint32_t runtime_vocab_size(const Runtime& runtime);
uint32_t runtime_mask_words(const Runtime& runtime);

// What a runtime's shared caches hold now (for monitoring and tests).
struct CacheStats {
  size_t mask_entries = 0;    // stored masks, by either key, both generations
  size_t distinct_masks = 0;  // contents they share (masks are interned)
  size_t compact_masks = 0;   // of those, stored as what they differ in from a base or zeros
  size_t mask_bytes = 0;      // accounted against the mask budget, current generations
  size_t walk_entries = 0;    // cached exit walks by hypothetical sets
  // Cached item walks and their closures over one set (see compute_item_walk in matcher.cpp).
  size_t item_walk_entries = 0, local_walk_entries = 0, closure_walk_entries = 0;
  size_t walk_bytes = 0;
  size_t walk_clears = 0;  // times the walk tables were cleared at their budget, since load
  size_t group_bytes = 0;  // exit groups, levels, node walks, unions, follow tables
  // Fills answered by each mask table, and fills computed, since load.
  size_t hits_whole_stack = 0, hits_future = 0, hits_depth = 0, fills_computed = 0;
  // Computed fills whose exit walks ran past the fill's bounds, answered by the trie search
  // instead (see Matcher::search_text_tokens), since load.
  size_t fills_searched = 0;
  // Top-level exit walks answered by their future key (inside computed fills), since load.
  size_t walk_hits_future = 0;
  // Descents by items (inside computed fills) answered by their thread's future, since load.
  size_t descent_hits_future = 0;
  size_t future_descents_idle = 0;  // 1 once a decode has judged descents by future not to pay
  // Descents walked node by node in computed fills (no table held them), and their nodes.
  size_t descents_walked = 0;
  size_t descent_nodes_walked = 0;
  // Computed fills that followed their exits by pending items, since load.
  size_t fills_by_items = 0;
  // Masks of computed fills found stored under what they were ORed from (no compare), since
  // load.
  size_t interned_by_parts = 0;
  // Stored masks compared word by word with a mask being interned (same digest), since load.
  size_t mask_compares = 0;
  // Future-language automata canonicalised (see future.cpp), and memo entries over them.
  size_t future_languages = 0, future_memo_entries = 0;
  // Future mask keys found by the configuration's anchors, one probe instead of one per
  // thread (see Matcher::memoised_future_mask_key), since load.
  size_t future_keys_by_anchors = 0;
  // Futures combined from a set's anchors by the recipe kept for its shape, since load (see
  // future_after).
  size_t future_recipe_hits = 0;
  // 1 once the prewarm has left the bounded-depth mask keys out while future keys are in use
  // (its synthetic traffic found almost no mask under them; see GroupCache::depth_keys_idle).
  size_t depth_keys_idle = 0;
};
CacheStats runtime_cache_stats(const Runtime& runtime);

// What prewarm_runtime did: levels built, bytes added to the runtime's caches, and whether it
// covered every exit group up to its nesting bound (false when a bound, the time budget or
// `stop` ended it).
struct PrewarmStats {
  uint32_t levels = 0;
  uint32_t masks = 0;     // other configurations filled: the first bytes, and inside lexemes
  uint32_t explored = 0;  // configurations reached lexeme by lexeme (see prewarm_structure)
  uint32_t item_walks = 0;  // item walks computed ahead (see prewarm_item_walks)
  uint32_t local_walks = 0;  // local walks computed ahead (see prewarm_local_walks)
  uint32_t kernels = 0;      // kernels (sets of pending items) its matchers built and kept
  // Random sentences decoded as synthetic traffic, and their tokens (see prewarm_traffic).
  uint32_t traffic_sentences = 0;
  uint32_t traffic_tokens = 0;
  // Huge-page-sized extents of the caches the kernel backed with huge pages at the end (see
  // back_caches_with_huge_pages).
  uint32_t huge_page_extents = 0;
  // Bytes of the tables computed fills read, read back last, so that a decode right after finds
  // them in the last-level cache (see read_back_fill_tables).
  size_t read_back_bytes = 0;
  size_t bytes = 0;
  bool complete = false;
};
// Build ahead, in the runtime's shared caches, the context-free part of mask work (every exit
// group a thread can reach and its children under the grammar's lexeme bigrams) and the
// masks of the first configurations of a decode (see matcher.cpp). Masks are the same with or
// without it; first fills are cheaper after it.
// Safe to run while other threads fill masks. Returns early once `stop` (if given) is set or
// after about a second of wall time (a single fill started before then still finishes).
PrewarmStats prewarm_runtime(const std::shared_ptr<const Runtime>& runtime,
                             const std::atomic<bool>* stop = nullptr);

// prewarm_runtime on a background thread, holding the runtime until it finishes; or, when
// constructed with `on_caller`, on the thread that calls run_here() (a caller that would wait
// anyway: the masks and tables it builds are then in that thread's caches and memory arena, and
// the first fills after it measured ~20 us faster). The destructor asks it to stop and waits.
class BackgroundPrewarm {
 public:
  explicit BackgroundPrewarm(std::shared_ptr<const Runtime> runtime, bool on_caller = false);
  // With `on_caller`: run the prewarm on this thread (once; later calls return at once).
  void run_here();
  ~BackgroundPrewarm();
  BackgroundPrewarm(const BackgroundPrewarm&) = delete;
  BackgroundPrewarm& operator=(const BackgroundPrewarm&) = delete;
  // Block until the prewarm has finished (on whichever thread runs it); returns its stats.
  PrewarmStats wait();
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Ask the thread to stop at its next group (it still finishes the one it is building).
  void request_stop() { stop_.store(true, std::memory_order_relaxed); }
  bool stop_requested() const { return stop_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<bool> done_{false};
  PrewarmStats stats_;
  std::mutex join_mutex_;
  std::mutex done_mutex_;  // with done_cv_: waits for one that runs on another caller's thread
  std::condition_variable done_cv_;
  std::function<void()> on_caller_;  // the work, until run_here() takes it
  std::thread thread_;               // started in the constructor body, once every member exists
};

struct Item {
  uint32_t dotted;  // dotted production id (production start + dot position)
  uint32_t origin;  // Earley set where the production was predicted
};

// A Leo item (see Chart::leo): completing `symbol` at the set that holds this entry ends, after
// a deterministic chain of completions through `hops` earlier sets, in the complete item
// (dotted, origin).
struct LeoItem {
  uint32_t symbol, dotted, origin, hops;
};

struct Thread {
  uint32_t origin;  // Earley set where the lexeme started
  int32_t state;    // global DFA state
  bool operator<(const Thread& o) const {
    return origin != o.origin ? origin < o.origin : state < o.state;
  }
  bool operator==(const Thread& o) const { return origin == o.origin && state == o.state; }
};

// Append-only list of Earley sets; set i is items[set_begin[i], set_begin[i+1]).
struct Chart {
  std::vector<Item> items;
  std::vector<uint32_t> set_begin{0};
  // Per set, a 128-bit structural hash: of its items with each origin replaced by the origin
  // set's own hash (a marker for the set itself). Equal hashes mean equal futures, so masks can
  // be cached by them across positions, matchers and requests.
  std::vector<uint64_t> hash_lo, hash_hi;
  // Per set, its pending items sorted by the symbol they wait for, as (symbol << 32 | item
  // index): completions and scans find the items they advance by binary search instead of
  // scanning the whole origin set. waits[wait_begin[i] .. wait_begin[i+1]) belong to set i.
  std::vector<uint32_t> wait_begin{0};
  std::vector<uint64_t> waits;
  // Per set of the matcher's own chart, Leo's transitive items (Leo 1991), sorted by symbol: for
  // a symbol X that exactly one item of the set waits for, (A -> a . X, r) with X last and r an
  // earlier set, completing X here completes A at r, and so on down the chain while each such
  // set has one waiter of that kind. The entry holds the complete item the chain ends in, so a
  // completion adds that one item instead of one per level: right recursion (`list: item ","
  // list | item`) otherwise completes an item at every earlier level in every set, quadratic
  // in items and time. leo[leo_begin[i] .. leo_begin[i+1]) belong to set i; empty in
  // hypothetical sets. A hypothetical set that completes at a set of the matcher's chart uses
  // an entry only for a chain of kDepthHashes hops or more, and then records an unknown read
  // (kUnknownRead): its walk depends on every set of the chain, more than a depth hash pins.
  std::vector<uint32_t> leo_begin{0};
  std::vector<LeoItem> leo;
  // Per set, kDepthHashes 128-bit hashes H_1..H_D of its pending kernel items (those whose
  // origin is an earlier set) with each origin replaced by the origin's H_{d-1} (H_0 is a
  // constant). The other pending items are predictions, a function of the kernel's dotted
  // items, so the kernel determines the whole set (the initial set, all predictions, hashes
  // every item). H_d determines the stack down to d-1 origin hops, which is all that a walk
  // touching only those sets depends on, so walk results can be cached by it (see matcher.cpp).
  static constexpr uint32_t kDepthHashes = 12;
  std::vector<uint64_t> depth_hash;  // [set][depth-1][lo, hi]
  // H_depth of `set` as {lo, hi} (depth 1..kDepthHashes).
  const uint64_t* depth_hash_of(uint32_t set, uint32_t depth) const {
    return &depth_hash[(static_cast<size_t>(set) * kDepthHashes + depth - 1) * 2];
  }
  // Per set of the matcher's own chart, its future anchors (see future.cpp): pairs (symbol X,
  // what follows X) over its pending kernel items, sorted and distinct; anchor a (in
  // [future_begin[i], future_begin[i+1])) is future_symbol[a], then the language
  // future_chain[a], then the future hashed in future_hash[2a, 2a+1].
  std::vector<uint32_t> future_begin{0};
  std::vector<uint32_t> future_symbol, future_chain;
  std::vector<uint64_t> future_hash;
  // Per set, a 128-bit hash of its whole anchor list: futures computed from a set are memoised
  // under it (see future_after), since sets with equal anchors recur.
  std::vector<uint64_t> anchors_hash;  // [set][lo, hi]
  // Per set, a 128-bit hash of its anchor list's shape: each anchor's symbol and chain, and
  // which anchors share a leaf, not the leaves themselves. How a future is combined from a
  // set's anchors depends on its shape alone, which recurs where the anchors do not (the same
  // statement under another stack), so the combination is memoised under it (see
  // future_after).
  std::vector<uint64_t> anchors_shape;  // [set][lo, hi]
  // Whether the matcher owning this chart uses future keys, fixed at its reset() (so the
  // anchors are complete whenever a key reads them); when false, sets get empty anchor lists
  // (never read), which saves the commit its future computations.
  bool anchored = true;
  // Whether sets keep anchors for merging items by their futures (see merge_equal_futures in
  // earley.cpp), whatever `anchored` says: switched on, with every earlier set anchored then,
  // at the first set with enough pending items of repeated dotted ids.
  bool merge_anchored = false;
  // Whether items may be merged by their futures at all (false in the trie search's copy of
  // a chart that does not merge).
  bool future_mergeable = true;
  // Whether new sets get their depth hashes (false only in the throwaway copy that
  // Matcher::search_text_tokens steps, whose sets no cache key reads; they get zeros).
  bool depth_hashed = true;
  // Whether every item is kept as it is (no merging by hashes or futures, no Leo items): the
  // chart of the capture shadow (Matcher::captures), where each completion counts.
  bool exact = false;
  uint32_t num_sets() const { return static_cast<uint32_t>(set_begin.size() - 1); }
};

// The parse configuration after some input, plus the history needed for exact rollback.
class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Runtime> runtime);

  // Write the allowed-token bitmask (ceil(vocab_size / 32) words). Safe to call concurrently
  // on the same matcher: it does not modify it.
  void fill_mask(uint32_t* words) const;
  // fill_mask for a caller that wants the caches a fill leaves behind, not its mask (the
  // prewarm's synthetic traffic): where the whole-stack key already holds the mask, nothing is
  // copied and `words` is left as it was; else as fill_mask.
  void warm_mask(uint32_t* words) const;
  // The cheap part of fill_mask: write the mask and return true when it is in the mask caches
  // (or the matcher has terminated), else return false and leave `words` untouched. Callers
  // that must release a lock for real work (the Python bindings and the GIL) try this first.
  // `keys`, when given, receives the configuration's cache keys for fill_mask_computed.
  struct FillKeys {
    std::pair<uint64_t, uint64_t> whole{0, 0}, future{0, 0};
    bool known = false;
  };
  bool fill_mask_if_cached(uint32_t* words, FillKeys* keys = nullptr) const;
  // The rest of fill_mask: compute the mask of a configuration that is not cached, and cache it
  // (under `keys` when fill_mask_if_cached has just computed them for this configuration).
  void fill_mask_computed(uint32_t* words, const FillKeys* keys = nullptr) const;
  // Consume one token. False (state unchanged) if it is not allowed. Throws std::out_of_range
  // when token_id >= vocab_size.
  bool accept_token(int64_t token_id);
  // Consume raw bytes as one history step. False (state unchanged) if not a viable prefix.
  bool accept_bytes(const std::string& bytes);
  // Undo the last n accepted steps. Throws std::out_of_range when n exceeds the history.
  void rollback(uint32_t n);
  void reset();
  bool is_accepting() const;
  bool is_terminated() const { return terminated_; }
  // Bytes every continuation must start with (stops at an accepting point or a choice).
  std::string jump_forward_bytes(uint32_t limit = 4096) const;
  uint32_t history_size() const { return static_cast<uint32_t>(history_.size()); }
  // Earley items held (every set, so rollback can return to any step): memory diagnostics.
  size_t chart_items() const { return chart_.items.size(); }
  // The lexemes the last Earley set expects when one ends at the current position (else
  // none), and keys of the configuration: for the prewarm's exploration of the grammar's
  // first configurations. The neighbourhood key covers the stack within `depth` - 1 origin
  // hops only (the bounded-depth mask key; see Chart::depth_hash).
  std::vector<uint32_t> lexemes_expected_here() const;
  std::pair<uint64_t, uint64_t> neighbourhood_key(uint32_t depth) const {
    return depth_mask_key(depth);
  }
  // Equal keys: equal future languages, hence equal masks (see future.cpp); the whole-stack
  // key when this matcher does not use future keys.
  std::pair<uint64_t, uint64_t> future_key() const;
  const Runtime& runtime() const { return *runtime_; }
  // The sampling temperature of the rules the live threads are inside (rule option
  // `temperature`; threads of other lexemes count as `default_temperature`): NaN when none
  // applies; the largest when they differ, with *differ set.
  double temperature(double default_temperature, bool* differ) const;
  // Whether a token or a character went past a max_tokens / max_chars budget (where the
  // body could not end there) since the last call; clears the flag.
  bool take_budget_overrun() {
    const bool overrun = budget_overrun_;
    budget_overrun_ = false;
    return overrun;
  }
  // Captures (rule option `capture`): every completion of a captured rule over a non-empty
  // span, recorded by the shadow while accepting (never by fill_mask), in completion order;
  // rollback removes those of the steps it undoes. Positions are byte offsets into the
  // shadow's accepted text.
  struct CaptureEvent {
    uint32_t capture;  // index into the runtime's capture names; kNoCaptureName: a stop
                       // marker's bytes, hidden from the captures around them
    uint64_t start, end;
  };
  const std::string& capture_name(uint32_t capture) const;
  // The captures as (name index, bytes): with `deduplicate`, one per occurrence (name and
  // start) at its first completion, with its longest span that does not end in ignored
  // text after a shorter completion; stop markers inside a span left out (see
  // docs/design/rule-limits.md).
  std::vector<std::pair<uint32_t, std::string>> captures(bool deduplicate) const;

 private:
  struct Snapshot {
    uint32_t num_sets;
    uint32_t num_items;
    std::vector<Thread> threads;
    bool frontier;
    bool terminated;
    uint64_t chars;
    uint32_t tokens;
    uint64_t text_size;  // the capture shadow's accepted text and events
    uint32_t events;
  };
  Snapshot snapshot() const;
  // The mask without the end tokens and without the configuration caches, written over every
  // word of `words`. Returns the depth D such that it is a function of the thread states, H_D
  // of their origins and of the last set (see GroupCache::depth_masks), or -1 when some exit
  // walk's dependencies are unknown.
  int fill_mask_uncached(uint32_t* words,
                         const std::pair<uint64_t, uint64_t>* thread_futures = nullptr) const;
  // fill_mask_uncached's exit walks by pending items (see compute_item_walk in matcher.cpp):
  // their results into the scratch's item_parts and composition, the depth their mask depends
  // on into `dependency`. False when a group built for one use was met (the caller then walks
  // by hypothetical sets). `thread_futures`, when given, holds each thread's part of the
  // future key (see future_mask_key), which keys its descent as well.
  bool fill_exits_by_items(int* dependency,
                           const std::pair<uint64_t, uint64_t>* thread_futures) const;
  // The frontier's token sets: their composition ids (see GroupCache::composed_masks), and
  // their tokens ORed into `words`.
  void append_frontier_token_sets(const Runtime& rt, Scratch& sc) const;
  void or_frontier_token_sets(uint32_t* words) const;
  std::pair<uint64_t, uint64_t> depth_mask_key(uint32_t depth) const;
  std::pair<uint64_t, uint64_t> whole_mask_key() const;
  std::pair<uint64_t, uint64_t> future_mask_key() const;
  // future_mask_key through the memo by anchors (FutureLanguages::keys_by_anchors).
  std::pair<uint64_t, uint64_t> memoised_future_mask_key() const;
  std::pair<uint64_t, uint64_t> anchored_configuration_key() const;
  bool uses_futures() const;
  // Whether fills probe and store masks under bounded-depth keys (see depth_keys_idle).
  bool uses_depth_keys() const;
  void restore(Snapshot&& snap);
  void restore_copy(const Snapshot& snap);
  void truncate_chart(const Snapshot& snap);  // the chart part of restore
  // A copy of `from`'s configuration without its history (for search_text_tokens).
  struct ConfigurationCopy {};
  Matcher(const Matcher& from, ConfigurationCopy)
      : runtime_(from.runtime_),
        chart_(from.chart_),
        threads_(from.threads_),
        frontier_(from.frontier_),
        terminated_(from.terminated_),
        chars_(from.chars_),
        tokens_(from.tokens_),
        next_set_first_token_(from.next_set_first_token_),
        set_chars_(from.set_chars_),
        set_first_token_(from.set_first_token_) {}
  // Rule limits (runtime/rule_limits.py). Whether the budgets apply to this grammar.
  bool counts_budgets() const;
  // Records the position of the Earley set just added (for the budgets).
  void note_new_set();
  // Whether a thread has spent its token budget where its body can end: such a thread may
  // not take another token (the occurrence must end here).
  bool token_budget_spent(const Thread& thread) const;
  bool has_spent_threads() const;
  // This configuration without the threads whose token budget is spent.
  Matcher without_spent_threads() const;
  void drop_spent_threads();
  // The capture shadow: a matcher over the same runtime with an exact chart, stepped after
  // this one by every accepted token and string, which records completions.
  struct ExactChart {};
  Matcher(std::shared_ptr<const Runtime> runtime, ExactChart);
  bool accept_token_here(int64_t token_id);
  bool accept_bytes_here(const std::string& bytes);
  // Records the captured completions in the set just added from `scans` (exact chart only).
  void record_captures(const std::vector<std::pair<uint32_t, uint32_t>>& scans);
  struct Shadow {
    std::unique_ptr<Matcher> matcher;
    Shadow() = default;
    Shadow(const Shadow& other);
    Shadow& operator=(const Shadow& other);
    Shadow(Shadow&&) noexcept = default;
    Shadow& operator=(Shadow&&) noexcept = default;
  };
  // OR into `words` every text token whose bytes the matcher can consume, found by stepping a
  // copy of it through the vocabulary trie.
  void search_text_tokens(uint32_t* words) const;
  bool step_byte(uint8_t byte, const std::vector<std::pair<uint32_t, uint32_t>>* extra_scans);
  void start_threads_for_last_set();
  // Drop threads whose DFA state and origin set's structural hash equal another's.
  void merge_equivalent_threads();
  bool accepting_now() const;
  // Set the bits of end tokens that a mask could also take up as text or through a token set
  // by whether the input is accepted (see Runtime::shadowed_end_ids): masks are cached with
  // them as text or tokens.
  void settle_shadowed_end_tokens(uint32_t* words) const;
  // fill_mask_if_cached and fill_mask_computed before settle_shadowed_end_tokens.
  bool lookup_cached_mask(uint32_t* words, FillKeys* keys) const;
  void compute_mask(uint32_t* words, const FillKeys* keys) const;

  std::shared_ptr<const Runtime> runtime_;
  Chart chart_;
  std::vector<Thread> threads_;
  bool frontier_ = true;  // the last Earley set ends at the current position
  bool terminated_ = false;
  std::vector<Snapshot> history_;
  // Rule limits: codepoints and tokens consumed so far, and per Earley set the codepoints
  // before it and the index of the first token whose bytes come after it (kept only when
  // the grammar has budgets). next_set_first_token_ is that index for sets the next byte
  // step adds.
  uint64_t chars_ = 0;
  uint32_t tokens_ = 0;
  uint32_t next_set_first_token_ = 0;
  bool at_token_end_ = false;  // step_byte is reading the last byte of an accepted token
  std::vector<uint64_t> set_chars_;
  std::vector<uint32_t> set_first_token_;
  bool budget_overrun_ = false;
  // Captures: the shadow (in a matcher of a grammar with captures), and in the shadow
  // itself (exact_) the accepted text, each set's byte position and the events.
  Shadow shadow_;
  bool exact_ = false;
  std::string text_;
  std::vector<uint64_t> set_pos_;
  std::vector<CaptureEvent> events_;
};

// Fill rows of a [rows, words] int32 buffer from several matchers with `threads` workers.
void fill_masks_parallel(const std::vector<const Matcher*>& matchers, uint32_t* base,
                         uint32_t words, const std::vector<uint32_t>& rows, unsigned threads);

}  // namespace gramkiln
