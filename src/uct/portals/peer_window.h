// Sends without an acknowledgement per message. A message (active, eager tagged or a
// rendezvous request) is put without PTL_ACK_REQ, but its send buffer is held until the
// receiver has processed it: the message may have met the receiver's catch-all and be
// fetched from that buffer. The receiver counts what it processed per sender iface and
// returns the count in "grants": 16 bits of the next message it sends that way, or a
// zero-byte put to the sender's ctl portal once GRANT_BATCH are owed or its progress finds
// nothing to do. Grants are deltas, so state outlives neither side's iface: a stale
// absolute count would strand a new iface on a reused portal index. TX_WINDOW bounds the
// buffers one peer holds. A flush completes when the messages before it were reported
// processed or an acknowledged probe put after them came back (the engine executes a peer's
// operations in order); the report alone suffices, so a peer that has processed everything
// and closed its iface (which drops the probe) does not hang the flush. A zcopy send, though
// gathered into a send buffer, completes the same way (or fails with its ep), as on rc.
#pragma once

extern "C" {
#include <portals4.h>
}

#include <cstddef>
#include <cstdint>
#include <functional>

namespace uct_portals {

// A peer iface: its process and ctl portal (which names the iface among the process's).
struct PeerKey {
    uint32_t nid = 0, pid = 0;
    uint8_t ctl_pt = 0;
    bool operator==(const PeerKey &o) const { return nid == o.nid && pid == o.pid && ctl_pt == o.ctl_pt; }
};

struct PeerKeyHash {
    size_t operator()(const PeerKey &k) const {
        return std::hash<uint64_t>()((uint64_t(k.nid) << 32 | k.pid) * 0x9e3779b97f4a7c15ull ^ k.ctl_pt);
    }
};

// Grants piggy-backed on a message fit in its 16-bit fetch length field (unused by
// messages other than rendezvous announcements).
constexpr uint32_t kMaxPiggyGrant = 0xffff;

}  // namespace uct_portals
