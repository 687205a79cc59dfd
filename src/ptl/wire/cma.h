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

}  // namespace ptl
