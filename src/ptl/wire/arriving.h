// Reading a payload that may still be arriving (InMessage::arriving): a streamed message is
// handed on as soon as its first part is in, and whoever reads it waits for the rest, part
// by part, so the copy out overlaps the sender's copy in.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "wire.h"

namespace ptl {

// The slow part: spins, then yields; gives up when the sender's process is gone, or lives
// on without writing for seconds.
bool wait_arriving(const InMessage &m, size_t bytes);

// Waits until the payload's first `bytes` are in; false if they will not come (its sender
// died, or stopped writing).
inline bool payload_arrived(const InMessage &m, size_t bytes) {
    return !m.arriving || m.arriving->load(std::memory_order_acquire) >= bytes || wait_arriving(m, bytes);
}

// Copies payload bytes [from, from + len) to `to` as they arrive, through `put(offset, at, n)`
// (which copies n bytes at `at` to the destination's `offset` and says whether it could);
// false if `put` failed or the bytes will not come.
template <class Put>
bool copy_arriving(const InMessage &m, size_t from, size_t len, Put &&put) {
    const char *payload = static_cast<const char *>(m.payload);
    if (!m.arriving) return put(size_t(0), payload + from, len);
    size_t done = 0;
    while (done < len) {
        size_t in = m.arriving->load(std::memory_order_acquire);
        if (in <= from + done) {
            if (!wait_arriving(m, from + done + 1)) return false;
            in = m.arriving->load(std::memory_order_acquire);
        }
        const size_t n = std::min(len - done, in - from - done);
        if (!put(done, payload + from + done, n)) return false;
        done += n;
    }
    return true;
}

}  // namespace ptl
