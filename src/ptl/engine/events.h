// Which full events an entry or MD lets through (digest §7.4) and which counting events it
// records (digest §8), kept in one place for the target, list and initiator paths.
#pragma once

#include <portals4.h>

#include "entry.h"
#include "md.h"

namespace ptl {

inline bool is_overflow_kind(ptl_event_kind_t t) {
    return t == PTL_EVENT_PUT_OVERFLOW || t == PTL_EVENT_GET_OVERFLOW ||
           t == PTL_EVENT_ATOMIC_OVERFLOW || t == PTL_EVENT_FETCH_ATOMIC_OVERFLOW;
}

inline ptl_event_kind_t overflow_kind(UhKind k) {
    switch (k) {
        case UhKind::Put: return PTL_EVENT_PUT_OVERFLOW;
        case UhKind::Get: return PTL_EVENT_GET_OVERFLOW;
        case UhKind::Atomic: return PTL_EVENT_ATOMIC_OVERFLOW;
        default: return PTL_EVENT_FETCH_ATOMIC_OVERFLOW;
    }
}

inline bool entry_allows_full(const Entry &e, ptl_event_kind_t t, bool success) {
    const unsigned o = e.opts();
    switch (t) {
        case PTL_EVENT_LINK: return !(o & PTL_ME_EVENT_LINK_DISABLE);
        case PTL_EVENT_AUTO_UNLINK:
        case PTL_EVENT_AUTO_FREE: return !(o & PTL_ME_EVENT_UNLINK_DISABLE);
        default: break;
    }
    if (is_overflow_kind(t)) {
        if (o & PTL_ME_EVENT_OVER_DISABLE) return false;
    } else if (o & PTL_ME_EVENT_COMM_DISABLE) {
        return false;
    }
    return !(success && (o & PTL_ME_EVENT_SUCCESS_DISABLE));
}

// The CT increment an entry's event makes: 0 = not counted.
inline uint64_t entry_count_amount(const Entry &e, ptl_event_kind_t t, bool success,
                                   uint64_t mlength) {
    if (!e.ct) return 0;
    const unsigned o = e.opts();
    const unsigned need = is_overflow_kind(t) ? PTL_ME_EVENT_CT_OVERFLOW : PTL_ME_EVENT_CT_COMM;
    if (!(o & need)) return 0;
    if (!success) return 1;
    return (o & PTL_ME_EVENT_CT_BYTES) ? mlength : 1;
}

inline bool md_allows_full(const Md &m, ptl_event_kind_t t, bool success) {
    if (!m.eq) return false;
    const unsigned o = m.desc.options;
    if (t == PTL_EVENT_SEND && (o & PTL_MD_EVENT_SEND_DISABLE)) return false;
    return !(success && (o & PTL_MD_EVENT_SUCCESS_DISABLE));
}

inline uint64_t md_count_amount(const Md &m, ptl_event_kind_t t, bool success, uint64_t mlength) {
    if (!m.ct) return 0;
    const unsigned o = m.desc.options;
    const unsigned need = t == PTL_EVENT_SEND    ? PTL_MD_EVENT_CT_SEND
                          : t == PTL_EVENT_REPLY ? PTL_MD_EVENT_CT_REPLY
                                                 : PTL_MD_EVENT_CT_ACK;
    if (!(o & need)) return 0;
    if (!success) return 1;
    return (o & PTL_MD_EVENT_CT_BYTES) ? mlength : 1;
}

// A target event describing an unexpected header (overflow and search events, L8).
inline ptl_event_t event_from_header(const UnexpectedHeader &u, ptl_event_kind_t type,
                                     ptl_pt_index_t pt, void *user_ptr, ptl_ni_fail_t fail) {
    ptl_event_t ev{};
    ev.type = type;
    ev.start = u.start;
    ev.user_ptr = user_ptr;
    ev.hdr_data = u.hdr_data;
    ev.match_bits = u.match_bits;
    ev.rlength = u.rlength;
    ev.mlength = u.mlength;
    ev.remote_offset = u.remote_offset;
    ev.initiator = u.initiator;
    ev.uid = u.uid;
    ev.pt_index = pt;
    ev.ptl_list = PTL_OVERFLOW_LIST;
    ev.ni_fail_type = fail;
    ev.atomic_operation = u.atomic_op;
    ev.atomic_type = u.atomic_type;
    return ev;
}

}  // namespace ptl
