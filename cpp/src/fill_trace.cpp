#include "fill_trace.hpp"

#include <chrono>
#include <mutex>
#include <vector>

#include "runtime_internal.hpp"

namespace gramkiln {

#ifdef GRAMKILN_FILL_TRACE
namespace {
struct TraceState {
  std::mutex mutex;
  std::vector<FillTraceRecord> records;
  uint64_t fills = 0;  // fills begun since the last take_fill_trace
};
TraceState& state() {
  static TraceState traces;
  return traces;
}
struct Current {
  bool active = false;
  std::chrono::steady_clock::time_point last;
  FillTraceRecord record;
};
thread_local Current current;
}  // namespace

namespace fill_trace {
void begin() {
  current.active = !FutureWork::prewarming;
  if (!current.active) return;
  current.record = FillTraceRecord{};
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    current.record.fill = state().fills++;
  }
  current.last = std::chrono::steady_clock::now();
}
void stamp(FillStage stage) {
  if (!current.active) return;
  const auto now = std::chrono::steady_clock::now();
  current.record.stage_us[static_cast<size_t>(stage)] +=
      std::chrono::duration<float, std::micro>(now - current.last).count();
  current.last = now;
}
void count(FillCount counter, uint32_t amount) {
  if (current.active) current.record.counts[static_cast<size_t>(counter)] += amount;
}
void keep() {
  if (!current.active) return;
  current.active = false;
  std::lock_guard<std::mutex> lock(state().mutex);
  state().records.push_back(current.record);
}
}  // namespace fill_trace

bool fill_trace_built() { return true; }

std::vector<FillTraceRecord> take_fill_trace() {
  std::lock_guard<std::mutex> lock(state().mutex);
  std::vector<FillTraceRecord> out;
  out.swap(state().records);
  state().fills = 0;
  return out;
}
#else
bool fill_trace_built() { return false; }
std::vector<FillTraceRecord> take_fill_trace() { return {}; }
#endif

}  // namespace gramkiln
