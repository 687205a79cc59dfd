// Messages whose processing waits for the application (FC1: an implementation "may choose to
// block new message processing for a constrained amount of time" before acting on resource
// exhaustion). A request that would trigger flow control on a PTL_PT_FLOWCTRL portal - a full
// event queue, no matching entry, no room for its unexpected header - is held instead, together
// with the requests that arrive after it (ordering; responses to our own operations are still
// processed), and retried at each progress until the application has made room or
// PTL_FLOWCTRL_GRACE_MS has passed; only then is the entry disabled. An MPI library that drains its event
// queue a moment late (Open MPI's mtl posts a thousand receives before it polls) then never pays for a
// flow-control recovery.
// A request that found no entry on a portal without flow control, while an entry of that portal
// was used up and the application has not yet read so, is held the same way: there the
// alternative is a silent drop, which a client such as Open MPI's btl never recovers from. Its
// grace period restarts whenever the application reads from that event queue, since it is then
// on its way to the unlink event and the replacement of the entry (the btl reads one event per
// progress call, and on an oversubscribed host fell more than a second behind).
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "../wire/wire.h"

namespace ptl {

class HeldMessages {
public:
    bool empty() const { return queue_.empty(); }
    size_t size() const { return queue_.size(); }

    // Copies `m` (the wire reuses its buffers) to the back; `held_at_ns` is when processing it
    // was put off.
    void push(const InMessage &m, uint64_t held_at_ns);
    // The oldest, as the wire delivered it; valid until pop.
    const InMessage &front() const { return queue_.front().view; }
    void pop() { queue_.pop_front(); }
    // When processing the front message was put off: its grace period runs from then.
    // 0: not looked at yet (it arrived behind a held one).
    uint64_t front_held_at_ns() const { return queue_.front().held_at_ns; }
    void set_front_held_at(uint64_t ns) { queue_.front().held_at_ns = ns; }
    // For a message waiting for the application to read an event queue: how many events it
    // had read (Eq::taken) when the grace period last started; kNoQueue otherwise.
    static constexpr uint64_t kNoQueue = ~uint64_t(0);
    uint64_t front_queue_read() const { return queue_.front().queue_read; }
    void set_front_queue_read(uint64_t taken) { queue_.front().queue_read = taken; }
    void set_back_queue_read(uint64_t taken) { queue_.back().queue_read = taken; }

private:
    struct Held {
        std::vector<char> header;
        std::vector<char> payload;
        InMessage view;
        uint64_t held_at_ns;
        uint64_t queue_read = kNoQueue;
    };
    std::deque<Held> queue_;
};

}  // namespace ptl
