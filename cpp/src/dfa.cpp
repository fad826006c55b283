// Byte-DFA construction: program -> Thompson NFA -> subset construction over byte classes ->
// trim -> Hopcroft minimisation -> breadth-first canonical numbering. See dfa.hpp.
//
// The NFA is built exactly as ir/automata.py's `_connect` builds it (same states, same edges,
// created in the same order), and subsets are keyed by their epsilon-closed NFA state sets as
// there, so the state-limit errors fire on exactly the same expressions. Everything after the
// subset construction only has to be correct: a minimal DFA numbered canonically is unique.
#include "dfa.hpp"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <utility>

namespace gramkiln {
namespace {

constexpr int32_t kDead = -1;
constexpr uint32_t kMaxCodepoint = 0x10FFFF;
constexpr uint32_t kSurrogateLo = 0xD800;
constexpr uint32_t kSurrogateHi = 0xDFFF;

// ---- program structure -------------------------------------------------------------------

class ProgramChecker {
 public:
  explicit ProgramChecker(const DfaInput& input) : in_(input) {}

  void check() {
    const int32_t size = static_cast<int32_t>(in_.code.size());
    if (in_.code.size() > static_cast<size_t>(INT32_MAX) / 2) {
      throw std::invalid_argument("DFA program is too large");
    }
    // The root starts at 0 and the terminal bodies follow it; each is checked on its own
    // against the end of the code, which is all that in-bounds reads need.
    node(0, size, 0);
    for (int32_t offset : in_.terminal_offsets) {
      if (offset == -1) continue;
      if (offset < 0 || offset >= size) throw std::invalid_argument("terminal offset out of range");
      node(offset, size, 0);
    }
  }

 private:
  // Checks the node at `at` (which must end by `end`) and returns the offset after it.
  int32_t node(int32_t at, int32_t end, int32_t depth) {
    if (depth > in_.max_depth) throw DfaBuildError(DfaFailure::kTooDeep, {});
    if (at < 0 || end - at < 2) throw std::invalid_argument("DFA program node out of range");
    const int32_t* p = in_.code.data() + at;
    const int32_t op = p[0], size = p[1];
    if (size < 2 || size > end - at) throw std::invalid_argument("DFA program node size is bad");
    const int32_t after = at + size;
    switch (op) {
      case kOpEmpty:
        if (size != 2) throw std::invalid_argument("bad empty node");
        break;
      case kOpBytes:
        if (size < 3 || (p[2] != 0 && p[2] != 1)) throw std::invalid_argument("bad bytes node");
        for (int32_t i = 3; i < size; ++i) {
          if (p[i] < 0 || p[i] > 255) throw std::invalid_argument("bad byte in bytes node");
        }
        break;
      case kOpClass: {
        if (size < 3 || (size - 3) % 2 != 0 || (p[2] != 0 && p[2] != 1)) {
          throw std::invalid_argument("bad class node");
        }
        int64_t previous_hi = -1;
        for (int32_t i = 3; i < size; i += 2) {
          const int64_t lo = p[i], hi = p[i + 1];
          if (lo <= previous_hi || lo > hi || hi > kMaxCodepoint) {
            throw std::invalid_argument("class ranges must be sorted, disjoint code points");
          }
          previous_hi = hi;
        }
        break;
      }
      case kOpSeq:
      case kOpChoice: {
        int32_t child = at + 2;
        while (child < after) child = node(child, after, depth + 1);
        break;
      }
      case kOpRepeat:
        if (size < 6 || p[2] < 0 || (p[3] != -1 && p[3] < p[2])) {
          throw std::invalid_argument("bad repeat node");
        }
        if (node(at + 4, after, depth + 1) != after) throw std::invalid_argument("bad repeat item");
        break;
      case kOpRef:
        if (size != 3 || p[2] < 0 || static_cast<size_t>(p[2]) >= in_.terminal_offsets.size()) {
          throw std::invalid_argument("bad terminal reference");
        }
        break;
      case kOpInvalid:
        if (size != 3) throw std::invalid_argument("bad invalid-element node");
        break;
      default:
        throw std::invalid_argument("unknown DFA program op");
    }
    return after;
  }

  const DfaInput& in_;
};

// ---- UTF-8 ---------------------------------------------------------------------------------

struct Utf8Sequence {
  uint8_t length;
  uint8_t lo[4];
  uint8_t hi[4];
};

int utf8_encode(uint32_t cp, uint8_t* out) {
  if (cp < 0x80) {
    out[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

// Same splitting as ir/utf8.py `_split_same_length` (lo and hi encode to the same length):
// cut where the range does not cover whole blocks of continuation bytes.
void split_same_length(uint32_t lo, uint32_t hi, std::vector<Utf8Sequence>& out) {
  uint8_t lo_bytes[4], hi_bytes[4];
  const int length = utf8_encode(lo, lo_bytes);
  for (int continuation = 1; continuation < length; ++continuation) {
    const uint32_t block_mask = (1u << (6 * continuation)) - 1;
    if ((lo & ~block_mask) != (hi & ~block_mask)) {
      if ((lo & block_mask) != 0) {
        split_same_length(lo, lo | block_mask, out);
        split_same_length((lo | block_mask) + 1, hi, out);
        return;
      }
      if ((hi & block_mask) != block_mask) {
        split_same_length(lo, (hi & ~block_mask) - 1, out);
        split_same_length(hi & ~block_mask, hi, out);
        return;
      }
    }
  }
  utf8_encode(hi, hi_bytes);
  Utf8Sequence sequence{};
  sequence.length = static_cast<uint8_t>(length);
  for (int i = 0; i < length; ++i) {
    sequence.lo[i] = lo_bytes[i];
    sequence.hi[i] = hi_bytes[i];
  }
  out.push_back(sequence);
}

// ir/utf8.py `utf8_sequences` for one range (surrogates skipped, cut at length changes).
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<Utf8Sequence>& out) {
  static constexpr uint32_t kLengthRanges[4][2] = {
      {0x00, 0x7F}, {0x80, 0x7FF}, {0x800, 0xFFFF}, {0x10000, kMaxCodepoint}};
  const uint32_t pieces[2][2] = {{lo, std::min(hi, kSurrogateLo - 1)},
                                 {std::max(lo, kSurrogateHi + 1), hi}};
  for (const auto& piece : pieces) {
    for (const auto& length_range : kLengthRanges) {
      const uint32_t a = std::max(piece[0], length_range[0]);
      const uint32_t b = std::min(piece[1], length_range[1]);
      if (a <= b) split_same_length(a, b, out);
    }
  }
}

// The class's UTF-8 sequences: CharClass.positive_ranges (negation applied, surrogates
// removed), each range split as utf8_sequences does, in ascending order.
std::vector<Utf8Sequence> class_sequences(const int32_t* node) {
  const int32_t size = node[1];
  const bool negated = node[2] != 0;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  for (int32_t i = 3; i < size; i += 2) {
    ranges.emplace_back(static_cast<uint32_t>(node[i]), static_cast<uint32_t>(node[i + 1]));
  }
  if (negated) {
    std::vector<std::pair<uint32_t, uint32_t>> complement;
    uint32_t next_lo = 0;
    for (const auto& [lo, hi] : ranges) {
      if (lo > next_lo) complement.emplace_back(next_lo, lo - 1);
      next_lo = std::max(next_lo, hi + 1);
    }
    if (next_lo <= kMaxCodepoint) complement.emplace_back(next_lo, kMaxCodepoint);
    ranges.swap(complement);
  }
  std::vector<Utf8Sequence> out;
  for (const auto& [lo, hi] : ranges) {
    // Removing the surrogates here (not only inside utf8_sequences) does not change the
    // sequences: utf8_sequences cuts around them in the same places either way.
    utf8_sequences(lo, hi, out);
  }
  return out;
}

// ---- Thompson NFA --------------------------------------------------------------------------

struct RangeEdge {
  int32_t from;
  int32_t to;
  uint8_t lo;
  uint8_t hi;
};

class NfaBuilder {
 public:
  explicit NfaBuilder(const DfaInput& input)
      : in_(input),
        limit_(input.max_states > INT32_MAX / 16 ? int64_t{INT32_MAX} / 2 : input.max_states * 10) {
  }

  int32_t new_state() {
    if (count_ >= limit_) throw DfaBuildError(DfaFailure::kNfaLimit, {});
    forward_to_.push_back(-1);
    return count_++;
  }

  // Mirrors automata.py `_connect`: paths from source to target spell the node at `at`.
  void connect(int32_t at, int32_t source, int32_t target, int32_t depth) {
    if (depth > in_.max_depth) throw DfaBuildError(DfaFailure::kTooDeep, {});
    const int32_t* p = in_.code.data() + at;
    const int32_t size = p[1];
    switch (p[0]) {
      case kOpEmpty:
        epsilon(source, target);
        break;
      case kOpBytes: {
        const bool folding = p[2] != 0;
        const int32_t length = size - 3;
        int32_t current = source;
        for (int32_t i = 0; i < length; ++i) {
          const int32_t next = i == length - 1 ? target : new_state();
          const int32_t byte = p[3 + i];
          if (folding && ((byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A))) {
            edge(current, byte | 0x20, byte | 0x20, next);
            edge(current, byte & ~0x20, byte & ~0x20, next);
          } else {
            edge(current, byte, byte, next);
          }
          current = next;
        }
        if (length == 0) epsilon(source, target);
        break;
      }
      case kOpClass:
        connect_class(at, source, target);
        break;
      case kOpSeq: {
        const int32_t end = at + size;
        int32_t current = source;
        int32_t child = at + 2;
        if (child == end) epsilon(source, target);
        while (child < end) {
          const int32_t after = child + in_.code[child + 1];
          if (after != end && after + in_.code[after + 1] == end) {
            // The last item is a terminal already built towards this target: the item before
            // it leads straight into that copy.
            const int32_t shared = existing_copy(after, target);
            if (shared >= 0) {
              connect(child, current, shared, depth + 1);
              break;
            }
          }
          const int32_t next = after == end ? target : new_state();
          connect(child, current, next, depth + 1);
          current = next;
          child = after;
        }
        break;
      }
      case kOpChoice: {
        const int32_t end = at + size;
        for (int32_t child = at + 2; child < end; child += in_.code[child + 1]) {
          const int32_t entry = new_state(), exit = new_state();
          epsilon(source, entry);
          forward(exit, target);
          connect(child, entry, exit, depth + 1);
        }
        break;
      }
      case kOpRepeat: {
        const int32_t min = p[2], max = p[3], item = at + 4;
        int32_t current = source;
        // Every copy creates a state first, so the loops stop at the NFA limit.
        for (int32_t i = 0; i < min; ++i) {
          const int32_t next = new_state();
          connect(item, current, next, depth + 1);
          current = next;
        }
        if (max == -1) {
          const int32_t head = new_state(), body_end = new_state();
          epsilon(current, head);
          epsilon(head, target);
          connect(item, head, body_end, depth + 1);
          epsilon(body_end, head);
        } else {
          for (int64_t i = min; i < max; ++i) {
            const int32_t next = new_state();
            epsilon(current, target);
            connect(item, current, next, depth + 1);
            current = next;
          }
          epsilon(current, target);
        }
        break;
      }
      case kOpRef: {
        const int32_t terminal = p[2];
        check_not_recursive(terminal);
        const int32_t body = in_.terminal_offsets[terminal];
        if (body < 0) throw DfaBuildError(DfaFailure::kUnknownRef, {terminal});
        // A copy of this terminal already leads to the same continuation: enter it instead of
        // building another (see `forward`).
        const int64_t copy_key = (static_cast<int64_t>(terminal) << 32) | resolve(target);
        const auto copy = copies_.find(copy_key);
        if (copy != copies_.end()) {
          epsilon(source, copy->second);
          break;
        }
        const int32_t entry = new_state(), exit = new_state();
        epsilon(source, entry);
        forward(exit, target);
        inlining_.push_back(terminal);
        connect(body, entry, exit, depth + 1);
        inlining_.pop_back();
        copies_.emplace(copy_key, entry);
        break;
      }
      default:  // kOpInvalid (the checker let nothing else through)
        throw DfaBuildError(DfaFailure::kInvalid, {p[2]});
    }
  }

  int32_t count() const { return count_; }
  const std::vector<std::pair<int32_t, int32_t>>& epsilons() const { return epsilons_; }
  const std::vector<RangeEdge>& edges() const { return edges_; }

 private:
  void epsilon(int32_t from, int32_t to) { epsilons_.emplace_back(from, to); }
  // The exit state of a choice alternative or a terminal copy: its one and only edge is this
  // epsilon (constructions add edges into their target, never out of it), so its future is
  // exactly `to`'s.
  void forward(int32_t from, int32_t to) {
    epsilon(from, to);
    forward_to_[from] = to;
  }
  void check_not_recursive(int32_t terminal) const {
    if (std::find(inlining_.begin(), inlining_.end(), terminal) != inlining_.end()) {
      std::vector<int32_t> chain = inlining_;
      chain.push_back(terminal);
      throw DfaBuildError(DfaFailure::kRecursive, std::move(chain));
    }
  }
  // When the node at `at` is a reference to a terminal with a copy built towards `target`'s
  // continuation, that copy's entry state (after the checks the reference itself would make,
  // so errors stay the same); else -1.
  int32_t existing_copy(int32_t at, int32_t target) const {
    if (in_.code[at] != kOpRef) return -1;
    const int32_t terminal = in_.code[at + 2];
    check_not_recursive(terminal);
    const auto copy = copies_.find((static_cast<int64_t>(terminal) << 32) | resolve(target));
    return copy == copies_.end() ? -1 : copy->second;
  }
  // The end of the chain of forwarding states from `state`.
  int32_t resolve(int32_t state) const {
    while (forward_to_[state] >= 0) state = forward_to_[state];
    return state;
  }
  void edge(int32_t from, int32_t lo, int32_t hi, int32_t to) {
    edges_.push_back({from, to, static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)});
  }

  // Sequences share their common suffixes, keyed by (byte range, next state), per class
  // occurrence exactly as in Python.
  void connect_class(int32_t at, int32_t source, int32_t target) {
    auto cached = sequences_.find(at);
    if (cached == sequences_.end()) {
      cached = sequences_.emplace(at, class_sequences(in_.code.data() + at)).first;
    }
    // Suffix states are shared by every class in the expression (a state with one edge and
    // nothing else has the same future wherever it is used), towards the end of the target's
    // forwarding chain.
    const int32_t end = resolve(target);
    for (const Utf8Sequence& sequence : cached->second) {
      int32_t next = end;
      for (int i = sequence.length - 1; i >= 1; --i) {
        const int64_t key =
            (static_cast<int64_t>(next) << 16) | (sequence.lo[i] << 8) | sequence.hi[i];
        auto found = suffix_states_.find(key);
        int32_t state;
        if (found == suffix_states_.end()) {
          state = new_state();
          suffix_states_.emplace(key, state);
          edge(state, sequence.lo[i], sequence.hi[i], next);
        } else {
          state = found->second;
        }
        next = state;
      }
      edge(source, sequence.lo[0], sequence.hi[0], next);
    }
  }

  const DfaInput& in_;
  int64_t limit_;
  int32_t count_ = 0;
  std::vector<std::pair<int32_t, int32_t>> epsilons_;
  std::vector<RangeEdge> edges_;
  std::vector<int32_t> inlining_;
  std::unordered_map<int32_t, std::vector<Utf8Sequence>> sequences_;
  std::vector<int32_t> forward_to_;  // per state: the state it forwards to, or -1
  // Entry state of the copy of a terminal built towards a continuation: (terminal << 32 |
  // resolved target) -> entry. A terminal used many times before the same continuation (a key
  // complement's string tail after every key prefix) is built once, which keeps the subset
  // construction near the minimal DFA instead of one subset per copy.
  std::unordered_map<int64_t, int32_t> copies_;
  std::unordered_map<int64_t, int32_t> suffix_states_;  // (next << 16 | lo << 8 | hi) -> state
};

// ---- subset construction -------------------------------------------------------------------

// Compressed adjacency (CSR) of `count` nodes.
template <typename Item>
struct Adjacency {
  std::vector<uint32_t> begin;
  std::vector<Item> items;
};

// A DFA over byte classes (columns), before expansion to 256 bytes.
struct ClassDfa {
  int32_t classes = 0;
  std::vector<int32_t> table;  // rows of `classes` entries
  std::vector<uint8_t> accepting;
  int32_t start = 0;
  size_t size() const { return accepting.size(); }
};

// Open-addressing set of sorted int32 vectors stored back to back in one pool.
class SubsetIndex {
 public:
  SubsetIndex() : slots_(1024, -1) { offsets_.push_back(0); }

  size_t size() const { return offsets_.size() - 1; }
  size_t pooled() const { return pool_.size(); }
  const int32_t* data(size_t id) const { return pool_.data() + offsets_[id]; }
  size_t length(size_t id) const { return offsets_[id + 1] - offsets_[id]; }

  // The id of `subset`, or -1 when it is new and `may_add` is false.
  int32_t find_or_add(const std::vector<int32_t>& subset, bool may_add) {
    const uint64_t hash = hash_of(subset);
    size_t mask = slots_.size() - 1;
    size_t slot = hash & mask;
    while (slots_[slot] != -1) {
      const int32_t id = slots_[slot];
      if (length(id) == subset.size() &&
          std::memcmp(data(id), subset.data(), subset.size() * sizeof(int32_t)) == 0) {
        return id;
      }
      slot = (slot + 1) & mask;
    }
    if (!may_add) return -1;
    const int32_t id = static_cast<int32_t>(size());
    pool_.insert(pool_.end(), subset.begin(), subset.end());
    offsets_.push_back(pool_.size());
    slots_[slot] = id;
    hashes_.push_back(hash);
    if (size() * 2 > slots_.size()) grow();
    return id;
  }

 private:
  static uint64_t hash_of(const std::vector<int32_t>& subset) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ subset.size();
    for (int32_t v : subset) {
      h ^= static_cast<uint32_t>(v);
      h *= 0xFF51AFD7ED558CCDull;
      h ^= h >> 32;
    }
    return h;
  }

  void grow() {
    std::vector<int32_t> slots(slots_.size() * 2, -1);
    const size_t mask = slots.size() - 1;
    for (size_t id = 0; id < size(); ++id) {
      size_t slot = hashes_[id] & mask;
      while (slots[slot] != -1) slot = (slot + 1) & mask;
      slots[slot] = static_cast<int32_t>(id);
    }
    slots_.swap(slots);
  }

  std::vector<int32_t> pool_;
  std::vector<size_t> offsets_;
  std::vector<uint64_t> hashes_;
  std::vector<int32_t> slots_;
};

ClassDfa determinise(const NfaBuilder& nfa, int32_t start, int32_t final_state, int64_t max_states,
                     std::vector<int32_t>& class_of_byte) {
  const int32_t count = nfa.count();
  // Byte classes: maximal intervals that every edge either contains or avoids.
  bool cut[257] = {};
  cut[0] = cut[256] = true;
  for (const RangeEdge& e : nfa.edges()) cut[e.lo] = cut[e.hi + 1] = true;
  class_of_byte.assign(256, 0);
  int32_t classes = 0;
  for (int b = 0; b < 256; ++b) {
    if (b > 0 && cut[b]) ++classes;
    class_of_byte[b] = classes;
  }
  ++classes;

  // CSR adjacency: epsilon successors, and byte-class edges as (first class, last class, to).
  Adjacency<int32_t> eps;
  eps.begin.assign(count + 1, 0);
  for (const auto& [from, to] : nfa.epsilons()) ++eps.begin[from + 1];
  for (int32_t s = 0; s < count; ++s) eps.begin[s + 1] += eps.begin[s];
  eps.items.resize(nfa.epsilons().size());
  {
    std::vector<uint32_t> fill(eps.begin.begin(), eps.begin.end() - 1);
    for (const auto& [from, to] : nfa.epsilons()) eps.items[fill[from]++] = to;
  }
  struct ClassEdge {
    int32_t first, last, to;
  };
  Adjacency<ClassEdge> moves;
  moves.begin.assign(count + 1, 0);
  for (const RangeEdge& e : nfa.edges()) ++moves.begin[e.from + 1];
  for (int32_t s = 0; s < count; ++s) moves.begin[s + 1] += moves.begin[s];
  moves.items.resize(nfa.edges().size());
  {
    std::vector<uint32_t> fill(moves.begin.begin(), moves.begin.end() - 1);
    for (const RangeEdge& e : nfa.edges()) {
      moves.items[fill[e.from]++] = {class_of_byte[e.lo], class_of_byte[e.hi], e.to};
    }
  }

  // The NFA states all subsets and closures hold together, bounded: nested counted
  // repetitions (`((a{0,50}){0,50}){0,50}`) give a DFA within max_states whose subsets and
  // closures each hold a large part of the NFA, quadratic in time and memory (minutes and
  // gigabytes). Real terminals stay far below (a few states a subset); past the bound the
  // build fails as a size failure, at once.
  const size_t work_limit = static_cast<size_t>(std::max<int64_t>(max_states, 4096)) * 16;

  // Only states with byte edges, and the final state, tell subsets apart: the others (the
  // epsilon-only states a closure passes through) change neither what a subset reads next
  // nor whether it accepts. Subsets keep just those, so paths through different epsilon
  // states into the same states give one DFA state, not several to be merged later.
  std::vector<uint8_t> important(count, 0);
  for (int32_t s = 0; s < count; ++s) important[s] = moves.begin[s + 1] > moves.begin[s];
  important[final_state] = 1;
  // Epsilon closures of single NFA states (their important states), computed on first use.
  std::vector<int64_t> closure_at(count, -1);
  std::vector<int32_t> closure_pool;
  std::vector<uint32_t> closure_length(count, 0);
  // Separate marks for closures and for unions: a union computes closures as it goes.
  std::vector<uint32_t> closure_mark(count, 0), union_mark(count, 0);
  uint32_t closure_stamp = 0, union_stamp = 0;
  std::vector<int32_t> stack;
  auto closure_of = [&](int32_t state) -> std::pair<const int32_t*, uint32_t> {
    if (closure_at[state] < 0) {
      ++closure_stamp;
      const size_t at = closure_pool.size();
      if (important[state]) closure_pool.push_back(state);
      closure_mark[state] = closure_stamp;
      stack.assign(1, state);
      while (!stack.empty()) {
        const int32_t s = stack.back();
        stack.pop_back();
        for (uint32_t i = eps.begin[s]; i < eps.begin[s + 1]; ++i) {
          const int32_t t = eps.items[i];
          if (closure_mark[t] != closure_stamp) {
            closure_mark[t] = closure_stamp;
            if (important[t]) closure_pool.push_back(t);
            stack.push_back(t);
          }
        }
      }
      if (closure_pool.size() > work_limit) throw DfaBuildError(DfaFailure::kWorkLimit, {});
      closure_at[state] = static_cast<int64_t>(at);
      closure_length[state] = static_cast<uint32_t>(closure_pool.size() - at);
    }
    return {closure_pool.data() + closure_at[state], closure_length[state]};
  };

  ClassDfa out;
  out.classes = classes;
  SubsetIndex index;
  std::vector<int32_t> subset;
  {
    auto [states, length] = closure_of(start);
    subset.assign(states, states + length);
    std::sort(subset.begin(), subset.end());
    index.find_or_add(subset, true);
  }
  SubsetIndex kernel_index;  // kernels seen so far, with their targets in kernel_target
  std::vector<int32_t> kernel_target;
  std::vector<int32_t> single_target(count, -1);  // the same for one-state kernels
  std::vector<ClassEdge> subset_edges;
  std::vector<int32_t> bounds, kernel, current;
  for (size_t position = 0; position < index.size(); ++position) {
    current.assign(index.data(position), index.data(position) + index.length(position));
    out.accepting.push_back(std::binary_search(current.begin(), current.end(), final_state));
    const size_t row = out.table.size();
    out.table.resize(row + classes, kDead);
    // The subset's edges cut the classes into a few runs; within a run every class has the
    // same kernel (the NFA states its edges lead to, before closure), so the same target.
    subset_edges.clear();
    bounds.clear();
    for (int32_t s : current) {
      for (uint32_t i = moves.begin[s]; i < moves.begin[s + 1]; ++i) {
        const ClassEdge& e = moves.items[i];
        subset_edges.push_back(e);
        bounds.push_back(e.first);
        bounds.push_back(e.last + 1);
      }
    }
    std::sort(bounds.begin(), bounds.end());
    bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
    for (size_t run = 0; run + 1 < bounds.size(); ++run) {
      const int32_t run_first = bounds[run], run_end = bounds[run + 1];
      kernel.clear();
      for (const ClassEdge& e : subset_edges) {
        if (e.first <= run_first && run_first <= e.last) kernel.push_back(e.to);
      }
      if (kernel.empty()) continue;
      std::sort(kernel.begin(), kernel.end());
      kernel.erase(std::unique(kernel.begin(), kernel.end()), kernel.end());
      // The target depends only on the kernel, and kernels recur across subsets: look it up
      // before computing (and hashing) the closed set.
      // Most kernels are one NFA state: those skip the hash table.
      int32_t target;
      const bool single = kernel.size() == 1;
      const int32_t known =
          single ? single_target[kernel[0]] : kernel_index.find_or_add(kernel, false);
      if (single && known >= 0) {
        target = known;
      } else if (known >= 0) {
        target = kernel_target[known];
      } else {
        ++union_stamp;
        subset.clear();
        for (int32_t t : kernel) {
          auto [states, length] = closure_of(t);
          for (uint32_t i = 0; i < length; ++i) {
            if (union_mark[states[i]] != union_stamp) {
              union_mark[states[i]] = union_stamp;
              subset.push_back(states[i]);
            }
          }
        }
        std::sort(subset.begin(), subset.end());
        target = index.find_or_add(subset, false);
        if (target < 0) {
          if (static_cast<int64_t>(index.size()) >= max_states) {
            throw DfaBuildError(DfaFailure::kDfaLimit, {});
          }
          target = index.find_or_add(subset, true);
          if (index.pooled() + closure_pool.size() > work_limit) {
            throw DfaBuildError(DfaFailure::kWorkLimit, {});
          }
        }
        if (single) {
          single_target[kernel[0]] = target;
        } else {
          kernel_index.find_or_add(kernel, true);
          kernel_target.push_back(target);
        }
      }
      std::fill(out.table.begin() + row + run_first, out.table.begin() + row + run_end, target);
    }
  }
  return out;
}

// ---- trim ----------------------------------------------------------------------------------

using Incoming = Adjacency<std::pair<int32_t, int32_t>>;  // per target: (symbol, source)

// Live (non-dead) transitions grouped by target, each as (symbol, source).
Incoming incoming_transitions(const ClassDfa& dfa) {
  const int32_t n = static_cast<int32_t>(dfa.size());
  const int32_t k = dfa.classes;
  Incoming incoming;
  incoming.begin.assign(n + 1, 0);
  for (int32_t t : dfa.table) {
    if (t != kDead) ++incoming.begin[t + 1];
  }
  for (int32_t s = 0; s < n; ++s) incoming.begin[s + 1] += incoming.begin[s];
  incoming.items.resize(incoming.begin[n]);
  std::vector<uint32_t> fill(incoming.begin.begin(), incoming.begin.end() - 1);
  for (int32_t s = 0; s < n; ++s) {
    const int32_t* row = dfa.table.data() + static_cast<size_t>(s) * k;
    for (int32_t c = 0; c < k; ++c) {
      if (row[c] != kDead) incoming.items[fill[row[c]]++] = {c, s};
    }
  }
  return incoming;
}

// Which states are reachable from the start and can reach acceptance. The subset
// construction only creates reachable states, so the forward pass is needed only after the
// lazy cut removed edges.
std::vector<uint8_t> live_states(const ClassDfa& dfa, const Incoming& incoming, bool lazy) {
  const int32_t n = static_cast<int32_t>(dfa.size());
  const int32_t k = dfa.classes;
  std::vector<uint8_t> reachable(n, 1), useful(n, 0);
  std::vector<int32_t> queue;
  if (lazy) {
    std::fill(reachable.begin(), reachable.end(), 0);
    reachable[dfa.start] = 1;
    queue.push_back(dfa.start);
    for (size_t i = 0; i < queue.size(); ++i) {
      const int32_t* row = dfa.table.data() + static_cast<size_t>(queue[i]) * k;
      for (int32_t c = 0; c < k; ++c) {
        if (row[c] != kDead && !reachable[row[c]]) {
          reachable[row[c]] = 1;
          queue.push_back(row[c]);
        }
      }
    }
    queue.clear();
  }
  for (int32_t s = 0; s < n; ++s) {
    if (dfa.accepting[s]) {
      useful[s] = 1;
      queue.push_back(s);
    }
  }
  for (size_t i = 0; i < queue.size(); ++i) {
    const int32_t t = queue[i];
    for (uint32_t j = incoming.begin[t]; j < incoming.begin[t + 1]; ++j) {
      const int32_t s = incoming.items[j].second;
      if (!useful[s]) {
        useful[s] = 1;
        queue.push_back(s);
      }
    }
  }
  for (int32_t s = 0; s < n; ++s) useful[s] &= reachable[s];
  return useful;
}

// The DFA restricted to the `keep` states (in their old order); start -1 if it is dropped.
ClassDfa restrict_to(const ClassDfa& dfa, const std::vector<uint8_t>& keep) {
  const int32_t n = static_cast<int32_t>(dfa.size());
  const int32_t k = dfa.classes;
  ClassDfa out;
  out.classes = k;
  if (!keep[dfa.start]) {
    out.start = kDead;
    return out;
  }
  std::vector<int32_t> renumber(n, kDead);
  int32_t kept = 0;
  for (int32_t s = 0; s < n; ++s) {
    if (keep[s]) renumber[s] = kept++;
  }
  out.table.reserve(static_cast<size_t>(kept) * k);
  for (int32_t s = 0; s < n; ++s) {
    if (!keep[s]) continue;
    for (int32_t c = 0; c < k; ++c) {
      const int32_t t = dfa.table[static_cast<size_t>(s) * k + c];
      out.table.push_back(t == kDead ? kDead : renumber[t]);
    }
    out.accepting.push_back(dfa.accepting[s]);
  }
  out.start = renumber[dfa.start];
  return out;
}

// ---- Hopcroft minimisation -----------------------------------------------------------------

// The block of every state of a trimmed DFA under the coarsest partition that respects
// acceptance and transitions. An explicit sink (state n) completes the DFA. It keeps a block
// of its own (in a trimmed DFA no state is equivalent to it), and that block is the one
// initial block left out of the splitters: refining by every other initial block implies
// refining by it, and so its huge in-degree (every dead transition) is never scanned.
std::vector<int32_t> hopcroft_blocks(const ClassDfa& dfa, const Incoming& incoming) {
  const int32_t n = static_cast<int32_t>(dfa.size());
  const int32_t k = dfa.classes;
  const int32_t sink = n;

  // Partition refinement: the members of block b are elements[first[b] .. end[b]); a split
  // moves the marked members to the front and cuts there.
  std::vector<int32_t> elements, position(n + 1), block_of(n + 1);
  std::vector<int32_t> first, end, marked;
  std::vector<uint8_t> pending_flag;
  std::vector<int32_t> pending;
  elements.reserve(n + 1);
  auto add_block = [&](const std::vector<int32_t>& members) {
    const int32_t b = static_cast<int32_t>(first.size());
    first.push_back(static_cast<int32_t>(elements.size()));
    for (int32_t s : members) {
      position[s] = static_cast<int32_t>(elements.size());
      block_of[s] = b;
      elements.push_back(s);
    }
    end.push_back(static_cast<int32_t>(elements.size()));
    marked.push_back(0);
    pending_flag.push_back(1);
    pending.push_back(b);
  };
  {
    std::vector<int32_t> finals, others;
    for (int32_t s = 0; s < n; ++s) (dfa.accepting[s] ? finals : others).push_back(s);
    if (!finals.empty()) add_block(finals);
    if (!others.empty()) add_block(others);
  }
  // The sink's block: not a splitter (see above).
  first.push_back(static_cast<int32_t>(elements.size()));
  position[sink] = static_cast<int32_t>(elements.size());
  block_of[sink] = static_cast<int32_t>(end.size());
  elements.push_back(sink);
  end.push_back(static_cast<int32_t>(elements.size()));
  marked.push_back(0);
  pending_flag.push_back(0);

  std::vector<std::vector<int32_t>> sources_by_symbol(k);
  std::vector<int32_t> touched_symbols, touched_blocks, splitter;
  while (!pending.empty()) {
    const int32_t b = pending.back();
    pending.pop_back();
    pending_flag[b] = 0;
    // Gather the splitter's predecessors per symbol first: a snapshot of the splitter. The
    // sink is never in a splitter, so only live transitions are involved.
    splitter.assign(elements.begin() + first[b], elements.begin() + end[b]);
    for (int32_t a : touched_symbols) sources_by_symbol[a].clear();
    touched_symbols.clear();
    for (int32_t t : splitter) {
      for (uint32_t i = incoming.begin[t]; i < incoming.begin[t + 1]; ++i) {
        const auto [symbol, source] = incoming.items[i];
        if (sources_by_symbol[symbol].empty()) touched_symbols.push_back(symbol);
        sources_by_symbol[symbol].push_back(source);
      }
    }
    for (int32_t a : touched_symbols) {
      // A DFA has one successor per symbol: each source appears at most once here.
      touched_blocks.clear();
      for (int32_t s : sources_by_symbol[a]) {
        const int32_t block = block_of[s];
        if (marked[block] == 0) touched_blocks.push_back(block);
        const int32_t slot = first[block] + marked[block];
        const int32_t displaced = elements[slot];
        std::swap(elements[slot], elements[position[s]]);
        position[displaced] = position[s];
        position[s] = slot;
        ++marked[block];
      }
      for (int32_t block : touched_blocks) {
        const int32_t inside = marked[block];
        marked[block] = 0;
        const int32_t size = end[block] - first[block];
        if (inside == size) continue;
        // The marked front becomes a new block; the old number keeps the rest.
        const int32_t fresh = static_cast<int32_t>(first.size());
        first.push_back(first[block]);
        end.push_back(first[block] + inside);
        marked.push_back(0);
        pending_flag.push_back(0);
        first[block] += inside;
        for (int32_t i = first[fresh]; i < end[fresh]; ++i) block_of[elements[i]] = fresh;
        const int32_t chosen = (pending_flag[block] || inside <= size - inside) ? fresh : block;
        if (!pending_flag[chosen]) {
          pending_flag[chosen] = 1;
          pending.push_back(chosen);
        }
      }
    }
  }
  block_of.resize(n);
  return block_of;
}

// ---- canonical numbering -------------------------------------------------------------------

// Merges each block into one state, numbers states breadth-first from the start in byte
// order (classes are ascending byte intervals, so class order is byte order), and expands
// the columns to 256 bytes.
DfaOutput canonical(const ClassDfa& dfa, const std::vector<int32_t>& block_of,
                    const std::vector<int32_t>& class_of_byte) {
  const int32_t n = static_cast<int32_t>(dfa.size());
  const int32_t k = dfa.classes;
  int32_t blocks = 0;
  for (int32_t b : block_of) blocks = std::max(blocks, b + 1);
  std::vector<int32_t> representative(blocks, -1);
  for (int32_t s = 0; s < n; ++s) {
    if (representative[block_of[s]] < 0) representative[block_of[s]] = s;
  }
  std::vector<int32_t> number(blocks, kDead), order;
  const int32_t start_block = block_of[dfa.start];
  number[start_block] = 0;
  order.push_back(start_block);
  for (size_t i = 0; i < order.size(); ++i) {
    const int32_t* row = dfa.table.data() + static_cast<size_t>(representative[order[i]]) * k;
    for (int32_t c = 0; c < k; ++c) {
      if (row[c] == kDead) continue;
      const int32_t b = block_of[row[c]];
      if (number[b] == kDead) {
        number[b] = static_cast<int32_t>(order.size());
        order.push_back(b);
      }
    }
  }
  DfaOutput out;
  out.start = 0;
  out.accepting.resize(order.size());
  out.table.resize(order.size() * 256);
  for (size_t i = 0; i < order.size(); ++i) {
    const int32_t rep = representative[order[i]];
    out.accepting[i] = dfa.accepting[rep];
    const int32_t* row = dfa.table.data() + static_cast<size_t>(rep) * k;
    int32_t* out_row = out.table.data() + i * 256;
    for (int byte = 0; byte < 256; ++byte) {
      const int32_t t = row[class_of_byte[byte]];
      out_row[byte] = t == kDead ? kDead : number[block_of[t]];
    }
  }
  return out;
}

}  // namespace

DfaOutput build_byte_dfa(const DfaInput& input) {
  if (input.max_states < 1) throw std::invalid_argument("max_states must be at least 1");
  ProgramChecker(input).check();
  NfaBuilder nfa(input);
  const int32_t start = nfa.new_state(), final_state = nfa.new_state();
  nfa.connect(0, start, final_state, 0);
  std::vector<int32_t> class_of_byte;
  ClassDfa dfa = determinise(nfa, start, final_state, input.max_states, class_of_byte);
  if (input.lazy) {
    // Committed-shortest: accepting states keep no outgoing edges.
    for (size_t s = 0; s < dfa.size(); ++s) {
      if (dfa.accepting[s]) {
        std::fill_n(dfa.table.begin() + s * dfa.classes, dfa.classes, kDead);
      }
    }
  }
  Incoming incoming = incoming_transitions(dfa);
  const std::vector<uint8_t> keep = live_states(dfa, incoming, input.lazy);
  if (std::find(keep.begin(), keep.end(), 0) != keep.end()) {
    // Rare (dead ends in the expression, or the lazy cut): compact, then start over.
    dfa = restrict_to(dfa, keep);
    if (dfa.start == kDead) return DfaOutput{};
    incoming = incoming_transitions(dfa);
  }
  return canonical(dfa, hopcroft_blocks(dfa, incoming), class_of_byte);
}

}  // namespace gramkiln
