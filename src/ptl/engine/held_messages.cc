#include "held_messages.h"

namespace ptl {

void HeldMessages::push(const InMessage &m, uint64_t held_at_ns) {
    Held &h = queue_.emplace_back();
    const auto *hp = static_cast<const char *>(m.header);
    const auto *pp = static_cast<const char *>(m.payload);
    h.header.assign(hp, hp + m.header_len);
    if (m.payload_len) h.payload.assign(pp, pp + m.payload_len);
    h.view = m;
    h.view.header = h.header.data();
    h.view.payload = h.payload.data();
    h.held_at_ns = held_at_ns;
}

}  // namespace ptl
