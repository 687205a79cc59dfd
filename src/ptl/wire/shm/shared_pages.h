// Memory another process on the host can load, store and run CPU atomics on (issue 32's direct
// path). The owner re-maps whole pages of its own memory onto a memory file at the same
// address with their contents kept ("adopts" them): the application's pointers stay valid, and
// peers map the same file through /proc/PID/fd. Only whole pages of private, writable,
// anonymous memory outside the brk heap (mmap'd buffers, large malloc chunks, SHMEM heaps) are
// adopted: other pages also hold objects the entry does not own (UCX's registration cache
// rounds regions out to pages), which another thread could write while they are copied.
//
// An adopted range stays adopted, its file open, after its last user is released, until the
// application unmaps (or empties, or moves) it: the UnmapWatch says when. A buffer that an MPI
// library registers for every message it sends from it is then copied once, not per message
// (issue 58), and peers keep their mapping of it. Without a watch (no userfaultfd here) a
// released range's file goes with its last user, as an application could unmap the pages
// unseen and the file would hold their memory. A child made by fork() gets private copies of
// the shared pages, as it would have had before: without that, parent and child would share
// heap pages and each other's allocations.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "../../util/unmap_watch.h"

namespace ptl::shm {

struct SharedRange {
    int fd = -1;               // the memory file, open in the owner
    uint64_t ino = 0;          // its inode: the owner may reuse the number for another file
    uint64_t file_len = 0;     // its length (what a peer maps)
    uint64_t file_offset = 0;  // where the requested start lies in it
};

// The adopted files an owner lists for its peers, in its shared segment: a peer may keep a
// file mapped while it is listed, and reach the owner's memory through it where a bulk
// transfer's key names the entry (ShmWire::export_memory). Written by the owner only.
constexpr uint32_t kListedFiles = 256;
struct ListedFile {
    std::atomic<uint32_t> seq;  // odd while the owner rewrites the place (a seqlock)
    std::atomic<int32_t> fd;    // -1: a free place
    std::atomic<uint64_t> ino, base, len;
};
struct FileList {
    std::atomic<uint64_t> version;  // moves with every change (peers drop mappings of the rest)
    ListedFile files[kListedFiles];
};

// What adoption cost this process (PtlXWireUsage, UCX_PORTALS_STATS).
struct AdoptionStats {
    uint64_t adoptions = 0;     // ranges copied into a memory file
    uint64_t bytes_copied = 0;  // by those copies
    uint64_t reused = 0;        // adopt() answered from a range adopted before
};

// The owner's side: adopted ranges, reused by later requests that fall inside one.
class AdoptedPages {
public:
    AdoptedPages();
    AdoptedPages(const AdoptedPages &) = delete;
    AdoptedPages &operator=(const AdoptedPages &) = delete;
    ~AdoptedPages();

    // Makes [start, start + len) shared; false (memory unchanged) when it cannot be: not whole
    // pages, not private writable memory, overlapping a range in use partly, or a system call
    // refused. A request over ranges adopted before that no entry uses any more adopts their
    // union anew.
    bool adopt(void *start, size_t len, SharedRange *out);
    // An entry that adopt() answered with `fd` no longer needs it (the pages stay shared; the
    // file stays open while they stay mapped and watched).
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
    // The files of the adopted ranges (fd, inode), which peers may keep mapped; `version()`
    // moves whenever that list changes.
    uint64_t version() const { return version_; }
    template <class F>
    void for_each_file(F &&f) const {
        for (const Range &r : ranges_) f(r.fd, r.ino);
    }
    const AdoptionStats &stats() const { return stats_; }
    // Writes the list of files into `to` if it changed since the last call.
    void publish(FileList *to);
    // Whether [start, start + len) lies in a range adopted now (unmapped ones forgotten first)
    // that is listed: its place in the list and its inode.
    bool listed(const void *start, size_t len, uint32_t *index, uint64_t *ino);
    // PTL_DEBUG: one line on stderr per range adopted, and why ranges are not kept.
    void set_debug(bool on) { debug_ = on; }

private:
    struct Range {
        uintptr_t base;
        size_t len;
        int fd;
        uint64_t ino;
        uint32_t users;  // adopt() answers not yet released
        bool watched;    // the UnmapWatch reports its end (else it goes with its last user)
        bool gone;       // unmapped since: no new user, closed with its last one
    };
    void drop(size_t i);
    // Marks the ranges the application unmapped since gone; those in `own` (our own remap of
    // the range being adopted) are not the application's.
    void take_unmapped(uintptr_t own_lo = 0, uintptr_t own_hi = 0);
    std::vector<Range> ranges_;
    std::unique_ptr<UnmapWatch> watch_;  // opened at the first adoption
    bool watch_tried_ = false;
    std::vector<UnmapWatch::Range> unmapped_;
    uint64_t version_ = 0;
    uint64_t published_ = 0;  // the version last written to a FileList
    uint32_t published_count_ = 0;
    AdoptionStats stats_;
    bool debug_ = false;
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
    // Unmaps every file but the (fd, inode) pairs given: those the owner lists.
    void retain(const std::vector<std::pair<int, uint64_t>> &live);
    uint64_t maps_made() const { return maps_made_; }  // mmap calls (issue 58: not per message)

private:
    struct Mapping {
        char *base;
        uint64_t len;
        uint64_t ino;
    };
    std::map<int, Mapping> by_fd_;
    uint64_t maps_made_ = 0;
};

}  // namespace ptl::shm
