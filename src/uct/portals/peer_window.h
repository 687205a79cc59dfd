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
#include <ucs/time/time.h>
}

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "op.h"
#include "ring.h"

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

// A peer iface, as its windows see it.
struct Peer {
    ptl_process_t proc{};
    uint8_t ctl_pt = 0;
    // Sending to it: buffers of messages it has not reported processed, oldest first, and
    // how many messages were sent; so sent - held.size() are known processed.
    Ring<int> held;
    uint64_t sent = 0;
    // The flush probe: one at a time; `probed` messages are known to have arrived.
    Op probe_op;
    bool probe_in_flight = false;
    uint64_t probe_covers = 0, probed = 0;
    std::vector<Ep *> flushing;  // eps with flushes waiting for messages to this peer
    // Receiving from it: messages processed and not yet reported.
    uint32_t owed = 0;
    ucs_time_t owed_since = 0;  // when the oldest of them was processed
    bool in_owing_list = false;
    bool arrived(uint64_t mark) const { return sent - held.size() >= mark || probed >= mark; }
};

// The windows of one iface's peers. What becomes of the buffers and flushes they release is
// the iface's business: it is told by return values, so this knows nothing of it.
class PeerWindows {
public:
    struct Setup {
        ptl_handle_md_t md = PTL_INVALID_HANDLE;  // grants and probes are put from it
        uintptr_t zero_source = 0;                // any valid address in md (they carry no bytes)
        ptl_pt_index_t own_ctl_pt = 0;            // names us to the peers we grant
        unsigned grant_batch = 1;                 // owed messages that make a grant at once
        ucs_time_t idle_grant_delay = 0;          // how long an idle receiver lets grants wait
    };
    void setup(const Setup &s) { setup_ = s; }
    // The idle_grant_delay the iface sets up.
    static constexpr double kIdleGrantDelayUs = 20;

    Peer &peer(const ptl_process_t &proc, uint8_t peer_ctl_pt) {
        if (last_ && last_->proc.phys.nid == proc.phys.nid && last_->proc.phys.pid == proc.phys.pid &&
            last_->ctl_pt == peer_ctl_pt) [[likely]]
            return *last_;
        return find(proc, peer_ctl_pt);
    }

    // Sending: a message's buffer is held until the peer reports it processed.
    void hold(Peer &p, int tx_desc) {
        p.held.push_back(tx_desc);
        ++p.sent;
    }
    // Up to `count` of the buffers `p` holds, oldest first, appended to `freed`; how many.
    // More than is held comes only from a peer that granted an earlier iface on our portal
    // index: nothing of ours is behind it.
    uint32_t release(Peer &p, uint32_t count, std::vector<int> &freed);
    // A probe behind everything sent to `p` so far, unless one is on its way (one that cannot
    // be sent is not retried: the grants alone then tell what arrived).
    void ensure_probe(Peer &p);
    // The probe's acknowledgement came back: what it covered arrived, unless it failed.
    void probe_answered(Peer &p, bool arrived);

    // Receiving: counted before the message is handed to UCP, so an answer sent from the
    // callback carries the grant.
    void processed_from(Peer &p);
    // The grant to piggy-back on a message to `p` (0: none owed); taken from what is owed.
    uint16_t take_piggy_grant(Peer &p) {
        const uint32_t g = std::min(p.owed, kMaxPiggyGrant);
        p.owed -= g;
        return uint16_t(g);
    }
    // A piggy-backed grant that could not be sent is owed again.
    void owe_again(Peer &p, uint16_t grant) { p.owed += grant; }
    // Grants owed since before now - idle_grant_delay (all: every one), for a progress call
    // that found nothing to do. A receiver that keeps up with its sender is idle between
    // most messages: granting at once there would cost a grant per message.
    void send_owed_grants(ucs_time_t now, bool all);
    bool owes_grants() const { return !owing_.empty(); }

private:
    Peer &find(const ptl_process_t &proc, uint8_t peer_ctl_pt);
    void send_grant(Peer &p);

    Setup setup_;
    std::unordered_map<PeerKey, std::unique_ptr<Peer>, PeerKeyHash> peers_;  // as long as the iface
    Peer *last_ = nullptr;       // most traffic comes from one peer at a time
    std::vector<Peer *> owing_;  // peers owed a grant
};

}  // namespace uct_portals
