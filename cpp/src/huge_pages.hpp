// Transparent huge pages for a runtime's caches (see huge_pages.cpp).
#pragma once

#include <atomic>
#include <cstddef>

namespace gramkiln {

class Runtime;

// Ask the kernel (Linux 6.1 and later: MADV_COLLAPSE) to back the memory a computed fill reads
// with huge pages, now that the prewarm has built it: the runtime's tables and caches, by the
// huge-page-sized extents they lie in. The caches are thousands of small blocks scattered over
// the heap, and a computed fill's TLB misses on them were a fifth of its time on a 2-vCPU
// Intel VM (docs/design/runtime.md, "Session 51"). Returns the extents now in huge pages; 0
// where the kernel cannot, where GRAMKILN_HUGE_PAGES was "off" or "0" at load
// (GroupCache::huge_pages), or off Linux. Never changes what any memory holds. Stops between
// extents once `stop` (if given) is set.
size_t back_caches_with_huge_pages(const Runtime& rt, const std::atomic<bool>* stop = nullptr);

}  // namespace gramkiln
