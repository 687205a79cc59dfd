#include "unmap_watch.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

namespace ptl {

namespace {

int open_userfaultfd(std::string *why) {
    int fd = int(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
    // Without vm.unprivileged_userfaultfd an unprivileged process may still have one that
    // handles only faults from user mode, and no fault is ever handled here.
    if (fd < 0 && errno == EPERM)
        fd = int(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
    if (fd < 0) {
        *why = std::string("userfaultfd: ") + std::strerror(errno);
        return -1;
    }
    uffdio_api api{};
    api.api = UFFD_API;
    api.features = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP;
    if (ioctl(fd, UFFDIO_API, &api) != 0) {
        *why = std::string("userfaultfd events: ") + std::strerror(errno);
        close(fd);
        return -1;
    }
    return fd;
}

}  // namespace

std::unique_ptr<UnmapWatch> UnmapWatch::open(std::string *why, size_t capacity) {
    const int uffd = open_userfaultfd(why);
    if (uffd < 0) return nullptr;
    const int stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (stop_fd < 0) {
        *why = std::string("eventfd: ") + std::strerror(errno);
        close(uffd);
        return nullptr;
    }
    return std::unique_ptr<UnmapWatch>(new UnmapWatch(uffd, stop_fd, capacity));
}

UnmapWatch::UnmapWatch(int uffd, int stop_fd, size_t capacity)
    : uffd_(uffd), stop_fd_(stop_fd), capacity_(capacity) {
    gone_.reserve(capacity_);
    reader_ = std::thread([this] { read_events(); });
}

UnmapWatch::~UnmapWatch() {
    const uint64_t one = 1;
    if (write(stop_fd_, &one, sizeof one) < 0) {
    }
    reader_.join();
    close(uffd_);  // the kernel forgets every range it watched
    close(stop_fd_);
}

bool UnmapWatch::watch(uintptr_t start, uintptr_t end) {
    uffdio_register r{};
    r.range.start = start;
    r.range.len = end - start;
    r.mode = UFFDIO_REGISTER_MODE_WP;
    return ioctl(uffd_, UFFDIO_REGISTER, &r) == 0;
}

void UnmapWatch::unwatch(uintptr_t start, uintptr_t end) {
    uffdio_range r{start, end - start};
    ioctl(uffd_, UFFDIO_UNREGISTER, &r);  // fails only where nothing is watched any more
}

void UnmapWatch::read_events() {
    pthread_setname_np(pthread_self(), "ptl-unmap-watch");
    pollfd fds[2] = {{uffd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    for (;;) {
        if (poll(fds, 2, -1) < 0 && errno != EINTR) break;
        if (fds[1].revents) break;
        reads_begun_.fetch_add(1, std::memory_order_seq_cst);
        uffd_msg msgs[32];
        const ssize_t n = read(uffd_, msgs, sizeof msgs);
        if (n > 0) {
            std::lock_guard<std::mutex> lock(mu_);
            for (ssize_t i = 0; i < n / ssize_t(sizeof(uffd_msg)); ++i) {
                const uffd_msg &m = msgs[i];
                Range r{};
                if (m.event == UFFD_EVENT_UNMAP || m.event == UFFD_EVENT_REMOVE)
                    r = {uintptr_t(m.arg.remove.start), uintptr_t(m.arg.remove.end)};
                else if (m.event == UFFD_EVENT_REMAP)
                    r = {uintptr_t(m.arg.remap.from), uintptr_t(m.arg.remap.from + m.arg.remap.len)};
                else
                    continue;
                if (gone_.size() < capacity_)
                    gone_.push_back(r);
                else
                    overflow_ = true;
            }
        }
        reads_done_.fetch_add(1, std::memory_order_seq_cst);
    }
}

bool UnmapWatch::take(std::vector<Range> &out) {
    // An unmapping call returns once its event is read; the reader may not have noted it yet.
    while (reads_begun_.load(std::memory_order_seq_cst) != reads_done_.load(std::memory_order_seq_cst))
        sched_yield();
    std::lock_guard<std::mutex> lock(mu_);
    out.insert(out.end(), gone_.begin(), gone_.end());
    gone_.clear();
    const bool complete = !overflow_;
    overflow_ = false;
    return complete;
}

}  // namespace ptl
