// The engine's message format, carried unchanged by every wire (digest §16: Tables 4-1..4-6
// plus what they omit: hdr_data for atomics, the initiator's logical NI, the unordered flag).
#pragma once

#include <portals4.h>

#include <cstdint>

namespace ptl::proto {

enum Op : uint8_t {
    kPut = 1,
    kGet = 2,
    kAtomic = 3,
    kFetchAtomic = 4,
    kSwap = 5,
    kAck = 6,    // response to put/atomic: ack requested, or rendezvous data pulled
    kReply = 7,  // response to get/fetch/swap; inline data or already written by bulk
    // The direct path over RDMA (direct_remote.cc): between engines, about exported entries.
    kExportInfo = 8,  // one exported entry (fields below)
    kRevoke = 9,      // forget an exported entry; answer kRevoked once nothing of ours is in flight
    kRevoked = 10,
    kReleased = 11,  // the sender closed its RDMA side: it holds none of ours, exports none to us
    kOpLast = 11,
};

inline const char *op_name(uint8_t op) {
    static const char *const names[] = {"?",   "put",   "get",         "atomic", "fetch-atomic", "swap",
                                        "ack", "reply", "export-info", "revoke", "revoked",      "released"};
    return op <= kOpLast ? names[op] : "?";
}

enum Flags : uint8_t {
    kRendezvous = 1,   // request: payload is not inline; pull it from the segments
    kBulkReply = 2,    // get: write the reply straight into the iovecs in the payload
    kUnordered = 4,    // PTL_MD_UNORDERED
    kDataWritten = 8,  // reply: data already placed by the target's bulk write
    kSendOnly = 16,    // ack: only completes the rendezvous SEND, no ACK event wanted
};

struct Header {
    uint8_t op;
    uint8_t ni_index;  // the initiator's logical NI: messages go to the same kind (§2.5)
    uint8_t ack_req;
    uint8_t flags;
    uint8_t atomic_op;
    uint8_t atomic_type;
    uint8_t ni_fail;   // responses
    uint8_t ptl_list;  // responses: the list the operation matched in
    uint32_t pt_index;
    uint32_t uid;
    uint32_t src_rank;     // the initiator's rank on logical NIs (PTL_RANK_ANY otherwise)
    uint32_t operand_len;  // CSWAP/MSWAP operand bytes at the start of the payload
    uint64_t match_bits;
    uint64_t hdr_data;
    uint64_t remote_offset;  // request: requested offset; response: offset actually used
    uint64_t length;         // rlength
    uint64_t mlength;        // responses
    uint64_t op_id;          // the initiator's operation, echoed in responses
};
static_assert(sizeof(Header) == 72);

// kExportInfo carries an exported entry in the request fields: ni_index, pt_index, match_bits,
// uid; atomic_type 1 for an ME; remote_offset its address, length its length, hdr_data the
// wire's key, mlength its options; op_id its slot (high half) and generation (low half).
// kRevoke and kRevoked carry the slot and generation in op_id, the revocation round in hdr_data.

// Rendezvous puts and bulk-reply gets carry their memory as segments after the operand.
struct Segment {
    uint64_t addr;
    uint64_t len;
    uint64_t key;  // what the wire needs to reach it (verbs: the rkey); 0 elsewhere
};

}  // namespace ptl::proto
