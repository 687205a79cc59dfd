// The loopback wire: a process sending to itself. Messages queue in process memory and are
// delivered by the next progress call, never re-entrantly from send(); bulk data is copied
// through the kernel so a bad address fails the operation rather than the process.
#pragma once

#include <deque>
#include <functional>
#include <vector>

#include "../wire.h"

namespace ptl {

class LoopbackWire final : public Wire {
public:
    explicit LoopbackWire(PeerId self, std::function<void()> on_send)
        : self_(self), on_send_(std::move(on_send)) {}

    bool send(PeerId to, const void *header, size_t header_len, const struct iovec *payload,
              int payload_count) override;
    size_t max_inline(PeerId) override { return 1u << 16; }
    int progress(const MessageHandler &handler) override;
    bool has_bulk(PeerId) const override { return true; }
    bool bulk_read(PeerId, const struct iovec *local, int nl, const struct iovec *remote, int nr,
                   const uint64_t *keys) override;
    bool bulk_write(PeerId, const struct iovec *local, int nl, const struct iovec *remote, int nr,
                    const uint64_t *keys) override;
    bool pending() const { return !queue_.empty(); }

private:
    struct Msg {
        size_t header_len;
        std::vector<char> bytes;
    };
    PeerId self_;
    std::function<void()> on_send_;
    std::deque<Msg> queue_;
};

}  // namespace ptl
