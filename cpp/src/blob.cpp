// The runtime blob: building it from a grammar and a vocabulary, and loading it with full
// validation. Layout: magic, version, then a fixed sequence of arrays, each a u32 element count,
// a u32 element width (1 or 4) and the little-endian elements padded to 4 bytes.
#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime_internal.hpp"

namespace gramkiln {
namespace {

// Mask walks recurse once per lexeme boundary inside a token, so token length bounds the
// recursion depth; 4096 bytes keeps it far inside any thread's stack (real vocabularies stay
// under a few hundred bytes per token).
constexpr uint32_t kMaxTokenLength = 4096;
constexpr uint32_t kMaxStoredToken = 1u << 16;  // special tokens are never walked
constexpr uint32_t kNoToken = 0xffffffffu;

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
    for (const T& v : values) {
      for (size_t i = 0; i < sizeof(T); ++i) {
        out_.push_back(static_cast<char>((static_cast<uint32_t>(v) >> (8 * i)) & 0xff));
      }
    }
    while (out_.size() % 4) out_.push_back('\0');
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class BlobReader {
 public:
  explicit BlobReader(std::string_view data) : data_(data) {}
  uint32_t u32() {
    if (pos_ + 4 > data_.size()) throw FormatError("runtime tables are truncated");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
    pos_ += 4;
    return v;
  }
  template <typename T>
  void array(std::vector<T>& out, const char* what) {
    uint32_t count = u32();
    uint32_t width = u32();
    if (width != sizeof(T)) throw FormatError(std::string("bad element width in ") + what);
    uint64_t bytes = static_cast<uint64_t>(count) * width;
    if (bytes > data_.size() - pos_) throw FormatError(std::string("truncated array ") + what);
    out.resize(count);
    if (count) {
      // Little-endian host assumed (checked at load); memcpy keeps this a bulk copy.
      std::memcpy(out.data(), data_.data() + pos_, bytes);
    }
    pos_ += bytes;
    while (pos_ % 4) {
      if (pos_ >= data_.size()) throw FormatError("runtime tables are truncated");
      ++pos_;
    }
  }
  bool at_end() const { return pos_ == data_.size(); }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

// Takes a C string so that passing checks (millions per load) never build a std::string.
void require(bool ok, const char* why) {
  if (!ok) throw FormatError(why);
}

// Token trie in depth-first order: node 0 is the root; a node's descendants are the nodes
// (n, end[n]). Children appear in increasing byte order, so the layout is deterministic.
struct Trie {
  std::vector<uint8_t> byte{0};
  std::vector<uint32_t> end{0};
  std::vector<uint32_t> tok_offsets{0};
  std::vector<uint32_t> tokens;
};

Trie build_trie(const VocabSpec& vocab) {
  std::vector<uint32_t> ids;
  for (uint32_t id = 0; id < vocab.tokens.size(); ++id) {
    if (vocab.is_text[id] && !vocab.tokens[id].empty()) ids.push_back(id);
  }
  std::stable_sort(ids.begin(), ids.end(),
                   [&](uint32_t a, uint32_t b) { return vocab.tokens[a] < vocab.tokens[b]; });
  Trie trie;
  std::vector<uint32_t> path{0};  // node ids along the current prefix; path[d] at depth d
  std::string prefix;
  auto close_to = [&](size_t depth) {
    while (path.size() > depth + 1) {
      trie.end[path.back()] = static_cast<uint32_t>(trie.byte.size());
      path.pop_back();
      prefix.pop_back();
    }
  };
  std::vector<std::vector<uint32_t>> node_tokens(1);
  for (uint32_t id : ids) {
    const std::string& t = vocab.tokens[id];
    size_t common = 0;
    while (common < prefix.size() && common < t.size() && prefix[common] == t[common]) ++common;
    close_to(common);
    for (size_t d = common; d < t.size(); ++d) {
      uint32_t node = static_cast<uint32_t>(trie.byte.size());
      trie.byte.push_back(static_cast<uint8_t>(t[d]));
      trie.end.push_back(0);
      node_tokens.emplace_back();
      path.push_back(node);
      prefix.push_back(t[d]);
    }
    node_tokens[path.back()].push_back(id);
  }
  close_to(0);
  trie.end[0] = static_cast<uint32_t>(trie.byte.size());
  for (auto& list : node_tokens) {
    for (uint32_t id : list) trie.tokens.push_back(id);
    trie.tok_offsets.push_back(static_cast<uint32_t>(trie.tokens.size()));
  }
  return trie;
}

}  // namespace

std::string build_runtime_blob(const GrammarSpec& g, const VocabSpec& v) {
  const uint32_t num_states = static_cast<uint32_t>(g.dfa_accepting.size());
  const uint32_t num_lexemes = static_cast<uint32_t>(g.lexeme_start.size());
  require(!g.tokenset_offsets.empty(), "tokenset_offsets needs a leading 0");
  const uint32_t num_tokensets = static_cast<uint32_t>(g.tokenset_offsets.size() - 1);
  require(v.tokens.size() <= v.vocab_size, "vocab_size is smaller than the token list");
  require(v.is_text.size() == v.tokens.size(), "is_text must have one flag per token");
  const uint32_t words = (v.vocab_size + 31) / 32;
  const uint32_t num_tokens = static_cast<uint32_t>(v.tokens.size());

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
  std::vector<uint32_t> end_bits(words, 0), text_bits(words, 0);
  for (uint32_t id : v.end_tokens) {
    require(id < num_tokens, "end token id out of range");
    set_bit(end_bits.data(), id);
  }
  for (uint32_t id = 0; id < num_tokens; ++id) {
    const std::string& t = v.tokens[id];
    require(!v.is_text[id] || t.size() <= kMaxTokenLength, "a text token is longer than 4096 bytes");
    require(t.size() <= kMaxStoredToken, "a token is longer than 65536 bytes");
    if (v.is_text[id] && !t.empty()) set_bit(text_bits.data(), id);
  }
  require(g.dfa_table.size() == static_cast<size_t>(num_states) * 256, "bad DFA table size");

  // Per DFA state: the tokens that stay inside the lexeme (deduplicated bitsets) and the trie
  // nodes where the lexeme can end with more token bytes to follow (decided at run time).
  Trie trie = build_trie(v);
  const uint32_t num_nodes = static_cast<uint32_t>(trie.byte.size());
  std::vector<uint32_t> inside_index(num_states), inside_bits, exit_offsets{0}, exit_nodes;
  // Children of exit nodes, grouped by state then byte, so the run time only visits children
  // whose byte can start a lexeme expected after the exit.
  std::vector<uint32_t> exit_child_offsets{0}, exit_children;
  std::vector<std::vector<uint32_t>> by_byte(256);
  std::map<std::vector<uint32_t>, uint32_t> bitset_ids;
  std::vector<uint32_t> bits(words);
  std::vector<std::pair<uint32_t, int32_t>> stack;  // (node, state after the node's byte)
  for (uint32_t s = 0; s < num_states; ++s) {
    std::fill(bits.begin(), bits.end(), 0);
    stack.clear();
    for (uint32_t c = 1; c < num_nodes; c = trie.end[c]) stack.emplace_back(c, s);
    while (!stack.empty()) {
      auto [node, from] = stack.back();
      stack.pop_back();
      int32_t next = g.dfa_table[static_cast<size_t>(from) * 256 + trie.byte[node]];
      if (next < 0) continue;
      for (uint32_t i = trie.tok_offsets[node]; i < trie.tok_offsets[node + 1]; ++i) {
        set_bit(bits.data(), trie.tokens[i]);
      }
      bool has_children = trie.end[node] > node + 1;
      if (has_children && g.dfa_accepting[next]) exit_nodes.push_back(node);
      for (uint32_t c = node + 1; c < trie.end[node]; c = trie.end[c]) stack.emplace_back(c, next);
    }
    // The stack visits nodes in reverse order; sort so the list is canonical.
    std::sort(exit_nodes.begin() + exit_offsets.back(), exit_nodes.end());
    for (auto& list : by_byte) list.clear();
    for (uint32_t e = exit_offsets.back(); e < exit_nodes.size(); ++e) {
      const uint32_t node = exit_nodes[e];
      for (uint32_t c = node + 1; c < trie.end[node]; c = trie.end[c]) by_byte[trie.byte[c]].push_back(c);
    }
    for (const auto& list : by_byte) {
      exit_children.insert(exit_children.end(), list.begin(), list.end());
      exit_child_offsets.push_back(static_cast<uint32_t>(exit_children.size()));
    }
    exit_nodes.resize(exit_offsets.back());
    auto found = bitset_ids.find(bits);
    if (found == bitset_ids.end()) {
      uint32_t id = static_cast<uint32_t>(bitset_ids.size());
      bitset_ids.emplace(bits, id);
      inside_bits.insert(inside_bits.end(), bits.begin(), bits.end());
      inside_index[s] = id;
    } else {
      inside_index[s] = found->second;
    }
  }

  BlobWriter w;
  w.u32(kBlobMagic);
  w.u32(kBlobVersion);
  std::vector<uint32_t> meta{v.vocab_size,   num_tokens, g.num_nonterminals, num_lexemes,
                             num_tokensets,  g.start,    num_states,         words};
  w.array(meta);
  w.array(g.prod_lhs);
  w.array(g.prod_offsets);
  w.array(g.prod_rhs);
  w.array(g.lexeme_start);
  w.array(g.dfa_table);
  w.array(g.dfa_accepting);
  w.array(g.dfa_lexeme);
  w.array(tokenset_bits);
  w.array(end_bits);
  w.array(text_bits);
  // The trie is stored compactly: bytes, depths, the first token of each node and the rare
  // extra tokens of nodes shared by several ids; the loader rebuilds ranges and offsets.
  std::vector<uint16_t> depth(num_nodes, 0);
  std::vector<uint32_t> node_token(num_nodes, kNoToken), extra_tokens;
  for (uint32_t n = 0; n < num_nodes; ++n) {
    for (uint32_t c = n + 1; c < trie.end[n]; c = trie.end[c]) {
      depth[c] = static_cast<uint16_t>(depth[n] + 1);
    }
    for (uint32_t i = trie.tok_offsets[n]; i < trie.tok_offsets[n + 1]; ++i) {
      if (i == trie.tok_offsets[n]) {
        node_token[n] = trie.tokens[i];
      } else {
        extra_tokens.push_back(n);
        extra_tokens.push_back(trie.tokens[i]);
      }
    }
  }
  w.array(trie.byte);
  w.array(depth);
  w.array(node_token);
  w.array(extra_tokens);
  w.array(inside_index);
  w.array(inside_bits);
  w.array(exit_child_offsets);
  w.array(exit_children);
  std::string blob = w.take();
  // Validate what we wrote with the loader, so the builder can never emit a blob the runtime
  // would refuse.
  load_runtime(blob);
  return blob;
}

std::shared_ptr<const Runtime> load_runtime(std::string_view blob) {
  {
    const uint32_t probe = 1;
    uint8_t first;
    std::memcpy(&first, &probe, 1);
    require(first == 1, "the runtime needs a little-endian machine");
  }
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
  require(meta.size() == 8, "bad meta block");
  rt->vocab_size = meta[0];
  rt->num_tokens = meta[1];
  rt->num_nonterminals = meta[2];
  rt->num_lexemes = meta[3];
  rt->num_tokensets = meta[4];
  rt->start = meta[5];
  rt->num_states = meta[6];
  rt->words = meta[7];
  r.array(rt->prod_lhs, "prod_lhs");
  r.array(rt->prod_offsets, "prod_offsets");
  r.array(rt->prod_rhs, "prod_rhs");
  r.array(rt->lexeme_start, "lexeme_start");
  r.array(rt->dfa_table, "dfa_table");
  r.array(rt->dfa_accepting, "dfa_accepting");
  r.array(rt->dfa_lexeme, "dfa_lexeme");
  r.array(rt->tokenset_bits, "tokenset_bits");
  r.array(rt->end_bits, "end_bits");
  r.array(rt->text_bits, "text_bits");
  std::vector<uint16_t> trie_depth;
  std::vector<uint32_t> node_token, extra_tokens;
  r.array(rt->trie_byte, "trie_byte");
  r.array(trie_depth, "trie_depth");
  r.array(node_token, "trie_node_token");
  r.array(extra_tokens, "trie_extra_tokens");
  r.array(rt->inside_index, "inside_index");
  r.array(rt->inside_bits, "inside_bits");
  r.array(rt->exit_child_offsets, "exit_child_offsets");
  r.array(rt->exit_children, "exit_children");
  require(r.at_end(), "trailing bytes after the runtime tables");

  // Sizes.
  const Runtime& c = *rt;
  require(c.vocab_size >= c.num_tokens, "vocab_size below the number of tokens");
  require(c.words == (static_cast<uint64_t>(c.vocab_size) + 31) / 32, "bad mask width");
  require(c.num_nonterminals >= 1 && c.start < c.num_nonterminals, "bad start symbol");
  const uint64_t symbols = static_cast<uint64_t>(c.num_nonterminals) + c.num_lexemes + c.num_tokensets;
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
  for (uint32_t s : c.prod_rhs) require(s < symbols, "production symbol out of range");
  require(c.lexeme_start.size() == c.num_lexemes, "bad lexeme count");
  require(c.dfa_table.size() == static_cast<uint64_t>(c.num_states) * 256, "bad DFA table size");
  require(c.dfa_accepting.size() == c.num_states && c.dfa_lexeme.size() == c.num_states,
          "bad DFA state arrays");
  for (uint32_t l = 0; l < c.num_lexemes; ++l) {
    require(c.lexeme_start[l] < c.num_states, "lexeme start state out of range");
    require(c.dfa_lexeme[c.lexeme_start[l]] == l, "lexeme start state owned by another lexeme");
  }
  for (uint32_t s = 0; s < c.num_states; ++s) {
    require(c.dfa_lexeme[s] < c.num_lexemes, "DFA state lexeme out of range");
    require(c.dfa_accepting[s] <= 1, "bad accepting flag");
    for (uint32_t b = 0; b < 256; ++b) {
      int32_t t = c.dfa_table[static_cast<size_t>(s) * 256 + b];
      require(t >= -1 && (t < 0 || static_cast<uint32_t>(t) < c.num_states),
              "DFA transition out of range");
      require(t < 0 || c.dfa_lexeme[t] == c.dfa_lexeme[s], "DFA transition leaves its lexeme");
    }
  }
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
  // Trie: depths must describe a depth-first order (root at 0, each node at most one deeper
  // than the previous). One pass rebuilds subtree ranges and token offsets from them, checks
  // every token id, and rebuilds token bytes (not stored: a text token's bytes are its path).
  const uint32_t M = static_cast<uint32_t>(c.trie_byte.size());
  require(M >= 1 && trie_depth.size() == M && node_token.size() == M && trie_depth[0] == 0,
          "bad trie root");
  require(node_token[0] == kNoToken, "a token at the trie root");
  require(extra_tokens.size() % 2 == 0, "bad trie extra tokens");
  {
    const uint32_t* text = c.text_bits.data();
    std::vector<uint32_t>& end = rt->trie_end;
    std::vector<uint32_t>& offsets = rt->trie_tok_offsets;
    std::vector<uint32_t>& tokens = rt->trie_tokens;
    end.assign(M, M);
    offsets.assign(M + 1, 0);
    tokens.clear();
    tokens.reserve(c.num_tokens);
    rt->token_begin.assign(c.num_tokens, 0);
    rt->token_length.assign(c.num_tokens, 0);
    std::vector<uint8_t> seen(c.num_tokens, 0);
    std::vector<uint8_t> path(kMaxTokenLength + 1);
    std::vector<uint32_t> open{0};
    size_t extra = 0;
    auto add_token = [&](uint32_t id, uint32_t begin, uint32_t depth) {
      require(id < c.num_tokens && test_bit(text, id), "bad trie token id");
      require(!seen[id], "a token appears twice in the trie");
      seen[id] = 1;
      tokens.push_back(id);
      rt->token_begin[id] = begin;
      rt->token_length[id] = depth;
    };
    for (uint32_t n = 1; n < M; ++n) {
      const uint32_t depth = trie_depth[n];
      require(depth >= 1 && depth <= trie_depth[n - 1] + 1u && depth <= kMaxTokenLength,
              "bad trie depth");
      while (open.size() > depth) {
        end[open.back()] = n;
        open.pop_back();
      }
      open.push_back(n);
      path[depth - 1] = c.trie_byte[n];
      offsets[n] = static_cast<uint32_t>(tokens.size());
      if (node_token[n] != kNoToken) {
        const uint32_t begin = static_cast<uint32_t>(rt->token_bytes.size());
        rt->token_bytes.insert(rt->token_bytes.end(), path.begin(), path.begin() + depth);
        add_token(node_token[n], begin, depth);
        for (; extra < extra_tokens.size() && extra_tokens[extra] == n; extra += 2) {
          add_token(extra_tokens[extra + 1], begin, depth);
        }
      }
      require(extra >= extra_tokens.size() || extra_tokens[extra] > n,
              "bad or unsorted trie extra tokens");
    }
    offsets[M] = static_cast<uint32_t>(tokens.size());
    require(extra == extra_tokens.size(), "bad trie extra tokens");
    for (uint32_t id = 0; id < c.num_tokens; ++id) {
      require(test_bit(text, id) == (seen[id] != 0), "text token not in trie");
    }
  }
  require(c.inside_index.size() == c.num_states, "bad inside index");
  require(c.words == 0 || c.inside_bits.size() % c.words == 0, "bad inside bitsets");
  const uint64_t num_bitsets = c.words ? c.inside_bits.size() / c.words : 0;
  for (uint32_t i : c.inside_index) require(i < num_bitsets, "inside index out of range");
  for (uint64_t b = 0; b < num_bitsets; ++b) {
    check_bits(&c.inside_bits[b * c.words], "an inside set");
  }
  require(c.exit_child_offsets.size() == static_cast<uint64_t>(c.num_states) * 256 + 1 &&
              c.exit_child_offsets[0] == 0 &&
              c.exit_child_offsets.back() == c.exit_children.size(),
          "bad exit offsets");
  // All offsets must be checked monotone (hence in range) before any range is read.
  for (uint64_t k = 0; k + 1 < c.exit_child_offsets.size(); ++k) {
    require(c.exit_child_offsets[k] <= c.exit_child_offsets[k + 1], "bad exit offsets");
  }
  for (uint64_t k = 0; k + 1 < c.exit_child_offsets.size(); ++k) {
    for (uint32_t e = c.exit_child_offsets[k]; e < c.exit_child_offsets[k + 1]; ++e) {
      const uint32_t n = c.exit_children[e];
      require(n >= 1 && n < M && c.trie_byte[n] == k % 256, "exit child out of range");
    }
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
      if (c.dfa_table[static_cast<size_t>(c.lexeme_start[l]) * 256 + b] >= 0) {
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
  return rt;
}

uint32_t runtime_vocab_size(const Runtime& runtime) { return runtime.vocab_size; }
uint32_t runtime_mask_words(const Runtime& runtime) { return runtime.words; }

}  // namespace gramkiln
