#include "held_messages.h"

#include "../wire/arriving.h"

namespace ptl {

void HeldMessages::push(const InMessage &m, uint64_t held_at_ns) {
    payload_arrived(m, m.payload_len);  // a copy of all of it (a dead sender's rest as it is)
    Held &h = queue_.emplace_back();
    const auto *hp = static_cast<const char *>(m.header);
    const auto *pp = static_cast<const char *>(m.payload);
    h.header.assign(hp, hp + m.header_len);
    if (m.payload_len) h.payload.assign(pp, pp + m.payload_len);
    h.view = m;
    h.view.header = h.header.data();
    h.view.payload = h.payload.data();
    h.view.arriving = nullptr;
    h.held_at_ns = held_at_ns;
}

}  // namespace ptl
