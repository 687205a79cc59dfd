#include "shm_wire.h"

#include "../cma.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "../../runtime/identity.h"
#include "../../util/clock.h"
#include "../os_process.h"

namespace ptl::shm {

std::unique_ptr<ShmWire> ShmWire::create(PeerId self, const ShmConfig &cfg, std::string *err) {
    std::unique_ptr<ShmWire> w(new ShmWire());
    w->self_ = self;
    w->name_ = identity::ring_name(self.nid, self.pid);
    // We own the pid lock, so a leftover segment of this name is from a dead process.
    shm_unlink(w->name_.c_str());
    int fd = shm_open(w->name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        *err = "shm_open " + w->name_ + ": " + std::strerror(errno);
        return nullptr;
    }
    const size_t ring_bytes = (Ring::segment_size(cfg.ncells, cfg.cell_size) + 4095) / 4096 * 4096;
    w->len_ = ring_bytes + cfg.export_bytes;
    if (ftruncate(fd, off_t(w->len_)) != 0) {
        *err = "ftruncate " + w->name_ + ": " + std::strerror(errno);
        close(fd);
        shm_unlink(w->name_.c_str());
        return nullptr;
    }
    w->base_ = mmap(nullptr, w->len_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (w->base_ == MAP_FAILED) {
        w->base_ = nullptr;
        *err = "mmap " + w->name_ + ": " + std::strerror(errno);
        shm_unlink(w->name_.c_str());
        return nullptr;
    }
    Ring::format(w->base_, cfg.ncells, cfg.cell_size, getpid(), cfg.export_bytes);
    // Under Yama ptrace_scope=1 cross-memory attach needs our consent; peers are processes
    // of the same user (the kernel still checks that).
#ifdef PR_SET_PTRACER
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
    w->rx_.attach(w->base_, w->len_);
    return w;
}

ShmWire::~ShmWire() {
    if (self_wake_fd_ >= 0) close(self_wake_fd_.load());
    for (auto &[id, p] : peers_)
        if (p->base) munmap(p->base, p->len);
    if (base_) {
        munmap(base_, len_);
        shm_unlink(name_.c_str());
    }
}

Peer *ShmWire::find_peer(PeerId id) {
    auto it = peers_.find(id);
    if (it != peers_.end()) return last_peer_ = it->second.get();
    auto p = std::make_unique<Peer>();
    p->id = id;
    const std::string name = identity::ring_name(id.nid, id.pid);
    int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) return nullptr;
    struct stat st {};
    if (fstat(fd, &st) != 0 || st.st_size < off_t(sizeof(RingControl))) {
        close(fd);
        return nullptr;
    }
    p->len = size_t(st.st_size);
    p->base = mmap(nullptr, p->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p->base == MAP_FAILED) return nullptr;
    if (!p->ring.attach(p->base, p->len)) {
        munmap(p->base, p->len);
        return nullptr;
    }
    p->os_pid = p->ring.control()->owner_os_pid;
    if (os_process_gone(p->os_pid)) {  // a segment left by a crashed process
        munmap(p->base, p->len);
        return nullptr;
    }
    Peer *raw = p.get();
    peers_.emplace(id, std::move(p));
    return raw;
}

// The peer's ring, which it sized itself (PTL_SHM_CELLS and PTL_SHM_CELL_SIZE are its own):
// a message sized for ours would never fit a smaller one. Ours until it can be attached.
size_t ShmWire::max_inline(PeerId to) {
    const Peer *p = peer(to);
    return p ? p->ring.max_message_bytes() : rx_.max_message_bytes();
}

bool ShmWire::has_room_now(PeerId to, size_t header_len, size_t payload_len) {
    Peer *p = peer(to);
    return p && !p->dead && p->backlog.empty() && p->ring.has_room(header_len, payload_len);
}

bool ShmWire::send(PeerId to, const void *header, size_t header_len, const struct iovec *payload,
                   int payload_count) {
    Peer *p = peer(to);
    if (!p || p->dead) return false;
    size_t plen = 0;
    for (int i = 0; i < payload_count; ++i) plen += payload[i].iov_len;
    if (p->backlog.empty() &&
        p->ring.try_push(self_.nid, self_.pid, header, header_len, payload, payload_count, plen))
        return true;
    if (header_len + plen > p->ring.max_message_bytes()) return false;
    // Ring full: keep the message (and per-peer order) until the receiver drains it.
    std::vector<char> m(sizeof(uint16_t) + header_len + plen);
    const uint16_t hl = uint16_t(header_len);
    std::memcpy(m.data(), &hl, sizeof hl);
    std::memcpy(m.data() + sizeof hl, header, header_len);
    char *d = m.data() + sizeof hl + header_len;
    for (int i = 0; i < payload_count; ++i) {
        std::memcpy(d, payload[i].iov_base, payload[i].iov_len);
        d += payload[i].iov_len;
    }
    const bool first = p->backlog.empty() && backlog_peers_.fetch_add(1, std::memory_order_seq_cst) == 0;
    p->backlog.push_back(std::move(m));
    if (first) {
        // Only our own progress moves a backlog on, and no peer's doorbell will say when: a
        // progress thread asleep in wait_for_traffic must wake now, not at its timeout (it
        // slept through a whole burst: 200 ms stalls of a sender that stopped calling in).
        // Pairs with the fence in wait_for_traffic.
        std::atomic_thread_fence(std::memory_order_seq_cst);
        rx_.ring_doorbell_if_sleeping();
    }
    return true;
}

bool ShmWire::flush_backlog(Peer &p) {
    while (!p.backlog.empty()) {
        const std::vector<char> &m = p.backlog.front();
        uint16_t hl;
        std::memcpy(&hl, m.data(), sizeof hl);
        struct iovec pl {
            const_cast<char *>(m.data()) + sizeof hl + hl, m.size() - sizeof hl - hl
        };
        if (!p.ring.try_push(self_.nid, self_.pid, m.data() + sizeof hl, hl, &pl, 1, pl.iov_len))
            return false;
        p.backlog.pop_front();
    }
    backlog_peers_.fetch_sub(1, std::memory_order_relaxed);
    return true;
}

int ShmWire::flush_backlogs() {
    int moved = 0;
    for (auto &[id, p] : peers_) {
        if (p->backlog.empty()) continue;
        if (p->dead || peer_dead(id)) {
            p->backlog.clear();
            backlog_peers_.fetch_sub(1, std::memory_order_relaxed);
            continue;
        }
        if (flush_backlog(*p)) ++moved;
    }
    return moved;
}

void *ShmWire::peer_export_area(PeerId id, pid_t *os_pid) {
    Peer *p = peer(id);
    if (!p || p->dead) return nullptr;
    const RingControl *c = p->ring.control();
    const uint64_t off = c->export_offset, size = c->export_size;
    if (size == 0 || off > p->len || size > p->len - off) return nullptr;
    *os_pid = p->os_pid;
    return static_cast<char *>(p->base) + off;
}

char *ShmWire::map_peer_pages(PeerId id, int fd, uint64_t ino, uint64_t len) {
    Peer *p = peer(id);
    return p && !p->dead ? p->pages.map(p->os_pid, fd, ino, len) : nullptr;
}

bool ShmWire::stalled_run_done() {
    const CellHead *h = stalled_;
    if (Ring::arrived(h) < h->payload_len && !sender_gone({h->src_nid, h->src_pid})) return false;
    stalled_ = nullptr;
    rx_.release(h);
    return true;
}

bool ShmWire::peer_dead(PeerId id) {
    auto it = peers_.find(id);
    if (it == peers_.end()) return false;
    Peer &p = *it->second;
    if (p.dead) return true;
    // Called for every progress round while a peer has a backlog: look at most every 10 ms.
    const uint64_t now = monotonic_ns();
    if (now < p.next_liveness_check_ns) return false;
    p.next_liveness_check_ns = now + 10'000'000;
    p.dead = os_process_gone(p.os_pid);
    return p.dead;
}

uint64_t ShmWire::reclaim_abandoned_run() {
    return rx_.reclaim_abandoned([](uint32_t nid, uint32_t pid) { return !identity::pid_owned(nid, pid); });
}

bool ShmWire::cma(PeerId id, const struct iovec *local, int nl, const struct iovec *remote, int nr,
                  bool write) {
    Peer *p = peer(id);
    if (!p || p->dead) return false;
    size_t bytes = 0;
    for (int i = 0; i < nl; ++i) bytes += local[i].iov_len;
    kernel_copies_.fetch_add(1, std::memory_order_relaxed);
    kernel_copy_bytes_.fetch_add(bytes, std::memory_order_relaxed);
    if (cma_transfer(p->os_pid, local, nl, remote, nr, write)) return true;
    if (errno == ESRCH) p->dead = true;
    return false;
}

namespace {
// A bulk key of ours: the place of the file in our list and the low bits of its inode.
constexpr uint64_t kMappedKey = uint64_t(1) << 63;
constexpr uint64_t kInoBits = (uint64_t(1) << 48) - 1;
}  // namespace

bool ShmWire::export_memory(PeerId, const struct iovec *pieces, int n, bool, uint64_t *keys, uint64_t *id) {
    *id = 0;
    for (int i = 0; i < n; ++i) {
        uint32_t index = 0;
        uint64_t ino = 0;
        keys[i] = own_files_ && adopted_.listed(pieces[i].iov_base, pieces[i].iov_len, &index, &ino)
                      ? kMappedKey | uint64_t(index) << 48 | (ino & kInoBits)
                      : 0;
    }
    adopted_.publish(own_files_);  // what went since is forgotten: the list is as the keys say
    return true;
}

bool ShmWire::bulk_by_mapping(uint64_t key) const {
    return (key & kMappedKey) != 0;
}

char *ShmWire::mapped(Peer &p, uint64_t key, uintptr_t addr, size_t len) {
    const uint32_t index = uint32_t(key >> 48) & 0x7fff;
    if (!(key & kMappedKey) || !files_offset_ || index >= kListedFiles) return nullptr;
    const RingControl *c = p.ring.control();
    const uint64_t off = c->export_offset, size = c->export_size;
    if (size < files_offset_ + sizeof(FileList) || off > p.len || size > p.len - off) return nullptr;
    const auto *list = reinterpret_cast<const FileList *>(static_cast<char *>(p.base) + off + files_offset_);
    const ListedFile &f = list->files[index];
    const uint32_t seq = f.seq.load(std::memory_order_acquire);
    const int32_t fd = f.fd.load(std::memory_order_relaxed);
    const uint64_t ino = f.ino.load(std::memory_order_relaxed), base = f.base.load(std::memory_order_relaxed),
                   flen = f.len.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if ((seq & 1) || f.seq.load(std::memory_order_relaxed) != seq || fd < 0 ||
        (ino & kInoBits) != (key & kInoBits) || addr < base || len > flen || addr - base > flen - len)
        return nullptr;
    // The peer named the file for this transfer, and its memory stays mapped until it ends.
    char *m = p.pages.map(p.os_pid, fd, ino, flen);
    return m ? m + (addr - base) : nullptr;
}

bool ShmWire::copy_mapped(PeerId id, const struct iovec *local, int nl, const struct iovec *remote, int nr,
                          const uint64_t *keys, bool write) {
    Peer *p = peer(id);
    if (!p || p->dead || !keys) return false;
    char *few[8];
    std::vector<char *> many;
    char **at = few;
    if (nr > 8) {
        many.resize(size_t(nr));
        at = many.data();
    }
    for (int i = 0; i < nr; ++i)
        if (!(at[i] =
                  mapped(*p, keys[i], reinterpret_cast<uintptr_t>(remote[i].iov_base), remote[i].iov_len)))
            return false;
    // Both lists in step: each copy as long as the shorter of the two pieces left.
    int li = 0, ri = 0;
    size_t loff = 0, roff = 0;
    while (li < nl && ri < nr) {
        const size_t k = std::min(local[li].iov_len - loff, remote[ri].iov_len - roff);
        char *l = static_cast<char *>(local[li].iov_base) + loff, *r = at[ri] + roff;
        if (k) std::memcpy(write ? r : l, write ? l : r, k);
        loff += k;
        roff += k;
        if (loff == local[li].iov_len) ++li, loff = 0;
        if (roff == remote[ri].iov_len) ++ri, roff = 0;
    }
    return true;
}

bool ShmWire::bulk_read(PeerId from, const struct iovec *local, int nl, const struct iovec *remote, int nr,
                        const uint64_t *keys) {
    return copy_mapped(from, local, nl, remote, nr, keys, false) || cma(from, local, nl, remote, nr, false);
}

bool ShmWire::bulk_write(PeerId to, const struct iovec *local, int nl, const struct iovec *remote, int nr,
                         const uint64_t *keys) {
    return copy_mapped(to, local, nl, remote, nr, keys, true) || cma(to, local, nl, remote, nr, true);
}

void ShmWire::wait_for_traffic(long timeout_us, const std::function<void()> &arm_others,
                               const std::function<bool()> &work_waiting, struct pollfd *also, int n_also) {
    RingControl *c = rx_.control();
    const uint32_t v = c->doorbell.load(std::memory_order_acquire);
    if (arm_others) arm_others();
    const bool polls = sleeps_on_descriptors();
    const uint32_t how = polls ? kSleepsOnSocket : kSleepsOnFutex;
    sleepers_.fetch_add(1, std::memory_order_relaxed);
    c->sleeping.store(how, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // A producer writing a message to us that it reserved before the flag went up will not
    // ring: nap briefly instead (it publishes within microseconds; one that died meanwhile
    // must not make this a busy loop).
    const bool reserved = !rx_.nothing_reserved(), published = reserved && rx_.may_hold_message();
    constexpr long kWhileWrittenUs = 50;
    if (reserved && !published)
        timeout_us = timeout_us >= 0 ? std::min(timeout_us, kWhileWrittenUs) : kWhileWrittenUs;
    struct timespec ts {
        timeout_us / 1000000, (timeout_us % 1000000) * 1000
    };
    if (has_backlog()) {
        // Our messages wait for room in a peer's ring: a progress must keep trying.
        sched_yield();
    } else if (!published && !(work_waiting && work_waiting())) {
        if (!polls) {
            syscall(SYS_futex, &c->doorbell, FUTEX_WAIT, v, timeout_us >= 0 ? &ts : nullptr, nullptr, 0);
        } else if (c->doorbell.load(std::memory_order_seq_cst) == v) {  // what FUTEX_WAIT compares
            const int self_fd = self_wake_fd_.load(std::memory_order_relaxed);
            pollfd fds[2 + kMaxAlso] = {{wake_socket_.fd(), POLLIN, 0}, {self_fd, POLLIN, 0}};
            n_also = std::min(n_also, kMaxAlso);
            std::copy(also, also + n_also, fds + 2);
            if (ppoll(fds, nfds_t(2 + n_also), timeout_us >= 0 ? &ts : nullptr, nullptr) > 0) {
                if (fds[0].revents) wake_socket_.drain();
                uint64_t n;
                if (fds[1].revents && read(self_fd, &n, sizeof n) < 0) {
                }
                for (int i = 0; i < n_also; ++i) also[i].revents = fds[2 + i].revents;
            }
        }
    }
    // Another thread may still sleep (the progress thread and an application's wait): the
    // flag stays up for it, or producers would not wake it.
    c->sleeping.store(sleepers_.fetch_sub(1, std::memory_order_relaxed) > 1 ? how : kAwake,
                      std::memory_order_relaxed);
}

void ShmWire::wake() {
    RingControl *c = rx_.control();
    if (const int fd = self_wake_fd_.load(std::memory_order_acquire); fd >= 0) {
        // Pairs with wait_for_traffic's fence: it sees the doorbell move, or we see it asleep.
        c->doorbell.fetch_add(1, std::memory_order_seq_cst);
        if (c->sleeping.load(std::memory_order_seq_cst) != kAwake) {
            const uint64_t one = 1;
            if (write(fd, &one, sizeof one) < 0) {
            }
        }
        return;
    }
    c->doorbell.fetch_add(1, std::memory_order_release);
    syscall(SYS_futex, &c->doorbell, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

bool ShmWire::sleep_on_descriptors(std::string *err) {
    if (sleeps_on_descriptors()) return true;
    if (!wake_socket_.open(err)) return false;
    const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) {
        *err = std::string("eventfd: ") + std::strerror(errno);
        return false;
    }
    self_wake_fd_.store(fd, std::memory_order_release);
    return true;
}

}  // namespace ptl::shm
