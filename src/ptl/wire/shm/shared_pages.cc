#include "shared_pages.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

// The mappings that cover [base, end), in address order; false if a hole lies in between.
struct Vma {
    uintptr_t lo, hi;
    uint64_t offset, inode;
    char perms[8];
    std::string name;
};
bool read_vmas(uintptr_t base, uintptr_t end, std::vector<Vma> *out) {
    FILE *f = std::fopen("/proc/self/maps", "re");
    if (!f) return false;
    char line[512];
    uintptr_t covered = base;
    while (covered < end && std::fgets(line, sizeof line, f)) {
        Vma v{};
        unsigned long lo, hi, off, inode;
        char dev[16] = {};
        int name_at = 0;
        if (std::sscanf(line, "%lx-%lx %7s %lx %15s %lu %n", &lo, &hi, v.perms, &off, dev, &inode, &name_at) <
            6)
            continue;
        if (hi <= covered) continue;
        if (lo > covered) break;  // a hole
        v.lo = lo;
        v.hi = hi;
        v.offset = off;
        v.inode = inode;
        v.name = name_at ? line + name_at : "";
        while (!v.name.empty() && (v.name.back() == '\n' || v.name.back() == ' ')) v.name.pop_back();
        out->push_back(std::move(v));
        covered = hi;
    }
    std::fclose(f);
    return covered >= end;
}

// Anonymous memory, whose untouched pages read as zeros (and need no copy).
bool anonymous(const Vma &v) {
    return v.inode == 0 && (v.name.empty() || v.name == "[heap]");
}

// Whether every byte of [base, end) lies in private writable mappings whose pages may move to
// a shared file. Stacks, the vDSO and huge pages stay as they are.
bool private_writable(uintptr_t base, uintptr_t end, std::vector<Vma> *out) {
    if (!read_vmas(base, end, out)) return false;
    for (const Vma &v : *out) {
        const bool file_copy = v.inode != 0 && v.name.find("hugepage") == std::string::npos;
        if (std::strcmp(v.perms, "rw-p") != 0 || !(anonymous(v) || file_copy)) return false;
    }
    return true;
}

// Whether [base, base + len) is still our mapping of the memory file with inode `ino`: the
// application may have unmapped adopted pages (freed the memory) and mapped new ones there.
bool still_adopted(uintptr_t base, size_t len, uint64_t ino) {
    std::vector<Vma> vmas;
    if (!read_vmas(base, base + len, &vmas)) return false;
    for (const Vma &v : vmas)
        if (v.inode != ino || std::strcmp(v.perms, "rw-s") != 0 || v.offset != v.lo - base) return false;
    return true;
}

// Copies the pages of [lo, hi) that hold data into `fd` at their offset from `base`: every
// page of a file's private copy, only present or swapped pages of anonymous memory (a heap
// of which the application touched a little must not become resident whole).
bool copy_pages(int fd, uintptr_t base, uintptr_t lo, uintptr_t hi, bool anonymous) {
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
                }
            }
            i = j;
        }
        p += n * ps;
    }
    if (pagemap >= 0) close(pagemap);
    return ok;
}

// Every adopted range of the process, for the fork handler (which runs in the child, one
// thread, before anything else): a fixed array, since the handler may not allocate.
struct ForkRange {
    uintptr_t base;
    size_t len;
    int fd;
};
constexpr int kMaxForkRanges = 256;
ForkRange g_fork_ranges[kMaxForkRanges];
std::atomic<int> g_fork_count{0};

// In a forked child: each adopted range becomes private memory holding what the shared pages
// held at this moment, read from the memory file (holes stay untouched zero pages).
void privatize_in_child() {
    const int n = g_fork_count.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) {
        const ForkRange r = g_fork_ranges[i];
        if (r.fd < 0) continue;
        void *tmp = mmap(nullptr, r.len, PROT_READ, MAP_SHARED, r.fd, 0);
        if (tmp == MAP_FAILED) continue;
        if (mmap(reinterpret_cast<void *>(r.base), r.len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
            off_t at = 0;
            while (at < off_t(r.len)) {
                const off_t data = lseek(r.fd, at, SEEK_DATA);
                if (data < 0) break;
                off_t hole = lseek(r.fd, data, SEEK_HOLE);
                if (hole < 0 || hole > off_t(r.len)) hole = off_t(r.len);
                std::memcpy(reinterpret_cast<char *>(r.base) + data, static_cast<char *>(tmp) + data,
                            size_t(hole - data));
                at = hole;
            }
        }
        munmap(tmp, r.len);
        close(r.fd);
        g_fork_ranges[i].fd = -1;
    }
    g_fork_count.store(0, std::memory_order_release);
}

void remember_for_fork(uintptr_t base, size_t len, int fd) {
    static const bool registered = pthread_atfork(nullptr, nullptr, privatize_in_child) == 0;
    (void)registered;
    const int i = g_fork_count.load(std::memory_order_relaxed);
    if (i == kMaxForkRanges) return;
    g_fork_ranges[i] = {base, len, fd};
    g_fork_count.store(i + 1, std::memory_order_release);
}

void forget_for_fork(int fd) {
    for (int i = 0; i < g_fork_count.load(std::memory_order_relaxed); ++i)
        if (g_fork_ranges[i].fd == fd) g_fork_ranges[i].fd = -1;
}

}  // namespace

AdoptedPages::~AdoptedPages() {
    // The pages stay mapped (the application still uses them) and shared with whatever peer
    // still maps them; only our descriptors go.
    for (const Range &r : ranges_) {
        forget_for_fork(r.fd);
        close(r.fd);
    }
}

bool AdoptedPages::adopt(void *start, size_t len, SharedRange *out) {
    const size_t ps = page_size();
    const uintptr_t base = reinterpret_cast<uintptr_t>(start);
    if (len == 0 || base % ps || len % ps || base + len < base) return false;
    const uintptr_t end = base + len;
    for (size_t i = 0; i < ranges_.size();) {
        const Range &r = ranges_[i];
        const bool overlaps = base < r.base + r.len && r.base < end;
        if (overlaps && !still_adopted(r.base, r.len, r.ino)) {
            // Unmapped since: what a peer still maps of the file reaches nothing of ours.
            forget_for_fork(r.fd);
            close(r.fd);
            ranges_.erase(ranges_.begin() + long(i));
            continue;
        }
        if (base >= r.base && end <= r.base + r.len) {
            *out = {r.fd, r.ino, r.len, base - r.base};
            return true;
        }
        if (overlaps) return false;  // partly adopted already
        ++i;
    }
    // A forked child could not be given private copies of more.
    if (g_fork_count.load(std::memory_order_relaxed) == kMaxForkRanges) return false;
    std::vector<Vma> vmas;
    if (!private_writable(base, end, &vmas)) return false;
    const int fd = memfd_create("portals-direct", MFD_CLOEXEC);
    if (fd < 0) return false;
    bool ok = ftruncate(fd, off_t(len)) == 0;
    for (const Vma &v : vmas)
        if (ok) ok = copy_pages(fd, base, std::max(v.lo, base), std::min(v.hi, end), anonymous(v));
    // One call replaces the pages: no moment in which the range is unmapped.
    if (!ok || mmap(start, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        close(fd);
        return false;
    }
    struct stat st {};
    fstat(fd, &st);
    ranges_.push_back({base, len, fd, uint64_t(st.st_ino)});
    remember_for_fork(base, len, fd);
    *out = {fd, uint64_t(st.st_ino), len, 0};
    return true;
}

PeerPages::~PeerPages() {
    for (auto &[fd, m] : by_fd_) munmap(m.base, m.len);
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
    if (it != by_fd_.end()) {
        munmap(it->second.base, it->second.len);
        by_fd_.erase(it);
    }
    by_fd_.emplace(fd, Mapping{static_cast<char *>(p), len, ino});
    return static_cast<char *>(p);
}

}  // namespace ptl::shm
