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

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <thread>

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

constexpr size_t kCoreCapacity = 4096;

}  // namespace

struct UnmapWatch::Core {
    Core(int uffd, int stop_fd) : uffd(uffd), stop_fd(stop_fd), pid(getpid()) {
        unmapped.reserve(kCoreCapacity);
        reader = std::thread([this] { read_events(); });
    }
    ~Core() {
        const uint64_t one = 1;
        if (write(stop_fd, &one, sizeof one) < 0) {
        }
        reader.join();
        close(uffd);  // the kernel forgets every range it watched
        close(stop_fd);
    }

    void read_events();
    void wait_for_reads() {
        // An unmapping call returns once its event is read; the reader may not have noted it yet.
        while (reads_begun.load(std::memory_order_seq_cst) != reads_done.load(std::memory_order_seq_cst))
            sched_yield();
    }

    // Each watch's counts: counts[k] is how often it wants the pages from k to the next key.
    // Only consumers' threads change them (the reader only notes what went, in `unmapped`).
    using Counts = std::map<uintptr_t, int>;
    static void split(Counts &counts, uintptr_t x) {
        auto it = counts.upper_bound(x);
        const int c = it == counts.begin() ? 0 : std::prev(it)->second;
        counts.emplace(x, c);
    }
    static void coalesce(Counts &counts, uintptr_t x) {
        auto it = counts.find(x);
        if (it == counts.end()) return;
        const int before = it == counts.begin() ? 0 : std::prev(it)->second;
        if (it->second == before) counts.erase(it);
    }
    // What the kernel stopped watching by itself (unmapped, moved) no watch wants any more.
    void settle() {
        for (const Range &r : unmapped)
            for (UnmapWatch *w : watches) {
                Counts &counts = w->counts_;
                split(counts, r.start);
                split(counts, r.end);
                auto first = counts.find(r.start), last = counts.find(r.end);
                first->second = 0;
                counts.erase(std::next(first), last);
                coalesce(counts, r.end);
                coalesce(counts, r.start);
            }
        unmapped.clear();
    }
    // Unregisters the pages of [from, to) that no watch but `self` wants.
    void unregister_unwanted(const UnmapWatch *self, uintptr_t from, uintptr_t to) {
        std::vector<Range> kept;  // wanted by another watch, in address order after the sort
        for (const UnmapWatch *w : watches) {
            if (w == self) continue;
            const Counts &counts = w->counts_;
            auto it = counts.upper_bound(from);
            if (it != counts.begin()) --it;
            for (; it != counts.end() && it->first < to; ++it) {
                const auto next = std::next(it);
                const uintptr_t lo = std::max(from, it->first),
                                hi = next == counts.end() ? to : std::min(to, next->first);
                if (it->second > 0 && lo < hi) kept.push_back({lo, hi});
            }
        }
        std::sort(kept.begin(), kept.end(), [](const Range &x, const Range &y) { return x.start < y.start; });
        uintptr_t at = from;
        for (const Range &k : kept) {
            if (k.start > at) unregister(at, k.start);
            at = std::max(at, k.end);
        }
        if (at < to) unregister(at, to);
    }
    void unregister(uintptr_t from, uintptr_t to) {
        uffdio_range u{from, to - from};
        ioctl(uffd, UFFDIO_UNREGISTER, &u);  // fails only where nothing is watched any more
    }

    const int uffd, stop_fd;
    const pid_t pid;  // a forked child has no reader: it makes its own core
    std::atomic<uint64_t> reads_begun{0}, reads_done{0};
    std::mutex mu;
    std::vector<UnmapWatch *> watches;
    std::vector<Range> unmapped;  // reserved, as the watches' lists
    std::thread reader;
};

void UnmapWatch::Core::read_events() {
    pthread_setname_np(pthread_self(), "ptl-unmap-watch");
    pollfd fds[2] = {{uffd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    for (;;) {
        if (poll(fds, 2, -1) < 0 && errno != EINTR) break;
        if (fds[1].revents) break;
        reads_begun.fetch_add(1, std::memory_order_seq_cst);
        uffd_msg msgs[32];
        const ssize_t n = read(uffd, msgs, sizeof msgs);
        if (n > 0) {
            std::lock_guard<std::mutex> lock(mu);
            for (ssize_t i = 0; i < n / ssize_t(sizeof(uffd_msg)); ++i) {
                const uffd_msg &m = msgs[i];
                Range r{};
                bool unregistered = true;  // madvise leaves the range registered
                if (m.event == UFFD_EVENT_UNMAP) {
                    r = {uintptr_t(m.arg.remove.start), uintptr_t(m.arg.remove.end)};
                } else if (m.event == UFFD_EVENT_REMOVE) {
                    r = {uintptr_t(m.arg.remove.start), uintptr_t(m.arg.remove.end)};
                    unregistered = false;
                } else if (m.event == UFFD_EVENT_REMAP) {
                    r = {uintptr_t(m.arg.remap.from), uintptr_t(m.arg.remap.from + m.arg.remap.len)};
                } else {
                    continue;
                }
                for (UnmapWatch *w : watches) {
                    if (w->gone_.size() < w->gone_.capacity())
                        w->gone_.push_back(r);
                    else
                        w->overflow_ = true;
                }
                // Lost when full: a count left too high only keeps pages registered longer.
                if (unregistered && unmapped.size() < unmapped.capacity()) unmapped.push_back(r);
            }
        }
        reads_done.fetch_add(1, std::memory_order_seq_cst);
    }
}

namespace {
std::mutex g_core_mu;
std::weak_ptr<UnmapWatch::Core> g_core;
}  // namespace

std::unique_ptr<UnmapWatch> UnmapWatch::open(std::string *why, size_t capacity) {
    std::shared_ptr<Core> core;
    {
        std::lock_guard<std::mutex> lock(g_core_mu);
        core = g_core.lock();
        if (core && core->pid != getpid()) {
            // Made by the parent before a fork: its reader is not here. Left, not destroyed.
            new std::shared_ptr<Core>(core);
            core.reset();
        }
        if (!core) {
            const int uffd = open_userfaultfd(why);
            if (uffd < 0) return nullptr;
            const int stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
            if (stop_fd < 0) {
                *why = std::string("eventfd: ") + std::strerror(errno);
                close(uffd);
                return nullptr;
            }
            core = std::make_shared<Core>(uffd, stop_fd);
            g_core = core;
        }
    }
    return std::unique_ptr<UnmapWatch>(new UnmapWatch(std::move(core), capacity));
}

UnmapWatch::UnmapWatch(std::shared_ptr<Core> core, size_t capacity) : core_(std::move(core)) {
    gone_.reserve(capacity);
    std::lock_guard<std::mutex> lock(core_->mu);
    core_->watches.push_back(this);
}

UnmapWatch::~UnmapWatch() {
    core_->wait_for_reads();
    std::lock_guard<std::mutex> lock(core_->mu);
    core_->settle();
    std::erase(core_->watches, this);
    // What only this watch wanted is watched no more (the process's userfaultfd lives on).
    for (auto it = counts_.begin(); it != counts_.end(); ++it)
        if (it->second > 0 && std::next(it) != counts_.end())
            core_->unregister_unwanted(this, it->first, std::next(it)->first);
}

bool UnmapWatch::watch(uintptr_t start, uintptr_t end) {
    if (start >= end) return false;
    // An unmap that returned before this call is settled first: noted late, it would zero the
    // count of the memory mapped there since, and another watch's unwatch would then take this
    // one's registration away.
    core_->wait_for_reads();
    // Registered and counted under the lock: another watch's unwatch must not undo it between.
    std::lock_guard<std::mutex> lock(core_->mu);
    Core &c = *core_;
    uffdio_register r{};
    r.range.start = start;
    r.range.len = end - start;
    r.mode = UFFDIO_REGISTER_MODE_WP;
    if (ioctl(c.uffd, UFFDIO_REGISTER, &r) != 0) return false;
    c.settle();
    Core::split(counts_, start);
    Core::split(counts_, end);
    for (auto it = counts_.find(start); it->first < end; ++it) ++it->second;
    Core::coalesce(counts_, end);
    Core::coalesce(counts_, start);
    return true;
}

void UnmapWatch::unwatch(uintptr_t start, uintptr_t end) {
    if (start >= end) return;
    core_->wait_for_reads();  // as in watch()
    std::lock_guard<std::mutex> lock(core_->mu);
    Core &c = *core_;
    c.settle();
    Core::split(counts_, start);
    Core::split(counts_, end);
    for (auto it = counts_.find(start); it->first < end;) {
        const uintptr_t from = it->first, to = std::next(it)->first;
        // Pages this watch wants no more: unregistered unless another watch still wants them
        // (unregistering makes no event, so the reader is not needed).
        if (it->second > 0 && --it->second == 0) c.unregister_unwanted(this, from, to);
        ++it;
        Core::coalesce(counts_, from);
    }
    Core::coalesce(counts_, end);
}

bool UnmapWatch::take(std::vector<Range> &out) {
    core_->wait_for_reads();
    std::lock_guard<std::mutex> lock(core_->mu);
    out.insert(out.end(), gone_.begin(), gone_.end());
    gone_.clear();
    const bool complete = !overflow_;
    overflow_ = false;
    return complete;
}

}  // namespace ptl
