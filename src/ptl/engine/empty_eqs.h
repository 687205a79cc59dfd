// EQs that locked polls found empty, each with the engine's event_seq_ of that moment (every
// event, EQ free and NI fini moves it): while the number has not moved, such an
// EQ is still empty, and a poll of it may answer without the engine lock. Written under the
// lock, read without it. Shared by all threads, since an EQ's emptiness is not a thread's
// view (it was thread_local: libportals4 is dlopened by UCX, so each access cost a
// __tls_get_addr call, 3% of a busy sender's time). Several, since a UCP worker polls one
// iface, and so one EQ, per device in turn.
#pragma once

#include <portals4.h>

#include <atomic>
#include <cstdint>

namespace ptl {

class EmptyEqs {
public:
    bool still_empty(ptl_handle_eq_t h, uint32_t seq) const {
        const uint64_t want = pack(h, seq);
        for (const auto &e : entries_)
            if (e.load(std::memory_order_relaxed) == want) return true;
        return false;
    }
    // Under the engine lock.
    void note(ptl_handle_eq_t h, bool empty, uint32_t seq) {
        for (auto &e : entries_)
            if (uint32_t(e.load(std::memory_order_relaxed) >> 32) == h) {
                e.store(empty ? pack(h, seq) : 0, std::memory_order_relaxed);
                return;
            }
        if (empty) entries_[next_++ % kEntries].store(pack(h, seq), std::memory_order_relaxed);
    }

private:
    // An EQ handle is never 0 (its type bits), so 0 is no entry.
    static uint64_t pack(ptl_handle_eq_t h, uint32_t seq) { return uint64_t(h) << 32 | seq; }
    static constexpr unsigned kEntries = 4;
    std::atomic<uint64_t> entries_[kEntries] = {};
    unsigned next_ = 0;
};

}  // namespace ptl
