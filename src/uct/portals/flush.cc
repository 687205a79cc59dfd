// Flushes and zcopy completions: they wait for messages to arrive, which the peer windows
// (peer_window.h) learn from grants and probes.
#include "iface_impl.h"

#include <algorithm>

using namespace uct_portals;

void Iface::release_held(Peer &p, uint32_t count) {
    // Flush and zcopy completions run from progress only (this may be a receive post's
    // drain_eq).
    if (windows.release(p, count, tx_free) == 0) return;
    if (!p.flushing.empty()) flush_checks.push_back(&p);
    if (!zcopy_sends.empty()) zcopy_check_due = true;
}

void Iface::on_grant_event(const ptl_event_t &ev) {
    if ((ev.match_bits & ~ptl_match_bits_t(0xff)) != kGrantBits) return;
    release_held(windows.peer(ev.initiator, uint8_t(ev.match_bits)), uint32_t(ev.hdr_data));
}

// A failed probe: the peer's iface is gone (closed, or its process), so every ep to it fails
// and nothing it held will be fetched.
void Iface::on_probe_ack(Peer &p, ucs_status_t status) {
    windows.probe_answered(p, status == UCS_OK);
    if (status != UCS_OK) {
        for (Ep *ep : eps)
            if (ep->window == &p) mark_failed(ep, status);
        release_held(p, uint32_t(p.held.size()));
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
            windows.ensure_probe(p);
            break;
        }
}
