// The one pybind11 translation unit: thin wrappers over the core library.
//
// Every call that does real work releases the GIL (a fill served from the mask caches, only a
// lookup and a copy, keeps it). Buffers are checked (dtype int32, rows of exactly
// ceil(vocab_size / 32) contiguous words, writable, index in range) before any write.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gramkiln/core.hpp"
#include "src/dfa.hpp"

namespace py = pybind11;
using gramkiln::Matcher;
using gramkiln::Runtime;

namespace {

// Calls running without the GIL, counted so that a fork can wait for them (prepare_fork): a
// fork while one of them holds a runtime lock would leave that lock held forever in the child,
// whose first fill of that grammar would then deadlock. The count goes up before the GIL is let
// go, so a thread that holds the GIL and sees zero knows that none is running. That alone does
// not keep new ones from starting before the fork: Python itself lets the GIL go between the
// at-fork hooks and fork() (e.g. while it waits for the import lock, or in another library's
// hook), and a thread that took it then started a fill that held a runtime lock at the fork
// (test_fork_while_other_threads_fill_does_not_deadlock_the_child, about one run in ten on a
// loaded host). So preparing a fork also closes a gate, under the GIL: a call that would start
// waits, without the GIL, until the after-fork hooks open it again (fork_done_*). The gate
// counts the forks being prepared: two threads may fork at once, and the first one's
// after-fork hook must not open the gate while the second is still between its hooks.
std::atomic<int> calls_without_gil{0};
std::atomic<int> forks_pending{0};
// The thread preparing a fork, whose own waits (joining prewarms) pass the gate.
thread_local bool preparing_fork = false;

// With the GIL held: returns once no fork is being prepared, letting the GIL go meanwhile.
void wait_for_fork_gate() {
  while (!preparing_fork && forks_pending.load(std::memory_order_seq_cst) > 0) {
    PyThreadState* state = PyEval_SaveThread();
    while (forks_pending.load(std::memory_order_seq_cst) > 0) std::this_thread::yield();
    PyEval_RestoreThread(state);
  }
}

class WithoutGil {
 public:
  WithoutGil() {
    // The gate is looked at and the call counted with the GIL held, as prepare_fork closes
    // the gate: either it sees this call and waits for it, or this call waits for the fork.
    wait_for_fork_gate();
    calls_without_gil.fetch_add(1, std::memory_order_seq_cst);
    state_ = PyEval_SaveThread();
  }
  // May end the thread: a daemon thread that takes the GIL back while the interpreter is
  // finalizing is ended there by pthread_exit, whose unwinding must pass through this
  // destructor (a noexcept one made it std::terminate: the process aborted at exit).
  ~WithoutGil() noexcept(false) {
    calls_without_gil.fetch_sub(1, std::memory_order_seq_cst);
    PyEval_RestoreThread(state_);
  }
  WithoutGil(const WithoutGil&) = delete;
  WithoutGil& operator=(const WithoutGil&) = delete;

 private:
  PyThreadState* state_;
};

// Background prewarms still running, so that they can all be stopped before the interpreter
// exits or the process forks (a thread holding a cache mutex across fork() would leave it
// locked forever in the child).
std::mutex prewarm_registry_mutex;
std::vector<std::weak_ptr<gramkiln::BackgroundPrewarm>> prewarm_registry;

// Join `prewarm` (asking it to stop first when `stop`), without holding the GIL while waiting.
gramkiln::PrewarmStats join_prewarm(gramkiln::BackgroundPrewarm& prewarm, bool stop) {
  if (stop) prewarm.request_stop();
  // A finished thread joins at once; only a running one is waited for without the GIL (never
  // released when the caller does not hold it, e.g. during interpreter shutdown).
  if (!prewarm.done() && PyGILState_Check()) {
    WithoutGil release;
    return prewarm.wait();
  }
  return prewarm.wait();
}

// Opaque handle to validated, immutable runtime tables shared by every matcher, and the
// background prewarm of their caches when one was started.
struct RuntimeHandle {
  std::shared_ptr<const Runtime> runtime;
  std::shared_ptr<gramkiln::BackgroundPrewarm> prewarm;

  explicit RuntimeHandle(std::shared_ptr<const Runtime> rt) : runtime(std::move(rt)) {}
  RuntimeHandle(RuntimeHandle&&) = default;
  RuntimeHandle& operator=(RuntimeHandle&&) = default;
  ~RuntimeHandle() {
    if (prewarm) join_prewarm(*prewarm, /*stop=*/true);
  }

  // Starts one, unless one is running or has finished on its own (one stopped early, before a
  // fork, is started again). Unless `always`, none is started while as many prewarms run as the
  // machine has cores: a process that loads many grammars at once would otherwise start a
  // thread per grammar; those grammars build their caches lazily, as without a prewarm.
  // Returns whether a prewarm is running or done.
  bool start_prewarm(bool always) { return start(always, /*on_caller=*/false) != nullptr; }

  // A prewarm to be run on the calling thread (see BackgroundPrewarm), registered so that
  // a fork from another thread waits for it; null when one is running or done.
  std::shared_ptr<gramkiln::BackgroundPrewarm> start_prewarm_on_caller() {
    if (prewarm && !(prewarm->done() && prewarm->stop_requested())) return nullptr;
    return start(/*always=*/true, /*on_caller=*/true);
  }

 private:
  std::shared_ptr<gramkiln::BackgroundPrewarm> start(bool always, bool on_caller) {
    if (prewarm && !(prewarm->done() && prewarm->stop_requested())) return prewarm;
    std::lock_guard<std::mutex> lock(prewarm_registry_mutex);
    prewarm_registry.erase(std::remove_if(prewarm_registry.begin(), prewarm_registry.end(),
                                          [](const std::weak_ptr<gramkiln::BackgroundPrewarm>& w) {
                                            auto p = w.lock();
                                            return !p || p->done();
                                          }),
                           prewarm_registry.end());
    const size_t limit = std::max(2u, std::thread::hardware_concurrency());
    if (!always && prewarm_registry.size() >= limit) return nullptr;
    // Not while a fork is being prepared: the fork would not wait for a prewarm started now.
    // The grammar then builds its caches lazily, as past the limit. (wait_prewarm waits for
    // the gate before it starts one on its caller.)
    if (!on_caller && forks_pending.load(std::memory_order_seq_cst) > 0) return nullptr;
    prewarm = std::make_shared<gramkiln::BackgroundPrewarm>(runtime, on_caller);
    prewarm_registry.push_back(prewarm);
    return prewarm;
  }
};

void stop_all_prewarms() {
  std::vector<std::shared_ptr<gramkiln::BackgroundPrewarm>> running;
  {
    std::lock_guard<std::mutex> lock(prewarm_registry_mutex);
    for (const auto& weak : prewarm_registry) {
      if (auto p = weak.lock()) running.push_back(std::move(p));
    }
    prewarm_registry.clear();
  }
  for (const auto& p : running) join_prewarm(*p, /*stop=*/true);
}

// Before a fork (called with the GIL held): close the gate to new calls without the GIL and
// to new prewarms, stop every prewarm, then wait until no call runs without the GIL.
void prepare_fork() {
  forks_pending.fetch_add(1, std::memory_order_seq_cst);
  preparing_fork = true;
  try {
    stop_all_prewarms();
  } catch (...) {
    preparing_fork = false;
    throw;
  }
  preparing_fork = false;
  while (calls_without_gil.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
}

// After a fork, in the parent (the gate opens once no other fork is being prepared; never
// below zero, should a hook be called without its pair) and in the child, which has only the
// forking thread, so no call or fork of its own can be counted: the gate opens there.
void fork_done_in_parent() {
  int pending = forks_pending.load(std::memory_order_seq_cst);
  while (pending > 0 &&
         !forks_pending.compare_exchange_weak(pending, pending - 1, std::memory_order_seq_cst)) {
  }
}
void fork_done_in_child() {
  calls_without_gil.store(0, std::memory_order_seq_cst);
  forks_pending.store(0, std::memory_order_seq_cst);
}

py::dict prewarm_stats_dict(const gramkiln::PrewarmStats& stats) {
  py::dict out;
  out["levels"] = stats.levels;
  out["masks"] = stats.masks;
  out["explored"] = stats.explored;
  out["item_walks"] = stats.item_walks;
  out["local_walks"] = stats.local_walks;
  out["kernels"] = stats.kernels;
  out["traffic_sentences"] = stats.traffic_sentences;
  out["traffic_tokens"] = stats.traffic_tokens;
  out["huge_page_extents"] = stats.huge_page_extents;
  out["read_back_bytes"] = stats.read_back_bytes;
  out["bytes"] = stats.bytes;
  out["complete"] = stats.complete;
  return out;
}

py::dict cache_stats_dict(const gramkiln::CacheStats& stats) {
  py::dict out;
  out["mask_entries"] = stats.mask_entries;
  out["distinct_masks"] = stats.distinct_masks;
  out["compact_masks"] = stats.compact_masks;
  out["hits_whole_stack"] = stats.hits_whole_stack;
  out["hits_future"] = stats.hits_future;
  out["hits_depth"] = stats.hits_depth;
  out["fills_computed"] = stats.fills_computed;
  out["fills_searched"] = stats.fills_searched;
  out["walk_hits_future"] = stats.walk_hits_future;
  out["descent_hits_future"] = stats.descent_hits_future;
  out["future_descents_idle"] = stats.future_descents_idle;
  out["descents_walked"] = stats.descents_walked;
  out["descent_nodes_walked"] = stats.descent_nodes_walked;
  out["interned_by_parts"] = stats.interned_by_parts;
  out["mask_compares"] = stats.mask_compares;
  out["future_languages"] = stats.future_languages;
  out["future_memo_entries"] = stats.future_memo_entries;
  out["future_keys_by_anchors"] = stats.future_keys_by_anchors;
  out["depth_keys_idle"] = stats.depth_keys_idle;
  out["future_recipe_hits"] = stats.future_recipe_hits;
  out["mask_bytes"] = stats.mask_bytes;
  out["walk_entries"] = stats.walk_entries;
  out["item_walk_entries"] = stats.item_walk_entries;
  out["local_walk_entries"] = stats.local_walk_entries;
  out["closure_walk_entries"] = stats.closure_walk_entries;
  out["fills_by_items"] = stats.fills_by_items;
  out["walk_bytes"] = stats.walk_bytes;
  out["walk_clears"] = stats.walk_clears;
  out["group_bytes"] = stats.group_bytes;
  return out;
}

// Opaque handle to a vocabulary's build tables, shared (read-only) by concurrent builds.
struct VocabIndexHandle {
  std::shared_ptr<const gramkiln::VocabIndex> index;
};

// A writable [rows, words] int32 view over a numpy array, a torch CPU tensor or any buffer.
// Held through the raw buffer protocol (no pybind11 buffer_info, whose shape and format copies
// cost more than a cached fill on every call); released with the object.
class MaskBuffer {
 public:
  MaskBuffer() = default;
  MaskBuffer(const MaskBuffer&) = delete;
  MaskBuffer& operator=(const MaskBuffer&) = delete;
  ~MaskBuffer() {
    // Without the GIL only while a daemon thread is being ended at interpreter exit (see
    // ~WithoutGil): the buffer is left to the dying interpreter rather than released unlocked.
    if (held_ && PyGILState_Check()) PyBuffer_Release(&view_);
  }
  uint32_t* data = nullptr;
  size_t rows = 0;

  // Export `obj`'s buffer and check it: int32, 1-D or 2-D, last dimension `words`, C-contiguous
  // rows, writable.
  void acquire(py::object obj, uint32_t words) {
    if (acquire_ndarray(obj, words)) return;
    if (!PyObject_CheckBuffer(obj.ptr())) {
      // torch tensors do not export the buffer protocol; a CPU tensor's .numpy() shares memory.
      if (py::hasattr(obj, "numpy") && py::hasattr(obj, "device")) {
        std::string device = py::str(obj.attr("device"));
        if (device != "cpu") {
          throw py::value_error("bitmask tensor must be on the CPU, not " + device);
        }
        obj = obj.attr("numpy")();
      } else {
        throw py::type_error("bitmask must be a numpy array or a torch CPU tensor of int32");
      }
    }
    if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_RECORDS) != 0) throw py::error_already_set();
    held_ = true;
    const char* format = view_.format ? view_.format : "B";
    const std::string_view fmt(format);
    if (view_.itemsize != 4 ||
        (fmt != "i" && fmt != "<i" && fmt != "=i" && !(fmt == "l" && sizeof(long) == 4))) {
      throw py::value_error("bitmask dtype must be int32 (got format '" + std::string(fmt) + "')");
    }
    const std::string error = take_rows(view_.ndim, view_.shape, view_.strides, view_.buf, words);
    if (!error.empty()) throw py::value_error(error);
  }

 private:
  // A plain numpy array that passes every check, read through numpy's own structure: an export
  // through the buffer protocol formats the dtype as a string each time (under callgrind, ~740
  // instructions and ~58 instruction-cache misses a fill, on every fill). Anything else (a
  // subclass, a bad dtype, shape or layout, a read-only array) takes the buffer path, which
  // raises the errors.
  bool acquire_ndarray(const py::object& obj, uint32_t words) {
    // pybind11's numpy API was set up when the module was imported (see PYBIND11_MODULE).
    if (std::strcmp(Py_TYPE(obj.ptr())->tp_name, "numpy.ndarray") != 0) return false;
    auto array = py::reinterpret_borrow<py::array>(obj);
    if (!array.writeable() || !array.dtype().equal(py::dtype::of<int32_t>())) return false;
    return take_rows(array.ndim(), array.shape(), array.strides(), array.mutable_data(), words)
        .empty();
  }

  // Take `buf` as the bitmask's rows if its layout holds rows of exactly `words` int32 words:
  // 1-D or 2-D, last dimension `words`, C-contiguous rows. Returns why not, or nothing.
  std::string take_rows(Py_ssize_t ndim, const Py_ssize_t* shape, const Py_ssize_t* strides,
                        void* buf, uint32_t words) {
    if (ndim != 1 && ndim != 2) return "bitmask must be 1-D or 2-D";
    const Py_ssize_t cols = shape[ndim - 1];
    if (cols != static_cast<Py_ssize_t>(words)) {
      return "bitmask last dimension must be ceil(vocab_size / 32) = " + std::to_string(words) +
             ", got " + std::to_string(cols);
    }
    if (strides[ndim - 1] != 4 || (ndim == 2 && shape[0] > 1 && strides[0] != 4 * cols)) {
      return "bitmask must be C-contiguous";
    }
    rows = ndim == 2 ? static_cast<size_t>(shape[0]) : 1;
    data = static_cast<uint32_t*>(buf);
    return {};
  }

  Py_buffer view_{};
  bool held_ = false;
};

std::string as_bytes(const py::object& obj) {
  if (py::isinstance<py::str>(obj)) {
    // UTF-8; a lone surrogate has none and raises UnicodeEncodeError naming it.
    Py_ssize_t size = 0;
    const char* data = PyUnicode_AsUTF8AndSize(obj.ptr(), &size);
    if (data == nullptr) throw py::error_already_set();
    return std::string(data, static_cast<size_t>(size));
  }
  if (py::isinstance<py::bytes>(obj)) return obj.cast<std::string>();
  if (py::isinstance<py::bytearray>(obj) || PyMemoryView_Check(obj.ptr())) {
    // bytes(obj): a copy of the bytearray, or of the memoryview's bytes in C order.
    PyObject* copy = PyBytes_FromObject(obj.ptr());
    if (copy == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::bytes>(copy).cast<std::string>();
  }
  throw py::type_error("expected str or bytes");
}

// The longest prefix of `bytes` that is valid UTF-8 by Python's strict decoder (no overlong
// forms, surrogates or code points past U+10FFFF). A forced continuation may start inside a
// character the last token began, or hold bytes that are not text at all: a string can carry
// only whole characters, and each byte it returns must be one the matcher will take.
std::string valid_utf8_prefix(std::string bytes) {
  size_t at = 0;
  const size_t n = bytes.size();
  while (at < n) {
    const uint8_t c = static_cast<uint8_t>(bytes[at]);
    size_t length = 0;
    uint8_t lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (c < 0x80) {
      length = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      break;
    }
    if (at + length > n) break;
    bool valid = true;
    for (size_t k = 1; k < length && valid; ++k) {
      const uint8_t b = static_cast<uint8_t>(bytes[at + k]);
      valid = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    }
    if (!valid) break;
    at += length;
  }
  bytes.resize(at);
  return bytes;
}

// One matcher used from several Python threads at once. Fills only read it and may overlap;
// a call that changes it (accept_*, rollback, reset) must run alone. The GIL does not keep
// them apart (the long calls run without it), and blocking on a lock could deadlock with a
// thread waiting for the GIL, so an overlapping call raises instead: it never sees, nor
// leaves, a half-updated matcher. `users` counts readers, or is -1 for the one writer.
class MatcherUse {
 public:
  enum Kind { kRead, kWrite };
  MatcherUse(std::atomic<int>& users, Kind kind) : users_(users), kind_(kind) {
    int seen = users_.load(std::memory_order_relaxed);
    if (kind == kWrite) {
      if (seen == 0 && users_.compare_exchange_strong(seen, -1, std::memory_order_acquire)) return;
      throw std::runtime_error(
          "this GrammarMatcher is in use by another thread; a matcher may be filled from "
          "several threads at once, but accept_*, rollback and reset must not overlap any "
          "other call on it (give each thread its own matcher, e.g. with fork())");
    }
    while (seen >= 0) {
      if (users_.compare_exchange_weak(seen, seen + 1, std::memory_order_acquire)) return;
    }
    throw std::runtime_error(
        "this GrammarMatcher is being changed by another thread (accept_*, rollback or "
        "reset); calls on one matcher must not overlap a change to it");
  }
  ~MatcherUse() {
    if (kind_ == kWrite) {
      users_.store(0, std::memory_order_release);
    } else {
      users_.fetch_sub(1, std::memory_order_release);
    }
  }
  MatcherUse(const MatcherUse&) = delete;
  MatcherUse& operator=(const MatcherUse&) = delete;

 private:
  std::atomic<int>& users_;
  Kind kind_;
};

// Every method takes a MatcherUse for as long as it reads or writes the matcher. Where the GIL
// is let go, the use is taken after it and ends before it is taken back, so that no use is
// held across a fork (prepare_fork waits only for calls without the GIL).
class PyMatcher {
 public:
  explicit PyMatcher(const RuntimeHandle& handle,
                     double default_temperature = std::numeric_limits<double>::quiet_NaN())
      : matcher_(handle.runtime), default_temperature_(default_temperature) {}
  PyMatcher(const Matcher& other, double default_temperature)
      : matcher_(other), default_temperature_(default_temperature) {}

  void fill(py::object bitmask, py::ssize_t index) {
    const uint32_t words = gramkiln::runtime_mask_words(matcher_.runtime());
    MaskBuffer buf;
    buf.acquire(bitmask, words);
    if (index < 0 || static_cast<size_t>(index) >= buf.rows) {
      throw py::index_error("bitmask row " + std::to_string(index) + " is out of range");
    }
    uint32_t* row = buf.data + static_cast<size_t>(index) * words;
    // A cached mask is a lookup and a copy: cheaper than releasing and retaking the GIL.
    gramkiln::Matcher::FillKeys keys;
    uint64_t generation = 0;
    {
      MatcherUse use(users_, MatcherUse::kRead);
      if (matcher_.fill_mask_if_cached(row, &keys)) return;
      generation = generation_;
    }
    WithoutGil release;
    MatcherUse use(users_, MatcherUse::kRead);
    // A change from another thread in between makes the keys stale: computed again.
    matcher_.fill_mask_computed(row, generation == generation_ ? &keys : nullptr);
  }
  bool accept_token(int64_t id) {
    bool ok = false, overrun = false;
    {
      WithoutGil release;
      MatcherUse use(users_, MatcherUse::kWrite);
      ++generation_;
      ok = matcher_.accept_token(id);
      overrun = matcher_.take_budget_overrun();
    }
    if (overrun) warn_budget_overrun();
    return ok;
  }
  bool accept_tokens(const std::vector<int64_t>& ids) {
    bool ok = true, overrun = false;
    {
      WithoutGil release;
      MatcherUse use(users_, MatcherUse::kWrite);
      ++generation_;
      for (size_t i = 0; i < ids.size() && ok; ++i) {
        try {
          ok = matcher_.accept_token(ids[i]);
        } catch (...) {
          matcher_.rollback(static_cast<uint32_t>(i));
          matcher_.take_budget_overrun();
          throw;
        }
        if (!ok) matcher_.rollback(static_cast<uint32_t>(i));
      }
      overrun = matcher_.take_budget_overrun() && ok;
    }
    if (overrun) warn_budget_overrun();
    return ok;
  }
  bool accept_string(const py::object& text) {
    std::string bytes = as_bytes(text);
    bool ok = false, overrun = false;
    {
      WithoutGil release;
      MatcherUse use(users_, MatcherUse::kWrite);
      ++generation_;
      ok = matcher_.accept_bytes(bytes);
      overrun = matcher_.take_budget_overrun() && ok;
    }
    if (overrun) warn_budget_overrun();
    return ok;
  }
  // The temperature for the next token (see Matcher::temperature), None when none applies.
  py::object temperature() {
    double value;
    bool differ = false;
    {
      MatcherUse use(users_, MatcherUse::kRead);
      value = matcher_.temperature(default_temperature_, &differ);
    }
    if (differ && !warned_temperature_) {
      warned_temperature_ = true;
      log_warning("ambiguous parse paths have different sampling temperatures; using the largest");
    }
    if (std::isnan(value)) return py::none();
    return py::float_(value);
  }
  // Captures recorded so far as (name, bytes); see Matcher::captures.
  py::list get_captures(bool deduplicate) {
    std::vector<std::pair<uint32_t, std::string>> captures;
    {
      MatcherUse use(users_, MatcherUse::kRead);
      captures = matcher_.captures(deduplicate);
    }
    py::list out;
    for (const auto& [name, bytes] : captures) {
      out.append(py::make_tuple(py::str(matcher_.capture_name(name)), py::bytes(bytes)));
    }
    return out;
  }
  py::object default_temperature() const {
    if (std::isnan(default_temperature_)) return py::none();
    return py::float_(default_temperature_);
  }
  void rollback(int64_t n) {
    MatcherUse use(users_, MatcherUse::kWrite);
    if (n < 0) throw py::value_error("rollback count must be >= 0");
    if (n > static_cast<int64_t>(matcher_.history_size())) {
      throw py::value_error("cannot roll back " + std::to_string(n) + " steps; only " +
                            std::to_string(matcher_.history_size()) + " recorded");
    }
    ++generation_;
    matcher_.rollback(static_cast<uint32_t>(n));
  }
  std::unique_ptr<PyMatcher> fork() {
    MatcherUse use(users_, MatcherUse::kRead);
    return std::make_unique<PyMatcher>(matcher_, default_temperature_);
  }
  void reset() {
    MatcherUse use(users_, MatcherUse::kWrite);
    ++generation_;
    matcher_.reset();
  }
  bool is_accepting() {
    MatcherUse use(users_, MatcherUse::kRead);
    return matcher_.is_accepting();
  }
  bool is_terminated() {
    MatcherUse use(users_, MatcherUse::kRead);
    return matcher_.is_terminated();
  }
  py::str jump_forward() {
    std::string bytes;
    {
      WithoutGil release;
      MatcherUse use(users_, MatcherUse::kRead);
      bytes = valid_utf8_prefix(matcher_.jump_forward_bytes());
    }
    PyObject* text =
        PyUnicode_DecodeUTF8(bytes.data(), static_cast<py::ssize_t>(bytes.size()), "strict");
    if (text == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::str>(text);
  }
  uint32_t vocab_size() const { return gramkiln::runtime_vocab_size(matcher_.runtime()); }
  uint32_t history_size() {
    MatcherUse use(users_, MatcherUse::kRead);
    return matcher_.history_size();
  }
  size_t chart_items() {
    MatcherUse use(users_, MatcherUse::kRead);
    return matcher_.chart_items();
  }
  const Matcher& matcher() const { return matcher_; }
  std::atomic<int>& users() { return users_; }

 private:
  static void log_warning(const std::string& message) {
    py::module_::import("logging").attr("getLogger")("gramkiln").attr("warning")(message);
  }
  void warn_budget_overrun() {
    if (warned_budget_) return;
    warned_budget_ = true;
    log_warning(
        "a max_tokens / max_chars budget was exceeded: the rule's body could not end where its "
        "budget ran out, so it goes on to its earliest possible end");
  }

  Matcher matcher_;
  std::atomic<int> users_{0};
  uint64_t generation_ = 0;  // changes with every write; read and written under a use
  double default_temperature_;
  bool warned_temperature_ = false, warned_budget_ = false;  // each logged once per matcher
};

uint32_t checked_u32(int64_t v, const char* what) {
  if (v < 0 || v > 0xffffffffll) throw py::value_error(std::string(what) + " out of range");
  return static_cast<uint32_t>(v);
}

// What the int64 overloads of the matcher's methods could not take: an integer past int64
// (out of range, as any other out-of-range value) or something that is not an integer. The
// value as an int64 when it is one after all (a conversion the first overload pass skipped).
int64_t integer_argument(const py::handle& value, const std::string& what, bool as_index) {
  PyObject* index = PyNumber_Index(value.ptr());
  if (index == nullptr) {
    PyErr_Clear();
    throw py::type_error(what + " must be an integer, not " +
                         std::string(Py_TYPE(value.ptr())->tp_name));
  }
  int overflow = 0;
  const long long result = PyLong_AsLongLongAndOverflow(index, &overflow);
  Py_DECREF(index);
  if (overflow == 0 && !(result == -1 && PyErr_Occurred())) return result;
  PyErr_Clear();
  const std::string shown = py::str(value);
  if (as_index) throw py::index_error(what + " " + shown + " is out of range");
  throw py::value_error(what + " " + shown + " is out of range");
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "gramkiln C++ runtime";
  // Bad tables surface as gramkiln.errors.ArtifactError. The class object is kept alive for
  // the life of the process (translators cannot capture state).
  static PyObject* artifact_error =
      py::object(py::module_::import("gramkiln.errors").attr("ArtifactError")).release().ptr();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const gramkiln::FormatError& e) {
      PyErr_SetString(artifact_error, e.what());
    }
  });

  // pybind11 sets up its numpy API at first use, and on numpy 2 that parses numpy's version
  // with freshly compiled regular expressions: ~200 us, which fell on the process's first fill.
  // numpy is a dependency the package imports anyway, so it is done here, once, at import.
  try {
    py::dtype::of<int32_t>();
  } catch (const py::error_already_set&) {
    PyErr_Clear();  // a broken numpy is reported by the first fill that needs it
  }
  m.def("core_version", &gramkiln::core_version, "Version string of the C++ core library.");
  m.def("core_build_profile", &gramkiln::core_build_profile,
        "The compiler whose build profile (cpp/pgo) the core was compiled with, or '' (none).");
  m.def("fill_trace_built", &gramkiln::fill_trace_built,
        "Whether this build records the stage times of computed fills (GRAMKILN_FILL_TRACE).");
  m.def(
      "take_fill_trace",
      []() {
        // (fill index, stage times in microseconds, counts) per computed fill since the last call.
        py::list out;
        for (const gramkiln::FillTraceRecord& record : gramkiln::take_fill_trace()) {
          py::list stages, counts;
          for (const float us : record.stage_us) stages.append(us);
          for (const uint32_t count : record.counts) counts.append(count);
          out.append(py::make_tuple(record.fill, stages, counts));
        }
        return out;
      },
      "The stage times of the computed fills since the last call (empty unless "
      "fill_trace_built()): (fill index, stage microseconds, [threads, walkers, nodes, parts]).");

  py::class_<RuntimeHandle>(m, "Runtime", "Validated, immutable runtime tables.")
      .def_property_readonly(
          "vocab_size",
          [](const RuntimeHandle& h) { return gramkiln::runtime_vocab_size(*h.runtime); })
      .def("start_prewarm", &RuntimeHandle::start_prewarm, py::arg("always") = true,
           "Start prewarming the mask caches on a background thread (no-op when started); "
           "without `always`, not while as many prewarms run as there are cores. Returns "
           "whether one is running or done.")
      .def(
          "wait_prewarm",
          [](RuntimeHandle& h) {
            // None started yet: run it on this thread, which would only wait for another. Not
            // registered while a fork is being prepared (the child would inherit one that no
            // thread of its own runs): the gate first, then the GIL is held until it runs.
            wait_for_fork_gate();
            if (auto here = h.start_prewarm_on_caller()) {
              WithoutGil release;
              here->run_here();
            }
            return prewarm_stats_dict(join_prewarm(*h.prewarm, /*stop=*/false));
          },
          "Prewarm on this thread, or wait for the prewarm already started (GIL released); "
          "returns its stats.")
      .def_property_readonly("prewarm_done",
                             [](const RuntimeHandle& h) { return h.prewarm && h.prewarm->done(); })
      .def(
          "cache_stats",
          [](const RuntimeHandle& h) {
            return cache_stats_dict(gramkiln::runtime_cache_stats(*h.runtime));
          },
          "What the shared mask caches hold now.");

  m.def("stop_all_prewarms", &stop_all_prewarms,
        "Stop and join every background prewarm (before exit).");
  m.def("prepare_fork", &prepare_fork,
        "Stop every prewarm and wait for the calls running without the GIL (before fork); "
        "calls that would start wait until fork_done_in_parent / fork_done_in_child.");
  m.def("fork_done_in_parent", &fork_done_in_parent, "After a fork, in the parent.");
  m.def("fork_done_in_child", &fork_done_in_child, "After a fork, in the child.");

  m.def(
      "load_runtime",
      [](py::bytes blob) {
        // Read the bytes object in place; `blob` keeps it alive while the GIL is released.
        char* data = nullptr;
        Py_ssize_t size = 0;
        if (PyBytes_AsStringAndSize(blob.ptr(), &data, &size) != 0) throw py::error_already_set();
        WithoutGil release;
        return RuntimeHandle{gramkiln::load_runtime(std::string_view(data, size))};
      },
      py::arg("blob"), "Validate runtime tables; raises ArtifactError when they are bad.");

  py::class_<VocabIndexHandle>(
      m, "VocabIndex",
      "A vocabulary's token trie and per-token tables, built once and shared by every compile.")
      .def_property_readonly("vocab_size",
                             [](const VocabIndexHandle& h) {
                               return gramkiln::vocab_index_size(*h.index);
                             })
      .def(
          "clear_walk_cache",
          [](const VocabIndexHandle& h) { return gramkiln::clear_walk_cache(*h.index); },
          "Drop the cached trie walks shared by compiles (for cold-compile measurements); "
          "returns the bytes they held. Compiled tables are the same either way.");

  m.def(
      "build_vocab_index",
      [](int64_t vocab_size, const py::sequence& tokens, const std::vector<int64_t>& special_ids) {
        gramkiln::VocabSpec v;
        v.vocab_size = checked_u32(vocab_size, "vocab_size");
        const size_t count = tokens.size();
        v.tokens.reserve(count);
        for (size_t i = 0; i < count; ++i) {
          py::object token = tokens[i];
          char* data = nullptr;
          Py_ssize_t size = 0;
          if (!PyBytes_Check(token.ptr())) throw py::type_error("tokens must be bytes");
          if (PyBytes_AsStringAndSize(token.ptr(), &data, &size) != 0) {
            throw py::error_already_set();
          }
          v.tokens.emplace_back(data, static_cast<size_t>(size));
        }
        v.is_text.assign(count, 1);
        for (int64_t id : special_ids) {
          if (id < 0 || static_cast<uint64_t>(id) >= count) {
            throw py::value_error("special id " + std::to_string(id) + " is out of range");
          }
          v.is_text[static_cast<size_t>(id)] = 0;
        }
        WithoutGil release;
        return VocabIndexHandle{gramkiln::build_vocab_index(v)};
      },
      py::arg("vocab_size"), py::arg("tokens"), py::arg("special_ids"),
      "Build a vocabulary's token trie and text-token tables (GIL released for the build).");

  m.def(
      "build_runtime_blob",
      [](int64_t num_nonterminals, int64_t start, std::vector<uint32_t> prod_lhs,
         std::vector<uint32_t> prod_offsets, std::vector<uint32_t> prod_rhs,
         std::vector<uint32_t> lexeme_start, py::bytes dfa_table, py::bytes dfa_accepting,
         std::vector<uint32_t> dfa_lexeme, std::vector<uint32_t> tokenset_offsets,
         std::vector<uint32_t> tokenset_ids, const VocabIndexHandle& vocab,
         std::vector<uint32_t> end_tokens, std::vector<uint32_t> lexeme_max_tokens,
         std::vector<uint32_t> lexeme_max_chars, std::vector<uint32_t> lexeme_temperature,
         int64_t char_window, std::vector<int32_t> state_budget_switch,
         std::vector<int32_t> state_near_remaining, std::vector<uint32_t> capture_symbols,
         std::vector<std::string> capture_names, std::vector<uint32_t> capture_rule_name,
         std::vector<uint32_t> capture_marker_name, std::vector<uint32_t> capture_body_lexeme,
         std::vector<uint32_t> capture_marker_lexeme, std::vector<uint8_t> capture_stop,
         std::vector<uint32_t> capture_ignore_lexeme, std::vector<uint32_t> lexeme_exit_bytes,
         std::vector<uint8_t> state_body_end) {
        gramkiln::GrammarSpec g;
        g.num_nonterminals = checked_u32(num_nonterminals, "num_nonterminals");
        g.start = checked_u32(start, "start");
        g.prod_lhs = std::move(prod_lhs);
        g.prod_offsets = std::move(prod_offsets);
        g.prod_rhs = std::move(prod_rhs);
        g.lexeme_start = std::move(lexeme_start);
        std::string table = dfa_table;
        if (table.size() % 4) throw py::value_error("dfa_table must hold int32 values");
        g.dfa_table.resize(table.size() / 4);
        if (!table.empty()) std::memcpy(g.dfa_table.data(), table.data(), table.size());
        std::string accepting = dfa_accepting;
        g.dfa_accepting.assign(accepting.begin(), accepting.end());
        g.dfa_lexeme = std::move(dfa_lexeme);
        g.tokenset_offsets = std::move(tokenset_offsets);
        g.tokenset_ids = std::move(tokenset_ids);
        g.lexeme_max_tokens = std::move(lexeme_max_tokens);
        g.lexeme_max_chars = std::move(lexeme_max_chars);
        g.lexeme_temperature = std::move(lexeme_temperature);
        g.char_window = checked_u32(char_window, "char_window");
        g.state_budget_switch = std::move(state_budget_switch);
        g.state_near_remaining = std::move(state_near_remaining);
        g.capture_symbols = std::move(capture_symbols);
        g.capture_names = std::move(capture_names);
        g.capture_rule_name = std::move(capture_rule_name);
        g.capture_marker_name = std::move(capture_marker_name);
        g.capture_body_lexeme = std::move(capture_body_lexeme);
        g.capture_marker_lexeme = std::move(capture_marker_lexeme);
        g.capture_ignore_lexeme = std::move(capture_ignore_lexeme);
        g.lexeme_exit_bytes = std::move(lexeme_exit_bytes);
        g.state_body_end = std::move(state_body_end);
        g.capture_stop = std::move(capture_stop);
        std::string blob;
        {
          WithoutGil release;
          blob = gramkiln::build_runtime_blob(g, *vocab.index, end_tokens);
        }
        return py::bytes(blob);
      },
      py::arg("num_nonterminals"), py::arg("start"), py::arg("prod_lhs"), py::arg("prod_offsets"),
      py::arg("prod_rhs"), py::arg("lexeme_start"), py::arg("dfa_table"), py::arg("dfa_accepting"),
      py::arg("dfa_lexeme"), py::arg("tokenset_offsets"), py::arg("tokenset_ids"), py::arg("vocab"),
      py::arg("end_tokens"), py::arg("lexeme_max_tokens") = std::vector<uint32_t>{},
      py::arg("lexeme_max_chars") = std::vector<uint32_t>{},
      py::arg("lexeme_temperature") = std::vector<uint32_t>{}, py::arg("char_window") = 0,
      py::arg("state_budget_switch") = std::vector<int32_t>{},
      py::arg("state_near_remaining") = std::vector<int32_t>{},
      py::arg("capture_symbols") = std::vector<uint32_t>{},
      py::arg("capture_names") = std::vector<std::string>{},
      py::arg("capture_rule_name") = std::vector<uint32_t>{},
      py::arg("capture_marker_name") = std::vector<uint32_t>{},
      py::arg("capture_body_lexeme") = std::vector<uint32_t>{},
      py::arg("capture_marker_lexeme") = std::vector<uint32_t>{},
      py::arg("capture_stop") = std::vector<uint8_t>{},
      py::arg("capture_ignore_lexeme") = std::vector<uint32_t>{},
      py::arg("lexeme_exit_bytes") = std::vector<uint32_t>{},
      py::arg("state_body_end") = std::vector<uint8_t>{},
      "Build runtime tables from a flattened grammar and a vocabulary index (GIL released).");

  py::class_<PyMatcher>(m, "GrammarMatcher", "Incremental matcher producing next-token bitmasks.")
      .def(py::init([](const RuntimeHandle& runtime, const py::object& default_temperature) {
             double value = std::numeric_limits<double>::quiet_NaN();
             if (!default_temperature.is_none()) {
               const double given = default_temperature.cast<double>();
               if (!std::isfinite(given) || given < 0) {
                 throw py::value_error("default_temperature must be a finite number >= 0");
               }
               value = given;
             }
             return std::make_unique<PyMatcher>(runtime, value);
           }),
           py::arg("runtime"), py::arg("default_temperature") = py::none())
      .def_property_readonly("temperature", &PyMatcher::temperature,
                             "Sampling temperature for the next token: that of the rules "
                             "(option `temperature`) the parse is inside, else "
                             "default_temperature; None when neither applies.")
      .def("get_captures", &PyMatcher::get_captures, py::arg("deduplicate") = true,
           "The spans of captured rules (option `capture`) as (name, bytes), in completion "
           "order: by default one per occurrence with its longest span, else every completion.")
      .def_property_readonly("default_temperature", &PyMatcher::default_temperature,
                             "The temperature outside rules that set one (None: unset).")
      .def("fill_next_token_bitmask", &PyMatcher::fill, py::arg("bitmask"), py::arg("index") = 0,
           "Write the allowed-token bitmask into row `index` of an int32 buffer.")
      .def(
          "fill_next_token_bitmask",
          [](PyMatcher& self, const py::object& bitmask, const py::object& index) {
            self.fill(bitmask,
                      static_cast<py::ssize_t>(integer_argument(index, "bitmask row", true)));
          },
          py::arg("bitmask"), py::arg("index"))
      .def("accept_token", &PyMatcher::accept_token, py::arg("token_id"),
           "Consume one token; False (state unchanged) when it is not allowed.")
      .def(
          "accept_token",
          [](PyMatcher& self, const py::object& token_id) {
            return self.accept_token(integer_argument(token_id, "token id", true));
          },
          py::arg("token_id"))
      .def("accept_tokens", &PyMatcher::accept_tokens, py::arg("token_ids"),
           "Consume tokens in order; all or nothing.")
      .def(
          "accept_tokens",
          [](PyMatcher& self, const py::iterable& token_ids) {
            std::vector<int64_t> ids;
            for (const py::handle item : token_ids) {
              ids.push_back(integer_argument(item, "token id", true));
            }
            return self.accept_tokens(ids);
          },
          py::arg("token_ids"))
      .def("accept_string", &PyMatcher::accept_string, py::arg("text"),
           "Consume text (str as UTF-8, or bytes) as one step; False if not a viable prefix.")
      .def("rollback", &PyMatcher::rollback, py::arg("num_tokens") = 1,
           "Undo the last `num_tokens` accepted steps (tokens or strings).")
      .def(
          "rollback",
          [](PyMatcher& self, const py::object& num_tokens) {
            self.rollback(integer_argument(num_tokens, "rollback count", false));
          },
          py::arg("num_tokens"))
      .def("fork", &PyMatcher::fork, "An independent copy of this matcher (history included).")
      .def("reset", &PyMatcher::reset, "Back to the initial state; clears the history.")
      .def("is_accepting", &PyMatcher::is_accepting, "Whether the input so far is accepted.")
      .def("is_terminated", &PyMatcher::is_terminated, "Whether an end token was accepted.")
      .def("find_jump_forward_string", &PyMatcher::jump_forward,
           "The text every continuation must start with (possibly empty): whole characters only, "
           "up to the first byte that does not continue valid UTF-8.")
      .def_property_readonly("vocab_size", &PyMatcher::vocab_size)
      .def_property_readonly("num_steps", &PyMatcher::history_size)
      .def_property_readonly(
          "chart_items", &PyMatcher::chart_items,
          "Earley items the matcher holds over all its steps (kept for rollback); memory "
          "diagnostics.");

  m.def(
      "fill_next_token_bitmask_batch",
      [](const std::vector<PyMatcher*>& matchers, py::object bitmask, py::object indices,
         unsigned threads) {
        if (matchers.empty()) return;
        const uint32_t words = gramkiln::runtime_mask_words(matchers[0]->matcher().runtime());
        std::vector<const Matcher*> cores;
        for (PyMatcher* pm : matchers) {
          if (pm == nullptr) throw py::type_error("matchers must not contain None");
          if (gramkiln::runtime_mask_words(pm->matcher().runtime()) != words) {
            throw py::value_error(
                "all matchers in a batch must have one mask width, ceil(vocab_size / 32)");
          }
          cores.push_back(&pm->matcher());
        }
        MaskBuffer buf;
        buf.acquire(bitmask, words);
        std::vector<uint32_t> rows;
        if (indices.is_none()) {
          for (size_t i = 0; i < cores.size(); ++i) rows.push_back(static_cast<uint32_t>(i));
        } else {
          for (auto v : indices.cast<std::vector<int64_t>>()) {
            // Negative or huge indices become out-of-range rows and are rejected below.
            rows.push_back(v < 0 || v > 0xffffffffll ? 0xffffffffu : static_cast<uint32_t>(v));
          }
        }
        if (rows.size() != cores.size()) throw py::value_error("need one index per matcher");
        for (uint32_t r : rows) {
          if (r >= buf.rows) throw py::index_error("bitmask row index out of range");
        }
        // Two matchers filling one row in parallel would leave it a word-by-word mix of both.
        std::vector<uint32_t> sorted_rows(rows);
        std::sort(sorted_rows.begin(), sorted_rows.end());
        const auto repeated = std::adjacent_find(sorted_rows.begin(), sorted_rows.end());
        if (repeated != sorted_rows.end()) {
          throw py::value_error("indices must be distinct: row " + std::to_string(*repeated) +
                                " is given to more than one matcher");
        }
        // Each distinct matcher once (a matcher may fill several rows), read for the whole batch.
        std::vector<PyMatcher*> distinct(matchers.begin(), matchers.end());
        std::sort(distinct.begin(), distinct.end());
        distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
        WithoutGil release;
        std::vector<std::unique_ptr<MatcherUse>> uses;
        uses.reserve(distinct.size());
        for (PyMatcher* pm : distinct) {
          uses.push_back(std::make_unique<MatcherUse>(pm->users(), MatcherUse::kRead));
        }
        gramkiln::fill_masks_parallel(cores, buf.data, words, rows, threads == 0 ? 1 : threads);
      },
      py::arg("matchers"), py::arg("bitmask"), py::arg("indices") = py::none(),
      py::arg("threads") = 1, "Fill one bitmask row per matcher in parallel (GIL released).");

  // ---- byte-DFA construction (ir/automata.py's native path) ----
  m.def(
      "build_byte_dfa",
      [](py::bytes code, py::bytes terminal_offsets, bool lazy, int64_t max_states,
         int32_t max_depth) -> py::tuple {
        auto int32s = [](const py::bytes& data, const char* what) {
          const std::string raw = data;
          if (raw.size() % sizeof(int32_t) != 0) {
            throw py::value_error(std::string(what) + " must hold whole int32 values");
          }
          std::vector<int32_t> out(raw.size() / sizeof(int32_t));
          if (!raw.empty()) std::memcpy(out.data(), raw.data(), raw.size());
          return out;
        };
        gramkiln::DfaInput input;
        input.code = int32s(code, "code");
        input.terminal_offsets = int32s(terminal_offsets, "terminal_offsets");
        input.lazy = lazy;
        input.max_states = max_states;
        input.max_depth = max_depth;
        gramkiln::DfaOutput output;
        int32_t failure = 0;
        std::vector<int32_t> detail;
        {
          WithoutGil release;
          try {
            output = gramkiln::build_byte_dfa(input);
          } catch (const gramkiln::DfaBuildError& error) {
            failure = static_cast<int32_t>(error.failure);
            detail = error.detail;
          }
        }
        if (failure != 0) return py::make_tuple(py::none(), failure, detail);
        py::bytes table(reinterpret_cast<const char*>(output.table.data()),
                        output.table.size() * sizeof(int32_t));
        py::bytes accepting(reinterpret_cast<const char*>(output.accepting.data()),
                            output.accepting.size());
        return py::make_tuple(output.start, accepting, table);
      },
      py::arg("code"), py::arg("terminal_offsets"), py::arg("lazy"), py::arg("max_states"),
      py::arg("max_depth"),
      "Minimal canonical byte DFA of an encoded terminal expression (GIL released). Returns "
      "(start, accepting bytes, int32 table bytes), or (None, failure kind, detail).");
}
