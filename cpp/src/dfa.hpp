// Byte-DFA construction for terminal-only expressions (the native half of ir/automata.py).
//
// The Python side encodes an expression tree as a flat int32 program (layout below); this
// builds the same Thompson NFA as the Python `_connect`, determinises it over byte classes,
// trims, minimises (Hopcroft) and numbers the states canonically. The result is identical to
// the Python implementation, including which limit error a too-large expression raises.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace gramkiln {

// Program layout: every node is [op, size, payload..., children...] where `size` counts the
// node's ints including its two header ints, so a node can be skipped without decoding it.
enum DfaOp : int32_t {
  kOpEmpty = 0,    // [0, 2]
  kOpBytes = 1,    // [1, size, case_fold, byte...]
  kOpClass = 2,    // [2, size, negated, lo, hi, lo, hi, ...] (normalised code point ranges)
  kOpSeq = 3,      // [3, size, child...]
  kOpChoice = 4,   // [4, size, child...]
  kOpRepeat = 5,   // [5, size, min, max (-1: unbounded), item]
  kOpRef = 6,      // [6, 3, terminal index]
  kOpInvalid = 7,  // [7, 3, message index]: an element that cannot appear in a terminal
};

// Why a build failed; the Python side turns each kind into its CompileError text.
enum class DfaFailure : int32_t {
  kNfaLimit = 1,    // more than 10 * max_states NFA states
  kDfaLimit = 2,    // more than max_states DFA states
  kRecursive = 3,   // detail: the chain of terminal indices, the repeated one last
  kUnknownRef = 4,  // detail: [terminal index]
  kInvalid = 5,     // detail: [message index]
  kTooDeep = 6,     // nesting deeper than max_depth
  kWorkLimit = 7,   // subsets and closures hold more than 16 * max(max_states, 4096) states
};

struct DfaBuildError : std::exception {
  DfaFailure failure;
  std::vector<int32_t> detail;
  DfaBuildError(DfaFailure f, std::vector<int32_t> d) : failure(f), detail(std::move(d)) {}
  const char* what() const noexcept override { return "byte DFA construction failed"; }
};

struct DfaInput {
  std::vector<int32_t> code;              // the root expression starts at offset 0
  std::vector<int32_t> terminal_offsets;  // per terminal index: its body's offset, or -1
  bool lazy = false;
  int64_t max_states = 100000;
  int32_t max_depth = 1000;
};

// Minimal, trimmed, canonically numbered: `table` has accepting.size() rows of 256 entries.
// The empty language has no states and start == -1.
struct DfaOutput {
  int32_t start = -1;
  std::vector<uint8_t> accepting;
  std::vector<int32_t> table;
};

// Checks the program's structure first (std::invalid_argument on a malformed program, so a
// bad call never reads out of bounds), then builds. Limits and expression errors throw
// DfaBuildError. Pure C++: safe to call without the GIL.
DfaOutput build_byte_dfa(const DfaInput& input);

}  // namespace gramkiln
