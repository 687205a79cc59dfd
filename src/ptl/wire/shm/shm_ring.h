// A multi-producer, single-consumer message ring in POSIX shared memory: one per receiving
// process. Producers reserve runs of consecutive cells with one CAS on the enqueue position,
// so a message's bytes are contiguous and the consumer hands them to the engine without
// copying. A run is published by the sequence number in its first cell's head, which the
// consumer reads anyway; the consumer frees runs by moving the dequeue position, which a
// producer reads only when the room it last saw is used up. So a message moves its own cache
// lines and nothing else: a sequence array beside the cells (Vyukov's queue) cost a producer a
// read miss and a write miss on a line the consumer wrote, per message (perf: a sixth of an
// am_bw sender's time). Cache-line aligned; a futex doorbell wakes a sleeping consumer.
//
// A large message is streamed: published once its first part is copied in, the rest
// following in parts whose arrival the run's head counts (CellHead::arrived). The consumer
// copies each part out as it lands, so the two copies overlap instead of following each other
// (as UCX's sm overlaps them by sending 8 KiB fragments); it frees the run only once all of it
// arrived.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "../../util/copy_small.h"

namespace ptl::shm {

constexpr uint64_t kMagic = 0x3450544c52494e47ull;  // "4PTLRING"
// 4: the export table header's `counted` on its own line; 5: kSleepsOnSocket; 6: streaming;
// 7: producers look at `sleeping` when they reserve (a consumer of 6 would sleep through them)
constexpr uint32_t kVersion = 7;
constexpr size_t kCacheLine = 64;

// RingControl::sleeping: how a producer wakes the consumer.
constexpr uint32_t kAwake = 0;
constexpr uint32_t kSleepsOnFutex = 1;   // FUTEX_WAKE on the doorbell
constexpr uint32_t kSleepsOnSocket = 2;  // a byte to its WakeSocket (it polls descriptors too)

struct alignas(kCacheLine) RingControl {
    uint64_t magic;
    uint32_t version;
    int32_t owner_os_pid;
    uint32_t ncells;
    uint32_t cell_size;
    // An area after the cells that the owner's engine lays out (its exports, issue 32).
    uint64_t export_offset;
    uint64_t export_size;
    alignas(kCacheLine) std::atomic<uint64_t> enqueue_pos;
    alignas(kCacheLine) std::atomic<uint64_t> dequeue_pos;  // cells before it are free again
    alignas(kCacheLine) std::atomic<uint32_t> doorbell;
    std::atomic<uint32_t> sleeping;  // kAwake, or how the consumer sleeps
    alignas(kCacheLine) std::atomic<uint32_t> ready;
};

// What a message run starts with.
struct CellHead {
    uint32_t ncells;  // cells the run covers, including this one
    uint16_t kind;    // kMessage or kPadding
    uint16_t header_len;
    uint32_t payload_len;
    uint32_t src_nid;
    uint32_t src_pid;
    // Payload bytes written so far (streaming, above): payload_len once the run is complete.
    std::atomic<uint32_t> arrived;
    // Position + 1 once the run starting at this cell's position is written. Every cell's
    // is zeroed when its run is freed (a cell inside a run holds message bytes here), so a
    // cell the consumer reaches before its run is written reads 0.
    std::atomic<uint64_t> seq;
};
static_assert(sizeof(CellHead) == 32);
static_assert(offsetof(CellHead, seq) == 24);

constexpr uint16_t kMessage = 1;
constexpr uint16_t kPadding = 2;

// Payloads from this size on are streamed, in parts of kStreamPart bytes (measured, issue 58:
// 16-64 KiB one-way latency through the ring; smaller parts cost a cache line transfer each
// for the count, larger ones let the consumer start later).
constexpr size_t kStreamFrom = 16384;
constexpr size_t kStreamPart = 8192;

class Ring {
public:
    static size_t segment_size(uint32_t ncells, uint32_t cell_size);

    // Lays out a fresh ring in `base` (owner only); `export_size` bytes after the cells are
    // left for the owner's exports.
    static void format(void *base, uint32_t ncells, uint32_t cell_size, int32_t owner_os_pid,
                       uint64_t export_size = 0);

    // Attaches to a mapped ring; false if it is not a formatted ring of this version.
    bool attach(void *base, size_t mapped_size);

    RingControl *control() const { return ctl_; }
    uint32_t max_message_bytes() const { return uint32_t((ncells_ / 4) * cell_size_ - sizeof(CellHead)); }

    // Producer: copies header + payload into the ring. False if the ring is full right now.
    bool try_push(uint32_t src_nid, uint32_t src_pid, const void *header, size_t header_len,
                  const struct iovec *payload, int payload_count, size_t payload_len);
    // The same for a payload in one piece and a header written in place by `fill(void *at)`:
    // nothing built beside the ring and copied in (the engine's common put).
    template <class Fill>
    [[gnu::always_inline]] bool try_push_filled(uint32_t src_nid, uint32_t src_pid, size_t header_len,
                                                const void *payload, size_t payload_len, Fill &&fill) {
        uint64_t pos;
        CellHead *h = reserve(src_nid, src_pid, header_len, payload_len, &pos);
        if (!h) return false;
        char *p = reinterpret_cast<char *>(h + 1);
        fill(static_cast<void *>(p));
        if (payload_len >= kStreamFrom) [[unlikely]] {
            const struct iovec piece { const_cast<void *>(payload), payload_len };
            stream(h, pos, p + header_len, &piece, 1);
            return true;
        }
        copy_small(p + header_len, payload, payload_len);
        h->arrived.store(uint32_t(payload_len), std::memory_order_relaxed);
        publish(h, pos);
        return true;
    }

    // Consumer: the oldest published message, or nullptr. release() frees it. The head is
    // checked first, since every local producer can write it: a run that cannot be a
    // producer's (an unknown kind, a run past the ring's end, lengths beyond the run) is
    // skipped and counted, never handed on.
    const CellHead *peek() {
        const uint64_t tail = tail_.load(std::memory_order_relaxed);
        const CellHead *h = head(tail);
        if (h->seq.load(std::memory_order_acquire) != tail + 1) return nullptr;
        const uint64_t cells = h->ncells;
        if (h->kind == kMessage && cells >= 1 && cells <= ncells_ - (tail & mask_) &&
            sizeof(CellHead) + h->header_len + uint64_t(h->payload_len) <= cells * cell_size_) [[likely]]
            return h;
        return peek_past_padding();
    }
    void release(const CellHead *h) { free_run(h->ncells); }
    // How much of a peeked message's payload is in (acquire: those bytes may be read).
    static uint32_t arrived(const CellHead *h) { return h->arrived.load(std::memory_order_acquire); }
    // Runs skipped as malformed since the last call.
    uint64_t take_malformed() { return std::exchange(malformed_, 0); }

    // Consumer, now and then (the engine's liveness checks, not every poll: it reads the
    // enqueue position, which every producer writes): a run reserved at the head of the queue
    // and left unwritten since the last call, whose producer (the sender its head names) is
    // `gone`, is skipped: a producer killed between its reservation and its publication held
    // every later message back for good. Only a run whose extent its head and the ring agree
    // on (the next published run starts where it ends, or nothing was reserved after it) is
    // skipped (counted as malformed); one a producer died before describing stays. Returns
    // the cells skipped.
    template <class Gone>
    uint64_t reclaim_abandoned(Gone &&gone) {
        const uint64_t tail = tail_.load(std::memory_order_relaxed);
        const uint64_t end = ctl_->enqueue_pos.load(std::memory_order_acquire);
        const CellHead *h = head(tail);
        if (end == tail || h->seq.load(std::memory_order_acquire) == tail + 1) {
            stuck_at_ = kNotStuck;
            return 0;
        }
        if (stuck_at_ != tail) {  // first seen: its producer may be writing it right now
            stuck_at_ = tail;
            return 0;
        }
        const uint64_t cells = h->ncells, next = tail + cells;
        if (cells == 0 || cells > ncells_ / 4 || (tail & mask_) + cells > ncells_ || next > end) return 0;
        if (next != end && head(next)->seq.load(std::memory_order_acquire) != next + 1) return 0;
        if (!gone(h->src_nid, h->src_pid)) return 0;
        free_run(cells);
        ++malformed_;
        stuck_at_ = kNotStuck;
        return cells;
    }

    // Consumer, after raising `sleeping` and a sequentially consistent fence: whether no
    // producer holds a run it has not taken (published or still being written). A producer
    // that reserves after this read sees the flag and wakes it when it publishes.
    bool nothing_reserved() const {
        return ctl_->enqueue_pos.load(std::memory_order_seq_cst) == tail_.load(std::memory_order_relaxed);
    }
    // Whether a message may be waiting, answered without the consumer's lock (a hint: the
    // consumer may be taking it right now).
    bool may_hold_message() const {
        const uint64_t t = tail_.load(std::memory_order_relaxed);
        return head(t)->seq.load(std::memory_order_acquire) == t + 1;
    }
    void ring_doorbell_if_sleeping() {
        if (ctl_->sleeping.load(std::memory_order_relaxed)) [[unlikely]]
            ring_doorbell();
    }
    // Producer: whether the consumer has processed and freed everything this producer pushed
    // (it frees in order, after handling each message).
    bool consumed_all_pushed() const {
        return ctl_->dequeue_pos.load(std::memory_order_acquire) >= pushed_until_;
    }

    // Producer: whether a message this large would find room now (a hint: other producers
    // push too). Reads the consumer's position only when the room last seen is used up.
    bool has_room(size_t header_len, size_t payload_len) {
        const uint64_t cells = cells_for(sizeof(CellHead) + header_len + payload_len);
        if (cells > ncells_ / 4) return false;
        const uint64_t pos = ctl_->enqueue_pos.load(std::memory_order_relaxed);
        const uint64_t room = ncells_ - (pos & mask_);
        const uint64_t want = room < cells ? room + cells : cells;
        if (pos + want > free_until_)
            free_until_ = ctl_->dequeue_pos.load(std::memory_order_acquire) + ncells_;
        return pos + want <= free_until_;
    }

private:
    uint64_t cells_for(uint64_t bytes) const {
        return cell_shift_ ? (bytes + cell_size_ - 1) >> cell_shift_ : (bytes + cell_size_ - 1) / cell_size_;
    }
    // A run for the message, its head filled but for `seq`, at *pos_out; null if the ring has
    // no room for it now. publish() hands it to the consumer. Inline: once per message sent.
    CellHead *reserve(uint32_t src_nid, uint32_t src_pid, size_t header_len, size_t payload_len,
                      uint64_t *pos_out) {
        const uint64_t cells = cells_for(sizeof(CellHead) + header_len + payload_len);
        if (cells > ncells_ / 4) [[unlikely]]
            return nullptr;

        uint64_t pos = ctl_->enqueue_pos.load(std::memory_order_relaxed);
        uint64_t room;
        for (;;) {
            room = ncells_ - (pos & mask_);
            // A run never wraps: when it would, a padding run fills the ring's end first.
            const uint64_t want = room < cells ? room + cells : cells;
            if (pos + want > free_until_) {
                // The consumer frees in order: everything before its dequeue position is free.
                // Acquire: it was done reading those cells.
                free_until_ = ctl_->dequeue_pos.load(std::memory_order_acquire) + ncells_;
                if (pos + want > free_until_) return nullptr;
            }
            // Sequentially consistent, as the look at `sleeping` after it: either a consumer
            // going to sleep sees this run reserved (nothing_reserved), or we see it asleep.
            if (ctl_->enqueue_pos.compare_exchange_weak(pos, pos + want, std::memory_order_seq_cst,
                                                        std::memory_order_relaxed))
                break;
        }
        wake_on_publish_ = ctl_->sleeping.load(std::memory_order_seq_cst) != kAwake;
        if (room < cells) [[unlikely]] {
            publish_padding(pos, room);
            pos += room;
        }
        CellHead *h = head(pos);
        h->ncells = uint32_t(cells);
        h->kind = kMessage;
        h->header_len = uint16_t(header_len);
        h->payload_len = uint32_t(payload_len);
        h->src_nid = src_nid;
        h->src_pid = src_pid;
        *pos_out = pos;
        return h;
    }
    // No fence here: the one that pairs with a sleeping consumer's is the reservation's CAS,
    // made before the payload was written. A fence after it waited for every payload line to
    // leave the store buffer (a ninth of a 2 KiB tag sender's time, perf, issue 58).
    void publish(CellHead *h, uint64_t pos) {
        pushed_until_ = pos + h->ncells;  // read before the run is the consumer's
        h->seq.store(pos + 1, std::memory_order_release);
        if (wake_on_publish_) [[unlikely]]
            ring_doorbell();
    }
    void ring_doorbell();
    // Copies `payload` into the run at `to` in parts, publishing it after the first.
    void stream(CellHead *h, uint64_t pos, char *to, const struct iovec *payload, int payload_count);
    void publish_padding(uint64_t pos, uint64_t cells);
    // peek's rare case: padding or a malformed run first.
    const CellHead *peek_past_padding();
    void free_run(uint64_t cells) {
        const uint64_t tail = tail_.load(std::memory_order_relaxed);
        for (uint64_t i = 0; i < cells; ++i) head(tail + i)->seq.store(0, std::memory_order_relaxed);
        tail_.store(tail + cells, std::memory_order_relaxed);
        ctl_->dequeue_pos.store(tail + cells, std::memory_order_release);
    }
    char *cell(uint64_t pos) const { return data_ + (pos & mask_) * cell_size_; }
    CellHead *head(uint64_t pos) const { return reinterpret_cast<CellHead *>(cell(pos)); }

    RingControl *ctl_ = nullptr;
    char *data_ = nullptr;
    uint64_t mask_ = 0;
    uint64_t ncells_ = 0, cell_size_ = 0;  // as in the control block, which peers could rewrite
    unsigned cell_shift_ = 0;              // log2(cell_size_) when a power of two (else 0: divide)
    // Producer: cells before this position are known free (a dequeue position seen + ncells).
    // Read by the pushes of one process, under its engine lock.
    uint64_t free_until_ = 0;
    uint64_t pushed_until_ = 0;      // producer: the end of the last run it pushed
    bool wake_on_publish_ = false;   // producer: the consumer slept when the run was reserved
    std::atomic<uint64_t> tail_{0};  // written by the consumer only; read by may_hold_message
    uint64_t malformed_ = 0;         // consumer
    static constexpr uint64_t kNotStuck = ~uint64_t(0);
    uint64_t stuck_at_ = kNotStuck;  // consumer: where reclaim_abandoned last found an unwritten run
};

}  // namespace ptl::shm
