// Descriptor builders shared by the test programs (also by the fuzz target, which has no
// GoogleTest): wildcard source, any uid, no counter unless given.
#pragma once

#include <portals4.h>

namespace ptltest {

inline ptl_md_t md_desc(void *start, ptl_size_t len, ptl_handle_eq_t eq = PTL_EQ_NONE,
                        ptl_handle_ct_t ct = PTL_CT_NONE, unsigned options = 0) {
    ptl_md_t md{};
    md.start = start;
    md.length = len;
    md.eq_handle = eq;
    md.ct_handle = ct;
    md.options = options;
    return md;
}

inline ptl_me_t me_desc(void *start, ptl_size_t len, unsigned options, ptl_match_bits_t bits = 0,
                        ptl_match_bits_t ignore = 0, ptl_handle_ct_t ct = PTL_CT_NONE) {
    ptl_me_t me{};
    me.start = start;
    me.length = len;
    me.ct_handle = ct;
    me.uid = PTL_UID_ANY;
    me.options = options;
    me.match_id.phys.nid = PTL_NID_ANY;
    me.match_id.phys.pid = PTL_PID_ANY;
    me.match_bits = bits;
    me.ignore_bits = ignore;
    return me;
}

inline ptl_le_t le_desc(void *start, ptl_size_t len, unsigned options, ptl_handle_ct_t ct = PTL_CT_NONE) {
    ptl_le_t le{};
    le.start = start;
    le.length = len;
    le.ct_handle = ct;
    le.uid = PTL_UID_ANY;
    le.options = options;
    return le;
}

}  // namespace ptltest
