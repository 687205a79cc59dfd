#include "cma.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <vector>

#include "../util/clock.h"

namespace ptl {

namespace {

void advance(std::vector<struct iovec> &v, size_t &i, size_t k) {
    while (k && i < v.size()) {
        const size_t s = std::min(k, v[i].iov_len);
        v[i].iov_base = static_cast<char *>(v[i].iov_base) + s;
        v[i].iov_len -= s;
        k -= s;
        if (v[i].iov_len == 0) ++i;
    }
    while (i < v.size() && v[i].iov_len == 0) ++i;
}

// What is left of a transfer after `done` bytes, in calls of at most 1024 pieces a side.
bool cma_rest(pid_t pid, const struct iovec *local, int nl, const struct iovec *remote, int nr, bool write,
              size_t done) {
    std::vector<struct iovec> l(local, local + nl), r(remote, remote + nr);
    size_t li = 0, ri = 0;
    advance(l, li, done);
    advance(r, ri, done);
    while (li < l.size() && ri < r.size()) {
        const int lc = int(std::min<size_t>(l.size() - li, 1024));
        const int rc = int(std::min<size_t>(r.size() - ri, 1024));
        const ssize_t n = write ? process_vm_writev(pid, &l[li], lc, &r[ri], rc, 0)
                                : process_vm_readv(pid, &l[li], lc, &r[ri], rc, 0);
        if (n < 0) return false;
        if (n == 0) {
            errno = EFAULT;
            return false;
        }
        advance(l, li, size_t(n));
        advance(r, ri, size_t(n));
    }
    return true;
}

}  // namespace

bool cma_transfer(pid_t pid, const struct iovec *local, int nl, const struct iovec *remote, int nr,
                  bool write) {
    // The common case first, without copying the lists: one call that moves everything.
    if (nl > 0 && nr > 0 && nl <= 1024 && nr <= 1024) {
        size_t from = 0, to = 0;
        for (int i = 0; i < nl; ++i) from += local[i].iov_len;
        for (int i = 0; i < nr; ++i) to += remote[i].iov_len;
        const size_t want = std::min(from, to);  // the shorter list ends the transfer
        const ssize_t n = write ? process_vm_writev(pid, local, nl, remote, nr, 0)
                                : process_vm_readv(pid, local, nl, remote, nr, 0);
        if (n < 0) return false;
        if (size_t(n) == want) return true;
        if (n == 0) {
            errno = EFAULT;
            return false;
        }
        // Short (a list longer than the remote one, or more than the kernel moves at once):
        // the rest below, from where it stopped.
        return cma_rest(pid, local, nl, remote, nr, write, size_t(n));
    }
    return cma_rest(pid, local, nl, remote, nr, write, 0);
}

double cma_cost_ratio(size_t bytes, double *cma_ns, double *copy_ns) {
    constexpr int kTries = 7;
    constexpr double kNever = std::numeric_limits<double>::infinity();
    *cma_ns = *copy_ns = kNever;
    void *m = mmap(nullptr, 2 * bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return kNever;
    char *from = static_cast<char *>(m), *to = from + bytes;
    std::memset(m, 1, 2 * bytes);
    const struct iovec local { to, bytes }, remote{from, bytes};
    // Interleaved, so a preemption or a neighbour's burst hurts one try of each, not a kind.
    for (int i = 0; i < kTries; ++i) {
        const uint64_t t0 = monotonic_ns();
        if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != ssize_t(bytes)) break;
        const uint64_t t1 = monotonic_ns();
        std::memcpy(to, from, bytes);
        asm volatile("" : : "r"(to) : "memory");  // the copy is used
        const uint64_t t2 = monotonic_ns();
        *cma_ns = std::min(*cma_ns, double(t1 - t0));
        *copy_ns = std::min(*copy_ns, double(std::max<uint64_t>(t2 - t1, 1)));
    }
    munmap(m, 2 * bytes);
    return *cma_ns < kNever ? *cma_ns / *copy_ns : kNever;
}

}  // namespace ptl
