// How two processes agree on a verbs connection: small messages over the tcp wire, which
// every process has and which reaches the peer's (nid, pid) with no directory service. Kept
// free of <infiniband/verbs.h> so an engine built without verbs can still refuse politely.
//
// One connection per pair of processes carries both directions. CONNECT describes the
// connecting side's QP, the credits it grants and its buffer size; the other side connects a
// QP of its own to it and answers ACCEPT with the same, or REJECT (no verbs here, or a device
// the connecting side's cannot reach), after which the connecting side uses tcp for that peer.
// Both may CONNECT at once: the CONNECT of the lower (nid, pid) is accepted, the other ignored
// (the higher side answers with the QP it had made for its own attempt). `epoch` names the
// attempt; a CONNECT with a new epoch from a connected peer replaces the connection. READY
// (connecting side -> accepting side, after ACCEPT) says the connecting side's QP receives now:
// the accepting side sends nothing before it, or before the first message on the QP.
#pragma once

#include <cstdint>
#include <cstring>

#include "../wire.h"

namespace ptl::verbs {

enum class ControlKind : uint8_t { Connect = 1, Accept = 2, Reject = 3, Ready = 4 };

struct ControlMsg {
    uint32_t magic;
    uint8_t kind;        // ControlKind
    uint8_t link_layer;  // IBV_LINK_LAYER_*
    uint8_t mtu;         // enum ibv_mtu of the sender's port
    uint8_t reserved;    // kControlHolding
    uint32_t qpn;
    uint32_t psn;
    uint16_t lid;  // InfiniBand
    uint16_t reserved2;
    uint32_t credits;   // messages of the peer's the sender of this takes at once
    uint32_t buf_size;  // bytes in each of its receive buffers
    uint32_t epoch;     // the attempt (Accept and Reject echo it)
    uint8_t gid[16];    // RoCE: the address the QP is reached at
};
static_assert(sizeof(ControlMsg) == 48);

// The sender's engine holds messages back (CONNECT, ACCEPT): as the holding bit of a send's word.
inline constexpr uint8_t kControlHolding = 1;

inline constexpr uint32_t kControlMagic = 0x50564233;  // "PVB3": one QP per pair, words on demand

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
