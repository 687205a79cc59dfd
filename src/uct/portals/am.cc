// Active messages: each is copied into a send buffer and put to the peer's AM portal with the
// AM id in the match bits. The buffer stays until the target reports the message processed
// (peer_window.h): if it met the catch-all, the target fetches it from there first.
#include "iface_impl.h"

extern "C" {
#include <uct/base/uct_iov.inl>
}

#include <cstring>

using namespace uct_portals;

namespace {

// The message around a send buffer: what the receiver needs to fetch it, the grant or ask it
// carries, the buffer held until the receiver reports it processed. `send(remote_offset)` puts it.
template <class Send>
[[gnu::always_inline]] inline ucs_status_t send_message(Ep *ep, MsgKind kind, int tx_desc, bool awaits_report,
                                                        Send &&send) {
    Iface *f = ep->iface;
    Peer &p = *ep->window;
    MsgInfo m{kind, uint8_t(f->ctl_pt), uint64_t(tx_desc) * f->tx_stride};
    m.ask = f->windows.should_ask(p, awaits_report, f->tx_window, f->tx_free.size() < f->tx_descs / 4);
    if (const uint16_t g = f->windows.take_piggy_grant(p)) {
        m.grant = true;
        m.fetch_length = g;
    }
    const int rc = send(encode_msg(m));
    if (rc != PTL_OK) {
        if (m.grant) f->windows.owe_again(p, m.fetch_length);
        if (m.ask) f->windows.ask_again(p);
        f->tx_free.push_back(tx_desc);
        return status_of(rc);
    }
    f->windows.hold(p, tx_desc);
    ep->sent_mark = p.sent;
    return UCS_OK;
}

}  // namespace

// No events: the MD reports no SEND, and a failed peer is found by check_peers.
ucs_status_t uct_portals::put_message(Ep *ep, MsgKind kind, ptl_pt_index_t pt, ptl_match_bits_t bits,
                                      uint64_t hdr_data, int tx_desc, size_t length, bool awaits_report) {
    Iface *f = ep->iface;
    return send_message(ep, kind, tx_desc, awaits_report, [&](uint64_t remote_offset) {
        return PtlPut(f->md, reinterpret_cast<uintptr_t>(f->tx_desc_addr(tx_desc)), length, PTL_NO_ACK_REQ,
                      ep->peer, pt, bits, remote_offset, nullptr, hdr_data);
    });
}

ucs_status_t uct_portals::put_message_from(Ep *ep, MsgKind kind, ptl_pt_index_t pt, ptl_match_bits_t bits,
                                           uint64_t hdr_data, int tx_desc, const void *data, size_t length,
                                           bool data_volatile, bool awaits_report) {
    Iface *f = ep->iface;
    return send_message(ep, kind, tx_desc, awaits_report, [&](uint64_t remote_offset) {
        return PtlXPutAndCopy(data_volatile ? f->md_volatile : f->md, reinterpret_cast<uintptr_t>(data),
                              length, PTL_NO_ACK_REQ, ep->peer, pt, bits, remote_offset, nullptr, hdr_data,
                              f->tx_desc_addr(tx_desc));
    });
}

// Copies header + iov into a send buffer; returns the length, or < 0 for no buffer.
ssize_t uct_portals::gather(Ep *ep, int *desc, const void *header, size_t header_length, const uct_iov_t *iov,
                            size_t iovcnt, size_t limit) {
    Iface *f = ep->iface;
    *desc = f->get_tx_desc(ep);
    if (*desc < 0) return UCS_ERR_NO_RESOURCE;
    char *p = f->tx_desc_addr(*desc);
    if (header_length) std::memcpy(p, header, header_length);
    ucs_iov_iter_t it;
    ucs_iov_iter_init(&it);
    const size_t n = uct_iov_to_buffer(iov, iovcnt, &it, p + header_length, limit - header_length);
    return ssize_t(header_length + n);
}

ssize_t uct_portals::pack_into_desc(Ep *ep, int *desc, uct_pack_callback_t pack_cb, void *arg, size_t limit,
                                    const char *what) {
    Iface *f = ep->iface;
    *desc = f->get_tx_desc(ep);
    if (*desc < 0) return UCS_ERR_NO_RESOURCE;
    const size_t length = pack_cb(f->tx_desc_addr(*desc), arg);
    if (length > limit) {
        f->tx_free.push_back(*desc);
        ucs_error("portals: %s packed %zu bytes, more than its limit %zu", what, length, limit);
        return UCS_ERR_INVALID_PARAM;
    }
    return ssize_t(length);
}

extern "C" ucs_status_t uct_portals_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header,
                                                const void *payload, unsigned length) {
    Ep *ep = ep_of(tl_ep);
    Iface *f = ep->iface;
    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(length + sizeof(header), 0, f->seg_size, "am_short");
    const int d = f->get_tx_desc(ep);
    if (d < 0) return UCS_ERR_NO_RESOURCE;
    char *p = f->tx_desc_addr(d);
    std::memcpy(p, &header, sizeof header);
    if (length) std::memcpy(p + sizeof header, payload, length);  // payload may be null then
    return put_message(ep, MsgKind::Am, ep->am_pt, id, 0, d, sizeof header + length);
}

extern "C" ucs_status_t uct_portals_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id, const uct_iov_t *iov,
                                                    size_t iovcnt) {
    Ep *ep = ep_of(tl_ep);
    Iface *f = ep->iface;
    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(uct_iov_total_length(iov, iovcnt), 0, f->seg_size, "am_short_iov");
    int d;
    const ssize_t len = gather(ep, &d, nullptr, 0, iov, iovcnt, f->seg_size);
    if (len < 0) return ucs_status_t(len);
    return put_message(ep, MsgKind::Am, ep->am_pt, id, 0, d, size_t(len));
}

extern "C" ssize_t uct_portals_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id, uct_pack_callback_t pack_cb, void *arg,
                                           unsigned) {
    Ep *ep = ep_of(tl_ep);
    Iface *f = ep->iface;
    UCT_CHECK_AM_ID(id);
    if (!f->can_send(ep)) return UCS_ERR_NO_RESOURCE;
    int d;
    const ssize_t length = pack_into_desc(ep, &d, pack_cb, arg, f->seg_size, "am_bcopy");
    if (length < 0) return length;
    const ucs_status_t s = put_message(ep, MsgKind::Am, ep->am_pt, id, 0, d, size_t(length));
    return s == UCS_OK ? length : ssize_t(s);
}

extern "C" ucs_status_t uct_portals_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id, const void *header,
                                                unsigned header_length, const uct_iov_t *iov, size_t iovcnt,
                                                unsigned, uct_completion_t *comp) {
    Ep *ep = ep_of(tl_ep);
    Iface *f = ep->iface;
    UCT_CHECK_AM_ID(id);
    UCT_CHECK_PARAM(iovcnt <= kMaxIov, "am_zcopy: iovcnt %zu > %zu", iovcnt, kMaxIov);
    UCT_CHECK_LENGTH(header_length, 0, f->max_am_hdr(), "am_zcopy header");
    UCT_CHECK_LENGTH(header_length + uct_iov_total_length(iov, iovcnt), 0, f->seg_size, "am_zcopy");
    if (!f->can_send(ep)) return UCS_ERR_NO_RESOURCE;
    int d;
    const ssize_t len = gather(ep, &d, header, header_length, iov, iovcnt, f->seg_size);
    if (len < 0) return ucs_status_t(len);
    const ucs_status_t s = put_message(ep, MsgKind::Am, ep->am_pt, id, 0, d, size_t(len), true);
    return s == UCS_OK ? f->complete_on_arrival(ep, comp) : s;
}
