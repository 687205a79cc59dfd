#include "mappings.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ptl {

namespace {

// struct procmap_query of Linux 6.11's uapi <linux/fs.h>, which Debian 12's headers predate.
struct ProcmapQuery {
    uint64_t size;
    uint64_t query_flags;
    uint64_t query_addr;
    uint64_t vma_start;
    uint64_t vma_end;
    uint64_t vma_flags;
    uint64_t vma_page_size;
    uint64_t vma_offset;
    uint64_t inode;
    uint32_t dev_major;
    uint32_t dev_minor;
    uint32_t vma_name_size;
    uint32_t build_id_size;
    uint64_t vma_name_addr;
    uint64_t build_id_addr;
};
static_assert(sizeof(ProcmapQuery) == 104);
constexpr unsigned long kProcmapQuery = 0xc0686611;  // _IOWR('f', 17, struct procmap_query)
constexpr uint64_t kVmaReadable = 0x01, kVmaWritable = 0x02, kVmaExecutable = 0x04, kVmaShared = 0x08;
constexpr uint64_t kCoveringOrNext = 0x10;

enum class Query { unknown, absent };
std::atomic<Query> g_query{Query::unknown};

constexpr int kNoQuery = -1, kFailed = -2;

// Returns 1 with the mapping at or after `addr`, 0 when none lies there, kNoQuery when the
// kernel has no such query, kFailed on another error.
int query_next(int fd, uintptr_t addr, Mapping *m) {
    char name[4096];
    ProcmapQuery q{};
    q.size = sizeof q;
    q.query_flags = kCoveringOrNext;
    q.query_addr = addr;
    q.vma_name_size = sizeof name;
    q.vma_name_addr = reinterpret_cast<uintptr_t>(name);
    if (ioctl(fd, kProcmapQuery, &q) != 0) {
        if (errno == ENOENT) return 0;
        return errno == ENOTTY || errno == EINVAL || errno == ENOSYS ? kNoQuery : kFailed;
    }
    m->lo = q.vma_start;
    m->hi = q.vma_end;
    m->offset = q.vma_offset;
    m->inode = q.inode;
    m->perms[0] = q.vma_flags & kVmaReadable ? 'r' : '-';
    m->perms[1] = q.vma_flags & kVmaWritable ? 'w' : '-';
    m->perms[2] = q.vma_flags & kVmaExecutable ? 'x' : '-';
    m->perms[3] = q.vma_flags & kVmaShared ? 's' : 'p';
    m->perms[4] = '\0';
    m->name.assign(name, q.vma_name_size ? std::strlen(name) : 0);
    return 1;
}

}  // namespace

int read_mappings_by_query(uintptr_t base, uintptr_t end, std::vector<Mapping> *out, bool holes) {
    // Opened per call: a descriptor kept open would still describe the parent after a fork.
    const int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    uintptr_t covered = base;
    int rc = 0;
    const size_t first = out->size();
    while (covered < end) {
        Mapping m{};
        rc = query_next(fd, covered, &m);
        if (rc <= 0) break;
        if (m.lo >= end || (m.lo > covered && !holes)) break;
        covered = m.hi;
        out->push_back(std::move(m));
    }
    close(fd);
    if (rc < 0) {
        out->resize(first);
        return rc == kNoQuery ? kNoQuery : 0;
    }
    return holes || covered >= end;
}

bool read_mappings_as_text(uintptr_t base, uintptr_t end, std::vector<Mapping> *out, bool holes) {
    FILE *f = std::fopen("/proc/self/maps", "re");
    if (!f) return false;
    char line[512];
    uintptr_t covered = base;
    while (covered < end && std::fgets(line, sizeof line, f)) {
        Mapping m{};
        unsigned long lo, hi, off, inode;
        char dev[16] = {};
        int name_at = 0;
        if (std::sscanf(line, "%lx-%lx %7s %lx %15s %lu %n", &lo, &hi, m.perms, &off, dev, &inode, &name_at) <
            6)
            continue;
        if (hi <= covered) continue;
        if (lo >= end) break;
        if (lo > covered && !holes) break;  // a hole
        m.lo = lo;
        m.hi = hi;
        m.offset = off;
        m.inode = inode;
        m.name = name_at ? line + name_at : "";
        while (!m.name.empty() && (m.name.back() == '\n' || m.name.back() == ' ')) m.name.pop_back();
        out->push_back(std::move(m));
        covered = hi;
    }
    std::fclose(f);
    return holes || covered >= end;
}

bool read_mappings(uintptr_t base, uintptr_t end, std::vector<Mapping> *out, bool holes) {
    if (g_query.load(std::memory_order_relaxed) != Query::absent) {
        const int rc = read_mappings_by_query(base, end, out, holes);
        if (rc != kNoQuery) return rc == 1;
        g_query.store(Query::absent, std::memory_order_relaxed);
    }
    return read_mappings_as_text(base, end, out, holes);
}

}  // namespace ptl
