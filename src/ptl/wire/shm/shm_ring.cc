#include "shm_ring.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <new>

namespace ptl::shm {

namespace {
size_t align_up(size_t v, size_t a) {
    return (v + a - 1) / a * a;
}
size_t seq_offset() {
    return align_up(sizeof(RingControl), kCacheLine);
}
size_t data_offset(uint32_t ncells) {
    return align_up(seq_offset() + ncells * sizeof(std::atomic<uint64_t>), kCacheLine);
}
}  // namespace

size_t Ring::segment_size(uint32_t ncells, uint32_t cell_size) {
    return data_offset(ncells) + size_t(ncells) * cell_size;
}

void Ring::format(void *base, uint32_t ncells, uint32_t cell_size, int32_t owner_os_pid) {
    auto *ctl = new (base) RingControl();
    ctl->magic = kMagic;
    ctl->version = kVersion;
    ctl->owner_os_pid = owner_os_pid;
    ctl->ncells = ncells;
    ctl->cell_size = cell_size;
    ctl->enqueue_pos.store(0, std::memory_order_relaxed);
    ctl->doorbell.store(0, std::memory_order_relaxed);
    ctl->sleeping.store(0, std::memory_order_relaxed);
    auto *seq = reinterpret_cast<std::atomic<uint64_t> *>(static_cast<char *>(base) + seq_offset());
    for (uint32_t i = 0; i < ncells; ++i) new (&seq[i]) std::atomic<uint64_t>(i);
    ctl->ready.store(1, std::memory_order_release);
}

bool Ring::attach(void *base, size_t mapped_size) {
    auto *ctl = static_cast<RingControl *>(base);
    if (mapped_size < sizeof(RingControl)) return false;
    if (ctl->ready.load(std::memory_order_acquire) != 1) return false;
    if (ctl->magic != kMagic || ctl->version != kVersion) return false;
    const uint32_t n = ctl->ncells;
    if (n == 0 || (n & (n - 1)) || ctl->cell_size < 2 * sizeof(CellHead) ||
        segment_size(n, ctl->cell_size) > mapped_size)
        return false;
    ctl_ = ctl;
    seq_ = reinterpret_cast<std::atomic<uint64_t> *>(static_cast<char *>(base) + seq_offset());
    data_ = static_cast<char *>(base) + data_offset(n);
    mask_ = n - 1;
    tail_.store(0, std::memory_order_relaxed);
    return true;
}

Ring::Reserve Ring::reserve_at(uint64_t pos, uint64_t cells) {
    // The consumer frees cells in order, so the last cell of the run being free for this lap
    // means the whole run is.
    const uint64_t last = pos + cells - 1;
    const uint64_t s = seq_[last & mask_].load(std::memory_order_acquire);
    const int64_t diff = int64_t(s) - int64_t(last);
    if (diff < 0) return Reserve::Full;
    if (diff > 0) return Reserve::Retry;
    return ctl_->enqueue_pos.compare_exchange_weak(pos, pos + cells, std::memory_order_relaxed)
               ? Reserve::Ok
               : Reserve::Retry;
}

void Ring::publish_padding(uint64_t pos, uint64_t cells) {
    auto *pad = reinterpret_cast<CellHead *>(cell(pos));
    std::memset(pad, 0, sizeof *pad);
    pad->ncells = uint32_t(cells);
    pad->kind = kPadding;
    for (uint64_t i = 1; i < cells; ++i)
        seq_[(pos + i) & mask_].store(pos + i + 1, std::memory_order_relaxed);
    seq_[pos & mask_].store(pos + 1, std::memory_order_release);
}

bool Ring::try_push(uint32_t src_nid, uint32_t src_pid, const void *header, size_t header_len,
                    const struct iovec *payload, int payload_count, size_t payload_len) {
    const uint32_t csz = ctl_->cell_size;
    const uint64_t bytes = sizeof(CellHead) + header_len + payload_len;
    const uint64_t cells = (bytes + csz - 1) / csz;
    if (cells > ctl_->ncells / 4) return false;

    uint64_t pos;
    uint64_t room;
    for (;;) {
        pos = ctl_->enqueue_pos.load(std::memory_order_relaxed);
        room = ctl_->ncells - (pos & mask_);
        // A run never wraps: when it would, a padding run fills the ring's end first.
        const uint64_t want = room < cells ? room + cells : cells;
        const Reserve r = reserve_at(pos, want);
        if (r == Reserve::Full) return false;
        if (r == Reserve::Ok) break;
    }
    if (room < cells) {
        publish_padding(pos, room);
        pos += room;
    }
    auto *h = reinterpret_cast<CellHead *>(cell(pos));
    h->ncells = uint32_t(cells);
    h->kind = kMessage;
    h->header_len = uint16_t(header_len);
    h->payload_len = uint32_t(payload_len);
    h->src_nid = src_nid;
    h->src_pid = src_pid;
    char *p = reinterpret_cast<char *>(h + 1);
    std::memcpy(p, header, header_len);
    p += header_len;
    for (int i = 0; i < payload_count; ++i) {
        std::memcpy(p, payload[i].iov_base, payload[i].iov_len);
        p += payload[i].iov_len;
    }
    for (uint64_t i = 1; i < cells; ++i)
        seq_[(pos + i) & mask_].store(pos + i + 1, std::memory_order_relaxed);
    seq_[pos & mask_].store(pos + 1, std::memory_order_release);
    // Pairs with the consumer's fence between setting `sleeping` and re-checking the ring.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    ring_doorbell_if_sleeping();
    return true;
}

void Ring::ring_doorbell_if_sleeping() {
    // One wake per sleep: the first producer to see the flag clears it, the rest skip the
    // system call (the consumer re-arms before it sleeps again).
    if (ctl_->sleeping.load(std::memory_order_relaxed) && ctl_->sleeping.exchange(0)) {
        ctl_->doorbell.fetch_add(1, std::memory_order_release);
        syscall(SYS_futex, &ctl_->doorbell, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
    }
}

const CellHead *Ring::peek() {
    for (;;) {
        const uint64_t tail = tail_.load(std::memory_order_relaxed);
        const uint64_t s = seq_[tail & mask_].load(std::memory_order_acquire);
        if (s != tail + 1) return nullptr;
        auto *h = reinterpret_cast<const CellHead *>(cell(tail));
        if (h->kind == kPadding) {
            release(h);
            continue;
        }
        return h;
    }
}

void Ring::release(const CellHead *h) {
    const uint64_t n = h->ncells;
    const uint64_t tail = tail_.load(std::memory_order_relaxed);
    for (uint64_t i = 0; i < n; ++i)
        seq_[(tail + i) & mask_].store(tail + i + ctl_->ncells, std::memory_order_release);
    tail_.store(tail + n, std::memory_order_relaxed);
}

bool Ring::empty_for_consumer() {
    return !may_hold_message();
}

}  // namespace ptl::shm
