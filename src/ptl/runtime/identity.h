// Process identity on a node (DESIGN decision 6): nid is the IPv4 address of the selected
// interface, pid a small per-node integer owned through an advisory lock that the kernel
// drops when the process dies, so PTL_PID_ANY allocation is safe under races and after crashes.
#pragma once

#include <cstdint>
#include <string>

namespace ptl::identity {

// The nid for interface `ifname` (empty: PTL_IFACE, else the first up, non-loopback IPv4
// interface, else 127.0.0.1). Returns 0 and sets `err` when the named interface has no IPv4.
uint32_t select_nid(const std::string &ifname, std::string *chosen, std::string *err);

// Shared-memory object names derived from (nid, pid) alone: no directory service needed.
std::string ring_name(uint32_t nid, uint32_t pid);
std::string lock_path(uint32_t nid, uint32_t pid);

// Takes ownership of `pid` (or, for PTL_PID_ANY, the first free one of 1 .. PTL_PID_MAX - 1
// from where getpid() points, so a just-freed pid is not reused at once; never 0, which Open
// MPI reads as the mark of logical addressing). Returns the pid
// and stores the lock fd (kept open for the process lifetime), or returns -1 with errno-like
// reason in `err`: "in use" or a system error.
int64_t acquire_pid(uint32_t nid, uint32_t pid, int *lock_fd, std::string *err);
void release_pid(uint32_t nid, uint32_t pid, int lock_fd);

// Whether a live process holds (nid, pid) (its lock; an error answers yes: the caller then
// leaves that process's traces alone).
bool pid_owned(uint32_t nid, uint32_t pid);

// Unlinks the receive rings of this user's processes that died without finalizing (killed,
// crashed): a ring whose pid lock nobody holds. Returns how many.
int remove_stale_rings();

}  // namespace ptl::identity
