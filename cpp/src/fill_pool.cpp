// Batch fills on a persistent pool of worker threads.
//
// A server fills one row per sequence at every decoding step, and a warm fill takes about a
// microsecond, while starting and joining a thread takes tens: threads made per call cost more
// than the work they share on a large machine. The pool's workers are made once (more when a
// call asks for more) and sleep between calls; the caller works too, and rows are handed out
// a few at a time from an atomic counter, so a worker that wakes late just finds nothing left.
//
// One batch at a time uses the pool: a second caller meanwhile (another Python thread, the
// GIL being released) fills its rows with threads of its own, as every call did before. A
// forked child does not inherit the workers, so a pool made by another process is left alone
// (never touched, its locks may be held) and the child makes its own.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

#include "gramkiln/core.hpp"

namespace gramkiln {
namespace {

// Past this many workers a pool thread would only wait for rows; it bounds what a wrong
// `threads` argument can make.
constexpr unsigned kMaxPoolWorkers = 256;

long current_process() {
#if defined(__unix__) || defined(__APPLE__)
  return static_cast<long>(::getpid());
#else
  return 0;
#endif
}

class FillPool {
 public:
  // Runs `work` on the calling thread and on `helpers` workers; returns once every
  // participant has left `work`. False (nothing run) when another batch holds the pool.
  bool run(const std::function<void()>& work, unsigned helpers) {
    std::unique_lock<std::mutex> batch(busy_, std::try_to_lock);
    if (!batch.owns_lock()) return false;
    helpers = std::min(helpers, kMaxPoolWorkers);
    {
      std::lock_guard<std::mutex> lock(state_);
      while (workers_ < helpers) {
        const unsigned index = workers_;
        try {
          // Detached, never joined: the pool lives as long as the process.
          std::thread([this, index] { serve(index); }).detach();
        } catch (const std::system_error&) {
          break;  // no more threads allowed here (a container's limit): fewer helpers
        }
        ++workers_;
      }
      helpers = std::min(helpers, workers_);
      job_ = &work;
      job_helpers_ = helpers;
      ++generation_;
    }
    wake_.notify_all();
    work();
    std::unique_lock<std::mutex> lock(state_);
    job_ = nullptr;  // late wakers join no more
    done_.wait(lock, [this] { return active_ == 0; });
    return true;
  }

 private:
  void serve(unsigned index) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(state_);
    for (;;) {
      wake_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (job_ == nullptr || index >= job_helpers_) continue;
      const std::function<void()>* job = job_;
      ++active_;
      lock.unlock();
      (*job)();
      lock.lock();
      if (--active_ == 0) done_.notify_all();
    }
  }

  std::mutex busy_;   // held by the batch using the pool
  std::mutex state_;  // guards everything below
  std::condition_variable wake_;
  std::condition_variable done_;
  unsigned workers_ = 0;  // threads serving this pool
  const std::function<void()>* job_ = nullptr;
  unsigned job_helpers_ = 0;
  unsigned active_ = 0;
  uint64_t generation_ = 0;
};

// The process's pool, made on first use. Deliberately leaked: workers sleeping at exit must
// not find their pool destroyed under them.
FillPool& process_pool() {
  static std::mutex guard;
  static FillPool* pool = nullptr;
  static long owner = 0;
  std::lock_guard<std::mutex> lock(guard);
  const long process = current_process();
  if (pool == nullptr || owner != process) {
    pool = new FillPool();
    owner = process;
  }
  return *pool;
}

// Below this many rows a thread, waking workers for cached fills costs more than they save:
// a cached fill is a 16 KB copy (Llama 3), bound by memory bandwidth rather than by the core.
// Measured on 16 cores (docs/design/runtime.md, "Session 39"): 64 rows took as long on one
// thread as on 4, 256 rows 1.5x less time on 16 threads than on one.
constexpr size_t kCachedRowsPerThread = 64;

// Computed rows of one runtime share its locked tables, so a thread takes this many of them
// in turn before another thread joins that runtime.
constexpr size_t kComputedRowsPerThread = 16;

// Runs `fill(i)` for i in [0, count) on up to `threads` threads (the caller's among them),
// handing out `chunk` indices at a time, and rethrows the first exception once all are done.
void run_rows(size_t count, unsigned threads, size_t chunk,
              const std::function<void(size_t)>& fill) {
  if (count == 0) return;
  std::atomic<size_t> next{0};
  std::mutex failure_lock;
  std::exception_ptr failure;
  const std::function<void()> work = [&]() {
    for (size_t first = next.fetch_add(chunk); first < count; first = next.fetch_add(chunk)) {
      const size_t last = std::min(count, first + chunk);
      for (size_t i = first; i < last; ++i) {
        try {
          fill(i);
        } catch (...) {
          // Reported once every index has been handed out; the others still run.
          std::lock_guard<std::mutex> lock(failure_lock);
          if (!failure) failure = std::current_exception();
        }
      }
    }
  };
  const unsigned workers = static_cast<unsigned>(std::min<size_t>(std::max(1u, threads), count));
  if (workers <= 1) {
    work();
  } else if (!process_pool().run(work, workers - 1)) {
    std::vector<std::thread> own;
    own.reserve(workers - 1);
    try {
      for (unsigned t = 0; t + 1 < workers; ++t) own.emplace_back(work);
    } catch (const std::system_error&) {
      // Fewer threads than asked for: the ones made and this one share the rows.
    }
    work();
    for (auto& t : own) t.join();
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

void fill_masks_parallel(const std::vector<const Matcher*>& matchers, uint32_t* base,
                         uint32_t words, const std::vector<uint32_t>& rows, unsigned threads) {
  // Two passes. Cached fills are copies: spread over threads only when there are many rows.
  // The rows whose mask must be computed (CPU-bound, tens of microseconds or more) then go to
  // the threads by runtime, a thread per kComputedRowsPerThread rows of one runtime: computed
  // fills of one runtime queue on its cache locks and store what the next one reads, so a
  // few of them finish sooner in turn (docs/design/runtime.md, "Session 40": a cold JSON
  // batch of 16 rows took 1.4x as long on two threads as on one), while rows of different
  // runtimes share nothing and many rows of one still gain from more threads.
  const size_t count = matchers.size();
  auto row_words = [&](size_t i) { return base + static_cast<size_t>(rows[i]) * words; };
  std::vector<Matcher::FillKeys> keys(count);
  std::vector<uint8_t> cached(count, 0);
  const unsigned probe_threads = static_cast<unsigned>(
      std::min<size_t>(std::max(1u, threads), std::max<size_t>(1, count / kCachedRowsPerThread)));
  const size_t probe_chunk = std::max<size_t>(1, count / (static_cast<size_t>(probe_threads) * 8));
  run_rows(count, probe_threads, probe_chunk, [&](size_t i) {
    cached[i] = matchers[i]->fill_mask_if_cached(row_words(i), &keys[i]) ? 1 : 0;
  });
  std::vector<std::vector<size_t>> by_runtime;
  std::unordered_map<const Runtime*, size_t> runtime_index;
  for (size_t i = 0; i < count; ++i) {
    if (cached[i]) continue;
    const auto [slot, added] = runtime_index.emplace(&matchers[i]->runtime(), by_runtime.size());
    if (added) by_runtime.emplace_back();
    by_runtime[slot->second].push_back(i);
  }
  std::vector<std::vector<size_t>> units;  // each filled in turn by one thread
  for (const auto& runtime_rows : by_runtime) {
    const size_t parts =
        std::min<size_t>(std::max(1u, threads), (runtime_rows.size() + kComputedRowsPerThread - 1) /
                                                    kComputedRowsPerThread);
    const size_t first = units.size();
    units.resize(first + parts);
    for (size_t j = 0; j < runtime_rows.size(); ++j)
      units[first + j % parts].push_back(runtime_rows[j]);
  }
  run_rows(units.size(), threads, 1, [&](size_t k) {
    std::exception_ptr failure;  // the unit's other rows are still filled
    for (const size_t i : units[k]) {
      try {
        // Probed again: an earlier row may have computed this configuration meanwhile.
        uint32_t* out = row_words(i);
        if (!matchers[i]->fill_mask_if_cached(out, &keys[i]))
          matchers[i]->fill_mask_computed(out, &keys[i]);
      } catch (...) {
        if (!failure) failure = std::current_exception();
      }
    }
    if (failure) std::rethrow_exception(failure);
  });
}

}  // namespace gramkiln
