// The matcher: accepting tokens, exact rollback, and the next-token mask.
//
// Mask = union over lexer threads (origin set, DFA state) of
//   * the tokens that stay inside the lexeme from that state (precomputed bitset), and
//   * for every trie node where the lexeme can end with token bytes left over (precomputed
//     "exit" list), the tokens below that node whose remaining bytes are viable after the lexeme
//     is scanned: decided by walking that trie subtree against a hypothetical Earley set built
//     on a scratch overlay of the chart (recursively, for tokens spanning several lexemes),
// plus token-set symbols expected at the current position, plus end tokens when accepted.
// Every lexer thread in a trimmed DFA can reach acceptance and every grammar symbol is
// productive (the compiler removes the rest), so "alive" means "viable" and no token the mask
// allows can lead to a dead end.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fill_trace.hpp"
#include "huge_pages.hpp"
#include "runtime_internal.hpp"

namespace gramkiln {

// Out of line: inlined, every use would look the thread-local up again (__tls_get_addr).
__attribute__((noinline)) Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

namespace {

// The widest loop in the matcher (a mask is ~4,000 words for a 128K vocabulary): built for
// AVX-512, AVX2 and the baseline, picked at load time by the CPU (GCC/Clang function
// multiversioning on x86-64 Linux). The baseline build's 16-byte loop was ~3/4 of the time
// spent in fill_mask_uncached itself on MaskBench schemas. Not under the sanitizers: their
// runtimes are not ready when the loader runs the resolver; nor in the instrumented build that
// trains the build profile (GRAMKILN_NO_CLONES, see CMakeLists.txt), for the same reason.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) &&  \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) && \
    !defined(GRAMKILN_NO_CLONES)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
__attribute__((noinline)) void or_words(uint32_t* __restrict out, const uint32_t* __restrict in,
                                        uint32_t words) {
  for (uint32_t i = 0; i < words; ++i) out[i] |= in[i];
}

// out |= every one of `count` bitsets, in one pass over all of them: block by block, each
// source's next lines asked for ahead. A new mask ORs a few 16 KB bitsets that are cold (a
// computed fill's parts); one after another, each is a pass of its own waiting on its own
// misses, where side by side their misses overlap.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) &&  \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) && \
    !defined(GRAMKILN_NO_CLONES)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
__attribute__((noinline)) void or_many(uint32_t* __restrict out,
                                       const uint32_t* const* __restrict sources, size_t count,
                                       uint32_t words) {
  constexpr uint32_t kBlock = 64;  // words: four cache lines of each source
  constexpr uint32_t kAhead = 2 * kBlock;
  for (uint32_t at = 0; at < words; at += kBlock) {
    const uint32_t end = std::min(words, at + kBlock);
    const bool ask = at + kAhead + kBlock <= words;
    for (size_t k = 0; k < count; ++k) {
      const uint32_t* __restrict in = sources[k];
      if (ask) {
        for (uint32_t line = 0; line < kBlock; line += 16) {
          __builtin_prefetch(in + at + kAhead + line);
        }
      }
      for (uint32_t i = at; i < end; ++i) out[i] |= in[i];
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define GRAMKILN_CRC_DIGEST 1
// content_digest with the CRC32 instruction on three independent streams: ~3x faster than the
// multiply chains below (a digest of a 4,000-word mask was ~2,800 cycles of a ~30,000-cycle
// computed MaskBench fill). Weak as a hash (CRC is linear), which is fine: equality is checked.
__attribute__((target("sse4.2"))) uint64_t crc_digest(const uint32_t* data, size_t count,
                                                      uint64_t seed) {
  uint64_t a = seed, b = ~seed, c = seed * 0x9e3779b97f4a7c15ull;
  size_t i = 0;
  for (; i + 6 <= count; i += 6) {
    uint64_t x, y, z;
    std::memcpy(&x, data + i, sizeof x);
    std::memcpy(&y, data + i + 2, sizeof y);
    std::memcpy(&z, data + i + 4, sizeof z);
    a = __builtin_ia32_crc32di(a, x);
    b = __builtin_ia32_crc32di(b, y);
    c = __builtin_ia32_crc32di(c, z);
  }
  for (; i < count; ++i) a = __builtin_ia32_crc32si(static_cast<uint32_t>(a), data[i]);
  return mix64(a ^ mix64(b ^ count) ^ (c << 32 | c >> 32));
}
#endif

// A 64-bit digest of `count` words, for interning by content (equality is checked after).
uint64_t content_digest(const uint32_t* data, size_t count, uint64_t seed) {
#ifdef GRAMKILN_CRC_DIGEST
  static const bool has_crc = __builtin_cpu_supports("sse4.2");
  if (has_crc) return crc_digest(data, count, seed);
#endif
  // Four independent lanes: one multiply chain over a 4,000-word bitset was ~1.5 us of
  // latency per stored dense result.
  uint64_t lanes[4] = {seed, 0xbb67ae8584caa73bull, 0xa54ff53a5f1d36f1ull, 0x510e527fade682d1ull};
  // Two ids per 64-bit step.
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    for (int lane = 0; lane < 4; ++lane) {
      uint64_t pair;
      std::memcpy(&pair, data + i + 2 * lane, sizeof pair);
      lanes[lane] = (lanes[lane] ^ pair) * 0x100000001b3ull + 0x9e37;
    }
  }
  for (; i < count; ++i) lanes[0] = (lanes[0] ^ data[i]) * 0x100000001b3ull + 0x9e37;
  uint64_t digest = mix64(lanes[0] ^ count);
  for (int lane = 1; lane < 4; ++lane) digest = mix64(digest ^ lanes[lane]);
  return digest;
}

// A digest of a bitset (a mask, a dense walk result) for interning; equality is checked after
// (std::equal stops at the first difference), so a collision costs compares, not exactness.
// Large bitsets: every kSampleStride-th word (hashing all 4,000 words of a 128K-vocabulary mask
// was ~0.6 us of every computed fill); the odd stride moves the sample through the words of
// successive cache lines, and four independent multiply chains keep it from being
// latency-bound. A sparse one (at most one sampled word in sixteen set) also hashes every set
// word with its index: its sample is mostly zero words, and on a JSON Schema grammar the sample
// alone put up to 185 distinct masks in one bucket, so that interning one cost up to 16 us of
// compares (an enum of 3,000 words: p99 of all fills 19-28 -> 10-12 us). Small bitsets are
// hashed whole.
uint64_t bitset_digest(const uint32_t* words, size_t count) {
  constexpr size_t kSampleStride = 17;
  const size_t stride = count < 32 * kSampleStride ? 1 : kSampleStride;
  uint64_t lanes[4] = {0x243f6a8885a308d3ull ^ count, 0x13198a2e03707344ull, 0xa4093822299f31d0ull,
                       0x082efa98ec4e6c89ull};
  size_t sampled = 0, set = 0;
  size_t i = 0;
  for (; i + 3 * stride < count; i += 4 * stride) {
    for (size_t lane = 0; lane < 4; ++lane) {
      const uint32_t word = words[i + lane * stride];
      set += word != 0;
      lanes[lane] = (lanes[lane] ^ word) * 0x100000001b3ull;
    }
    sampled += 4;
  }
  for (; i < count; i += stride, ++sampled) {
    set += words[i] != 0;
    lanes[0] = (lanes[0] ^ words[i]) * 0x100000001b3ull;
  }
  if (stride > 1 && 16 * set <= sampled) {
    // Blocks of 32 bytes, skipped when all zero; the set words hashed with their index.
    auto add = [&](size_t at) {
      if (words[at]) lanes[1] = (lanes[1] ^ ((uint64_t{at} << 32) | words[at])) * 0x100000001b3ull;
    };
    constexpr size_t kBlock = 8;
    size_t at = 0;
    for (; at + kBlock <= count; at += kBlock) {
      uint64_t quads[kBlock / 2];
      std::memcpy(quads, words + at, sizeof quads);
      if ((quads[0] | quads[1] | quads[2] | quads[3]) == 0) continue;
      for (size_t k = 0; k < kBlock; ++k) add(at + k);
    }
    for (; at < count; ++at) add(at);
  }
  return mix64(lanes[0] ^ mix64(lanes[1] ^ mix64(lanes[2] ^ mix64(lanes[3]))));
}

// The shared byte -> entered-states table of a set of expected lexemes.
const FollowTable& follow_table(const Runtime& rt, Scratch& sc,
                                const std::vector<uint32_t>& lexemes) {
  sc.sorted_lexemes.assign(lexemes.begin(), lexemes.end());
  std::sort(sc.sorted_lexemes.begin(), sc.sorted_lexemes.end());
  GroupCache& cache = *rt.groups;
  std::lock_guard<std::mutex> lock(cache.follow_mutex);
  auto found = cache.follows.find(sc.sorted_lexemes);
  if (found != cache.follows.end()) return *found->second;
  auto table = std::make_unique<FollowTable>();
  table->offsets.assign(257, 0);
  for (uint32_t lexeme : sc.sorted_lexemes) {
    for (uint32_t f = rt.lexeme_first_offsets[lexeme]; f < rt.lexeme_first_offsets[lexeme + 1];
         ++f) {
      table->offsets[rt.lexeme_first_bytes[f] + 1]++;
    }
  }
  for (int b = 0; b < 256; ++b) table->offsets[b + 1] += table->offsets[b];
  table->states.resize(table->offsets[256]);
  std::vector<uint32_t> fill(table->offsets.begin(), table->offsets.end() - 1);
  for (uint32_t lexeme : sc.sorted_lexemes) {
    const int32_t start = static_cast<int32_t>(rt.lexeme_start[lexeme]);
    for (uint32_t f = rt.lexeme_first_offsets[lexeme]; f < rt.lexeme_first_offsets[lexeme + 1];
         ++f) {
      const uint8_t byte = rt.lexeme_first_bytes[f];
      table->states[fill[byte]++] = rt.next_state(start, byte);
    }
  }
  cache.used.fetch_add(4 * (table->offsets.size() + table->states.size()) + 64);
  const FollowTable& out = *table;
  cache.follows.emplace(sc.sorted_lexemes, std::move(table));
  return out;
}

// The overlay set reached from `set` by scanning `lexeme`, built once per fill.
uint32_t advance_symbol(const Runtime& rt, ChartView& view, Scratch& sc, uint32_t set,
                        uint32_t symbol) {
  const uint64_t key = (static_cast<uint64_t>(set) << 32) | symbol;
  auto found = sc.next_set.find(key);
  if (found != sc.next_set.end()) return found->second;
  sc.scans.assign(1, {set, symbol});
  sc.reads.clear();
  const uint32_t next = build_earley_set(rt, view, sc.scans, sc.seen, &sc.reads);
  std::sort(sc.reads.begin(), sc.reads.end());
  sc.reads.erase(std::unique(sc.reads.begin(), sc.reads.end()), sc.reads.end());
  sc.overlay_read_sets.insert(sc.overlay_read_sets.end(), sc.reads.begin(), sc.reads.end());
  sc.overlay_read_offsets.push_back(static_cast<uint32_t>(sc.overlay_read_sets.size()));
  expected_lexemes(rt, view, next, sc.next_lexemes);
  sc.overlay_follow.push_back(&follow_table(rt, sc, sc.next_lexemes));
  sc.overlay_depths_done.push_back(0);
  sc.next_set.emplace(key, next);
  return next;
}

uint32_t advance_set(const Runtime& rt, ChartView& view, Scratch& sc, uint32_t set,
                     uint32_t lexeme) {
  return advance_symbol(rt, view, sc, set, rt.lexeme_base() + lexeme);
}

// Drop the repeats of trie nodes from nodes[begin..), keeping first occurrences in order (a
// stamp per node instead of a sort: exit lists of lexemes that end at every byte run to
// hundreds of thousands of nodes, and sorting them was 13% of such a first fill).
void erase_repeated_nodes(const Runtime& rt, std::vector<uint32_t>& nodes, size_t begin = 0) {
  thread_local std::vector<uint32_t> stamp;
  thread_local uint32_t epoch = 0;
  if (stamp.size() < rt.trie_end.size()) stamp.assign(rt.trie_end.size(), 0);
  if (++epoch == 0) {
    std::fill(stamp.begin(), stamp.end(), 0);
    epoch = 1;
  }
  size_t kept = begin;
  for (size_t i = begin; i < nodes.size(); ++i) {
    const uint32_t node = nodes[i];
    if (stamp[node] == epoch) continue;
    stamp[node] = epoch;
    nodes[kept++] = node;
  }
  nodes.resize(kept);
}

// Finish a group from its collected exits: dense tokens when many, exit children by byte.
// The exits become a set first. Walks from several roots, or a walk past several exits of one
// lexeme, can reach one exit node more than once; kept, each copy would be walked again at the
// next level and copied again there, so a token with k lexeme boundaries cost 2^k walks (a
// lexeme that accepts at every byte, as [^,]*, under a 128K vocabulary ran out of memory in
// the first fill).
void finish_group(const Runtime& rt, ExitGroup& group, std::vector<uint32_t>& exits) {
  if (group.tokens.size() > rt.words) {
    group.bits.assign(rt.words, 0);
    for (uint32_t token : group.tokens) set_bit(group.bits.data(), token);
    group.tokens.clear();
    group.tokens.shrink_to_fit();
  }
  if (exits.empty()) return;
  erase_repeated_nodes(rt, exits);
  group.child_offsets.assign(257, 0);
  for (uint32_t node : exits) {
    for (uint32_t c = node + 1; c < rt.trie_end[node]; c = rt.trie_end[c]) {
      group.child_offsets[rt.trie_byte[c] + 1]++;
    }
  }
  for (int b = 0; b < 256; ++b) group.child_offsets[b + 1] += group.child_offsets[b];
  group.child_nodes.resize(group.child_offsets[256]);
  std::vector<uint32_t> fill(group.child_offsets.begin(), group.child_offsets.end() - 1);
  for (uint32_t node : exits) {
    for (uint32_t c = node + 1; c < rt.trie_end[node]; c = rt.trie_end[c]) {
      group.child_nodes[fill[rt.trie_byte[c]]++] = c;
    }
  }
  for (int b = 0; b < 256; ++b) {
    if (group.child_offsets[b] < group.child_offsets[b + 1]) {
      group.child_bytes.push_back(static_cast<uint8_t>(b));
    }
  }
}

// Walk the trie below `roots` once for all `states` (the lexemes that can start with a byte
// often share long prefixes, such as names and numbers): append to walks[i] the tokens at or
// below the roots that stay inside the lexeme from states[i], and the nodes where it can end
// with token bytes left over.
void walk_trie(const Runtime& rt, const uint32_t* roots, size_t count,
               const std::vector<int32_t>& states, std::vector<NodeWalk>& walks) {
  const size_t m = states.size();
  if (m == 1) {
    // The common case (one lexeme starts with the byte), without the per-node state vectors:
    // about 3x fewer instructions per node on the C-like bench grammar.
    std::vector<std::pair<uint32_t, int32_t>> stack;
    for (size_t i = 0; i < count; ++i) stack.emplace_back(roots[i], states[0]);
    NodeWalk& walk = walks[0];
    size_t& walked = thread_scratch().trie_nodes_walked;
    while (!stack.empty()) {
      const auto [node, state] = stack.back();
      stack.pop_back();
      ++walked;
      walk.tokens.insert(walk.tokens.end(), rt.trie_tokens.begin() + rt.trie_tok_offsets[node],
                         rt.trie_tokens.begin() + rt.trie_tok_offsets[node + 1]);
      const uint32_t end = rt.trie_end[node];
      if (end == node + 1) continue;
      if (rt.dfa_accepting[state]) walk.exits.push_back(node);
      const int32_t* row = rt.dfa_row(state);
      for (uint32_t c = node + 1; c < end; c = rt.trie_end[c]) {
        const int32_t next = row[rt.dfa_byte_class[rt.trie_byte[c]]];
        if (next >= 0) stack.emplace_back(c, next);
      }
    }
    return;
  }
  // Depth-first stack of nodes; each entry's m states live in `pool` at the same position.
  std::vector<uint32_t> stack;
  std::vector<int32_t> pool, current(m), next(m);
  for (size_t i = 0; i < count; ++i) {
    stack.push_back(roots[i]);
    pool.insert(pool.end(), states.begin(), states.end());
  }
  size_t& walked = thread_scratch().trie_nodes_walked;
  while (!stack.empty()) {
    const uint32_t node = stack.back();
    stack.pop_back();
    ++walked;
    std::copy(pool.end() - m, pool.end(), current.begin());
    pool.resize(pool.size() - m);
    const bool leaf = rt.trie_end[node] == node + 1;
    for (size_t i = 0; i < m; ++i) {
      if (current[i] < 0) continue;
      for (uint32_t t = rt.trie_tok_offsets[node]; t < rt.trie_tok_offsets[node + 1]; ++t) {
        walks[i].tokens.push_back(rt.trie_tokens[t]);
      }
      if (!leaf && rt.dfa_accepting[current[i]]) walks[i].exits.push_back(node);
    }
    if (leaf) continue;
    for (uint32_t c = node + 1; c < rt.trie_end[node]; c = rt.trie_end[c]) {
      bool alive = false;
      for (size_t i = 0; i < m; ++i) {
        next[i] = current[i] < 0 ? -1 : rt.next_state(current[i], rt.trie_byte[c]);
        alive = alive || next[i] >= 0;
      }
      if (!alive) continue;
      stack.push_back(c);
      pool.insert(pool.end(), next.begin(), next.end());
    }
  }
}

// Build the groups entered at `nodes` (children sharing one byte) in each of `states`. The
// subtree walks below large nodes are memoised per (node, state) in the shared cache: the same
// nodes are entered from many parents (e.g. every token " s..." after any lexeme that can end
// in a space), and those walks were most of the cost of first visits (C-like: ~40% of the
// trie nodes a cold pass visited were re-walks). Small subtrees are walked directly.
std::vector<std::unique_ptr<ExitGroup>> build_groups(const Runtime& rt, const uint32_t* nodes,
                                                     size_t count,
                                                     const std::vector<int32_t>& states) {
  // Below this many trie nodes a walk is cheaper than a memo lookup, its entry and the extra
  // copy of its tokens (with 32, tool-call first passes ran ~10% more instructions, since
  // their many mid-sized subtrees are rarely entered twice).
  constexpr uint32_t kMemoMinNodes = 256;
  const size_t m = states.size();
  GroupCache& cache = *rt.groups;
  std::vector<NodeWalk> walks(m);
  std::vector<uint32_t> small;
  std::vector<int32_t> missing_states;
  std::vector<size_t> missing_index;
  std::vector<const NodeWalk*> found(m);
  std::vector<NodeWalk> fresh;
  for (size_t n = 0; n < count; ++n) {
    const uint32_t node = nodes[n];
    if (rt.trie_end[node] - node < kMemoMinNodes) {
      small.push_back(node);
      continue;
    }
    missing_states.clear();
    missing_index.clear();
    {
      std::lock_guard<std::mutex> lock(cache.node_mutex);
      for (size_t i = 0; i < m; ++i) {
        auto hit = cache.node_walks.find(NodeWalk::key(node, states[i]));
        found[i] = hit == cache.node_walks.end() ? nullptr : hit->second.get();
        if (!found[i]) {
          missing_states.push_back(states[i]);
          missing_index.push_back(i);
        }
      }
    }
    fresh.assign(missing_states.size(), NodeWalk{});
    if (!missing_states.empty()) {
      walk_trie(rt, &node, 1, missing_states, fresh);
      std::lock_guard<std::mutex> lock(cache.node_mutex);
      for (size_t k = 0; k < missing_states.size(); ++k) {
        const size_t size = fresh[k].footprint();
        if (cache.used.load(std::memory_order_relaxed) + size > GroupCache::kBudgetBytes) continue;
        auto [it, inserted] =
            cache.node_walks.emplace(NodeWalk::key(node, missing_states[k]),
                                     std::make_unique<NodeWalk>(std::move(fresh[k])));
        if (inserted) cache.used.fetch_add(size, std::memory_order_relaxed);
        found[missing_index[k]] = it->second.get();
      }
    }
    for (size_t k = 0; k < missing_states.size(); ++k) {
      if (!found[missing_index[k]]) found[missing_index[k]] = &fresh[k];  // past the budget
    }
    for (size_t i = 0; i < m; ++i) {
      walks[i].tokens.insert(walks[i].tokens.end(), found[i]->tokens.begin(),
                             found[i]->tokens.end());
      walks[i].exits.insert(walks[i].exits.end(), found[i]->exits.begin(), found[i]->exits.end());
    }
  }
  walk_trie(rt, small.data(), small.size(), states, walks);
  std::vector<std::unique_ptr<ExitGroup>> groups(m);
  for (size_t i = 0; i < m; ++i) {
    groups[i] = std::make_unique<ExitGroup>();
    groups[i]->lexeme = rt.dfa_lexeme[states[i]];
    groups[i]->tokens = std::move(walks[i].tokens);
    finish_group(rt, *groups[i], walks[i].exits);
  }
  return groups;
}

// The group of a lexer thread in DFA state `state`: no tokens of its own (those are in the
// precomputed inside set), and the exit children stored in the blob.
const ExitGroup& top_group(const Runtime& rt, int32_t state) {
  GroupCache& cache = *rt.groups;
  ExitGroup* ready = cache.top[state].load(std::memory_order_acquire);
  if (ready) return *ready;
  std::lock_guard<std::mutex> lock(cache.top_mutex);
  ready = cache.top[state].load(std::memory_order_acquire);
  if (ready) return *ready;
  auto group = std::make_unique<ExitGroup>();
  group->lexeme = rt.dfa_lexeme[state];  // unused: walks take the thread's lexeme
  const size_t base = rt.exit_row(state);
  const uint32_t first = rt.exit_child_offsets[base];
  if (rt.exit_child_offsets[base + 256] > first) {
    group->child_offsets.resize(257);
    for (int b = 0; b <= 256; ++b)
      group->child_offsets[b] = rt.exit_child_offsets[base + b] - first;
    group->child_nodes.assign(rt.exit_children.begin() + first,
                              rt.exit_children.begin() + rt.exit_child_offsets[base + 256]);
    for (int b = 0; b < 256; ++b) {
      if (group->child_offsets[b] < group->child_offsets[b + 1]) {
        group->child_bytes.push_back(static_cast<uint8_t>(b));
      }
    }
  }
  // States with the same exit children (e.g. the trailing-whitespace states of every
  // punctuation lexeme) share one group, and so its children and levels.
  uint64_t digest = mix64(group->child_nodes.size());
  for (uint32_t node : group->child_nodes) digest = mix64(digest ^ node);
  for (ExitGroup* same : cache.by_content[digest]) {
    if (same->child_nodes == group->child_nodes && same->child_offsets == group->child_offsets) {
      cache.top[state].store(same, std::memory_order_release);
      return *same;
    }
  }
  ready = group.get();
  cache.by_content[digest].push_back(ready);
  cache.owned.push_back(std::move(group));
  cache.top[state].store(ready, std::memory_order_release);
  return *ready;
}

// Call f(group, lexeme index) with the top group of every DFA state that has exits.
template <typename F>
void for_each_top_group(const Runtime& rt, F&& f) {
  for (uint32_t state = 0; state < rt.num_states; ++state) {
    if (!rt.state_has_exits[state]) continue;
    f(top_group(rt, static_cast<int32_t>(state)), rt.dfa_lexeme[state]);
  }
}

// Give the scratch a fresh budget of exit walks, walk time and trie nodes: one computed fill's
// (or one prewarmed walk's).
void start_walk_budget(const GroupCache& cache, Scratch& sc) {
  sc.walks_left = cache.fill_walk_budget.load(std::memory_order_relaxed);
  sc.walks_exhausted = false;
  sc.item_walk_unkept = false;
  sc.walks_since_clock = 0;
  // The clock is read first at the first check (see walk_time_spent), not here: most computed
  // fills never walk 64 exits, and a clock read on this VM was ~2% of a computed C-like fill.
  sc.walk_time = cache.fill_walk_time;
  sc.walk_clock_started = false;
  sc.trie_nodes_limit = sc.trie_nodes_walked + GroupCache::kFillTrieNodes;
}

// The child of `group` entered with `byte` into DFA state `state`; built on first use. When the
// cache budget is spent the child is built into `transient` and not kept.
const ExitGroup& child_group(const Runtime& rt, const ExitGroup& group, uint8_t byte, int32_t state,
                             std::unique_ptr<ExitGroup>& transient) {
  const ExitGroup& parent = group;
  const uint64_t key = (static_cast<uint64_t>(state) << 8) | byte;
  {
    std::lock_guard<std::mutex> lock(parent.mutex);
    auto found = parent.children.find(key);
    if (found != parent.children.end()) return *found->second;
  }
  const uint32_t lo = group.child_offsets[byte], hi = group.child_offsets[byte + 1];
  std::unique_ptr<ExitGroup> built =
      std::move(build_groups(rt, group.child_nodes.data() + lo, hi - lo, {state})[0]);
  GroupCache& cache = *rt.groups;
  const size_t size = built->footprint();
  if (cache.used.load(std::memory_order_relaxed) + size > GroupCache::kBudgetBytes) {
    built->persistent = false;
    transient = std::move(built);
    return *transient;
  }
  std::lock_guard<std::mutex> lock(parent.mutex);
  auto [it, inserted] = parent.children.emplace(key, std::move(built));
  if (inserted) cache.used.fetch_add(size, std::memory_order_relaxed);
  return *it->second;
}

// Build, in one trie walk, the children of `group` on `byte` for every state of `table` that
// has none yet, and keep them (within the budget; otherwise child_group builds them singly).
void prebuild_children(const Runtime& rt, const ExitGroup& group, uint8_t byte,
                       const FollowTable& table) {
  const ExitGroup& parent = group;
  std::vector<int32_t> missing;
  {
    std::lock_guard<std::mutex> lock(parent.mutex);
    for (uint32_t k = table.offsets[byte]; k < table.offsets[byte + 1]; ++k) {
      const uint64_t key = (static_cast<uint64_t>(table.states[k]) << 8) | byte;
      if (parent.children.find(key) == parent.children.end()) missing.push_back(table.states[k]);
    }
  }
  if (missing.size() < 2) return;  // child_group handles a single build
  const uint32_t lo = group.child_offsets[byte], hi = group.child_offsets[byte + 1];
  auto built = build_groups(rt, group.child_nodes.data() + lo, hi - lo, missing);
  GroupCache& cache = *rt.groups;
  std::lock_guard<std::mutex> lock(parent.mutex);
  for (size_t i = 0; i < missing.size(); ++i) {
    const size_t size = built[i]->footprint();
    if (cache.used.load(std::memory_order_relaxed) + size > GroupCache::kBudgetBytes) break;
    const uint64_t key = (static_cast<uint64_t>(missing[i]) << 8) | byte;
    if (parent.children.emplace(key, std::move(built[i])).second) {
      cache.used.fetch_add(size, std::memory_order_relaxed);
    }
  }
}

// The level of `group` under `table` (see LevelCache), built on first use.
const LevelCache& level_of(const Runtime& rt, const ExitGroup& group, const FollowTable& table,
                           std::unique_ptr<LevelCache>& transient) {
  const ExitGroup& parent = group;
  {
    std::lock_guard<std::mutex> lock(parent.mutex);
    auto found = parent.levels.find(&table);
    if (found != parent.levels.end()) return *found->second;
  }
  auto level = std::make_unique<LevelCache>();
  std::vector<const ExitGroup*> with_exits;
  // Tokens are gathered sparsely (duplicates are harmless: they are only ever ORed) and turned
  // into a bitset only when there are more of them than mask words.
  std::vector<uint32_t> bits;
  auto go_dense = [&]() {
    if (!bits.empty()) return;
    bits.assign(rt.words, 0);
    for (uint32_t token : level->tokens) set_bit(bits.data(), token);
    level->tokens.clear();
  };
  for (const uint8_t byte : group.child_bytes) {
    prebuild_children(rt, group, byte, table);
    for (uint32_t k = table.offsets[byte]; k < table.offsets[byte + 1]; ++k) {
      std::unique_ptr<ExitGroup> kept;
      const ExitGroup& child = child_group(rt, group, byte, table.states[k], kept);
      if (!child.bits.empty()) {
        go_dense();
        or_words(bits.data(), child.bits.data(), rt.words);
      } else if (!bits.empty()) {
        for (uint32_t token : child.tokens) set_bit(bits.data(), token);
      } else {
        level->tokens.insert(level->tokens.end(), child.tokens.begin(), child.tokens.end());
        if (level->tokens.size() > rt.words) go_dense();
      }
      if (!child.child_nodes.empty()) with_exits.push_back(&child);
      if (kept) level->transient.push_back(std::move(kept));
    }
  }
  // Merge children with exits by lexeme (stable order: by first appearance).
  std::stable_sort(with_exits.begin(), with_exits.end(),
                   [](const ExitGroup* a, const ExitGroup* b) { return a->lexeme < b->lexeme; });
  for (size_t i = 0; i < with_exits.size();) {
    size_t j = i;
    while (j < with_exits.size() && with_exits[j]->lexeme == with_exits[i]->lexeme) ++j;
    const uint32_t merged_lexeme = with_exits[i]->lexeme;
    const ExitGroup* shared = nullptr;
    if (j - i > 1) {
      std::lock_guard<std::mutex> lock(parent.mutex);
      auto found = parent.merged_by_lexeme.find(merged_lexeme);
      if (found != parent.merged_by_lexeme.end()) shared = found->second.get();
    }
    if (j - i == 1) {
      level->deeper.push_back(with_exits[i]);
    } else if (shared) {
      level->deeper.push_back(shared);
    } else {
      auto merged = std::make_unique<ExitGroup>();
      merged->lexeme = with_exits[i]->lexeme;
      // Per byte, the union of the parts' children (as a set: children entered in different
      // states often end the lexeme at the same nodes, and copies would multiply level by
      // level, as in finish_group).
      merged->child_offsets.assign(257, 0);
      for (int b = 0; b < 256; ++b) {
        const size_t begin = merged->child_nodes.size();
        for (size_t k = i; k < j; ++k) {
          const ExitGroup& part = *with_exits[k];
          merged->child_nodes.insert(merged->child_nodes.end(),
                                     part.child_nodes.begin() + part.child_offsets[b],
                                     part.child_nodes.begin() + part.child_offsets[b + 1]);
        }
        erase_repeated_nodes(rt, merged->child_nodes, begin);
        merged->child_offsets[b + 1] = static_cast<uint32_t>(merged->child_nodes.size());
        if (merged->child_nodes.size() > begin) {
          merged->child_bytes.push_back(static_cast<uint8_t>(b));
        }
      }
      // Kept in the parent, so that every level of `group` that expects this lexeme shares
      // one deeper group (and so its walk-cache entries) whatever else the table holds.
      GroupCache& cache = *rt.groups;
      const size_t size = merged->footprint();
      if (cache.used.load(std::memory_order_relaxed) + size <= GroupCache::kBudgetBytes) {
        std::lock_guard<std::mutex> lock(parent.mutex);
        auto [it, inserted] = parent.merged_by_lexeme.emplace(merged_lexeme, std::move(merged));
        if (inserted) cache.used.fetch_add(size, std::memory_order_relaxed);
        level->deeper.push_back(it->second.get());
      } else {
        merged->persistent = false;
        level->deeper.push_back(merged.get());
        level->merged.push_back(std::move(merged));
      }
    }
    i = j;
  }
  level->bits = std::move(bits);
  GroupCache& cache = *rt.groups;
  const size_t size = level->footprint();
  if (!level->transient.empty() ||
      cache.used.load(std::memory_order_relaxed) + size > GroupCache::kBudgetBytes) {
    for (const auto& merged_group : level->merged) merged_group->persistent = false;
    transient = std::move(level);
    return *transient;
  }
  std::lock_guard<std::mutex> lock(parent.mutex);
  auto [it, inserted] = parent.levels.emplace(&table, std::move(level));
  if (inserted) cache.used.fetch_add(size, std::memory_order_relaxed);
  return *it->second;
}

// Lexeme bigrams of the grammar: follow[l] lists the lexemes that can come right after lexeme
// l in some sentential form (LAST(X_i) x FIRST(X_j) over every production X_1..X_n with only
// nullable symbols between i and j). Every Earley set expects a subset of follow[l] after a
// scan of l, so a level built under follow[l] builds every child that a real fill can enter.
// Empty when the bitsets would pass `max_bytes` (very large grammars are not prewarmed).
std::vector<std::vector<uint32_t>> static_lexeme_follow(const Runtime& rt, size_t max_bytes) {
  const uint32_t nt = rt.num_nonterminals, lex = rt.num_lexemes;
  const size_t lw = (static_cast<size_t>(lex) + 63) / 64;
  if ((2 * static_cast<size_t>(nt) + lex) * lw * 8 > max_bytes) return {};
  std::vector<uint64_t> first(static_cast<size_t>(nt) * lw, 0), last(first.size(), 0);
  std::vector<uint64_t> single(lw, 0);
  // The lexeme set of symbol `sym` in `table` (a lexeme is its own first and last lexeme;
  // token sets have none).
  auto lexemes_of = [&](uint32_t sym, const std::vector<uint64_t>& table) -> const uint64_t* {
    // data() + offset, not &table[offset]: a grammar without lexemes has empty rows (lw == 0).
    if (sym < nt) return table.data() + static_cast<size_t>(sym) * lw;
    std::fill(single.begin(), single.end(), 0);
    if (sym < nt + lex) single[(sym - nt) / 64] |= uint64_t{1} << ((sym - nt) % 64);
    return single.data();
  };
  auto nullable = [&](uint32_t sym) { return sym < nt + lex && rt.symbol_nullable[sym]; };
  auto merge = [&](uint64_t* into, const uint64_t* from) {
    bool changed = false;
    for (size_t w = 0; w < lw; ++w) {
      changed = changed || (from[w] & ~into[w]) != 0;
      into[w] |= from[w];
    }
    return changed;
  };
  const uint32_t prods = static_cast<uint32_t>(rt.prod_lhs.size());
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t p = 0; p < prods; ++p) {
      const size_t row = static_cast<size_t>(rt.prod_lhs[p]) * lw;
      for (uint32_t k = rt.prod_offsets[p]; k < rt.prod_offsets[p + 1]; ++k) {
        changed = merge(first.data() + row, lexemes_of(rt.prod_rhs[k], first)) || changed;
        if (!nullable(rt.prod_rhs[k])) break;
      }
      for (uint32_t k = rt.prod_offsets[p + 1]; k-- > rt.prod_offsets[p];) {
        changed = merge(last.data() + row, lexemes_of(rt.prod_rhs[k], last)) || changed;
        if (!nullable(rt.prod_rhs[k])) break;
      }
    }
  }
  std::vector<uint64_t> pairs(static_cast<size_t>(lex) * lw, 0), ends(lw);
  for (uint32_t p = 0; p < prods; ++p) {
    for (uint32_t i = rt.prod_offsets[p]; i < rt.prod_offsets[p + 1]; ++i) {
      const uint64_t* e = lexemes_of(rt.prod_rhs[i], last);
      std::copy(e, e + lw, ends.begin());
      for (uint32_t j = i + 1; j < rt.prod_offsets[p + 1]; ++j) {
        const uint64_t* starts = lexemes_of(rt.prod_rhs[j], first);
        for (size_t w = 0; w < lw; ++w) {
          for (uint64_t bits = ends[w]; bits; bits &= bits - 1) {
            const size_t a = w * 64 + static_cast<size_t>(__builtin_ctzll(bits));
            merge(&pairs[a * lw], starts);
          }
        }
        if (!nullable(rt.prod_rhs[j])) break;
      }
    }
  }
  std::vector<std::vector<uint32_t>> follow(lex);
  for (uint32_t a = 0; a < lex; ++a) {
    for (size_t w = 0; w < lw; ++w) {
      for (uint64_t bits = pairs[a * lw + w]; bits; bits &= bits - 1) {
        follow[a].push_back(static_cast<uint32_t>(w * 64 + __builtin_ctzll(bits)));
      }
    }
  }
  return follow;
}

// When a prewarm must stop: the caller's stop flag, or its wall-clock budget spent. Fills on
// ambiguous grammars can cost milliseconds each and grow with the text (every earlier position
// a live lexeme start), so only a time budget bounds the whole prewarm on every grammar; what
// it leaves undone, fills build on demand.
class PrewarmBudget {
 public:
  PrewarmBudget(const std::atomic<bool>* stop, std::chrono::milliseconds budget)
      : stop_(stop), deadline_(std::chrono::steady_clock::now() + budget) {}
  // True once stopped or past the deadline (and from then on).
  bool spent() {
    if (!spent_) {
      spent_ = (stop_ && stop_->load(std::memory_order_relaxed)) ||
               std::chrono::steady_clock::now() >= deadline_;
    }
    return spent_;
  }

 private:
  const std::atomic<bool>* stop_;
  std::chrono::steady_clock::time_point deadline_;
  bool spent_ = false;
};

// The exit groups part of prewarm_runtime (see there).
void prewarm_groups(const Runtime& rt, PrewarmBudget& budget, PrewarmStats& stats) {
  // Bounds: prewarming builds what fills would build lazily (and, since the bigrams
  // over-approximate the parser, some that no fill needs), so it gets its own share of the
  // group cache and a nesting bound; fills keep building the rest on demand.
  constexpr size_t kPrewarmBytes = size_t{32} << 20;
  constexpr size_t kFollowBitsetBytes = size_t{64} << 20;
  constexpr uint32_t kMaxDepth = 6;
  GroupCache& cache = *rt.groups;
  const size_t start_bytes = cache.used.load(std::memory_order_relaxed);
  const auto follow = static_lexeme_follow(rt, kFollowBitsetBytes);
  if (follow.empty() && rt.num_lexemes > 0) return;
  Scratch& sc = thread_scratch();
  // Breadth-first over (group, lexeme that ended), so that when a bound cuts the work short,
  // what is left undone is the deepest nesting (tokens spanning the most lexemes).
  std::set<std::pair<const ExitGroup*, uint32_t>> seen;
  std::vector<std::pair<const ExitGroup*, uint32_t>> current, next;
  for_each_top_group(rt, [&](const ExitGroup& group, uint32_t lexeme) {
    if (seen.insert({&group, lexeme}).second) current.emplace_back(&group, lexeme);
  });
  for (uint32_t depth = 0; depth <= kMaxDepth && !current.empty(); ++depth) {
    next.clear();
    for (const auto& [group, lexeme] : current) {
      if (budget.spent() ||
          cache.used.load(std::memory_order_relaxed) - start_bytes > kPrewarmBytes) {
        stats.bytes = cache.used.load(std::memory_order_relaxed) - start_bytes;
        return;
      }
      if (group->child_nodes.empty() || !group->persistent) continue;
      std::unique_ptr<LevelCache> transient;
      const LevelCache& level =
          level_of(rt, *group, follow_table(rt, sc, follow[lexeme]), transient);
      ++stats.levels;
      if (transient) continue;  // past the cache budget: its children are not kept either
      for (const ExitGroup* child : level.deeper) {
        const std::pair<const ExitGroup*, uint32_t> entry{child, child->lexeme};
        if (seen.insert(entry).second) next.push_back(entry);
      }
    }
    current.swap(next);
  }
  stats.complete = current.empty();
  stats.bytes = cache.used.load(std::memory_order_relaxed) - start_bytes;
}

// The first masks of every decode: the initial configuration's, then those one and two bytes
// in (a JSON document's `{` and `{"`, a program's first letters), the prefixes that start the
// most vocabulary tokens first, within kMaxMasks fills. They go through the normal caches, so
// a decode that reaches one of these configurations gets its mask from the cache, and their
// walks are cached for the configurations like them further on.
void prewarm_first_masks(const std::shared_ptr<const Runtime>& runtime, PrewarmBudget& budget,
                         PrewarmStats& stats) {
  constexpr uint32_t kMaxMasks = 48, kMaxBytes = 2;
  const Runtime& rt = *runtime;
  std::vector<uint32_t> words(rt.words);
  // A configuration to fill and the trie node of its bytes (0: the root; kNoNode: no token
  // starts with them).
  constexpr uint32_t kNoNode = 0xffffffffu;
  std::vector<std::pair<Matcher, uint32_t>> current, next;
  current.emplace_back(Matcher(runtime), 0);
  for (uint32_t depth = 0; !current.empty(); ++depth) {
    next.clear();
    for (auto& [matcher, node] : current) {
      if (budget.spent() || stats.masks >= kMaxMasks) return;
      matcher.fill_mask(words.data());
      ++stats.masks;
      if (depth == kMaxBytes) continue;
      for (int byte = 0; byte < 256; ++byte) {
        if (!matcher.accept_bytes(std::string(1, static_cast<char>(byte)))) continue;
        uint32_t child = kNoNode;
        if (node != kNoNode) {
          for (uint32_t c = node + 1; c < rt.trie_end[node]; c = rt.trie_end[c]) {
            if (rt.trie_byte[c] == byte) child = c;
          }
        }
        next.emplace_back(matcher, child);
        matcher.rollback(1);
      }
    }
    // The prefixes most tokens start with first (their configurations are the likeliest to be
    // reached at a token boundary).
    auto tokens_below = [&](uint32_t node) {
      return node == kNoNode ? 0u : rt.trie_end[node] - node;
    };
    std::stable_sort(next.begin(), next.end(), [&](const auto& a, const auto& b) {
      return tokens_below(a.second) > tokens_below(b.second);
    });
    current.swap(next);
  }
}

// The shortest string each lexeme accepts (smallest bytes first), or "" when it accepts only
// the empty string or nothing within kMaxLength bytes.
// DFA states reached in a breadth-first search, each with the state and byte it was first
// reached from ({-1, 0} for the start).
using DfaParents = std::unordered_map<int32_t, std::pair<int32_t, uint8_t>>;

// The bytes along `parent` from `start` to `state` ("" when `state` is negative).
std::string path_bytes(const DfaParents& parent, int32_t start, int32_t state) {
  std::string text;
  for (int32_t at = state; at >= 0 && at != start;) {
    const auto [previous, byte] = parent.at(at);
    text.push_back(static_cast<char>(byte));
    at = previous;
  }
  std::reverse(text.begin(), text.end());
  return text;
}

// Per lexeme, a shortest string it accepts (breadth-first over its DFA, smallest bytes first).
// Each state is visited once, so a lexeme costs at most its states times 256 whatever the
// length. (Until session 20 strings were cut at 32 bytes, and a lexeme with no shorter one got
// none: a JSON Schema key such as `"grocery_info.nutritional_info": ` then stopped the
// exploration of prewarm_structure there, two configurations in.)
std::vector<std::string> shortest_lexeme_strings(const Runtime& rt) {
  std::vector<std::string> out(rt.num_lexemes);
  DfaParents parent;
  std::vector<int32_t> layer, next;
  for (uint32_t lexeme = 0; lexeme < rt.num_lexemes; ++lexeme) {
    const int32_t start = static_cast<int32_t>(rt.lexeme_start[lexeme]);
    parent.clear();
    parent.emplace(start, std::make_pair(-1, uint8_t{0}));
    layer.assign(1, start);
    int32_t found = -1;
    while (found < 0 && !layer.empty()) {
      next.clear();
      for (int32_t state : layer) {
        const int32_t* row = rt.dfa_row(state);
        for (int byte = 0; byte < 256 && found < 0; ++byte) {
          const int32_t target = row[rt.dfa_byte_class[byte]];
          if (target < 0 || !parent.emplace(target, std::make_pair(state, uint8_t(byte))).second) {
            continue;
          }
          if (rt.dfa_accepting[target]) found = target;
          next.push_back(target);
        }
        if (found >= 0) break;
      }
      layer.swap(next);
    }
    out[lexeme] = path_bytes(parent, start, found);
  }
  return out;
}

// Per lexeme (computed on first use), a shortest string reaching each of its DFA states other
// than the start, breadth-first (nearest first), at most 64 per lexeme: the states a decode
// may stop at inside the lexeme, whose masks would otherwise be first computed in the decode.
// Every state, not only those before a byte that is not a letter or digit (the rule until
// session 20): subword tokens stop anywhere (`"g` | `overn` | `ance` | `Board`), numbers stop
// after `102.` and `102.0`. Measured over the bench decodes after the prewarm (computed fills,
// with the larger inside-mask budget below): JSON 76 -> 53, C-like 82 -> 64, tool-call 5 -> 2,
// 40 MaskBench schemas of another sample than the bench's 1,009 -> 687 of 5,311.
class InsideStates {
 public:
  explicit InsideStates(const Runtime& rt)
      : rt_(rt), strings_(rt.num_lexemes), done_(rt.num_lexemes, false) {}

  const std::vector<std::string>& of(uint32_t lexeme) {
    constexpr size_t kMaxVisited = 256, kMaxPerLexeme = 64;
    std::vector<std::string>& out = strings_[lexeme];
    if (done_[lexeme]) return out;
    done_[lexeme] = true;
    const int32_t start = static_cast<int32_t>(rt_.lexeme_start[lexeme]);
    DfaParents parent;
    std::deque<int32_t> queue{start};
    parent.emplace(start, std::make_pair(-1, uint8_t{0}));
    while (!queue.empty() && parent.size() < kMaxVisited && out.size() < kMaxPerLexeme) {
      const int32_t state = queue.front();
      queue.pop_front();
      const int32_t* row = rt_.dfa_row(state);
      for (int byte = 0; byte < 256; ++byte) {
        const int32_t target = row[rt_.dfa_byte_class[byte]];
        if (target < 0) continue;
        if (parent.size() < kMaxVisited &&
            parent.emplace(target, std::make_pair(state, uint8_t(byte))).second) {
          queue.push_back(target);
        }
      }
      if (state != start) out.push_back(path_bytes(parent, start, state));
    }
    return out;
  }

 private:
  const Runtime& rt_;
  std::vector<std::vector<std::string>> strings_;
  std::vector<bool> done_;
};

// Whether the future-language key answered enough of the fills that missed the whole-stack
// key (those it is computed for) since the last baseline (see FutureLanguages::baseline): at
// least kFutureHitShare of them. Measured over the
// prewarm's fills: C-like 0.56 (and 121 of 317 decode fills answered), JSON 0.03 and
// tool-call 0.06 (5 and 10-23 decode hits), MaskBench schemas 0.00-0.42; below the bar the
// key costs more than it saves (MaskBench decodes: p50 +25%, p99 +20% with it).
bool future_keys_pay(const Runtime& rt) {
  constexpr double kFutureHitShare = 0.3;
  const GroupCache& cache = *rt.groups;
  const FutureLanguages& fl = *rt.futures;
  auto since = [](const std::atomic<size_t>& count, const std::atomic<size_t>& base) {
    return static_cast<double>(count.load(std::memory_order_relaxed) -
                               base.load(std::memory_order_relaxed));
  };
  const double future = since(cache.hits_future, fl.base_hits_future);
  const double misses = future + since(cache.hits_depth, fl.base_hits_depth) +
                        since(cache.fills_computed, fl.base_fills_computed);
  return misses > 0 && future >= kFutureHitShare * misses;
}

// Configurations a few lexemes into the text, breadth-first from the initial one, each
// lexeme written as its shortest string: a JSON grammar's `{`, `{""`, `{"":`, `{"":0`, ...
// Their masks are filled through the normal caches, so the walks of the parser states real
// text passes through early (value starts, keys, closing brackets) are cached before a
// decode needs them.
void explore_breadth_first(const std::shared_ptr<const Runtime>& runtime, PrewarmBudget& budget,
                           PrewarmStats& stats, const std::vector<std::string>& shortest,
                           InsideStates& inside_states) {
  // Configurations are told apart by the future key where it pays (see future_keys_pay):
  // configurations with equal futures share their masks. Elsewhere by the stack within five
  // origin hops (H_6, the neighbourhood key) rather than the whole stack (until session 20):
  // a walk cached for one neighbourhood serves every stack below it, so the exploration goes
  // on to new neighbourhoods (JSON: deeper nestings of objects and arrays) instead of the same
  // ones under other stacks. Measured with 1,500 configurations against the whole-stack key
  // and 600 (computed decode fills after the prewarm, Llama 3): JSON 53 -> 36, tool-call 2 ->
  // 1, MaskBench samples (40 schemas) 605 -> 572 and 506 -> 488; prewarm JSON 19 -> 32 ms,
  // MaskBench median +5 ms. (600 configurations by the whole-stack key had been the bound
  // since session 8: more of them measured slower MaskBench decodes, p99 +30%.)
  constexpr uint32_t kMaxConfigurations = 1500;
  constexpr uint32_t kNeighbourhoodDepth = 6;
  bool by_future = false;
  constexpr uint32_t kDecideAfter = 64;  // configurations explored before judging the key
  // Grammars with hundreds of lexemes expected at once (JSON Schema objects with many keys)
  // would otherwise try every one from every configuration.
  constexpr uint32_t kMaxAttempts = 8192;
  // A grammar with one way on (`item+`) would otherwise be followed hundreds of lexemes deep,
  // far past the early structure this is for, with fills that grow with the text.
  constexpr uint32_t kMaxLexemes = 32;
  // Fills inside lexemes (counted in stats.masks with the first masks). 2,048 until session
  // 20, when every inner state became a candidate (see InsideStates) and the budget ran out
  // early in the exploration: 8,192 left JSON 54 and C-like 71 computed decode fills, 16,384
  // 53 and 64, 30,000 53 and 64; prewarm JSON 11 -> 24 ms, C-like 128 -> 209 ms, MaskBench
  // median 11 -> 25 ms (max 53).
  constexpr uint32_t kMaxInsideMasks = 16384;
  uint32_t attempts = 0;
  const Runtime& rt = *runtime;
  std::vector<uint32_t> words(rt.words);
  std::deque<Matcher> queue;
  std::set<std::pair<uint64_t, uint64_t>> seen;
  queue.emplace_back(runtime);
  seen.insert(queue.back().neighbourhood_key(kNeighbourhoodDepth));
  while (!queue.empty() && stats.explored < kMaxConfigurations) {
    if (budget.spent()) return;
    if (stats.explored == kDecideAfter && !rt.futures->off()) {
      const bool pays = rt.futures->mode == FutureLanguages::Mode::kOn || future_keys_pay(rt);
      // Off: from here on the prewarm's own fills compute (and cache the walks a decode
      // needs) instead of taking the key's answers.
      rt.futures->decide(pays);
      by_future = pays;
    }
    Matcher matcher = std::move(queue.front());
    queue.pop_front();
    matcher.fill_mask(words.data());
    ++stats.explored;
    if (matcher.history_size() >= kMaxLexemes) continue;
    for (uint32_t lexeme : matcher.lexemes_expected_here()) {
      if (++attempts > kMaxAttempts) return;
      const std::string& text = shortest[lexeme];
      if (text.empty()) continue;
      // Masks inside the lexeme, at its inner states (see InsideStates): a decode's first
      // mask after `{"` `destination` is no miss.
      if (stats.masks < kMaxInsideMasks) {
        for (const std::string& inside : inside_states.of(lexeme)) {
          if (stats.masks >= kMaxInsideMasks || budget.spent()) break;
          if (!matcher.accept_bytes(inside)) continue;
          matcher.fill_mask(words.data());
          ++stats.masks;
          matcher.rollback(1);
        }
      }
      if (budget.spent()) return;
      if (!matcher.accept_bytes(text)) continue;
      const auto key =
          by_future ? matcher.future_key() : matcher.neighbourhood_key(kNeighbourhoodDepth);
      if (seen.insert(key).second) {
        queue.push_back(matcher);
      }
      matcher.rollback(1);
    }
  }
}

// One configuration path deep into the text, from the initial configuration: at each step the
// first expected lexeme (in grammar order) whose shortest string leads to a neighbourhood the
// path has not been in, preferring those that leave the text incomplete, with the masks inside
// the expected lexemes at each step (as the breadth-first exploration fills them).
// Breadth-first, 1,500 configurations reach a few lexemes into structures with many ways on
// (objects whose properties come in any order: every set of properties written so far is its
// own parser state), while a decode goes through one of them to the end; the first choices
// follow the order the grammar states things in, which is the order a JSON Schema lists its
// properties. Measured over the decodes after the prewarm (Llama 3, computed fills): the
// bench's 34 MaskBench schemas 425 -> 320, 40 others (seed 7) 572 -> 505; JSON, C-like and
// tool-call unchanged (36, 62, 1). Taking the first choice even where it completes the text
// closed objects after their first property (344 and 503). 64 lexemes: 16 gave 378 and 516,
// 32 or more the same as 64.
void follow_first_choices(const std::shared_ptr<const Runtime>& runtime, PrewarmBudget& budget,
                          PrewarmStats& stats, const std::vector<std::string>& shortest,
                          InsideStates& inside_states) {
  constexpr uint32_t kMaxLexemes = 64, kMaxInsideMasks = 4096;
  constexpr uint32_t kNeighbourhoodDepth = 6;
  std::vector<uint32_t> words(runtime->words);
  std::set<std::pair<uint64_t, uint64_t>> seen;
  Matcher path(runtime);
  seen.insert(path.neighbourhood_key(kNeighbourhoodDepth));
  uint32_t inside_masks = 0;
  for (uint32_t step = 0; step < kMaxLexemes; ++step) {
    const std::vector<uint32_t> expected = path.lexemes_expected_here();
    for (uint32_t lexeme : expected) {
      for (const std::string& inside : inside_states.of(lexeme)) {
        if (inside_masks >= kMaxInsideMasks || budget.spent()) break;
        if (!path.accept_bytes(inside)) continue;
        path.fill_mask(words.data());
        ++inside_masks;
        path.rollback(1);
      }
    }
    // The first choice that leaves the text incomplete, else the first that completes it: a
    // structure is followed to its end (`, "beta": ` before `}`).
    bool moved = false;
    for (const bool may_complete : {false, true}) {
      for (uint32_t lexeme : expected) {
        if (moved || budget.spent()) break;
        const std::string& text = shortest[lexeme];
        if (text.empty() || !path.accept_bytes(text)) continue;
        if ((may_complete || !path.is_accepting()) &&
            seen.insert(path.neighbourhood_key(kNeighbourhoodDepth)).second) {
          path.fill_mask(words.data());
          moved = true;
        } else {
          path.rollback(1);
        }
      }
      if (moved) break;
    }
    if (!moved) break;
    ++stats.masks;
  }
  stats.masks += inside_masks;
}

// Configurations told apart only by their kernel neighbourhood (H_1: the pending kernel items
// of the last set, and the lexer threads), breadth-first, each filled once, so that the
// prewarm's matchers build every kernel real text passes through (each kept by
// record_prewarm_kernel for prewarm_local_walks) and the masks and futures at them are known. The
// two explorations above tell configurations apart by their futures or H_6 and so spend their
// budget on the same few kernels under many stacks: C-like's declarations inside a function body
// (`int t = `) were never built, and a decode computed their local walks in the fills that set the
// p99. Each lexeme is written as its shortest string and as that string after a space: shortest
// strings written back to back lex ambiguously where real text has a separator (`intA` is a type
// and a name, or one name), and the ambiguous sets have other kernels than real text's (C-like:
// {name = . expr, decl = . expr} where `int t =` builds {decl = . expr}). Measured on C-like
// (Llama 3, the bench decode): 545 configurations, ~15 ms; kernels 59 -> 64; local walks
// computed in the decode 25 -> 0; computed fills 62 -> 54 (the accepts also canonicalise
// futures). Deduplicating by H_2 instead took the whole prewarm budget (27K configurations).
// Filling each configuration's mask as well (C-like: 52 computed decode fills instead of 54,
// the slowest of them, after `} else`, no longer computed; MaskBench: 300 instead of 312,
// median per-schema p99 11.8 -> 10.5 us, median prewarm unchanged, max 163 -> 218 ms).
void explore_kernels(const std::shared_ptr<const Runtime>& runtime, PrewarmBudget& budget,
                     PrewarmStats& stats, const std::vector<std::string>& shortest) {
  constexpr uint32_t kMaxConfigurations = 4096, kMaxAttempts = 32768, kMaxLexemes = 64;
  constexpr uint32_t kKernelDepth = 1;
  std::deque<Matcher> queue;
  std::set<std::pair<uint64_t, uint64_t>> seen;
  queue.emplace_back(runtime);
  seen.insert(queue.back().neighbourhood_key(kKernelDepth));
  uint32_t explored = 0, attempts = 0;
  std::string spaced;
  std::vector<uint32_t> words(runtime->words);
  while (!queue.empty() && explored < kMaxConfigurations) {
    if (budget.spent()) return;
    Matcher matcher = std::move(queue.front());
    queue.pop_front();
    ++explored;
    matcher.fill_mask(words.data());
    ++stats.masks;
    if (matcher.history_size() >= kMaxLexemes) continue;
    for (uint32_t lexeme : matcher.lexemes_expected_here()) {
      const std::string& text = shortest[lexeme];
      if (text.empty()) continue;
      spaced.assign(1, ' ');
      spaced += text;
      for (const std::string* written : {&text, static_cast<const std::string*>(&spaced)}) {
        if (++attempts > kMaxAttempts) return;
        if (!matcher.accept_bytes(*written)) continue;
        if (seen.insert(matcher.neighbourhood_key(kKernelDepth)).second) queue.push_back(matcher);
        matcher.rollback(1);
      }
    }
  }
}

// Random sentences of the grammar, for decoding as synthetic traffic (see prewarm_traffic).
class SentenceWriter {
 public:
  explicit SentenceWriter(const Runtime& rt) : rt_(rt) {
    derivation_heights();
    distances_to_accepting();
  }

  // One sentence, or its first kMaxBytes bytes (a prefix is as good for decoding), as text
  // runs with the token-set tokens between them: segments_[i] is text, tokens_[i] the token
  // after it (-1 for none).
  void write(uint64_t& state) {
    rng_ = &state;
    segments_.assign(1, std::string());
    tokens_.clear();
    // Nesting up to `budget` derivations deep, then the shortest way out: sentences of
    // every depth, most of them nested well past the first structures.
    const uint32_t budget = 4 + static_cast<uint32_t>(next() % 44);
    std::vector<std::pair<uint32_t, uint32_t>> stack{{rt_.start, 0}};  // (symbol, depth)
    uint32_t expansions = 0;
    while (!stack.empty() && segments_.back().size() < kMaxBytes && ++expansions < kMaxExpansions) {
      const auto [symbol, depth] = stack.back();
      stack.pop_back();
      if (symbol < rt_.num_nonterminals) {
        const uint32_t prod = choose(symbol, depth >= budget);
        if (prod == kNone) return;  // unproductive (the flattener removes these)
        for (uint32_t k = rt_.prod_offsets[prod + 1]; k > rt_.prod_offsets[prod]; --k) {
          stack.emplace_back(rt_.prod_rhs[k - 1], depth + 1);
        }
      } else if (symbol < rt_.tokenset_base()) {
        write_lexeme(symbol - rt_.lexeme_base());
      } else {
        const uint32_t* bits =
            &rt_.tokenset_bits[static_cast<size_t>(symbol - rt_.tokenset_base()) * rt_.words];
        int64_t token = -1;
        for (uint32_t w = 0; w < rt_.words && token < 0; ++w) {
          if (bits[w]) token = int64_t{w} * 32 + __builtin_ctz(bits[w]);
        }
        if (token < 0) return;
        tokens_.push_back(token);
        segments_.emplace_back();
      }
    }
  }

  const std::vector<std::string>& segments() const { return segments_; }
  const std::vector<int64_t>& tokens() const { return tokens_; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr size_t kMaxBytes = 1024;
  static constexpr uint32_t kMaxExpansions = 20000;
  static constexpr size_t kMaxKeptStates = 65536;

  uint64_t next() {
    // splitmix64: the same sentences on every platform (std distributions are not).
    uint64_t z = (*rng_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  // The least derivation height of each nonterminal and production (kNone: derives
  // nothing), smallest first: a production's height is fixed when the last nonterminal of its
  // right-hand side is, one above it, so each production is visited once per occurrence
  // (a fixpoint over all productions took one pass per level of a 4,000-state rule chain).
  void derivation_heights() {
    const uint32_t num_prods = static_cast<uint32_t>(rt_.prod_lhs.size());
    height_.assign(rt_.num_nonterminals, kNone);
    prod_height_.assign(num_prods, kNone);
    std::vector<uint32_t> unresolved(num_prods, 0);
    std::vector<std::vector<uint32_t>> occurs(rt_.num_nonterminals);
    using Entry = std::pair<uint32_t, uint32_t>;  // (height, production)
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
    for (uint32_t prod = 0; prod < num_prods; ++prod) {
      for (uint32_t k = rt_.prod_offsets[prod]; k < rt_.prod_offsets[prod + 1]; ++k) {
        const uint32_t sym = rt_.prod_rhs[k];
        if (sym < rt_.num_nonterminals) {
          occurs[sym].push_back(prod);
          ++unresolved[prod];
        }
      }
      if (unresolved[prod] == 0) queue.emplace(1, prod);
    }
    while (!queue.empty()) {
      const auto [h, prod] = queue.top();
      queue.pop();
      prod_height_[prod] = h;
      const uint32_t lhs = rt_.prod_lhs[prod];
      if (height_[lhs] != kNone) continue;
      height_[lhs] = h;
      for (uint32_t user : occurs[lhs]) {
        if (--unresolved[user] == 0) queue.emplace(h + 1, user);
      }
    }
  }

  // Below the depth budget any production, half the time one that goes on nesting (it
  // names a nonterminal); at the budget, one of least height, so that the sentence ends.
  uint32_t choose(uint32_t nt, bool wind_down) {
    candidates_.clear();
    uint32_t least = kNone;
    for (uint32_t i = rt_.nt_prod_offsets[nt]; i < rt_.nt_prod_offsets[nt + 1]; ++i) {
      const uint32_t prod = rt_.nt_prods[i];
      const uint32_t h = prod_height_[prod];
      if (h == kNone) continue;
      least = std::min(least, h);
      candidates_.emplace_back(prod, h);
    }
    if (candidates_.empty()) return kNone;
    const bool nesting = !wind_down && (next() & 1);
    if (wind_down || nesting) {
      // At the budget, the least height; else those that name a nonterminal (height > 1),
      // when there are any.
      const auto keep = [&](const std::pair<uint32_t, uint32_t>& c) {
        return wind_down ? c.second == least : c.second > 1;
      };
      if (std::any_of(candidates_.begin(), candidates_.end(), keep)) {
        candidates_.erase(std::remove_if(candidates_.begin(), candidates_.end(),
                                         [&](const auto& c) { return !keep(c); }),
                          candidates_.end());
      }
    }
    return candidates_[next() % candidates_.size()].first;
  }

  // Per DFA state, the fewest bytes to an accepting state of its lexeme.
  void distances_to_accepting() {
    const size_t n = rt_.dfa_accepting.size();
    std::vector<std::vector<int32_t>> into(n);
    for (size_t state = 0; state < n; ++state) {
      const int32_t* row = rt_.dfa_row(static_cast<int32_t>(state));
      for (uint32_t c = 0; c < rt_.dfa_classes; ++c) {
        if (row[c] >= 0) into[static_cast<size_t>(row[c])].push_back(static_cast<int32_t>(state));
      }
    }
    distance_.assign(n, kNone);
    std::deque<int32_t> queue;
    for (size_t state = 0; state < n; ++state) {
      if (rt_.dfa_accepting[state]) {
        distance_[state] = 0;
        queue.push_back(static_cast<int32_t>(state));
      }
    }
    while (!queue.empty()) {
      const int32_t state = queue.front();
      queue.pop_front();
      for (int32_t from : into[static_cast<size_t>(state)]) {
        if (distance_[static_cast<size_t>(from)] == kNone) {
          distance_[static_cast<size_t>(from)] = distance_[static_cast<size_t>(state)] + 1;
          queue.push_back(from);
        }
      }
    }
  }

  // A random string of the lexeme: a walk through its DFA that takes, at each state, the way
  // on (to a next state, or stopping where the state accepts) that this writer has taken least
  // often from that state, ties at random, and then one of that way's bytes by how often text
  // uses it. Masks are kept per DFA state and context, and byte frequencies alone seldom reach
  // some states: with every byte weighted, a JSON number had a fraction in under 1% of the
  // traffic ('.' is one byte against ten digits and 'e'/'E'), and the decode met those states
  // first (bench JSON: 21-27 computed fills over five random streams, 10-16 over three this
  // way). Past a random length of 17-32 bytes, only bytes that bring the end closer.
  void write_lexeme(uint32_t lexeme) {
    std::string& out = segments_.back();
    int32_t state = static_cast<int32_t>(rt_.lexeme_start[lexeme]);
    const size_t closing_from = 17 + next() % 16;
    for (size_t length = 0;; ++length) {
      const bool accepting = rt_.dfa_accepting[static_cast<size_t>(state)] != 0;
      const bool closing = length >= closing_from;
      if (accepting && closing) return;
      StateWays& ways = ways_from(state);
      const uint32_t here = distance_[static_cast<size_t>(state)];
      // Closing, only ways that lead closer to the end; bytes text does not use only where
      // no other byte goes on.
      const auto open = [&](const Way& way) {
        return !closing || distance_[static_cast<size_t>(way.target)] < here;
      };
      bool weighted = false;
      for (const Way& way : ways.ways) weighted = weighted || (way.weighted() && open(way));
      Way* taken = nullptr;
      uint32_t fewest = accepting ? ways.stops : UINT32_MAX;
      uint32_t ties = accepting ? 1 : 0;
      for (Way& way : ways.ways) {
        if (!open(way) || way.weighted() != weighted) continue;
        if (way.taken < fewest) {
          fewest = way.taken;
          ties = 1;
          taken = &way;
        } else if (way.taken == fewest && next() % ++ties == 0) {
          taken = &way;
        }
        if (!weighted) break;  // the first byte text does not use, as a last resort
      }
      if (taken == nullptr) {
        if (accepting) ++ways.stops;
        return;  // stopping (or, not reached, a live state with no way on)
      }
      ++taken->taken;
      const uint8_t byte = weighted ? weighted_byte(ways, *taken) : taken->fallback;
      out.push_back(static_cast<char>(byte));
      state = taken->target;
      if (out.size() >= kMaxBytes) return;
    }
  }

  // How often text uses a byte: letters and digits most, then spaces, then the rest of
  // printable ASCII and newlines; 0 for the others.
  static uint32_t text_weight(int byte) {
    return std::isalnum(byte)                             ? 6
           : byte == ' '                                  ? 3
           : (byte > 0x20 && byte < 0x7f) || byte == '\n' ? 1
                                                          : 0;
  }

  // A way on from a DFA state: the next state, the bytes of some weight that lead there and
  // their total weight, the first byte that leads there where none has a weight, and how
  // often the writer took it.
  struct Way {
    int32_t target;
    uint32_t begin, end;  // its bytes of some weight in StateWays::bytes
    uint32_t weight;
    uint8_t fallback;
    uint32_t taken = 0;
    bool weighted() const { return end > begin; }
  };
  struct StateWays {
    std::vector<Way> ways;  // in the order of their first bytes
    std::vector<uint8_t> bytes;
    uint32_t stops = 0;  // times the walk stopped here (an accepting state)
  };

  // One of a weighted way's bytes, by their weights.
  uint8_t weighted_byte(const StateWays& ways, const Way& way) {
    uint32_t pick = static_cast<uint32_t>(next() % way.weight);
    for (uint32_t k = way.begin; k + 1 < way.end; ++k) {
      const uint32_t weight = text_weight(ways.bytes[k]);
      if (pick < weight) return ways.bytes[k];
      pick -= weight;
    }
    return ways.bytes[way.end - 1];
  }

  // The ways on from `state` to states that can still reach an end, computed at its first
  // visit (a walk visits few states many times; each visit scanned 256 bytes before, and the
  // writer was a fifth of a long traffic's time). Kept for at most kMaxKeptStates states (at
  // most 256 bytes each), so that lexemes of huge automata (long counted repetitions) cannot
  // make the writer large; past that, a state's ways are computed again at each visit without
  // their counts, so that its ways are taken at random.
  StateWays& ways_from(int32_t state) {
    if (ways_index_.empty()) ways_index_.assign(rt_.dfa_accepting.size(), kNone);
    uint32_t& index = ways_index_[static_cast<size_t>(state)];
    if (index != kNone) return ways_cache_[index];
    StateWays* ways = &unkept_ways_;
    if (ways_cache_.size() < kMaxKeptStates) {
      index = static_cast<uint32_t>(ways_cache_.size());
      ways = &ways_cache_.emplace_back();
    }
    ways->ways.clear();
    ways->bytes.clear();
    ways->stops = 0;
    const int32_t* row = rt_.dfa_row(state);
    for (int byte = 0; byte < 256; ++byte) {
      const int32_t target = row[rt_.dfa_byte_class[byte]];
      if (target < 0 || distance_[static_cast<size_t>(target)] == kNone) continue;
      const bool known = std::any_of(ways->ways.begin(), ways->ways.end(),
                                     [&](const Way& way) { return way.target == target; });
      if (!known) ways->ways.push_back({target, 0, 0, 0, static_cast<uint8_t>(byte)});
    }
    for (Way& way : ways->ways) {
      way.begin = static_cast<uint32_t>(ways->bytes.size());
      for (int byte = 0; byte < 256; ++byte) {
        if (row[rt_.dfa_byte_class[byte]] != way.target || text_weight(byte) == 0) continue;
        ways->bytes.push_back(static_cast<uint8_t>(byte));
        way.weight += text_weight(byte);
      }
      way.end = static_cast<uint32_t>(ways->bytes.size());
    }
    return *ways;
  }

  const Runtime& rt_;
  uint64_t* rng_ = nullptr;
  std::vector<uint32_t> height_, prod_height_, distance_;
  std::vector<std::pair<uint32_t, uint32_t>> candidates_;
  std::vector<uint32_t> ways_index_;  // DFA state -> its entry in ways_cache_, kNone: unvisited
  std::deque<StateWays> ways_cache_;  // a deque: entries stay put while it grows
  StateWays unkept_ways_;             // a state's ways past kMaxKeptStates
  std::vector<std::string> segments_;
  std::vector<int64_t> tokens_;
};

// The longest text token that a text starts with at a position, through the vocabulary trie.
// A node's children are consecutive subtrees, so finding one scans them in turn, one
// dependent read each; nodes with many children (the root has hundreds) get a table by byte at
// their first visit, and the traffic's tokenizing no longer walks hundreds of subtrees a token.
class TokenSearch {
 public:
  explicit TokenSearch(const Runtime& rt) : rt_(rt) {}

  // The token and its length in bytes; -1 and 0 where no token starts `text` at `pos`.
  std::pair<int64_t, size_t> longest_at(const std::string& text, size_t pos) {
    int64_t best = -1;
    size_t best_length = 0;
    uint32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      const uint32_t found = child(node, static_cast<uint8_t>(text[i]));
      if (!found) break;
      node = found;
      if (rt_.trie_tok_offsets[node] < rt_.trie_tok_offsets[node + 1]) {
        best = rt_.trie_tokens[rt_.trie_tok_offsets[node]];
        best_length = i + 1 - pos;
      }
    }
    return {best, best_length};
  }

 private:
  static constexpr uint32_t kScanned = 16;  // children scanned before a node gets a table

  uint32_t child(uint32_t node, uint8_t byte) {
    const auto table = tables_.find(node);
    if (table != tables_.end()) return by_byte_[table->second + byte];
    uint32_t seen = 0;
    for (uint32_t c = node + 1; c < rt_.trie_end[node]; c = rt_.trie_end[c]) {
      if (rt_.trie_byte[c] == byte) return c;
      if (++seen == kScanned) return tabled(node)[byte];
    }
    return 0;
  }

  const uint32_t* tabled(uint32_t node) {
    const size_t offset = by_byte_.size();
    by_byte_.resize(offset + 256, 0);
    for (uint32_t c = node + 1; c < rt_.trie_end[node]; c = rt_.trie_end[c]) {
      by_byte_[offset + rt_.trie_byte[c]] = c;
    }
    tables_.emplace(node, offset);
    return &by_byte_[offset];
  }

  const Runtime& rt_;
  std::unordered_map<uint32_t, size_t> tables_;  // node -> its table's offset in by_byte_
  std::vector<uint32_t> by_byte_;
};

// Synthetic traffic: random sentences of the grammar, written in vocabulary tokens as a
// tokenizer would (longest match first) and decoded through the normal caches, a mask at
// every token. The masks that a decode computes after the structural exploration are those
// of configurations nested deeper than it reaches (JSON: numbers and closing brackets three
// to six containers deep, whose exits descend through the containers); a server meets them
// in its first requests and then hits its caches. Masks never depend on this.
void prewarm_traffic(const std::shared_ptr<const Runtime>& runtime, PrewarmBudget& budget,
                     std::chrono::milliseconds time_budget, PrewarmStats& stats) {
  // 40K tokens until the writer kept its DFA ways and the traffic stopped copying masks it
  // does not read: the same ~150 ms of JSON traffic now decodes 100K (computed fills in the
  // bench JSON decode: 11-16 at 40K tokens over three random streams, 9-10 at 80K, 5-7 at 120K).
  constexpr uint32_t kMaxSentences = 2500;
  constexpr size_t kMaxTokens = 100000;
  // A quarter of the prewarm's budget: 250 ms by default, and more under a profiler given a
  // larger budget (GRAMKILN_PREWARM_MS), so that its slowed-down run still writes all the
  // traffic and decodes from the same caches as a run at full speed.
  PrewarmBudget own(nullptr, time_budget / 4);
  const Runtime& rt = *runtime;
  if (rt.num_tokens == 0) return;
  SentenceWriter writer(rt);
  TokenSearch token_search(rt);
  std::vector<uint32_t> words(rt.words);
  uint64_t rng = 0x243f6a8885a308d3ull;  // fixed: the same traffic on every load
  size_t tokens = 0;
  for (uint32_t sentence = 0; sentence < kMaxSentences && tokens < kMaxTokens; ++sentence) {
    if (budget.spent() || own.spent()) break;
    writer.write(rng);
    Matcher matcher(runtime);
    bool alive = true;
    const auto& segments = writer.segments();
    for (size_t part = 0; part < segments.size() && alive; ++part) {
      const std::string& text = segments[part];
      for (size_t pos = 0; pos < text.size() && alive;) {
        const auto [token, length] = token_search.longest_at(text, pos);
        if (token < 0) {
          alive = false;
          break;
        }
        matcher.warm_mask(words.data());
        alive = matcher.accept_token(token);
        pos += length;
        ++tokens;
        if ((tokens & 63) == 0 && (budget.spent() || own.spent())) alive = false;
      }
      if (alive && part < writer.tokens().size()) {
        matcher.warm_mask(words.data());
        alive = matcher.accept_token(writer.tokens()[part]);
        ++tokens;
      }
    }
    if (alive) matcher.warm_mask(words.data());
    ++stats.traffic_sentences;
  }
  stats.traffic_tokens += static_cast<uint32_t>(tokens);
}

// Configurations a few lexemes into the text, breadth-first (explore_breadth_first), then one
// path deep along first choices (follow_first_choices), then the kernels (explore_kernels).
void prewarm_structure(const std::shared_ptr<const Runtime>& runtime, PrewarmBudget& budget,
                       PrewarmStats& stats) {
  InsideStates inside_states(*runtime);
  const std::vector<std::string> shortest = shortest_lexeme_strings(*runtime);
  explore_breadth_first(runtime, budget, stats, shortest, inside_states);
  if (!budget.spent()) follow_first_choices(runtime, budget, stats, shortest, inside_states);
  if (!budget.spent()) explore_kernels(runtime, budget, stats, shortest);
}

// Item and closure walks ahead of the decode (defined with the item walks below).
using GroupSymbol = std::pair<const ExitGroup*, uint32_t>;
std::vector<GroupSymbol> prewarm_item_walks(const Runtime& rt, PrewarmBudget& budget,
                                            PrewarmStats& stats);
void prewarm_closure_walks(const Runtime& rt, PrewarmBudget& budget,
                           const std::vector<GroupSymbol>& completions);
void prewarm_local_walks(const Runtime& rt, PrewarmBudget& budget,
                         const std::vector<GroupSymbol>& completions, PrewarmStats& stats);

}  // namespace

namespace {

// Room in the key tables for as many entries again as the prewarm left in them (at most 64K
// more), so that the decode that follows does not grow one inside a fill: a table doubles by
// rehashing every entry (measured: a C-like walk table passing 8,192 entries during a decode
// made that fill ~220 us). Off the fill path, with each table's lock.
void leave_table_headroom(const Runtime& rt) {
  GroupCache& cache = *rt.groups;
  // At most 64K entries more: a table the prewarm filled that far is not doubled again.
  auto headroom = [](size_t entries) { return entries + std::min<size_t>(entries, 65536) + 1024; };
  {
    std::lock_guard<std::mutex> lock(cache.walk_mutex);
    cache.walks.reserve(headroom(cache.walks.size()));
    cache.future_walks.reserve(headroom(cache.future_walks.size()));
    cache.item_walks.reserve(headroom(cache.item_walks.size()));
    cache.local_walks.reserve(headroom(cache.local_walks.size()));
    cache.descents.reserve(headroom(cache.descents.size()));
    cache.future_descents.reserve(headroom(cache.future_descents.size()));
    cache.walk_contents.reserve(headroom(cache.walk_contents.size()));
  }
  {
    std::lock_guard<std::mutex> lock(cache.mask_mutex);
    for (GroupCache::MaskTable* table : {&cache.masks, &cache.depth_masks, &cache.future_masks}) {
      table->current.reserve(headroom(table->current.size()));
    }
    cache.composed_masks.reserve(headroom(cache.composed_masks.size()));
    cache.mask_contents.reserve(headroom(cache.mask_contents.size()));
  }
  FutureLanguages& fl = *rt.futures;
  std::lock_guard<std::mutex> lock(fl.mutex);
  fl.reserve_headroom(headroom);
}

// The prewarm's last step: the memory a computed fill reads most, read back line by line so
// that a decode that starts right after the prewarm finds it in the last-level cache. The
// prewarm's earlier steps touch several times what that cache holds (C-like: ~45 MB of tables),
// and the huge-page step before this one copies every extent it backs, so the decode used to
// find these tables in DRAM, where a computed fill's descents are chains of dependent misses
// (C-like: ~25 nodes, a local walk slot and sometimes a block each; ~150 ns a miss on this host
// against ~40 in its last-level cache). Read in order of use, the last read most likely to
// stay: the future-key tables where future keys are on (memos, recipes, keys by anchors,
// ids), then the walk arena (descents and local walks too large for a slot), then the slots
// of the stored local walks (only those: the table keeps headroom, and its empty slots would
// push the rest out). At most kReadBackBytes; the mask tables are left out, which would push
// these out (C-like: ~15 MB; docs/design/runtime.md, "Session 54"). A piece at a time under its
// mutex, so that a decode running beside a background prewarm waits at most for one piece. Returns
// the bytes read.
size_t read_back_fill_tables(const Runtime& rt, const std::atomic<bool>* stop) {
  GroupCache& cache = *rt.groups;
  if (!cache.read_back) return 0;
  constexpr size_t kReadBackBytes = size_t{24} << 20;
  constexpr size_t kPiece = 4096;  // slots or stored walks a lock: ~20-60 us
  uint64_t sum = 0;
  size_t bytes = 0;
  auto read_lines = [&](const void* address, size_t size) {
    const char* at = static_cast<const char*>(address);
    for (size_t offset = 0; offset < size; offset += 64) {
      sum += *reinterpret_cast<const volatile char*>(at + offset);
    }
    // The last line too, where `size` ends past the last 64-byte step.
    sum += *reinterpret_cast<const volatile char*>(at + size - 1);
    bytes += size;
  };
  auto stopped = [&] {
    return bytes >= kReadBackBytes || (stop && stop->load(std::memory_order_relaxed));
  };
  // Calls read(begin, end) for consecutive pieces under `mutex` while `more(begin)`.
  auto in_pieces = [&](std::mutex& mutex, auto&& more, auto&& read) {
    for (size_t begin = 0; !stopped(); begin += kPiece) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!more(begin)) break;
      read(begin, begin + kPiece);
    }
  };
  FutureLanguages& futures = *rt.futures;
  auto read_table = [&](const auto& table) {
    in_pieces(
        futures.mutex, [&](size_t begin) { return begin < table.num_slots(); },
        [&](size_t begin, size_t end) { table.visit_slots(begin, end, read_lines); });
  };
  // Where the future key is off (JSON: no configuration found masks by it), its tables only
  // took room.
  if (futures.state.load(std::memory_order_relaxed) == FutureLanguages::kOn) {
    read_table(futures.futures);
    read_table(futures.recipes);
    read_table(futures.keys_by_anchors);
    read_table(futures.ids);
    read_table(futures.concatenations);
    read_table(futures.unions);
    std::lock_guard<std::mutex> lock(futures.mutex);
    if (!futures.recipe_entries.empty()) {
      read_lines(futures.recipe_entries.data(),
                 futures.recipe_entries.size() * sizeof(futures.recipe_entries[0]));
    }
  }
  for (size_t chunk = 0; !stopped(); ++chunk) {  // 64 KB a lock
    std::lock_guard<std::mutex> lock(cache.walk_mutex);
    if (chunk >= cache.walk_arena.num_chunks()) break;
    cache.walk_arena.visit_chunk(chunk, read_lines);
  }
  in_pieces(
      cache.walk_mutex, [&](size_t begin) { return begin < cache.local_walks.size(); },
      [&](size_t begin, size_t end) { cache.local_walks.visit_stored(begin, end, read_lines); });
  // Kept, so that the reads are not optimized away.
  static std::atomic<uint64_t> read_back_sum{0};
  read_back_sum.fetch_add(sum, std::memory_order_relaxed);
  return bytes;
}

}  // namespace

PrewarmStats prewarm_runtime(const std::shared_ptr<const Runtime>& runtime,
                             const std::atomic<bool>* stop) {
  // Typical grammars finish in 5-90 ms on one core; this only bounds the pathological ones.
  // GRAMKILN_PREWARM_MS overrides it (a profiler's slowed-down run, a server with time to
  // spare).
  std::chrono::milliseconds time_budget{1000};
  unsigned long long ms = 0;
  if (env_number("GRAMKILN_PREWARM_MS", &ms)) {
    time_budget = std::chrono::milliseconds(std::min<unsigned long long>(ms, 1ull << 40));
  }
  PrewarmBudget budget(stop, time_budget);
  PrewarmStats stats;
  // Future languages are canonicalised without a per-step budget here (see future.cpp).
  const bool was_prewarming = FutureWork::prewarming;
  FutureWork::prewarming = true;
  struct Restore {
    bool value;
    ~Restore() { FutureWork::prewarming = value; }
  } restore{was_prewarming};
  prewarm_groups(*runtime, budget, stats);
  std::vector<GroupSymbol> completions;
  {
    // Item and closure walks get at most half the time: on grammars whose groups are huge they
    // could take it all, and the masks of the first configurations matter more.
    PrewarmBudget walk_budget(stop, time_budget / 2);
    completions = prewarm_item_walks(*runtime, walk_budget, stats);
    prewarm_closure_walks(*runtime, walk_budget, completions);
  }
  prewarm_first_masks(runtime, budget, stats);
  prewarm_structure(runtime, budget, stats);
  prewarm_local_walks(*runtime, budget, completions, stats);
  // GRAMKILN_PREWARM_TRAFFIC=off (or 0) leaves the traffic out (measuring what it adds, or testing
  // what the phases before it build).
  const char* traffic = std::getenv("GRAMKILN_PREWARM_TRAFFIC");
  // The fills of the traffic that missed the future key, and those of them a depth key answered.
  size_t traffic_misses = 0, traffic_depth_hits = 0;
  if (!traffic || (std::strcmp(traffic, "off") != 0 && std::strcmp(traffic, "0") != 0)) {
    const GroupCache& cache = *runtime->groups;
    const size_t hits_before = cache.hits_depth.load(std::memory_order_relaxed);
    const size_t computed_before = cache.fills_computed.load(std::memory_order_relaxed);
    prewarm_traffic(runtime, budget, time_budget, stats);
    traffic_depth_hits = cache.hits_depth.load(std::memory_order_relaxed) - hits_before;
    traffic_misses = traffic_depth_hits +
                     (cache.fills_computed.load(std::memory_order_relaxed) - computed_before);
  }
  {
    std::lock_guard<std::mutex> lock(runtime->groups->kernel_mutex);
    stats.kernels = static_cast<uint32_t>(runtime->groups->kernel_snapshots.size());
  }
  if (budget.spent()) stats.complete = false;
  constexpr size_t kResidentFreeMasks = 32;  // two slabs: 512 KB at 128K tokens
  runtime->groups->mask_pool->keep_free(runtime->words, kResidentFreeMasks);
  leave_table_headroom(*runtime);
  // Matchers created from now on use future keys only where they pay (see future_keys_pay),
  // judged here when the prewarm ended before its own judgement. Not judged again over the
  // whole prewarm: where they pay, its exploration after the judgement skips configurations
  // whose future key it has seen, so its fills mostly miss that key by construction (C-like:
  // the share fell from 0.56 to 0.37 by the end, and to below 0.3 with a longer exploration).
  FutureLanguages& futures = *runtime->futures;
  if (futures.mode == FutureLanguages::Mode::kAuto &&
      futures.state.load(std::memory_order_relaxed) == FutureLanguages::kUndecided) {
    futures.decide(future_keys_pay(*runtime));
  }
  // Where future keys are on, the bounded-depth mask keys are kept only if the traffic, which
  // stands for a decode, found masks under them: each computed fill otherwise pays for their
  // probes, the depths of its descents and a store (C-like: 6 hits in 287 such fills, ~12% of a
  // computed fill's time; see docs/design/runtime.md, "Session 43").
  constexpr size_t kDepthKeysJudgedAfter = 32;
  if (futures.state.load(std::memory_order_relaxed) == FutureLanguages::kOn &&
      traffic_misses >= kDepthKeysJudgedAfter && traffic_depth_hits * 16 < traffic_misses) {
    runtime->groups->depth_keys_idle.store(true, std::memory_order_relaxed);
  }
  // Decoding judges the share over its own fills from here on.
  futures.set_baseline(*runtime->groups);
  // Last: what the decode's computed fills read is now built (and the tables are at the size
  // leave_table_headroom gave them).
  stats.huge_page_extents = static_cast<uint32_t>(back_caches_with_huge_pages(*runtime, stop));
  stats.read_back_bytes = read_back_fill_tables(*runtime, stop);
  return stats;
}

namespace {

// The smallest d such that every set in `touched` (sorted) is within d-1 origin hops of
// `root` (over pending items, the only ones H_d covers), or 0 when that exceeds
// Chart::kDepthHashes or the search grows too wide. Breadth-first, stopping as soon as every
// touched set is reached.
//
// `path_hops`, when below Chart::kDepthHashes, is a bound the caller knows: every touched set
// is within that many hops (a descent reaches each set it reads along a path of origins). The
// search then stops one level short of it, the widest level of a breadth-first search, since a
// set not found within path_hops - 1 hops is exactly path_hops away; the answer is the same.
uint32_t depth_needed(const ChartView& view, Scratch& sc, uint32_t root,
                      const std::vector<uint32_t>& touched,
                      uint32_t path_hops = Chart::kDepthHashes) {
  const bool bounded = path_hops < Chart::kDepthHashes;
  constexpr size_t kMaxHopSearch = 128;
  if (bounded && path_hops == 0) return 1;  // every touched set is the root
  // Sets this many hops away are reached but not searched from.
  const uint32_t last_level = bounded ? path_hops - 1 : Chart::kDepthHashes - 1;
  sc.begin_visit(view.num_sets(), root);
  sc.hop_frontier.clear();
  sc.hop_frontier.emplace_back(root, 0);
  auto is_touched = [&](uint32_t set) {
    return std::binary_search(touched.begin(), touched.end(), set);
  };
  size_t found = is_touched(root) ? 1 : 0;
  uint32_t deepest = 0;
  for (size_t next = 0; next < sc.hop_frontier.size() && found < touched.size(); ++next) {
    const auto [set, hops] = sc.hop_frontier[next];
    if (hops == last_level) break;  // breadth-first: every later entry is as deep
    uint32_t local;
    const Chart& chart = view.chart_of(set, &local);
    for (uint32_t w = chart.wait_begin[local]; w < chart.wait_begin[local + 1]; ++w) {
      const uint32_t origin = chart.items[static_cast<uint32_t>(chart.waits[w])].origin;
      if (!sc.visit(origin)) continue;
      // A search this wide means a key that covers much of the stack, which would rarely
      // recur: give up (the walk is simply not cached) rather than pay for it on every miss,
      // unless the caller's path gives a depth.
      if (sc.hop_frontier.size() >= kMaxHopSearch) return bounded ? path_hops + 1 : 0;
      sc.hop_frontier.emplace_back(origin, hops + 1);
      uint32_t at;
      __builtin_prefetch(&view.chart_of(origin, &at).wait_begin[at]);  // read when its turn comes
      if (is_touched(origin)) {
        ++found;
        deepest = hops + 1;
      }
    }
  }
  if (found == touched.size()) return deepest + 1;
  return bounded ? path_hops + 1 : 0;
}

// Append to `out` every set within `max_hops` origin hops of `root` (over pending items, as
// H_d sees them), `root` included. False when the neighbourhood is too wide to be worth it.
bool collect_within_hops(const ChartView& view, Scratch& sc, uint32_t root, uint32_t max_hops,
                         std::vector<uint32_t>& out) {
  constexpr size_t kMaxHopSearch = 128;
  sc.begin_visit(view.num_sets(), root);
  sc.hop_frontier.clear();
  sc.hop_frontier.emplace_back(root, 0);
  for (size_t next = 0; next < sc.hop_frontier.size(); ++next) {
    const auto [set, hops] = sc.hop_frontier[next];
    out.push_back(set);
    if (hops == max_hops) continue;
    uint32_t local;
    const Chart& chart = view.chart_of(set, &local);
    for (uint32_t w = chart.wait_begin[local]; w < chart.wait_begin[local + 1]; ++w) {
      const uint32_t origin = chart.items[static_cast<uint32_t>(chart.waits[w])].origin;
      if (!sc.visit(origin)) continue;
      if (sc.hop_frontier.size() >= kMaxHopSearch) return false;
      sc.hop_frontier.emplace_back(origin, hops + 1);
    }
  }
  return true;
}

// Cache key of the exit walk of `group` (its nodes reached in `lexeme`) from a set whose
// depth hash H_depth is `hash`.
std::pair<uint64_t, uint64_t> walk_key(const ExitGroup& group, uint32_t lexeme, uint32_t depth,
                                       const uint64_t* hash) {
  const uint64_t id = reinterpret_cast<uintptr_t>(&group);
  const uint64_t lo = mix64(mix64(id ^ 0x82efa98ec4e6c894ull) + (uint64_t{lexeme} << 8 | depth));
  const uint64_t hi = mix64(mix64(id + 0x0801f2e2858efc16ull) ^ (uint64_t{depth} << 32 | lexeme));
  return {mix64(lo ^ hash[0]), mix64(hi + hash[1] * 0xd6e8feb86659fd93ull)};
}

using WalkResultPtr = std::shared_ptr<const GroupCache::WalkResult>;

// walk_level's result id for a walk that added no tokens (its group has no exits).
constexpr uint64_t kNothingEmitted = ~uint64_t{0};

// Empty every walk table and the contents they share (past the walk budget). Call with
// walk_mutex held.
void clear_walks_locked(GroupCache& cache) {
  cache.walks.clear();
  cache.future_walks.clear();
  cache.item_walks.clear();
  cache.local_walks.clear();
  cache.closure_walks.clear();
  cache.descents.clear();
  cache.future_descents.clear();
  cache.walk_contents.clear();
  cache.walk_arena.clear();
  ++cache.walk_generation;
  cache.walk_bytes = 0;
  ++cache.walk_clears;
}

// Clear every walk table when `bytes` more would pass the walk budget. Call with walk_mutex
// held.
void make_walk_room_locked(GroupCache& cache, size_t bytes) {
  if (cache.walk_bytes + bytes > cache.walk_budget_bytes) clear_walks_locked(cache);
}

// Put `result` under `key` in `table` (one of the walk tables), `size` more bytes in all; past
// the budget every walk table and the contents are cleared first. Call with walk_mutex held.
void put_walk_locked(GroupCache& cache, KeyMap<WalkResultPtr>& table,
                     const std::pair<uint64_t, uint64_t>& key, WalkResultPtr result, size_t size) {
  if (cache.walk_bytes + size > cache.walk_budget_bytes) {
    clear_walks_locked(cache);
    size = 96 + 4 * result->size() + 64;
  }
  if (table.emplace(key, std::move(result))) cache.walk_bytes += size;
}

uint64_t walk_digest(const Scratch::WalkFrame& frame) {
  return frame.dense
             ? bitset_digest(frame.bits.data(), frame.bits.size())
             : content_digest(frame.tokens.data(), frame.tokens.size(), 0x3c6ef372fe94f82bull);
}

// The shared copy of a walk frame's tokens (a token list, in walk order, for a sparse frame, the
// bitset for a dense one): an equal earlier result, or a new one with a new id, whose size
// `added` receives (else 0). Call with walk_mutex held.
WalkResultPtr intern_walk_locked(GroupCache& cache, const Scratch::WalkFrame& frame,
                                 uint64_t digest, size_t* added) {
  const std::vector<uint32_t>& data = frame.dense ? frame.bits : frame.tokens;
  *added = 0;
  auto& same_digest = cache.walk_contents[digest];
  for (const auto& candidate : same_digest) {
    if (candidate->dense == frame.dense && candidate->same_words(data)) return candidate;
  }
  auto result = GroupCache::WalkResult::make(frame.dense, data, cache.next_walk_id++);
  *added = 4 * result->size() + 64;
  same_digest.push_back(result);
  return result;
}

// Store a walk's tokens under `key` in `table`, sharing the stored copy with equal earlier
// results. Returns the stored result (the one already there if `key` was taken).
WalkResultPtr store_walk(const Runtime& rt, KeyMap<WalkResultPtr>& table,
                         const std::pair<uint64_t, uint64_t>& key,
                         const Scratch::WalkFrame& frame) {
  const uint64_t digest = walk_digest(frame);
  GroupCache& cache = *rt.groups;
  std::lock_guard<std::mutex> lock(cache.walk_mutex);
  if (const WalkResultPtr* found = table.find(key)) return *found;
  size_t added;
  WalkResultPtr shared = intern_walk_locked(cache, frame, digest, &added);
  put_walk_locked(cache, table, key, shared, 96 + added);
  return shared;
}

// The shared copy of a top-level walk's tokens that no table keeps (its dependencies were too
// wide to key): its id still names the content in a mask's composition (see
// GroupCache::composed_masks). Null past the walk budget (the composition is then unknown).
WalkResultPtr intern_walk(const Runtime& rt, const Scratch::WalkFrame& frame) {
  const uint64_t digest = walk_digest(frame);
  GroupCache& cache = *rt.groups;
  std::lock_guard<std::mutex> lock(cache.walk_mutex);
  const size_t words = frame.dense ? frame.bits.size() : frame.tokens.size();
  if (cache.walk_bytes + 4 * words + 64 > cache.walk_budget_bytes) return nullptr;
  size_t added;
  WalkResultPtr shared = intern_walk_locked(cache, frame, digest, &added);
  cache.walk_bytes += added;
  return shared;
}

// The walk frame of nesting level `level`, cleared.
Scratch::WalkFrame& frame_at(Scratch& sc, uint32_t level) {
  while (sc.frames.size() <= level) sc.frames.push_back(std::make_unique<Scratch::WalkFrame>());
  Scratch::WalkFrame& frame = *sc.frames[level];
  frame.built.clear();
  frame.reads.clear();
  frame.deps_unknown = false;
  frame.dense = false;
  frame.tokens.clear();
  return frame;
}

void make_dense(Scratch::WalkFrame& frame, uint32_t words) {
  if (frame.dense) return;
  frame.bits.assign(words, 0);
  for (uint32_t token : frame.tokens) set_bit(frame.bits.data(), token);
  frame.tokens.clear();
  frame.dense = true;
}

// Add tokens to a walk's result: into `frame` when it is a nested walk's, else into `words`.
void emit_tokens(Scratch::WalkFrame* frame, uint32_t* words, const uint32_t* tokens, size_t count,
                 uint32_t mask_words) {
  if (!frame) {
    for (size_t i = 0; i < count; ++i) set_bit(words, tokens[i]);
  } else if (frame->dense) {
    for (size_t i = 0; i < count; ++i) set_bit(frame->bits.data(), tokens[i]);
  } else {
    frame->tokens.insert(frame->tokens.end(), tokens, tokens + count);
    // Past an eighth of the mask size, sorting the list costs more than the bitset (measured:
    // with the switch at the full mask size, C-like fills were ~2x slower).
    if (frame->tokens.size() > mask_words / 8) make_dense(*frame, mask_words);
  }
}

void emit_bits(Scratch::WalkFrame* frame, uint32_t* words, const uint32_t* bits,
               uint32_t mask_words) {
  if (!frame) {
    or_words(words, bits, mask_words);
    return;
  }
  if (!frame->dense && frame->tokens.empty()) {
    // The first tokens of the frame: one copy instead of zeroing and ORing.
    frame->bits.assign(bits, bits + mask_words);
    frame->dense = true;
    return;
  }
  make_dense(*frame, mask_words);
  or_words(frame->bits.data(), bits, mask_words);
}

void emit_result(const GroupCache::WalkResult& result, Scratch::WalkFrame* frame, uint32_t* words,
                 uint32_t mask_words) {
  if (result.dense) {
    emit_bits(frame, words, result.data(), mask_words);
  } else {
    emit_tokens(frame, words, result.data(), result.size(), mask_words);
  }
}

// Whether the current fill has spent its time on exit walks (GroupCache::fill_walk_time),
// reading the clock once every 64 walks. The time counts from the first reading, after the
// fill's first 64 walks (far under a millisecond), so that fills with fewer read no clock.
bool walk_time_spent(Scratch& sc) {
  if (++sc.walks_since_clock < 64) return false;
  sc.walks_since_clock = 0;
  const auto now = std::chrono::steady_clock::now();
  if (!sc.walk_clock_started) {
    sc.walk_clock_started = true;
    sc.walk_deadline = now + sc.walk_time;
    return false;
  }
  return now > sc.walk_deadline;
}

// Follow the group's exits: OR into `words` the tokens that end `lexeme` (the lexeme the
// group's nodes were reached in) mid-token and go on into whatever the parser expects next,
// i.e. the set reached from `set` by scanning `lexeme`, recursively.
//
// Results are cached at every nesting level. A walk depends only on the pending items of the
// sets it reads that existed before it (the hypothetical sets it builds are derived from
// those). When all of them lie within d-1 origin hops of `set`, the result is a function of
// the group, the lexeme and H_d(set), and is stored under that key, so it is reused wherever
// the same structure recurs (other positions, matchers, requests), whatever the stack below.
// A nested result taken from the cache stands for every set within its depth of the set it
// starts from: those count as reads of the enclosing walk (a walk is left uncached only when
// that neighbourhood is too wide to collect).
// The tokens go to `parent` (the enclosing walk) when given, else into `words` (the mask).
// Returns the depth d such that the result is a function of H_d(set) (0: of nothing, the group
// has no exits), or -1 when it was neither stored nor taken from the cache.
int walk_level(const Runtime& rt, ChartView& view, Scratch& sc, const ExitGroup& group,
               uint32_t lexeme, uint32_t set, uint32_t* words, uint32_t level,
               Scratch::WalkFrame* parent,
               const std::pair<uint64_t, uint64_t>* future_key = nullptr,
               uint64_t* result_id = nullptr) {
  if (result_id) *result_id = 0;
  if (group.child_nodes.empty()) {
    if (result_id) *result_id = kNothingEmitted;
    return 0;
  }
  GroupCache& cache = *rt.groups;
  if (future_key) {
    // A top-level walk is a function of the thread's state and the future language after its
    // lexeme at its origin (see future.cpp): equal wherever that future recurs, whatever the
    // chart looks like (a depth key can tell those apart only by the items it hashes).
    std::lock_guard<std::mutex> lock(cache.walk_mutex);
    if (const WalkResultPtr* found = cache.future_walks.find(*future_key)) {
      emit_result(**found, parent, words, rt.words);
      if (result_id) *result_id = (*found)->id;
      cache.hits_future_walks.fetch_add(1, std::memory_order_relaxed);
      return -1;  // which sets it read is not known here
    }
  }
  WalkResultPtr result;  // what to keep under `future_key`
  // Copied: building hypothetical sets below may reallocate the overlay's hashes.
  uint64_t hashes[Chart::kDepthHashes * 2];
  auto fetch_hash = [&](uint32_t d) {
    const uint64_t* hash = overlay_depth_hash(rt, view, sc.overlay_depths_done, set, d);
    hashes[(d - 1) * 2] = hash[0];
    hashes[(d - 1) * 2 + 1] = hash[1];
  };
  if (group.persistent) {
    uint32_t hit_depth = 0;
    const uint32_t stored = group.stored_depths.load(std::memory_order_relaxed);
    {
      // Shallowest first, each depth hashed only when probed (a hit at depth d needs no deeper
      // hash); one lock for all probes (hashing touches only this thread's overlay).
      std::lock_guard<std::mutex> lock(cache.walk_mutex);
      for (uint32_t d = 1; d <= Chart::kDepthHashes && hit_depth == 0; ++d) {
        if (!((stored >> d) & 1u)) continue;
        fetch_hash(d);
        const auto* found = cache.walks.find(walk_key(group, lexeme, d, hashes + (d - 1) * 2));
        if (found == nullptr) continue;
        emit_result(**found, parent, words, rt.words);
        if (result_id) *result_id = (*found)->id;
        if (future_key) put_walk_locked(cache, cache.future_walks, *future_key, *found, 96);
        hit_depth = d;
      }
    }
    if (hit_depth > 0) {
      // The cached result is a function of H_d(set), i.e. of the sets within d-1 hops of `set`:
      // the enclosing walk depends on all of them (a superset of what this walk read, so its
      // own key stays exact). Too wide a neighbourhood leaves the enclosing walk uncached.
      if (parent && !collect_within_hops(view, sc, set, hit_depth - 1, parent->reads)) {
        parent->deps_unknown = true;
      }
      return static_cast<int>(hit_depth);
    }
  }
  // A walk over a group built for one use (past the group budget) builds its levels again
  // and cannot be stored: it counts for 16 (a random grammar whose first fill filled the
  // budget spent ~300 ms on such walks before each search).
  const size_t cost = group.persistent ? 1 : 16;
  if (sc.walks_exhausted || sc.walks_left < cost || sc.trie_nodes_walked > sc.trie_nodes_limit ||
      walk_time_spent(sc)) {
    sc.walks_exhausted = true;
    return -1;
  }
  sc.walks_left -= cost;
  Scratch::WalkFrame& frame = frame_at(sc, level);
  const uint32_t after = advance_set(rt, view, sc, set, lexeme);
  const uint32_t after_local = after - view.base_sets;
  frame.built.push_back(after);
  frame.reads.insert(frame.reads.end(),
                     sc.overlay_read_sets.begin() + sc.overlay_read_offsets[after_local],
                     sc.overlay_read_sets.begin() + sc.overlay_read_offsets[after_local + 1]);
  const FollowTable& table = *sc.overlay_follow[after_local];
  std::unique_ptr<LevelCache> transient;
  const LevelCache& tokens = level_of(rt, group, table, transient);
  if (!tokens.bits.empty()) {
    emit_bits(&frame, nullptr, tokens.bits.data(), rt.words);
  } else {
    emit_tokens(&frame, nullptr, tokens.tokens.data(), tokens.tokens.size(), rt.words);
  }
  for (const ExitGroup* child : tokens.deeper) {
    walk_level(rt, view, sc, *child, child->lexeme, after, nullptr, level + 1, &frame);
    // Incomplete from here on: neither emitted nor stored (the fill falls back to the trie
    // search; see fill_mask_uncached).
    if (sc.walks_exhausted) return -1;
  }
  // Sparse results stay unsorted, duplicates included: they are only ever ORed, and sorting
  // them was ~15% of a cold JSON pass.
  if (frame.dense) {
    emit_bits(parent, words, frame.bits.data(), rt.words);
  } else {
    emit_tokens(parent, words, frame.tokens.data(), frame.tokens.size(), rt.words);
  }
  int stored_depth = -1;
  if (!frame.deps_unknown && group.persistent) {
    // Distinct from here on, so that enclosing walks merge short lists (nested walks used to
    // pass every duplicate up, and sorting those was half of some cold JSON Schema fills).
    std::sort(frame.built.begin(), frame.built.end());
    frame.built.erase(std::unique(frame.built.begin(), frame.built.end()), frame.built.end());
    std::sort(frame.reads.begin(), frame.reads.end());
    frame.reads.erase(std::unique(frame.reads.begin(), frame.reads.end()), frame.reads.end());
    // Both sorted: one merge (a binary search per read was ~5% of a C-like fill).
    sc.walk_touched.clear();
    std::set_difference(frame.reads.begin(), frame.reads.end(), frame.built.begin(),
                        frame.built.end(), std::back_inserter(sc.walk_touched));
    const uint32_t depth = depth_needed(view, sc, set, sc.walk_touched);
    if (depth > 0) {
      fetch_hash(depth);
      group.stored_depths.fetch_or(1u << depth, std::memory_order_relaxed);
      result = store_walk(rt, cache.walks, walk_key(group, lexeme, depth, hashes + (depth - 1) * 2),
                          frame);
      stored_depth = static_cast<int>(depth);
    }
  }
  if (future_key) {
    if (!result) {
      result = store_walk(rt, cache.future_walks, *future_key, frame);
    } else {
      std::lock_guard<std::mutex> lock(cache.walk_mutex);
      put_walk_locked(cache, cache.future_walks, *future_key, result, 96);
    }
  }
  if (result_id && !result) result = intern_walk(rt, frame);
  if (result_id && result) *result_id = result->id;
  if (parent) {
    parent->built.insert(parent->built.end(), frame.built.begin(), frame.built.end());
    parent->reads.insert(parent->reads.end(), frame.reads.begin(), frame.reads.end());
    parent->deps_unknown = parent->deps_unknown || frame.deps_unknown;
  }
  return stored_depth;
}

// Item walks: exit walks split by pending item, so that what a walk finds is keyed by a finite
// pair (group, dotted item) instead of the neighbourhood of the set it starts from.
//
// The set reached from set r by a symbol X holds, for every item e of r waiting for X, e
// advanced past X, and what completions of e's left-hand side at e's origin bring in. A token
// follows one derivation, so the tokens a walk finds are the union over those items of (a) the
// tokens that go on inside e's production (and what it predicts) and (b) those that go on after
// e's left-hand side completes, at e's origin, which is the same question one level down the
// stack. (a) is a function of the group and e's dotted id alone: it is walked once on a chart
// of one set holding e (its origin an empty set standing for "below"), where reaching that
// empty set is a completion of e's left-hand side, recorded with the group at which it
// happens. A fill then follows those completions down the matcher's own chart, looking up
// (a) for every waiting item it meets: no hypothetical set over the matcher's chart is built.
// What one completion does at one set is looked up at once (compute_local_walk): the set's
// predicted items are a function of its kernel's dotted ids, so the item walks of the
// predictions it reaches, and which kernel items it completes, are kept by those ids.
//
// A thread's whole descent is also kept, by H_d of its origin (as walks by sets are), so that
// where a neighbourhood recurs the descent is one probe.
//
// Measured (Llama 3, bench decodes after the prewarm; see docs/design/runtime.md, "Session
// 21"): instructions per computed fill JSON 44 k -> 32 k, C-like 148 k -> 72 k (callgrind);
// p99 of all fills JSON ~8.2 -> ~6.2 us, C-like ~55 -> ~41 us (min of 5 loads per position).

using ItemWalkPtr = std::shared_ptr<const GroupCache::ItemWalk>;

// Reset the scratch overlay for hypothetical sets over a new base chart.
void reset_overlay(Scratch& sc) {
  sc.overlay.items.clear();
  sc.overlay.set_begin.assign(1, 0);
  sc.overlay.hash_lo.clear();
  sc.overlay.hash_hi.clear();
  sc.overlay.wait_begin.assign(1, 0);
  sc.overlay.waits.clear();
  sc.overlay.leo_begin.assign(1, 0);
  sc.overlay.leo.clear();
  // An unordered_map's clear() zeroes its whole bucket array even when it is empty, and after
  // a walk by sets that array stays large: one memset per computed fill otherwise.
  if (!sc.next_set.empty()) sc.next_set.clear();
  sc.overlay_follow.clear();
  sc.overlay_depths_done.clear();
  sc.overlay_read_offsets.assign(1, 0);
  sc.overlay_read_sets.clear();
  sc.overlay.depth_hash.clear();
}

// The chart of an item walk: set 0 empty ("below"), set 1 the item alone, its origin set 0.
void set_up_item_chart(const Runtime& rt, Chart& chart, uint32_t dotted) {
  chart.items.assign(1, Item{dotted, 0});
  chart.set_begin.assign({0, 0, 1});
  chart.hash_lo.assign(2, 0);
  chart.hash_hi.assign(2, 0);
  chart.wait_begin.assign({0, 0, 1});
  chart.waits.assign(1, static_cast<uint64_t>(rt.dotted_next[dotted]) << 32);
  chart.leo_begin.assign({0, 0, 0});
  chart.leo.clear();
  chart.depth_hash.assign(2 * Chart::kDepthHashes * 2, 0);
}

// One level of an item walk: the tokens of `group` (its nodes reached in the symbol `symbol`
// scanned from `set`) that go on past that symbol, into `frame`; the groups at which the item's
// left-hand side completes (set 0 of the item chart is read), into `pops`.
void item_walk_level(const Runtime& rt, ChartView& view, Scratch& sc, const ExitGroup& group,
                     uint32_t symbol, uint32_t set, Scratch::WalkFrame& frame,
                     std::vector<const ExitGroup*>& pops) {
  if (group.child_nodes.empty()) return;
  if (!group.persistent) {
    sc.item_walk_unkept = true;
    return;
  }
  if (sc.walks_exhausted || sc.walks_left < 1 || sc.trie_nodes_walked > sc.trie_nodes_limit ||
      walk_time_spent(sc)) {
    sc.walks_exhausted = true;
    return;
  }
  sc.walks_left -= 1;
  const uint32_t after = advance_symbol(rt, view, sc, set, symbol);
  const uint32_t after_local = after - view.base_sets;
  const uint32_t* reads_begin = sc.overlay_read_sets.data() + sc.overlay_read_offsets[after_local];
  const uint32_t* reads_end =
      sc.overlay_read_sets.data() + sc.overlay_read_offsets[after_local + 1];
  if (std::binary_search(reads_begin, reads_end, 0u)) pops.push_back(&group);
  const FollowTable& table = *sc.overlay_follow[after_local];
  std::unique_ptr<LevelCache> transient;
  const LevelCache& tokens = level_of(rt, group, table, transient);
  if (transient) {
    sc.item_walk_unkept = true;
    return;
  }
  if (!tokens.bits.empty()) {
    emit_bits(&frame, nullptr, tokens.bits.data(), rt.words);
  } else {
    emit_tokens(&frame, nullptr, tokens.tokens.data(), tokens.tokens.size(), rt.words);
  }
  for (const ExitGroup* child : tokens.deeper) {
    item_walk_level(rt, view, sc, *child, rt.lexeme_base() + child->lexeme, after, frame, pops);
    if (sc.walks_exhausted || sc.item_walk_unkept) return;
  }
}

// An exact set of (group, symbol, set) triples, cleared in constant time: the completions one
// fill has followed (a fill follows a few hundred).
class StepSet {
 public:
  void clear() {
    if (++epoch_ == 0) {
      for (Slot& slot : slots_) slot.epoch = 0;
      epoch_ = 1;
    }
    size_ = 0;
  }
  // False when the triple is in the set already.
  // `owner` keeps apart the triples of walks that share the set (one descent per thread).
  bool insert(const void* group, uint32_t symbol, uint32_t set, uint32_t owner = 0) {
    if (4 * (size_ + 1) > 3 * slots_.size()) grow();
    const size_t mask = slots_.size() - 1;
    for (size_t i = hash(group, symbol, set, owner) & mask;; i = (i + 1) & mask) {
      Slot& slot = slots_[i];
      if (slot.epoch != epoch_) {
        slot = Slot{group, symbol, set, epoch_, owner};
        ++size_;
        return true;
      }
      if (slot.group == group && slot.symbol == symbol && slot.set == set && slot.owner == owner) {
        return false;
      }
    }
  }

 private:
  struct Slot {
    const void* group;
    uint32_t symbol, set, epoch, owner;
  };
  static size_t hash(const void* group, uint32_t symbol, uint32_t set, uint32_t owner) {
    return static_cast<size_t>(
        mix64((reinterpret_cast<uintptr_t>(group) + owner * 0x9e3779b97f4a7c15ull) ^
              (static_cast<uint64_t>(symbol) << 32 | set)));
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.empty() ? 256 : 2 * old.size(), Slot{nullptr, 0, 0, 0, 0});
    const uint32_t epoch = epoch_;
    size_ = 0;
    for (const Slot& slot : old) {
      if (slot.epoch == epoch) insert(slot.group, slot.symbol, slot.set, slot.owner);
    }
  }
  std::vector<Slot> slots_;
  uint32_t epoch_ = 1;
  size_t size_ = 0;
};

std::pair<uint64_t, uint64_t> item_walk_key(const ExitGroup& group, uint32_t dotted) {
  const uint64_t id = reinterpret_cast<uintptr_t>(&group);
  return {mix64(id ^ mix64(dotted + 0x5be0cd19137e2179ull)),
          mix64((id * 0x9e3779b97f4a7c15ull) + dotted)};
}

// The item walk of `group` and the pending item `dotted` (see above), computed and stored (or
// the one another thread stored meanwhile); null when the fill's walk budget ran out or a
// group built for one use was met. Call without walk_mutex.
ItemWalkPtr compute_item_walk(const Runtime& rt, Scratch& sc, const ExitGroup& group,
                              uint32_t dotted) {
  GroupCache& cache = *rt.groups;
  const auto key = item_walk_key(group, dotted);
  set_up_item_chart(rt, sc.item_chart, dotted);
  reset_overlay(sc);
  ChartView view{&sc.item_chart, &sc.overlay, 2};
  Scratch::WalkFrame& frame = frame_at(sc, 0);
  auto walk = std::make_shared<GroupCache::ItemWalk>();
  item_walk_level(rt, view, sc, group, rt.dotted_next[dotted], 1, frame, walk->pops);
  if (sc.walks_exhausted || sc.item_walk_unkept) return nullptr;
  std::sort(walk->pops.begin(), walk->pops.end());
  walk->pops.erase(std::unique(walk->pops.begin(), walk->pops.end()), walk->pops.end());
  if (!frame.dense) {  // sorted and distinct: equal contents intern to one result
    std::sort(frame.tokens.begin(), frame.tokens.end());
    frame.tokens.erase(std::unique(frame.tokens.begin(), frame.tokens.end()), frame.tokens.end());
  }
  const uint64_t digest = walk_digest(frame);
  std::lock_guard<std::mutex> lock(cache.walk_mutex);
  if (const ItemWalkPtr* found = cache.item_walks.find(key)) return *found;
  const size_t size = 96 + 8 * walk->pops.size();
  make_walk_room_locked(cache, size + 4 * (frame.tokens.size() + frame.bits.size()));
  if (frame.dense || !frame.tokens.empty()) {
    size_t added;
    walk->tokens = intern_walk_locked(cache, frame, digest, &added);
    cache.walk_bytes += added;
  }
  ItemWalkPtr shared = std::move(walk);
  cache.item_walks.emplace(key, shared);
  cache.walk_bytes += size;
  return shared;
}

using PackedLocalWalk = GroupCache::PackedLocalWalk;
using PartRef = GroupCache::PartRef;

// A 128-bit hash of the dotted ids of a set's pending kernel items (origin an earlier set; for
// the initial set, its items): the set's predictions (origin the set itself) are a function of
// them, and completions at the set advance only them. That is H_1 of the set (see
// Chart::depth_hash: with H_0 a constant, it hashes the kernel items' dotted ids alone), which
// every set of a chart with depth hashes has from its commit; a fill read it back instead of
// hashing the set's items again at each set its descents visited (session 26).
std::pair<uint64_t, uint64_t> kernel_signature(const Chart& chart, uint32_t set) {
  const uint64_t* h1 = chart.depth_hash_of(set, 1);
  return {h1[0], h1[1]};
}

std::pair<uint64_t, uint64_t> local_walk_key(const ExitGroup& group, uint32_t symbol,
                                             const std::pair<uint64_t, uint64_t>& signature) {
  const uint64_t id = reinterpret_cast<uintptr_t>(&group);
  return {mix64(signature.first ^ mix64(id + symbol)),
          mix64(signature.second + mix64(id ^ (uint64_t{symbol} << 32)))};
}

// `local` (its parts made sorted and distinct) stored under `key` (in its table slot when it
// is small, else packed into the walk arena), or the one another thread stored there
// meanwhile; `view` receives what is stored. A block lives until the walk tables are next
// cleared: a caller that reads it after releasing walk_mutex checks walk_generation first.
// False, and nothing stored, when the tables were cleared since `generation` (when the walk
// began): its parts may be results the clear dropped from walk_contents, which a stored walk
// must not name. Call without walk_mutex.
bool store_local_walk(GroupCache& cache, const std::pair<uint64_t, uint64_t>& key,
                      GroupCache::LocalWalk& local, uint64_t generation,
                      GroupCache::LocalWalkView* view) {
  std::sort(local.parts.begin(), local.parts.end());
  local.parts.erase(std::unique(local.parts.begin(), local.parts.end()), local.parts.end());
  std::lock_guard<std::mutex> lock(cache.walk_mutex);
  if (cache.local_walks.find(key, view)) return true;
  const bool in_slot =
      GroupCache::LocalWalkTable::fits_in_slot(local.parts.size(), local.below.size());
  const size_t bytes = in_slot ? 0
                               : sizeof(PackedLocalWalk) + sizeof(PartRef) * local.parts.size() +
                                     sizeof(GroupCache::Continuation) * local.below.size();
  make_walk_room_locked(cache, 64 + bytes);
  if (cache.walk_generation != generation) return false;
  const auto num_parts = static_cast<uint32_t>(local.parts.size());
  const auto num_below = static_cast<uint32_t>(local.below.size());
  const PartRef first_part =
      local.parts.empty() ? PartRef{nullptr, 0} : PartRef{local.parts[0].get(), local.parts[0]->id};
  const GroupCache::Continuation first_below =
      local.below.empty() ? GroupCache::Continuation{nullptr, 0, 0} : local.below[0];
  PackedLocalWalk* packed = nullptr;
  if (!in_slot) {
    packed = static_cast<PackedLocalWalk*>(cache.walk_arena.allocate(bytes));
    packed->num_parts = num_parts;
    packed->num_below = num_below;
    auto* parts = const_cast<PartRef*>(packed->parts());
    for (size_t i = 0; i < local.parts.size(); ++i) {
      parts[i] = PartRef{local.parts[i].get(), local.parts[i]->id};
    }
    std::copy(local.below.begin(), local.below.end(),
              const_cast<GroupCache::Continuation*>(packed->below()));
  }
  cache.local_walks.emplace(key, packed, num_parts, first_part, num_below, first_below);
  cache.walk_bytes += 64 + bytes;
  *view = GroupCache::LocalWalkView{packed, num_parts, num_below, first_part, first_below};
  return true;
}

// `walk` (its parts made sorted and distinct) stored under `key` in `table`, or the one another
// thread stored there meanwhile; `entries` counts its entries other than parts. Call without
// walk_mutex.
template <typename Walk>
std::shared_ptr<const Walk> store_walk(GroupCache& cache,
                                       KeyMap<std::shared_ptr<const Walk>>& table,
                                       const std::pair<uint64_t, uint64_t>& key,
                                       std::shared_ptr<Walk> walk, size_t entries) {
  std::sort(walk->parts.begin(), walk->parts.end());
  walk->parts.erase(std::unique(walk->parts.begin(), walk->parts.end()), walk->parts.end());
  std::lock_guard<std::mutex> lock(cache.walk_mutex);
  if (const std::shared_ptr<const Walk>* found = table.find(key)) return *found;
  const size_t size = 96 + 16 * (walk->parts.size() + entries);
  make_walk_room_locked(cache, size);
  std::shared_ptr<const Walk> shared = std::move(walk);
  table.emplace(key, shared);
  cache.walk_bytes += size;
  return shared;
}

// The item walk of (group, dotted), looked up or computed (then `computed`, when given, is
// set); null as compute_item_walk. Call without walk_mutex.
ItemWalkPtr find_item_walk(const Runtime& rt, Scratch& sc, const ExitGroup& group, uint32_t dotted,
                           bool* computed = nullptr) {
  GroupCache& cache = *rt.groups;
  {
    std::lock_guard<std::mutex> lock(cache.walk_mutex);
    if (const ItemWalkPtr* found = cache.item_walks.find(item_walk_key(group, dotted))) {
      return *found;
    }
  }
  if (computed) *computed = true;
  return compute_item_walk(rt, sc, group, dotted);
}

// Whether the walk tables hold half their budget: a prewarm stops there rather than let a
// full table be cleared (make_walk_room_locked) and lose what it built.
bool walk_tables_half_full(GroupCache& cache) {
  std::lock_guard<std::mutex> lock(cache.walk_mutex);
  return 2 * cache.walk_bytes > cache.walk_budget_bytes;
}

using ClosureWalkPtr = std::shared_ptr<const GroupCache::ClosureWalk>;

std::pair<uint64_t, uint64_t> closure_walk_key(const ExitGroup& group, uint32_t symbol,
                                               uint32_t nonterminal) {
  const uint64_t id = reinterpret_cast<uintptr_t>(&group);
  const uint64_t tag = (uint64_t{symbol} << 32) | nonterminal;
  return {mix64(mix64(id ^ 0x4b7c3a1e9d2f6085ull) + tag),
          mix64(mix64(id + 0x94d049bb133111ebull) ^ (tag * 0xbf58476d1ce4e5b9ull))};
}

// The closure walk of (group, symbol) in the prediction closure of `nonterminal` (see
// GroupCache::ClosureWalk), looked up or computed and stored; null as compute_item_walk.
// Call without walk_mutex.
ClosureWalkPtr find_closure_walk(const Runtime& rt, Scratch& sc, const ExitGroup& group,
                                 uint32_t symbol, uint32_t nonterminal) {
  GroupCache& cache = *rt.groups;
  const auto key = closure_walk_key(group, symbol, nonterminal);
  {
    std::lock_guard<std::mutex> lock(cache.walk_mutex);
    if (const ClosureWalkPtr* found = cache.closure_walks.find(key)) return *found;
  }
  thread_local StepSet done;
  thread_local std::vector<std::pair<const ExitGroup*, uint32_t>> work;
  done.clear();
  work.assign(1, {&group, symbol});
  auto walk = std::make_shared<GroupCache::ClosureWalk>();
  const uint32_t* items = rt.closure_items.data() + rt.closure_offsets[nonterminal];
  const uint32_t* items_end = rt.closure_items.data() + rt.closure_offsets[nonterminal + 1];
  while (!work.empty()) {
    const auto [g, sym] = work.back();
    work.pop_back();
    if (!done.insert(g, sym, 0)) continue;
    walk->reached.emplace_back(g, sym);
    for (const uint32_t* item = items; item != items_end; ++item) {
      if (rt.dotted_next[*item] != sym) continue;
      const ItemWalkPtr item_walk = find_item_walk(rt, sc, *g, *item);
      if (!item_walk) return nullptr;
      if (item_walk->tokens) walk->parts.push_back(item_walk->tokens);
      const uint32_t lhs = rt.prod_lhs[rt.dotted_prod[*item]];
      for (const ExitGroup* pop : item_walk->pops) work.emplace_back(pop, lhs);
    }
  }
  const size_t reached = walk->reached.size();
  return store_walk(cache, cache.closure_walks, key, std::move(walk), reached);
}

// Every item walk a fill by items can need, ahead of the decode: (a thread's top group, an
// item waiting for its lexeme), then, for each group at which such an item's left-hand side
// completes, (that group, an item waiting for the left-hand side), to a fixed point. The pairs
// are finitely many (kept groups times dotted ids), so a decode by items computes no item walk
// the budget let this reach; breadth-first, so what a budget cuts is the deepest nesting.
// Without it, decodes of JSON Schema grammars computed 1-9 item walks per computed fill (the
// keys and closers of objects the structural exploration had not reached), each as costly as
// a walk by sets.
std::vector<GroupSymbol> prewarm_item_walks(const Runtime& rt, PrewarmBudget& budget,
                                            PrewarmStats& stats) {
  GroupCache& cache = *rt.groups;
  if (cache.item_walks_mode == GroupCache::ItemWalks::kOff) return {};
  // The dotted ids waiting for each symbol (nonterminals and lexemes).
  const uint32_t symbols = rt.tokenset_base();
  std::vector<uint32_t> begin(symbols + 1, 0), waiting;
  for (uint32_t next : rt.dotted_next) {
    if (next != kComplete && next < symbols) ++begin[next + 1];
  }
  for (uint32_t s = 0; s < symbols; ++s) begin[s + 1] += begin[s];
  waiting.resize(begin[symbols]);
  {
    std::vector<uint32_t> at(begin.begin(), begin.end() - 1);
    for (uint32_t dotted = 0; dotted < rt.dotted_next.size(); ++dotted) {
      const uint32_t next = rt.dotted_next[dotted];
      if (next != kComplete && next < symbols) waiting[at[next]++] = dotted;
    }
  }
  Scratch& sc = thread_scratch();
  std::set<GroupSymbol> seen;
  std::vector<GroupSymbol> current, next;
  auto completions = [&] { return std::vector<GroupSymbol>(seen.begin(), seen.end()); };
  for_each_top_group(rt, [&](const ExitGroup& group, uint32_t lexeme) {
    const GroupSymbol entry{&group, rt.lexeme_base() + lexeme};
    if (group.persistent && seen.insert(entry).second) current.push_back(entry);
  });
  while (!current.empty()) {
    next.clear();
    for (const auto& [group, symbol] : current) {
      for (uint32_t i = begin[symbol]; i < begin[symbol + 1]; ++i) {
        if (budget.spent() || walk_tables_half_full(cache)) return completions();
        const uint32_t dotted = waiting[i];
        start_walk_budget(cache, sc);
        bool computed = false;
        const ItemWalkPtr walk = find_item_walk(rt, sc, *group, dotted, &computed);
        if (!walk) continue;
        if (computed) ++stats.item_walks;
        const uint32_t lhs = rt.prod_lhs[rt.dotted_prod[dotted]];
        for (const ExitGroup* pop : walk->pops) {
          if (pop->persistent && seen.insert({pop, lhs}).second) next.emplace_back(pop, lhs);
        }
      }
    }
    current.swap(next);
  }
  return completions();
}

// The closure walks of every completion the item walks can lead to (`completions`, from
// prewarm_item_walks), in the closure of every nonterminal whose closure waits for its symbol.
void prewarm_closure_walks(const Runtime& rt, PrewarmBudget& budget,
                           const std::vector<GroupSymbol>& completions) {
  if (rt.closure_offsets.empty()) return;
  // Per symbol, the nonterminals whose closures wait for it.
  const uint32_t symbols = rt.tokenset_base();
  std::vector<std::vector<uint32_t>> waited_in(symbols);
  for (uint32_t nt = 0; nt < rt.num_nonterminals; ++nt) {
    for (uint32_t k = rt.closure_wait_offsets[nt]; k < rt.closure_wait_offsets[nt + 1]; ++k) {
      if (rt.closure_waits[k] < symbols) waited_in[rt.closure_waits[k]].push_back(nt);
    }
  }
  Scratch& sc = thread_scratch();
  GroupCache& cache = *rt.groups;
  for (const auto& [group, symbol] : completions) {
    for (const uint32_t nonterminal : waited_in[symbol]) {
      if (budget.spent() || walk_tables_half_full(cache)) return;
      start_walk_budget(cache, sc);
      find_closure_walk(rt, sc, *group, symbol, nonterminal);
    }
  }
}

// The local walk of (group, symbol) at set `set` of `chart`: completing `symbol` there advances
// the set's items waiting for it; the predicted ones (origin the set) are a function of the
// set's kernel, and so are the completions their item walks lead to within the set, so their
// tokens and the pairs (group, symbol) that reach the kernel items are kept by the kernel's
// signature, and `view` receives it. False as compute_item_walk is null, or when the walk
// tables were cleared meanwhile (see store_local_walk); a packed walk lives until their next
// clear. Call without walk_mutex.
//
// The predicted items are the union of the prediction closures of the kernel items' next
// nonterminals (and of the start symbol at the initial set), and a completion's way up through
// predicted items never leaves one closure (an item waiting for A in Y's closure puts A's
// closure in Y's), so that part is one closure walk per such nonterminal, shared by every
// kernel that names it; the kernel items waiting for what the closure walks completed are
// then walked one by one. (Measured on C-like: a completion at an expression start meets ~25
// predicted items across the precedence levels, each an item-walk lookup.) Without prediction
// closures the set's items are walked one by one.
bool compute_local_walk(const Runtime& rt, Scratch& sc, const Chart& chart, const ExitGroup& group,
                        uint32_t symbol, uint32_t set, const std::pair<uint64_t, uint64_t>& key,
                        GroupCache::LocalWalkView* view) {
  GroupCache& cache = *rt.groups;
  // Built here, then packed (see store_local_walk); its shared results are owned by
  // walk_contents, so it keeps none once stored.
  thread_local GroupCache::LocalWalk built;
  built.parts.clear();
  built.below.clear();
  GroupCache::LocalWalk* const local = &built;
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(cache.walk_mutex);
    generation = cache.walk_generation;
  }
  thread_local StepSet done;
  done.clear();
  // Kernel items waiting for `sym`, walked with group `g` (each dotted id once: items of one
  // dotted id with several origins go on at each of them).
  bool failed = false;
  // The item walk of (g, dotted): its tokens into the local walk, and each group at which the
  // item's left-hand side completes to on_pop(group, lhs); false when it could not be computed.
  auto take_item_walk = [&](const ExitGroup* g, uint32_t dotted, auto&& on_pop) {
    const ItemWalkPtr walk = find_item_walk(rt, sc, *g, dotted);
    if (!walk) return false;
    if (walk->tokens) local->parts.push_back(walk->tokens);
    const uint32_t lhs = rt.prod_lhs[rt.dotted_prod[dotted]];
    for (const ExitGroup* pop : walk->pops) on_pop(pop, lhs);
    return true;
  };
  auto walk_kernel_items = [&](const ExitGroup* g, uint32_t sym) {
    for_waiting(chart, set, sym, [&](const Item waiting) {
      if (failed || waiting.origin == set || !done.insert(g, sym, waiting.dotted + 1)) return;
      failed = !take_item_walk(g, waiting.dotted, [&](const ExitGroup* pop, uint32_t lhs) {
        local->below.push_back(GroupCache::Continuation{pop, lhs, waiting.dotted});
      });
    });
  };
  // Without a predicted item waiting for `symbol`, nothing completes inside the set: only the
  // kernel items waiting for it go on (JSON Schema local walks, mostly one such item).
  bool predicted_waits = false;
  for_waiting(chart, set, symbol, [&](const Item waiting) {
    predicted_waits = predicted_waits || waiting.origin == set;
  });
  if (!predicted_waits) {
    walk_kernel_items(&group, symbol);
    if (failed) return false;
  } else if (!rt.closure_offsets.empty()) {
    // The nonterminals whose closures were predicted here, once each.
    thread_local std::vector<uint32_t> predicted;
    predicted.clear();
    if (set == 0) predicted.push_back(rt.start);
    for (uint32_t i = chart.set_begin[set]; i < chart.set_begin[set + 1]; ++i) {
      const Item item = chart.items[i];
      const uint32_t next = rt.dotted_next[item.dotted];
      if (item.origin == set || next >= rt.num_nonterminals) continue;  // kComplete is larger
      predicted.push_back(next);
    }
    std::sort(predicted.begin(), predicted.end());
    predicted.erase(std::unique(predicted.begin(), predicted.end()), predicted.end());
    walk_kernel_items(&group, symbol);
    done.insert(&group, symbol, 0);
    for (const uint32_t nonterminal : predicted) {
      const uint32_t* waits = rt.closure_waits.data() + rt.closure_wait_offsets[nonterminal];
      const uint32_t* waits_end =
          rt.closure_waits.data() + rt.closure_wait_offsets[nonterminal + 1];
      if (!std::binary_search(waits, waits_end, symbol)) continue;
      const ClosureWalkPtr closure = find_closure_walk(rt, sc, group, symbol, nonterminal);
      if (!closure) return false;
      local->parts.insert(local->parts.end(), closure->parts.begin(), closure->parts.end());
      for (const auto& [g, sym] : closure->reached) {
        if (done.insert(g, sym, 0)) walk_kernel_items(g, sym);
      }
      if (failed) return false;
    }
    if (failed) return false;
  } else {
    thread_local std::vector<std::pair<const ExitGroup*, uint32_t>> work;
    work.assign(1, {&group, symbol});
    while (!work.empty()) {
      const auto [g, sym] = work.back();
      work.pop_back();
      if (!done.insert(g, sym, 0)) continue;
      walk_kernel_items(g, sym);
      for_waiting(chart, set, sym, [&](const Item waiting) {
        if (failed || waiting.origin != set) return;
        failed = !take_item_walk(g, waiting.dotted, [&](const ExitGroup* pop, uint32_t lhs) {
          work.emplace_back(pop, lhs);
        });
      });
      if (failed) return false;
    }
  }
  const bool stored = store_local_walk(cache, key, built, generation, view);
  built.parts.clear();
  return stored;
}

// Keep a copy of set `set` of `chart` as the representative of its kernel `signature` (see
// GroupCache::kernel_snapshots), unless one is kept already; called for every set a prewarm
// matcher builds (record_prewarm_kernel). The initial set is not kept: its
// predictions include the start symbol's, which a copy at set 1 would lose.
void record_kernel(GroupCache& cache, const Chart& chart, uint32_t set,
                   const std::pair<uint64_t, uint64_t>& signature) {
  if (set == 0) return;
  std::lock_guard<std::mutex> lock(cache.kernel_mutex);
  if (cache.kernel_snapshots.size() >= GroupCache::kMaxKernelSnapshots ||
      cache.kernel_index.contains(signature)) {
    return;
  }
  GroupCache::KernelSnapshot snapshot;
  snapshot.signature = signature;
  Chart& copy = snapshot.chart;
  const uint32_t begin = chart.set_begin[set], end = chart.set_begin[set + 1];
  copy.items.reserve(end - begin);
  for (uint32_t i = begin; i < end; ++i) {
    const Item item = chart.items[i];
    // compute_local_walk reads only whether an item was predicted here (origin the set) and
    // the kernel items' dotted ids; where they continue is looked up on the real chart.
    copy.items.push_back(Item{item.dotted, item.origin == set ? 1u : 0u});
  }
  copy.set_begin.assign({0, 0, end - begin});
  const uint32_t waits_begin = chart.wait_begin[set], waits_end = chart.wait_begin[set + 1];
  copy.waits.reserve(waits_end - waits_begin);
  for (uint32_t w = waits_begin; w < waits_end; ++w) {
    const uint64_t entry = chart.waits[w];
    copy.waits.push_back((entry & ~uint64_t{0xffffffffu}) | (static_cast<uint32_t>(entry) - begin));
  }
  copy.wait_begin.assign({0, 0, waits_end - waits_begin});
  cache.kernel_index.emplace(signature, static_cast<uint32_t>(cache.kernel_snapshots.size()));
  cache.kernel_snapshots.push_back(std::move(snapshot));
}

// The local walks of every completion `completions` holds (the pairs (group, symbol) a descent
// can follow, from prewarm_item_walks) at every kernel the prewarm's matchers built, where the
// kernel's set waits for the symbol. The exploration meets only some of the pairs at each
// kernel; the decode meets the others (C-like: 165 local walks computed in the bench decode,
// 1.5-5 us each, in the fills that set the p99, 104 of them at a kernel and with a pair the
// prewarm had met separately).
void prewarm_local_walks(const Runtime& rt, PrewarmBudget& budget,
                         const std::vector<GroupSymbol>& completions, PrewarmStats& stats) {
  GroupCache& cache = *rt.groups;
  if (cache.item_walks_mode != GroupCache::ItemWalks::kOn) return;
  size_t kernels;
  {
    std::lock_guard<std::mutex> lock(cache.kernel_mutex);
    kernels = cache.kernel_snapshots.size();
  }
  Scratch& sc = thread_scratch();
  for (size_t k = 0; k < kernels; ++k) {
    const GroupCache::KernelSnapshot* snapshot;
    {
      // Entries are only appended, to a deque, so the reference outlives the lock.
      std::lock_guard<std::mutex> lock(cache.kernel_mutex);
      snapshot = &cache.kernel_snapshots[k];
    }
    // Most pairs do not apply (the kernel's set does not wait for the symbol): the budget is
    // also checked per kernel, so a grammar with many kernels and completions stays bounded.
    if (budget.spent()) return;
    for (const auto& [group, symbol] : completions) {
      bool waits = false;
      for_waiting(snapshot->chart, 1, symbol, [&](const Item) { waits = true; });
      if (!waits) continue;
      const auto key = local_walk_key(*group, symbol, snapshot->signature);
      {
        std::lock_guard<std::mutex> lock(cache.walk_mutex);
        if (cache.local_walks.contains(key)) continue;
      }
      if (budget.spent() || walk_tables_half_full(cache)) return;
      start_walk_budget(cache, sc);
      GroupCache::LocalWalkView computed;
      if (compute_local_walk(rt, sc, snapshot->chart, *group, symbol, 1, key, &computed)) {
        ++stats.local_walks;
      }
    }
  }
}

// Set `words` to the union of the inside sets of all thread states (the first write of a
// computed mask, so it need not be zeroed first). The union depends only on the set of states,
// so it is cached (within the memory budget) and one copy replaces one OR per thread.
// The distinct thread states, sorted, into sc.thread_states.
void collect_thread_states(Scratch& sc, const std::vector<Thread>& threads) {
  sc.thread_states.clear();
  for (const Thread& th : threads) sc.thread_states.push_back(th.state);
  std::sort(sc.thread_states.begin(), sc.thread_states.end());
  sc.thread_states.erase(std::unique(sc.thread_states.begin(), sc.thread_states.end()),
                         sc.thread_states.end());
}

void assign_inside_sets(const Runtime& rt, Scratch& sc, const std::vector<Thread>& threads,
                        uint32_t* words) {
  collect_thread_states(sc, threads);
  auto dense_set = [&](uint32_t set) {
    return &rt.inside_bits[static_cast<size_t>(set) * rt.words];
  };
  if (sc.thread_states.empty()) {
    std::fill(words, words + rt.words, 0u);
    return;
  }
  if (sc.thread_states.size() == 1) {
    const uint32_t* only = dense_set(rt.inside_index[sc.thread_states[0]]);
    std::copy(only, only + rt.words, words);
    return;
  }
  // Small inside sets (a keyword a few bytes in admits few tokens) are set bit by bit; with at
  // most one large set the union is then cheaper to make than to look up in the cache
  // (MaskBench, 34 schemas after prewarm: median per-schema p50 7.1 -> 5.2 us).
  // Large sets by their index: states of one lexeme share sets (an identifier's states, a
  // keyword's prefixes inside identifiers), and each distinct set is ORed once.
  sc.dense_inside_sets.clear();
  for (const int32_t state : sc.thread_states) {
    const uint32_t set = rt.inside_index[state];
    if (!rt.inside_sparse[set]) sc.dense_inside_sets.push_back(set);
  }
  std::sort(sc.dense_inside_sets.begin(), sc.dense_inside_sets.end());
  sc.dense_inside_sets.erase(std::unique(sc.dense_inside_sets.begin(), sc.dense_inside_sets.end()),
                             sc.dense_inside_sets.end());
  auto set_sparse_sets = [&](uint32_t* out) {
    for (int32_t state : sc.thread_states) {
      const uint32_t set = rt.inside_index[state];
      if (!rt.inside_sparse[set]) continue;
      for (uint32_t i = rt.inside_id_offsets[set]; i < rt.inside_id_offsets[set + 1]; ++i) {
        set_bit(out, rt.inside_ids[i]);
      }
    }
  };
  if (sc.dense_inside_sets.size() <= 1) {
    if (!sc.dense_inside_sets.empty()) {
      const uint32_t* only = dense_set(sc.dense_inside_sets[0]);
      std::copy(only, only + rt.words, words);
    } else {
      std::fill(words, words + rt.words, 0u);
    }
    set_sparse_sets(words);
    return;
  }
  GroupCache& cache = *rt.groups;
  {
    std::lock_guard<std::mutex> lock(cache.inside_mutex);
    auto found = cache.inside_unions.find(sc.thread_states);
    if (found != cache.inside_unions.end()) {
      found->second->copy_to(words);
      return;
    }
  }
  // A new combination (many lexemes expected at once): OR only the distinct large sets (a
  // C-like statement start ORed ~30 whole bitsets, 20 us, where two of them are large).
  thread_local std::vector<const uint32_t*> sources;
  sources.clear();
  for (const uint32_t set : sc.dense_inside_sets) sources.push_back(dense_set(set));
  std::fill(words, words + rt.words, 0u);
  or_many(words, sources.data(), sources.size(), rt.words);
  set_sparse_sets(words);
  const size_t size = 4 * static_cast<size_t>(rt.words) + 64;
  if (cache.used.load(std::memory_order_relaxed) + size > GroupCache::kBudgetBytes) return;
  GroupCache::StoredMask merged = GroupCache::MaskPool::copy(cache.mask_pool, words, rt.words);
  std::lock_guard<std::mutex> lock(cache.inside_mutex);
  if (cache.inside_unions.emplace(sc.thread_states, std::move(merged)).second) {
    cache.used.fetch_add(size, std::memory_order_relaxed);
  }
}

using MaskKey = std::pair<uint64_t, uint64_t>;

// A parser-configuration key: every thread's lexeme and class of states (Runtime::state_key)
// mixed with a 128-bit hash of its origin set, then the hash of the last set when a set ends at
// the current position. `hash_of(set)` gives the {lo, hi} hash a key is built from (the
// whole-stack hash, or a bounded-depth one).
template <typename HashOf>
MaskKey configuration_key(const Runtime& rt, MaskKey key, const std::vector<Thread>& threads,
                          bool frontier, uint32_t last_set, HashOf hash_of) {
  for (const Thread& th : threads) {
    // Never zero (see Runtime::state_key): a thread whose term is zero over the depth-0 origin
    // hash (zero) would add nothing to the sum, so `{0, s}` and `{s}` would share a key and a
    // mask (found by a stress run when the term was the raw state id: `aa` and `,,a` in
    // test_a_thread_in_dfa_state_zero_is_part_of_the_mask_key).
    const uint64_t state = rt.state_key[th.state];
    const MaskKey origin = hash_of(th.origin);
    key.first += mix64(state ^ origin.first);
    key.second += mix64(state + origin.second * 0xd6e8feb86659fd93ull);
  }
  if (frontier) {
    const MaskKey last = hash_of(last_set);
    key.first = mix64(key.first ^ last.first);
    key.second = mix64(key.second + last.second);
  } else {
    key.first = mix64(key.first + 1);
    key.second = mix64(key.second ^ 1);
  }
  return key;
}

// Store `mask` under `key` in the current generation, turning the generations over first when
// it would pass half of the budget. An entry costs 64 bytes, and its content 4 bytes a word the
// first time the generation holds it (contents are interned; one shared by both tables counts
// in each). Call with the mask mutex held.
void store_mask_locked(GroupCache& cache, GroupCache::MaskTable& table, const MaskKey& key,
                       const GroupCache::StoredMask& mask) {
  const size_t content = mask->content_bytes();
  uint64_t& counted_in = mask->counted_in[table.index];
  const size_t size = 64 + (counted_in == table.generation ? 0 : content);
  if (table.bytes + size > cache.mask_budget_bytes / 2) {
    std::swap(table.previous, table.current);
    table.current.clear();
    ++table.generation;  // no content is counted in the new one
    table.bytes = 0;
    cache.composed_masks.clear();  // most of it points at contents about to expire
    // Contents that only the dropped generation held have expired.
    for (auto it = cache.mask_contents.begin(); it != cache.mask_contents.end();) {
      auto& same = it->second;
      same.erase(
          std::remove_if(same.begin(), same.end(), [](const auto& weak) { return weak.expired(); }),
          same.end());
      it = same.empty() ? cache.mask_contents.erase(it) : std::next(it);
    }
  }
  if (table.current.emplace(key, mask)) {
    if (counted_in != table.generation) {
      counted_in = table.generation;
      table.bytes += content;
    }
    table.bytes += 64;
  }
}

// A thread's own copy of recent whole-stack table entries: a hit here takes no lock and writes
// no line another thread reads, so the threads of a batch fill do not queue on mask_mutex for
// the commonest fill (on 16 cores the shared lookup alone kept a batch from scaling). A
// whole-stack key determines its mask, so an entry stays right whatever the shared tables
// evict; it names its cache by GroupCache::id and keeps its words alive (their pool too).
class LocalMasks {
 public:
  const GroupCache::MaskWords* find(uint64_t cache_id, const MaskKey& key) const {
    const Entry& entry = entries_[slot(key)];
    if (entry.cache_id != cache_id || entry.key != key) return nullptr;
    return entry.mask.get();
  }
  void store(const GroupCache& cache, const MaskKey& key, GroupCache::StoredMask mask) {
    // A stored mask keeps its runtime's whole mask pool alive: entries of freed runtimes are
    // dropped when this thread turns to another runtime, and each store checks one more slot,
    // so that every slot is checked within kEntries stores (a server that compiles a grammar
    // per request frees runtimes all the time). One slot a store, not all of them every
    // kEntries stores: that sweep reads every entry's owner and was a cached fill's cost.
    if (cache.id != last_cache_id_) {
      drop_expired();
    } else {
      drop_if_expired(stores_++ % kEntries);
    }
    last_cache_id_ = cache.id;
    const size_t at = slot(key);
    Entry& entry = entries_[at];
    if (entry.cache_id != cache.id) owners_[at] = cache.liveness;
    entry.cache_id = cache.id;
    entry.key = key;
    entry.mask = std::move(mask);
  }

 private:
  // 64 masks of Llama 3's vocabulary are 1 MB a thread at most, and usually shared.
  static constexpr size_t kEntries = 64;
  static size_t slot(const MaskKey& key) { return (key.first ^ (key.second >> 7)) % kEntries; }
  void drop_if_expired(size_t at) {
    if (entries_[at].mask && owners_[at].expired()) {
      entries_[at] = Entry{};
      owners_[at].reset();
    }
  }
  void drop_expired() {
    for (size_t at = 0; at < kEntries; ++at) drop_if_expired(at);
  }
  struct Entry {
    uint64_t cache_id = 0;
    MaskKey key{0, 0};
    GroupCache::StoredMask mask;
  };
  Entry entries_[kEntries];
  std::weak_ptr<const int> owners_[kEntries];  // each entry's cache's liveness (cold: apart)
  uint64_t last_cache_id_ = 0;
  uint32_t stores_ = 0;
};

// Out of line: inlined, every use would look the thread-local up again (__tls_get_addr).
__attribute__((noinline)) LocalMasks& local_masks() {
  thread_local LocalMasks masks;
  return masks;
}

// The mask stored under `key`, or null. A hit in the previous generation is stored again in
// the current one. Call with the mask mutex held; copy the words out after releasing it, so that
// the threads of a batch fill do not take turns copying (a mask is vocab/8 bytes).
GroupCache::StoredMask find_mask_locked(GroupCache& cache, GroupCache::MaskTable& table,
                                        const MaskKey& key) {
  if (const GroupCache::StoredMask* found = table.current.find(key)) return *found;
  const GroupCache::StoredMask* found = table.previous.find(key);
  if (found == nullptr) return nullptr;
  GroupCache::StoredMask mask = *found;  // the turnover may drop the previous table
  store_mask_locked(cache, table, key, mask);
  return mask;
}

// Copy the mask stored under `key` into `words`; false when there is none. `stored`, when
// given, receives the stored copy.
bool find_mask(GroupCache& cache, GroupCache::MaskTable& table, const MaskKey& key, uint32_t* words,
               GroupCache::StoredMask* stored = nullptr) {
  GroupCache::StoredMask mask;
  {
    std::lock_guard<std::mutex> lock(cache.mask_mutex);
    mask = find_mask_locked(cache, table, key);
  }
  if (!mask) return false;
  mask->copy_to(words);
  if (stored) *stored = std::move(mask);
  return true;
}

void store_mask(GroupCache& cache, GroupCache::MaskTable& table, const MaskKey& key,
                const GroupCache::StoredMask& mask) {
  std::lock_guard<std::mutex> lock(cache.mask_mutex);
  store_mask_locked(cache, table, key, mask);
}

// A new stored mask with `words` (`count` of them): compact where it differs from all zeros, or
// from one of the cache's base masks, in at most an eighth of its words, else dense (and then a
// base itself while there are fewer than kMaxMaskBases). A compact copy reads its base and
// 8 bytes a differing word, or 4 a differing bit: where the base is a family's common mask (JSON's
// string contents under every nesting, whose masks differ in the few words of their closing
// tokens), the base is in cache from the family's other fills, and a first use reads a few cold
// lines instead of a cold 16 KB. Call with the mask mutex held.
GroupCache::StoredMask make_stored_mask(GroupCache& cache, const uint32_t* words, uint32_t count) {
  const uint32_t limit = count / 8;
  // Words compared with bases, at most four masks' worth: the search runs under the mask mutex,
  // and bases close to each other but not to this mask would each be read whole.
  size_t compared = 0;
  // The words in which `words` differ from `base` (zeros when null), or limit + 1 once past it.
  auto differing = [&](const uint32_t* base) {
    uint32_t n = 0;
    uint32_t i = 0;
    for (; i < count && n <= limit; ++i) n += words[i] != (base ? base[i] : 0u);
    compared += i;
    return n;
  };
  GroupCache::StoredMask base;
  uint32_t best = differing(nullptr);
  if (best > limit) {
    auto& bases = cache.mask_bases;
    bases.erase(
        std::remove_if(bases.begin(), bases.end(), [](const auto& weak) { return weak.expired(); }),
        bases.end());
    for (const auto& weak : bases) {
      if (compared > 4 * size_t{count}) break;
      GroupCache::StoredMask candidate = weak.lock();
      if (!candidate || candidate->size() != count) continue;
      const uint32_t n = differing(candidate->data);
      if (n < best) {
        best = n;
        base = std::move(candidate);
      }
    }
  }
  if (best > limit) {
    GroupCache::StoredMask dense = GroupCache::MaskPool::copy(cache.mask_pool, words, count);
    if (cache.mask_bases.size() < GroupCache::kMaxMaskBases) cache.mask_bases.push_back(dense);
    return dense;
  }
  // The bits in which word i differs from the base.
  const uint32_t* base_words = base ? base->data : nullptr;
  auto differ_at = [&](uint32_t i) { return words[i] ^ (base_words ? base_words[i] : 0u); };
  // As the bits that differ where they take fewer bytes than (index, word) pairs: a sparse
  // mask's words mostly hold one token each (JSON's masks after a value: ~490 tokens in ~440
  // words).
  size_t bits = 0;
  for (uint32_t i = 0; i < count; ++i) bits += __builtin_popcount(differ_at(i));
  const bool flip_bits = bits < 2 * size_t{best};
  std::unique_ptr<uint32_t[]> entries(new uint32_t[flip_bits ? bits + 1 : 2 * size_t{best} + 2]);
  uint32_t k = 0;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t differ = differ_at(i);
    if (differ == 0) continue;
    if (flip_bits) {
      for (; differ != 0; differ &= differ - 1) entries[k++] = 32 * i + __builtin_ctz(differ);
    } else {
      entries[2 * size_t{k}] = i;
      entries[2 * size_t{k} + 1] = words[i];
      ++k;
    }
  }
  return std::make_shared<const GroupCache::MaskWords>(count, std::move(base), std::move(entries),
                                                       k, flip_bits);
}

// The stored copy of `words`: an equal mask stored before, or a new one. `composition`, when
// given, is the key of what the words were ORed from (see GroupCache::composed_masks): a mask
// stored under it is equal without a compare, and a mask interned here is stored under it.
GroupCache::StoredMask intern_mask(GroupCache& cache, const uint32_t* words, uint32_t count,
                                   const MaskKey* composition = nullptr) {
  if (composition) {
    std::lock_guard<std::mutex> lock(cache.mask_mutex);
    if (const auto* found = cache.composed_masks.find(*composition)) {
      if (GroupCache::StoredMask mask = found->lock()) {
        cache.interned_by_parts.fetch_add(1, std::memory_order_relaxed);
        return mask;
      }
    }
  }
  const uint64_t digest = bitset_digest(words, count);
  std::lock_guard<std::mutex> lock(cache.mask_mutex);
  GroupCache::StoredMask mask;
  auto& same_digest = cache.mask_contents[digest];
  for (const auto& weak : same_digest) {
    GroupCache::StoredMask candidate = weak.lock();
    if (!candidate || candidate->size() != count) continue;
    cache.mask_compares.fetch_add(1, std::memory_order_relaxed);
    if (candidate->equals(words)) {
      mask = std::move(candidate);
      break;
    }
  }
  if (!mask) {
    mask = make_stored_mask(cache, words, count);
    same_digest.push_back(mask);
  }
  if (composition) {
    if (cache.composed_masks.size() >= 65536) cache.composed_masks.clear();
    cache.composed_masks.assign(*composition, mask);  // replaces an expired entry
  }
  return mask;
}

// The key of the current computed fill's composition (sorted and distinct) without the end
// tokens: its thread states in order and, order-independently, its parts.
MaskKey hash_composition(const Scratch& sc) {
  uint64_t lo = 0x6a09e667f3bcc908ull ^ sc.thread_states.size();
  uint64_t hi = 0xbb67ae8584caa73bull;
  for (int32_t state : sc.thread_states) {
    lo = mix64(lo ^ static_cast<uint32_t>(state));
    hi = mix64(hi + static_cast<uint32_t>(state) * 0x9e3779b97f4a7c15ull);
  }
  uint64_t sum_lo = 0, sum_hi = 0, xor_lo = 0;
  for (uint64_t part : sc.composition) {
    sum_lo += mix64(part ^ 0x3c6ef372fe94f82bull);
    sum_hi += mix64(part + 0xa54ff53a5f1d36f1ull);
    xor_lo ^= mix64(part * 0x510e527fade682d1ull + 1);
  }
  return {mix64(lo ^ mix64(sum_lo ^ xor_lo)), mix64(hi + mix64(sum_hi))};
}

// The composition key of the current computed fill (see GroupCache::composed_masks), hashed
// once per fill.
MaskKey composition_key(Scratch& sc, bool with_end_tokens) {
  if (!sc.composition_hashed) {
    sc.composition_hash = hash_composition(sc);
    sc.composition_hashed = true;
  }
  if (!with_end_tokens) return sc.composition_hash;
  return {sc.composition_hash.first, mix64(sc.composition_hash.second ^ 0x1f83d9abfb41bd6bull)};
}

// Copy into `words` the stored mask (without end tokens) of the current fill's composition, if
// one was stored; false otherwise.
bool copy_composed_mask(const Runtime& rt, Scratch& sc, uint32_t* words) {
  GroupCache& cache = *rt.groups;
  const MaskKey parts = composition_key(sc, false);
  std::lock_guard<std::mutex> lock(cache.mask_mutex);
  const auto* found = cache.composed_masks.find(parts);
  if (!found) return false;
  GroupCache::StoredMask mask = found->lock();
  if (!mask) return false;
  mask->copy_to(words);
  sc.composed_found = std::move(mask);
  return true;
}

}  // namespace

void record_prewarm_kernel(const Runtime& rt, const Chart& chart, uint32_t set) {
  record_kernel(*rt.groups, chart, set, kernel_signature(chart, set));
}

GroupCache::StoredMask GroupCache::MaskPool::copy(const std::shared_ptr<MaskPool>& pool,
                                                  const uint32_t* words, uint32_t count) {
  uint32_t* slot;
  {
    std::lock_guard<std::mutex> lock(pool->mutex_);
    if (pool->slot_words_ == 0) pool->slot_words_ = count;
    if (count != pool->slot_words_) {
      // Never expected (every mask of a runtime has the vocabulary's word count); kept exact
      // rather than asserted: such a mask gets a buffer of its own.
      std::unique_ptr<uint32_t[]> own(new uint32_t[count]);
      std::copy(words, words + count, own.get());
      const uint32_t* data = own.get();
      return std::make_shared<const MaskWords>(data, count, nullptr, std::move(own));
    }
    if (pool->free_.empty()) pool->add_slab(count, false);
    slot = pool->free_.back();
    pool->free_.pop_back();
  }
  std::copy(words, words + count, slot);
  return std::make_shared<const MaskWords>(slot, count, pool, nullptr);
}

void GroupCache::MaskPool::give_back(const uint32_t* slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_.push_back(const_cast<uint32_t*>(slot));
}

GroupCache::MaskWords::~MaskWords() {
  if (pool) pool->give_back(data);
}

void GroupCache::MaskPool::add_slab(uint32_t count, bool touch) {
  // Untouched on the fill path: a slot's pages are first touched by the copy into it.
  slabs_.emplace_back(touch ? new uint32_t[kSlotsPerSlab * count]()
                            : new uint32_t[kSlotsPerSlab * count]);
  for (size_t i = kSlotsPerSlab; i-- > 0;) free_.push_back(slabs_.back().get() + i * count);
}

void GroupCache::MaskPool::keep_free(uint32_t count, size_t slots) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (slot_words_ == 0) slot_words_ = count;
  if (count != slot_words_) return;
  while (free_.size() < slots) add_slab(count, true);
}

Matcher::Matcher(std::shared_ptr<const Runtime> runtime) : runtime_(std::move(runtime)) {
  reset();
  // The prewarm's own matchers only warm mask caches: no captures to record.
  if (!runtime_->captured_symbols.empty() && !FutureWork::prewarming) {
    shadow_.matcher.reset(new Matcher(runtime_, ExactChart{}));
  }
}

Matcher::Matcher(std::shared_ptr<const Runtime> runtime, ExactChart)
    : runtime_(std::move(runtime)), exact_(true) {
  reset();
}

Matcher::Shadow::Shadow(const Shadow& other)
    : matcher(other.matcher ? std::make_unique<Matcher>(*other.matcher) : nullptr) {}

Matcher::Shadow& Matcher::Shadow::operator=(const Shadow& other) {
  if (this != &other) {
    matcher = other.matcher ? std::make_unique<Matcher>(*other.matcher) : nullptr;
  }
  return *this;
}

const std::string& Matcher::capture_name(uint32_t capture) const {
  return runtime_->capture_names.at(capture);
}

// Whether lexeme `lexeme`'s DFA accepts text[from, to) whole.
static bool lexeme_accepts(const Runtime& rt, uint32_t lexeme, const std::string& text,
                           uint64_t from, uint64_t to) {
  int32_t state = static_cast<int32_t>(rt.lexeme_start[lexeme]);
  for (uint64_t i = from; i < to && state >= 0; ++i) {
    state = rt.next_state(state, static_cast<uint8_t>(text[i]));
  }
  return state >= 0 && rt.dfa_accepting[state];
}

// Where the marker of a suffix / stop lexeme over text[start, end) begins: the earliest k
// with text[start, k) in the body's language and text[k, end) in the marker's (the first
// occurrence of the marker), or `end` when there is none.
static uint64_t marker_start(const Runtime& rt, const std::string& text, uint64_t start,
                             uint64_t end, uint32_t body_lexeme, uint32_t marker_lexeme) {
  int32_t body = static_cast<int32_t>(rt.lexeme_start[body_lexeme]);
  for (uint64_t k = start; k <= end && body >= 0; ++k) {
    if (rt.dfa_accepting[body] && lexeme_accepts(rt, marker_lexeme, text, k, end)) return k;
    if (k < end) body = rt.next_state(body, static_cast<uint8_t>(text[k]));
  }
  return end;
}

// Whether text[from, to) is one or more pieces of ignored text (the ignore lexeme).
static bool is_ignored_text(const Runtime& rt, const std::string& text, uint64_t from,
                            uint64_t to) {
  return rt.capture_ignore_lexeme != kNoCaptureName && from < to &&
         lexeme_accepts(rt, rt.capture_ignore_lexeme, text, from, to);
}

std::vector<std::pair<uint32_t, std::string>> Matcher::captures(bool deduplicate) const {
  std::vector<std::pair<uint32_t, std::string>> out;
  if (!shadow_.matcher) return out;
  const Runtime& rt = *runtime_;
  const std::string& text = shadow_.matcher->text_;
  std::vector<CaptureEvent> events, hidden;
  for (const CaptureEvent& event : shadow_.matcher->events_) {
    (event.capture == kNoCaptureName ? hidden : events).push_back(event);
  }
  if (deduplicate) {
    // Per occurrence (name, start): every end it completed at, in order of first completion.
    std::vector<CaptureEvent> kept;
    std::vector<std::vector<uint64_t>> ends;
    std::map<std::pair<uint32_t, uint64_t>, size_t> where;
    for (const CaptureEvent& event : events) {
      const auto [found, fresh] =
          where.emplace(std::make_pair(event.capture, event.start), kept.size());
      if (fresh) {
        kept.push_back(event);
        ends.emplace_back();
      }
      ends[found->second].push_back(event.end);
    }
    for (size_t i = 0; i < kept.size(); ++i) {
      std::vector<uint64_t>& all = ends[i];
      std::sort(all.begin(), all.end());
      // The longest end that is not a shorter completion followed by ignored text only.
      // Ignored runs longer than kIgnoreReach bytes are not looked for (bounded work on long
      // captures whose body may end at every byte).
      constexpr uint64_t kIgnoreReach = 256;
      uint64_t chosen = all.back();
      for (size_t j = all.size(); j-- > 0;) {
        bool trailing_ignore = false;
        for (size_t k = j; k-- > 0 && all[j] - all[k] <= kIgnoreReach && !trailing_ignore;) {
          trailing_ignore = is_ignored_text(rt, text, all[k], all[j]);
        }
        if (!trailing_ignore) {
          chosen = all[j];
          break;
        }
      }
      kept[i].end = chosen;
    }
    events = std::move(kept);
  }
  std::sort(hidden.begin(), hidden.end(),
            [](const CaptureEvent& a, const CaptureEvent& b) { return a.start < b.start; });
  for (const CaptureEvent& event : events) {
    // Stop markers inside the span are left out (not the span that is the marker itself).
    std::string bytes;
    uint64_t at = event.start;
    for (const CaptureEvent& marker : hidden) {
      if (marker.start < at || marker.end > event.end) continue;
      if (marker.start == event.start && marker.end == event.end) continue;
      bytes.append(text, at, marker.start - at);
      at = marker.end;
    }
    bytes.append(text, at, event.end - at);
    out.emplace_back(event.capture, std::move(bytes));
  }
  return out;
}

void Matcher::record_captures(const std::vector<std::pair<uint32_t, uint32_t>>& scans) {
  const Runtime& rt = *runtime_;
  const uint32_t self = chart_.num_sets() - 1;
  const uint64_t here = text_.size();
  set_pos_.push_back(here);
  const size_t first_event = events_.size();
  auto push = [&](uint32_t name, uint64_t start, uint64_t end) {
    for (size_t i = first_event; i < events_.size(); ++i) {
      const CaptureEvent& seen = events_[i];
      if (seen.capture == name && seen.start == start && seen.end == end) return;  // same span
    }
    events_.push_back(CaptureEvent{name, start, end});
  };
  for (const auto& [origin, symbol] : scans) {  // captured lexemes (lazy-like, limited rules)
    const int32_t entry = rt.symbol_capture[symbol];
    if (entry < 0 || origin == self) continue;
    const Runtime::CapturedSymbol& captured = rt.captured_symbols[entry];
    const uint64_t start = set_pos_[origin];
    if (captured.marker_lexeme != kNoCaptureName) {
      const uint64_t split =
          marker_start(rt, text_, start, here, captured.body_lexeme, captured.marker_lexeme);
      // The marker first, as it is matched first; a stop marker is hidden from the captures
      // around it (an event without a name).
      if (captured.marker_name != kNoCaptureName) push(captured.marker_name, split, here);
      if (captured.stop && split < here) push(kNoCaptureName, split, here);
      if (captured.rule_name != kNoCaptureName) push(captured.rule_name, start, split);
    } else if (captured.rule_name != kNoCaptureName && start < here) {
      push(captured.rule_name, start, here);
    }
  }
  for (uint32_t j = chart_.set_begin[self]; j < chart_.set_begin[self + 1]; ++j) {
    const Item item = chart_.items[j];
    if (rt.dotted_next[item.dotted] != kComplete) continue;
    const int32_t entry = rt.symbol_capture[rt.prod_lhs[rt.dotted_prod[item.dotted]]];
    if (entry < 0 || item.origin == self) continue;
    const uint64_t start = set_pos_[item.origin];
    if (start < here) push(rt.captured_symbols[entry].rule_name, start, here);
  }
}

void Matcher::reset() {
  history_.clear();
  threads_.clear();
  terminated_ = false;
  frontier_ = true;
  // Undecided: only the prewarm's own matchers try the key (it measures whether it pays).
  const int state = runtime_->futures->state.load(std::memory_order_relaxed);
  chart_.anchored = state == FutureLanguages::kOn ||
                    (state == FutureLanguages::kUndecided && FutureWork::prewarming);
  chart_.merge_anchored = false;
  chars_ = 0;
  tokens_ = 0;
  next_set_first_token_ = 0;
  set_chars_.clear();
  set_first_token_.clear();
  budget_overrun_ = false;
  if (exact_) {
    // Every completion counts here: no merging, no future keys.
    chart_.exact = true;
    chart_.anchored = false;
    chart_.future_mergeable = false;
    text_.clear();
    set_pos_.assign(1, 0);
    events_.clear();
  }
  build_initial_set(*runtime_, chart_, thread_scratch().seen);
  note_new_set();
  start_threads_for_last_set();
  if (shadow_.matcher) shadow_.matcher->reset();
}

bool Matcher::counts_budgets() const {
  return runtime_->has_token_budgets || runtime_->has_char_budgets;
}

void Matcher::note_new_set() {
  if (!counts_budgets()) return;
  while (set_chars_.size() < chart_.num_sets()) {
    set_chars_.push_back(chars_);
    set_first_token_.push_back(next_set_first_token_);
  }
}

bool Matcher::token_budget_spent(const Thread& thread) const {
  const Runtime& rt = *runtime_;
  const uint32_t budget = rt.max_tokens_of(thread.state);
  if (budget == 0 || !(rt.dfa_accepting[thread.state] || rt.ends_body(thread.state))) {
    return false;
  }
  const uint32_t first = set_first_token_[thread.origin];
  return tokens_ >= first && tokens_ - first >= budget;
}

bool Matcher::has_spent_threads() const {
  if (!runtime_->has_token_budgets) return false;
  for (const Thread& th : threads_) {
    if (token_budget_spent(th)) return true;
  }
  return false;
}

void Matcher::drop_spent_threads() {
  threads_.erase(std::remove_if(threads_.begin(), threads_.end(),
                                [&](const Thread& th) { return token_budget_spent(th); }),
                 threads_.end());
}

Matcher Matcher::without_spent_threads() const {
  Matcher copy(*this, ConfigurationCopy{});
  copy.drop_spent_threads();
  return copy;
}

double Matcher::temperature(double default_temperature, bool* differ) const {
  const Runtime& rt = *runtime_;
  *differ = false;
  const double none = std::numeric_limits<double>::quiet_NaN();
  if (terminated_) return none;
  double found = none;
  auto take = [&](double value) {
    if (std::isnan(value)) return;
    if (std::isnan(found)) {
      found = value;
    } else if (value != found) {
      *differ = true;
      found = std::max(found, value);
    }
  };
  // Threads whose budget is spent are not live for the next token (see fill_mask), nor are
  // threads in a state without transitions (their lexeme has ended).
  const bool spent = has_spent_threads();
  for (const Thread& th : threads_) {
    if (spent && token_budget_spent(th)) continue;
    const int32_t* row = rt.dfa_row(th.state);
    if (std::all_of(row, row + rt.dfa_classes, [](int32_t t) { return t < 0; })) continue;
    const double own = rt.has_temperatures ? rt.lexeme_temperature[rt.dfa_lexeme[th.state]] : none;
    take(std::isnan(own) ? default_temperature : own);
  }
  return found;
}

void Matcher::start_threads_for_last_set() {
  const Runtime& rt = *runtime_;
  Scratch& sc = thread_scratch();
  ChartView view{nullptr, &chart_, 0};
  const uint32_t last = chart_.num_sets() - 1;
  expected_lexemes(rt, view, last, sc.lexemes);
  for (uint32_t lexeme : sc.lexemes) {
    threads_.push_back(Thread{last, static_cast<int32_t>(rt.lexeme_start[lexeme])});
  }
  std::sort(threads_.begin(), threads_.end());
  threads_.erase(std::unique(threads_.begin(), threads_.end()), threads_.end());
  merge_equivalent_threads();
}

void Matcher::merge_equivalent_threads() {
  // Two threads in the same DFA state whose origin sets have equal structural hashes have the
  // same future (Chart::hash_lo): keep one. Without this, `word+` over `/[a-z]+/` keeps a
  // thread from every earlier position (a lexeme may end at any byte), and each step and fill
  // costs time proportional to the text read so far.
  if (threads_.size() < 2 || exact_) return;
  struct Key {
    int32_t state;
    uint64_t lo, hi;
    uint32_t origin;
    bool operator<(const Key& o) const {
      if (state != o.state) return state < o.state;
      if (lo != o.lo) return lo < o.lo;
      if (hi != o.hi) return hi < o.hi;
      return origin < o.origin;
    }
    bool own_origin;  // a budget counts from this thread's origin: never merged
    bool same_future(const Key& o) const {
      return state == o.state && lo == o.lo && hi == o.hi && !own_origin;
    }
  };
  thread_local std::vector<Key> keys;  // reused: this runs at every byte a matcher steps
  keys.clear();
  const std::vector<uint8_t>& own = runtime_->state_counts_from_origin;
  for (const Thread& th : threads_) {
    keys.push_back(Key{th.state, chart_.hash_lo[th.origin], chart_.hash_hi[th.origin], th.origin,
                       !own.empty() && own[th.state] != 0});
  }
  std::sort(keys.begin(), keys.end());
  size_t kept = 1;
  for (size_t i = 1; i < keys.size(); ++i) {
    if (!keys[i].same_future(keys[kept - 1])) keys[kept++] = keys[i];
  }
  if (kept == keys.size()) return;
  // The earliest origin of each class stays, so the list stays sorted by (origin, state).
  threads_.clear();
  for (size_t i = 0; i < kept; ++i) threads_.push_back(Thread{keys[i].origin, keys[i].state});
  std::sort(threads_.begin(), threads_.end());
}

bool Matcher::accepting_now() const {
  if (!frontier_) return false;
  const Runtime& rt = *runtime_;
  const uint32_t last = chart_.num_sets() - 1;
  for (uint32_t j = chart_.set_begin[last]; j < chart_.set_begin[last + 1]; ++j) {
    const Item& item = chart_.items[j];
    if (item.origin == 0 && rt.dotted_accepts[item.dotted]) return true;
  }
  return false;
}

bool Matcher::is_accepting() const { return accepting_now(); }

bool Matcher::step_byte(uint8_t byte,
                        const std::vector<std::pair<uint32_t, uint32_t>>* extra_scans) {
  const Runtime& rt = *runtime_;
  Scratch& sc = thread_scratch();
  // Reused buffers (`next` trades its buffer with threads_ below): this runs once per byte
  // accepted, and once per trie node in search_text_tokens.
  thread_local std::vector<std::pair<uint32_t, uint32_t>> scans;
  thread_local std::vector<Thread> next;
  scans.clear();
  next.clear();
  if (exact_) text_.push_back(static_cast<char>(byte));
  const bool char_budgets = rt.has_char_budgets && (byte & 0xC0) != 0x80;
  if (char_budgets) ++chars_;
  for (const Thread& th : threads_) {
    int32_t state = rt.next_state(th.state, byte);
    if (state < 0) continue;
    if (char_budgets) {
      // A codepoint taken with no budget left (the body could not end before it).
      if (rt.state_near_remaining[th.state] == 0) budget_overrun_ = true;
      const int32_t near = rt.state_budget_switch[state];
      if (near >= 0) {
        // A far thread enters the near copy once a token could reach its budget.
        const uint64_t used = chars_ - set_chars_[th.origin];
        const uint64_t budget = rt.lexeme_max_chars[rt.dfa_lexeme[state]];
        const uint64_t left = used >= budget ? 0 : budget - used;
        if (left <= rt.char_window) state = near + static_cast<int32_t>(left);
      }
    }
    next.push_back(Thread{th.origin, state});
    if (rt.dfa_accepting[state]) {
      scans.emplace_back(th.origin, rt.lexeme_base() + rt.dfa_lexeme[state]);
    } else if (at_token_end_ && rt.ends_body(state)) {
      // A suffix / stop rule whose token budget is spent at this token's end, where its body
      // can end: it ends here without its marker.
      const uint32_t first = set_first_token_[th.origin];
      if (tokens_ + 1 >= first && tokens_ + 1 - first >= rt.max_tokens_of(state)) {
        scans.emplace_back(th.origin, rt.lexeme_base() + rt.dfa_lexeme[state]);
      }
    }
  }
  if (extra_scans) scans.insert(scans.end(), extra_scans->begin(), extra_scans->end());
  threads_.swap(next);
  if (scans.empty()) {
    frontier_ = false;
    merge_equivalent_threads();  // threads from equivalent origins may meet in one DFA state
  } else {
    ChartView view{nullptr, &chart_, 0};
    build_earley_set(rt, view, scans, sc.seen);
    note_new_set();
    if (exact_) record_captures(scans);
    frontier_ = true;
    start_threads_for_last_set();
  }
  return !threads_.empty() || frontier_;
}

Matcher::Snapshot Matcher::snapshot() const {
  return Snapshot{chart_.num_sets(),
                  static_cast<uint32_t>(chart_.items.size()),
                  threads_,
                  frontier_,
                  terminated_,
                  chars_,
                  tokens_,
                  text_.size(),
                  static_cast<uint32_t>(events_.size())};
}

void Matcher::restore(Snapshot&& snap) {
  truncate_chart(snap);
  threads_ = std::move(snap.threads);
  frontier_ = snap.frontier;
  terminated_ = snap.terminated;
  chars_ = snap.chars;
  tokens_ = snap.tokens;
  text_.resize(snap.text_size);
  events_.resize(snap.events);
}

void Matcher::restore_copy(const Snapshot& snap) {
  truncate_chart(snap);
  threads_.assign(snap.threads.begin(), snap.threads.end());  // into the buffer it has
  frontier_ = snap.frontier;
  terminated_ = snap.terminated;
  chars_ = snap.chars;
  tokens_ = snap.tokens;
  text_.resize(snap.text_size);
  events_.resize(snap.events);
}

void Matcher::truncate_chart(const Snapshot& snap) {
  chart_.set_begin.resize(snap.num_sets + 1);
  chart_.hash_lo.resize(snap.num_sets);
  chart_.hash_hi.resize(snap.num_sets);
  chart_.depth_hash.resize(static_cast<size_t>(snap.num_sets) * Chart::kDepthHashes * 2);
  chart_.wait_begin.resize(snap.num_sets + 1);
  chart_.waits.resize(chart_.wait_begin.back());
  chart_.leo_begin.resize(snap.num_sets + 1);
  chart_.leo.resize(chart_.leo_begin.back());
  chart_.items.resize(snap.num_items);
  chart_.future_begin.resize(snap.num_sets + 1);
  chart_.future_symbol.resize(chart_.future_begin.back());
  chart_.future_chain.resize(chart_.future_begin.back());
  chart_.anchors_hash.resize(static_cast<size_t>(snap.num_sets) * 2);
  chart_.anchors_shape.resize(static_cast<size_t>(snap.num_sets) * 2);
  chart_.future_hash.resize(static_cast<size_t>(chart_.future_begin.back()) * 2);
  if (!set_chars_.empty()) {
    set_chars_.resize(snap.num_sets);
    set_first_token_.resize(snap.num_sets);
  }
  if (exact_) set_pos_.resize(snap.num_sets);
}

bool Matcher::accept_token(int64_t token_id) {
  const bool ok = accept_token_here(token_id);
  // The shadow takes exactly what this matcher took (it decides alike: same runtime).
  if (ok && shadow_.matcher) shadow_.matcher->accept_token(token_id);
  return ok;
}

bool Matcher::accept_token_here(int64_t token_id) {
  const Runtime& rt = *runtime_;
  if (token_id < 0 || token_id >= static_cast<int64_t>(rt.vocab_size)) {
    throw std::out_of_range("token id " + std::to_string(token_id) + " is outside [0, " +
                            std::to_string(rt.vocab_size) + ")");
  }
  const uint32_t id = static_cast<uint32_t>(token_id);
  if (id >= rt.num_tokens) return false;  // padding ids are never allowed
  if (terminated_) {
    // After the end, end tokens stay allowed as no-ops (one step each, for rollback), so a
    // batch row that keeps stepping a finished sequence never gets an all-masked row.
    if (!test_bit(rt.end_bits.data(), id)) return false;
    history_.push_back(snapshot());
    return true;
  }
  if (test_bit(rt.end_bits.data(), id)) {
    // An end token ends the input where it is accepted and is refused elsewhere, also when
    // its bytes would go on as text (Runtime::shadowed_end_ids).
    if (!accepting_now()) return false;
    history_.push_back(snapshot());
    terminated_ = true;
    return true;
  }
  // Token-set symbols can only be matched at a lexeme boundary, i.e. from the frontier set.
  std::vector<std::pair<uint32_t, uint32_t>> token_scans;
  if (frontier_) {
    const uint32_t last = chart_.num_sets() - 1;
    for (uint32_t j = chart_.set_begin[last]; j < chart_.set_begin[last + 1]; ++j) {
      const uint32_t next = rt.dotted_next[chart_.items[j].dotted];
      if (next == kComplete || next < rt.tokenset_base()) continue;
      const uint32_t* bits =
          &rt.tokenset_bits[static_cast<size_t>(next - rt.tokenset_base()) * rt.words];
      if (test_bit(bits, id)) {
        bool present = false;
        for (const auto& scan : token_scans) present = present || scan.second == next;
        if (!present) token_scans.emplace_back(last, next);
      }
    }
  }
  const bool text = test_bit(rt.text_bits.data(), id);
  if (!text && token_scans.empty()) return false;
  Snapshot before = snapshot();
  // An occurrence whose token budget is spent ends here where it can (as fill_mask has it).
  if (rt.has_token_budgets) drop_spent_threads();
  bool ok = text;
  if (text) {
    const uint32_t begin = rt.token_begin[id], end = begin + rt.token_length[id];
    for (uint32_t i = begin; i < end && ok; ++i) {
      // Sets added before the token's last byte are followed by more of its bytes.
      next_set_first_token_ = i + 1 == end ? tokens_ + 1 : tokens_;
      at_token_end_ = i + 1 == end;
      ok = step_byte(rt.token_bytes[i], i + 1 == end ? &token_scans : nullptr);
    }
    at_token_end_ = false;
  }
  if (!ok) {
    restore(Snapshot(before));
    if (token_scans.empty()) return false;
    threads_.clear();
    ChartView view{nullptr, &chart_, 0};
    build_earley_set(rt, view, token_scans, thread_scratch().seen);
    next_set_first_token_ = tokens_ + 1;
    note_new_set();
    if (exact_) record_captures(token_scans);
    frontier_ = true;
    start_threads_for_last_set();
  }
  ++tokens_;
  next_set_first_token_ = tokens_;
  if (rt.has_token_budgets) {
    for (const Thread& th : threads_) {
      const uint32_t budget = rt.max_tokens_of(th.state);
      const uint32_t first = set_first_token_[th.origin];
      if (budget != 0 && tokens_ >= first && tokens_ - first > budget) budget_overrun_ = true;
    }
  }
  history_.push_back(std::move(before));
  return true;
}

bool Matcher::accept_bytes(const std::string& bytes) {
  const bool ok = accept_bytes_here(bytes);
  if (ok && shadow_.matcher) shadow_.matcher->accept_bytes(bytes);
  return ok;
}

bool Matcher::accept_bytes_here(const std::string& bytes) {
  if (terminated_) return false;
  Snapshot before = snapshot();
  next_set_first_token_ = tokens_;  // text without token boundaries counts no tokens
  for (char c : bytes) {
    if (!step_byte(static_cast<uint8_t>(c), nullptr)) {
      restore(std::move(before));
      return false;
    }
  }
  history_.push_back(std::move(before));
  return true;
}

void Matcher::rollback(uint32_t n) {
  if (n > history_.size()) {
    throw std::out_of_range("cannot roll back " + std::to_string(n) + " steps; only " +
                            std::to_string(history_.size()) + " recorded");
  }
  if (n == 0) return;
  const size_t keep = history_.size() - n;
  restore(std::move(history_[keep]));
  history_.resize(keep);
  if (shadow_.matcher) {
    shadow_.matcher->rollback(std::min<uint32_t>(n, shadow_.matcher->history_size()));
  }
}

CacheStats runtime_cache_stats(const Runtime& runtime) {
  GroupCache& cache = *runtime.groups;
  CacheStats out;
  {
    std::lock_guard<std::mutex> lock(cache.mask_mutex);
    for (const GroupCache::MaskTable* table :
         {&cache.masks, &cache.future_masks, &cache.depth_masks}) {
      out.mask_entries += table->current.size() + table->previous.size();
      out.mask_bytes += table->bytes;
    }
    for (const auto& [digest, same] : cache.mask_contents) {
      for (const auto& weak : same) {
        const GroupCache::StoredMask mask = weak.lock();
        if (!mask) continue;
        ++out.distinct_masks;
        if (!mask->dense()) ++out.compact_masks;
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(cache.walk_mutex);
    out.walk_entries = cache.walks.size();
    out.item_walk_entries = cache.item_walks.size();
    out.local_walk_entries = cache.local_walks.size();
    out.closure_walk_entries = cache.closure_walks.size();
    out.walk_bytes = cache.walk_bytes;
    out.walk_clears = cache.walk_clears;
  }
  out.group_bytes = cache.used.load(std::memory_order_relaxed);
  out.hits_whole_stack = cache.hits_whole_stack.read();
  out.hits_future = cache.hits_future.load(std::memory_order_relaxed);
  out.hits_depth = cache.hits_depth.load(std::memory_order_relaxed);
  out.fills_computed = cache.fills_computed.load(std::memory_order_relaxed);
  out.fills_searched = cache.fills_searched.load(std::memory_order_relaxed);
  out.walk_hits_future = cache.hits_future_walks.load(std::memory_order_relaxed);
  out.descent_hits_future = cache.hits_future_descents.load(std::memory_order_relaxed);
  out.future_descents_idle = cache.future_descents_idle.load(std::memory_order_relaxed) ? 1 : 0;
  out.descents_walked = cache.descents_walked.load(std::memory_order_relaxed);
  out.descent_nodes_walked = cache.descent_nodes_walked.load(std::memory_order_relaxed);
  out.fills_by_items = cache.fills_by_items.load(std::memory_order_relaxed);
  out.interned_by_parts = cache.interned_by_parts.load(std::memory_order_relaxed);
  out.mask_compares = cache.mask_compares.load(std::memory_order_relaxed);
  {
    FutureLanguages& fl = *runtime.futures;
    std::lock_guard<std::mutex> lock(fl.mutex);
    out.future_languages = fl.canonical.size() + fl.next_unique;
    out.future_memo_entries = fl.ids.size() + fl.concatenations.size() + fl.unions.size();
  }
  out.future_keys_by_anchors =
      runtime.futures->keys_by_anchors_hits.load(std::memory_order_relaxed);
  out.future_recipe_hits = runtime.futures->recipe_hits.load(std::memory_order_relaxed);
  out.depth_keys_idle = cache.depth_keys_idle.load(std::memory_order_relaxed) ? 1 : 0;
  return out;
}

BackgroundPrewarm::BackgroundPrewarm(std::shared_ptr<const Runtime> runtime, bool on_caller) {
  auto work = [this, runtime = std::move(runtime)]() {
    try {
      stats_ = prewarm_runtime(runtime, &stop_);
    } catch (const std::exception&) {
      // Out of memory while prewarming: fills build what they need on demand.
    }
    {
      std::lock_guard<std::mutex> lock(done_mutex_);
      done_.store(true, std::memory_order_release);
    }
    done_cv_.notify_all();
  };
  if (on_caller) {
    on_caller_ = std::move(work);
  } else {
    try {
      thread_ = std::thread(std::move(work));
    } catch (const std::system_error&) {
      // No thread to be had (a container's limit): no prewarm, and fills build what they need
      // on demand. Done at once, so that nobody waits for it.
      std::lock_guard<std::mutex> lock(done_mutex_);
      done_.store(true, std::memory_order_release);
    }
  }
}

void BackgroundPrewarm::run_here() {
  std::function<void()> work;
  {
    std::lock_guard<std::mutex> lock(done_mutex_);
    work.swap(on_caller_);
  }
  if (work) work();
}

BackgroundPrewarm::~BackgroundPrewarm() {
  request_stop();
  run_here();  // one never run (its caller failed before it): finishes at the first check
  wait();
}

PrewarmStats BackgroundPrewarm::wait() {
  std::lock_guard<std::mutex> lock(join_mutex_);
  if (thread_.joinable()) thread_.join();
  std::unique_lock<std::mutex> done_lock(done_mutex_);
  done_cv_.wait(done_lock, [this] { return done(); });
  return stats_;
}

std::pair<uint64_t, uint64_t> Matcher::depth_mask_key(uint32_t depth) const {
  const MaskKey seed{mix64(0x243f6a8885a308d3ull + depth), mix64(0x13198a2e03707344ull ^ depth)};
  return configuration_key(
      *runtime_, seed, threads_, frontier_, chart_.num_sets() - 1, [&](uint32_t set) {
        if (depth == 0) return MaskKey{0, 0};  // H_0: nothing below the states
        const uint64_t* hash = chart_.depth_hash_of(set, depth);
        return MaskKey{hash[0], hash[1]};
      });
}

void Matcher::fill_mask(uint32_t* words) const {
  FillKeys keys;
  if (!fill_mask_if_cached(words, &keys)) fill_mask_computed(words, &keys);
}

void Matcher::warm_mask(uint32_t* words) const {
  // Most of a long traffic's fills are whole-stack hits, and their 16 KB copies (Llama 3) were
  // a sixth of its time.
  if (!terminated_ && !has_spent_threads()) {
    GroupCache& cache = *runtime_->groups;
    const MaskKey key = whole_mask_key();
    bool held = local_masks().find(cache.id, key) != nullptr;
    if (!held) {
      std::lock_guard<std::mutex> lock(cache.mask_mutex);
      held = static_cast<bool>(find_mask_locked(cache, cache.masks, key));
    }
    if (held) {
      cache.hits_whole_stack.add_one();
      return;
    }
  }
  fill_mask(words);
}

bool Matcher::fill_mask_if_cached(uint32_t* words, FillKeys* keys) const {
  if (has_spent_threads()) return without_spent_threads().fill_mask_if_cached(words, keys);
  GRAMKILN_TRACE_BEGIN();
  if (!lookup_cached_mask(words, keys)) return false;
  settle_shadowed_end_tokens(words);
  return true;
}

void Matcher::fill_mask_computed(uint32_t* words, const FillKeys* keys) const {
  if (has_spent_threads()) return without_spent_threads().fill_mask_computed(words, keys);
  compute_mask(words, keys);
  settle_shadowed_end_tokens(words);
  GRAMKILN_TRACE_STAGE(kEnd);
  GRAMKILN_TRACE_KEEP();
}

void Matcher::settle_shadowed_end_tokens(uint32_t* words) const {
  const Runtime& rt = *runtime_;
  if (rt.shadowed_end_ids.empty() || terminated_) return;
  const bool accepting = accepting_now();
  for (const uint32_t id : rt.shadowed_end_ids) {
    if (accepting) {
      words[id >> 5] |= 1u << (id & 31);
    } else {
      words[id >> 5] &= ~(1u << (id & 31));
    }
  }
}

std::pair<uint64_t, uint64_t> Matcher::whole_mask_key() const {
  // The mask is a function of the threads' lexemes and classes of DFA states (see
  // Runtime::state_key), the structural hashes of their origin sets and (when a set ends here)
  // of the last set.
  return configuration_key(*runtime_, {0x51ed270b27a2b7d5ull, 0x6a09e667f3bcc909ull}, threads_,
                           frontier_, chart_.num_sets() - 1, [&](uint32_t set) {
                             return MaskKey{chart_.hash_lo[set], chart_.hash_hi[set]};
                           });
}

bool Matcher::uses_futures() const {
  // A matcher created with future keys keeps its anchors complete, so the runtime may switch
  // the keys off under it (the prewarm's decision) at any time; never back on.
  const FutureLanguages& fl = *runtime_->futures;
  return chart_.anchored && !fl.off() && !fl.exhausted.load(std::memory_order_relaxed);
}

bool Matcher::uses_depth_keys() const {
  return !runtime_->groups->depth_keys_idle.load(std::memory_order_relaxed) || !uses_futures();
}

std::pair<uint64_t, uint64_t> Matcher::future_key() const {
  if (!uses_futures()) return whole_mask_key();
  return future_mask_key();
}

std::pair<uint64_t, uint64_t> Matcher::anchored_configuration_key() const {
  // What future_mask_key reads: per thread its class of DFA states, its lexeme and what follows
  // at its origin, which future_after finds by the origin's anchors (its memo key); at a
  // frontier the token-set symbols the last set waits for, and the last set's anchors; whether
  // the input is accepted.
  const Runtime& rt = *runtime_;
  MaskKey key{0x243f6a8885a308d3ull, 0x13198a2e03707344ull};
  for (const Thread& th : threads_) {
    const uint64_t state = rt.state_key[th.state] ^ (uint64_t{rt.dfa_lexeme[th.state]} << 40);
    const uint64_t lo = chart_.anchors_hash[2 * th.origin];
    const uint64_t hi = chart_.anchors_hash[2 * th.origin + 1];
    key.first += mix64(state ^ lo);
    key.second += mix64(state + hi * 0xd6e8feb86659fd93ull);
  }
  // The memo's keys name which form of the future key they stand for (see
  // FutureLanguages::frontier_by_anchors).
  uint64_t flags = (frontier_ ? 1u : 0u) | (accepting_now() ? 2u : 0u) |
                   (rt.futures->frontier_by_anchors() ? 4u : 0u);
  if (frontier_) {
    const uint32_t last = chart_.num_sets() - 1;
    key.first = mix64(key.first ^ chart_.anchors_hash[2 * last]);
    key.second = mix64(key.second + chart_.anchors_hash[2 * last + 1]);
    if (rt.num_tokensets > 0) {
      for (uint32_t w = chart_.wait_begin[last]; w < chart_.wait_begin[last + 1]; ++w) {
        const uint32_t symbol = static_cast<uint32_t>(chart_.waits[w] >> 32);
        if (symbol >= rt.tokenset_base()) flags = mix64(flags + symbol);
      }
    }
  }
  return {mix64(key.first + flags), mix64(key.second ^ (flags * 0x9e3779b97f4a7c15ull))};
}

std::pair<uint64_t, uint64_t> Matcher::memoised_future_mask_key() const {
  // Configurations recur by their anchors much as by their futures, and a thread's future is
  // a memo probe of its own (future_after): one probe here replaces one per thread, the cost
  // of a cached fill that misses the whole-stack key (C-like: ~11 lexer threads).
  FutureLanguages& fl = *runtime_->futures;
  const MaskKey anchored = anchored_configuration_key();
  {
    std::lock_guard<std::mutex> lock(fl.mutex);
    if (const MaskKey* found = fl.keys_by_anchors.find(anchored)) {
      fl.keys_by_anchors_hits.fetch_add(1, std::memory_order_relaxed);
      // The per-thread parts in the scratch are another configuration's.
      thread_scratch().thread_futures_key = MaskKey{0, 0};
      return *found;
    }
  }
  const bool was_short = FutureWork::short_of_budget;
  FutureWork::short_of_budget = false;
  const MaskKey key = future_mask_key();
  // A key built short of the language budget is exact but not canonical: not kept, so that a
  // later fill with the languages canonicalised finds the canonical one.
  if (!FutureWork::short_of_budget) {
    std::lock_guard<std::mutex> lock(fl.mutex);
    if (fl.keys_by_anchors.size() >= FutureLanguages::kMaxMemo) fl.keys_by_anchors.clear();
    fl.keys_by_anchors.emplace(anchored, key);
  }
  FutureWork::short_of_budget = FutureWork::short_of_budget || was_short;
  return key;
}

std::pair<uint64_t, uint64_t> Matcher::future_mask_key() const {
  // The mask is a function of the future language: per thread, its DFA state and what follows
  // its lexeme at its origin; at a frontier, what follows each token-set symbol expected there,
  // and whether the input is accepted (the empty future).
  const Runtime& rt = *runtime_;
  FutureLanguages& fl = *rt.futures;
  const uint32_t symbol_node = static_cast<uint32_t>(rt.dotted_next.size());
  const uint32_t last = chart_.num_sets() - 1;
  const bool frontier_by_anchors = fl.frontier_by_anchors();
  thread_local std::vector<MaskKey> parts;
  parts.clear();
  {
    FutureBudget budget(0);  // see kLanguagesPerStep in future.cpp
    std::lock_guard<std::mutex> lock(fl.mutex);
    uint32_t memo_symbol = kComplete, memo_origin = kComplete;
    Future memo{0, 0, 0};
    auto at_last_by_anchors = [&](uint32_t symbol) {
      return Future{FutureLanguages::kAnchorsChain,
                    chart_.anchors_hash[2 * last] ^ (uint64_t{symbol} << 40),
                    chart_.anchors_hash[2 * last + 1]};
    };
    auto add_part = [&](uint64_t tag, const Future& future) {
      const uint64_t chain = mix64(tag ^ (static_cast<uint64_t>(future.chain) << 32));
      parts.emplace_back(mix64(chain ^ future.lo), mix64(chain + future.hi));
    };
    for (const Thread& th : threads_) {
      const uint32_t symbol = rt.lexeme_base() + rt.dfa_lexeme[th.state];
      if (frontier_by_anchors && th.origin == last) {
        // A thread that starts at the last set: what follows its lexeme there is a function
        // of the lexeme and that set's anchors, which stand for it here (tagged by a chain id
        // no language gets). The future itself would be one computation per lexeme the set
        // expects, the bulk of a computed fill's key, and merges few more configurations
        // (docs/design/runtime.md, "Session 45").
        add_part(rt.state_key[th.state], at_last_by_anchors(symbol));
        continue;
      }
      if (symbol != memo_symbol || th.origin != memo_origin) {
        memo = future_after(rt, fl, chart_, symbol_node + symbol, th.origin);
        memo_symbol = symbol;
        memo_origin = th.origin;
      }
      add_part(rt.state_key[th.state], memo);
    }
    Scratch& sc = thread_scratch();
    sc.thread_futures.assign(parts.begin(), parts.end());  // one per thread, in order
    if (frontier_ && rt.num_tokensets > 0) {
      for (uint32_t w = chart_.wait_begin[last]; w < chart_.wait_begin[last + 1]; ++w) {
        const uint32_t symbol = static_cast<uint32_t>(chart_.waits[w] >> 32);
        if (symbol < rt.tokenset_base()) continue;
        add_part(mix64(0x7c1d2b3a4e5f6071ull + symbol),
                 frontier_by_anchors ? at_last_by_anchors(symbol)
                                     : future_after(rt, fl, chart_, symbol_node + symbol, last));
      }
    }
  }
  std::sort(parts.begin(), parts.end());
  parts.erase(std::unique(parts.begin(), parts.end()), parts.end());
  MaskKey key{0x6c62272e07bb0142ull, 0x62b821756295c58dull};
  for (const MaskKey& part : parts) {
    key.first = mix64(key.first ^ part.first);
    key.second = mix64(key.second + part.second);
  }
  const uint64_t flags = (frontier_ ? 1u : 0u) | (accepting_now() ? 2u : 0u);
  const MaskKey result{mix64(key.first + flags),
                       mix64(key.second ^ (flags * 0x9e3779b97f4a7c15ull))};
  thread_scratch().thread_futures_key = result;
  return result;
}

bool Matcher::lookup_cached_mask(uint32_t* words, FillKeys* keys) const {
  const Runtime& rt = *runtime_;
  if (terminated_) {
    std::copy(rt.end_bits.begin(), rt.end_bits.end(), words);  // see accept_token
    return true;
  }
  const MaskKey key = whole_mask_key();
  GroupCache& cache = *rt.groups;
  LocalMasks& local = local_masks();
  if (const GroupCache::MaskWords* mask = local.find(cache.id, key)) {
    mask->copy_to(words);
    cache.hits_whole_stack.add_one();
    return true;
  }
  GroupCache::StoredMask whole;
  if (find_mask(cache, cache.masks, key, words, &whole)) {
    local.store(cache, key, std::move(whole));
    cache.hits_whole_stack.add_one();
    return true;
  }
  GRAMKILN_TRACE_STAGE(kWholeProbe);
  if (uses_futures()) {
    GroupCache::StoredMask found;
    const MaskKey future = memoised_future_mask_key();
    GRAMKILN_TRACE_STAGE(kFutureKey);
    if (keys) *keys = FillKeys{key, future, true};
    if (find_mask(cache, cache.future_masks, future, words, &found)) {
      cache.hits_future.fetch_add(1, std::memory_order_relaxed);
      store_mask(cache, cache.masks, key, found);
      local.store(cache, key, std::move(found));
      return true;
    }
    GRAMKILN_TRACE_STAGE(kFutureProbe);
  }
  // Then by the bounded-depth keys under which masks have been stored (see depth_masks); a hit
  // lacks only the end tokens, which depend on the whole stack.
  // Keys first, then one lock for every probe (most miss, answered by the tables' filters).
  const uint32_t stored =
      uses_depth_keys() ? cache.mask_depths.load(std::memory_order_relaxed) : 0u;
  MaskKey depth_keys[Chart::kDepthHashes + 1];
  size_t probes = 0;
  for (uint32_t depth = frontier_ ? 1 : 0; depth <= Chart::kDepthHashes && (stored >> depth);
       ++depth) {
    if ((stored >> depth) & 1u) depth_keys[probes++] = depth_mask_key(depth);
  }
  GroupCache::StoredMask found;
  {
    std::lock_guard<std::mutex> lock(cache.mask_mutex);
    for (size_t probe = 0; probe < probes && !found; ++probe) {
      found = find_mask_locked(cache, cache.depth_masks, depth_keys[probe]);
    }
  }
  if (!found) {
    GRAMKILN_TRACE_STAGE(kDepthProbes);
    return false;
  }
  found->copy_to(words);
  // Without end tokens to add, the whole-stack entry is the same stored mask.
  if (accepting_now()) {
    or_words(words, rt.end_bits.data(), rt.words);
    found = intern_mask(cache, words, rt.words);
  }
  store_mask(cache, cache.masks, key, found);
  // And under the future key the fill probed: configurations with this future find it there
  // first, whatever their neighbourhood.
  if (keys && keys->known) store_mask(cache, cache.future_masks, keys->future, found);
  local.store(cache, key, std::move(found));
  cache.hits_depth.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void Matcher::compute_mask(uint32_t* words, const FillKeys* keys) const {
  const Runtime& rt = *runtime_;
  if (terminated_) {
    std::copy(rt.end_bits.begin(), rt.end_bits.end(), words);  // see accept_token
    return;
  }
  const bool known = keys && keys->known;
  const MaskKey key = known ? keys->whole : whole_mask_key();
  GroupCache& cache = *rt.groups;
  const size_t computed = cache.fills_computed.fetch_add(1, std::memory_order_relaxed) + 1;
  // Without a prewarm (or after it), decoding itself judges the future key now and then, by
  // the prewarm's rule; it can only be switched off.
  if (computed % 16 == 0 && !FutureWork::prewarming &&
      rt.futures->mode == FutureLanguages::Mode::kAuto &&
      rt.futures->state.load(std::memory_order_relaxed) == FutureLanguages::kOn &&
      !future_keys_pay(rt)) {
    rt.futures->decide(false);
  }
  // With future keys, each thread's top-level exit walk by sets is also kept by its future
  // (the per-thread parts of the future key, left in this OS thread's scratch by computing
  // it). Fills by items do not read them (a fill by items that falls back to walks by sets
  // then walks without them: exact, fewer hits), and the key may have come from the memo by
  // anchors without its parts.
  const MaskKey* thread_futures = nullptr;
  if (uses_futures()) {
    const Scratch& sc = thread_scratch();
    const bool fresh = known && keys->future == sc.thread_futures_key &&
                       sc.thread_futures.size() == threads_.size();
    // Fills by items take the parts only where the key's computation left them (a key from
    // the memo by anchors has none): computing them again costs what a descent saves.
    if (fresh || (rt.groups->item_walks_mode != GroupCache::ItemWalks::kOn &&
                  future_mask_key() == sc.thread_futures_key)) {
      thread_futures = sc.thread_futures.data();
    }
  }
  GRAMKILN_TRACE_STAGE(kSetup);
  const int dependency = fill_mask_uncached(words, thread_futures);  // writes every word
  GRAMKILN_TRACE_STAGE(kComposition);
  Scratch& sc = thread_scratch();
  // Equal parts ORed in a different order, or twice, give equal words: deduplicated (a hashed
  // composition already is).
  if (!sc.composition_hashed) {
    std::sort(sc.composition.begin(), sc.composition.end());
    sc.composition.erase(std::unique(sc.composition.begin(), sc.composition.end()),
                         sc.composition.end());
  }
  // The stored copy of `words`, found by the fill's composition where it is known.
  auto intern_composed = [&](bool with_end_tokens) {
    // The mask the fill copied is the stored one (its words are these, end tokens aside).
    if (!with_end_tokens && sc.composed_found) {
      cache.interned_by_parts.fetch_add(1, std::memory_order_relaxed);
      return sc.composed_found;
    }
    if (!sc.composition_known) return intern_mask(cache, words, rt.words);
    const MaskKey parts = composition_key(sc, with_end_tokens);
    return intern_mask(cache, words, rt.words, &parts);
  };
  GroupCache::StoredMask without_ends;
  if (dependency >= 0 && uses_depth_keys()) {
    const uint32_t depth = std::max<uint32_t>(static_cast<uint32_t>(dependency), frontier_ ? 1 : 0);
    without_ends = intern_composed(false);
    store_mask(cache, cache.depth_masks, depth_mask_key(depth), without_ends);
    cache.mask_depths.fetch_or(1u << depth, std::memory_order_relaxed);
  }
  GRAMKILN_TRACE_STAGE(kDepthStore);
  const bool accepting = accepting_now();
  if (accepting) or_words(words, rt.end_bits.data(), rt.words);
  // Without end tokens to add, the whole-stack entry shares the bounded-depth one's copy.
  const GroupCache::StoredMask stored =
      without_ends && !accepting ? without_ends : intern_composed(accepting);
  // Where the future key stores it, a decode's computed mask is not also stored under the
  // whole-stack key: a configuration met again misses that key, finds the mask by its future
  // key, and that hit stores it under the whole-stack key (lookup_cached_mask). A first visit,
  // which most computed fills are, does not pay for two stores (C-like: slow positions 0.93x
  // paired; one more computed fill in its decode, docs/design/runtime.md, "Session 53"). The
  // prewarm stores both, so that its configurations are whole-stack hits.
  const bool by_future = uses_futures();
  if (!by_future || FutureWork::prewarming) store_mask(cache, cache.masks, key, stored);
  GRAMKILN_TRACE_STAGE(kWholeStore);
  if (by_future) {
    store_mask(cache, cache.future_masks, known ? keys->future : future_mask_key(), stored);
  }
  sc.composed_found.reset();
  GRAMKILN_TRACE_STAGE(kFutureStore);
}

int Matcher::fill_mask_uncached(uint32_t* words, const MaskKey* thread_futures) const {
  const Runtime& rt = *runtime_;
  Scratch& sc = thread_scratch();
  reset_overlay(sc);
  ChartView view{&chart_, &sc.overlay, chart_.num_sets()};
  sc.composition.clear();
  sc.composition_known = true;
  sc.composition_hashed = false;
  sc.composed_found.reset();
  start_walk_budget(*rt.groups, sc);
  int dependency = 0;
  const bool by_items = rt.groups->item_walks_mode == GroupCache::ItemWalks::kOn;
  bool items_done = false;
  if (by_items) {
    sc.item_parts.clear();
    items_done = fill_exits_by_items(&dependency, thread_futures);
    if (items_done) rt.groups->fills_by_items.fetch_add(1, std::memory_order_relaxed);
    if (items_done && !sc.walks_exhausted) {
      // The mask is the inside union, the parts and the frontier's token sets: when that
      // composition was stored before, one copy replaces the union and every OR.
      collect_thread_states(sc, threads_);
      // The parts are distinct already (collected by address, and a result's id is its own),
      // and the composition's hash does not depend on their order: only token sets, which
      // several items may wait for, can repeat.
      const size_t parts_end = sc.composition.size();
      append_frontier_token_sets(rt, sc);
      if (sc.composition.size() != parts_end) {
        std::sort(sc.composition.begin(), sc.composition.end());
        sc.composition.erase(std::unique(sc.composition.begin(), sc.composition.end()),
                             sc.composition.end());
      }
      if (copy_composed_mask(rt, sc, words)) return dependency;
      assign_inside_sets(rt, sc, threads_, words);
      bool parts_alive;
      {
        // The parts are read under walk_mutex, while their generation of the walk tables lasts
        // (see fill_exits_by_items); past a clear, the fill walks by sets below.
        GroupCache& cache = *rt.groups;
        std::lock_guard<std::mutex> lock(cache.walk_mutex);
        parts_alive = cache.walk_generation == sc.item_parts_generation;
        if (parts_alive) {
          // The dense parts in one pass (see or_many), the token lists bit by bit.
          thread_local std::vector<const uint32_t*> dense_parts;
          dense_parts.clear();
          // Each part's header and first words, asked for together: cold, and independent.
          for (const PartRef& part : sc.item_parts) {
            __builtin_prefetch(part.result);
            __builtin_prefetch(reinterpret_cast<const char*>(part.result) + 64);
          }
          for (const PartRef& part : sc.item_parts) {
            if (part.result->dense) {
              dense_parts.push_back(part.result->data());
            } else {
              emit_result(*part.result, nullptr, words, rt.words);
            }
          }
          or_many(words, dense_parts.data(), dense_parts.size(), rt.words);
        }
      }
      if (parts_alive) {
        or_frontier_token_sets(words);
        return dependency;
      }
      items_done = false;
    }
    if (!items_done) {
      reset_overlay(sc);
      sc.composition.clear();
      sc.composition_hashed = false;
      sc.walks_exhausted = false;
      dependency = 0;
    }
  }
  // A fill by items that ran out of walks goes on to the search below, which finds every text
  // token: its parts need not be ORed.
  assign_inside_sets(rt, sc, threads_, words);
  for (size_t i = 0; i < threads_.size() && !items_done; ++i) {
    const Thread& th = threads_[i];
    if (rt.state_has_exits[th.state]) {
      uint64_t result_id = 0;
      const int depth =
          walk_level(rt, view, sc, top_group(rt, th.state), rt.dfa_lexeme[th.state], th.origin,
                     words, 0, nullptr, thread_futures ? &thread_futures[i] : nullptr, &result_id);
      dependency = (depth < 0 || dependency < 0) ? -1 : std::max(dependency, depth);
      if (result_id == 0) sc.composition_known = false;
      if (result_id != kNothingEmitted) sc.composition.push_back(result_id);
    }
  }
  if (sc.walks_exhausted) {
    // What the walks emitted before the budget ran out is right but incomplete; the search
    // finds every text token (those inside a lexeme again, harmlessly).
    GroupCache& cache = *rt.groups;
    cache.fills_searched.fetch_add(1, std::memory_order_relaxed);
    const size_t budget = cache.fill_walk_budget.load(std::memory_order_relaxed);
    if (budget > GroupCache::kFillWalkFloor) {
      cache.fill_walk_budget.store(std::max(GroupCache::kFillWalkFloor, budget / 4),
                                   std::memory_order_relaxed);
    }
    search_text_tokens(words);
    sc.composition_known = false;
    dependency = -1;
  }
  append_frontier_token_sets(rt, sc);
  or_frontier_token_sets(words);
  return dependency;
}

void Matcher::append_frontier_token_sets(const Runtime& rt, Scratch& sc) const {
  if (!frontier_ || rt.num_tokensets == 0) return;
  const uint32_t last = chart_.num_sets() - 1;
  for (uint32_t j = chart_.set_begin[last]; j < chart_.set_begin[last + 1]; ++j) {
    const uint32_t next = rt.dotted_next[chart_.items[j].dotted];
    if (next == kComplete || next < rt.tokenset_base()) continue;
    // Token-set indices cannot collide with walk ids (those are below 2^63).
    sc.composition.push_back((uint64_t{1} << 63) | (next - rt.tokenset_base()));
  }
}

void Matcher::or_frontier_token_sets(uint32_t* words) const {
  const Runtime& rt = *runtime_;
  if (!frontier_ || rt.num_tokensets == 0) return;
  const uint32_t last = chart_.num_sets() - 1;
  for (uint32_t j = chart_.set_begin[last]; j < chart_.set_begin[last + 1]; ++j) {
    const uint32_t next = rt.dotted_next[chart_.items[j].dotted];
    if (next == kComplete || next < rt.tokenset_base()) continue;
    or_words(words, &rt.tokenset_bits[static_cast<size_t>(next - rt.tokenset_base()) * rt.words],
             rt.words);
  }
}

namespace {

// A descent's parts by result, each once (the same result is often reached several ways).
void sort_distinct_parts(std::vector<PartRef>& parts) {
  std::sort(parts.begin(), parts.end(),
            [](const PartRef& a, const PartRef& b) { return a.result < b.result; });
  parts.erase(std::unique(parts.begin(), parts.end(),
                          [](const PartRef& a, const PartRef& b) { return a.result == b.result; }),
              parts.end());
}

size_t packed_descent_bytes(const std::vector<PartRef>& parts) {
  return sizeof(GroupCache::PackedDescent) + sizeof(PartRef) * parts.size();
}

// `parts` as one block of the walk arena (call with walk_mutex held, after making room).
const GroupCache::PackedDescent* pack_descent(GroupCache::WalkArena& arena,
                                              const std::vector<PartRef>& parts) {
  auto* packed =
      static_cast<GroupCache::PackedDescent*>(arena.allocate(packed_descent_bytes(parts)));
  packed->num_parts = static_cast<uint32_t>(parts.size());
  packed->unused = 0;
  std::copy(parts.begin(), parts.end(), const_cast<PartRef*>(packed->parts()));
  return packed;
}

// A thread whose descent no table holds, walked by fill_exits_by_items with the others (see
// there).
struct DescentWalker {
  uint32_t thread;
  const ExitGroup* top;
  uint32_t lexeme;
  MaskKey future_key;
  // (group, symbol, set, origin hops from the thread's origin to the set)
  std::vector<std::tuple<const ExitGroup*, uint32_t, uint32_t, uint32_t>> work;
  std::vector<PartRef> parts;
  std::vector<uint32_t> reads;  // the sets its completions read (see depth_needed)
  uint32_t path_hops;           // the most hops of a path to any of them
  bool reads_known;
  // A node whose set was read at its first turn, its local walk asked for (local_key).
  bool pending;
  // Its local walk read (at the second turn) and its packed block asked for, to be read at
  // the third turn.
  bool viewed;
  GroupCache::LocalWalkView view;
  std::tuple<const ExitGroup*, uint32_t, uint32_t, uint32_t> node;
  std::pair<uint64_t, uint64_t> local_key;
  uint32_t depth;  // the smallest that covers `reads`, 0 for none (see depth_needed)
  MaskKey depth_key;
  bool at_last;  // starts at the last set, whose threads' descents are kept as one
  bool finished() const { return !pending && work.empty(); }
};

// fill_exits_by_items' buffers, kept between fills (a thread's). Behind one out-of-line
// accessor, called once a fill: every use of a thread_local by name is a call to
// __tls_get_addr in a shared library, which GCC repeats rather than keep the address (~130
// calls a computed C-like fill under callgrind when these were thread_locals of their own).
struct DescentBuffers {
  StepSet done;        // completions one thread's descent has followed
  StepSet collected;   // results among the fill's parts, by address
  StepSet joint_seen;  // the last set's threads' parts, by address
  std::vector<DescentWalker> walkers;
  std::vector<PartRef> joint_parts;
  std::vector<uint32_t> active;  // the walkers still walking
};

__attribute__((noinline)) DescentBuffers& descent_buffers() {
  thread_local DescentBuffers buffers;
  return buffers;
}

}  // namespace

bool Matcher::fill_exits_by_items(int* dependency, const MaskKey* thread_futures) const {
  const Runtime& rt = *runtime_;
  Scratch& sc = thread_scratch();
  GroupCache& cache = *rt.groups;
  sc.item_walk_unkept = false;
  *dependency = 0;
  const ChartView chart_view{&chart_, &sc.overlay, chart_.num_sets()};
  DescentBuffers& buffers = descent_buffers();
  StepSet& done = buffers.done;            // completions one thread's descent has followed
  StepSet& collected = buffers.collected;  // results among sc.item_parts, by address
  collected.clear();
  auto add_part = [&](const PartRef& part) {
    if (collected.insert(part.result, 0, 0)) {
      sc.item_parts.push_back(part);
      sc.composition.push_back(part.id);
    }
  };
  // Parts are collected by address and id, with no reference count: the packed walks they
  // come from, and the results, live until the walk tables are cleared (walk_generation),
  // which this fill checks wherever it has released walk_mutex; a clear meanwhile sends the
  // fill back to walks by sets.
  auto add_descent = [&](const GroupCache::PackedDescent& descent) {
    const PartRef* parts = descent.parts();
    for (uint32_t p = 0; p < descent.num_parts; ++p) add_part(parts[p]);
  };
  std::vector<DescentWalker>& walkers = buffers.walkers;
  size_t num_walkers = 0;
  // Where a decode keys descents by their threads' futures, it neither probes nor stores them
  // by depth: the probes (one per depth some descent of the group was stored at) and the
  // stores cost more than walking the descents they would answer, which the prewarm's local
  // walks make a lookup a node (docs/design/runtime.md, "Session 40": C-like slow positions
  // 0.91x, with 2.5x the descents walked). A walked descent's depth is still found, for the
  // mask's own depth key. The prewarm still stores descents by depth, since the runtime may
  // turn future keys off.
  const bool prewarming = FutureWork::prewarming;  // a thread_local: read once
  const bool by_depth = !thread_futures || prewarming;
  // Whether anything reads a walked descent's depth: the descents' own depth keys, or the
  // mask's (see GroupCache::depth_keys_idle).
  const bool depths_needed = by_depth || uses_depth_keys();
  // Where the future key stands for the threads that start at the last set by its anchors
  // (FutureLanguages::frontier_by_anchors), and that set ends here, those threads are one at
  // the start of each lexeme the set expects, and their descents together are a function of
  // its anchors: kept as one, under one key, so that they take one probe and one store, not
  // one a lexeme (their keys would recur together anyway). Past the set's end, which threads
  // are left there, and in which states, depends on the bytes read since.
  // A decode's descents by future, where they pay (see GroupCache::future_descents_mode): the
  // prewarm stores them, a decode probes them and stores those it walks a second time.
  const bool by_future_descents =
      thread_futures && (prewarming || cache.decode_uses_future_descents());
  const uint32_t last = chart_.num_sets() - 1;
  const bool joint_at_last = by_future_descents && frontier_ && rt.futures->frontier_by_anchors();
  const MaskKey joint_key =
      joint_at_last ? MaskKey{mix64(chart_.anchors_hash[2 * last] ^ 0x3c6ef372fe94f82bull),
                              chart_.anchors_hash[2 * last + 1] + 0xa54ff53a5f1d36f1ull}
                    : MaskKey{0, 0};
  bool joint_found = false;
  bool joint_walked = false;                      // some thread at the last set missed its descent
  // Their descents' parts, found or walked.
  std::vector<PartRef>& joint_parts = buffers.joint_parts;
  joint_parts.clear();
  std::unique_lock<std::mutex> lock(cache.walk_mutex);
  const uint64_t generation = cache.walk_generation;
  // Probes of a table with nothing in it yet (a decode without a prewarm, whose first walks
  // are not stored) judge nothing.
  const bool judging = !prewarming && cache.future_descents.size() > 0;
  size_t future_probes = 0;
  if (joint_at_last && !prewarming) {
    ++future_probes;
    if (const GroupCache::PackedDescent* const* found = cache.future_descents.find(joint_key)) {
      add_descent(**found);
      *dependency = -1;
      cache.hits_future_descents.fetch_add(1, std::memory_order_relaxed);
      joint_found = true;
    }
  }
  for (size_t thread = 0; thread < threads_.size(); ++thread) {
    const Thread& th = threads_[thread];
    if (!rt.state_has_exits[th.state]) continue;  // its group's children are empty
    // Only its address, which the walks key by: its fields are a cold line of their own.
    const ExitGroup& top = top_group(rt, th.state);
    const bool at_last = joint_at_last && th.origin == last;
    if (at_last && joint_found) continue;
    // Tagged apart from the future key's other uses of the same part.
    const MaskKey future_key =
        thread_futures ? MaskKey{mix64(thread_futures[thread].first ^ 0x5be0cd19137e2179ull),
                                 thread_futures[thread].second}
                       : MaskKey{0, 0};
    const uint32_t lexeme = rt.lexeme_base() + rt.dfa_lexeme[th.state];
    // A thread's whole descent is a function of its group, its lexeme and the sets it read:
    // kept by H_d of its origin for the smallest d that covers them, as walks by sets are, so
    // that where the neighbourhood recurs the descent is one probe.
    // By its future first: one probe, where the depths take one each. Not in the prewarm,
    // whose descents collect the completions it then walks at every kernel it built (one
    // skipped there left the C-like decode two local walks to compute).
    if (by_future_descents && !prewarming && !at_last) {
      ++future_probes;
      if (const GroupCache::PackedDescent* const* found = cache.future_descents.find(future_key)) {
        add_descent(**found);
        // Which of this chart's sets the descent would read is not known: no depth key.
        *dependency = -1;
        cache.hits_future_descents.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
    }
    const uint32_t stored = by_depth ? top.descent_depths.load(std::memory_order_relaxed) : 0u;
    bool hit = false;
    if (stored != 0) {
      // Any depth that holds this neighbourhood's descent is an exact answer, so the depth at
      // which this group's descents were last found or stored is asked first: a thread's kind
      // tends to need the same reach, and each probe is a miss in a table of megabytes.
      const uint32_t hint = top.descent_hint.load(std::memory_order_relaxed);
      auto found_at = [&](uint32_t d) {
        const GroupCache::PackedDescent* const* found =
            cache.descents.find(walk_key(top, lexeme, d, chart_.depth_hash_of(th.origin, d)));
        if (!found) return false;
        add_descent(**found);
        if (at_last) {
          joint_parts.insert(joint_parts.end(), (*found)->parts(),
                             (*found)->parts() + (*found)->num_parts);
        }
        if (*dependency >= 0) *dependency = std::max<int>(*dependency, static_cast<int>(d));
        if (d != hint) top.descent_hint.store(d, std::memory_order_relaxed);
        // Kept by its future too, for neighbourhoods it has not been seen in (no copy: the
        // tables share the block, and are cleared together).
        if (by_future_descents && !at_last && cache.future_descents.emplace(future_key, *found)) {
          cache.walk_bytes += 32;
        }
        return true;
      };
      // Then outwards from it, one step deeper before one shallower: where a group's threads
      // nest deeper than the prewarm's, its shallow depths hold descents of shallow nestings that
      // never match, and the depth that does is next to the last one (JSON: a number's descent
      // found at 7, 8 or 9 after a hint of 8, where ascending order probed 1-7 first, 6 probes a
      // thread at the slowest fills that walked nothing).
      const uint32_t from = hint != 0 ? hint : 1;
      for (uint32_t step = 0; step <= 2 * Chart::kDepthHashes && !hit; ++step) {
        const uint32_t d = step % 2 == 0 ? from + step / 2 : from - (step + 1) / 2;
        if (d >= 1 && d <= Chart::kDepthHashes && ((stored >> d) & 1u)) hit = found_at(d);
      }
    }
    if (hit) continue;
    // Walked below, together with the other threads that missed.
    if (num_walkers == walkers.size()) walkers.emplace_back();
    DescentWalker& walker = walkers[num_walkers++];
    walker.thread = static_cast<uint32_t>(thread);
    walker.top = &top;
    walker.lexeme = lexeme;
    walker.future_key = future_key;
    walker.reads_known = true;
    walker.at_last = at_last;
    joint_walked = joint_walked || at_last;
    walker.path_hops = 0;
    walker.pending = false;
    walker.viewed = false;
    walker.parts.clear();
    walker.reads.clear();
    walker.work.assign(1, {&top, lexeme, th.origin, 0});
    __builtin_prefetch(&chart_.leo_begin[th.origin]);
    __builtin_prefetch(chart_.depth_hash_of(th.origin, 1));
    __builtin_prefetch(&chart_.wait_begin[th.origin]);
  }
  if (judging) cache.judge_future_descents(future_probes);
  GRAMKILN_TRACE_STAGE(kDescentProbes);
  GRAMKILN_TRACE_COUNT(kThreads, threads_.size());
  // The walking threads' descents, one node of each in turn. A descent is a chain of dependent
  // misses (a set's chart lines, then the local walk its kernel keys, then the sets it goes
  // on at); taking the threads in turn, with each step's next lines asked for ahead, lets the
  // misses of several chains overlap instead of following one another. A node takes two
  // turns: the first reads its set's lines and asks for its local walk's slot, the second
  // reads the slot and asks for the lines of the sets it goes on at (three where the local
  // walk is a block of its own, asked for at the second and read at the third).
  done.clear();
  size_t nodes_walked = 0;
  // Each round takes a turn of every walker still walking; those that finished are dropped at
  // the round's start, so a long descent's later rounds do not pass over the short ones.
  std::vector<uint32_t>& active = buffers.active;
  active.resize(num_walkers);
  for (size_t k = 0; k < num_walkers; ++k) active[k] = static_cast<uint32_t>(k);
  for (;;) {
    size_t still = 0;
    for (const uint32_t k : active) {
      if (!walkers[k].finished()) active[still++] = k;
    }
    active.resize(still);
    if (still == 0) break;
    for (const uint32_t k : active) {
      DescentWalker& w = walkers[k];
      const uint32_t owner = k;
      if (w.pending) {
        const auto [group, symbol, set, hops] = w.node;
        // Everything the completion does at `set` in one lookup (see compute_local_walk), then
        // where it goes on: at the origins of the kernel items it completes. A walk too large
        // for its slot is a block of its own, another cold miss: asked for here, read at the
        // walker's next turn.
        GroupCache::LocalWalkView& local = w.view;
        if (!w.viewed) {
          if (!cache.local_walks.find(w.local_key, &local)) {
            lock.unlock();
            const bool computed =
                compute_local_walk(rt, sc, chart_, *group, symbol, set, w.local_key, &local);
            lock.lock();
            if (cache.walk_generation != generation) return false;
            if (!computed) return !sc.item_walk_unkept;
          } else if (local.block) {
            __builtin_prefetch(local.block);
            __builtin_prefetch(reinterpret_cast<const char*>(local.block) + 64);
            w.viewed = true;
            continue;
          }
        }
        w.viewed = false;
        w.pending = false;
        // One at a time: most local walks have one part or none, where a range insert's set-up
        // costs more than the copy.
        const PartRef* local_parts = local.parts();
        for (uint32_t p = 0; p < local.num_parts; ++p) w.parts.push_back(local_parts[p]);
        const GroupCache::Continuation* below = local.below();
        for (uint32_t b = 0; b < local.num_below; ++b) {
          const GroupCache::Continuation& next = below[b];
          const uint32_t waits_for = rt.dotted_next[next.dotted];
          for_waiting(chart_, set, waits_for, [&](const Item waiting) {
            if (waiting.dotted == next.dotted && waiting.origin != set) {
              w.work.emplace_back(next.group, next.symbol, waiting.origin, hops + 1);
              // The chart lines of its set are read at its first turn.
              const size_t at = waiting.origin;
              __builtin_prefetch(&chart_.leo_begin[at]);
              __builtin_prefetch(chart_.depth_hash_of(static_cast<uint32_t>(at), 1));
              __builtin_prefetch(&chart_.wait_begin[at]);
            }
          });
        }
        continue;
      }
      while (!w.work.empty()) {
        const auto [group, symbol, set, hops] = w.work.back();
        w.work.pop_back();
        if (!done.insert(group, symbol, set, owner)) continue;
        // A deterministic chain of completions (Chart::leo) ends in one complete item: the items
        // on the way go on with nothing, so the walk goes on where the chain ends. Short chains
        // are followed set by set, so that their reads are known (see depth_needed).
        if (symbol < rt.num_nonterminals) {
          const LeoItem* leo = find_leo(chart_, set, symbol);
          if (leo && leo->hops >= Chart::kDepthHashes) {
            w.reads_known = false;
            w.work.emplace_back(group, rt.prod_lhs[rt.dotted_prod[leo->dotted]], leo->origin,
                                hops + leo->hops);
            continue;
          }
        }
        if (depths_needed) {
          w.reads.push_back(set);
          w.path_hops = std::max(w.path_hops, hops);
        }
        __builtin_prefetch(chart_.waits.data() + chart_.wait_begin[set]);
        __builtin_prefetch(chart_.items.data() + chart_.set_begin[set]);
        w.node = {group, symbol, set, hops};
        ++nodes_walked;
        w.local_key = local_walk_key(*group, symbol, kernel_signature(chart_, set));
        cache.local_walks.prefetch(w.local_key);
        w.pending = true;
        break;
      }
    }
  }
  GRAMKILN_TRACE_STAGE(kWalks);
  GRAMKILN_TRACE_COUNT(kWalkers, num_walkers);
  GRAMKILN_TRACE_COUNT(kNodes, nodes_walked);
  if (num_walkers) {
    cache.descents_walked.fetch_add(num_walkers, std::memory_order_relaxed);
    cache.descent_nodes_walked.fetch_add(nodes_walked, std::memory_order_relaxed);
  }
  // Each walked descent is kept by H_d of its origin and by its thread's future. The depths
  // first, for every walker, and the slots of both keys asked for ahead of the stores, which
  // are otherwise a few dependent misses each (by future only where the decode stores by
  // future: where the decode judged those idle, each was a miss for nothing).
  for (size_t k = 0; k < num_walkers; ++k) {
    DescentWalker& w = walkers[k];
    if (by_future_descents && !w.at_last) cache.future_descents.prefetch(w.future_key);
    for (const PartRef& part : w.parts) add_part(part);
  }
  if (num_walkers) lock.unlock();  // the depths read only this matcher's chart
  for (size_t k = 0; k < num_walkers; ++k) {
    DescentWalker& w = walkers[k];
    w.depth = 0;
    if (!w.reads_known || !depths_needed) continue;
    std::sort(w.reads.begin(), w.reads.end());
    w.reads.erase(std::unique(w.reads.begin(), w.reads.end()), w.reads.end());
    w.depth = depth_needed(chart_view, sc, threads_[w.thread].origin, w.reads, w.path_hops);
  }
  GRAMKILN_TRACE_STAGE(kDepths);
  if (num_walkers) {
    lock.lock();
    if (cache.walk_generation != generation) return false;
  }
  for (size_t k = 0; k < num_walkers; ++k) {
    DescentWalker& w = walkers[k];
    if (w.depth && by_depth) {
      w.depth_key = walk_key(*w.top, w.lexeme, w.depth,
                             chart_.depth_hash_of(threads_[w.thread].origin, w.depth));
      cache.descents.prefetch(w.depth_key);
    }
  }
  for (size_t k = 0; k < num_walkers; ++k) {
    DescentWalker& w = walkers[k];
    const uint32_t depth = w.depth;
    if (depth == 0) *dependency = -1;
    if (*dependency >= 0) *dependency = std::max<int>(*dependency, static_cast<int>(depth));
    // Kept by depth, and by the thread's future where it is not one of the last set's (those
    // are kept as one, below); in a decode, only where it was walked before (see
    // DescentDoorkeeper).
    const bool store_by_future = by_future_descents && !w.at_last &&
                                 (prewarming || cache.descent_doorkeeper.admit(w.future_key));
    const bool store_by_depth =
        depth && by_depth && (prewarming || cache.descent_doorkeeper.admit(w.depth_key));
    if (!store_by_depth && !store_by_future) continue;
    std::vector<PartRef>& thread_parts = w.parts;
    sort_distinct_parts(thread_parts);
    const size_t bytes = packed_descent_bytes(thread_parts);
    // A clear here would free what the parts point to: the fill goes back to walks by sets.
    make_walk_room_locked(cache, 64 + bytes);
    if (cache.walk_generation != generation) return false;
    const MaskKey key = store_by_depth ? w.depth_key : MaskKey{0, 0};
    const GroupCache::PackedDescent* const* stored_by_depth =
        store_by_depth ? cache.descents.find(key) : nullptr;
    const GroupCache::PackedDescent* descent = stored_by_depth ? *stored_by_depth : nullptr;
    if (!descent) {
      descent = pack_descent(cache.walk_arena, thread_parts);
      cache.walk_bytes += 64 + bytes;
      if (store_by_depth) {
        cache.descents.emplace(key, descent);
        w.top->descent_depths.fetch_or(1u << depth, std::memory_order_relaxed);
        w.top->descent_hint.store(depth, std::memory_order_relaxed);
      }
    }
    if (store_by_future && cache.future_descents.emplace(w.future_key, descent)) {
      cache.walk_bytes += 32;
    }
  }
  // The descents of the threads at the last set, as one (a hit above took all of them).
  if (joint_walked && (prewarming || cache.descent_doorkeeper.admit(joint_key))) {
    // Distinct by address, in the order met (a block's parts need no order): a sort of the
    // union, up to a hundred parts, was a sixth of the stores of a computed C-like fill.
    StepSet& joint_seen = buffers.joint_seen;
    joint_seen.clear();
    size_t kept = 0;
    for (const PartRef& part : joint_parts) {
      if (joint_seen.insert(part.result, 0, 0)) joint_parts[kept++] = part;
    }
    joint_parts.resize(kept);
    for (size_t k = 0; k < num_walkers; ++k) {
      const DescentWalker& w = walkers[k];
      if (!w.at_last) continue;
      for (const PartRef& part : w.parts) {
        if (joint_seen.insert(part.result, 0, 0)) joint_parts.push_back(part);
      }
    }
    const size_t bytes = packed_descent_bytes(joint_parts);
    make_walk_room_locked(cache, 64 + bytes);
    if (cache.walk_generation != generation) return false;
    const GroupCache::PackedDescent* packed = pack_descent(cache.walk_arena, joint_parts);
    cache.walk_bytes += 64 + bytes;
    if (cache.future_descents.emplace(joint_key, packed)) cache.walk_bytes += 32;
  }
  sc.item_parts_generation = generation;
  GRAMKILN_TRACE_STAGE(kDescentStores);
  GRAMKILN_TRACE_COUNT(kParts, sc.item_parts.size());
  return true;
}

namespace {

// The sets a search step appended to a chart past its starting size (see search_text_tokens):
// a configuration reached along one byte path, to be put back on the same starting chart.
struct ChartTail {
  std::vector<Item> items;
  std::vector<uint32_t> set_begin, wait_begin, future_begin, future_symbol, future_chain;
  std::vector<uint64_t> hash_lo, hash_hi, waits, depth_hash, future_hash, anchors_hash,
      anchors_shape;
  std::vector<uint32_t> leo_begin;
  std::vector<LeoItem> leo;
};

// Call f(tail field, chart field, where the tail starts in the chart field) for every field
// of a chart past its first `sets` sets: taking and putting back share this one list, so a
// field cannot be taken and then forgotten.
template <typename Tail, typename ChartLike, typename F>
void for_each_tail_field(Tail& tail, ChartLike& chart, uint32_t sets, F&& f) {
  const size_t s = sets;
  f(tail.items, chart.items, chart.set_begin[s]);
  f(tail.set_begin, chart.set_begin, s + 1);
  f(tail.wait_begin, chart.wait_begin, s + 1);
  f(tail.future_begin, chart.future_begin, s + 1);
  f(tail.future_symbol, chart.future_symbol, chart.future_begin[s]);
  f(tail.future_chain, chart.future_chain, chart.future_begin[s]);
  f(tail.hash_lo, chart.hash_lo, s);
  f(tail.hash_hi, chart.hash_hi, s);
  f(tail.waits, chart.waits, chart.wait_begin[s]);
  f(tail.depth_hash, chart.depth_hash, s * Chart::kDepthHashes * 2);
  f(tail.future_hash, chart.future_hash, static_cast<size_t>(chart.future_begin[s]) * 2);
  f(tail.anchors_hash, chart.anchors_hash, s * 2);
  f(tail.anchors_shape, chart.anchors_shape, s * 2);
  f(tail.leo_begin, chart.leo_begin, s + 1);
  f(tail.leo, chart.leo, chart.leo_begin[s]);
}

// `chart` past its first `sets` sets.
void take_tail(const Chart& chart, uint32_t sets, ChartTail& tail) {
  for_each_tail_field(tail, chart, sets, [](auto& to, const auto& from, size_t base) {
    to.assign(from.begin() + static_cast<std::ptrdiff_t>(base), from.end());
  });
}

struct ConfigurationKeyHash {
  size_t operator()(const std::pair<uint64_t, uint64_t>& key) const {
    return static_cast<size_t>(key.first ^ (key.second * 0x9e3779b97f4a7c15ull));
  }
};

// Append `tail` to a chart of exactly the `sets` sets it was taken past.
void put_tail(const ChartTail& tail, uint32_t sets, Chart& chart) {
  for_each_tail_field(tail, chart, sets, [](const auto& from, auto& to, size_t) {
    to.insert(to.end(), from.begin(), from.end());
  });
}

}  // namespace

void Matcher::search_text_tokens(uint32_t* words) const {
  // Breadth-first over the trie, one byte step at a time as accept_token steps a token: all
  // lexeme segmentations of a byte path share one Earley set per position, so the work is
  // polynomial in the token length where the exit walks' is not. Trie nodes at one depth whose
  // paths lead to configurations with equal structural keys (equal futures, as in the mask
  // cache) are stepped together: under a lexeme that takes any byte, every path of a depth
  // reaches one configuration, and a level costs one step per byte, not one per trie node.
  // Only paths the matcher can still follow are entered.
  const Runtime& rt = *runtime_;
  Matcher probe(*this, ConfigurationCopy{});
  // Its sets are never part of a cache key: only the whole-stack hash, which the
  // configuration key and merge_equivalent_threads read, is needed (depth hashes and anchors
  // were ~15% of a search).
  probe.chart_.depth_hashed = false;
  probe.chart_.anchored = false;
  // A chart that merges items by their futures (ambiguous repeats) keeps doing so in the copy,
  // whose sets otherwise grow as the matcher's did; the others need no anchors here.
  probe.chart_.future_mergeable = chart_.merge_anchored;
  const Snapshot start = probe.snapshot();
  struct Configuration {
    ChartTail tail;  // what the path appended to the chart
    std::vector<Thread> threads;
    bool frontier = false;
    std::vector<uint32_t> nodes;  // trie nodes with children reached in this configuration
  };
  std::vector<Configuration> level(1), next;
  level[0].threads = threads_;
  level[0].frontier = frontier_;
  level[0].nodes.assign(1, 0);
  std::unordered_map<std::pair<uint64_t, uint64_t>, size_t, ConfigurationKeyHash> merged;
  std::vector<std::vector<uint32_t>> by_byte(256);
  std::vector<uint8_t> bytes;
  while (!level.empty()) {
    next.clear();
    merged.clear();
    for (Configuration& from : level) {
      bytes.clear();
      for (const uint32_t node : from.nodes) {
        for (uint32_t child = node + 1; child < rt.trie_end[node]; child = rt.trie_end[child]) {
          std::vector<uint32_t>& same = by_byte[rt.trie_byte[child]];
          if (same.empty()) bytes.push_back(rt.trie_byte[child]);
          same.push_back(child);
        }
      }
      probe.truncate_chart(start);
      put_tail(from.tail, start.num_sets, probe.chart_);
      probe.threads_ = std::move(from.threads);
      probe.frontier_ = from.frontier;
      const Snapshot here = probe.snapshot();
      for (const uint8_t byte : bytes) {
        std::vector<uint32_t>& children = by_byte[byte];
        probe.restore_copy(here);
        if (probe.step_byte(byte, nullptr)) {
          size_t inner = 0;
          for (const uint32_t child : children) {
            for (uint32_t t = rt.trie_tok_offsets[child]; t < rt.trie_tok_offsets[child + 1]; ++t) {
              set_bit(words, rt.trie_tokens[t]);
            }
            if (rt.trie_end[child] > child + 1) children[inner++] = child;
          }
          children.resize(inner);
          if (!children.empty()) {
            const auto [found, added] = merged.emplace(probe.whole_mask_key(), next.size());
            if (added) {
              next.emplace_back();
              Configuration& to = next.back();
              take_tail(probe.chart_, start.num_sets, to.tail);
              to.threads = probe.threads_;
              to.frontier = probe.frontier_;
              to.nodes.swap(children);
            } else {
              std::vector<uint32_t>& nodes = next[found->second].nodes;
              nodes.insert(nodes.end(), children.begin(), children.end());
            }
          }
        }
        children.clear();
      }
    }
    level.swap(next);
  }
}

std::vector<uint32_t> Matcher::lexemes_expected_here() const {
  std::vector<uint32_t> out;
  if (!frontier_ || terminated_) return out;
  ChartView view{&chart_, nullptr, chart_.num_sets()};
  expected_lexemes(*runtime_, view, chart_.num_sets() - 1, out);
  return out;
}

std::string Matcher::jump_forward_bytes(uint32_t limit) const {
  const Runtime& rt = *runtime_;
  Matcher probe(*this);
  probe.history_.clear();
  std::string out;
  while (out.size() < limit && !probe.terminated_ && !probe.accepting_now()) {
    if (probe.frontier_) {
      bool token_choice = false;
      const uint32_t last = probe.chart_.num_sets() - 1;
      for (uint32_t j = probe.chart_.set_begin[last]; j < probe.chart_.set_begin[last + 1]; ++j) {
        const uint32_t next = rt.dotted_next[probe.chart_.items[j].dotted];
        token_choice = token_choice || (next != kComplete && next >= rt.tokenset_base());
      }
      if (token_choice) break;
    }
    int only = -1;
    bool several = false;
    for (const Thread& th : probe.threads_) {
      const int32_t* row = rt.dfa_row(th.state);
      for (int b = 0; b < 256 && !several; ++b) {
        if (row[rt.dfa_byte_class[b]] < 0) continue;
        if (only < 0) {
          only = b;
        } else if (only != b) {
          several = true;
        }
      }
      if (several) break;
    }
    if (only < 0 || several) break;
    if (!probe.step_byte(static_cast<uint8_t>(only), nullptr)) break;
    out.push_back(static_cast<char>(only));
  }
  return out;
}

}  // namespace gramkiln
