// §3.10 memory descriptors, §3.11-3.12 list entries, §3.13 event queues, §3.14 counting events.
#include "api_guard.h"

using ptl::engine;

namespace {
ptl_me_t me_from_le(const ptl_le_t *le) {
    ptl_me_t me{};
    me.start = le->start;
    me.length = le->length;
    me.ct_handle = le->ct_handle;
    me.uid = le->uid;
    me.options = le->options;
    return me;
}
}  // namespace

PTL_API int PtlMDBind(ptl_handle_ni_t ni, const ptl_md_t *md, ptl_handle_md_t *h) {
    REQUIRE_INIT();
    return engine().md_bind(ni, md, h);
}
PTL_API int PtlMDRelease(ptl_handle_md_t h) {
    REQUIRE_INIT();
    return engine().md_release(h);
}
PTL_API int PtlLEAppend(ptl_handle_ni_t ni, ptl_pt_index_t pt, const ptl_le_t *le, ptl_list_t list,
                        void *user_ptr, ptl_handle_le_t *h) {
    REQUIRE_INIT();
    if (!le) return PTL_ARG_INVALID;
    const ptl_me_t me = me_from_le(le);
    return engine().append(ni, pt, &me, false, list, user_ptr, h);
}
PTL_API int PtlLEUnlink(ptl_handle_le_t h) {
    REQUIRE_INIT();
    return engine().unlink(h, false);
}
PTL_API int PtlLESearch(ptl_handle_ni_t ni, ptl_pt_index_t pt, const ptl_le_t *le,
                        ptl_search_op_t op, void *user_ptr) {
    REQUIRE_INIT();
    if (!le) return PTL_ARG_INVALID;
    const ptl_me_t me = me_from_le(le);
    return engine().search(ni, pt, &me, false, op, user_ptr);
}
PTL_API int PtlMEAppend(ptl_handle_ni_t ni, ptl_pt_index_t pt, const ptl_me_t *me, ptl_list_t list,
                        void *user_ptr, ptl_handle_me_t *h) {
    REQUIRE_INIT();
    return engine().append(ni, pt, me, true, list, user_ptr, h);
}
PTL_API int PtlMEUnlink(ptl_handle_me_t h) {
    REQUIRE_INIT();
    return engine().unlink(h, true);
}
PTL_API int PtlMESearch(ptl_handle_ni_t ni, ptl_pt_index_t pt, const ptl_me_t *me,
                        ptl_search_op_t op, void *user_ptr) {
    REQUIRE_INIT();
    return engine().search(ni, pt, me, true, op, user_ptr);
}
PTL_API int PtlEQAlloc(ptl_handle_ni_t ni, ptl_size_t count, ptl_handle_eq_t *h) {
    REQUIRE_INIT();
    return engine().eq_alloc(ni, count, h);
}
PTL_API int PtlEQFree(ptl_handle_eq_t h) {
    REQUIRE_INIT();
    return engine().eq_free(h);
}
PTL_API int PtlEQGet(ptl_handle_eq_t h, ptl_event_t *ev) {
    REQUIRE_INIT();
    return engine().eq_get(h, ev);
}
PTL_API int PtlEQWait(ptl_handle_eq_t h, ptl_event_t *ev) {
    REQUIRE_INIT();
    return engine().eq_poll(&h, 1, PTL_TIME_FOREVER, ev, nullptr);
}
PTL_API int PtlEQPoll(const ptl_handle_eq_t *hs, unsigned int size, ptl_time_t timeout,
                      ptl_event_t *ev, unsigned int *which) {
    REQUIRE_INIT();
    return engine().eq_poll(hs, size, timeout, ev, which);
}
PTL_API int PtlCTAlloc(ptl_handle_ni_t ni, ptl_handle_ct_t *h) {
    REQUIRE_INIT();
    return engine().ct_alloc(ni, h);
}
PTL_API int PtlCTFree(ptl_handle_ct_t h) {
    REQUIRE_INIT();
    return engine().ct_free(h);
}
PTL_API int PtlCTCancelTriggered(ptl_handle_ct_t h) {
    REQUIRE_INIT();
    return engine().ct_cancel_triggered(h);
}
PTL_API int PtlCTGet(ptl_handle_ct_t h, ptl_ct_event_t *ev) {
    REQUIRE_INIT();
    return engine().ct_get(h, ev);
}
PTL_API int PtlCTWait(ptl_handle_ct_t h, ptl_size_t test, ptl_ct_event_t *ev) {
    REQUIRE_INIT();
    return engine().ct_poll(&h, &test, 1, PTL_TIME_FOREVER, ev, nullptr);
}
PTL_API int PtlCTPoll(const ptl_handle_ct_t *hs, const ptl_size_t *tests, unsigned int size,
                      ptl_time_t timeout, ptl_ct_event_t *ev, unsigned int *which) {
    REQUIRE_INIT();
    return engine().ct_poll(hs, tests, size, timeout, ev, which);
}
PTL_API int PtlCTSet(ptl_handle_ct_t h, ptl_ct_event_t v) {
    REQUIRE_INIT();
    return engine().ct_set(h, v);
}
PTL_API int PtlCTInc(ptl_handle_ct_t h, ptl_ct_event_t v) {
    REQUIRE_INIT();
    return engine().ct_inc(h, v);
}
