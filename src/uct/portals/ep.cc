// Endpoints: connected to a peer iface by its (nid, pid) and portal indexes; flush waits
// for the ep's operations issued before it (messages, which have no acknowledgement of their
// own, by a probe behind them); pending requests run when operations complete.
#include "iface_impl.h"

#include <algorithm>
#include <new>
#include <utility>

using namespace uct_portals;

extern "C" ucs_status_t uct_portals_ep_init(uct_portals_ep_t *uct, const uct_ep_params_t *params) {
    const uint64_t need = UCT_EP_PARAM_FIELD_DEV_ADDR | UCT_EP_PARAM_FIELD_IFACE_ADDR;
    if ((params->field_mask & need) != need) {
        ucs_error("portals: an endpoint needs the peer's device and iface addresses");
        return UCS_ERR_INVALID_PARAM;
    }
    auto *ep = new (std::nothrow) uct_portals_ep_impl();
    if (!ep) return UCS_ERR_NO_MEMORY;
    const auto *dev = reinterpret_cast<const uct_portals_device_addr_t *>(params->dev_addr);
    const auto *ia = reinterpret_cast<const uct_portals_iface_addr_t *>(params->iface_addr);
    ep->iface = iface_of(params->iface);
    ep->uct = &uct->super.super;
    ep->peer.phys.nid = dev->nid;
    ep->peer.phys.pid = ia->pid;
    ep->am_pt = ia->am_pt;
    ep->tag_pt = ia->tag_pt;
    ep->ctl_pt = ia->ctl_pt;
    ep->window = &ep->iface->windows.peer(ep->peer, ia->ctl_pt);
    ucs_queue_head_init(&ep->pending);
    ep->iface->eps.push_back(ep);
    uct->impl = ep;
    return UCS_OK;
}

// Whether the ep leads to the iface at these addresses (UCP asks before reusing an ep); an
// address not given is not compared.
extern "C" int uct_portals_ep_is_connected_to(const uct_ep_h tl_ep, const uct_device_addr_t *dev_addr,
                                              const uct_iface_addr_t *iface_addr) {
    const Ep *ep = ep_of(tl_ep);
    const auto *dev = reinterpret_cast<const uct_portals_device_addr_t *>(dev_addr);
    const auto *ia = reinterpret_cast<const uct_portals_iface_addr_t *>(iface_addr);
    return (!dev || dev->nid == ep->peer.phys.nid) &&
           (!ia || (ia->pid == ep->peer.phys.pid && ia->am_pt == ep->am_pt && ia->tag_pt == ep->tag_pt &&
                    ia->ctl_pt == ep->ctl_pt));
}

extern "C" void uct_portals_ep_cleanup(uct_portals_ep_t *uct) {
    Ep *ep = uct->impl;
    Iface *f = ep->iface;
    // Like UCX's own transports: nothing completes after the ep is gone.
    f->cancel_ops(ep);
    std::vector<uct_completion_t *> cancelled;
    std::erase_if(f->zcopy_sends, [&](const Iface::ZcopySend &z) {
        return z.ep == ep && (cancelled.push_back(z.comp), true);
    });
    for (uct_completion_t *comp : cancelled) uct_invoke_completion(comp, UCS_ERR_CANCELED);
    for (const Ep::FlushWait &w : ep->flushes) uct_invoke_completion(w.comp, UCS_ERR_CANCELED);
    std::erase(ep->window->flushing, ep);
    if (ep->in_pending_list) std::erase(f->pending_eps, ep);
    std::erase_if(f->failed_eps, [ep](const auto &e) { return e.first == ep; });
    std::erase(f->eps, ep);
    delete static_cast<uct_portals_ep_impl *>(ep);
}

// UCT_FLUSH_FLAG_CANCEL drops what is in flight only on a failed ep (UCP's discard after a
// peer failure): to a live peer, the engine may still read or write the buffers of an
// operation it has started, so that flush waits for them like any other.
extern "C" ucs_status_t uct_portals_ep_flush(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp) {
    Ep *ep = ep_of(tl_ep);
    if ((flags & UCT_FLUSH_FLAG_CANCEL) && ep->failed()) {
        ep->iface->cancel_ops(ep);
        ep->iface->complete_flushes(ep);
        return UCS_OK;
    }
    // Pending requests go first, except the one being dispatched: everything before it was
    // issued, so it may flush (UCP's rendezvous by put flushes from its pending callback).
    if (ep->blocked_by_pending()) return UCS_ERR_NO_RESOURCE;
    Iface *f = ep->iface;
    const auto done = [&] {
        return ep->in_flight.empty() && f->messages_arrived(ep) &&
               std::none_of(f->zcopy_sends.begin(), f->zcopy_sends.end(),
                            [ep](const Iface::ZcopySend &z) { return z.ep == ep; });
    };
    if (done()) return UCS_OK;
    if (!f->messages_arrived(ep)) f->windows.ensure_probe(*ep->window);
    f->progress();
    if (done()) return UCS_OK;
    if (comp) {
        ep->flushes.push_back({ep->in_flight.next(), ep->sent_mark, comp});
        if (!f->messages_arrived(ep)) f->watch_flush(ep);
    }
    return UCS_INPROGRESS;
}

extern "C" ucs_status_t uct_portals_ep_fence(uct_ep_h, unsigned) {
    return UCS_OK;
}

extern "C" ucs_status_t uct_portals_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req, unsigned) {
    Ep *ep = ep_of(tl_ep);
    Iface *f = ep->iface;
    if (f->can_send(ep)) return UCS_ERR_BUSY;
    ucs_queue_push(&ep->pending, reinterpret_cast<ucs_queue_elem_t *>(req->priv));
    if (!ep->in_pending_list) {
        f->pending_eps.push_back(ep);
        ep->in_pending_list = true;
    }
    return UCS_OK;
}

extern "C" void uct_portals_ep_pending_purge(uct_ep_h tl_ep, uct_pending_purge_callback_t cb, void *arg) {
    Ep *ep = ep_of(tl_ep);
    while (!ucs_queue_is_empty(&ep->pending)) {
        ucs_queue_elem_t *elem = ucs_queue_pull(&ep->pending);
        uct_pending_req_t *req = ucs_container_of(elem, uct_pending_req_t, priv);
        if (cb) cb(req, arg);
    }
    if (ep->in_pending_list) {
        std::erase(ep->iface->pending_eps, ep);
        ep->in_pending_list = false;
    }
}
