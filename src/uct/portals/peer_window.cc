// Peer windows (peer_window.h): which send buffers a peer iface still needs, the grants that
// give them back, and the flush probe that stands in for per-message acknowledgements.
#include "iface_impl.h"

extern "C" {
#include <ucs/time/time.h>
}

#include <algorithm>

using namespace uct_portals;

Peer &Iface::find_peer(const ptl_process_t &proc, uint8_t peer_ctl_pt) {
    std::unique_ptr<Peer> &slot = peers[PeerKey{proc.phys.nid, proc.phys.pid, peer_ctl_pt}];
    if (!slot) {
        slot = std::make_unique<Peer>();
        slot->proc = proc;
        slot->ctl_pt = peer_ctl_pt;
    }
    last_peer = slot.get();
    return *slot;
}

// More than is held comes only from a peer that granted an earlier iface on our portal
// index: nothing of ours is behind it.
void Iface::release_held(Peer &p, uint32_t count) {
    count = std::min<uint32_t>(count, uint32_t(p.held.size()));
    for (uint32_t i = 0; i < count; ++i) {
        tx_free.push_back(p.held.front());
        p.held.pop_front();
    }
    // Flush and zcopy completions run from progress only (this may be a receive post's
    // drain_eq).
    if (count && !p.flushing.empty()) flush_checks.push_back(&p);
    if (count && !zcopy_sends.empty()) zcopy_check_due = true;
}

void Iface::on_grant_event(const ptl_event_t &ev) {
    if ((ev.match_bits & ~ptl_match_bits_t(0xff)) != kGrantBits) return;
    release_held(peer(ev.initiator, uint8_t(ev.match_bits)), uint32_t(ev.hdr_data));
}

// Counted before the message is handed to UCP, so an answer sent from the callback carries it.
void Iface::processed_from(Peer &p) {
    if (p.owed++ == 0) p.owed_since = ucs_get_time();
    if (p.owed >= grant_batch) {
        send_grant(p);
    } else if (!p.in_owing_list) {
        p.in_owing_list = true;
        owing.push_back(&p);
    }
}

void Iface::send_grant(Peer &p) {
    const uint32_t g = std::exchange(p.owed, 0u);
    // Zero bytes from anywhere: the send-buffer pool is a valid address in the MD.
    const int rc = PtlPut(md, reinterpret_cast<uintptr_t>(tx_buf), 0, PTL_NO_ACK_REQ, p.proc, p.ctl_pt,
                          kGrantBits | ctl_pt, 0, nullptr, g);
    if (rc != PTL_OK)
        ucs_debug("portals: grant of %u to nid 0x%x pid %u not sent: %d", g, p.proc.phys.nid, p.proc.phys.pid,
                  rc);
}

void Iface::send_owed_grants(bool all) {
    const ucs_time_t due = progress_clock - idle_grant_delay;
    std::erase_if(owing, [&](Peer *p) {
        if (p->owed && !all && p->owed_since > due) return false;
        if (p->owed) send_grant(*p);
        p->in_owing_list = false;
        return true;
    });
}

// The engine executes a peer's operations in order, so the acknowledgement of a zero-byte
// put issued after the messages says they all arrived.
void Iface::ensure_probe(Peer &p) {
    if (p.probe_in_flight) return;
    p.probe_op = Op{};
    p.probe_op.type = OpType::Probe;
    p.probe_op.window = &p;
    const int rc = PtlPut(md, reinterpret_cast<uintptr_t>(tx_buf), 0, PTL_ACK_REQ, p.proc, p.ctl_pt,
                          kProbeBits, 0, &p.probe_op, 0);
    if (rc != PTL_OK) {
        ucs_debug("portals: flush probe to nid 0x%x pid %u not sent: %d", p.proc.phys.nid, p.proc.phys.pid,
                  rc);
        return;  // the grants alone complete the flush
    }
    p.probe_in_flight = true;
    p.probe_covers = p.sent;
}

// A failed probe: the peer's iface is gone (closed, or its process), so every ep to it fails
// and nothing it held will be fetched.
void Iface::on_probe_ack(Peer &p, ucs_status_t status) {
    p.probe_in_flight = false;
    if (status != UCS_OK) {
        for (Ep *ep : eps)
            if (ep->window == &p) mark_failed(ep, status);
        release_held(p, uint32_t(p.held.size()));
    } else {
        p.probed = std::max(p.probed, p.probe_covers);
    }
    if (!zcopy_sends.empty()) zcopy_check_due = true;
    check_flushing(p);
}

void Iface::report_zcopy_sends() {
    zcopy_check_due = false;
    std::vector<std::pair<uct_completion_t *, ucs_status_t>> done;
    std::erase_if(zcopy_sends, [&](const ZcopySend &z) {
        if (z.ep->failed()) {
            done.emplace_back(z.comp, z.ep->failure);
        } else if (z.ep->window->arrived(z.mark)) {
            done.emplace_back(z.comp, UCS_OK);
        } else {
            return false;
        }
        return true;
    });
    for (const auto &[comp, status] : done) uct_invoke_completion(comp, status);
}

void Iface::watch_flush(Ep *ep) {
    Peer &p = *ep->window;
    if (std::find(p.flushing.begin(), p.flushing.end(), ep) == p.flushing.end()) p.flushing.push_back(ep);
}

void Iface::check_flushing(Peer &p) {
    // complete_flushes runs callbacks, which may flush (append) or destroy eps (erase).
    const std::vector<Ep *> eps_now = p.flushing;
    for (Ep *ep : eps_now)
        if (std::find(p.flushing.begin(), p.flushing.end(), ep) != p.flushing.end()) complete_flushes(ep);
    std::erase_if(p.flushing, [](const Ep *ep) { return ep->flushes.empty(); });
    for (const Ep *ep : p.flushing)
        if (!messages_arrived(ep)) {
            ensure_probe(p);
            break;
        }
}
