#include "wake_socket.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ptl::shm {

namespace {

socklen_t address_of(pid_t os_pid, sockaddr_un *a) {
    std::memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    // sun_path[0] stays 0: the abstract namespace.
    const int n = std::snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "ptl4-wake-%u-%d",
                                unsigned(getuid()), int(os_pid));
    return socklen_t(offsetof(sockaddr_un, sun_path) + 1 + size_t(n));
}

// One unbound socket per process sends every wake-up.
int sender() {
    static std::atomic<int> fd{-1};
    int s = fd.load(std::memory_order_acquire);
    if (s >= 0) return s;
    const int made = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (made < 0) return -1;
    if (fd.compare_exchange_strong(s, made, std::memory_order_acq_rel)) return made;
    close(made);  // another thread made one first
    return s;
}

}  // namespace

WakeSocket::~WakeSocket() {
    if (fd_ >= 0) close(fd_);
}

bool WakeSocket::open(std::string *err) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) {
        *err = std::string("socket(AF_UNIX): ") + std::strerror(errno);
        return false;
    }
    sockaddr_un a;
    const socklen_t len = address_of(getpid(), &a);
    if (bind(fd_, reinterpret_cast<const sockaddr *>(&a), len) != 0) {
        *err = std::string("bind ") + (a.sun_path + 1) + ": " + std::strerror(errno);
        close(fd_);
        fd_ = -1;
        return false;
    }
    return true;
}

void WakeSocket::drain() {
    char buf[64];
    while (recv(fd_, buf, sizeof buf, MSG_DONTWAIT) > 0) {
    }
}

void WakeSocket::send_to(pid_t os_pid) {
    const int s = sender();
    if (s < 0) return;
    sockaddr_un a;
    const socklen_t len = address_of(os_pid, &a);
    const char byte = 1;
    // EAGAIN: the sleeper's queue is full of wake-ups already, so it is awake.
    (void)sendto(s, &byte, 1, MSG_DONTWAIT, reinterpret_cast<const sockaddr *>(&a), len);
}

}  // namespace ptl::shm
