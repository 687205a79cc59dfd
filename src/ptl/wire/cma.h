// Cross-memory attach between processes of one host (the bulk path of the shm and loopback
// wires).
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

namespace ptl {

// Moves everything the iovec lists describe between this process and `pid` (write: local to
// remote). The kernel moves at most ~2 GiB and stops at the first bad address per call, so
// this loops until both lists are consumed. False on an error (errno set, e.g. ESRCH or
// EFAULT) or when the kernel makes no progress.
bool cma_transfer(pid_t pid, const struct iovec *local, int nl, const struct iovec *remote, int nr,
                  bool write);

// How one cross-memory-attach copy of `bytes` compares with one memcpy of them on this machine:
// both timed within this process on warm buffers, the best of a few tries each (tens of
// microseconds in all), CMA's time over memcpy's, with the two times (ns) in *cma_ns and
// *copy_ns. The kernel pins every page it touches: on some virtual machines that costs 4-10
// copies, on others under two (docs/adoption.md). Infinity where CMA is refused (a seccomp
// filter, a kernel without it).
double cma_cost_ratio(size_t bytes, double *cma_ns, double *copy_ns);

}  // namespace ptl
