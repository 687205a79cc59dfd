// A memory region as Portals describes it: one contiguous range, or a PTL_IOVEC list that
// behaves as if it were contiguous (§3.10.2). Offsets are always region offsets.
#pragma once

#include <portals4.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "small_vec.h"

namespace ptl {

using IovList = SmallVec<struct iovec, 8>;

struct Region {
    void *start = nullptr;
    uint64_t length = 0;  // total bytes
    const ptl_iovec_t *iov = nullptr;
    uint64_t niov = 0;

    static Region contiguous(void *start, uint64_t length) { return {start, length, nullptr, 0}; }
    static Region iovec(const ptl_iovec_t *iov, uint64_t n);

    // Address of the byte at `offset` (the event `start` for an iovec region, §4.4). A peer
    // may name any offset; past the end nothing lands, so the event points at the end.
    void *address_at(uint64_t offset) const {
        if (!iov) return static_cast<char *>(start) + (offset < length ? offset : length);
        return iov_address_at(offset);
    }

    // The address of `offset` in a contiguous region; nullptr for an iovec one.
    char *contiguous_at(uint64_t offset) const { return iov ? nullptr : static_cast<char *>(start) + offset; }

    // Appends the (address, length) pieces covering [offset, offset+len) to `out`. Inline for
    // the contiguous case: once per message on both sides.
    void pieces(uint64_t offset, uint64_t len, IovList &out) const {
        if (len == 0) return;
        if (!iov) {
            out.push_back({static_cast<char *>(start) + offset, len});
            return;
        }
        iov_pieces(offset, len, out);
    }

    // Copies into / out of the region. `checked` copies go through the kernel so that an
    // unmapped address fails the copy (PTL_NI_SEGV) instead of faulting the process.
    // Inline for a contiguous region copied unchecked: every delivered put.
    bool write(uint64_t offset, const void *src, uint64_t len, bool checked) const {
        if (len == 0) return true;  // start may be null (a zero-length entry)
        if (iov || checked) return copy_in(offset, src, len, checked);
        std::memcpy(static_cast<char *>(start) + offset, src, len);
        return true;
    }
    bool read(uint64_t offset, void *dst, uint64_t len, bool checked) const {
        if (len == 0) return true;
        if (iov || checked) return copy_out(offset, dst, len, checked);
        std::memcpy(dst, static_cast<const char *>(start) + offset, len);
        return true;
    }

private:
    bool copy_in(uint64_t offset, const void *src, uint64_t len, bool checked) const;
    bool copy_out(uint64_t offset, void *dst, uint64_t len, bool checked) const;
    void *iov_address_at(uint64_t offset) const;
    void iov_pieces(uint64_t offset, uint64_t len, IovList &out) const;
};

// Copies that report EFAULT instead of faulting (process_vm_readv/writev on ourselves).
bool checked_copy_to(void *dst, const void *src, size_t len);
bool checked_copy_from(void *dst, const void *src, size_t len);

}  // namespace ptl
