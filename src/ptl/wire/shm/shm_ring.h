// A multi-producer, single-consumer message ring in POSIX shared memory: one per receiving
// process. Producers reserve runs of consecutive cells with one CAS (Vyukov's bounded queue
// generalised to runs), so a message's bytes are contiguous and the consumer hands them to
// the engine without copying. Cache-line aligned; a futex doorbell wakes a sleeping consumer.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ptl::shm {

constexpr uint64_t kMagic = 0x3450544c52494e47ull;  // "4PTLRING"
constexpr uint32_t kVersion = 1;
constexpr size_t kCacheLine = 64;

struct alignas(kCacheLine) RingControl {
    uint64_t magic;
    uint32_t version;
    int32_t owner_os_pid;
    uint32_t ncells;
    uint32_t cell_size;
    alignas(kCacheLine) std::atomic<uint64_t> enqueue_pos;
    alignas(kCacheLine) std::atomic<uint32_t> doorbell;
    std::atomic<uint32_t> sleeping;
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
    uint32_t reserved[3];
};
static_assert(sizeof(CellHead) == 32);

constexpr uint16_t kMessage = 1;
constexpr uint16_t kPadding = 2;

class Ring {
public:
    static size_t segment_size(uint32_t ncells, uint32_t cell_size);

    // Lays out a fresh ring in `base` (owner only).
    static void format(void *base, uint32_t ncells, uint32_t cell_size, int32_t owner_os_pid);

    // Attaches to a mapped ring; false if it is not a formatted ring of this version.
    bool attach(void *base, size_t mapped_size);

    RingControl *control() const { return ctl_; }
    uint32_t max_message_bytes() const { return (ctl_->ncells / 4) * ctl_->cell_size - sizeof(CellHead); }

    // Producer: copies header + payload into the ring. False if the ring is full right now.
    bool try_push(uint32_t src_nid, uint32_t src_pid, const void *header, size_t header_len,
                  const struct iovec *payload, int payload_count, size_t payload_len);

    // Consumer: the oldest published run, or nullptr. release() frees it.
    const CellHead *peek();
    void release(const CellHead *);

    bool empty_for_consumer();
    // Whether a message may be waiting, answered without the consumer's lock (a hint: the
    // consumer may be taking it right now).
    bool may_hold_message() const {
        const uint64_t t = tail_.load(std::memory_order_relaxed);
        return seq_[t & mask_].load(std::memory_order_acquire) == t + 1;
    }
    void ring_doorbell_if_sleeping();

private:
    enum class Reserve { Ok, Full, Retry };
    Reserve reserve_at(uint64_t pos, uint64_t cells);
    void publish_padding(uint64_t pos, uint64_t cells);
    char *cell(uint64_t pos) const { return data_ + (pos & mask_) * ctl_->cell_size; }

    RingControl *ctl_ = nullptr;
    std::atomic<uint64_t> *seq_ = nullptr;
    char *data_ = nullptr;
    uint64_t mask_ = 0;
    std::atomic<uint64_t> tail_{0};  // written by the consumer only; read by may_hold_message
};

}  // namespace ptl::shm
