// §3.5 initialization, §3.6 network interfaces, §3.7 portal table, §3.8-3.9 identification,
// §3.17 bundles and §3.18 handles.
#include "api_guard.h"

using ptl::engine;

PTL_API int PtlInit(void) { return engine().init(); }
PTL_API void PtlFini(void) { engine().fini(); }
PTL_API void PtlAbort(void) { engine().abort(); }

PTL_API int PtlNIInit(ptl_interface_t iface, unsigned int options, ptl_pid_t pid,
                      const ptl_ni_limits_t *desired, ptl_ni_limits_t *actual,
                      ptl_handle_ni_t *ni_handle) {
    REQUIRE_INIT();
    return engine().ni_init(iface, options, pid, desired, actual, ni_handle);
}
PTL_API int PtlNIFini(ptl_handle_ni_t ni) {
    REQUIRE_INIT();
    return engine().ni_fini(ni);
}
PTL_API int PtlNIStatus(ptl_handle_ni_t ni, ptl_sr_index_t reg, ptl_sr_value_t *status) {
    REQUIRE_INIT();
    return engine().ni_status(ni, reg, status);
}
PTL_API int PtlNIHandle(ptl_handle_any_t handle, ptl_handle_ni_t *ni) {
    REQUIRE_INIT();
    return engine().ni_handle(handle, ni);
}
PTL_API int PtlSetMap(ptl_handle_ni_t ni, ptl_size_t size, const ptl_process_t *mapping) {
    REQUIRE_INIT();
    return engine().set_map(ni, size, mapping);
}
PTL_API int PtlGetMap(ptl_handle_ni_t ni, ptl_size_t size, ptl_process_t *mapping, ptl_size_t *actual) {
    REQUIRE_INIT();
    return engine().get_map(ni, size, mapping, actual);
}
PTL_API int PtlPTAlloc(ptl_handle_ni_t ni, unsigned int options, ptl_handle_eq_t eq,
                       ptl_pt_index_t req, ptl_pt_index_t *pt) {
    REQUIRE_INIT();
    return engine().pt_alloc(ni, options, eq, req, pt);
}
PTL_API int PtlPTFree(ptl_handle_ni_t ni, ptl_pt_index_t pt) {
    REQUIRE_INIT();
    return engine().pt_free(ni, pt);
}
PTL_API int PtlPTDisable(ptl_handle_ni_t ni, ptl_pt_index_t pt) {
    REQUIRE_INIT();
    return engine().pt_disable(ni, pt);
}
PTL_API int PtlPTEnable(ptl_handle_ni_t ni, ptl_pt_index_t pt) {
    REQUIRE_INIT();
    return engine().pt_enable(ni, pt);
}
PTL_API int PtlGetUid(ptl_handle_ni_t ni, ptl_uid_t *uid) {
    REQUIRE_INIT();
    return engine().get_uid(ni, uid);
}
PTL_API int PtlGetId(ptl_handle_ni_t ni, ptl_process_t *id) {
    REQUIRE_INIT();
    return engine().get_id(ni, id);
}
PTL_API int PtlGetPhysId(ptl_handle_ni_t ni, ptl_process_t *id) {
    REQUIRE_INIT();
    return engine().get_phys_id(ni, id);
}
PTL_API int PtlStartBundle(ptl_handle_ni_t ni) {
    REQUIRE_INIT();
    return engine().start_bundle(ni);
}
PTL_API int PtlEndBundle(ptl_handle_ni_t ni) {
    REQUIRE_INIT();
    return engine().end_bundle(ni);
}
PTL_API int PtlHandleIsEqual(ptl_handle_any_t a, ptl_handle_any_t b) { return a == b; }
