#include "shm_ring.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <new>

#include "wake_socket.h"

namespace ptl::shm {

namespace {
size_t align_up(size_t v, size_t a) {
    return (v + a - 1) / a * a;
}
size_t data_offset() {
    return align_up(sizeof(RingControl), kCacheLine);
}
}  // namespace

size_t Ring::segment_size(uint32_t ncells, uint32_t cell_size) {
    return data_offset() + size_t(ncells) * cell_size;
}

void Ring::format(void *base, uint32_t ncells, uint32_t cell_size, int32_t owner_os_pid,
                  uint64_t export_size) {
    auto *ctl = new (base) RingControl();
    ctl->magic = kMagic;
    ctl->version = kVersion;
    ctl->owner_os_pid = owner_os_pid;
    ctl->ncells = ncells;
    ctl->cell_size = cell_size;
    ctl->export_offset = align_up(segment_size(ncells, cell_size), 4096);
    ctl->export_size = export_size;
    ctl->enqueue_pos.store(0, std::memory_order_relaxed);
    ctl->dequeue_pos.store(0, std::memory_order_relaxed);
    ctl->doorbell.store(0, std::memory_order_relaxed);
    ctl->sleeping.store(0, std::memory_order_relaxed);
    char *data = static_cast<char *>(base) + data_offset();
    for (uint32_t i = 0; i < ncells; ++i)
        new (&reinterpret_cast<CellHead *>(data + size_t(i) * cell_size)->seq) std::atomic<uint64_t>(0);
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
    data_ = static_cast<char *>(base) + data_offset();
    mask_ = n - 1;
    ncells_ = n;
    cell_size_ = ctl->cell_size;
    cell_shift_ = (cell_size_ & (cell_size_ - 1)) == 0 ? unsigned(__builtin_ctzll(cell_size_)) : 0;
    free_until_ = 0;
    tail_.store(0, std::memory_order_relaxed);
    return true;
}

void Ring::publish_padding(uint64_t pos, uint64_t cells) {
    CellHead *pad = head(pos);
    pad->ncells = uint32_t(cells);
    pad->kind = kPadding;
    pad->header_len = 0;
    pad->payload_len = 0;
    pad->seq.store(pos + 1, std::memory_order_release);
}

bool Ring::try_push(uint32_t src_nid, uint32_t src_pid, const void *header, size_t header_len,
                    const struct iovec *payload, int payload_count, size_t payload_len) {
    uint64_t pos;
    CellHead *h = reserve(src_nid, src_pid, header_len, payload_len, &pos);
    if (!h) return false;
    char *p = reinterpret_cast<char *>(h + 1);
    std::memcpy(p, header, header_len);
    p += header_len;
    if (payload_len >= kStreamFrom) {
        stream(h, pos, p, payload, payload_count);
        return true;
    }
    for (int i = 0; i < payload_count; ++i) {
        if (payload[i].iov_len == 0) continue;  // its base may be null
        std::memcpy(p, payload[i].iov_base, payload[i].iov_len);
        p += payload[i].iov_len;
    }
    h->arrived.store(uint32_t(payload_len), std::memory_order_relaxed);
    publish(h, pos);
    return true;
}

void Ring::stream(CellHead *h, uint64_t pos, char *to, const struct iovec *payload, int payload_count) {
    // The head is read before the last part goes in: once all of it is, the consumer may free
    // the run and another producer write there.
    const size_t total = h->payload_len;
    size_t written = 0;
    bool published = false;
    for (int i = 0; i < payload_count && written < total; ++i) {
        const char *from = static_cast<const char *>(payload[i].iov_base);
        size_t left = std::min(payload[i].iov_len, total - written);
        while (left) {
            // Parts end at multiples of kStreamPart of the payload, whatever the pieces.
            const size_t n = std::min(left, kStreamPart - written % kStreamPart);
            std::memcpy(to + written, from, n);
            written += n;
            from += n;
            left -= n;
            if (written % kStreamPart != 0 && written != total) continue;
            if (!published) {
                h->arrived.store(uint32_t(written), std::memory_order_relaxed);
                publish(h, pos);
                published = true;
            } else {
                h->arrived.store(uint32_t(written), std::memory_order_release);
            }
        }
    }
    if (written == total) return;
    // Pieces short of what the caller counted: the run is complete as it is.
    h->arrived.store(uint32_t(total), std::memory_order_release);
    if (!published) publish(h, pos);
}

void Ring::ring_doorbell() {
    // One wake per sleep: the first producer to see the flag clears it, the rest skip the
    // system call (the consumer re-arms before it sleeps again).
    const uint32_t how = ctl_->sleeping.exchange(kAwake);
    if (how == kAwake) return;
    ctl_->doorbell.fetch_add(1, std::memory_order_release);
    if (how == kSleepsOnSocket)
        WakeSocket::send_to(ctl_->owner_os_pid);
    else
        syscall(SYS_futex, &ctl_->doorbell, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

const CellHead *Ring::peek_past_padding() {
    for (;;) {
        const uint64_t tail = tail_.load(std::memory_order_relaxed);
        const CellHead *h = head(tail);
        if (h->seq.load(std::memory_order_acquire) != tail + 1) return nullptr;
        const uint64_t cells = h->ncells;
        const uint64_t room = ncells_ - (tail & mask_);  // a run never wraps
        const bool fits = cells >= 1 && cells <= room;
        if (h->kind == kMessage && fits &&
            sizeof(CellHead) + h->header_len + uint64_t(h->payload_len) <= cells * cell_size_)
            return h;
        if (h->kind != kPadding || !fits) ++malformed_;
        // A bad run's length is a guess: at least its head cell goes, never past the end.
        free_run(fits ? cells : 1);
    }
}

}  // namespace ptl::shm
