#include "loopback_wire.h"

#include "../cma.h"

#include <unistd.h>

#include <cstring>

namespace ptl {

bool LoopbackWire::send(PeerId, const void *header, size_t header_len, const struct iovec *payload,
                        int payload_count) {
    size_t plen = 0;
    for (int i = 0; i < payload_count; ++i) plen += payload[i].iov_len;
    Msg m{header_len, std::vector<char>(header_len + plen)};
    std::memcpy(m.bytes.data(), header, header_len);
    char *d = m.bytes.data() + header_len;
    for (int i = 0; i < payload_count; ++i) {
        std::memcpy(d, payload[i].iov_base, payload[i].iov_len);
        d += payload[i].iov_len;
    }
    queue_.push_back(std::move(m));
    if (on_send_) on_send_();
    return true;
}

int LoopbackWire::progress(const MessageHandler &handler) {
    int work = 0;
    // Only what is queued now: handlers may queue responses, delivered on the next call.
    for (size_t n = queue_.size(); n > 0 && !queue_.empty(); --n) {
        Msg m = std::move(queue_.front());
        queue_.pop_front();
        InMessage in{
            self_, m.bytes.data(), m.header_len, m.bytes.data() + m.header_len, m.bytes.size() - m.header_len,
            this};
        handler(in);
        ++work;
    }
    return work;
}

bool LoopbackWire::bulk_read(PeerId, const struct iovec *local, int nl, const struct iovec *remote, int nr,
                             const uint64_t *) {
    return cma_transfer(getpid(), local, nl, remote, nr, false);
}

bool LoopbackWire::bulk_write(PeerId, const struct iovec *local, int nl, const struct iovec *remote, int nr,
                              const uint64_t *) {
    return cma_transfer(getpid(), local, nl, remote, nr, true);
}

}  // namespace ptl
