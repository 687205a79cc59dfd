// portals4_ext.h: the engine entry points the UCT component needs beyond Portals 4.3.
#include <portals4_ext.h>

#include <algorithm>
#include <cstring>

#include "api_guard.h"

using ptl::engine;

PTL_API int PtlXProgress(void) {
    REQUIRE_INIT();
    return engine().app_progress();
}
PTL_API int PtlXEQArm(ptl_handle_eq_t eq, int fd) {
    REQUIRE_INIT();
    return engine().eq_arm(eq, fd);
}
PTL_API int PtlXNidReachable(ptl_handle_ni_t ni, ptl_nid_t nid) {
    REQUIRE_INIT();
    return engine().nid_reachable(ni, nid);
}

PTL_API int PtlXNINotifyDrops(ptl_handle_ni_t ni, int enable) {
    REQUIRE_INIT();
    return engine().set_notify_drops(ni, enable != 0);
}

PTL_API int PtlXEQGrow(ptl_handle_eq_t eq, ptl_size_t count) {
    REQUIRE_INIT();
    return engine().eq_grow(eq, count);
}

PTL_API int PtlXEQTake(ptl_handle_eq_t eq, ptl_event_t *event) {
    REQUIRE_INIT();
    return engine().eq_take(eq, event, 1, nullptr);
}

PTL_API int PtlXEQTakeMany(ptl_handle_eq_t eq, ptl_event_t *events, unsigned max, unsigned *taken) {
    if (taken) *taken = 0;
    REQUIRE_INIT();
    return engine().eq_take(eq, events, max, taken);
}

PTL_API int PtlXProgressEQ(ptl_handle_eq_t eq, ptl_event_t *events, unsigned max, unsigned *taken) {
    if (taken) *taken = 0;
    REQUIRE_INIT();
    return engine().app_progress_take(eq, events, max, taken);
}

PTL_API int PtlXMEGiveSlots(ptl_handle_me_t me, const ptl_size_t *offsets, unsigned count) {
    REQUIRE_INIT();
    return engine().give_slots(me, offsets, count);
}

PTL_API int PtlXPeerAlive(ptl_handle_ni_t ni, ptl_process_t peer) {
    REQUIRE_INIT();
    return engine().peer_alive(ni, peer);
}

PTL_API int PtlXWireUsageSized(ptl_handle_ni_t ni, ptlx_wire_usage_t *usage, size_t size) {
    REQUIRE_INIT();
    if (!usage) return PTL_ARG_INVALID;
    ptlx_wire_usage_t all{};
    const int rc = engine().wire_usage(ni, &all);
    if (rc == PTL_OK) std::memcpy(usage, &all, std::min(size, sizeof all));
    return rc;
}

PTL_API int(PtlXWireUsage)(ptl_handle_ni_t ni, ptlx_wire_usage_t *usage) {
    return PtlXWireUsageSized(ni, usage, 3 * sizeof(ptl_size_t));
}
