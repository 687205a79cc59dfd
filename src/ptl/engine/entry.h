// List entries (§3.11) and match list entries (§3.12) share one representation: an LE is an
// ME that matches everything and has no locally managed offset. An unexpected header (§2.5)
// remembers a message delivered into an overflow entry until an append or search claims it.
#pragma once

#include <portals4.h>

#include <cstdint>
#include <vector>

#include "ilist.h"
#include "region.h"

namespace ptl {

class Ni;
struct Ct;

// The slots given to a PTLX_ME_SLOT_POOL entry (PtlXMEGiveSlots), oldest first: their offsets
// in a ring as long as the entry has room for slots.
struct SlotFifo {
    std::vector<uint64_t> ring;
    uint32_t head = 0, count = 0;

    bool empty() const { return count == 0; }
    uint64_t front() const { return ring[head]; }
    void pop() {
        head = head + 1 == ring.size() ? 0 : head + 1;
        --count;
    }
    uint32_t room() const { return uint32_t(ring.size()) - count; }
    void push(const uint64_t *offsets, uint32_t n) {  // n <= room()
        size_t tail = head + count;
        if (tail >= ring.size()) tail -= ring.size();
        for (uint32_t i = 0; i < n; ++i) {
            ring[tail] = offsets[i];
            if (++tail == ring.size()) tail = 0;
        }
        count += n;
    }
};

struct Entry {
    Ni *ni = nullptr;
    uint32_t handle = 0;
    bool is_me = false;
    ptl_me_t desc{};
    Region region;
    Ct *ct = nullptr;
    void *user_ptr = nullptr;
    ptl_pt_index_t pt = 0;
    ptl_list_t list = PTL_PRIORITY_LIST;
    uint64_t seq = 0;           // posting order across exact and wildcard entries
    uint64_t local_offset = 0;  // PTL_ME_MANAGE_LOCAL
    uint32_t uh_count = 0;      // unexpected headers that point into this entry
    uint32_t transfers = 0;     // bulk deliveries into or out of it in flight (bulk_delivery.h)
    bool exact = false;         // indexed by match bits (no ignore bits)
    bool auto_unlinked = false; // left the list by itself; handle still answers PTL_IN_USE
    int32_t export_slot = -1;   // reachable by peers without us (direct_exports.h)
    int32_t remote_slot = -1;   // reachable by RDMA without us (remote_exports.h)
    bool pooled = false;        // PTLX_ME_SLOT_POOL: messages land in `slots`
    // A put matched in the priority list needs none of the checks and bookkeeping a general
    // message does (target.cc's deliver_plain_put): any uid, puts allowed, contiguous accessible
    // memory, no use-once, offsets the initiator's or the pool's.
    bool plain_put = false;
    SlotFifo slots;
    bool exported() const { return export_slot >= 0 || remote_slot >= 0; }
    IHook hook;

    unsigned opts() const { return desc.options; }
    bool checked_access() const { return !(desc.options & PTL_ME_IS_ACCESSIBLE); }
};

enum class UhKind : uint8_t { Put, Get, Atomic, FetchAtomic };

struct UnexpectedHeader {
    UhKind kind;
    ptl_process_t initiator;  // as reported in events
    uint32_t src_nid, src_pid, src_rank;
    ptl_uid_t uid;
    ptl_match_bits_t match_bits;
    ptl_hdr_data_t hdr_data;
    ptl_size_t rlength, mlength, remote_offset;
    ptl_op_t atomic_op;
    ptl_datatype_t atomic_type;
    Entry *entry;  // the overflow entry holding the data
    void *start;   // where the data landed in the overflow buffer
    bool pending_bulk = false;  // a wire still moves its data there (bulk_delivery.h)
    IHook all_hook;
    IHook bucket_hook;
};

}  // namespace ptl
