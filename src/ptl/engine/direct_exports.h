// The direct path's shared table (DESIGN decision 9, issue 32): the list entries a process
// lets peers on its host reach without its CPU, and the marks with which those peers say they
// are inside one. The owner writes slots under its engine lock; peers only read them, and each
// writes its own mark. Laid out in the shm wire's export area, so every peer that maps our
// ring finds it.
//
// Protocol. A slot is live while its generation is odd. An initiator reads the generation,
// checks the slot's fields against its operation, stores the slot's number in its mark, and
// reads the generation again: unchanged, it may access the memory until it clears the mark.
// The owner revokes by making the generation even and then waiting until no mark names the
// slot (or the marking process is gone). Both sides' store-then-load are fenced, so either the
// initiator sees the revocation or the owner sees the mark: once a revocation returns, no
// access through that slot is in progress or can start. Where the owner says so
// (Header::light_marks), initiators fence with a compiler barrier and the owner fences them
// at each revocation with membarrier (util/asymmetric_fence.h): an operation costs no locked
// instruction for its mark.
#pragma once

#include <portals4.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../wire/shm/shared_pages.h"

namespace ptl::direct {

constexpr uint32_t kSlots = 512;
constexpr uint32_t kMarks = PTL_PID_MAX;  // one per process of the host, by its Portals pid
constexpr uint32_t kCounters = 256;
// A slot's fd when the entry's memory is not on a memory file (not whole private pages:
// malloc'd buffers, the brk heap, file mappings): peers move its data by cross-memory attach
// at the entry's address instead of through a mapping, and only where the message path would
// also take one kernel copy (a rendezvous); atomics and smaller transfers keep the message path.
constexpr int32_t kByCma = -1;

struct alignas(64) Header {
    std::atomic<uint64_t> version;  // moves at every export and revocation: peers' caches
    // The owner holds messages back (held_messages.h): a direct operation could overtake one.
    std::atomic<uint32_t> holding;
    // The owner's revocations fence the registered initiators (asymmetric_fence::heavy).
    std::atomic<uint32_t> light_marks;
    // A peer added to a counter since the owner last looked (its waiters and triggers). On a
    // line of its own: peers and owner write it at every counted operation, and the lines
    // above are read at every operation.
    alignas(64) std::atomic<uint32_t> counted;
};

// A CT's counts made by peers (the owner adds its own): success, failure.
struct alignas(64) Counter {
    std::atomic<uint64_t> counts[2];
};

struct alignas(128) Slot {
    std::atomic<uint64_t> gen;  // odd: live
    uint64_t match_bits;        // an ME's; 0 for an LE
    uint64_t start;             // the entry's start in the owner's address space
    uint64_t length;
    uint64_t file_offset;  // of `start` in the memory file
    uint64_t file_len;
    uint64_t file_ino;  // the memory file's inode: its fd number may be reused
    int32_t fd;         // the memory file, in the owner (shared_pages.h); -1: none (kByCma)
    uint32_t options;
    uint32_t uid;
    uint16_t pt_index;
    uint8_t ni_index;
    uint8_t is_me;
    int32_t counter;       // the entry's CT's counter, or -1: no counting event
    uint32_t count_bytes;  // PTL_LE_EVENT_CT_BYTES: the counter takes bytes, not operations
    // Peers on other hosts may apply 8-byte atomics here with an RDMA device (remote_exports.h):
    // initiators on this host leave those to the owner.
    uint32_t device_atomics;
};
static_assert(sizeof(Slot) == 128);

struct alignas(64) Mark {
    std::atomic<uint32_t> inside;  // slot number + 1 while the marking process accesses it
    std::atomic<int32_t> os_pid;   // of the marking process, for the owner's liveness check
};

struct Area {
    Header header;
    Slot slots[kSlots];
    Mark marks[kMarks];
    Counter counters[kCounters];
    shm::FileList files;  // the owner's adopted files, which its shm wire lists
};

// What an initiator learned of a live slot: copied once, valid while the slot's generation
// is still `gen` (the owner rewrites a slot only after revoking it).
struct Target {
    int slot = -1;  // -1: no entry takes the key
    uint64_t gen = 0;
    char *mapped = nullptr;  // the entry's start in our mapping of its file (filled on first use)
    uint64_t start = 0;      // the entry's start in the owner's address space
    bool by_cma = false;     // no file: cross-memory attach at `start` (kByCma)
    uint64_t length = 0;
    uint32_t options = 0;
    uint32_t uid = 0;
    int32_t counter = -1;
    bool count_bytes = false;
    bool device_atomics = false;
};

// Which entry an operation names: (NI, portal, ME or LE) and an ME's match bits. Also the
// key of the RDMA exports (remote_exports.h).
struct EntryKey {
    uint32_t where;
    uint64_t bits;
    bool operator==(const EntryKey &) const = default;
};
struct EntryKeyHash {
    size_t operator()(const EntryKey &k) const {
        return (k.bits ^ uint64_t(k.where) << 40) * 0x9e3779b97f4a7c15ull >> 16;
    }
};
inline EntryKey entry_key(uint32_t ni, uint32_t pt, uint64_t bits, bool is_me) {
    return {ni << 24 | uint32_t(is_me) << 16 | (pt & 0xffff), is_me ? bits : 0};
}

// An initiator's view of one peer's table: what takes (ni, pt, bits), cached until the
// table's version moves. The key of the last operation is checked first: one-sided traffic
// mostly goes to one region.
class PeerTable {
public:
    PeerTable(Area *a, pid_t owner) : area_(a), owner_(owner) {}
    Area *area() const { return area_; }
    pid_t owner() const { return owner_; }
    // Whether the owner's liveness is due for a look (every 10 ms of the caller's clock): a
    // dead owner's memory still takes stores, and its operations must fail instead.
    bool liveness_due(uint64_t now_ns) {
        if (now_ns < next_liveness_ns_) return false;
        next_liveness_ns_ = now_ns + 10'000'000;
        return true;
    }

    // The owner's memory refused our cross-memory attach (Yama, another uid): its kByCma
    // slots take the message path from then on.
    bool cma_refused() const { return cma_refused_; }
    void refuse_cma() { cma_refused_ = true; }

    // Changes whenever an entry is exported or revoked.
    uint64_t version() const { return area_->header.version.load(std::memory_order_acquire); }
    Target &find(uint8_t ni, uint16_t pt, uint64_t bits, bool is_me) {
        const uint64_t v = area_->header.version.load(std::memory_order_acquire);
        const EntryKey key = entry_key(ni, pt, bits, is_me);
        if (v == version_ && last_key_ == key && last_) [[likely]]
            return *last_;
        return find_again(v, key, ni, pt, is_me);
    }

    // Whether the owner's list of files changed since the last call (then live_files() says
    // which of our mappings to keep).
    bool take_changed() { return std::exchange(changed_, false); }
    // The files the owner keeps, and those of live slots (the list holds kFiles at most).
    std::vector<std::pair<int, uint64_t>> live_files() const {
        std::vector<std::pair<int, uint64_t>> live;
        for (const shm::ListedFile &f : area_->files.files)
            if (const int fd = f.fd.load(std::memory_order_acquire); fd >= 0)
                live.emplace_back(fd, f.ino.load(std::memory_order_relaxed));
        for (const Slot &s : area_->slots)
            if ((s.gen.load(std::memory_order_acquire) & 1) && s.fd != kByCma)
                live.emplace_back(s.fd, s.file_ino);
        return live;
    }

private:
    using Key = EntryKey;
    [[gnu::noinline]] Target &find_again(uint64_t v, const Key &key, uint8_t ni, uint16_t pt, bool is_me) {
        if (v != version_) {
            cache_.clear();
            version_ = v;
            const uint64_t files = area_->files.version.load(std::memory_order_acquire);
            if (files != files_version_) changed_ = true;
            files_version_ = files;
        }
        auto it = cache_.find(key);
        if (it == cache_.end()) it = cache_.emplace(key, scan(key, ni, pt, is_me)).first;
        last_key_ = key;
        return *(last_ = &it->second);
    }
    Target scan(const Key &key, uint8_t ni, uint16_t pt, bool is_me) const {
        Target t;
        for (uint32_t i = 0; i < kSlots; ++i) {
            const Slot &s = area_->slots[i];
            const uint64_t gen = s.gen.load(std::memory_order_acquire);
            if (!(gen & 1) || s.ni_index != ni || s.pt_index != pt || s.is_me != is_me ||
                s.match_bits != key.bits)
                continue;
            t.slot = int(i);
            t.gen = gen;
            t.length = s.length;
            t.options = s.options;
            t.uid = s.uid;
            t.counter = s.counter >= 0 && uint32_t(s.counter) < kCounters ? s.counter : -1;
            t.count_bytes = s.count_bytes;
            t.device_atomics = s.device_atomics != 0;
            t.start = s.start;
            t.by_cma = s.fd == kByCma;
            // Read after the fields: unchanged, they are the live slot's (a seqlock's check).
            std::atomic_thread_fence(std::memory_order_acquire);
            if (s.gen.load(std::memory_order_relaxed) != gen) return Target{};
            break;
        }
        return t;
    }
    Area *area_;
    pid_t owner_;
    uint64_t next_liveness_ns_ = 0;
    uint64_t version_ = ~uint64_t(0);
    uint64_t files_version_ = ~uint64_t(0);
    bool changed_ = false;
    bool cma_refused_ = false;
    std::unordered_map<Key, Target, EntryKeyHash> cache_;  // node-based: last_ stays valid
    Key last_key_{};
    Target *last_ = nullptr;
};

}  // namespace ptl::direct
