#include "cma.h"

#include <algorithm>
#include <cerrno>
#include <vector>

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

}  // namespace

bool cma_transfer(pid_t pid, const struct iovec *local, int nl, const struct iovec *remote, int nr,
                  bool write) {
    std::vector<struct iovec> l(local, local + nl), r(remote, remote + nr);
    size_t li = 0, ri = 0;
    advance(l, li, 0);
    advance(r, ri, 0);
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

}  // namespace ptl
