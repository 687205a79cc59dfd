/* A C99 client written against the reference portals4.h: names, types, switch labels and
 * the calling patterns of SHMEM/MPI clients. Compiled with -Werror by
 * compat_reference_header.sh, with and without PTL_STRICT_4_3, and run. */
#include <portals4.h>
#include <stdio.h>
#include <string.h>

static const char *kind(ptl_event_kind_t k) {
    switch (k) { /* G5: constants are valid case labels */
        case PTL_EVENT_GET: return "GET";
        case PTL_EVENT_PUT: return "PUT";
        case PTL_EVENT_LINK: return "LINK";
        case PTL_EVENT_SEND: return "SEND";
        case PTL_EVENT_ACK: return "ACK";
        case PTL_EVENT_SEARCH: return "SEARCH";
        default: return "other";
    }
}

int main(void) {
    ptl_handle_ni_t ni;
    ptl_ni_limits_t desired, actual;
    ptl_process_t me;
    ptl_handle_eq_t eq;
    ptl_handle_ct_t ct;
    ptl_pt_index_t pt;
    ptl_handle_le_t le_h;
    ptl_handle_md_t md_h;
    ptl_le_t le;
    ptl_md_t md;
    ptl_event_t ev;
    ptl_ct_event_t cte;
    long target = 0, source = 5;
    int rc;
#ifndef PTL_STRICT_4_3
    unsigned old_opts = PTL_LE_ACK_DISABLE;
    int old_rc = PTL_INTERRUPTED;
    (void)old_opts;
    (void)old_rc;
#endif
    if (PtlInit() != PTL_OK) return 1;
    memset(&desired, 0, sizeof desired);
    desired.features = PTL_TARGET_BIND_INACCESSIBLE | PTL_TOTAL_DATA_ORDERING;
    rc = PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_NO_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, &desired, &actual, &ni);
    if (rc != PTL_OK) return 2;
    if (!(actual.features & PTL_TARGET_BIND_INACCESSIBLE)) return 3;
    PtlGetPhysId(ni, &me);
    PtlEQAlloc(ni, 64, &eq);
    PtlCTAlloc(ni, &ct);
    PtlPTAlloc(ni, 0, eq, PTL_PT_ANY, &pt);
    le.start = NULL; /* the whole address space, as SHMEM libraries bind it */
    le.length = PTL_SIZE_MAX;
    le.ct_handle = ct;
    le.uid = PTL_UID_ANY;
    le.options = PTL_LE_OP_PUT | PTL_LE_OP_GET | PTL_LE_EVENT_CT_COMM | PTL_LE_EVENT_LINK_DISABLE;
    if (PtlLEAppend(ni, pt, &le, PTL_PRIORITY_LIST, NULL, &le_h) != PTL_OK) return 4;
    md.start = NULL;
    md.length = PTL_SIZE_MAX;
    md.options = PTL_MD_EVENT_CT_ACK;
    md.eq_handle = eq;
    md.ct_handle = PTL_CT_NONE;
    if (PtlMDBind(ni, &md, &md_h) != PTL_OK) return 5;
    rc = PtlAtomic(md_h, (ptl_size_t)&source, sizeof source, PTL_ACK_REQ, me, pt, 0, (ptl_size_t)&target, NULL, 0,
                   PTL_SUM, PTL_INT64_T);
    if (rc != PTL_OK) return 6;
    if (PtlCTWait(ct, 1, &cte) != PTL_OK || cte.failure) return 7;
    while (PtlEQWait(eq, &ev) == PTL_OK && ev.type != PTL_EVENT_ACK) printf("event %s\n", kind(ev.type));
    if (ev.ni_fail_type != PTL_NI_OK || target != 5) return 8;
    PtlMDRelease(md_h);
    PtlLEUnlink(le_h);
    PtlPTFree(ni, pt);
    PtlCTFree(ct);
    PtlEQFree(eq);
    PtlNIFini(ni);
    PtlFini();
    printf("reference client OK\n");
    return 0;
}
