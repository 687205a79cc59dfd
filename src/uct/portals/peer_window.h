// Sends without an acknowledgement per message. A message (active, eager tagged or a
// rendezvous request) is put without PTL_ACK_REQ, but its send buffer is held until the
// receiver has processed it: the message may have met the receiver's catch-all and be
// fetched from that buffer. The receiver counts what it processed per sender iface and
// returns the count in "grants": 16 bits of the next message it sends that way, or a
// zero-byte put to the sender's ctl portal once GRANT_BATCH are owed, at the end of the
// progress call that processed a message asking for it, or when its progress has found
// nothing to do for kIdleGrantDelayUs. A sender asks (a bit in the message) when it will need
// the report: the send is zcopy (it completes by the report), or half its window or three
// quarters of its send buffers are held; at most once a quarter window. Granting whenever the
// receiver went idle instead cost a grant, a doorbell on RDMA, every other message of a stream
// over a slow wire, where the receiver is idle between most messages.
// Grants are deltas, so state outlives neither side's iface: a stale
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
    uint64_t asked_at = 0;  // `sent` after the last message that asked for a report
    // The flush probe: one at a time; `probed` messages are known to have arrived.
    Op probe_op;
    bool probe_in_flight = false;
    uint64_t probe_covers = 0, probed = 0;
    std::vector<Ep *> flushing;  // eps with flushes waiting for messages to this peer
    // Receiving from it: messages processed and not yet reported.
    uint32_t owed = 0;
    ucs_time_t owed_since = 0;  // when the oldest of them was processed
    bool asked = false;         // one of them asked for a report
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
    // The idle_grant_delay the iface sets up: only buffers nobody waits for wait that long
    // (a sender that needs them asks).
    static constexpr double kIdleGrantDelayUs = 1000;

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
    // Whether the next message to `p` asks for a report (noted as asked if so): it must
    // (`awaits_report`), or the sender runs short of buffers (half of `tx_window` held by
    // `p`, or `pool_low`) and has not asked in the last quarter window.
    bool should_ask(Peer &p, bool awaits_report, unsigned tx_window, bool pool_low) {
        const bool short_of_buffers = pool_low || 2 * (p.held.size() + 1) >= tx_window;
        if (!awaits_report && !(short_of_buffers && 4 * (p.sent + 1 - p.asked_at) >= tx_window)) return false;
        p.asked_at = p.sent + 1;
        return true;
    }
    // The message that asked was not sent.
    void ask_again(Peer &p) { p.asked_at = 0; }
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
    // callback carries the grant. `ask`: the message asked for a report.
    void processed_from(Peer &p, bool ask);
    // The grant to piggy-back on a message to `p` (0: none owed); taken from what is owed.
    uint16_t take_piggy_grant(Peer &p) {
        const uint32_t g = std::min(p.owed, kMaxPiggyGrant);
        p.owed -= g;
        if (p.owed == 0) p.asked = false;
        return uint16_t(g);
    }
    // A piggy-backed grant that could not be sent is owed again.
    void owe_again(Peer &p, uint16_t grant) { p.owed += grant; }
    // Grants asked for, and those owed since before now - idle_grant_delay (all: every one).
    void send_owed_grants(ucs_time_t now, bool all);
    bool owes_grants() const { return !owing_.empty(); }
    bool was_asked() const { return asked_; }

private:
    Peer &find(const ptl_process_t &proc, uint8_t peer_ctl_pt);
    void send_grant(Peer &p);

    Setup setup_;
    std::unordered_map<PeerKey, std::unique_ptr<Peer>, PeerKeyHash> peers_;  // as long as the iface
    Peer *last_ = nullptr;       // most traffic comes from one peer at a time
    std::vector<Peer *> owing_;  // peers owed a grant
    bool asked_ = false;         // some of them asked
};

}  // namespace uct_portals
