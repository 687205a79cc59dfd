// Memory another process on the host can load, store and run CPU atomics on (issue 32's direct
// path). The owner re-maps whole pages of its own memory onto a memory file at the same
// address with their contents kept ("adopts" them): the application's pointers stay valid, and
// peers map the same file through /proc/PID/fd. Only whole pages of private, writable,
// anonymous memory outside the brk heap (mmap'd buffers, large malloc chunks, SHMEM heaps) are
// adopted: other pages also hold objects the entry does not own (UCX's registration cache
// rounds regions out to pages), which another thread could write while they are copied. Adopted pages stay
// shared after their last user is released (giving them back would need the same copy again); adopting them
// again makes a new file. A child made by fork() gets private copies of them, as it would have had before:
// without that, parent and child would share heap pages and each other's allocations.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace ptl::shm {

struct SharedRange {
    int fd = -1;               // the memory file, open in the owner
    uint64_t ino = 0;          // its inode: the owner may reuse the number for another file
    uint64_t file_len = 0;     // its length (what a peer maps)
    uint64_t file_offset = 0;  // where the requested start lies in it
};

// The owner's side: adopted ranges, reused by later requests that fall inside one.
class AdoptedPages {
public:
    AdoptedPages() = default;
    AdoptedPages(const AdoptedPages &) = delete;
    AdoptedPages &operator=(const AdoptedPages &) = delete;
    ~AdoptedPages();

    // Makes [start, start + len) shared; false (memory unchanged) when it cannot be: not whole
    // pages, not private writable memory, overlapping an adopted range partly, or a system
    // call refused.
    bool adopt(void *start, size_t len, SharedRange *out);
    // An entry that adopt() answered with `fd` no longer needs it: the last one closes the file
    // (the pages stay shared; peers' mappings are theirs to drop).
    void release(int fd);
    // Whether [start, start + len) lies in adopted pages (which peers may access directly). A
    // range the application unmapped since may still answer yes until the next adopt(): the
    // caller must not take that for mapped memory.
    bool covers(const void *start, size_t len) const {
        const uintptr_t a = reinterpret_cast<uintptr_t>(start);
        for (const Range &r : ranges_)
            if (a >= r.base && a + len <= r.base + r.len) return true;
        return false;
    }

private:
    struct Range {
        uintptr_t base;
        size_t len;
        int fd;
        uint64_t ino;
        uint32_t users;  // adopt() answers not yet released
    };
    std::vector<Range> ranges_;
};

// A peer's side: the owner's memory files mapped into this process, by the owner's fd number
// (valid for the owner's life: it never closes them).
class PeerPages {
public:
    PeerPages() = default;
    PeerPages(const PeerPages &) = delete;
    PeerPages &operator=(const PeerPages &) = delete;
    ~PeerPages();

    // The mapping of the owner's `fd` (inode `ino`, length `len`), made on first use; null if
    // it cannot be.
    char *map(pid_t owner, int fd, uint64_t ino, uint64_t len);
    // Unmaps every file but the (fd, inode) pairs given: those of the owner's live exports.
    void retain(const std::vector<std::pair<int, uint64_t>> &live);

private:
    struct Mapping {
        char *base;
        uint64_t len;
        uint64_t ino;
    };
    std::map<int, Mapping> by_fd_;
};

}  // namespace ptl::shm
