#include "shared_pages.h"

#include "../../util/mappings.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

namespace ptl::shm {

namespace {

size_t page_size() {
    static const size_t p = size_t(sysconf(_SC_PAGESIZE));
    return p;
}

using Vma = Mapping;

// Anonymous memory, whose untouched pages read as zeros (and need no copy). Not the brk heap:
// UCX's registration cache rounds a region out to whole pages, which there hold other
// allocations' chunks that another thread may write while the pages are copied.
bool anonymous(const Vma &v) {
    return v.inode == 0 && v.name.empty();
}

constexpr char kFileName[] = "portals-direct";

// A memory file of ours still mapped where a range was adopted and later released.
bool ours(const Vma &v) {
    return std::strcmp(v.perms, "rw-s") == 0 && v.name.rfind(std::string("/memfd:") + kFileName, 0) == 0;
}

// Whether every byte of [base, end) lies in private writable anonymous mappings whose pages
// may move to a shared file (or in a file of ours: adopted before, released since). Stacks,
// the heap, files' private copies (.data) and huge pages stay as they are: their pages hold
// other objects too.
bool private_writable(uintptr_t base, uintptr_t end, std::vector<Vma> *out) {
    if (!read_mappings(base, end, out)) return false;
    for (const Vma &v : *out)
        if (!ours(v) && (std::strcmp(v.perms, "rw-p") != 0 || !anonymous(v))) return false;
    return true;
}

// Whether [base, base + len) is still our mapping of the memory file with inode `ino`: the
// application may have unmapped adopted pages (freed the memory) and mapped new ones there.
bool still_adopted(uintptr_t base, size_t len, uint64_t ino) {
    std::vector<Vma> vmas;
    if (!read_mappings(base, base + len, &vmas)) return false;
    for (const Vma &v : vmas)
        if (v.inode != ino || std::strcmp(v.perms, "rw-s") != 0 || v.offset != v.lo - base) return false;
    return true;
}

// Copies the pages of [lo, hi) that hold data into `fd` at their offset from `base`: every
// page of a file's private copy, only present or swapped pages of anonymous memory (a heap
// of which the application touched a little must not become resident whole).
bool copy_pages(int fd, uintptr_t base, uintptr_t lo, uintptr_t hi, bool anonymous, uint64_t *copied) {
    const size_t ps = page_size();
    int pagemap = anonymous ? open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC) : -1;
    if (anonymous && pagemap < 0) anonymous = false;  // copy all: correct, only larger
    bool ok = true;
    uint64_t entries[512];
    for (uintptr_t p = lo; ok && p < hi;) {
        const size_t n = std::min<size_t>(512, (hi - p) / ps);
        bool have_entries = false;
        if (anonymous)
            have_entries = pread(pagemap, entries, n * sizeof(uint64_t), off_t(p / ps * sizeof(uint64_t))) ==
                           ssize_t(n * sizeof(uint64_t));
        for (size_t i = 0; ok && i < n;) {
            // A run of pages that need (or need not) copying.
            auto needs = [&](size_t k) {
                return !have_entries || (entries[k] >> 62) != 0;
            };  // present or swapped
            const bool copy = needs(i);
            size_t j = i + 1;
            while (j < n && needs(j) == copy) ++j;
            if (copy) {
                const char *src = reinterpret_cast<const char *>(p + i * ps);
                size_t left = (j - i) * ps;
                off_t at = off_t(p + i * ps - base);
                while (ok && left) {
                    const ssize_t w = pwrite(fd, src, left, at);
                    if (w <= 0) {
                        ok = false;
                        break;
                    }
                    src += w;
                    at += w;
                    left -= size_t(w);
                    *copied += uint64_t(w);
                }
            }
            i = j;
        }
        p += n * ps;
    }
    if (pagemap >= 0) close(pagemap);
    return ok;
}

// The ranges this process has mapped shared, for the fork handler (which runs in the child,
// one thread, before anything else): a fixed array, since the handler should not allocate
// much. A range stays here after its file is released (it is still shared), until it is
// found unmapped.
struct ForkRange {
    uintptr_t base;
    size_t len;
    uint64_t ino;  // 0: a free place
};
constexpr int kMaxForkRanges = 4096;
ForkRange g_fork_ranges[kMaxForkRanges];
std::atomic<int> g_fork_count{0};
// Scans of a full table that would be skipped before the next (one found nothing to free).
int g_fork_scans_skipped = 0;
constexpr int kForkScanBackoff = 64;

// Every mapping of the process, in address order: read once for many ranges.
std::vector<Vma> all_mappings() {
    std::vector<Vma> all;
    read_mappings(0, UINTPTR_MAX, &all, true);
    return all;
}

// Calls f for each mapping in `all` that overlaps [lo, hi).
template <class F>
void each_overlapping(const std::vector<Vma> &all, uintptr_t lo, uintptr_t hi, F &&f) {
    auto it =
        std::upper_bound(all.begin(), all.end(), lo, [](uintptr_t a, const Vma &v) { return a < v.hi; });
    for (; it != all.end() && it->lo < hi; ++it) f(*it);
}

// In a forked child: each shared range still mapped from its file becomes private memory
// holding what it held at this moment, as it would have had without adoption. Only a range
// still mapped from its file: the application may have unmapped it since and have something
// else there now, which a fixed mapping would overwrite. The copy is made aside, then moved
// into place in one call.
void privatize_in_child() {
    const int n = g_fork_count.load(std::memory_order_acquire);
    if (n == 0) return;
    const std::vector<Vma> all = all_mappings();
    for (int i = 0; i < n; ++i) {
        const ForkRange r = g_fork_ranges[i];
        if (!r.ino) continue;
        g_fork_ranges[i].ino = 0;
        // Part of it may be gone (a heap trimmed at its top) and part still shared.
        each_overlapping(all, r.base, r.base + r.len, [&](const Vma &v) {
            if (v.inode != r.ino || std::strcmp(v.perms, "rw-s") != 0) return;
            const uintptr_t lo = std::max<uintptr_t>(v.lo, r.base),
                            hi = std::min<uintptr_t>(v.hi, r.base + r.len);
            const size_t len = hi - lo;
            void *copy = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (copy == MAP_FAILED) return;
            std::memcpy(copy, reinterpret_cast<const void *>(lo), len);
            if (mremap(copy, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void *>(lo)) ==
                MAP_FAILED)
                munmap(copy, len);
        });
    }
}

// Whether any part of the range is still mapped from the file.
bool partly_adopted(const std::vector<Vma> &all, const ForkRange &r) {
    bool found = false;
    each_overlapping(all, r.base, r.base + r.len, [&](const Vma &v) {
        if (v.inode == r.ino && std::strcmp(v.perms, "rw-s") == 0) found = true;
    });
    return found;
}

// A free place in g_fork_ranges, or -1. When full, the ranges the application unmapped since
// make room; a scan that finds none is not repeated for the next kForkScanBackoff calls.
int free_fork_range() {
    const int n = g_fork_count.load(std::memory_order_relaxed);
    for (int i = 0; i < n; ++i)
        if (!g_fork_ranges[i].ino) return i;
    if (n < kMaxForkRanges) return n;
    if (g_fork_scans_skipped > 0) {
        --g_fork_scans_skipped;
        return -1;
    }
    const std::vector<Vma> all = all_mappings();
    int found = -1;
    for (int i = 0; i < n; ++i)
        if (!partly_adopted(all, g_fork_ranges[i])) {
            g_fork_ranges[i].ino = 0;
            if (found < 0) found = i;
        }
    if (found < 0) g_fork_scans_skipped = kForkScanBackoff;
    return found;
}

// Adopt calls are serialised by the engine lock; a fork may read the table at any time, so an
// entry is complete before the count that makes it visible.
void remember_for_fork(int i, uintptr_t base, size_t len, uint64_t ino) {
    static const bool registered = pthread_atfork(nullptr, nullptr, privatize_in_child) == 0;
    (void)registered;
    g_fork_ranges[i] = {base, len, ino};
    if (i == g_fork_count.load(std::memory_order_relaxed))
        g_fork_count.store(i + 1, std::memory_order_release);
}

}  // namespace

AdoptedPages::AdoptedPages() = default;

AdoptedPages::~AdoptedPages() {
    // The pages stay mapped (the application still uses them) and shared with whatever peer
    // still maps them; only our descriptors go (the fork handler still knows the ranges).
    for (const Range &r : ranges_) {
        if (r.watched && !r.gone) watch_->unwatch(r.base, r.base + r.len);
        close(r.fd);
    }
}

void AdoptedPages::drop(size_t i) {
    const Range &r = ranges_[i];
    if (r.watched) watch_->unwatch(r.base, r.base + r.len);
    close(r.fd);
    ranges_.erase(ranges_.begin() + long(i));
    ++version_;
}

void AdoptedPages::take_unmapped(uintptr_t own_lo, uintptr_t own_hi) {
    if (!watch_) return;
    unmapped_.clear();
    const bool complete = watch_->take(unmapped_);
    if (complete && unmapped_.empty()) return;
    for (size_t i = 0; i < ranges_.size();) {
        Range &r = ranges_[i];
        const uintptr_t end = r.base + r.len;
        // More went than the watch could list: look at the range itself.
        bool hit = !complete && !r.gone && !still_adopted(r.base, r.len, r.ino);
        for (const UnmapWatch::Range &g : unmapped_)
            if (g.start < end && r.base < g.end && !(g.start >= own_lo && g.end <= own_hi)) hit = true;
        if (hit) {
            r.gone = true;
            if (r.users == 0) {
                drop(i);
                continue;
            }
        }
        ++i;
    }
}

bool AdoptedPages::adopt(void *start, size_t len, SharedRange *out) {
    const size_t ps = page_size();
    const uintptr_t base = reinterpret_cast<uintptr_t>(start);
    if (len == 0 || base % ps || len % ps || base + len < base) return false;
    const uintptr_t end = base + len;
    take_unmapped();
    for (size_t i = 0; i < ranges_.size(); ++i) {
        Range &r = ranges_[i];
        if (r.gone || base < r.base || end > r.base + r.len) continue;
        // Unwatched: the application may have unmapped it and have other memory there now.
        if (!r.watched && !still_adopted(r.base, r.len, r.ino)) {
            r.gone = true;
            break;
        }
        ++r.users;
        ++stats_.reused;
        *out = {r.fd, r.ino, r.len, base - r.base};
        return true;
    }
    // Ranges no entry uses that overlap this one are adopted again with it, as one.
    uintptr_t lo = base, hi = end;
    for (bool grew = true; grew;) {
        grew = false;
        for (Range &r : ranges_) {
            if (r.gone || !(lo < r.base + r.len && r.base < hi)) continue;
            if (!r.watched && !still_adopted(r.base, r.len, r.ino)) {
                r.gone = true;  // unmapped unseen: what is there now is not its file's
                continue;
            }
            if (r.users) return false;  // partly adopted already, and in use
            if (r.base < lo || r.base + r.len > hi) {
                lo = std::min(lo, r.base);
                hi = std::max(hi, r.base + r.len);
                grew = true;
            }
        }
    }
    // A forked child could not be given private copies of more.
    const int fork_range = free_fork_range();
    if (fork_range < 0) return false;
    std::vector<Vma> vmas;
    if (!private_writable(lo, hi, &vmas)) return false;
    const int fd = memfd_create(kFileName, MFD_CLOEXEC);
    if (fd < 0) return false;
    uint64_t copied = 0;
    bool ok = ftruncate(fd, off_t(hi - lo)) == 0;
    for (const Vma &v : vmas)
        if (ok)
            ok = copy_pages(fd, lo, std::max<uintptr_t>(v.lo, lo), std::min<uintptr_t>(v.hi, hi),
                            anonymous(v), &copied);
    // One call replaces the pages: no moment in which the range is unmapped.
    if (!ok || mmap(reinterpret_cast<void *>(lo), hi - lo, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
                    0) == MAP_FAILED) {
        close(fd);
        return false;
    }
    for (size_t i = 0; i < ranges_.size();)
        if (!ranges_[i].gone && ranges_[i].base >= lo && ranges_[i].base + ranges_[i].len <= hi)
            drop(i);
        else
            ++i;
    struct stat st {};
    fstat(fd, &st);
    if (!watch_ && !watch_tried_) {
        watch_tried_ = true;
        std::string why;
        watch_ = UnmapWatch::open(&why, 1024);
        if (!watch_ && debug_)
            std::fprintf(stderr,
                         "portals debug: pid %d: no unmap watch (%s): adopted pages are copied again for "
                         "each entry that uses them\n",
                         int(getpid()), why.c_str());
    }
    take_unmapped(lo, hi);  // our own remap of ranges watched before
    const bool watched = watch_ && watch_->watch(lo, hi);
    ranges_.push_back({lo, hi - lo, fd, uint64_t(st.st_ino), 1, watched, false});
    ++version_;
    remember_for_fork(fork_range, lo, hi - lo, uint64_t(st.st_ino));
    ++stats_.adoptions;
    stats_.bytes_copied += copied;
    if (debug_)
        std::fprintf(
            stderr,
            "portals debug: pid %d adopted 0x%lx-0x%lx (%lu bytes, %lu copied) into a memory file: peers "
            "on this host access it directly%s\n",
            int(getpid()), (unsigned long)lo, (unsigned long)hi, (unsigned long)(hi - lo),
            (unsigned long)copied,
            watched ? "; it stays shared until unmapped" : "; not watched: copied again after its last user");
    *out = {fd, uint64_t(st.st_ino), hi - lo, base - lo};
    return true;
}

void AdoptedPages::publish(FileList *to) {
    if (!to || version_ == published_) return;
    published_ = version_;
    uint32_t n = 0;
    for (const Range &r : ranges_) {
        if (n == kListedFiles) break;  // peers map the others again when they need them
        ListedFile &f = to->files[n++];
        if (f.fd.load(std::memory_order_relaxed) == r.fd && f.ino.load(std::memory_order_relaxed) == r.ino &&
            f.base.load(std::memory_order_relaxed) == r.base &&
            f.len.load(std::memory_order_relaxed) == r.len)
            continue;
        f.seq.fetch_add(1, std::memory_order_relaxed);  // odd: a reader sees neither old nor new
        std::atomic_thread_fence(std::memory_order_release);
        f.fd.store(r.fd, std::memory_order_relaxed);
        f.ino.store(r.ino, std::memory_order_relaxed);
        f.base.store(r.base, std::memory_order_relaxed);
        f.len.store(r.len, std::memory_order_relaxed);
        f.seq.fetch_add(1, std::memory_order_release);
    }
    for (uint32_t i = n; i < published_count_; ++i) {
        ListedFile &f = to->files[i];
        f.seq.fetch_add(1, std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_release);
        f.fd.store(-1, std::memory_order_relaxed);
        f.seq.fetch_add(1, std::memory_order_release);
    }
    published_count_ = n;
    to->version.fetch_add(1, std::memory_order_release);
}

bool AdoptedPages::listed(const void *start, size_t len, uint32_t *index, uint64_t *ino) {
    take_unmapped();
    const uintptr_t a = reinterpret_cast<uintptr_t>(start);
    for (uint32_t i = 0; i < ranges_.size() && i < kListedFiles; ++i) {
        const Range &r = ranges_[i];
        if (r.gone || !r.watched || a < r.base || a + len > r.base + r.len) continue;
        *index = i;
        *ino = r.ino;
        return true;
    }
    return false;
}

void AdoptedPages::release(int fd) {
    for (size_t i = 0; i < ranges_.size(); ++i)
        if (ranges_[i].fd == fd) {
            Range &r = ranges_[i];
            if (--r.users == 0 && (r.gone || !r.watched)) drop(i);
            break;
        }
    take_unmapped();
}

PeerPages::~PeerPages() {
    for (auto &[fd, m] : by_fd_) munmap(m.base, m.len);
}

void PeerPages::retain(const std::vector<std::pair<int, uint64_t>> &live) {
    for (auto it = by_fd_.begin(); it != by_fd_.end();) {
        const bool keep =
            std::find(live.begin(), live.end(), std::make_pair(it->first, it->second.ino)) != live.end();
        if (keep) {
            ++it;
            continue;
        }
        munmap(it->second.base, it->second.len);
        it = by_fd_.erase(it);
    }
}

char *PeerPages::map(pid_t owner, int fd, uint64_t ino, uint64_t len) {
    auto it = by_fd_.find(fd);
    if (it != by_fd_.end() && it->second.len == len && it->second.ino == ino) return it->second.base;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/fd/%d", int(owner), fd);
    const int f = open(path, O_RDWR | O_CLOEXEC);
    if (f < 0) return nullptr;
    struct stat st {};
    if (fstat(f, &st) != 0 || uint64_t(st.st_ino) != ino || uint64_t(st.st_size) < len) {
        close(f);  // the owner closed that file since (and opened another under its number)
        return nullptr;
    }
    void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    close(f);
    if (p == MAP_FAILED) return nullptr;
    ++maps_made_;
    if (it != by_fd_.end()) {
        munmap(it->second.base, it->second.len);
        by_fd_.erase(it);
    }
    by_fd_.emplace(fd, Mapping{static_cast<char *>(p), len, ino});
    return static_cast<char *>(p);
}

}  // namespace ptl::shm
