// What the iface's messages carry besides their bodies: the receive portals' remote offset,
// a rendezvous' header data and announcement, and the match bits of the ctl portal.
#pragma once

extern "C" {
#include <portals4.h>
#include "uct_portals.h"
}

#include <cstddef>
#include <cstdint>

namespace uct_portals {

// The remote offset of a message to a receive portal carries what the receiver needs to
// fetch it if it was truncated (receive descriptors place data at locally managed offsets,
// so the field is otherwise unused): [grant:1][kind:3][sender ctl portal:8][16 bits][ask:1]
// [offset in the sender's send-buffer pool:35]. A rendezvous' announcement is put with zero
// bytes and fetched by its key (see tag.cc): the 16 bits are its length. Other messages are
// fetched by rlength; with the grant bit set, their 16 bits are a grant (peer_window.h). The
// ask bit asks the receiver to report what it processed without waiting (peer_window.h).
enum class MsgKind : uint8_t { Am = 1, TagEager = 2, TagRndv = 3, TagRndvRequest = 4 };

struct MsgInfo {
    MsgKind kind;
    uint8_t src_pt;
    uint64_t src_offset;
    uint16_t fetch_length = 0;  // or the grant
    bool grant = false;
    bool ask = false;
};

constexpr unsigned kMsgOffsetBits = 35;
constexpr uint64_t kMaxTxPoolBytes = 1ull << kMsgOffsetBits;

inline uint64_t encode_msg(const MsgInfo &m) {
    return (uint64_t(m.grant) << 63) | (uint64_t(m.kind) << 60) | (uint64_t(m.src_pt) << 52) |
           (uint64_t(m.fetch_length) << 36) | (uint64_t(m.ask) << kMsgOffsetBits) |
           (m.src_offset & (kMaxTxPoolBytes - 1));
}
inline MsgInfo decode_msg(uint64_t v) {
    return {MsgKind((v >> 60) & 7), uint8_t(v >> 52), v & (kMaxTxPoolBytes - 1),
            uint16_t(v >> 36),      bool(v >> 63),    bool((v >> kMsgOffsetBits) & 1)};
}

// A rendezvous' header data: [data length:32][key:32]. The key names the sender's ME for
// the data (kRndvBits | key); the length lets a posted receive fetch it without reading the
// announcement (which a receive smaller than it could not hold).
constexpr uint64_t kMaxRndvLength = (1ull << 32) - 1;
inline uint64_t rndv_hdr_data(uint64_t length, uint32_t key) {
    return (length << 32) | key;
}
constexpr size_t kMaxRndvHeader = 0xffff - 64;  // announcement = RndvInfo + header < 64 KiB
inline uint32_t rndv_key(uint64_t hdr_data) {
    return uint32_t(hdr_data);
}
inline uint64_t rndv_length(uint64_t hdr_data) {
    return hdr_data >> 32;
}
// A rendezvous put to a posted receive left all its data there (it carries the data; a
// receive too small for it reads it from the sender, which completes the send).
inline bool rndv_delivered(const ptl_event_t &ev) {
    return ev.rlength == rndv_length(ev.hdr_data) && ev.mlength == ev.rlength;
}

// Match bits on the ctl portal.
constexpr ptl_match_bits_t kTxPoolBits = 1ull << 63;    // the send-buffer pool
constexpr ptl_match_bits_t kRndvBits = 1ull << 62;      // one rendezvous' data, | key
constexpr ptl_match_bits_t kProbeBits = 1ull << 61;     // zero bytes, for RMA without an rkey
constexpr ptl_match_bits_t kAnnounceBits = 1ull << 60;  // one rendezvous' announcement, | key
constexpr ptl_match_bits_t kGrantBits = 1ull << 59;     // a grant, | the granting iface's ctl portal

// A remote region; nullptr for the null and invalid rkeys. Those name no memory, so only a
// zero-length put or get may use them: it goes to the peer's probe entry, and so still
// reaches the peer, completes in order and reports a failed peer.
inline const uct_portals_rkey_t *rkey_of(uct_rkey_t rkey) {
    if (rkey == 0 || rkey == UCT_INVALID_RKEY) return nullptr;
    return reinterpret_cast<const uct_portals_rkey_t *>(rkey);
}

// A rendezvous announcement, followed by the user header.
struct RndvInfo {
    uint64_t length;
    uint64_t remote_addr;
    uct_portals_rkey_t rkey;
};

}  // namespace uct_portals
