// The runtime blob: building it from a grammar and a vocabulary index, and loading it with full
// validation. Layout (docs/artifact-format.md, "Runtime tables"): magic, version, then a fixed
// sequence of arrays, each a u32 element count, a u32 element width (1, 2 or 4) and the
// little-endian elements padded to 4 bytes.
//
// On disk the tables are compact (DFA columns by byte class, per-state tables once per class of
// states no token can tell apart, sparse exit lists, inside sets as id lists when smaller);
// the loader expands them into the dense in-memory tables of `Runtime` that the matcher reads.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <iterator>
#include <mutex>
#include <numeric>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime_internal.hpp"

namespace gramkiln {

// Token trie in depth-first order: node 0 is the root; a node's descendants are the nodes
// (n, end[n]). Children appear in increasing byte order, so the layout is deterministic.
struct TokenTrie {
  std::vector<uint8_t> byte{0};
  std::vector<uint32_t> end{0};
  std::vector<uint32_t> tok_offsets{0};
  std::vector<uint32_t> tokens;
  std::vector<uint16_t> depth;  // root 0
};

// The walk of one first-byte subtree of the trie in one DFA state: the tokens it reaches, as
// ranges [first, second) of positions in trie.tokens (the tokens of a run of consecutive trie
// nodes are contiguous, so a wide walk is a handful of ranges), and the nodes with children
// where the lexeme can end (ascending).
struct WalkPart {
  std::vector<std::pair<uint32_t, uint32_t>> token_ranges;
  uint64_t num_tokens = 0;
  std::vector<uint32_t> exit_nodes;
  size_t bytes() const { return 8 * token_ranges.size() + 4 * exit_nodes.size() + 64; }
};

// Everything the builder needs from a vocabulary, computed once per vocabulary and shared by
// every compile (immutable after construction, so any number of threads may read it).
class VocabIndex {
 public:
  uint32_t vocab_size = 0, num_tokens = 0, words = 0;
  uint32_t max_text_length = 0;  // longest text token: how far a walk can read past a state
  uint64_t text_count = 0;
  std::vector<uint32_t> text_bits;
  TokenTrie trie;
  std::string stored_trie;  // the trie arrays exactly as every blob stores them
  // The loader's decoded form of this vocabulary's trie, kept alive with the index so that
  // loading any blob built from it (starting with the compile's own check) skips decoding.
  std::shared_ptr<const TrieTables> decoded;
  // Walks of wide first-byte subtrees by (first-byte node, the language of the state entered,
  // written canonically): the same string and number lexemes recur across grammars, and their
  // walks cover most of the trie. A walk depends on nothing else, so a hit is exactly the walk
  // it replaces and blobs stay byte-identical. Bounded by bytes; past the bound, no new entries.
  mutable std::mutex walk_mutex;
  mutable std::unordered_map<std::string, std::shared_ptr<const WalkPart>> walk_cache;
  mutable size_t walk_cache_bytes = 0;
  // For nodes with a large subtree, the bytes found anywhere below them (4 x 64 bits, at
  // subtree_bytes[4 * subtree_summary[n]]; kNoSummary for the other nodes). A walk in a state
  // that loops on all those bytes and does not accept takes the whole subtree at once.
  std::vector<uint32_t> subtree_summary;
  std::vector<uint64_t> subtree_bytes;
  std::vector<uint16_t> subtree_height;  // by summary: how many bytes below the node it reaches
  // By byte: how many bytes below its depth-1 node the deepest token reaches (how far a walk
  // of that subtree reads past the state it enters).
  uint16_t root_height[256] = {};
};

namespace {

// Mask walks recurse once per lexeme boundary inside a token, so token length bounds the
// recursion depth; 4096 bytes keeps it far inside any thread's stack (real vocabularies stay
// under a few hundred bytes per token).
constexpr uint32_t kMaxTokenLength = 4096;
constexpr uint32_t kMaxStoredToken = 1u << 16;  // special tokens are never walked
constexpr uint32_t kMetaSize = 10;
// Inside-set encodings on disk (see encode_inside_set).
constexpr uint8_t kInsideDense = 0, kInsideIds = 1, kInsideTextExcept = 2, kInsideDelta = 3;
// Walk cache (VocabIndex::walk_cache): states with at least this many live bytes (the wide
// walks: strings, numbers) and at most this many reachable states (so the key stays small and
// quick to write) are looked up; the cache stops growing at kWalkCacheBytes.
constexpr uint32_t kCachedWalkMinLiveBytes = 16;
constexpr uint32_t kCachedWalkMaxStates = 32;
constexpr size_t kWalkCacheBytes = size_t{64} << 20;
// Subtree summaries (VocabIndex::subtree_summary) for nodes with at least this many nodes below.
constexpr uint32_t kSummarisedSubtree = 8;
constexpr uint32_t kNoSummary = 0xffffffffu;
// Uniform runs (see `run_masks` in build_runtime_blob) are followed at most this many bytes.
constexpr uint32_t kMaxUniformRun = 24;

// Portable bit count (the generic x86-64 target has no POPCNT, and the builtin then calls a
// slow library routine).
inline uint32_t popcount32(uint32_t x) {
  x = x - ((x >> 1) & 0x55555555u);
  x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
  return (((x + (x >> 4)) & 0x0f0f0f0fu) * 0x01010101u) >> 24;
}

class BlobWriter {
 public:
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  template <typename T>
  void array(const std::vector<T>& values) {
    static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4,
                  "arrays hold 1-, 2- or 4-byte elements");
    u32(static_cast<uint32_t>(values.size()));
    u32(sizeof(T));
    const size_t at = out_.size();
    out_.resize(at + values.size() * sizeof(T));
    // Little-endian host (checked by the loader and asserted at build): a bulk copy.
    if (!values.empty()) std::memcpy(&out_[at], values.data(), values.size() * sizeof(T));
    while (out_.size() % 4) out_.push_back('\0');
  }
  void raw(const std::string& bytes) { out_ += bytes; }
  void reserve(size_t bytes) { out_.reserve(bytes); }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// A validated array inside the blob, read in place (no copy).
struct ArrayView {
  const uint8_t* data = nullptr;
  uint32_t count = 0;
  uint32_t width = 0;
  uint32_t operator[](size_t i) const {
    if (width == 1) return data[i];
    if (width == 2) {
      uint16_t v;
      std::memcpy(&v, data + 2 * i, 2);
      return v;
    }
    uint32_t v;
    std::memcpy(&v, data + 4 * i, 4);
    return v;
  }
  template <typename T>
  void copy_to(std::vector<T>& out) const {
    out.resize(count);
    if (count) std::memcpy(out.data(), data, static_cast<size_t>(count) * sizeof(T));
  }
};

class BlobReader {
 public:
  explicit BlobReader(std::string_view data) : data_(data) {}
  uint32_t u32() {
    if (pos_ + 4 > data_.size()) throw FormatError("runtime tables are truncated");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      v |= static_cast<uint32_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
    }
    pos_ += 4;
    return v;
  }
  // The next array, whose element width must be one of the bits of `widths` (1, 2, 4).
  ArrayView view(const char* what, uint32_t widths) {
    ArrayView out;
    out.count = u32();
    out.width = u32();
    if ((out.width != 1 && out.width != 2 && out.width != 4) || !(widths & out.width)) {
      throw FormatError(std::string("bad element width in ") + what);
    }
    const uint64_t bytes = static_cast<uint64_t>(out.count) * out.width;
    if (bytes > data_.size() - pos_) throw FormatError(std::string("truncated array ") + what);
    out.data = reinterpret_cast<const uint8_t*>(data_.data()) + pos_;
    pos_ += bytes;
    while (pos_ % 4) {
      if (pos_ >= data_.size()) throw FormatError("runtime tables are truncated");
      ++pos_;
    }
    return out;
  }
  template <typename T>
  void array(std::vector<T>& out, const char* what) {
    view(what, sizeof(T)).copy_to(out);
  }
  bool at_end() const { return pos_ == data_.size(); }
  size_t position() const { return pos_; }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

// Takes a C string so that passing checks (millions per load) never build a std::string.
void require(bool ok, const char* why) {
  if (!ok) throw FormatError(why);
}

bool little_endian_host() {
  const uint32_t probe = 1;
  uint8_t first;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

TokenTrie build_trie(const VocabSpec& vocab) {
  std::vector<uint32_t> ids;
  for (uint32_t id = 0; id < vocab.tokens.size(); ++id) {
    if (vocab.is_text[id] && !vocab.tokens[id].empty()) ids.push_back(id);
  }
  std::stable_sort(ids.begin(), ids.end(),
                   [&](uint32_t a, uint32_t b) { return vocab.tokens[a] < vocab.tokens[b]; });
  TokenTrie trie;
  std::vector<uint32_t> path{0};  // node ids along the current prefix; path[d] at depth d
  std::string prefix;
  auto close_to = [&](size_t depth) {
    while (path.size() > depth + 1) {
      trie.end[path.back()] = static_cast<uint32_t>(trie.byte.size());
      path.pop_back();
      prefix.pop_back();
    }
  };
  std::vector<uint32_t> node_of_token;  // parallel to ids
  node_of_token.reserve(ids.size());
  for (uint32_t id : ids) {
    const std::string& t = vocab.tokens[id];
    size_t common = 0;
    while (common < prefix.size() && common < t.size() && prefix[common] == t[common]) ++common;
    close_to(common);
    for (size_t d = common; d < t.size(); ++d) {
      uint32_t node = static_cast<uint32_t>(trie.byte.size());
      trie.byte.push_back(static_cast<uint8_t>(t[d]));
      trie.end.push_back(0);
      path.push_back(node);
      prefix.push_back(t[d]);
    }
    node_of_token.push_back(path.back());
  }
  close_to(0);
  trie.end[0] = static_cast<uint32_t>(trie.byte.size());
  // Tokens are sorted by bytes, so the tokens of one node are adjacent and nodes ascend.
  trie.tok_offsets.assign(trie.byte.size() + 1, 0);
  for (uint32_t node : node_of_token) trie.tok_offsets[node + 1]++;
  std::partial_sum(trie.tok_offsets.begin(), trie.tok_offsets.end(), trie.tok_offsets.begin());
  trie.tokens = std::move(ids);
  trie.depth.assign(trie.byte.size(), 0);
  for (uint32_t n = 0; n < trie.byte.size(); ++n) {
    for (uint32_t c = n + 1; c < trie.end[n]; c = trie.end[c]) {
      trie.depth[c] = static_cast<uint16_t>(trie.depth[n] + 1);
    }
  }
  return trie;
}

// The trie as blobs store it: bytes, depths (1 byte each when every token is under 256
// bytes), a bitmap of the nodes that end a token, the first token of each such node in node
// order, and the rare extra (node, id) pairs of nodes shared by several ids. The loader
// rebuilds subtree ranges, token offsets and token bytes from these in one pass.
std::string store_trie(const TokenTrie& trie) {
  const uint32_t num_nodes = static_cast<uint32_t>(trie.byte.size());
  const std::vector<uint16_t>& depth = trie.depth;
  uint32_t max_depth = 0;
  std::vector<uint8_t> flags((num_nodes + 7) / 8, 0);
  std::vector<uint32_t> first_tokens, extra_tokens;
  for (uint32_t n = 0; n < num_nodes; ++n) {
    max_depth = std::max<uint32_t>(max_depth, depth[n]);
    for (uint32_t i = trie.tok_offsets[n]; i < trie.tok_offsets[n + 1]; ++i) {
      if (i == trie.tok_offsets[n]) {
        flags[n / 8] |= static_cast<uint8_t>(1u << (n % 8));
        first_tokens.push_back(trie.tokens[i]);
      } else {
        extra_tokens.push_back(n);
        extra_tokens.push_back(trie.tokens[i]);
      }
    }
  }
  BlobWriter w;
  w.array(trie.byte);
  if (max_depth < 256) {
    w.array(std::vector<uint8_t>(depth.begin(), depth.end()));
  } else {
    w.array(depth);
  }
  w.array(flags);
  w.array(first_tokens);
  w.array(extra_tokens);
  return w.take();
}

// Bytes that every DFA state treats alike (identical columns of the transition table), so
// tables can be stored and compared per byte class. Classes are numbered by first byte.
uint32_t byte_classes(const std::vector<int32_t>& table, uint32_t num_states,
                      std::vector<uint8_t>& class_of) {
  std::vector<uint64_t> column_hash(256, 0x9e3779b97f4a7c15ull);
  for (uint32_t s = 0; s < num_states; ++s) {
    const int32_t* row = &table[static_cast<size_t>(s) * 256];
    for (uint32_t b = 0; b < 256; ++b) {
      column_hash[b] = mix64(column_hash[b] ^ static_cast<uint32_t>(row[b]));
    }
  }
  class_of.assign(256, 0);
  std::vector<uint32_t> representative;  // first byte of each class
  for (uint32_t b = 0; b < 256; ++b) {
    bool found = false;
    for (uint32_t c = 0; c < representative.size() && !found; ++c) {
      const uint32_t r = representative[c];
      if (column_hash[r] != column_hash[b]) continue;
      bool same = true;
      for (uint32_t s = 0; s < num_states && same; ++s) {
        same = table[static_cast<size_t>(s) * 256 + r] == table[static_cast<size_t>(s) * 256 + b];
      }
      if (same) {
        class_of[b] = static_cast<uint8_t>(c);
        found = true;
      }
    }
    if (!found) {
      class_of[b] = static_cast<uint8_t>(representative.size());
      representative.push_back(b);
    }
  }
  return static_cast<uint32_t>(representative.size());
}

// Classes of DFA states (of any lexemes) that agree on acceptance and on the dead/alive status
// of every transition for every byte string of at most `depth` bytes: bounded Moore
// refinement. A token walk from a state reads at most `depth` bytes and looks only at those,
// so states of one class have identical inside sets and exit lists (exact). Classes are
// numbered by their first state, so the result is deterministic.
//
// Round r splits each class by the classes of its members' successors. Only states with a
// successor that changed class in the previous round ("dirty") can move: the others keep the
// signature they shared with their class, so each round costs the dirty states only (a long
// chain of string states advances one state per round instead of rescanning all states).
//
// `by_depth` receives the partition after every round, before the final numbering: entry
// d * n + s is the class of state s among states that agree on strings of at most d bytes, for
// d up to the returned `stable_depth` (later rounds change nothing).
uint32_t state_classes(const std::vector<int32_t>& class_table,
                       const std::vector<uint8_t>& accepting, uint32_t num_byte_classes,
                       uint32_t depth, std::vector<uint32_t>& class_of,
                       std::vector<uint32_t>& by_depth, uint32_t& stable_depth) {
  const uint32_t n = static_cast<uint32_t>(accepting.size());
  const uint32_t k = num_byte_classes;
  constexpr uint32_t kDead = 0xffffffffu;
  class_of.assign(n, 0);
  std::vector<std::vector<uint32_t>> members;
  {
    int32_t id_of_flag[2] = {-1, -1};
    for (uint32_t s = 0; s < n; ++s) {
      int32_t& id = id_of_flag[accepting[s] ? 1 : 0];
      if (id < 0) {
        id = static_cast<int32_t>(members.size());
        members.emplace_back();
      }
      class_of[s] = static_cast<uint32_t>(id);
      members[id].push_back(s);
    }
  }
  // Predecessors (each listed once per successor state), for finding the next dirty states.
  std::vector<uint32_t> pred_offsets(n + 1, 0), preds, stamp(n, kDead);
  for (uint32_t s = 0; s < n; ++s) {
    for (uint32_t c = 0; c < k; ++c) {
      const int32_t t = class_table[static_cast<size_t>(s) * k + c];
      if (t >= 0 && stamp[t] != s) {
        stamp[t] = s;
        pred_offsets[t + 1]++;
      }
    }
  }
  std::partial_sum(pred_offsets.begin(), pred_offsets.end(), pred_offsets.begin());
  preds.resize(pred_offsets[n]);
  std::fill(stamp.begin(), stamp.end(), kDead);
  {
    std::vector<uint32_t> fill(pred_offsets.begin(), pred_offsets.end() - 1);
    for (uint32_t s = 0; s < n; ++s) {
      for (uint32_t c = 0; c < k; ++c) {
        const int32_t t = class_table[static_cast<size_t>(s) * k + c];
        if (t >= 0 && stamp[t] != s) {
          stamp[t] = s;
          preds[fill[t]++] = s;
        }
      }
    }
  }
  auto signature = [&](uint32_t s, uint32_t* out) {
    uint64_t hash = 0x9e3779b97f4a7c15ull;
    for (uint32_t c = 0; c < k; ++c) {
      const int32_t t = class_table[static_cast<size_t>(s) * k + c];
      out[c] = t < 0 ? kDead : class_of[t];
      hash = mix64(hash ^ out[c]);
    }
    return hash;
  };
  std::vector<uint32_t> dirty(n), changed;
  std::iota(dirty.begin(), dirty.end(), 0u);
  std::vector<uint8_t> is_dirty(n, 1);
  std::vector<uint32_t> touched_round(n, kDead);  // by class: the last round that touched it
  std::vector<uint32_t> touched, keeper_sig(k), sigs;
  std::vector<uint64_t> hashes;
  std::vector<uint32_t> position(n);  // index of a dirty state in `dirty`
  std::vector<uint32_t> group_of, group_first;
  std::unordered_map<uint64_t, std::vector<uint32_t>> groups_by_hash;
  by_depth.assign(class_of.begin(), class_of.end());
  stable_depth = 0;
  for (uint32_t round = 0; round < depth && !dirty.empty(); ++round) {
    std::sort(dirty.begin(), dirty.end());
    sigs.resize(dirty.size() * static_cast<size_t>(k));
    hashes.resize(dirty.size());
    touched.clear();
    for (uint32_t i = 0; i < dirty.size(); ++i) {
      position[dirty[i]] = i;
      hashes[i] = signature(dirty[i], &sigs[static_cast<size_t>(i) * k]);
      const uint32_t x = class_of[dirty[i]];
      if (touched_round[x] != round) {
        touched_round[x] = round;
        touched.push_back(x);
      }
    }
    // Signatures are computed from this round's input partition before any class moves.
    std::vector<std::pair<uint32_t, uint32_t>> moves;  // (state, new class)
    std::sort(touched.begin(), touched.end());
    for (uint32_t x : touched) {
      uint32_t keeper = kDead;
      for (uint32_t m : members[x]) {
        if (!is_dirty[m]) {
          keeper = m;
          break;
        }
      }
      uint64_t keeper_hash = 0;
      if (keeper != kDead) keeper_hash = signature(keeper, keeper_sig.data());
      groups_by_hash.clear();
      group_first.clear();
      const bool x_taken = keeper != kDead;
      const size_t moves_begin = moves.size();
      for (uint32_t m : members[x]) {
        if (!is_dirty[m]) continue;
        const uint32_t i = position[m];
        const uint32_t* sig = &sigs[static_cast<size_t>(i) * k];
        if (keeper != kDead && hashes[i] == keeper_hash &&
            std::equal(sig, sig + k, keeper_sig.data())) {
          continue;  // same as the undisturbed members: stays in x
        }
        std::vector<uint32_t>& candidates = groups_by_hash[hashes[i]];
        uint32_t target = kDead;
        for (uint32_t g : candidates) {
          const uint32_t* other = &sigs[static_cast<size_t>(position[group_first[g]]) * k];
          if (hashes[position[group_first[g]]] == hashes[i] && std::equal(sig, sig + k, other)) {
            target = g;
            break;
          }
        }
        if (target == kDead) {
          target = static_cast<uint32_t>(group_first.size());
          group_first.push_back(m);
          candidates.push_back(target);
        }
        // The first group keeps x when no undisturbed member does; others get new ids.
        if (target == 0 && !x_taken) continue;
        moves.emplace_back(m, target);
      }
      // Translate group numbers into class ids for this class's moves.
      const uint32_t first_new = static_cast<uint32_t>(members.size());
      const uint32_t skip = x_taken ? 0 : 1;  // group 0 kept x
      for (uint32_t g = skip; g < group_first.size(); ++g) members.emplace_back();
      for (size_t i = moves_begin; i < moves.size(); ++i) {
        moves[i].second = first_new + moves[i].second - skip;
      }
    }
    changed.clear();
    for (const auto& [state, target] : moves) {
      members[target].push_back(state);
      class_of[state] = target;
      changed.push_back(state);
    }
    // Rebuild the member lists of the classes that lost states.
    for (uint32_t x : touched) {
      auto& list = members[x];
      list.erase(
          std::remove_if(list.begin(), list.end(), [&](uint32_t m) { return class_of[m] != x; }),
          list.end());
    }
    for (uint32_t s : dirty) is_dirty[s] = 0;
    if (changed.empty()) break;  // stable: no later round can split anything
    by_depth.insert(by_depth.end(), class_of.begin(), class_of.end());
    stable_depth = round + 1;
    dirty.clear();
    for (uint32_t t : changed) {
      for (uint32_t i = pred_offsets[t]; i < pred_offsets[t + 1]; ++i) {
        if (!is_dirty[preds[i]]) {
          is_dirty[preds[i]] = 1;
          dirty.push_back(preds[i]);
        }
      }
    }
  }
  // Number classes by first state.
  std::vector<uint32_t> renumber(members.size(), kDead);
  uint32_t count = 0;
  for (uint32_t s = 0; s < n; ++s) {
    uint32_t& id = renumber[class_of[s]];
    if (id == kDead) id = count++;
    class_of[s] = id;
  }
  return count;
}

// How many positions lie in exactly one of two ascending lists of disjoint ranges.
uint64_t ranges_symmetric_difference(const std::vector<std::pair<uint32_t, uint32_t>>& a,
                                     const std::vector<std::pair<uint32_t, uint32_t>>& b) {
  uint64_t size = 0, common = 0;
  for (const auto& [first, last] : a) size += last - first;
  for (const auto& [first, last] : b) size += last - first;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    const uint32_t low = std::max(a[i].first, b[j].first);
    const uint32_t high = std::min(a[i].second, b[j].second);
    if (low < high) common += high - low;
    if (a[i].second < b[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return size - 2 * common;
}

// An inside set on disk, in the smallest of four forms (ties go to the earlier one): dense
// words, the ascending ids it holds, the ascending text-token ids it lacks, or an earlier set
// (`base`, when given) with the ascending ids whose membership differs. Neighbouring states
// often differ in a few first bytes only, which makes the last form small. The caller knows
// how many tokens the set holds (`present`) and how many differ from the base (`differing`),
// so the choice needs no pass over the dense set.
void encode_inside_set(const std::vector<uint32_t>& bits, const std::vector<uint32_t>* base,
                       uint32_t base_id, uint64_t present, uint64_t differing,
                       const VocabIndex& v, std::vector<uint8_t>& kinds,
                       std::vector<uint32_t>& offsets, std::vector<uint32_t>& data) {
  if (base == nullptr) differing = ~uint64_t{0};
  const uint64_t missing = v.text_count - present;  // inside sets only hold text tokens
  const uint64_t delta = differing == ~uint64_t{0} ? differing : differing + 1;
  auto append_ids = [&](auto word_at) {
    for (uint32_t w = 0; w < v.words; ++w) {
      for (uint32_t word = word_at(w); word; word &= word - 1) {
        data.push_back(w * 32 + static_cast<uint32_t>(__builtin_ctz(word)));
      }
    }
  };
  const uint64_t best = std::min({static_cast<uint64_t>(v.words), present, missing, delta});
  if (best == v.words) {
    kinds.push_back(kInsideDense);
    data.insert(data.end(), bits.begin(), bits.end());
  } else if (best == present) {
    kinds.push_back(kInsideIds);
    append_ids([&](uint32_t w) { return bits[w]; });
  } else if (best == missing) {
    kinds.push_back(kInsideTextExcept);
    append_ids([&](uint32_t w) { return v.text_bits[w] & ~bits[w]; });
  } else {
    kinds.push_back(kInsideDelta);
    data.push_back(base_id);
    append_ids([&](uint32_t w) { return bits[w] ^ (*base)[w]; });
  }
  offsets.push_back(static_cast<uint32_t>(data.size()));
}

// Decode and validate a blob's stored trie (see store_trie) into the tables the matcher reads.
std::shared_ptr<const TrieTables> decode_trie(const Runtime& c, const ArrayView& trie_byte,
                                              const ArrayView& trie_depth,
                                              const ArrayView& token_flags,
                                              const ArrayView& first_tokens,
                                              const ArrayView& extra_tokens, std::string key) {
  auto out = std::make_shared<TrieTables>();
  out->stored = std::move(key);
  // Trie: depths must describe a depth-first order (root at 0, each node at most one deeper
  // than the previous). One pass rebuilds subtree ranges and token offsets from them, checks
  // every token id, and rebuilds token bytes (not stored: a text token's bytes are its path).
  const uint32_t M = trie_byte.count;
  require(
      M >= 1 && trie_depth.count == M && token_flags.count == (M + 7ull) / 8 && trie_depth[0] == 0,
      "bad trie root");
  require((token_flags.data[0] & 1) == 0, "a token at the trie root");
  require(extra_tokens.count % 2 == 0, "bad trie extra tokens");
  {
    const uint32_t* text = c.text_bits.data();
    const uint64_t stored_tokens = first_tokens.count + extra_tokens.count / 2ull;
    require(stored_tokens <= c.num_tokens, "bad trie token list");
    // Raw pointers into presized tables: this loop runs once per trie node (hundreds of
    // thousands) and dominates the load.
    out->trie_end.assign(M, M);
    out->trie_tok_offsets.resize(M + 1);
    out->trie_tokens.resize(stored_tokens);
    out->token_begin.assign(c.num_tokens, 0);
    out->token_length.assign(c.num_tokens, 0);
    uint32_t* end = out->trie_end.data();
    uint32_t* offsets = out->trie_tok_offsets.data();
    uint32_t* tokens = out->trie_tokens.data();
    uint32_t* token_begin = out->token_begin.data();
    uint32_t* token_length = out->token_length.data();
    std::vector<uint8_t>& token_bytes = out->token_bytes;
    token_bytes.resize(static_cast<size_t>(M) + kMaxTokenLength);
    size_t bytes_used = 0, path_start = 0;
    uint32_t path_length = 0;
    std::vector<uint8_t> seen(c.num_tokens, 0);
    std::vector<uint32_t> open(kMaxTokenLength + 2);
    uint32_t open_size = 1;  // open[0] = root
    open[0] = 0;
    uint32_t stored = 0, first = 0, extra = 0;
    auto add_token = [&](uint32_t id, uint32_t begin, uint32_t depth) {
      require(id < c.num_tokens && test_bit(text, id), "bad trie token id");
      require(!seen[id], "a token appears twice in the trie");
      seen[id] = 1;
      tokens[stored++] = id;
      token_begin[id] = begin;
      token_length[id] = depth;
    };
    const uint8_t* flags = token_flags.data;
    const uint8_t* trie_bytes = trie_byte.data;
    const uint32_t next_extra_node = extra_tokens.count ? extra_tokens[0] : M;
    uint32_t pending_extra_node = next_extra_node;
    uint32_t previous_depth = 0;
    offsets[0] = 0;
    for (uint32_t n = 1; n < M; ++n) {
      const uint32_t depth = trie_depth.width == 1 ? trie_depth.data[n] : trie_depth[n];
      require(depth >= 1 && depth <= previous_depth + 1u && depth <= kMaxTokenLength,
              "bad trie depth");
      previous_depth = depth;
      while (open_size > depth) end[open[--open_size]] = n;
      open[open_size++] = n;
      // Token bytes are paths: the current path lives at the end of token_bytes, so going one
      // deeper appends one byte and every token on it points into it. Only a step back up
      // starts a new copy of the shared prefix.
      if (depth != path_length + 1) {
        if (bytes_used + depth > token_bytes.size()) token_bytes.resize(2 * token_bytes.size());
        std::memmove(token_bytes.data() + bytes_used, token_bytes.data() + path_start, depth - 1);
        path_start = bytes_used;
        bytes_used += depth - 1;
      } else if (bytes_used + 1 > token_bytes.size()) {
        token_bytes.resize(2 * token_bytes.size());
      }
      token_bytes[bytes_used++] = trie_bytes[n];
      path_length = depth;
      offsets[n] = stored;
      if ((flags[n >> 3] >> (n & 7)) & 1) {
        require(first < first_tokens.count, "bad trie token list");
        const uint32_t begin = static_cast<uint32_t>(path_start);
        add_token(first_tokens[first++], begin, depth);
        for (; pending_extra_node == n;
             pending_extra_node = extra < extra_tokens.count ? extra_tokens[extra] : M) {
          add_token(extra_tokens[extra + 1], begin, depth);
          extra += 2;
        }
      }
      require(pending_extra_node > n, "bad or unsorted trie extra tokens");
    }
    offsets[M] = stored;
    token_bytes.resize(bytes_used);
    require(first == first_tokens.count, "bad trie token list");
    require(extra == extra_tokens.count, "bad trie extra tokens");
    require(M % 8 == 0 || (flags[M / 8] >> (M % 8)) == 0, "bad trie token flags");
    for (uint32_t id = 0; id < c.num_tokens; ++id) {
      require(test_bit(text, id) == (seen[id] != 0), "text token not in trie");
    }
  }
  trie_byte.copy_to(out->trie_byte);
  return out;
}

// Decoded trie tables by the bytes they came from. Entries are weak, so tables live exactly as
// long as some runtime uses them; the map only grows with the number of distinct live
// vocabularies. Leaked on purpose: runtimes may outlive static destruction at exit.
struct TrieCache {
  std::mutex mutex;
  std::unordered_map<uint64_t, std::vector<std::weak_ptr<const TrieTables>>> by_hash;
  // The tables found or added last: a process mostly loads blobs of one vocabulary, so one
  // comparison usually finds them without hashing the megabyte of trie bytes.
  std::weak_ptr<const TrieTables> last;
};

TrieCache& trie_cache() {
  static TrieCache* cache = new TrieCache;
  return *cache;
}

// A fast 64-bit hash for cache lookups (equality is always confirmed byte by byte): four
// independent multiply-xorshift lanes over 32-byte blocks, then the tail, then splitmix.
uint64_t hash_bytes(std::string_view bytes) {
  const char* data = bytes.data();
  const size_t size = bytes.size();
  uint64_t lanes[4] = {0x243f6a8885a308d3ull, 0x13198a2e03707344ull, 0xa4093822299f31d0ull,
                       0x082efa98ec4e6c89ull};
  size_t i = 0;
  for (; i + 32 <= size; i += 32) {
    for (int j = 0; j < 4; ++j) {
      uint64_t word;
      std::memcpy(&word, data + i + 8 * j, 8);
      lanes[j] = (lanes[j] ^ word) * 0x9e3779b97f4a7c15ull;
      lanes[j] ^= lanes[j] >> 29;
    }
  }
  uint64_t hash = mix64(size);
  for (; i < size; ++i) hash = (hash ^ static_cast<uint8_t>(data[i])) * 0x100000001b3ull;
  for (uint64_t lane : lanes) hash = mix64(hash ^ mix64(lane));
  return hash;
}

// Trie cache keys are the 8 bytes of vocab_size and num_tokens (`head`), then the stored
// text-token set and trie exactly as the blob holds them (`rest`): compared and hashed in these
// two pieces, so a lookup reads the blob in place instead of copying a megabyte into a key.
constexpr size_t kTrieKeyHead = 8;

bool is_trie_key(const std::string& stored, std::string_view head, std::string_view rest) {
  return stored.size() == head.size() + rest.size() &&
         std::memcmp(stored.data(), head.data(), head.size()) == 0 &&
         std::memcmp(stored.data() + head.size(), rest.data(), rest.size()) == 0;
}

uint64_t trie_key_hash(std::string_view head, std::string_view rest) {
  return mix64(hash_bytes(head) ^ mix64(hash_bytes(rest)));
}

std::shared_ptr<const TrieTables> find_trie_tables(std::string_view head, std::string_view rest) {
  TrieCache& cache = trie_cache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    std::shared_ptr<const TrieTables> last = cache.last.lock();
    if (last && is_trie_key(last->stored, head, rest)) return last;
  }
  const uint64_t hash = trie_key_hash(head, rest);
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto found = cache.by_hash.find(hash);
  if (found == cache.by_hash.end()) return nullptr;
  for (const auto& weak : found->second) {
    std::shared_ptr<const TrieTables> tables = weak.lock();
    if (tables && is_trie_key(tables->stored, head, rest)) {
      cache.last = tables;
      return tables;
    }
  }
  return nullptr;
}

void remember_trie_tables(const std::shared_ptr<const TrieTables>& tables) {
  TrieCache& cache = trie_cache();
  const std::string_view stored(tables->stored);
  const uint64_t hash =
      trie_key_hash(stored.substr(0, kTrieKeyHead), stored.substr(kTrieKeyHead));
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.last = tables;
  // Drop dead entries everywhere now and then, so the map tracks live vocabularies only.
  for (auto it = cache.by_hash.begin(); it != cache.by_hash.end();) {
    auto& list = it->second;
    list.erase(std::remove_if(list.begin(), list.end(),
                              [](const std::weak_ptr<const TrieTables>& w) { return w.expired(); }),
               list.end());
    it = list.empty() ? cache.by_hash.erase(it) : std::next(it);
  }
  cache.by_hash[hash].push_back(tables);
}

}  // namespace

std::shared_ptr<const VocabIndex> build_vocab_index(const VocabSpec& v) {
  require(little_endian_host(), "the runtime needs a little-endian machine");
  require(v.tokens.size() <= v.vocab_size, "vocab_size is smaller than the token list");
  require(v.is_text.size() == v.tokens.size(), "is_text must have one flag per token");
  auto index = std::make_shared<VocabIndex>();
  index->vocab_size = v.vocab_size;
  index->num_tokens = static_cast<uint32_t>(v.tokens.size());
  index->words = (v.vocab_size + 31) / 32;
  index->text_bits.assign(index->words, 0);
  for (uint32_t id = 0; id < index->num_tokens; ++id) {
    const std::string& t = v.tokens[id];
    require(!v.is_text[id] || t.size() <= kMaxTokenLength,
            "a text token is longer than 4096 bytes");
    require(t.size() <= kMaxStoredToken, "a token is longer than 65536 bytes");
    if (v.is_text[id] && !t.empty()) {
      set_bit(index->text_bits.data(), id);
      index->max_text_length = std::max(index->max_text_length, static_cast<uint32_t>(t.size()));
    }
  }
  index->trie = build_trie(v);
  index->stored_trie = store_trie(index->trie);
  {
    // Bytes below every node, children before parents (a node's children follow it in the
    // depth-first order, so a backward pass sees them first).
    const TokenTrie& trie = index->trie;
    const uint32_t num_nodes = static_cast<uint32_t>(trie.byte.size());
    std::vector<uint64_t> below(static_cast<size_t>(num_nodes) * 4, 0);
    std::vector<uint16_t> height(num_nodes, 0);
    index->subtree_summary.assign(num_nodes, kNoSummary);
    for (uint32_t c = 1; c < num_nodes; c = trie.end[c]) {
      uint16_t root_height = 0;
      for (uint32_t n = c; n < trie.end[c]; ++n) {
        root_height = std::max<uint16_t>(root_height, static_cast<uint16_t>(trie.depth[n] - 1));
      }
      index->root_height[trie.byte[c]] = root_height;
    }
    for (uint32_t n = num_nodes; n-- > 1;) {
      uint64_t* mine = &below[static_cast<size_t>(n) * 4];
      for (uint32_t c = n + 1; c < trie.end[n]; c = trie.end[c]) {
        const uint64_t* theirs = &below[static_cast<size_t>(c) * 4];
        for (int w = 0; w < 4; ++w) mine[w] |= theirs[w];
        mine[trie.byte[c] >> 6] |= uint64_t{1} << (trie.byte[c] & 63);
        height[n] = std::max<uint16_t>(height[n], static_cast<uint16_t>(height[c] + 1));
      }
      if (trie.end[n] - n - 1 >= kSummarisedSubtree) {
        index->subtree_summary[n] = static_cast<uint32_t>(index->subtree_bytes.size() / 4);
        index->subtree_bytes.insert(index->subtree_bytes.end(), mine, mine + 4);
        index->subtree_height.push_back(height[n]);
      }
    }
  }
  for (uint32_t w = 0; w < index->words; ++w) index->text_count += popcount32(index->text_bits[w]);
  {
    // The loader's cache key: vocab_size, num_tokens, then the text-token array and the
    // stored trie exactly as blobs lay them out.
    std::string key(8, '\0');
    std::memcpy(&key[0], &index->vocab_size, 4);
    std::memcpy(&key[4], &index->num_tokens, 4);
    BlobWriter text;
    text.array(index->text_bits);
    key += text.take();
    key += index->stored_trie;
    Runtime view;
    view.num_tokens = index->num_tokens;
    BlobReader r(std::string_view(key).substr(8));
    r.array(view.text_bits, "text_bits");
    const ArrayView trie_byte = r.view("trie_byte", 1);
    const ArrayView trie_depth = r.view("trie_depth", 1 | 2);
    const ArrayView token_flags = r.view("trie_token_flags", 1);
    const ArrayView first_tokens = r.view("trie_first_tokens", 4);
    const ArrayView extra_tokens = r.view("trie_extra_tokens", 4);
    std::string stored = key;
    index->decoded = decode_trie(view, trie_byte, trie_depth, token_flags, first_tokens,
                                 extra_tokens, std::move(stored));
    remember_trie_tables(index->decoded);
  }
  return index;
}

uint32_t vocab_index_size(const VocabIndex& index) { return index.vocab_size; }

size_t clear_walk_cache(const VocabIndex& index) {
  std::lock_guard<std::mutex> lock(index.walk_mutex);
  const size_t held = index.walk_cache_bytes;
  index.walk_cache.clear();
  index.walk_cache_bytes = 0;
  return held;
}

// A DFA's transition rows by byte class in the compact form: per state the most common target
// (ties to the lowest, -1 = dead lowest of all), then the classes whose target differs, in
// ascending order, with their targets. Keyword-heavy grammars (the property names of a large
// JSON Schema) have tens of thousands of states whose rows are mostly one target: 4.8 MB of
// dense table for a Kubernetes schema, 1.4 MB compact.
struct TransitionRows {
  bool compact = false;
  std::vector<int32_t> row_default;
  std::vector<uint32_t> exception_end;  // per state, the end of its exceptions
  std::vector<uint8_t> exception_class;
  std::vector<int32_t> exception_target;
};

TransitionRows compact_transition_rows(const std::vector<int32_t>& table, uint32_t num_states,
                                       uint32_t num_classes) {
  TransitionRows rows;
  rows.row_default.reserve(num_states);
  rows.exception_end.reserve(num_states);
  std::vector<int32_t> sorted(num_classes);
  for (uint32_t s = 0; s < num_states; ++s) {
    const int32_t* row = &table[static_cast<size_t>(s) * num_classes];
    sorted.assign(row, row + num_classes);
    std::sort(sorted.begin(), sorted.end());
    int32_t best = sorted[0];
    uint32_t best_run = 0;
    for (uint32_t i = 0; i < num_classes;) {
      uint32_t j = i;
      while (j < num_classes && sorted[j] == sorted[i]) ++j;
      if (j - i > best_run) {
        best_run = j - i;
        best = sorted[i];
      }
      i = j;
    }
    rows.row_default.push_back(best);
    for (uint32_t k = 0; k < num_classes; ++k) {
      if (row[k] == best) continue;
      rows.exception_class.push_back(static_cast<uint8_t>(k));
      rows.exception_target.push_back(row[k]);
    }
    rows.exception_end.push_back(static_cast<uint32_t>(rows.exception_class.size()));
  }
  const uint64_t id_bytes = num_states < 0xffffu ? 2 : 4;
  const uint64_t dense = uint64_t{num_states} * num_classes * id_bytes;
  const uint64_t compact = uint64_t{num_states} * (id_bytes + 4) +
                           uint64_t{rows.exception_class.size()} * (1 + id_bytes);
  if (compact >= dense) return TransitionRows{};
  rows.compact = true;
  return rows;
}

std::string build_runtime_blob(const GrammarSpec& g, const VocabIndex& v,
                               const std::vector<uint32_t>& end_tokens) {
  const uint32_t num_states = static_cast<uint32_t>(g.dfa_accepting.size());
  const uint32_t num_lexemes = static_cast<uint32_t>(g.lexeme_start.size());
  require(!g.tokenset_offsets.empty(), "tokenset_offsets needs a leading 0");
  const uint32_t num_tokensets = static_cast<uint32_t>(g.tokenset_offsets.size() - 1);
  const uint32_t words = v.words;
  const uint32_t num_tokens = v.num_tokens;

  std::vector<uint32_t> tokenset_bits(static_cast<size_t>(num_tokensets) * words, 0);
  for (uint32_t s = 0; s < num_tokensets; ++s) {
    require(g.tokenset_offsets[s] <= g.tokenset_offsets[s + 1] &&
                g.tokenset_offsets[s + 1] <= g.tokenset_ids.size(),
            "bad tokenset offsets");
    for (uint32_t i = g.tokenset_offsets[s]; i < g.tokenset_offsets[s + 1]; ++i) {
      uint32_t id = g.tokenset_ids[i];
      require(id < num_tokens, "tokenset id out of range");
      set_bit(&tokenset_bits[static_cast<size_t>(s) * words], id);
    }
  }
  std::vector<uint32_t> end_bits(words, 0);
  for (uint32_t id : end_tokens) {
    require(id < num_tokens, "end token id out of range");
    set_bit(end_bits.data(), id);
  }
  // The walks below follow transitions, so they are checked first.
  require(g.dfa_table.size() == static_cast<size_t>(num_states) * 256, "bad DFA table size");
  require(g.dfa_lexeme.size() == num_states, "bad DFA lexeme array");
  for (int32_t t : g.dfa_table) {
    require(t >= -1 && (t < 0 || static_cast<uint32_t>(t) < num_states),
            "DFA transition out of range");
  }

  // DFA columns by byte class.
  std::vector<uint8_t> byte_class;
  const uint32_t num_byte_classes = byte_classes(g.dfa_table, num_states, byte_class);
  std::vector<int32_t> class_table(static_cast<size_t>(num_states) * num_byte_classes);
  {
    std::vector<uint32_t> representative(num_byte_classes);
    for (int b = 255; b >= 0; --b) representative[byte_class[b]] = static_cast<uint32_t>(b);
    for (uint32_t s = 0; s < num_states; ++s) {
      for (uint32_t c = 0; c < num_byte_classes; ++c) {
        class_table[static_cast<size_t>(s) * num_byte_classes + c] =
            g.dfa_table[static_cast<size_t>(s) * 256 + representative[c]];
      }
    }
  }
  std::vector<uint32_t> state_class, class_by_depth;
  uint32_t stable_depth = 0;
  const uint32_t num_classes =
      state_classes(class_table, g.dfa_accepting, num_byte_classes, v.max_text_length, state_class,
                    class_by_depth, stable_depth);

  // Per class of states (walked from its first state): the tokens that stay inside the lexeme
  // (deduplicated sets) and, by byte, the children of the trie nodes where the lexeme can end
  // with more token bytes to follow (what follows is decided at run time).
  //
  // A walk is the union of its first-byte subtrees, and the walk of the subtree of first byte b
  // depends only on that node and on the class of the state after b. Those "parts" are walked
  // once and shared: states that agree on most first bytes (a string state and the key states
  // that differ from it on a few letters) only walk their own few subtrees. A class's inside
  // set is then built from the most similar earlier class's set by swapping the differing
  // parts.
  const TokenTrie& trie = v.trie;
  using Part = WalkPart;
  std::vector<std::shared_ptr<const Part>> parts;
  constexpr uint32_t kNoPart = 0xffffffffu;
  std::vector<uint32_t> roots;                     // the depth-1 nodes, ascending
  std::vector<uint32_t> root_index(256, kNoPart);  // byte -> index in roots
  for (uint32_t c = 1; c < trie.byte.size(); c = trie.end[c]) {
    root_index[trie.byte[c]] = static_cast<uint32_t>(roots.size());
    roots.push_back(c);
  }
  const size_t num_roots = roots.size();
  // Part of (first-byte node, class of the state after its byte), by root index and class.
  std::vector<uint32_t> part_of(num_roots * static_cast<size_t>(num_classes), kNoPart);
  // Live bytes of every state, ascending: a state with few (inside a literal) looks its
  // children up by byte instead of testing every child of the node.
  std::vector<uint32_t> live_offsets(num_states + 1, 0);
  std::vector<uint8_t> live_bytes;
  for (uint32_t q = 0; q < num_states; ++q) {
    for (uint32_t b = 0; b < 256; ++b) {
      if (g.dfa_table[static_cast<size_t>(q) * 256 + b] >= 0)
        live_bytes.push_back(static_cast<uint8_t>(b));
    }
    live_offsets[q + 1] = static_cast<uint32_t>(live_bytes.size());
  }
  // The walk of the subtree of `root`, entered in state `next` (after the root's byte). The
  // trie is stored depth first (node n's subtree is [n, end[n])), so the walk is one forward
  // scan over node ids: each node's state is its parent's state (kept per depth) stepped by the
  // node's byte, and a dead step jumps over the node's whole subtree. Nodes come in node order,
  // so token ranges and exit nodes come out ascending (the same pre-order a recursive walk
  // gives), with sequential memory access and no per-node child lookups.
  std::vector<int32_t> state_at_depth(static_cast<size_t>(v.max_text_length) + 2);
  // Per state, the bytes on which it stays in itself (4 x 64 bits), computed on first use; only
  // non-accepting states get them (an accepting state's subtrees hold exits to record).
  std::vector<uint64_t> self_loops;
  std::vector<uint32_t> self_loop_index(num_states, kNoSummary);
  auto loops_of = [&](int32_t state) -> const uint64_t* {
    uint32_t& at = self_loop_index[state];
    if (at == kNoSummary) {
      at = static_cast<uint32_t>(self_loops.size());
      self_loops.resize(self_loops.size() + 4, 0);
      const int32_t* row = &g.dfa_table[static_cast<size_t>(state) * 256];
      for (uint32_t b = 0; b < 256; ++b) {
        if (row[b] == state) self_loops[at + (b >> 6)] |= uint64_t{1} << (b & 63);
      }
    }
    return &self_loops[at];
  };
  // Uniform runs, for states that step through a chain instead of looping (a bounded string's
  // states, one per position). dominant[s] is the live state most bytes lead to from s (the
  // first such in byte order) and uniform[s] those bytes; run mask d of s (d = 1 ..
  // kMaxUniformRun) is the intersection of uniform[] along s, dominant[s], ... for d states, or
  // empty once a state after the first accepts. A subtree d bytes high whose bytes are all in
  // run mask d of s is walked by one state per depth, alive and (above its leaves) not
  // accepting: all its tokens are inside and it has no exits.
  std::vector<int32_t> dominant(num_states, -2);  // -2: not computed yet, -1: none
  std::vector<uint64_t> uniform(static_cast<size_t>(num_states) * 4, 0);
  auto dominant_of = [&](int32_t state) {
    if (dominant[state] == -2) {
      const int32_t* row = &g.dfa_table[static_cast<size_t>(state) * 256];
      int32_t best = -1;
      uint32_t best_count = 0;
      for (uint32_t b = 0; b < 256 && best_count < 256 - b; ++b) {
        const int32_t t = row[b];
        if (t < 0 || t == best) continue;
        uint32_t count = 0;
        for (uint32_t c = b; c < 256; ++c) count += row[c] == t;
        if (count > best_count) {
          best = t;
          best_count = count;
        }
      }
      dominant[state] = best;
      uint64_t* mask = &uniform[static_cast<size_t>(state) * 4];
      for (uint32_t b = 0; best >= 0 && b < 256; ++b) {
        if (row[b] == best) mask[b >> 6] |= uint64_t{1} << (b & 63);
      }
    }
    return dominant[state];
  };
  std::vector<uint64_t> run_masks;
  std::vector<uint32_t> run_index(num_states, kNoSummary);
  auto run_mask = [&](int32_t state, uint32_t length) -> const uint64_t* {
    uint32_t& at = run_index[state];
    if (at == kNoSummary) {
      at = static_cast<uint32_t>(run_masks.size());
      run_masks.resize(run_masks.size() + 4 * kMaxUniformRun, 0);
      uint64_t mask[4] = {~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}};
      int32_t q = state;
      for (uint32_t d = 1; d <= kMaxUniformRun; ++d) {
        if (q < 0 || (d > 1 && g.dfa_accepting[q]) || dominant_of(q) < 0) break;
        const uint64_t* bytes = &uniform[static_cast<size_t>(q) * 4];
        for (int w = 0; w < 4; ++w) {
          mask[w] &= bytes[w];
          run_masks[at + 4 * (d - 1) + w] = mask[w];
        }
        q = dominant[q];
      }
    }
    return &run_masks[at + 4 * (length - 1)];
  };
  auto walk_part = [&](uint32_t root, int32_t next) {
    auto walked = std::make_shared<Part>();
    Part& part = *walked;
    const int32_t* table = g.dfa_table.data();
    const uint8_t* accepting = g.dfa_accepting.data();
    const uint32_t* tok_offsets = trie.tok_offsets.data();
    const uint32_t* subtree_end = trie.end.data();
    const uint16_t* depth = trie.depth.data();
    const uint8_t* node_byte = trie.byte.data();
    auto& ranges = part.token_ranges;
    // Append the token positions [first, last), merging with the previous range when adjacent.
    auto add_tokens = [&](uint32_t first, uint32_t last) {
      if (first == last) return;
      if (!ranges.empty() && ranges.back().second == first) {
        ranges.back().second = last;
      } else {
        ranges.emplace_back(first, last);
      }
      part.num_tokens += last - first;
    };
    auto enter = [&](uint32_t node, int32_t state) {
      add_tokens(tok_offsets[node], tok_offsets[node + 1]);
      if (accepting[state] && subtree_end[node] > node + 1) part.exit_nodes.push_back(node);
    };
    const uint32_t* summary = v.subtree_summary.data();
    const uint64_t* below = v.subtree_bytes.data();
    // Whether the whole subtree below `node` stays in `state`: then its tokens are one range
    // (positions of a subtree are contiguous) and, the state not accepting, it has no exits.
    auto take_below = [&](uint32_t node, int32_t state) {
      if (summary[node] == kNoSummary) return false;
      const uint64_t* bytes = &below[static_cast<size_t>(summary[node]) * 4];
      bool inside = !accepting[state];
      if (inside) {  // the state loops on every byte below
        const uint64_t* loops = loops_of(state);
        for (int w = 0; w < 4 && inside; ++w) inside = (bytes[w] & ~loops[w]) == 0;
      }
      const uint32_t height = v.subtree_height[summary[node]];
      if (!inside && height <= kMaxUniformRun) {  // or steps through a uniform run
        const uint64_t* run = run_mask(state, height);
        inside = true;
        for (int w = 0; w < 4 && inside; ++w) inside = (bytes[w] & ~run[w]) == 0;
      }
      if (!inside) return false;
      add_tokens(tok_offsets[node + 1], tok_offsets[subtree_end[node]]);
      return true;
    };
    const uint32_t root_depth = depth[root];
    state_at_depth[0] = next;
    enter(root, next);
    if (take_below(root, next)) return std::shared_ptr<const Part>(std::move(walked));
    for (uint32_t node = root + 1, stop = subtree_end[root]; node < stop;) {
      const uint32_t level = depth[node] - root_depth;
      const int32_t state = table[static_cast<size_t>(state_at_depth[level - 1]) * 256 +
                                  node_byte[node]];
      if (state < 0) {
        node = subtree_end[node];
        continue;
      }
      state_at_depth[level] = state;
      enter(node, state);
      node = take_below(node, state) ? subtree_end[node] : node + 1;
    }
    return std::shared_ptr<const Part>(std::move(walked));
  };
  // The language of a state written canonically: the states it reaches numbered breadth first
  // in byte order, each as its accepting flag, its number of runs and its transitions as
  // maximal byte runs with one target (first byte, target number or 0xff for dead). Equal keys
  // mean isomorphic automata, so equal languages and equal walks whatever the grammar. False
  // when more than kCachedWalkMaxStates states are reachable.
  std::vector<std::pair<uint32_t, uint32_t>> byte_runs;  // (first byte, byte class)
  for (uint32_t b = 0; b < 256; ++b) {
    if (b == 0 || byte_class[b] != byte_class[b - 1]) byte_runs.emplace_back(b, byte_class[b]);
  }
  std::vector<int32_t> bfs_number(num_states, -1);
  std::vector<uint32_t> bfs_order;
  auto write_language = [&](int32_t state, std::string& key) {
    bfs_order.assign(1, static_cast<uint32_t>(state));
    bfs_number[state] = 0;
    bool small = true;
    for (size_t i = 0; i < bfs_order.size() && small; ++i) {
      const uint32_t q = bfs_order[i];
      key.push_back(static_cast<char>(g.dfa_accepting[q] ? 1 : 0));
      const size_t count_at = key.size();
      key.append(2, '\0');
      uint32_t runs = 0;
      int32_t previous = -2;
      for (const auto& [first, byte_cls] : byte_runs) {
        const int32_t t = class_table[static_cast<size_t>(q) * num_byte_classes + byte_cls];
        int32_t target = -1;
        if (t >= 0) {
          if (bfs_number[t] < 0) {
            if (bfs_order.size() == kCachedWalkMaxStates) {
              small = false;
              break;
            }
            bfs_number[t] = static_cast<int32_t>(bfs_order.size());
            bfs_order.push_back(static_cast<uint32_t>(t));
          }
          target = bfs_number[t];
        }
        if (target != previous) {
          key.push_back(static_cast<char>(first));
          key.push_back(static_cast<char>(target < 0 ? 0xff : target));
          previous = target;
          ++runs;
        }
      }
      key[count_at] = static_cast<char>(runs & 0xff);
      key[count_at + 1] = static_cast<char>(runs >> 8);
    }
    for (uint32_t q : bfs_order) bfs_number[q] = -1;
    return small;
  };
  // Per state: 0 not looked at yet, 1 its language key is in language_keys, 2 not cached.
  std::vector<uint8_t> language_status(num_states, 0);
  std::unordered_map<uint32_t, std::string> language_keys;
  std::string cache_key;
  // The part for (root, next): from the vocabulary's walk cache when the state is wide and
  // small enough to key, else walked here (and remembered there when it qualifies).
  auto find_or_walk = [&](uint32_t root, int32_t next) -> std::shared_ptr<const Part> {
    const uint32_t q = static_cast<uint32_t>(next);
    if (language_status[q] == 0) {
      language_status[q] = 2;
      if (live_offsets[q + 1] - live_offsets[q] >= kCachedWalkMinLiveBytes) {
        std::string key;
        if (write_language(next, key)) {
          language_keys.emplace(q, std::move(key));
          language_status[q] = 1;
        }
      }
    }
    if (language_status[q] != 1) return walk_part(root, next);
    cache_key.assign(reinterpret_cast<const char*>(&root), 4);
    cache_key += language_keys[q];
    {
      std::lock_guard<std::mutex> lock(v.walk_mutex);
      auto found = v.walk_cache.find(cache_key);
      if (found != v.walk_cache.end()) return found->second;
    }
    std::shared_ptr<const Part> walked = walk_part(root, next);
    const size_t size = walked->bytes() + cache_key.size();
    std::lock_guard<std::mutex> lock(v.walk_mutex);
    if (v.walk_cache_bytes + size <= kWalkCacheBytes &&
        v.walk_cache.emplace(cache_key, walked).second) {
      v.walk_cache_bytes += size;
    }
    return walked;
  };
  auto set_part = [&](const Part& part, uint32_t* out) {
    for (auto [first, last] : part.token_ranges) {
      for (uint32_t i = first; i < last; ++i) set_bit(out, trie.tokens[i]);
    }
  };
  auto clear_part = [&](const Part& part, uint32_t* out) {
    for (auto [first, last] : part.token_ranges) {
      for (uint32_t i = first; i < last; ++i) {
        out[trie.tokens[i] >> 5] &= ~(1u << (trie.tokens[i] & 31));
      }
    }
  };

  std::vector<uint32_t> class_parts(static_cast<size_t>(num_classes) * num_roots, kNoPart);
  std::vector<uint64_t> class_tokens(num_classes, 0);
  std::vector<uint32_t> class_inside(num_classes), inside_offsets{0}, inside_data;
  std::vector<uint8_t> inside_kinds;
  std::vector<std::vector<uint32_t>> set_bits;  // every distinct inside set, dense
  std::vector<uint32_t> class_exit_offsets{0}, exit_entry_end, exit_children;
  std::vector<uint8_t> exit_entry_byte;
  std::vector<std::vector<uint32_t>> by_byte(256);
  std::vector<uint32_t> set_class;              // per set: the class it was built for
  // Base candidates: the latest classes whose biggest part is a given part.
  constexpr size_t kBaseCandidates = 8;
  // Delta candidates for a new inside set: this many of the latest sets (and the base's).
  constexpr uint32_t kDeltaCandidates = 16;
  std::unordered_map<uint32_t, std::vector<uint32_t>> classes_by_big_part;
  std::vector<uint32_t> bits(words);
  // Per part, the id of its token list (parts differing only in exits share one), and the
  // classes by a hash of their token-list ids root by root.
  std::vector<uint32_t> part_tokens;
  // Per class, the root indices it has parts for, ascending.
  std::vector<uint32_t> class_roots_offsets{0}, class_roots;
  std::vector<uint32_t> class_token_roots(num_classes, 0);  // roots whose part has tokens
  std::unordered_map<uint64_t, std::vector<uint32_t>> parts_by_tokens, classes_by_tokens;
  uint32_t token_lists = 0;
  std::vector<uint32_t> representative(num_classes, 0xffffffffu);
  for (uint32_t s = num_states; s-- > 0;) representative[state_class[s]] = s;
  // How many tokens are in exactly one of the inside sets of a class with parts `own` and of
  // class `other`: root by root, since parts of different first bytes are disjoint.
  auto class_difference = [&](uint32_t cls, uint32_t other) -> uint64_t {
    const uint32_t* own = &class_parts[static_cast<size_t>(cls) * num_roots];
    const uint32_t* theirs = &class_parts[static_cast<size_t>(other) * num_roots];
    uint64_t count = 0;
    for (uint32_t k = class_roots_offsets[cls]; k < class_roots_offsets[cls + 1]; ++k) {
      const uint32_t i = class_roots[k];
      if (own[i] == theirs[i]) continue;
      if (theirs[i] == kNoPart) {
        count += parts[own[i]]->num_tokens;
      } else if (part_tokens[own[i]] != part_tokens[theirs[i]]) {
        count += ranges_symmetric_difference(parts[own[i]]->token_ranges,
                                             parts[theirs[i]]->token_ranges);
      }
    }
    for (uint32_t k = class_roots_offsets[other]; k < class_roots_offsets[other + 1]; ++k) {
      const uint32_t i = class_roots[k];
      if (own[i] == kNoPart) count += parts[theirs[i]]->num_tokens;
    }
    return count;
  };
  // The inside set of class `cls` (parts `own`): built from the base class's set by swapping
  // the parts that differ when that is cheaper than from nothing, then deduplicated by content
  // and, when new, encoded (against the base's set or the previous set, whichever is closer).
  auto inside_set_of = [&](uint32_t cls, const uint32_t* own, uint32_t base,
                           uint64_t base_shared) -> uint32_t {
    const uint64_t base_cost = base == kNoPart ? ~uint64_t{0}
                                               : words + (class_tokens[base] - base_shared) +
                                                     (class_tokens[cls] - base_shared);
    if (base_cost < class_tokens[cls] + words) {
      const uint32_t* theirs = &class_parts[static_cast<size_t>(base) * num_roots];
      bits = set_bits[class_inside[base]];
      for (uint32_t k = class_roots_offsets[base]; k < class_roots_offsets[base + 1]; ++k) {
        const uint32_t i = class_roots[k];
        if (theirs[i] != own[i]) clear_part(*parts[theirs[i]], bits.data());
      }
      for (uint32_t k = class_roots_offsets[cls]; k < class_roots_offsets[cls + 1]; ++k) {
        const uint32_t i = class_roots[k];
        if (theirs[i] != own[i]) set_part(*parts[own[i]], bits.data());
      }
    } else {
      std::fill(bits.begin(), bits.end(), 0);
      for (uint32_t k = class_roots_offsets[cls]; k < class_roots_offsets[cls + 1]; ++k) {
        set_part(*parts[own[class_roots[k]]], bits.data());
      }
    }
    // New content (callers deduplicate by token lists, which is exact: parts of different
    // first bytes are disjoint, and equal token sets have equal range lists).
    const uint32_t set_id = static_cast<uint32_t>(set_bits.size());
    // Delta candidates: the base class's set, and the latest sets (classes come in state
    // order, so a chain of string states yields nearby sets that differ in the tokens of one
    // length only). Differences are counted on the parts, root by root.
    uint32_t delta_base = kNoPart;
    uint64_t differing = 0;
    if (base != kNoPart) {
      delta_base = class_inside[base];
      differing = class_difference(cls, base);
    }
    // Several chains can interleave (a bounded string's states, its escapes' states, a
    // pattern's), so the latest few sets are tried, not just the previous one: with only that,
    // a schema with two length-bounded strings stored 168 of its 434 sets dense (16 KB each
    // under Llama 3) whose nearest earlier set was 4 to 8 sets back and differed in 1 to 200
    // tokens.
    for (uint32_t back = 1; back <= kDeltaCandidates && back <= set_id; ++back) {
      const uint32_t earlier = set_id - back;
      const uint64_t from_earlier = class_difference(cls, set_class[earlier]);
      if (delta_base == kNoPart || from_earlier < differing) {
        delta_base = earlier;
        differing = from_earlier;
      }
    }
    const bool has_base = delta_base != kNoPart;
    encode_inside_set(bits, has_base ? &set_bits[delta_base] : nullptr, has_base ? delta_base : 0,
                      class_tokens[cls], differing, v, inside_kinds, inside_offsets,
                      inside_data);
    set_bits.push_back(bits);
    set_class.push_back(cls);
    return set_id;
  };
  // Per class, the bytes its exits may take: the union over its states' lexemes.
  const bool exits_filtered = !g.lexeme_exit_bytes.empty();
  require(!exits_filtered || g.lexeme_exit_bytes.size() == static_cast<size_t>(num_lexemes) * 8,
          "bad lexeme exit bytes");
  std::vector<uint32_t> class_exit_bytes(exits_filtered ? static_cast<size_t>(num_classes) * 8 : 0);
  if (exits_filtered) {
    for (uint32_t s = 0; s < num_states; ++s) {
      const uint32_t* from = &g.lexeme_exit_bytes[static_cast<size_t>(g.dfa_lexeme[s]) * 8];
      uint32_t* to = &class_exit_bytes[static_cast<size_t>(state_class[s]) * 8];
      for (int w8 = 0; w8 < 8; ++w8) to[w8] |= from[w8];
    }
  }
  for (uint32_t cls = 0; cls < num_classes; ++cls) {
    const uint32_t s = representative[cls];
    uint32_t* own = &class_parts[static_cast<size_t>(cls) * num_roots];
    uint32_t big_part = kNoPart;
    size_t big_size = 0;
    for (uint32_t l = live_offsets[s]; l < live_offsets[s + 1]; ++l) {
      const uint32_t i = root_index[live_bytes[l]];
      if (i == kNoPart) continue;
      const uint32_t root = roots[i];
      const int32_t next = g.dfa_table[static_cast<size_t>(s) * 256 + trie.byte[root]];
      // The walk reads at most the subtree's height past `next`: states that agree on strings
      // that long share it, even when they differ further on (the states of a bounded string
      // more than that far from its bound).
      const uint32_t reach = std::min<uint32_t>(v.root_height[trie.byte[root]], stable_depth);
      uint32_t& part = part_of[i * num_classes + class_by_depth[reach * num_states + next]];
      if (part == kNoPart) {
        part = static_cast<uint32_t>(parts.size());
        parts.push_back(find_or_walk(root, next));
        const auto& ranges = parts.back()->token_ranges;
        uint64_t hash = mix64(ranges.size());
        for (const auto& [first, last] : ranges) {
          hash = mix64(hash ^ (uint64_t{first} << 32 | last));
        }
        std::vector<uint32_t>& same = parts_by_tokens[hash];
        uint32_t list = kNoPart;
        for (uint32_t other : same) {
          if (parts[other]->token_ranges == ranges) list = part_tokens[other];
        }
        if (ranges.empty()) {
          list = kNoPart;  // reaches no token: the same as no part for the inside set
        } else if (list == kNoPart) {
          list = token_lists++;
          same.push_back(part);
        }
        part_tokens.push_back(list);
      }
      own[i] = part;
      class_roots.push_back(i);
      const size_t size = parts[own[i]]->num_tokens;
      class_tokens[cls] += size;
      if (size > big_size) {
        big_size = size;
        big_part = own[i];
      }
    }
    class_roots_offsets.push_back(static_cast<uint32_t>(class_roots.size()));
    const uint32_t* own_roots = class_roots.data() + class_roots_offsets[cls];
    const uint32_t* own_roots_end = class_roots.data() + class_roots_offsets[cls + 1];
    // The earlier class sharing the most tokens through identical parts, if that beats
    // building the set from nothing.
    uint32_t base = kNoPart;
    uint64_t base_shared = 0;
    if (big_part != kNoPart) {
      auto& candidates = classes_by_big_part[big_part];
      for (uint32_t other : candidates) {
        const uint32_t* theirs = &class_parts[static_cast<size_t>(other) * num_roots];
        uint64_t shared = 0;
        for (const uint32_t* i = own_roots; i != own_roots_end; ++i) {
          if (own[*i] == theirs[*i]) shared += parts[own[*i]]->num_tokens;
        }
        if (shared > base_shared) {
          base_shared = shared;
          base = other;
        }
      }
      if (candidates.size() == kBaseCandidates) candidates.erase(candidates.begin());
      candidates.push_back(cls);
    }
    // A class whose parts reach the same tokens root by root as an earlier class's has that
    // class's inside set: no need to build, hash and compare the dense set.
    // Roots whose part reaches no token count as absent.
    uint64_t tokens_hash = 0x9e3779b97f4a7c15ull;
    uint32_t token_roots = 0;
    for (const uint32_t* i = own_roots; i != own_roots_end; ++i) {
      if (part_tokens[own[*i]] == kNoPart) continue;
      tokens_hash = mix64(tokens_hash ^ (uint64_t{*i} << 32 | part_tokens[own[*i]]));
      ++token_roots;
    }
    tokens_hash = mix64(tokens_hash ^ token_roots);
    class_token_roots[cls] = token_roots;
    std::vector<uint32_t>& same_tokens = classes_by_tokens[tokens_hash];
    uint32_t set_id = kNoPart;
    for (uint32_t other : same_tokens) {
      // Same number of roots with tokens, and each of ours matched by theirs.
      const uint32_t* theirs = &class_parts[static_cast<size_t>(other) * num_roots];
      bool same = class_token_roots[other] == token_roots;
      for (const uint32_t* i = own_roots; i != own_roots_end && same; ++i) {
        const uint32_t mine = part_tokens[own[*i]];
        same = mine == kNoPart || (theirs[*i] != kNoPart && part_tokens[theirs[*i]] == mine);
      }
      if (same) {
        set_id = class_inside[other];
        break;
      }
    }
    if (set_id != kNoPart) {
      class_inside[cls] = set_id;
    } else {
      same_tokens.push_back(cls);
      class_inside[cls] = inside_set_of(cls, own, base, base_shared);
    }

    // Exit children by byte, each run ascending (parts come in trie order, each sorted).
    for (auto& list : by_byte) list.clear();
    for (const uint32_t* i = own_roots; i != own_roots_end; ++i) {
      for (uint32_t node : parts[own[*i]]->exit_nodes) {
        for (uint32_t c = node + 1; c < trie.end[node]; c = trie.end[c]) {
          by_byte[trie.byte[c]].push_back(c);
        }
      }
    }
    const uint32_t* allowed =
        exits_filtered ? &class_exit_bytes[static_cast<size_t>(cls) * 8] : nullptr;
    for (uint32_t b = 0; b < 256; ++b) {
      if (by_byte[b].empty()) continue;
      if (allowed && !((allowed[b >> 5] >> (b & 31)) & 1u)) continue;  // no lexeme follows so
      exit_children.insert(exit_children.end(), by_byte[b].begin(), by_byte[b].end());
      exit_entry_byte.push_back(static_cast<uint8_t>(b));
      exit_entry_end.push_back(static_cast<uint32_t>(exit_children.size()));
    }
    class_exit_offsets.push_back(static_cast<uint32_t>(exit_entry_byte.size()));
  }

  BlobWriter w;
  // One allocation for the whole blob (the stored trie alone is about a megabyte).
  w.reserve(v.stored_trie.size() +
            4 * (g.prod_lhs.size() + g.prod_offsets.size() + g.prod_rhs.size() +
                 class_table.size() + tokenset_bits.size() + 2 * words + inside_data.size() +
                 exit_entry_end.size() + exit_children.size() + 4 * num_states + 2 * num_classes) +
            exit_entry_byte.size() + inside_kinds.size() + 1024);
  w.u32(kBlobMagic);
  w.u32(kBlobVersion);
  std::vector<uint32_t> meta{v.vocab_size,     num_tokens, g.num_nonterminals, num_lexemes,
                             num_tokensets,    g.start,    num_states,         words,
                             num_byte_classes, num_classes};
  w.array(meta);
  w.array(g.prod_lhs);
  w.array(g.prod_offsets);
  w.array(g.prod_rhs);
  w.array(g.lexeme_start);
  w.array(byte_class);
  // Transitions in 16 bits when every state id fits (0xffff = dead), else in 32: the dense
  // table, or (when smaller) each row's most common target and the classes that differ from it
  // (arrays 42-45; the dense slot is then empty).
  const TransitionRows rows = compact_transition_rows(class_table, num_states, num_byte_classes);
  const bool narrow_ids = num_states < 0xffffu;
  auto write_targets = [&](const std::vector<int32_t>& targets) {
    if (narrow_ids) {
      std::vector<uint16_t> narrow(targets.size());
      for (size_t i = 0; i < targets.size(); ++i) {
        narrow[i] = targets[i] < 0 ? 0xffffu : static_cast<uint16_t>(targets[i]);
      }
      w.array(narrow);
    } else {
      w.array(targets);
    }
  };
  write_targets(rows.compact ? std::vector<int32_t>{} : class_table);
  w.array(g.dfa_accepting);
  w.array(g.dfa_lexeme);
  w.array(tokenset_bits);
  w.array(end_bits);
  w.array(v.text_bits);
  w.raw(v.stored_trie);
  w.array(state_class);
  w.array(class_inside);
  w.array(inside_kinds);
  w.array(inside_offsets);
  w.array(inside_data);
  w.array(class_exit_offsets);
  w.array(exit_entry_byte);
  w.array(exit_entry_end);
  w.array(exit_children);
  // Rule limits (empty arrays when the grammar has none).
  w.array(g.lexeme_max_tokens);
  w.array(g.lexeme_max_chars);
  w.array(g.lexeme_temperature);
  w.array(std::vector<uint32_t>{g.char_window});
  w.array(g.state_budget_switch);
  w.array(g.state_near_remaining);
  // Captures: symbols, then the names' offsets and bytes.
  w.array(g.capture_symbols);
  w.array(g.capture_rule_name);
  w.array(g.capture_marker_name);
  w.array(g.capture_body_lexeme);
  w.array(g.capture_marker_lexeme);
  w.array(g.capture_stop);
  w.array(g.capture_ignore_lexeme);
  w.array(g.state_body_end);
  {
    std::vector<uint32_t> offsets{0};
    std::vector<uint8_t> bytes;
    for (const std::string& name : g.capture_names) {
      bytes.insert(bytes.end(), name.begin(), name.end());
      offsets.push_back(static_cast<uint32_t>(bytes.size()));
    }
    w.array(offsets);
    w.array(bytes);
  }
  write_targets(rows.row_default);
  w.array(rows.exception_end);
  w.array(rows.exception_class);
  write_targets(rows.exception_target);
  // Not loaded here: CompiledGrammar.from_parts validates every blob with the loader before
  // anything can use it, and loading twice would double that cost per compile.
  return w.take();
}

std::string build_runtime_blob(const GrammarSpec& g, const VocabSpec& v) {
  return build_runtime_blob(g, *build_vocab_index(v), v.end_tokens);
}

namespace {

// Runtime::closure_* (see there and close_set). A long chain of rules that each start with
// the next makes the closures quadratic in the grammar; past the budget there are none.
void compute_prediction_closures(Runtime& rt) {
  const uint32_t nonterminals = rt.num_nonterminals;
  const size_t dotted_count = rt.dotted_next.size();
  const size_t budget = 16 * dotted_count + 65536;
  std::vector<uint32_t> dotted_mark(dotted_count, 0), nonterminal_mark(nonterminals, 0);
  std::vector<uint32_t> stack;
  rt.closure_offsets.assign(1, 0);
  rt.closure_nt_offsets.assign(1, 0);
  for (uint32_t root = 0; root < nonterminals; ++root) {
    const uint32_t generation = root + 1;
    auto push = [&](uint32_t dotted) {
      if (dotted_mark[dotted] != generation) {
        dotted_mark[dotted] = generation;
        stack.push_back(dotted);
      }
    };
    auto predict = [&](uint32_t nt) {
      if (nonterminal_mark[nt] == generation) return;
      nonterminal_mark[nt] = generation;
      if (nt != root) rt.closure_nts.push_back(nt);
      for (uint32_t k = rt.nt_prod_offsets[nt]; k < rt.nt_prod_offsets[nt + 1]; ++k) {
        push(rt.prod_dotted[rt.nt_prods[k]]);
      }
    };
    predict(root);
    while (!stack.empty()) {
      const uint32_t dotted = stack.back();
      stack.pop_back();
      rt.closure_items.push_back(dotted);
      const uint32_t next = rt.dotted_next[dotted];
      if (next == kComplete) continue;
      if (next < nonterminals) predict(next);
      if (next < rt.symbol_nullable.size() && rt.symbol_nullable[next]) push(dotted + 1);
    }
    if (rt.closure_items.size() + rt.closure_nts.size() > budget) {
      rt.closure_offsets.clear();
      rt.closure_items.clear();
      rt.closure_nt_offsets.clear();
      rt.closure_nts.clear();
      return;
    }
    rt.closure_offsets.push_back(static_cast<uint32_t>(rt.closure_items.size()));
    rt.closure_nt_offsets.push_back(static_cast<uint32_t>(rt.closure_nts.size()));
  }
  rt.closure_wait_offsets.assign(1, 0);
  std::vector<uint32_t> waits;
  for (uint32_t nt = 0; nt < nonterminals; ++nt) {
    waits.clear();
    for (uint32_t k = rt.closure_offsets[nt]; k < rt.closure_offsets[nt + 1]; ++k) {
      const uint32_t next = rt.dotted_next[rt.closure_items[k]];
      if (next != kComplete) waits.push_back(next);
    }
    std::sort(waits.begin(), waits.end());
    waits.erase(std::unique(waits.begin(), waits.end()), waits.end());
    rt.closure_waits.insert(rt.closure_waits.end(), waits.begin(), waits.end());
    rt.closure_wait_offsets.push_back(static_cast<uint32_t>(rt.closure_waits.size()));
  }
}

}  // namespace

// Validates the rule-limit arrays (the DFA arrays are valid already) and derives the flags.
void load_rule_limits(Runtime& rt, const std::vector<uint32_t>& temperature_bits,
                      const std::vector<uint32_t>& char_window) {
  const uint32_t lexemes = rt.num_lexemes, states = rt.num_states;
  require(char_window.size() == 1, "bad char window");
  rt.char_window = char_window[0];
  const bool any = !rt.lexeme_max_tokens.empty();
  require(any ? rt.lexeme_max_tokens.size() == lexemes && rt.lexeme_max_chars.size() == lexemes &&
                    temperature_bits.size() == 2 * static_cast<size_t>(lexemes)
              : rt.lexeme_max_chars.empty() && temperature_bits.empty(),
          "bad rule limit arrays");
  const bool per_state = !rt.state_budget_switch.empty();
  require(per_state ? any && rt.state_budget_switch.size() == states &&
                          rt.state_near_remaining.size() == states
                    : rt.state_near_remaining.empty(),
          "bad char budget arrays");
  if (!any) return;
  rt.lexeme_temperature.resize(lexemes);
  for (uint32_t l = 0; l < lexemes; ++l) {
    const uint64_t bits =
        static_cast<uint64_t>(temperature_bits[2 * l + 1]) << 32 | temperature_bits[2 * l];
    double t;
    std::memcpy(&t, &bits, 8);
    require(std::isnan(t) || (std::isfinite(t) && t >= 0), "bad temperature");
    rt.lexeme_temperature[l] = t;
    rt.has_temperatures = rt.has_temperatures || !std::isnan(t);
    rt.has_token_budgets = rt.has_token_budgets || rt.lexeme_max_tokens[l] != 0;
    const bool chars = rt.lexeme_max_chars[l] != kNoCharBudget;
    require(!chars || per_state, "char budget without its tables");
    rt.has_char_budgets = rt.has_char_budgets || chars;
  }
  rt.state_counts_from_origin.assign(states, 0);
  for (uint32_t s = 0; s < states; ++s) {
    const uint32_t lexeme = rt.dfa_lexeme[s];
    const bool chars = rt.lexeme_max_chars[lexeme] != kNoCharBudget;
    if (per_state) {
      const int32_t target = rt.state_budget_switch[s];
      const int32_t left = rt.state_near_remaining[s];
      require(target == -1 || (chars && target >= 0 && left == -1), "bad char budget switch");
      // Every near copy the switch may pick (r = 0 .. window) is a near state of the lexeme.
      require(target < 0 || static_cast<uint64_t>(target) + rt.char_window < states,
              "char budget switch out of range");
      if (target >= 0) {
        for (uint32_t r = 0; r <= rt.char_window; ++r) {
          require(rt.dfa_lexeme[target + r] == lexeme &&
                      rt.state_near_remaining[target + r] == static_cast<int32_t>(r),
                  "char budget switch to a wrong state");
        }
      }
      require(left >= -1 && (left < 0 ||
                             (chars && static_cast<uint32_t>(left) <=
                                           std::min(rt.lexeme_max_chars[lexeme], rt.char_window))),
              "bad near budget");
      if (target >= 0) rt.state_counts_from_origin[s] = 1;
    }
    if (rt.lexeme_max_tokens[lexeme] != 0) rt.state_counts_from_origin[s] = 1;
  }
}

// Validates the capture arrays and builds the per-symbol capture index.
static void load_captures(Runtime& rt, const std::vector<uint32_t>& symbols,
                          const std::vector<uint32_t>& rule_name,
                          const std::vector<uint32_t>& marker_name,
                          const std::vector<uint32_t>& body_lexeme,
                          const std::vector<uint32_t>& marker_lexeme,
                          const std::vector<uint8_t>& stop, const std::vector<uint32_t>& offsets,
                          const std::vector<uint8_t>& bytes) {
  const size_t count = symbols.size();
  require(rule_name.size() == count && marker_name.size() == count && body_lexeme.size() == count &&
              marker_lexeme.size() == count && stop.size() == count,
          "bad capture arrays");
  require(!offsets.empty() && offsets[0] == 0 && offsets.back() == bytes.size(),
          "bad capture name offsets");
  const size_t names = offsets.size() - 1;
  // Every offset first: with the last equal to the byte count, increasing offsets keep every
  // name inside the bytes.
  for (size_t i = 0; i < names; ++i) {
    require(offsets[i] < offsets[i + 1], "empty or misordered capture name");
  }
  for (size_t i = 0; i < names; ++i) {
    std::string name(bytes.begin() + offsets[i], bytes.begin() + offsets[i + 1]);
    for (char c : name) {
      require(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.',
              "bad character in a capture name");
    }
    rt.capture_names.push_back(std::move(name));
  }
  if (count == 0) return;
  const uint64_t capturable = static_cast<uint64_t>(rt.num_nonterminals) + rt.num_lexemes;
  rt.symbol_capture.assign(capturable + rt.num_tokensets, -1);
  for (size_t i = 0; i < count; ++i) {
    require(symbols[i] < capturable, "capture symbol out of range");
    require(rt.symbol_capture[symbols[i]] == -1, "symbol captured twice");
    const bool lexeme = symbols[i] >= rt.num_nonterminals;
    require(rule_name[i] == kNoCaptureName || rule_name[i] < names, "capture name out of range");
    const bool split = marker_lexeme[i] != kNoCaptureName;
    require(split == (body_lexeme[i] != kNoCaptureName) && (!split || lexeme) &&
                (!split || (body_lexeme[i] < rt.num_lexemes && marker_lexeme[i] < rt.num_lexemes)),
            "bad capture body or marker lexeme");
    require(marker_name[i] == kNoCaptureName || (split && marker_name[i] < names),
            "bad marker capture");
    require(rule_name[i] != kNoCaptureName || marker_name[i] != kNoCaptureName,
            "captured symbol without a name");
    require(stop[i] <= 1 && (stop[i] == 0 || split), "bad capture marker");
    rt.symbol_capture[symbols[i]] = static_cast<int32_t>(i);
    rt.captured_symbols.push_back(
        {rule_name[i], marker_name[i], body_lexeme[i], marker_lexeme[i], stop[i] != 0});
  }
}

std::shared_ptr<const Runtime> load_runtime(std::string_view blob) {
  require(little_endian_host(), "the runtime needs a little-endian machine");
  auto rt = std::make_shared<Runtime>();
  BlobReader r(blob);
  require(r.u32() == kBlobMagic, "runtime tables have a bad magic number");
  uint32_t version = r.u32();
  if (version != kBlobVersion) {
    throw FormatError("runtime table version " + std::to_string(version) +
                      " is not the supported version " + std::to_string(kBlobVersion));
  }
  std::vector<uint32_t> meta;
  r.array(meta, "meta");
  require(meta.size() == kMetaSize, "bad meta block");
  rt->vocab_size = meta[0];
  rt->num_tokens = meta[1];
  rt->num_nonterminals = meta[2];
  rt->num_lexemes = meta[3];
  rt->num_tokensets = meta[4];
  rt->start = meta[5];
  rt->num_states = meta[6];
  rt->words = meta[7];
  const uint32_t num_byte_classes = meta[8];
  const uint32_t num_classes = meta[9];
  r.array(rt->prod_lhs, "prod_lhs");
  r.array(rt->prod_offsets, "prod_offsets");
  r.array(rt->prod_rhs, "prod_rhs");
  r.array(rt->lexeme_start, "lexeme_start");
  const ArrayView byte_class = r.view("dfa_byte_class", 1);
  const ArrayView class_table = r.view("dfa_class_table", 2 | 4);
  r.array(rt->dfa_accepting, "dfa_accepting");
  r.array(rt->dfa_lexeme, "dfa_lexeme");
  r.array(rt->tokenset_bits, "tokenset_bits");
  r.array(rt->end_bits, "end_bits");
  const size_t trie_key_begin = r.position();
  r.array(rt->text_bits, "text_bits");
  const ArrayView trie_byte = r.view("trie_byte", 1);
  const ArrayView trie_depth = r.view("trie_depth", 1 | 2);
  const ArrayView token_flags = r.view("trie_token_flags", 1);
  const ArrayView first_tokens = r.view("trie_first_tokens", 4);
  const ArrayView extra_tokens = r.view("trie_extra_tokens", 4);
  const size_t trie_key_end = r.position();
  const ArrayView state_class = r.view("state_class", 4);
  const ArrayView class_inside = r.view("class_inside", 4);
  const ArrayView inside_kinds = r.view("inside_kinds", 1);
  const ArrayView inside_offsets = r.view("inside_offsets", 4);
  const ArrayView inside_data = r.view("inside_data", 4);
  const ArrayView class_exit_offsets = r.view("class_exit_offsets", 4);
  const ArrayView exit_entry_byte = r.view("exit_entry_byte", 1);
  const ArrayView exit_entry_end = r.view("exit_entry_end", 4);
  const ArrayView exit_children = r.view("exit_children", 4);
  r.array(rt->lexeme_max_tokens, "lexeme_max_tokens");
  r.array(rt->lexeme_max_chars, "lexeme_max_chars");
  std::vector<uint32_t> temperature_bits, char_window;
  r.array(temperature_bits, "lexeme_temperature");
  r.array(char_window, "char_window");
  r.array(rt->state_budget_switch, "state_budget_switch");
  r.array(rt->state_near_remaining, "state_near_remaining");
  std::vector<uint32_t> capture_symbols, capture_name_offsets, capture_rule_name,
      capture_marker_name, capture_body_lexeme, capture_marker_lexeme;
  std::vector<uint8_t> capture_name_bytes, capture_stop;
  r.array(capture_symbols, "capture_symbols");
  r.array(capture_rule_name, "capture_rule_name");
  r.array(capture_marker_name, "capture_marker_name");
  r.array(capture_body_lexeme, "capture_body_lexeme");
  r.array(capture_marker_lexeme, "capture_marker_lexeme");
  r.array(capture_stop, "capture_stop");
  std::vector<uint32_t> capture_ignore_lexeme;
  r.array(capture_ignore_lexeme, "capture_ignore_lexeme");
  require(capture_ignore_lexeme.size() <= 1 &&
              (capture_ignore_lexeme.empty() || capture_ignore_lexeme[0] < rt->num_lexemes),
          "bad capture ignore lexeme");
  if (!capture_ignore_lexeme.empty()) rt->capture_ignore_lexeme = capture_ignore_lexeme[0];
  r.array(rt->state_body_end, "state_body_end");
  r.array(capture_name_offsets, "capture_name_offsets");
  r.array(capture_name_bytes, "capture_name_bytes");
  const ArrayView row_default = r.view("dfa_row_default", 2 | 4);
  const ArrayView exception_end = r.view("dfa_exception_end", 4);
  const ArrayView exception_class = r.view("dfa_exception_class", 1);
  const ArrayView exception_target = r.view("dfa_exception_target", 2 | 4);
  require(r.at_end(), "trailing bytes after the runtime tables");

  // Sizes.
  const Runtime& c = *rt;
  require(c.vocab_size >= c.num_tokens, "vocab_size below the number of tokens");
  require(c.words == (static_cast<uint64_t>(c.vocab_size) + 31) / 32, "bad mask width");
  require(c.num_nonterminals >= 1 && c.start < c.num_nonterminals, "bad start symbol");
  const uint64_t symbols =
      static_cast<uint64_t>(c.num_nonterminals) + c.num_lexemes + c.num_tokensets;
  require(symbols < (1ull << 31), "too many symbols");
  const size_t P = c.prod_lhs.size();
  require(c.prod_offsets.size() == P + 1 && c.prod_offsets[0] == 0 &&
              c.prod_offsets[P] == c.prod_rhs.size(),
          "bad production offsets");
  for (size_t p = 0; p < P; ++p) {
    require(c.prod_offsets[p] <= c.prod_offsets[p + 1], "production offsets not increasing");
    require(c.prod_lhs[p] < c.num_nonterminals, "production lhs out of range");
  }
  require(c.prod_rhs.size() + P < (1ull << 31), "too many productions");
  // Tables sized by the nonterminal count are built below, and nothing else in the blob bounds
  // it (a nonterminal left without productions takes no bytes): a count far past what the
  // productions could use is refused before anything is sized by it.
  require(c.num_nonterminals <= 4 * (static_cast<uint64_t>(P) + c.prod_rhs.size()) + 65536,
          "implausible nonterminal count");
  for (uint32_t s : c.prod_rhs) require(s < symbols, "production symbol out of range");
  require(c.lexeme_start.size() == c.num_lexemes, "bad lexeme count");
  require(c.dfa_accepting.size() == c.num_states && c.dfa_lexeme.size() == c.num_states,
          "bad DFA state arrays");
  for (uint32_t l = 0; l < c.num_lexemes; ++l) {
    require(c.lexeme_start[l] < c.num_states, "lexeme start state out of range");
    require(c.dfa_lexeme[c.lexeme_start[l]] == l, "lexeme start state owned by another lexeme");
  }
  // DFA: validated per byte class, then expanded into the dense table the matcher reads.
  require(num_byte_classes >= 1 && num_byte_classes <= 256 && byte_class.count == 256,
          "bad DFA byte classes");
  for (uint32_t b = 0; b < 256; ++b) {
    require(byte_class[b] < num_byte_classes, "DFA byte class out of range");
  }
  // Either the dense table, or per-state defaults with their exceptions (and no dense table).
  const bool compact = class_table.count == 0 && c.num_states > 0;
  if (compact) {
    require(row_default.count == c.num_states && exception_end.count == c.num_states &&
                exception_class.count == exception_target.count &&
                exception_end[c.num_states - 1] == exception_class.count,
            "bad compact DFA table size");
  } else {
    require(class_table.count == static_cast<uint64_t>(c.num_states) * num_byte_classes &&
                row_default.count == 0 && exception_end.count == 0 && exception_class.count == 0 &&
                exception_target.count == 0,
            "bad DFA table size");
  }
  auto state_id = [](const ArrayView& ids, size_t i) {
    const uint32_t raw = ids[i];
    return ids.width == 2 ? (raw == 0xffffu ? -1 : static_cast<int32_t>(raw))
                          : static_cast<int32_t>(raw);
  };
  rt->dfa_classes = num_byte_classes;
  for (uint32_t b = 0; b < 256; ++b) rt->dfa_byte_class[b] = static_cast<uint8_t>(byte_class[b]);
  rt->dfa_table.resize(static_cast<size_t>(c.num_states) * num_byte_classes);
  {
    uint32_t exception = 0;
    for (uint32_t s = 0; s < c.num_states; ++s) {
      require(c.dfa_lexeme[s] < c.num_lexemes, "DFA state lexeme out of range");
      require(c.dfa_accepting[s] <= 1, "bad accepting flag");
      int32_t* row = &rt->dfa_table[static_cast<size_t>(s) * num_byte_classes];
      auto check_target = [&](int32_t t) {
        require(t >= -1 && (t < 0 || static_cast<uint32_t>(t) < c.num_states),
                "DFA transition out of range");
        require(t < 0 || c.dfa_lexeme[t] == c.dfa_lexeme[s], "DFA transition leaves its lexeme");
      };
      if (compact) {
        // Each stored target checked once, not once per class it fills.
        const int32_t fallback = state_id(row_default, s);
        check_target(fallback);
        std::fill(row, row + num_byte_classes, fallback);
        const uint32_t end = exception_end[s];
        require(end >= exception && end <= exception_class.count, "bad DFA exception offsets");
        for (int32_t previous = -1; exception < end; ++exception) {
          const uint32_t k = exception_class[exception];
          require(static_cast<int32_t>(k) > previous && k < num_byte_classes,
                  "DFA exception classes not ascending or out of range");
          previous = static_cast<int32_t>(k);
          row[k] = state_id(exception_target, exception);
          check_target(row[k]);
        }
      } else {
        for (uint32_t k = 0; k < num_byte_classes; ++k) {
          row[k] = state_id(class_table, static_cast<size_t>(s) * num_byte_classes + k);
          check_target(row[k]);
        }
      }
    }
  }
  load_rule_limits(*rt, temperature_bits, char_window);
  require(rt->state_body_end.empty() || rt->state_body_end.size() == c.num_states,
          "bad body-end flags");
  for (size_t s = 0; s < rt->state_body_end.size(); ++s) {
    require(rt->state_body_end[s] <= 1 &&
                (rt->state_body_end[s] == 0 ||
                 (rt->has_token_budgets && rt->lexeme_max_tokens[rt->dfa_lexeme[s]] != 0 &&
                  !rt->dfa_accepting[s])),
            "bad body-end flag");
  }
  load_captures(*rt, capture_symbols, capture_rule_name, capture_marker_name, capture_body_lexeme,
                capture_marker_lexeme, capture_stop, capture_name_offsets, capture_name_bytes);
  require(c.tokenset_bits.size() == static_cast<uint64_t>(c.num_tokensets) * c.words,
          "bad token set size");
  require(c.end_bits.size() == c.words && c.text_bits.size() == c.words, "bad token bitsets");
  // Bits above num_tokens (padding ids) must be clear in every token bitset.
  auto check_bits = [&](const uint32_t* words, const char* what) {
    for (uint32_t id = c.num_tokens; id < c.words * 32; ++id) {
      if (test_bit(words, id)) throw FormatError(std::string(what) + " allows a padding id");
    }
  };
  for (uint32_t s = 0; s < c.num_tokensets; ++s) {
    check_bits(&c.tokenset_bits[static_cast<size_t>(s) * c.words], "a token set");
  }
  check_bits(c.end_bits.data(), "the end-token set");
  check_bits(c.text_bits.data(), "the text-token set");
  // End tokens a mask could also take up as something else: as text, or through a token set
  // (the compiler leaves end ids out of token sets; another writer of artifacts may not).
  std::vector<uint32_t> shadowing(c.text_bits.begin(), c.text_bits.end());
  for (uint32_t s = 0; s < c.num_tokensets; ++s) {
    const uint32_t* set = &c.tokenset_bits[static_cast<size_t>(s) * c.words];
    for (uint32_t w = 0; w < c.words; ++w) shadowing[w] |= set[w];
  }
  for (uint32_t w = 0; w < c.words; ++w) {
    for (uint32_t bits = c.end_bits[w] & shadowing[w]; bits; bits &= bits - 1) {
      rt->shadowed_end_ids.push_back(w * 32 + static_cast<uint32_t>(__builtin_ctz(bits)));
    }
  }
  // The trie tables depend only on the vocabulary: reuse the copy of an earlier blob that
  // stored the very same bytes (already validated), else decode and validate them.
  char head[kTrieKeyHead];
  std::memcpy(head, &meta[0], 4);
  std::memcpy(head + 4, &meta[1], 4);
  const std::string_view head_view(head, kTrieKeyHead);
  const std::string_view rest = blob.substr(trie_key_begin, trie_key_end - trie_key_begin);
  std::shared_ptr<const TrieTables> tables = find_trie_tables(head_view, rest);
  if (!tables) {
    std::string key(head_view);
    key.append(rest);
    tables = decode_trie(c, trie_byte, trie_depth, token_flags, first_tokens, extra_tokens,
                         std::move(key));
    remember_trie_tables(tables);
  }
  rt->trie_tables = tables;
  rt->token_bytes = SharedTable<uint8_t>(tables, tables->token_bytes);
  rt->token_begin = SharedTable<uint32_t>(tables, tables->token_begin);
  rt->token_length = SharedTable<uint32_t>(tables, tables->token_length);
  rt->trie_byte = SharedTable<uint8_t>(tables, tables->trie_byte);
  rt->trie_end = SharedTable<uint32_t>(tables, tables->trie_end);
  rt->trie_tok_offsets = SharedTable<uint32_t>(tables, tables->trie_tok_offsets);
  rt->trie_tokens = SharedTable<uint32_t>(tables, tables->trie_tokens);
  const uint32_t M = static_cast<uint32_t>(c.trie_byte.size());
  // Per-state tables through the classes of states.
  require(state_class.count == c.num_states, "bad state classes");
  rt->state_key.resize(c.num_states);
  for (uint32_t s = 0; s < c.num_states; ++s) {
    require(state_class[s] < num_classes, "state class out of range");
    // Never zero (see configuration_key).
    rt->state_key[s] = mix64((static_cast<uint64_t>(rt->dfa_lexeme[s]) << 32 | state_class[s]) +
                             0x3c6ef372fe94f82bull) |
                       1u;
  }
  // Inside sets: decoded into the dense bitsets the matcher ORs into masks.
  const uint32_t num_sets = inside_kinds.count;
  require(class_inside.count == num_classes, "bad inside index");
  for (uint32_t k = 0; k < num_classes; ++k) {
    require(class_inside[k] < num_sets, "inside index out of range");
  }
  require(inside_offsets.count == num_sets + 1ull && inside_offsets[0] == 0 &&
              inside_offsets[num_sets] == inside_data.count,
          "bad inside set offsets");
  rt->inside_bits.assign(static_cast<size_t>(num_sets) * c.words, 0);
  // Sets stored as few ids are also kept as lists: up to words / 16 tokens, setting bits one by
  // one beats ORing a whole mask (assign_inside_sets). Only the id-list encoding is kept (it
  // costs nothing here); finding the small sets among the other encodings would mean scanning
  // every set, at load or on a fill's critical path (measured: per-schema p99 +40%).
  const uint32_t sparse_limit = c.words / 16;
  rt->inside_sparse.assign(num_sets, 0);
  rt->inside_id_offsets.assign(1, 0);
  for (uint32_t set = 0; set < num_sets; ++set) {
    const uint32_t begin = inside_offsets[set], stop = inside_offsets[set + 1];
    // Every set's range must lie inside the data before it is read (only the last offset was
    // checked against the data size above: a later, smaller offset must not let an earlier
    // set read past the end).
    require(begin <= stop && stop <= inside_data.count, "bad inside set offsets");
    if (inside_kinds.data[set] == kInsideIds && stop - begin <= sparse_limit) {
      rt->inside_sparse[set] = 1;
      for (uint32_t i = begin; i < stop; ++i) rt->inside_ids.push_back(inside_data[i]);
    }
    rt->inside_id_offsets.push_back(static_cast<uint32_t>(rt->inside_ids.size()));
    uint32_t* bits = &rt->inside_bits[static_cast<size_t>(set) * c.words];
    const uint8_t kind = inside_kinds.data[set];
    if (kind == kInsideDense) {
      require(stop - begin == c.words, "bad dense inside set");
      std::memcpy(bits, inside_data.data + static_cast<size_t>(begin) * 4,
                  static_cast<size_t>(c.words) * 4);
      check_bits(bits, "an inside set");
      continue;
    }
    require(kind == kInsideIds || kind == kInsideTextExcept || kind == kInsideDelta,
            "bad inside set kind");
    uint32_t first_id = begin;
    if (kind == kInsideTextExcept) std::memcpy(bits, c.text_bits.data(), c.words * 4ull);
    if (kind == kInsideDelta) {
      // An earlier (already expanded) set, then the ids whose membership flips.
      require(begin < stop && inside_data[begin] < set, "bad inside set base");
      std::memcpy(bits, &rt->inside_bits[static_cast<size_t>(inside_data[begin]) * c.words],
                  c.words * 4ull);
      first_id = begin + 1;
    }
    uint64_t previous = 0;  // ids are strictly ascending: previous holds the last id + 1
    for (uint32_t i = first_id; i < stop; ++i) {
      const uint32_t id = inside_data[i];
      require(id >= previous && id < c.num_tokens, "inside set ids out of order or range");
      previous = static_cast<uint64_t>(id) + 1;
      if (kind == kInsideIds) {
        set_bit(bits, id);
      } else if (kind == kInsideDelta) {
        bits[id >> 5] ^= 1u << (id & 31);
      } else {
        require(test_bit(c.text_bits.data(), id), "inside set excludes a non-text token");
        bits[id >> 5] &= ~(1u << (id & 31));
      }
    }
  }
  rt->inside_index.resize(c.num_states);
  for (uint32_t s = 0; s < c.num_states; ++s) rt->inside_index[s] = class_inside[state_class[s]];
  // Exit lists: per class, ascending bytes each with a non-empty run of trie children of that
  // byte; the matcher reads them through dense 256-entry offsets per class.
  const uint32_t num_entries = exit_entry_byte.count;
  require(class_exit_offsets.count == num_classes + 1ull && class_exit_offsets[0] == 0 &&
              class_exit_offsets[num_classes] == num_entries && exit_entry_end.count == num_entries,
          "bad exit offsets");
  for (uint32_t k = 0; k < num_classes; ++k) {
    require(class_exit_offsets[k] <= class_exit_offsets[k + 1], "bad exit offsets");
  }
  {
    uint32_t previous_end = 0;
    for (uint32_t k = 0; k < num_classes; ++k) {
      for (uint32_t e = class_exit_offsets[k]; e < class_exit_offsets[k + 1]; ++e) {
        require(e == class_exit_offsets[k] || exit_entry_byte.data[e] > exit_entry_byte.data[e - 1],
                "exit bytes not ascending");
        const uint32_t entry_end = exit_entry_end[e];
        require(entry_end > previous_end && entry_end <= exit_children.count, "bad exit entry");
        for (uint32_t i = previous_end; i < entry_end; ++i) {
          const uint32_t node = exit_children[i];
          require(node >= 1 && node < M && c.trie_byte[node] == exit_entry_byte.data[e],
                  "exit child out of range");
        }
        previous_end = entry_end;
      }
    }
    require(previous_end == exit_children.count, "bad exit offsets");
  }
  // Indexed by class, not state: a bounded string's states far from its bound share a few
  // classes, and a dense 256-entry row per state made `maxLength: 4096` load in ~145 ms.
  state_class.copy_to(rt->exit_class);  // width 4, count checked to be num_states above
  rt->exit_child_offsets.resize(static_cast<size_t>(num_classes) * 256 + 1);
  exit_children.copy_to(rt->exit_children);
  {
    uint32_t position = 0;
    for (uint32_t k = 0; k < num_classes; ++k) {
      uint32_t e = class_exit_offsets[k];
      const uint32_t e_stop = class_exit_offsets[k + 1];
      uint32_t* offsets = &rt->exit_child_offsets[static_cast<size_t>(k) * 256];
      for (uint32_t b = 0; b < 256; ++b) {
        offsets[b] = position;
        if (e < e_stop && exit_entry_byte.data[e] == b) {
          position = exit_entry_end[e];
          ++e;
        }
      }
    }
    rt->exit_child_offsets[static_cast<size_t>(num_classes) * 256] = position;
  }
  rt->state_has_exits.resize(c.num_states);
  for (uint32_t s = 0; s < c.num_states; ++s) {
    const size_t row = rt->exit_row(static_cast<int32_t>(s));
    rt->state_has_exits[s] = rt->exit_child_offsets[row] != rt->exit_child_offsets[row + 256];
  }

  // Derived tables.
  rt->groups->top = std::make_unique<std::atomic<ExitGroup*>[]>(c.num_states);
  for (uint32_t s = 0; s < c.num_states; ++s) rt->groups->top[s].store(nullptr);
  rt->prod_dotted.resize(P);
  uint32_t dotted = 0;
  for (size_t p = 0; p < P; ++p) {
    rt->prod_dotted[p] = dotted;
    for (uint32_t i = c.prod_offsets[p]; i < c.prod_offsets[p + 1]; ++i) {
      rt->dotted_next.push_back(c.prod_rhs[i]);
      rt->dotted_prod.push_back(static_cast<uint32_t>(p));
    }
    rt->dotted_next.push_back(kComplete);
    rt->dotted_prod.push_back(static_cast<uint32_t>(p));
    dotted += c.prod_offsets[p + 1] - c.prod_offsets[p] + 1;
  }
  rt->dotted_accepts.assign(rt->dotted_next.size(), 0);
  for (size_t p = 0; p < P; ++p) {
    if (c.prod_lhs[p] == c.start) {
      rt->dotted_accepts[rt->prod_dotted[p] + c.prod_offsets[p + 1] - c.prod_offsets[p]] = 1;
    }
  }
  rt->nt_prod_offsets.assign(c.num_nonterminals + 1, 0);
  for (size_t p = 0; p < P; ++p) rt->nt_prod_offsets[c.prod_lhs[p] + 1]++;
  std::partial_sum(rt->nt_prod_offsets.begin(), rt->nt_prod_offsets.end(),
                   rt->nt_prod_offsets.begin());
  rt->nt_prods.resize(P);
  {
    std::vector<uint32_t> fill(rt->nt_prod_offsets.begin(), rt->nt_prod_offsets.end() - 1);
    for (size_t p = 0; p < P; ++p) rt->nt_prods[fill[c.prod_lhs[p]]++] = static_cast<uint32_t>(p);
  }
  rt->lexeme_first_offsets.assign(1, 0);
  for (uint32_t l = 0; l < c.num_lexemes; ++l) {
    for (uint32_t b = 0; b < 256; ++b) {
      if (c.next_state(static_cast<int32_t>(c.lexeme_start[l]), static_cast<uint8_t>(b)) >= 0) {
        rt->lexeme_first_bytes.push_back(static_cast<uint8_t>(b));
      }
    }
    rt->lexeme_first_offsets.push_back(static_cast<uint32_t>(rt->lexeme_first_bytes.size()));
  }
  rt->symbol_nullable.assign(c.num_nonterminals + c.num_lexemes, 0);
  for (uint32_t l = 0; l < c.num_lexemes; ++l) {
    rt->symbol_nullable[c.num_nonterminals + l] = c.dfa_accepting[c.lexeme_start[l]];
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t p = 0; p < P; ++p) {
      if (rt->symbol_nullable[c.prod_lhs[p]]) continue;
      bool all = true;
      for (uint32_t i = c.prod_offsets[p]; i < c.prod_offsets[p + 1] && all; ++i) {
        uint32_t s = c.prod_rhs[i];
        all = s < rt->symbol_nullable.size() && rt->symbol_nullable[s];
      }
      if (all) {
        rt->symbol_nullable[c.prod_lhs[p]] = 1;
        changed = true;
      }
    }
  }
  compute_prediction_closures(*rt);
  return rt;
}

uint32_t runtime_vocab_size(const Runtime& runtime) { return runtime.vocab_size; }
uint32_t runtime_mask_words(const Runtime& runtime) { return runtime.words; }

}  // namespace gramkiln
