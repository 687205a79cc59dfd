// The shared-memory wire: processes on one host. Each process owns one receive ring in POSIX
// shm named after its (nid, pid); senders map a peer's ring on first use. Bulk data moves
// with one copy by cross-memory attach (process_vm_readv/writev).
#pragma once

#include <poll.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "../arriving.h"
#include "../wire.h"
#include "shared_pages.h"
#include "shm_ring.h"
#include "wake_socket.h"

namespace ptl::shm {

struct ShmConfig {
    uint32_t ncells = 4096;     // PTL_SHM_CELLS (power of two)
    uint32_t cell_size = 256;   // PTL_SHM_CELL_SIZE (bytes)
    uint64_t export_bytes = 0;  // the engine's export area (direct_exports.h)
};

// A process on this host we send to: its ring mapped here. It stays until the wire goes, so
// it may be kept by pointer (the engine's common put does).
struct Peer {
    PeerId id;
    void *base = nullptr;
    size_t len = 0;
    Ring ring;
    int32_t os_pid = 0;
    bool dead = false;
    uint64_t next_liveness_check_ns = 0;
    std::deque<std::vector<char>> backlog;  // serialized [u16 header_len][header][payload]
    PeerPages pages;                        // its adopted pages we mapped
};

class ShmWire final : public Wire {
public:
    static std::unique_ptr<ShmWire> create(PeerId self, const ShmConfig &cfg, std::string *err);
    ~ShmWire() override;

    bool send(PeerId to, const void *header, size_t header_len, const struct iovec *payload,
              int payload_count) override;
    // The peer to send to, its ring mapped on first use; null if it cannot be reached.
    Peer *peer(PeerId id) { return last_peer_ && last_peer_->id == id ? last_peer_ : find_peer(id); }
    // As send, for a payload in one piece and a header `fill(void *at)` writes in the ring (the
    // engine's common small put, common_put.cc): false also when it would have to wait in the
    // backlog, which the caller's general send then joins in order.
    template <class Fill>
    [[gnu::always_inline]] bool send_now(Peer *p, size_t header_len, const void *payload, size_t payload_len,
                                         Fill &&fill) {
        return !p->dead && p->backlog.empty() &&
               p->ring.try_push_filled(self_.nid, self_.pid, header_len, payload, payload_len, fill);
    }
    size_t max_inline(PeerId to) override;
    size_t max_inline_from(PeerId) override { return rx_.max_message_bytes(); }
    // Whether a message of `bytes` to `to` would go into its ring now rather than wait in our
    // backlog (a hint).
    bool has_room_now(PeerId to, size_t header_len, size_t payload_len);
    int progress(const MessageHandler &handler) override { return progress_with(handler); }
    // progress() for a handler the compiler sees (the engine's): no call through std::function
    // per message.
    template <class Handler>
    int progress_with(Handler &&handler) {
        int work = 0;
        // Bounded batch, so API callers waiting for the engine lock are not starved.
        for (int i = 0; i < 64; ++i) {
            const CellHead *h = rx_.peek();
            if (!h) break;
            if (h == stalled_) [[unlikely]] {  // handled already; freed once it is complete
                if (!stalled_run_done()) break;
                continue;
            }
            InMessage m;
            m.from = {h->src_nid, h->src_pid};
            m.header = h + 1;
            m.header_len = h->header_len;
            m.payload = reinterpret_cast<const char *>(h + 1) + h->header_len;
            m.payload_len = h->payload_len;
            m.via = this;
            if (Ring::arrived(h) < h->payload_len) [[unlikely]]
                m.arriving = &h->arrived;
            handler(m);
            ++work;
            // The run is the sender's to write until all of it is in, however little the
            // handler read; one whose sender died is ours. One whose sender stopped writing
            // holds the ring (every later run waits behind it) until it ends either way.
            if (m.arriving && !payload_arrived(m, m.payload_len)) [[unlikely]] {
                stalled_ = h;
                break;
            }
            rx_.release(h);
        }
        if (has_backlog()) work += flush_backlogs();
        return work;
    }
    bool has_bulk(PeerId) const override { return true; }
    // Pieces in adopted pages get a key naming their file in our list (the peer then copies
    // through its mapping of the file, not by cross-memory attach); others 0.
    bool export_memory(PeerId, const struct iovec *pieces, int n, bool, uint64_t *keys,
                       uint64_t *id) override;
    bool bulk_by_mapping(uint64_t key) const override;
    bool bulk_read(PeerId from, const struct iovec *local, int nl, const struct iovec *remote, int nr,
                   const uint64_t *keys) override;
    bool bulk_write(PeerId to, const struct iovec *local, int nl, const struct iovec *remote, int nr,
                    const uint64_t *keys) override;
    bool peer_dead(PeerId) override;
    // Ring::reclaim_abandoned for our receive ring, a sender gone when no live process holds
    // its pid: the cells skipped (counted as malformed, taken by take_malformed).
    uint64_t reclaim_abandoned_run();
    bool sender_gone(PeerId from) override { return !peer(from) || peer_dead(from); }

    // Sleeps until a message arrives, wake() is called, our own messages wait in a backlog, or
    // `timeout_us` passes (with a backlog it only yields the CPU). `arm_others` runs once the
    // sleep is committed, so a wake() it causes is never missed.
    // work_waiting: what else a producer may have left before ringing (checked after the
    // sleeping flag is up, as the ring is).
    // Sleeping on descriptors (sleep_on_descriptors): the sleep is a poll() that also watches
    // `also[0 .. n_also)` (their revents filled in), at most kMaxAlso of them.
    void wait_for_traffic(long timeout_us, const std::function<void()> &arm_others = {},
                          const std::function<bool()> &work_waiting = {}, struct pollfd *also = nullptr,
                          int n_also = 0);
    static constexpr int kMaxAlso = 4;
    void wake();
    // From now on sleeps are polls with other wires' descriptors (wait_for_traffic's `also`),
    // woken by a WakeSocket instead of the doorbell futex. False (with the reason) if the
    // socket cannot be had: sleeps stay on the futex.
    bool sleep_on_descriptors(std::string *err);
    bool sleeps_on_descriptors() const { return self_wake_fd_.load(std::memory_order_acquire) >= 0; }
    // Read without the engine lock by a thread about to sleep; changed under it.
    bool has_backlog() const { return backlog_peers_.load(std::memory_order_relaxed) > 0; }
    // Messages dropped as malformed since the last call (the ring's own checks).
    uint64_t take_malformed() { return rx_.take_malformed(); }
    // Lock-free hint for idle polls: a message may be waiting in our ring.
    bool may_have_incoming() const { return rx_.may_hold_message(); }
    // Processes on this host we have sent to.
    size_t peer_count() const { return peers_.size(); }

    // The direct path (issue 32). Our export area (ShmConfig::export_bytes, zeroed at start),
    // and a live peer's, with its OS pid: null if it has none or cannot be reached.
    void *export_area() const { return static_cast<char *>(base_) + rx_.control()->export_offset; }
    void *peer_export_area(PeerId id, pid_t *os_pid);
    // Whether the peer has handled every message we sent it (none waits in our backlog or its
    // ring): an operation done directly now cannot overtake one of ours.
    // Whether the peer was already seen gone (no look at the system).
    bool peer_known_dead(PeerId id) {
        Peer *p = peer(id);
        return !p || p->dead;
    }
    bool peer_handled_all(PeerId id) {
        Peer *p = peer(id);
        return p && p->backlog.empty() && p->ring.consumed_all_pushed();
    }
    bool adopt_pages(void *start, size_t len, SharedRange *out) {
        const bool ok = adopted_.adopt(start, len, out);
        adopted_.publish(own_files_);
        return ok;
    }
    bool in_adopted_pages(const void *start, size_t len) const { return adopted_.covers(start, len); }
    void release_pages(int fd) {
        adopted_.release(fd);
        adopted_.publish(own_files_);
    }
    // Where our adopted files are listed for peers (in our export area), and where peers'
    // lists lie in theirs.
    void list_files_in(FileList *own, size_t offset_in_export_area) {
        own_files_ = own;
        files_offset_ = offset_in_export_area;
    }
    uint64_t adopted_version() const { return adopted_.version(); }
    template <class F>
    void for_each_adopted_file(F &&f) const {
        adopted_.for_each_file(f);
    }
    const AdoptionStats &adoption_stats() const { return adopted_.stats(); }
    // Mappings of peers' adopted files made so far (each an open of /proc/PID/fd and an mmap).
    uint64_t peer_maps_made() const {
        uint64_t n = 0;
        for (const auto &[id, p] : peers_) n += p->pages.maps_made();
        return n;
    }
    void set_adoption_debug(bool on) { adopted_.set_debug(on); }
    // Bulk transfers made by cross-memory attach (a system call each) and the bytes they moved.
    uint64_t kernel_copies() const { return kernel_copies_.load(std::memory_order_relaxed); }
    uint64_t kernel_copy_bytes() const { return kernel_copy_bytes_.load(std::memory_order_relaxed); }
    // Drops our mappings of the peer's files but those its live exports name.
    void retain_peer_pages(PeerId id, const std::vector<std::pair<int, uint64_t>> &live) {
        if (Peer *p = peer(id)) p->pages.retain(live);
    }
    // Wakes the peer's engine if it sleeps for traffic, after a change it must notice made by
    // a sequentially consistent read-modify-write (which pairs with wait_for_traffic's fence).
    void wake_peer(PeerId id) {
        if (Peer *p = peer(id)) p->ring.ring_doorbell_if_sleeping();
    }
    // A peer's adopted pages (its `fd`, inode `ino`, of length `len`), mapped here; null if they
    // cannot be.
    char *map_peer_pages(PeerId id, int fd, uint64_t ino, uint64_t len);
    // Moves data between our memory and the peer's by cross-memory attach (counted as a kernel
    // copy); false with errno set where it could not (a dead peer is then known dead).
    bool cma(PeerId peer, const struct iovec *local, int nl, const struct iovec *remote, int nr, bool write);

private:
    ShmWire() = default;
    // Whether the stalled run (progress_with) was completed or its sender died: then freed.
    bool stalled_run_done();
    Peer *find_peer(PeerId id);
    bool flush_backlog(Peer &p);
    int flush_backlogs();  // the peers whose backlog moved on
    // The same through our mappings of the peer's adopted files, where every remote piece's key
    // names one that holds it; false (nothing moved) where one does not.
    bool copy_mapped(PeerId peer, const struct iovec *local, int nl, const struct iovec *remote, int nr,
                     const uint64_t *keys, bool write);
    char *mapped(Peer &p, uint64_t key, uintptr_t addr, size_t len);

    PeerId self_;
    std::string name_;
    void *base_ = nullptr;
    size_t len_ = 0;
    Ring rx_;
    const CellHead *stalled_ = nullptr;  // a streamed run handled while its sender stopped writing
    std::unordered_map<PeerId, std::unique_ptr<Peer>, PeerIdHash> peers_;
    Peer *last_peer_ = nullptr;  // peer()'s last answer: most sends go where the last one went
    std::atomic<int> backlog_peers_{0};
    AdoptedPages adopted_;
    FileList *own_files_ = nullptr;
    std::atomic<uint64_t> kernel_copies_{0}, kernel_copy_bytes_{0};
    size_t files_offset_ = 0;
    WakeSocket wake_socket_;        // producers of other processes ring it
    std::atomic<int> sleepers_{0};  // threads in wait_for_traffic
    // An eventfd our own threads' wake() writes (other wires' watchers too).
    std::atomic<int> self_wake_fd_{-1};
};

}  // namespace ptl::shm
