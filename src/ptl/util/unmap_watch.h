// Tells a cache which of the address ranges it watches stopped holding the pages it knows:
// unmapped (munmap, brk, MAP_FIXED over them), emptied (madvise DONTNEED or REMOVE) or moved
// (mremap). A userfaultfd with those events and the ranges registered in write-protect mode
// with nothing ever protected, so no fault is ever trapped; only the events arrive. The kernel
// holds the unmapping call until the event is read, so a small thread reads them at once, and
// take() waits for a read in progress: whatever an unmapping call that has returned did is in
// the next take().
//
// A range can belong to one userfaultfd only, and two caches may watch the same pages (the
// verbs wire's registrations of the shm wire's adopted pages), so every UnmapWatch of a
// process shares one userfaultfd and its reader: each watch gets every event, and a page stays
// registered while any watch still wants it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
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

    // The ranges gone since the last call (any watch's, and others the process had watched).
    // False: more went than `capacity` ranges could hold, so anything watched may be gone.
    bool take(std::vector<Range> &out);

    struct Core;  // the process's userfaultfd, its reader and what is watched how often

private:
    UnmapWatch(std::shared_ptr<Core> core, size_t capacity);

    std::shared_ptr<Core> core_;
    // Under the core's lock; reserved: the reader never allocates (freeing could unmap).
    std::vector<Range> gone_;
    bool overflow_ = false;
    // How often this watch wants each page: counts_[k] from k to the next key (the core's lock).
    std::map<uintptr_t, int> counts_;
    friend struct Core;
};

}  // namespace ptl
