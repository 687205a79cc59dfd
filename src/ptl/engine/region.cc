#include "region.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace ptl {

Region Region::iovec(const ptl_iovec_t *iov, uint64_t n) {
    Region r;
    r.iov = iov;
    r.niov = n;
    for (uint64_t i = 0; i < n; ++i) r.length += iov[i].iov_len;
    r.start = n ? iov[0].iov_base : nullptr;
    return r;
}

void *Region::iov_address_at(uint64_t offset) const {
    offset = std::min(offset, length);
    for (uint64_t i = 0; i < niov; ++i) {
        if (offset < iov[i].iov_len) return static_cast<char *>(iov[i].iov_base) + offset;
        offset -= iov[i].iov_len;
    }
    return niov ? static_cast<char *>(iov[niov - 1].iov_base) + iov[niov - 1].iov_len : start;
}

void Region::iov_pieces(uint64_t offset, uint64_t len, IovList &out) const {
    for (uint64_t i = 0; i < niov && len; ++i) {
        uint64_t l = iov[i].iov_len;
        if (offset >= l) {
            offset -= l;
            continue;
        }
        uint64_t n = std::min(l - offset, len);
        out.push_back({static_cast<char *>(iov[i].iov_base) + offset, n});
        len -= n;
        offset = 0;
    }
}

namespace {
// process_vm_* on our own pid: the kernel validates every page and returns EFAULT.
bool self_vm(void *local, const void *remote, size_t len, bool to_remote) {
    static const pid_t self = getpid();
    while (len) {
        struct iovec l {
            local, len
        };
        struct iovec r {
            const_cast<void *>(remote), len
        };
        ssize_t n =
            to_remote ? process_vm_writev(self, &l, 1, &r, 1, 0) : process_vm_readv(self, &l, 1, &r, 1, 0);
        if (n <= 0) return false;
        local = static_cast<char *>(local) + n;
        remote = static_cast<const char *>(remote) + n;
        len -= static_cast<size_t>(n);
    }
    return true;
}
}  // namespace

bool checked_copy_to(void *dst, const void *src, size_t len) {
    return len == 0 || self_vm(const_cast<void *>(src), dst, len, true);
}

bool checked_copy_from(void *dst, const void *src, size_t len) {
    return len == 0 || self_vm(dst, src, len, false);
}

bool Region::copy_in(uint64_t offset, const void *src, uint64_t len, bool checked) const {
    if (len == 0) return true;
    if (!iov) {
        void *dst = static_cast<char *>(start) + offset;
        if (checked) return checked_copy_to(dst, src, len);
        std::memcpy(dst, src, len);
        return true;
    }
    IovList ps;
    pieces(offset, len, ps);
    const char *s = static_cast<const char *>(src);
    for (auto &p : ps) {
        if (checked) {
            if (!checked_copy_to(p.iov_base, s, p.iov_len)) return false;
        } else {
            std::memcpy(p.iov_base, s, p.iov_len);
        }
        s += p.iov_len;
    }
    return true;
}

bool Region::copy_out(uint64_t offset, void *dst, uint64_t len, bool checked) const {
    if (len == 0) return true;
    if (!iov) {
        const void *src = static_cast<const char *>(start) + offset;
        if (checked) return checked_copy_from(dst, src, len);
        std::memcpy(dst, src, len);
        return true;
    }
    IovList ps;
    pieces(offset, len, ps);
    char *d = static_cast<char *>(dst);
    for (auto &p : ps) {
        if (checked) {
            if (!checked_copy_from(d, p.iov_base, p.iov_len)) return false;
        } else {
            std::memcpy(d, p.iov_base, p.iov_len);
        }
        d += p.iov_len;
    }
    return true;
}

}  // namespace ptl
