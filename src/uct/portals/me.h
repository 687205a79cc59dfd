// ME descriptors as the component uses them: its own memory (IS_ACCESSIBLE), no LINK or
// UNLINK events, no unexpected headers (UCP does its own unexpected matching).
#pragma once

#include <portals4.h>

#include <cstddef>

namespace uct_portals {

inline ptl_process_t any_process() {
    ptl_process_t p;
    p.phys.nid = PTL_NID_ANY;
    p.phys.pid = PTL_PID_ANY;
    return p;
}

inline ptl_me_t make_me(void *start, size_t length, unsigned options, ptl_match_bits_t bits,
                        ptl_match_bits_t ignore, ptl_process_t from = any_process()) {
    ptl_me_t me{};
    me.start = start;
    me.length = length;
    me.ct_handle = PTL_CT_NONE;
    me.uid = PTL_UID_ANY;
    me.options = options | PTL_ME_IS_ACCESSIBLE | PTL_ME_EVENT_LINK_DISABLE | PTL_ME_EVENT_UNLINK_DISABLE |
                 PTL_ME_UNEXPECTED_HDR_DISABLE;
    me.match_id = from;
    me.match_bits = bits;
    me.ignore_bits = ignore;
    return me;
}

}  // namespace uct_portals
