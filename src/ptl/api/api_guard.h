// The libportals4 face is a thin C adapter: it checks PtlInit and forwards to the engine,
// which owns every Portals rule (DESIGN decision 1).
#pragma once

#include <portals4.h>

#include "../engine/engine.h"

#define PTL_API extern "C" __attribute__((visibility("default")))
#define REQUIRE_INIT()                                  \
    do {                                                \
        if (!ptl::engine().initialized()) return PTL_NO_INIT; \
    } while (0)
