// Deliveries whose data a wire moves on its own (Wire::bulk_start: RDMA reads of a rendezvous
// put's data, RDMA writes of a get's reply), started when the message matches and reported
// when the wire says the data moved: the target's comm event and counts, the entry's automatic
// unlink, the initiator's ACK or REPLY. Meanwhile the engine goes on with other messages; the
// initiator's later requests wait (BulkHold), since Portals orders a pair's data (G11,
// max_waw_ordered_size): they are handled in arrival order once its transfers are done.
// In the overflow list too: the unexpected header is listed at the match, and an entry that
// would claim it (PtlMEAppend, PtlMESearch) waits until its data is in.
#pragma once

#include <cstdint>

#include "../wire/wire.h"
#include "held_messages.h"
#include "protocol.h"

namespace ptl {

class Ni;
struct Entry;

struct BulkDelivery {
    Ni *ni = nullptr;
    Entry *entry = nullptr;  // kept allocated (Entry::transfers) until this ends
    struct Eq *eq = nullptr;  // the portal's, whose Eq::promised counts this event
    PeerId from{};
    Wire *via = nullptr;
    proto::Header header{};
    uint64_t offset = 0, mlength = 0;
    bool exhausted = false;  // the entry left its list at the match; its AUTO_UNLINK comes after the event
    ptl_list_t list = PTL_PRIORITY_LIST;
    // Matched in the overflow list: its unexpected header, made at the match (arrival order)
    // and claimable once the data is in (UnexpectedHeader::pending_bulk).
    struct UnexpectedHeader *uh = nullptr;
};

// An initiator with transfers in flight, and its requests that arrived since, in order.
struct BulkHold {
    uint32_t inflight = 0;
    HeldMessages queue;
    // Past PTL_BULK_HOLD_MAX queued requests the wire stops returning the initiator's credits
    // (it sends at most its credits more), until the queue is down to half.
    Wire *withheld = nullptr;
};

}  // namespace ptl
