// How two processes agree on a verbs connection: small messages over the tcp wire, which
// every process has and which reaches the peer's (nid, pid) with no directory service. Kept
// free of <infiniband/verbs.h> so an engine built without verbs can still refuse politely.
//
// Connections carry one direction each: the sender's QP sends, the receiver's QP
// receives and returns credits. CONNECT (sender -> receiver) describes the sender's QP;
// the receiver connects a QP of its own to it, posts its receive buffers and answers ACCEPT
// with its QP and buffer count, or REJECT (no verbs here, or a device the sender's cannot
// reach), after which the sender uses tcp for that peer.
#pragma once

#include <cstdint>
#include <cstring>

#include "../wire.h"

namespace ptl::verbs {

enum class ControlKind : uint8_t { Connect = 1, Accept = 2, Reject = 3 };

struct ControlMsg {
    uint32_t magic;
    uint8_t kind;        // ControlKind
    uint8_t link_layer;  // IBV_LINK_LAYER_*
    uint8_t mtu;         // enum ibv_mtu of the sender's port
    uint8_t reserved;
    uint32_t qpn;
    uint32_t psn;
    uint16_t lid;  // InfiniBand
    uint16_t reserved2;
    uint32_t rx_depth;  // Accept: receive buffers posted for the sender (its credits)
    uint32_t buf_size;  // Accept: bytes in each of them
    uint32_t epoch;     // Connect: tells a reconnection from a duplicate
    uint8_t gid[16];    // RoCE: the address the QP is reached at
};
static_assert(sizeof(ControlMsg) == 48);

inline constexpr uint32_t kControlMagic = 0x50564231;  // "PVB1"

// A tcp message is ours when its header is a ControlMsg (engine headers are 72 bytes).
inline bool is_control(const InMessage &m) {
    if (m.header_len != sizeof(ControlMsg) || m.payload_len != 0) return false;
    uint32_t magic;
    std::memcpy(&magic, m.header, sizeof magic);
    return magic == kControlMagic;
}

inline ControlMsg control_of(const InMessage &m) {
    ControlMsg c;
    std::memcpy(&c, m.header, sizeof c);
    return c;
}

// The answer of a process that has no verbs wire.
inline void send_reject(Wire &control, PeerId to, uint32_t epoch) {
    ControlMsg c{};
    c.magic = kControlMagic;
    c.kind = uint8_t(ControlKind::Reject);
    c.epoch = epoch;
    control.send(to, &c, sizeof c, nullptr, 0);
}

}  // namespace ptl::verbs
