// Stage times of computed fills, for measuring where their time goes (bench/fill_stages.py).
// Compiled in only with the CMake option GRAMKILN_FILL_TRACE; without it every macro below is
// empty and a fill reads no clock.
#pragma once

#include "gramkiln/core.hpp"

#ifdef GRAMKILN_FILL_TRACE
namespace gramkiln::fill_trace {
// Begin a fill's record (not for the prewarm's own fills), stamp a stage border, add to a
// counter, and keep the record once the fill is computed.
void begin();
void stamp(FillStage stage);
void count(FillCount counter, uint32_t amount);
void keep();
}  // namespace gramkiln::fill_trace
#define GRAMKILN_TRACE_BEGIN() ::gramkiln::fill_trace::begin()
#define GRAMKILN_TRACE_STAGE(stage) ::gramkiln::fill_trace::stamp(::gramkiln::FillStage::stage)
#define GRAMKILN_TRACE_COUNT(counter, amount) \
  ::gramkiln::fill_trace::count(::gramkiln::FillCount::counter, static_cast<uint32_t>(amount))
#define GRAMKILN_TRACE_KEEP() ::gramkiln::fill_trace::keep()
#else
#define GRAMKILN_TRACE_BEGIN() ((void)0)
#define GRAMKILN_TRACE_STAGE(stage) ((void)0)
#define GRAMKILN_TRACE_COUNT(counter, amount) ((void)0)
#define GRAMKILN_TRACE_KEEP() ((void)0)
#endif
