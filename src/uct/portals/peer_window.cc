// Peer windows (peer_window.h): which send buffers a peer iface still needs, the grants that
// give them back, and the probe that stands in for per-message acknowledgements.
#include "peer_window.h"

extern "C" {
#include <ucs/debug/log.h>
}

#include "message_format.h"

using namespace uct_portals;

Peer &PeerWindows::find(const ptl_process_t &proc, uint8_t peer_ctl_pt) {
    std::unique_ptr<Peer> &slot = peers_[PeerKey{proc.phys.nid, proc.phys.pid, peer_ctl_pt}];
    if (!slot) {
        slot = std::make_unique<Peer>();
        slot->proc = proc;
        slot->ctl_pt = peer_ctl_pt;
    }
    last_ = slot.get();
    return *slot;
}

uint32_t PeerWindows::release(Peer &p, uint32_t count, std::vector<int> &freed) {
    count = std::min<uint32_t>(count, uint32_t(p.held.size()));
    for (uint32_t i = 0; i < count; ++i) {
        freed.push_back(p.held.front());
        p.held.pop_front();
    }
    return count;
}

void PeerWindows::processed_from(Peer &p, bool ask) {
    if (p.owed++ == 0) p.owed_since = ucs_get_time();
    if (p.owed >= setup_.grant_batch) {
        send_grant(p);
        return;
    }
    if (ask) {
        p.asked = true;
        asked_ = true;
    }
    if (!p.in_owing_list) {
        p.in_owing_list = true;
        owing_.push_back(&p);
    }
}

void PeerWindows::send_grant(Peer &p) {
    p.asked = false;
    const uint32_t g = std::exchange(p.owed, 0u);
    const int rc = PtlPut(setup_.md, setup_.zero_source, 0, PTL_NO_ACK_REQ, p.proc, p.ctl_pt,
                          kGrantBits | setup_.own_ctl_pt, 0, nullptr, g);
    if (rc != PTL_OK)
        ucs_debug("portals: grant of %u to nid 0x%x pid %u not sent: %d", g, p.proc.phys.nid, p.proc.phys.pid,
                  rc);
}

void PeerWindows::send_owed_grants(ucs_time_t now, bool all) {
    const ucs_time_t due = now - setup_.idle_grant_delay;
    asked_ = false;
    std::erase_if(owing_, [&](Peer *p) {
        if (p->owed && !all && !p->asked && p->owed_since > due) return false;
        if (p->owed) send_grant(*p);
        p->in_owing_list = false;
        return true;
    });
}

// The engine executes a peer's operations in order, so the acknowledgement of a zero-byte
// put issued after the messages says they all arrived.
void PeerWindows::ensure_probe(Peer &p) {
    if (p.probe_in_flight) return;
    p.probe_op = Op{};
    p.probe_op.type = OpType::Probe;
    p.probe_op.window = &p;
    const int rc = PtlPut(setup_.md, setup_.zero_source, 0, PTL_ACK_REQ, p.proc, p.ctl_pt, kProbeBits, 0,
                          &p.probe_op, 0);
    if (rc != PTL_OK) {
        ucs_debug("portals: flush probe to nid 0x%x pid %u not sent: %d", p.proc.phys.nid, p.proc.phys.pid,
                  rc);
        return;
    }
    p.probe_in_flight = true;
    p.probe_covers = p.sent;
}

void PeerWindows::probe_answered(Peer &p, bool arrived) {
    p.probe_in_flight = false;
    if (arrived) p.probed = std::max(p.probed, p.probe_covers);
}
