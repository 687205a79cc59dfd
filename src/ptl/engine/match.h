// The match function (§3.12, rules M1-M4) for incoming messages and unexpected headers.
#pragma once

#include <portals4.h>

#include "entry.h"
#include "ni.h"
#include "pt.h"

namespace ptl {

struct Source {
    uint32_t nid, pid, rank;
};

inline bool source_matches(const Ni &n, const Entry &e, const Source &s) {
    if (!n.matching()) return true;
    if (n.logical()) return e.desc.match_id.rank == PTL_RANK_ANY || e.desc.match_id.rank == s.rank;
    const auto &id = e.desc.match_id.phys;
    return (id.nid == PTL_NID_ANY || id.nid == s.nid) && (id.pid == PTL_PID_ANY || id.pid == s.pid);
}

inline bool bits_match(const Entry &e, ptl_match_bits_t bits) {
    return ((bits ^ e.desc.match_bits) & ~e.desc.ignore_bits) == 0;
}

// Calls f(header) for each unexpected header `e` matches, oldest first, until f returns
// false. Exact entries only look at their bucket. f may remove the header it is given.
template <typename F>
void for_each_matching_header(const Ni &n, Pt &pt, const Entry &e, F &&f) {
    auto ok = [&](UnexpectedHeader *u) {
        return bits_match(e, u->match_bits) && source_matches(n, e, {u->src_nid, u->src_pid, u->src_rank});
    };
    if (e.exact) {
        auto it = pt.unexpected.by_bits.find(e.desc.match_bits);
        if (it == pt.unexpected.by_bits.end()) return;
        UhBucket &b = it->second;
        for (UnexpectedHeader *u = b.front(); u;) {
            UnexpectedHeader *next = b.next(u);
            // The bucket may vanish once its last header is claimed (a sweep of empty ones).
            const bool last = next == nullptr;
            if (ok(u) && !f(u)) return;
            if (last) return;
            u = next;
        }
        return;
    }
    for (UnexpectedHeader *u = pt.unexpected.all.front(); u;) {
        UnexpectedHeader *next = pt.unexpected.all.next(u);
        if (ok(u) && !f(u)) return;
        u = next;
    }
}

}  // namespace ptl
