// Future-language keys: a hash of what may follow a parser configuration, equal for
// configurations whose charts differ but whose futures do not.
//
// The whole-stack mask key hashes the items of the chart, so `x = a + b`, `return a + b` and
// `int x = a + b` inside the same block get three keys although the same strings may follow
// each (`;` then the rest of the block); and `a + b * c` and `b * c` another two, although
// after `c` both may go on with any operator. This file hashes the language instead, exactly:
//
// * A pending kernel item j = (C -> g . X d, r') of a set promises "X, then F_j", where F_j is
//   the future of the item advanced past X: d, then whatever follows C at r'. A set's anchors
//   are the pairs (X, F_j) over its pending kernel items (the initial set has one: the start
//   symbol, then the end of input).
// * What follows when a symbol A completes at set r, or a production predicted at r is at a
//   given dot, is the union over r's anchors (X, F) of L(start, X) . F, where L(start, X) is a
//   regular language over grammar symbols: the rest of the production, then the rest of every
//   production that the prediction closure of X chains above it (left-corner paths up to X).
//   It depends only on the grammar, so it gets an id at first use: its canonical minimal
//   automaton, interned. Equal ids mean equal symbol languages, hence equal byte languages.
// * A future is kept as (chain id, leaf): the language `chain` followed by the leaf, which is
//   the end of input or a hash of several (id, leaf) pairs with distinct leaves. Pairs are
//   normalised as they are combined: L . (c, leaf) becomes (L.c, leaf), pairs with one leaf
//   become one pair (the union of their ids), and a single pair is a chain, not a new leaf.
//   So the nesting of left-recursive rules (`a + b * c` against `b * c`), unit rules and how a
//   future is split between productions and sets do not show in the hash.
//
// Equal futures (chain id and leaf) therefore mean equal future languages, up to 128-bit hash
// collisions, and a mask, a function of the future language, can be cached under them. The key
// is built in Matcher::future_mask_key; whether a runtime uses it at all, the prewarm decides
// (future_keys_pay in matcher.cpp).
#include <algorithm>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime_internal.hpp"

namespace gramkiln {

namespace {

constexpr uint32_t kMaxAutomatonStates = 128;
constexpr uint32_t kMaxChainStates = 16;
// New languages one commit may canonicalise (each costs ~35-46 k instructions); fills
// canonicalise none and the prewarm has no limit (see FutureBudget). What a step may not
// combine stays a leaf of its own: exact, it merges less, and a later step combines it.
constexpr uint32_t kLanguagesPerStep = 1;

bool nullable_symbol(const Runtime& rt, uint32_t symbol) {
  return symbol < rt.symbol_nullable.size() && rt.symbol_nullable[symbol];
}

uint32_t dotted_lhs(const Runtime& rt, uint32_t dotted) {
  return rt.prod_lhs[rt.dotted_prod[dotted]];
}

// An automaton with empty moves, built to be canonicalised.
struct Nfa {
  std::vector<uint8_t> accepting;
  std::vector<std::vector<uint32_t>> empty_moves;
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> moves;  // (letter, target)
  uint32_t add(bool accept) {
    accepting.push_back(accept ? 1 : 0);
    empty_moves.emplace_back();
    moves.emplace_back();
    return static_cast<uint32_t>(accepting.size() - 1);
  }
  // Copy a canonical form (see canonical_id) in; returns its start state.
  uint32_t add_form(const std::vector<uint32_t>& form) {
    const uint32_t base = static_cast<uint32_t>(accepting.size());
    size_t at = 1;
    for (uint32_t s = 0; s < form[0]; ++s) {
      const uint32_t state = add(form[at] != 0);
      const uint32_t count = form[at + 1];
      at += 2;
      for (uint32_t e = 0; e < count; ++e, at += 2) {
        moves[state].emplace_back(form[at], base + form[at + 1]);
      }
    }
    return base;
  }
};

uint32_t unique_id(FutureLanguages& fl) {
  if (fl.next_unique >= (1u << 30)) fl.exhausted.store(true, std::memory_order_relaxed);
  return FutureLanguages::kUniqueBase + (fl.next_unique++ & 0x7fffffffu);
}

bool is_unique(uint32_t id) { return id >= FutureLanguages::kUniqueBase; }

uint32_t intern(FutureLanguages& fl, std::vector<uint32_t>&& form) {
  if (fl.canonical.size() >= FutureLanguages::kMaxLanguages) {
    const auto found = fl.canonical.find(form);
    return found != fl.canonical.end() ? found->second : unique_id(fl);
  }
  const auto [it, added] =
      fl.canonical.emplace(std::move(form), static_cast<uint32_t>(fl.canonical.size() + 1));
  if (added) fl.forms.push_back(&it->first);
  return it->second;
}

// The id of the language of `nfa` from `start`: 0 when empty, an interned canonical form (the
// minimal DFA, live states only, numbered breadth-first with letters in order: equal languages
// give equal forms), or a unique id past kMaxAutomatonStates.
uint32_t canonical_id(FutureLanguages& fl, const Nfa& nfa, uint32_t start) {
  // Subsets of NFA states are bitsets of `width` words; DFA state d is subsets[d * width ..].
  // Everything lives in per-thread buffers: new languages are canonicalised on the fill path.
  const size_t n = nfa.accepting.size();
  const size_t width = (n + 63) / 64;
  thread_local std::vector<uint64_t> closure, subsets, scratch;
  thread_local std::vector<uint32_t> stack, table;
  auto bit = [](const uint64_t* set, size_t i) { return (set[i >> 6] >> (i & 63)) & 1u; };
  // Empty-move closure of every NFA state.
  closure.assign(n * width, 0);
  for (size_t s = 0; s < n; ++s) {
    uint64_t* set = &closure[s * width];
    set[s >> 6] |= uint64_t{1} << (s & 63);
    stack.assign(1, static_cast<uint32_t>(s));
    while (!stack.empty()) {
      const uint32_t node = stack.back();
      stack.pop_back();
      for (const uint32_t next : nfa.empty_moves[node]) {
        if (bit(set, next)) continue;
        set[next >> 6] |= uint64_t{1} << (next & 63);
        stack.push_back(next);
      }
    }
  }
  // Subset construction, DFA states found through an open-addressing table of their hashes.
  constexpr size_t kTable = 2 * kMaxAutomatonStates;
  table.assign(kTable, kComplete);
  subsets.clear();
  std::vector<uint8_t> accepting;
  std::vector<uint32_t> edge_offsets{0};
  std::vector<std::pair<uint32_t, uint32_t>> edges;  // (letter, target), by state
  auto hash_of = [&](const uint64_t* set) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (size_t w = 0; w < width; ++w) h = mix64(h ^ set[w]);
    return static_cast<size_t>(h);
  };
  auto state_of = [&](const uint64_t* set) -> int64_t {
    size_t slot = hash_of(set) & (kTable - 1);
    for (; table[slot] != kComplete; slot = (slot + 1) & (kTable - 1)) {
      if (std::equal(set, set + width, &subsets[table[slot] * width])) return table[slot];
    }
    const size_t count = accepting.size();
    if (count >= kMaxAutomatonStates) return -1;
    table[slot] = static_cast<uint32_t>(count);
    subsets.insert(subsets.end(), set, set + width);
    bool accept = false;
    for (size_t i = 0; i < n && !accept; ++i) accept = bit(set, i) && nfa.accepting[i];
    accepting.push_back(accept ? 1 : 0);
    return static_cast<int64_t>(count);
  };
  if (state_of(&closure[static_cast<size_t>(start) * width]) < 0) return unique_id(fl);
  std::vector<std::pair<uint32_t, uint32_t>> moves;
  for (size_t d = 0; d < accepting.size(); ++d) {
    moves.clear();
    for (size_t i = 0; i < n; ++i) {
      if (bit(&subsets[d * width], i)) {
        moves.insert(moves.end(), nfa.moves[i].begin(), nfa.moves[i].end());
      }
    }
    std::sort(moves.begin(), moves.end());
    for (size_t i = 0; i < moves.size();) {
      scratch.assign(width, 0);
      size_t j = i;
      for (; j < moves.size() && moves[j].first == moves[i].first; ++j) {
        const uint64_t* from = &closure[static_cast<size_t>(moves[j].second) * width];
        for (size_t w = 0; w < width; ++w) scratch[w] |= from[w];
      }
      const int64_t to = state_of(scratch.data());
      if (to < 0) return unique_id(fl);
      edges.emplace_back(moves[i].first, static_cast<uint32_t>(to));
      i = j;
    }
    edge_offsets.push_back(static_cast<uint32_t>(edges.size()));
  }
  // Live states: those that can reach acceptance; moves into the others are dropped.
  const size_t states = accepting.size();
  std::vector<uint8_t> live(accepting.begin(), accepting.end());
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t d = 0; d < states; ++d) {
      for (uint32_t e = edge_offsets[d]; !live[d] && e < edge_offsets[d + 1]; ++e) {
        if (live[edges[e].second]) live[d] = changed = true;
      }
    }
  }
  if (!live[0]) return 0;
  // Moore refinement: states with the same acceptance and the same letters into the same
  // classes are merged until no class splits. Signatures are compared whole (a hash could
  // merge two inequivalent states, and the canonical form must be exact).
  std::vector<uint32_t> cls(states), signature, sig_offsets, order(states), next(states);
  for (size_t d = 0; d < states; ++d) cls[d] = live[d] ? accepting[d] : 2;
  size_t classes = 0;
  for (;;) {
    signature.clear();
    sig_offsets.assign(1, 0);
    for (size_t d = 0; d < states; ++d) {
      signature.push_back(cls[d]);
      for (uint32_t e = edge_offsets[d]; e < edge_offsets[d + 1]; ++e) {
        if (!live[edges[e].second]) continue;
        signature.push_back(edges[e].first);
        signature.push_back(cls[edges[e].second]);
      }
      sig_offsets.push_back(static_cast<uint32_t>(signature.size()));
    }
    auto less = [&](uint32_t a, uint32_t b) {
      return std::lexicographical_compare(
          signature.begin() + sig_offsets[a], signature.begin() + sig_offsets[a + 1],
          signature.begin() + sig_offsets[b], signature.begin() + sig_offsets[b + 1]);
    };
    for (size_t d = 0; d < states; ++d) order[d] = static_cast<uint32_t>(d);
    std::sort(order.begin(), order.end(), less);
    uint32_t count = 0;
    for (size_t i = 0; i < states; ++i) {
      if (i > 0 && less(order[i - 1], order[i])) ++count;
      next[order[i]] = count;
    }
    cls.swap(next);
    if (count + 1 == classes) break;
    classes = count + 1;
  }
  // Canonical numbering: breadth-first from the start class, letters in order.
  std::vector<int64_t> number(classes, -1);
  std::vector<uint32_t> visit, representative(classes);
  for (size_t d = 0; d < states; ++d) representative[cls[d]] = static_cast<uint32_t>(d);
  number[cls[0]] = 0;
  visit.push_back(cls[0]);
  std::vector<uint32_t> form{0};
  for (size_t i = 0; i < visit.size(); ++i) {
    const uint32_t d = representative[visit[i]];
    form.push_back(accepting[d]);
    const size_t count_at = form.size();
    form.push_back(0);
    for (uint32_t e = edge_offsets[d]; e < edge_offsets[d + 1]; ++e) {
      const uint32_t to = edges[e].second;
      if (!live[to]) continue;
      if (number[cls[to]] < 0) {
        number[cls[to]] = static_cast<int64_t>(visit.size());
        visit.push_back(cls[to]);
      }
      form.push_back(edges[e].first);
      form.push_back(static_cast<uint32_t>(number[cls[to]]));
      ++form[count_at];
    }
  }
  form[0] = static_cast<uint32_t>(visit.size());
  return intern(fl, std::move(form));
}

void initialise(const Runtime& rt, FutureLanguages& fl) {
  // Room up front (~200 KB each), so that these memos seldom grow inside a fill or commit:
  // the C-like prewarm leaves ~2,700 entries, and a doubling past 2,048 was a rehash on the
  // decode's path.
  fl.ids.reserve(4096);
  fl.concatenations.reserve(4096);
  fl.unions.reserve(4096);
  const uint32_t symbols = rt.num_symbols();
  std::vector<std::vector<uint32_t>> after(symbols);
  const uint32_t prods = static_cast<uint32_t>(rt.prod_lhs.size());
  for (uint32_t p = 0; p < prods; ++p) {
    for (uint32_t k = rt.prod_offsets[p]; k < rt.prod_offsets[p + 1]; ++k) {
      const uint32_t symbol = rt.prod_rhs[k];
      after[symbol].push_back(rt.prod_dotted[p] + (k - rt.prod_offsets[p]) + 1);
      if (!nullable_symbol(rt, symbol)) break;
    }
  }
  fl.corner_offsets.assign(1, 0);
  for (const auto& list : after) {
    fl.corner_after.insert(fl.corner_after.end(), list.begin(), list.end());
    fl.corner_offsets.push_back(static_cast<uint32_t>(fl.corner_after.size()));
  }
  fl.epsilon_id = intern(fl, {1, 1, 0});  // one accepting state, no moves
  fl.ready = true;
}

// The nonterminals predicted along with nonterminal `x` (x included), sorted.
const std::vector<uint32_t>& predicted_with(const Runtime& rt, FutureLanguages& fl, uint32_t x) {
  auto found = fl.predicted.find(x);
  if (found != fl.predicted.end()) return found->second;
  std::vector<uint32_t> list{x};
  std::vector<uint8_t> seen(rt.num_nonterminals, 0);
  seen[x] = 1;
  for (size_t i = 0; i < list.size(); ++i) {
    const uint32_t nt = list[i];
    for (uint32_t k = rt.nt_prod_offsets[nt]; k < rt.nt_prod_offsets[nt + 1]; ++k) {
      const uint32_t p = rt.nt_prods[k];
      for (uint32_t at = rt.prod_offsets[p]; at < rt.prod_offsets[p + 1]; ++at) {
        const uint32_t symbol = rt.prod_rhs[at];
        if (symbol < rt.num_nonterminals && !seen[symbol]) {
          seen[symbol] = 1;
          list.push_back(symbol);
        }
        if (!nullable_symbol(rt, symbol)) break;
      }
    }
  }
  std::sort(list.begin(), list.end());
  return fl.predicted.emplace(x, std::move(list)).first->second;
}

// Per nonterminal x, built at first use: a bitset over symbols, set for x and for the left
// corners of the productions of the nonterminals predicted with x, i.e. the symbols A whose
// completion can lead to x completing (L("A just completed", x) is not empty).
const std::vector<uint64_t>& starts_reaching(const Runtime& rt, FutureLanguages& fl, uint32_t x) {
  if (fl.reaching.empty()) fl.reaching.resize(rt.num_nonterminals);
  std::vector<uint64_t>& bits = fl.reaching[x];
  if (!bits.empty()) return bits;
  bits.assign((rt.num_symbols() + 63) / 64, 0);
  auto set = [&](uint32_t symbol) { bits[symbol / 64] |= uint64_t{1} << (symbol % 64); };
  set(x);
  for (const uint32_t nt : predicted_with(rt, fl, x)) {
    for (uint32_t k = rt.nt_prod_offsets[nt]; k < rt.nt_prod_offsets[nt + 1]; ++k) {
      const uint32_t p = rt.nt_prods[k];
      for (uint32_t at = rt.prod_offsets[p]; at < rt.prod_offsets[p + 1]; ++at) {
        set(rt.prod_rhs[at]);
        if (!nullable_symbol(rt, rt.prod_rhs[at])) break;
      }
    }
  }
  return bits;
}

// Whether `first` completing can lead to `x` completing. Most anchors of a set cannot follow a
// given completed symbol: answered from a bitset, with no probe of the language memo (a fill's
// new futures probed it once per anchor and thread). A lexeme or token set leads only to itself.
bool leads_to(const Runtime& rt, FutureLanguages& fl, uint32_t first, uint32_t x) {
  if (first == x) return true;
  if (x >= rt.num_nonterminals) return false;
  return (starts_reaching(rt, fl, x)[first / 64] >> (first % 64)) & 1u;
}

// L(start, x) (see the top of the file) as an id.
uint32_t compute_language_id(const Runtime& rt, FutureLanguages& fl, uint32_t start, uint32_t x) {
  const uint32_t dotted_count = static_cast<uint32_t>(rt.dotted_next.size());
  static const std::vector<uint32_t> kNone;
  const std::vector<uint32_t>& allowed =
      x < rt.num_nonterminals ? predicted_with(rt, fl, x) : kNone;
  auto is_allowed = [&](uint32_t nt) {
    return std::binary_search(allowed.begin(), allowed.end(), nt);
  };
  // Grammar nodes: dotted ids (the rest of that production still to read), and dotted_count + A
  // ("A just completed": accept when A is x; else advance the predictions waiting for A).
  const uint32_t first_symbol =
      start >= dotted_count ? start - dotted_count : dotted_lhs(rt, start);
  if (!leads_to(rt, fl, first_symbol, x)) return 0;  // the common empty case
  Nfa nfa;
  std::unordered_map<uint32_t, uint32_t> state_of_node;
  std::vector<uint32_t> nodes;
  auto state_of = [&](uint32_t node) {
    const auto [it, added] =
        state_of_node.emplace(node, static_cast<uint32_t>(nfa.accepting.size()));
    if (added) {
      nfa.add(node == dotted_count + x);
      nodes.push_back(node);
    }
    return it->second;
  };
  state_of(start);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const uint32_t node = nodes[i];
    if (node < dotted_count) {
      const uint32_t next = rt.dotted_next[node];
      if (next == kComplete) {
        const uint32_t to = state_of(dotted_count + dotted_lhs(rt, node));
        nfa.empty_moves[i].push_back(to);
      } else {
        const uint32_t to = state_of(node + 1);
        nfa.moves[i].emplace_back(next, to);
      }
      continue;
    }
    const uint32_t symbol = node - dotted_count;
    for (uint32_t k = fl.corner_offsets[symbol]; k < fl.corner_offsets[symbol + 1]; ++k) {
      const uint32_t after = fl.corner_after[k];
      if (!is_allowed(dotted_lhs(rt, after))) continue;
      const uint32_t to = state_of(after);
      nfa.empty_moves[i].push_back(to);
    }
  }
  return canonical_id(fl, nfa, 0);
}

// Whether this computation may canonicalise one more language (and count it). A future built
// past the budget keeps the uncombined parts as leaves: exact, it merges less, and a later
// computation with budget left combines them.
bool take_budget() {
  if (FutureWork::left == 0) {
    FutureWork::short_of_budget = true;
    return false;
  }
  if (FutureWork::left != 0xffffffffu) --FutureWork::left;
  return true;
}

uint32_t language_id(const Runtime& rt, FutureLanguages& fl, uint32_t start, uint32_t x) {
  const uint32_t dotted_count = static_cast<uint32_t>(rt.dotted_next.size());
  if (start >= dotted_count && !leads_to(rt, fl, start - dotted_count, x)) return 0;
  const uint64_t key = (static_cast<uint64_t>(start) << 32) | x;
  if (const uint32_t* found = fl.ids.find(key)) return *found;
  // Past the budget, a provisional id that names this language only (a later computation with
  // budget left gives the canonical one). A large grammar's automaton can cost 100 k+
  // instructions, too much inside a fill.
  if (!take_budget()) {
    if (const uint32_t* found = fl.provisional.find(key)) return *found;
    const uint32_t id = unique_id(fl);
    fl.provisional.emplace(key, id);
    return id;
  }
  const uint32_t id = compute_language_id(rt, fl, start, x);
  fl.ids.emplace(key, id);
  return id;
}

// Whether a and b are small enough to combine: chains stay short (a future's chain would
// otherwise grow into the whole stack as one automaton, canonicalised anew at every new depth).
bool combinable(const FutureLanguages& fl, uint32_t a, uint32_t b) {
  return !is_unique(a) && !is_unique(b) &&
         (*fl.forms[a - 1])[0] + (*fl.forms[b - 1])[0] <= kMaxChainStates;
}

// The id `build` gives the language it makes of a and b, memoised in `memo` by (a, b); 0 when
// the two are too large to combine, or (not memoised) when the budget is spent.
template <typename Build>
uint32_t combine(FutureLanguages& fl, IdMap& memo, uint32_t a, uint32_t b, Build build) {
  const uint64_t key = (static_cast<uint64_t>(a) << 32) | b;
  if (const uint32_t* found = memo.find(key)) return *found;
  const bool can = combinable(fl, a, b);
  if (can && !take_budget()) return 0;
  const uint32_t id = can ? build() : 0;
  memo.emplace(key, id);
  return id;
}

// The language a . b, or 0 (see combine).
uint32_t concatenate(FutureLanguages& fl, uint32_t a, uint32_t b) {
  if (a == fl.epsilon_id) return b;
  if (b == fl.epsilon_id) return a;
  return combine(fl, fl.concatenations, a, b, [&]() {
    Nfa nfa;
    const uint32_t first = nfa.add_form(*fl.forms[a - 1]);
    const uint32_t second = nfa.add_form(*fl.forms[b - 1]);
    for (uint32_t s = first; s < second; ++s) {
      if (nfa.accepting[s]) {
        nfa.accepting[s] = 0;
        nfa.empty_moves[s].push_back(second);
      }
    }
    return canonical_id(fl, nfa, first);
  });
}

// The language a | b, or 0 (see combine).
uint32_t unite(FutureLanguages& fl, uint32_t a, uint32_t b) {
  if (a == b) return a;
  if (a > b) std::swap(a, b);
  return combine(fl, fl.unions, a, b, [&]() {
    Nfa nfa;
    const uint32_t start = nfa.add(false);
    const uint32_t first = nfa.add_form(*fl.forms[a - 1]);
    const uint32_t second = nfa.add_form(*fl.forms[b - 1]);
    nfa.empty_moves[start] = {first, second};
    return canonical_id(fl, nfa, start);
  });
}

bool leaf_less(const Future& a, const Future& b) {
  if (a.lo != b.lo) return a.lo < b.lo;
  if (a.hi != b.hi) return a.hi < b.hi;
  return a.chain < b.chain;
}

// A leaf standing for the union of `pairs` (sorted), each a chain then a leaf.
Future leaf_of(const FutureLanguages& fl, const Future* pairs, size_t count) {
  uint64_t lo = 0x3c6ef372fe94f82bull, hi = 0xa54ff53a5f1d36f1ull ^ count;
  for (size_t i = 0; i < count; ++i) {
    const Future& pair = pairs[i];
    lo = mix64(lo ^ mix64(pair.chain * 0x9e3779b97f4a7c15ull + pair.lo));
    hi = mix64(hi + mix64(pair.hi ^ (static_cast<uint64_t>(pair.chain) << 17)));
  }
  return Future{fl.epsilon_id, lo, hi ^ mix64(lo)};
}

// The shape of an anchor list (see Chart::anchors_shape): per anchor its symbol, its chain, and
// the classes of its leaf and of the leaf it becomes when its chain cannot be combined
// (leaf_of over it alone), numbered by first occurrence over both kinds, so that every equality
// between the leaves compute_future may compare is part of the shape.
std::pair<uint64_t, uint64_t> anchor_shape(
    const FutureLanguages& fl, const std::vector<std::pair<uint32_t, Future>>& entries) {
  // Classes by a scan of those seen so far; past kScanned of them (sets with hundreds of
  // anchors: a schema object whose properties may come in any order), by a hash map, so that
  // a commit's shape stays linear in its anchors.
  constexpr size_t kScanned = 32;
  thread_local std::vector<std::pair<uint64_t, uint64_t>> leaves;
  thread_local std::unordered_map<uint64_t, std::vector<uint32_t>> by_lo;
  leaves.clear();
  if (!by_lo.empty()) by_lo.clear();  // clear() writes the whole bucket array, even when empty
  auto class_of = [&](uint64_t lo, uint64_t hi) -> uint64_t {
    if (leaves.size() <= kScanned) {
      for (size_t c = 0; c < leaves.size(); ++c) {
        if (leaves[c].first == lo && leaves[c].second == hi) return c;
      }
      if (leaves.size() == kScanned) {  // the map takes over: it indexes every class so far
        for (size_t c = 0; c < leaves.size(); ++c) {
          by_lo[leaves[c].first].push_back(static_cast<uint32_t>(c));
        }
      }
    } else {
      const auto found = by_lo.find(lo);
      if (found != by_lo.end()) {
        for (const uint32_t c : found->second) {
          if (leaves[c].second == hi) return c;
        }
      }
    }
    leaves.emplace_back(lo, hi);
    if (leaves.size() > kScanned) by_lo[lo].push_back(static_cast<uint32_t>(leaves.size() - 1));
    return leaves.size() - 1;
  };
  uint64_t lo = 0x1f83d9abfb41bd6bull, hi = 0x5be0cd19137e2179ull ^ entries.size();
  for (const auto& [symbol, future] : entries) {
    const Future wrapped = leaf_of(fl, &future, 1);
    const uint64_t classes =
        class_of(future.lo, future.hi) << 32 | class_of(wrapped.lo, wrapped.hi);
    const uint64_t tag = mix64((static_cast<uint64_t>(symbol) << 32 | future.chain) ^ classes);
    lo = mix64(lo ^ tag);
    hi = mix64(hi + mix64(tag ^ classes * 0x9e3779b97f4a7c15ull));
  }
  return {lo, hi};
}

// A pair of a future being combined, and where its leaf comes from: anchor `anchor` (an offset
// in its set's anchor list), or with kWrapped the leaf that anchor becomes on its own.
struct SourcedPair {
  Future pair;
  uint32_t anchor;
};
constexpr uint32_t kWrapped = 0x80000000u;

bool sourced_leaf_less(const SourcedPair& a, const SourcedPair& b) {
  return leaf_less(a.pair, b.pair);
}

// The future a combination's pairs stand for: the one pair itself, else a new leaf over them
// (none only for a set without anchors, which has no future). Sorts `pairs`.
Future future_of_pairs(const FutureLanguages& fl, std::vector<Future>& pairs) {
  if (pairs.size() == 1) return pairs[0];
  std::sort(pairs.begin(), pairs.end(), leaf_less);
  return leaf_of(fl, pairs.data(), pairs.size());
}

// The pair list `recipe` gives for the anchors of `set` (see compute_future).
void apply_recipe(const FutureLanguages& fl, const Chart& chart, uint32_t set,
                  const FutureLanguages::RecipeEntry* recipe, uint32_t count,
                  std::vector<Future>& pairs) {
  pairs.clear();
  const uint32_t base = chart.future_begin[set];
  for (uint32_t e = 0; e < count; ++e) {
    const uint32_t a = base + (recipe[e].anchor & ~kWrapped);
    const Future anchor{chart.future_chain[a], chart.future_hash[2 * a],
                        chart.future_hash[2 * a + 1]};
    if (recipe[e].anchor & kWrapped) {
      const Future leaf = leaf_of(fl, &anchor, 1);
      pairs.push_back(Future{recipe[e].chain, leaf.lo, leaf.hi});
    } else {
      pairs.push_back(Future{recipe[e].chain, anchor.lo, anchor.hi});
    }
  }
}

// future_after without its memos: from the anchors of `set`, normalised (see the top). Its
// pairs, each with the chain it ends with and the anchor its leaf comes from, go to `recipe`:
// what any set of the same shape combines to (see future_after).
Future compute_future(const Runtime& rt, FutureLanguages& fl, const Chart& chart, uint32_t start,
                      uint32_t set, std::vector<FutureLanguages::RecipeEntry>& recipe) {
  thread_local std::vector<SourcedPair> sourced;
  thread_local std::vector<Future> pairs;
  sourced.clear();
  const uint32_t base = chart.future_begin[set];
  for (uint32_t a = base; a < chart.future_begin[set + 1]; ++a) {
    const uint32_t id = language_id(rt, fl, start, chart.future_symbol[a]);
    if (id == 0) continue;
    const Future anchor{chart.future_chain[a], chart.future_hash[2 * a],
                        chart.future_hash[2 * a + 1]};
    const uint32_t chain = concatenate(fl, id, anchor.chain);
    if (chain != 0) {
      sourced.push_back({Future{chain, anchor.lo, anchor.hi}, a - base});
    } else {  // too large to combine: the anchor's future becomes a leaf of its own
      const Future leaf = leaf_of(fl, &anchor, 1);
      sourced.push_back({Future{id, leaf.lo, leaf.hi}, (a - base) | kWrapped});
    }
  }
  // Pairs with one leaf become one: the union of the languages leading to it.
  std::sort(sourced.begin(), sourced.end(), sourced_leaf_less);
  size_t kept = 0;
  for (size_t i = 0; i < sourced.size(); ++i) {
    const Future& pair = sourced[i].pair;
    if (kept > 0 && sourced[kept - 1].pair.lo == pair.lo && sourced[kept - 1].pair.hi == pair.hi) {
      const uint32_t united = unite(fl, sourced[kept - 1].pair.chain, pair.chain);
      if (united != 0) {
        sourced[kept - 1].pair.chain = united;
        continue;
      }
    }
    sourced[kept++] = sourced[i];
  }
  sourced.resize(kept);
  recipe.clear();
  pairs.clear();
  for (const SourcedPair& s : sourced) {
    recipe.push_back(FutureLanguages::RecipeEntry{s.pair.chain, s.anchor});
    pairs.push_back(s.pair);
  }
  // Sorted again there: a pair whose union with the next failed may now order after it.
  return future_of_pairs(fl, pairs);
}

}  // namespace

Future future_after(const Runtime& rt, FutureLanguages& fl, const Chart& chart, uint32_t start,
                    uint32_t set) {
  if (!fl.ready) initialise(rt, fl);
  const uint64_t tag = mix64(start + 0x2545f4914f6cdd1dull);
  const std::pair<uint64_t, uint64_t> key{mix64(chart.anchors_hash[2 * set] ^ tag),
                                          chart.anchors_hash[2 * set + 1] + tag};
  if (const FutureLanguages::MemoValue* found = fl.futures.find(key)) {
    return Future{found->chain, found->lo, found->hi};
  }
  // Then by the set's shape: a new stack gives the set new anchors, but the same statement
  // gives it the same shape, and the languages and unions the combination needs (several
  // probes of large memos each) are those of the recipe kept for it.
  const std::pair<uint64_t, uint64_t> shape_key{mix64(chart.anchors_shape[2 * set] ^ tag),
                                                chart.anchors_shape[2 * set + 1] - tag};
  thread_local std::vector<Future> pairs;
  if (const FutureLanguages::Recipe* recipe = fl.recipes.find(shape_key)) {
    apply_recipe(fl, chart, set, fl.recipe_entries.data() + recipe->begin, recipe->count, pairs);
    fl.recipe_hits.fetch_add(1, std::memory_order_relaxed);
    return future_of_pairs(fl, pairs);
  }
  const bool was_short = FutureWork::short_of_budget;
  FutureWork::short_of_budget = false;
  thread_local std::vector<FutureLanguages::RecipeEntry> recipe;
  const Future future = compute_future(rt, fl, chart, start, set, recipe);
  // One built short of the budget is exact but not canonical: kept out of the memos, so that a
  // later computation with budget left gives the canonical one.
  if (!FutureWork::short_of_budget) {
    if (fl.futures.size() >= FutureLanguages::kMaxMemo) fl.futures.clear();
    fl.futures.emplace(key, FutureLanguages::MemoValue{future.chain, future.lo, future.hi});
    if (fl.recipes.size() >= FutureLanguages::kMaxMemo) {
      fl.recipes.clear();
      fl.recipe_entries.clear();
    }
    fl.recipes.emplace(shape_key,
                       FutureLanguages::Recipe{static_cast<uint32_t>(fl.recipe_entries.size()),
                                               static_cast<uint32_t>(recipe.size())});
    fl.recipe_entries.insert(fl.recipe_entries.end(), recipe.begin(), recipe.end());
  }
  FutureWork::short_of_budget = FutureWork::short_of_budget || was_short;
  return future;
}

thread_local bool FutureWork::prewarming = false;
thread_local uint32_t FutureWork::left = 0xffffffffu;
thread_local bool FutureWork::short_of_budget = false;

namespace {

// Append the anchors of set `self`, items [begin, end) of `chart`.
void anchor_set(const Runtime& rt, Chart& chart, uint32_t self, size_t begin, size_t end,
                uint32_t languages) {
  FutureBudget budget(languages);
  FutureLanguages& fl = *rt.futures;
  std::lock_guard<std::mutex> lock(fl.mutex);
  if (!fl.ready) initialise(rt, fl);
  thread_local std::vector<std::pair<uint32_t, Future>> entries;
  entries.clear();
  if (self == 0) {
    entries.emplace_back(rt.start, Future{fl.epsilon_id, kEndOfInputLo, kEndOfInputHi});
  } else {
    thread_local std::vector<std::pair<uint64_t, Future>> memo;  // (dotted, origin) -> future
    memo.clear();
    for (size_t i = begin; i < end; ++i) {
      const Item item = chart.items[i];
      const uint32_t next = rt.dotted_next[item.dotted];
      if (next == kComplete || item.origin == self) continue;
      const uint64_t at = (static_cast<uint64_t>(item.dotted + 1) << 32) | item.origin;
      const Future* known = nullptr;
      for (const auto& entry : memo) {
        if (entry.first == at) {
          known = &entry.second;
          break;
        }
      }
      const Future future =
          known ? *known : future_after(rt, fl, chart, item.dotted + 1, item.origin);
      if (!known) memo.emplace_back(at, future);
      entries.emplace_back(next, future);
    }
    // Sorted and distinct, so that equal anchor sets read alike.
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
      if (a.first != b.first) return a.first < b.first;
      return leaf_less(a.second, b.second);
    });
    entries.erase(std::unique(entries.begin(), entries.end(),
                              [](const auto& a, const auto& b) {
                                return a.first == b.first && a.second.chain == b.second.chain &&
                                       a.second.lo == b.second.lo && a.second.hi == b.second.hi;
                              }),
                  entries.end());
  }
  uint64_t lo = 0x510e527fade682d1ull, hi = 0x9b05688c2b3e6c1full;
  for (const auto& [symbol, future] : entries) {
    chart.future_symbol.push_back(symbol);
    chart.future_chain.push_back(future.chain);
    chart.future_hash.push_back(future.lo);
    chart.future_hash.push_back(future.hi);
    const uint64_t tag =
        mix64((static_cast<uint64_t>(symbol) << 32 | future.chain) + 0x1f83d9abfb41bd6bull);
    lo = mix64(lo ^ mix64(tag ^ future.lo));
    hi = mix64(hi + mix64(tag + future.hi));
  }
  chart.anchors_hash.push_back(lo);
  chart.anchors_hash.push_back(hi ^ entries.size());
  chart.future_begin.push_back(static_cast<uint32_t>(chart.future_symbol.size()));
  const auto [shape_lo, shape_hi] = anchor_shape(fl, entries);
  chart.anchors_shape.push_back(shape_lo);
  chart.anchors_shape.push_back(shape_hi);
}

}  // namespace

void anchor_new_set(const Runtime& rt, Chart& chart, uint32_t self, size_t begin) {
  // Once the runtime has switched future keys off (for good), no key reads anchors again; item
  // merging may still want them.
  if (!anchors_complete(rt, chart)) {
    chart.anchors_hash.push_back(0);
    chart.anchors_hash.push_back(0);
    chart.anchors_shape.push_back(0);
    chart.anchors_shape.push_back(0);
    chart.future_begin.push_back(static_cast<uint32_t>(chart.future_symbol.size()));
    return;
  }
  anchor_set(rt, chart, self, begin, chart.items.size(),
             chart.merge_anchored ? FutureLanguages::kMergeLanguages : kLanguagesPerStep);
}

void anchor_earlier_sets(const Runtime& rt, Chart& chart, uint32_t sets) {
  chart.future_begin.assign(1, 0);
  chart.future_symbol.clear();
  chart.future_chain.clear();
  chart.future_hash.clear();
  chart.anchors_hash.clear();
  chart.anchors_shape.clear();
  for (uint32_t set = 0; set < sets; ++set) {
    anchor_set(rt, chart, set, chart.set_begin[set], chart.set_begin[set + 1],
               FutureLanguages::kMergeLanguages);
  }
}

}  // namespace gramkiln
