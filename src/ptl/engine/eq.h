// Event queue (§3.13): a ring of full events. When full, the oldest event is overwritten and
// the next reader learns of it through PTL_EQ_DROPPED (EQ1). Slots reserved for
// PT_DISABLED (Impl. Note 13) keep flow control able to report itself.
#pragma once

#include <portals4.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ptl {

class Ni;

constexpr uint64_t kMaxEqEvents = uint64_t(1) << 26;  // PtlEQAlloc and PtlXEQGrow refuse more

struct Eq {
    Ni *ni = nullptr;
    uint32_t handle = 0;
    std::vector<ptl_event_t> ring;
    uint64_t head = 0;  // next to read
    uint64_t count = 0;
    bool dropped = false;
    uint32_t reserved = 0;  // slots held back for PT_DISABLED, one per flow-controlled PT
    uint32_t promised = 0;  // events of deliveries whose data is still moving (bulk_delivery.h)
    uint32_t waiters = 0;   // threads blocked in PtlEQWait/PtlEQPoll on this EQ
    uint32_t refs = 0;      // blocked callers still inside (PtlEQFree waits for them)
    int notify_fd = -1;     // one-shot wake-up armed by PtlXEQArm (portals4_ext.h)

    uint64_t requested;  // the count given to PtlEQAlloc (or PtlXEQGrow)
    uint64_t taken = 0;  // events the application has read (held_messages.h)

    explicit Eq(uint64_t capacity) : ring(capacity), requested(capacity) {}

    // Room for the requested events plus one reserved slot per flow-controlled PT; a PT freed
    // and allocated again reuses its slot instead of growing the ring each time.
    void fit_reserved() {
        if (ring.size() >= requested + reserved) return;
        std::vector<ptl_event_t> r(requested + reserved);
        for (uint64_t i = 0; i < count; ++i) r[i] = ring[(head + i) % ring.size()];
        ring.swap(r);
        head = 0;
    }

    void grow(uint64_t capacity) {
        if (capacity <= requested) return;
        requested = capacity;
        fit_reserved();
    }

    // Room for a flow-controlled event (one that must not overwrite).
    bool has_room_for_regular() const { return count + reserved + promised < ring.size(); }

    // Whether an event of `type` for portal `pt` is still waiting to be read.
    bool holds_unread(ptl_event_kind_t type, ptl_pt_index_t pt) const {
        for (uint64_t i = 0, at = head; i < count; ++i, at = next(at))
            if (ring[at].type == type && ring[at].pt_index == pt) return true;
        return false;
    }

    // Wraps by comparison: a 64-bit division per event showed in the per-message profile.
    uint64_t next(uint64_t i) const { return i + 1 == ring.size() ? 0 : i + 1; }

    // How many events the ring may grow to instead of overwriting (PTL_EQ_GROW_MAX).
    uint64_t grow_limit = 0;

    void push(const ptl_event_t &ev) { emplace() = ev; }

    // The slot of a new event, for the caller to fill in whole (no copy of a built event).
    ptl_event_t &emplace() {
        if (count == ring.size() && ring.size() < grow_limit) {
            // Full: a client that polls late (Open MPI's btl posts thousands of sends before
            // it drains its queue) loses nothing while the ring may double. Flow-controlled
            // portals never get here with their own events (EQ2): has_room_for_regular stops them.
            std::vector<ptl_event_t> r(std::min<uint64_t>(ring.size() * 2, grow_limit));
            for (uint64_t i = 0; i < count; ++i) r[i] = ring[(head + i) % ring.size()];
            ring.swap(r);
            head = 0;
        }
        if (count == ring.size()) {
            head = next(head);
            --count;
            dropped = true;
        }
        const uint64_t tail = head + count;
        ++count;
        return ring[tail < ring.size() ? tail : tail - ring.size()];
    }

    // Up to `max` events into `evs`, oldest first, in at most two copies (the ring may wrap);
    // how many. *was_dropped: whether events were lost before the first of them (EQ1).
    unsigned pop_many(ptl_event_t *evs, unsigned max, bool *was_dropped) {
        const uint64_t n = std::min<uint64_t>(count, max);
        const uint64_t first = std::min<uint64_t>(n, ring.size() - head);
        std::copy_n(ring.data() + head, first, evs);
        std::copy_n(ring.data(), n - first, evs + first);
        head = n - first ? n - first : (head + first == ring.size() ? 0 : head + first);
        count -= n;
        taken += n;
        *was_dropped = n && dropped;
        if (n) dropped = false;
        return unsigned(n);
    }

    // PTL_OK / PTL_EQ_DROPPED with the event, or PTL_EQ_EMPTY.
    int pop(ptl_event_t *ev) {
        if (count == 0) return PTL_EQ_EMPTY;
        *ev = ring[head];
        head = next(head);
        --count;
        ++taken;
        const bool d = dropped;
        dropped = false;
        return d ? PTL_EQ_DROPPED : PTL_OK;
    }
};

}  // namespace ptl
