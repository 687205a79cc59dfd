// Tells a registration cache which of the address ranges it watches stopped holding the pages
// it registered: unmapped (munmap, brk, MAP_FIXED over them), emptied (madvise DONTNEED or
// REMOVE) or moved (mremap). A userfaultfd with those events and the ranges registered in
// write-protect mode with nothing ever protected, so no fault is ever trapped; only the events
// arrive. The kernel holds the unmapping call until the event is read, so a small thread reads
// them at once, and take() waits for a read in progress: whatever an unmapping call that has
// returned did is in the next take().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ptl {

class UnmapWatch {
public:
    struct Range {
        uintptr_t start, end;
    };

    // Null with the reason where the kernel offers no such userfaultfd (or forbids it).
    static std::unique_ptr<UnmapWatch> open(std::string *why, size_t capacity = 4096);
    ~UnmapWatch();
    UnmapWatch(const UnmapWatch &) = delete;
    UnmapWatch &operator=(const UnmapWatch &) = delete;

    // Page-aligned. False where the range cannot be watched (file-backed memory other than
    // shmem, a hole, another userfaultfd's range): its pages must not be cached.
    bool watch(uintptr_t start, uintptr_t end);
    void unwatch(uintptr_t start, uintptr_t end);

    // The ranges gone since the last call. False: more went than `capacity` ranges could
    // hold, so anything watched may be gone.
    bool take(std::vector<Range> &out);

private:
    UnmapWatch(int uffd, int stop_fd, size_t capacity);
    void read_events();

    const int uffd_;
    const int stop_fd_;
    const size_t capacity_;
    std::atomic<uint64_t> reads_begun_{0}, reads_done_{0};
    std::mutex mu_;
    std::vector<Range> gone_;  // reserved: the reader never allocates (freeing could unmap)
    bool overflow_ = false;
    std::thread reader_;
};

}  // namespace ptl
