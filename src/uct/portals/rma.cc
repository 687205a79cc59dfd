// put/get short, bcopy and zcopy: PtlPut / PtlGet against the ME the rkey names.
#include "iface_impl.h"

extern "C" {
#include <uct/base/uct_iov.inl>
}

#include <alloca.h>

using namespace uct_portals;

namespace {

// Where an RMA of `length` bytes goes: the rkey's region, or the peer's probe entry for a
// zero-length one without an rkey. False for a longer one without an rkey.
struct Target {
    ptl_pt_index_t pt;
    ptl_match_bits_t bits;
    ptl_size_t offset;
};
bool target_of(const Ep *ep, uct_rkey_t rkey, uint64_t remote_addr, size_t length, Target *t) {
    if (const uct_portals_rkey_t *rk = rkey_of(rkey)) {
        *t = {rk->pt, rk->key, remote_addr - rk->base};
        return true;
    }
    *t = {ep->ctl_pt, kProbeBits, 0};
    return length == 0;
}

// A put of `length` bytes at `src`; sources up to max_volatile are copied by the call, so
// short and bcopy puts may reuse their buffer at once.
ucs_status_t put(Ep *ep, const void *src, size_t length, uint64_t remote_addr, uct_rkey_t rkey,
                 uct_completion_t *comp, bool zcopy) {
    Iface *f = ep->iface;
    Target t;
    if (!target_of(ep, rkey, remote_addr, length, &t)) return UCS_ERR_INVALID_PARAM;
    Op *op = f->next_op(ep);
    if (!op) return UCS_ERR_NO_RESOURCE;
    const int rc = PtlPut(zcopy ? f->md : f->md_volatile, reinterpret_cast<uintptr_t>(src), length,
                          PTL_ACK_REQ, ep->peer, t.pt, t.bits, t.offset, op, 0);
    if (rc != PTL_OK) return rc == PTLX_DONE ? UCS_OK : status_of(rc);  // done by the engine in the call
    f->take_op(op, ep, OpType::Put, comp);
    return UCS_INPROGRESS;
}

// A get into `dst`, or with unpack_cb into a bounce buffer unpacked at completion.
ucs_status_t get(Ep *ep, void *dst, size_t length, uint64_t remote_addr, uct_rkey_t rkey,
                 uct_completion_t *comp, uct_unpack_callback_t unpack_cb = nullptr,
                 void *unpack_arg = nullptr) {
    Iface *f = ep->iface;
    Target t;
    if (!target_of(ep, rkey, remote_addr, length, &t)) return UCS_ERR_INVALID_PARAM;
    Op *op = f->next_op(ep);
    if (!op) return UCS_ERR_NO_RESOURCE;
    char *bounce = nullptr;
    if (unpack_cb && !(dst = bounce = f->take_bounce())) return UCS_ERR_NO_MEMORY;
    const int rc =
        PtlGet(f->md, reinterpret_cast<uintptr_t>(dst), length, ep->peer, t.pt, t.bits, t.offset, op);
    if (rc != PTL_OK) {
        if (rc == PTLX_DONE && bounce) unpack_cb(unpack_arg, bounce, length);  // done in the call
        f->give_bounce(bounce);
        return rc == PTLX_DONE ? UCS_OK : status_of(rc);
    }
    f->take_op(op, ep, bounce ? OpType::GetBcopy : OpType::Get, comp);
    op->bounce = bounce;
    op->unpack_cb = unpack_cb;
    op->unpack_arg = unpack_arg;
    op->length = length;
    return UCS_INPROGRESS;
}

}  // namespace

extern "C" ucs_status_t uct_portals_ep_put_short(uct_ep_h tl_ep, const void *buffer, unsigned length,
                                                 uint64_t remote_addr, uct_rkey_t rkey) {
    Ep *ep = ep_of(tl_ep);
    UCT_CHECK_LENGTH(length, 0, ep->iface->max_put_short(), "put_short");
    const ucs_status_t s = put(ep, buffer, length, remote_addr, rkey, nullptr, false);
    return s == UCS_INPROGRESS ? UCS_OK : s;
}

extern "C" ssize_t uct_portals_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb, void *arg,
                                            uint64_t remote_addr, uct_rkey_t rkey) {
    Ep *ep = ep_of(tl_ep);
    Iface *f = ep->iface;
    if (!f->has_tx_resources() || ep->blocked_by_pending()) return UCS_ERR_NO_RESOURCE;  // not the window
    const size_t room = f->max_put_short();
    void *buf = alloca(room);
    const size_t length = pack_cb(buf, arg);
    UCT_CHECK_LENGTH(length, 0, room, "put_bcopy");
    const ucs_status_t s = put(ep, buf, length, remote_addr, rkey, nullptr, false);
    return s == UCS_INPROGRESS ? ssize_t(length) : ssize_t(s);
}

extern "C" ucs_status_t uct_portals_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt,
                                                 uint64_t remote_addr, uct_rkey_t rkey,
                                                 uct_completion_t *comp) {
    UCT_CHECK_PARAM(iovcnt <= 1, "put_zcopy: iovcnt %zu > 1", iovcnt);
    const void *src = iovcnt ? iov[0].buffer : nullptr;
    const size_t len = iovcnt ? uct_iov_get_length(iov) : 0;
    return put(ep_of(tl_ep), src, len, remote_addr, rkey, comp, true);
}

extern "C" ucs_status_t uct_portals_ep_get_bcopy(uct_ep_h tl_ep, uct_unpack_callback_t unpack_cb, void *arg,
                                                 size_t length, uint64_t remote_addr, uct_rkey_t rkey,
                                                 uct_completion_t *comp) {
    Ep *ep = ep_of(tl_ep);
    UCT_CHECK_LENGTH(length, 0, ep->iface->seg_size, "get_bcopy");
    return get(ep, nullptr, length, remote_addr, rkey, comp, unpack_cb, arg);
}

extern "C" ucs_status_t uct_portals_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt,
                                                 uint64_t remote_addr, uct_rkey_t rkey,
                                                 uct_completion_t *comp) {
    UCT_CHECK_PARAM(iovcnt <= 1, "get_zcopy: iovcnt %zu > 1", iovcnt);
    return get(ep_of(tl_ep), iovcnt ? iov[0].buffer : nullptr, iovcnt ? uct_iov_get_length(iov) : 0,
               remote_addr, rkey, comp);
}
