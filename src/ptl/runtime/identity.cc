#include "identity.h"

#include <portals4.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ptl::identity {

uint32_t select_nid(const std::string &ifname_in, std::string *chosen, std::string *err) {
    std::string ifname = ifname_in;
    if (ifname.empty()) {
        if (const char *e = std::getenv("PTL_IFACE")) ifname = e;
    }
    struct ifaddrs *ifs = nullptr;
    if (getifaddrs(&ifs) != 0) {
        if (chosen) *chosen = "lo";
        return INADDR_LOOPBACK;
    }
    uint32_t nid = 0;
    std::string name;
    for (auto *i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
        if (!ifname.empty()) {
            if (ifname != i->ifa_name) continue;
        } else if ((i->ifa_flags & IFF_LOOPBACK) || !(i->ifa_flags & IFF_UP)) {
            continue;
        }
        nid = ntohl(reinterpret_cast<sockaddr_in *>(i->ifa_addr)->sin_addr.s_addr);
        name = i->ifa_name;
        break;
    }
    freeifaddrs(ifs);
    if (nid == 0) {
        if (!ifname.empty()) {
            if (err) *err = "interface '" + ifname + "' has no IPv4 address";
            return 0;
        }
        nid = INADDR_LOOPBACK;
        name = "lo";
    }
    if (chosen) *chosen = name;
    return nid;
}

std::string ring_name(uint32_t nid, uint32_t pid) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "/ptl4-%u-%08x-%u", unsigned(getuid()), nid, pid);
    return buf;
}

std::string lock_path(uint32_t nid, uint32_t pid) {
    return "/dev/shm" + ring_name(nid, pid) + ".lock";
}

namespace {
// 1 = acquired, 0 = held by a live process, -1 = error.
int try_lock(uint32_t nid, uint32_t pid, int *fd_out, std::string *err) {
    const std::string path = lock_path(nid, pid);
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (err) *err = "cannot open " + path + ": " + std::strerror(errno);
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int e = errno;
        close(fd);
        if (e == EWOULDBLOCK) return 0;
        if (err) *err = "cannot lock " + path + ": " + std::strerror(e);
        return -1;
    }
    *fd_out = fd;
    return 1;
}
}  // namespace

int64_t acquire_pid(uint32_t nid, uint32_t pid, int *lock_fd, std::string *err) {
    if (pid != PTL_PID_ANY) {
        // remove_stale_rings holds a free pid's lock for an instant: look again before
        // calling the pid taken.
        for (int attempt = 0;; ++attempt) {
            const int r = try_lock(nid, pid, lock_fd, err);
            if (r == 1) return pid;
            if (r < 0) return -1;
            if (attempt == 20) break;
            usleep(1000);
        }
        if (err) *err = "in use";
        return -1;
    }
    // Never 0: Open MPI's mtl portals4 publishes pid 0 for its peers on logical addressing,
    // and its coll portals4 takes a physical pid of 0 for that mark and disqualifies itself
    // on that rank alone, whose collectives then do not meet the others' (a hang in the
    // job's first collective). Start where this process's OS pid points rather than at the
    // bottom: a pid that just became free (a process that died) is then not handed straight
    // to the next process on the node, whose peers could otherwise take it for the dead one.
    constexpr uint32_t kChoices = PTL_PID_MAX - 1;  // pids 1 .. PTL_PID_MAX - 1
    const uint32_t start = uint32_t(getpid()) % kChoices;
    for (uint32_t i = 0; i < kChoices; ++i) {
        const uint32_t p = 1 + (start + i) % kChoices;
        const int r = try_lock(nid, p, lock_fd, err);
        if (r == 1) return p;
        if (r < 0) return -1;
    }
    if (err) *err = "no free pid below PTL_PID_MAX";
    return -1;
}

bool pid_owned(uint32_t nid, uint32_t pid) {
    int fd;
    if (pid >= PTL_PID_MAX) return true;  // no pid of ours: not a lock to make
    if (try_lock(nid, pid, &fd, nullptr) != 1) return true;
    close(fd);
    return false;
}

int remove_stale_rings() {
    const std::string prefix = "ptl4-" + std::to_string(getuid()) + "-";
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    int removed = 0;
    while (struct dirent *e = readdir(d)) {
        unsigned nid, pid;
        int end = 0;
        const std::string name = e->d_name;
        if (name.compare(0, prefix.size(), prefix) != 0) continue;
        if (std::sscanf(name.c_str() + prefix.size(), "%8x-%u%n", &nid, &pid, &end) != 2) continue;
        if (name.size() != prefix.size() + size_t(end) || pid >= PTL_PID_MAX) continue;  // a .lock
        int fd;
        if (try_lock(nid, pid, &fd, nullptr) != 1) continue;  // owned by a live process
        // Holding the pid's lock, no process can be creating this ring.
        if (shm_unlink(ring_name(nid, pid).c_str()) == 0) ++removed;
        close(fd);
    }
    closedir(d);
    return removed;
}

void release_pid(uint32_t nid, uint32_t pid, int lock_fd) {
    // The lock file stays: unlinking it would let two processes lock different inodes of
    // the same name. At most PTL_PID_MAX tiny files per (user, nid) remain.
    (void)nid;
    (void)pid;
    close(lock_fd);
}

}  // namespace ptl::identity
