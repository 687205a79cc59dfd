// The verbs wire's registration cache trusts UnmapWatch to say which watched memory stopped
// being the memory it registered, before the call that changed it returns. Real mappings,
// real munmap/madvise/mremap, the real userfaultfd.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../src/ptl/util/unmap_watch.h"

namespace {

using ptl::UnmapWatch;

const uintptr_t kPage = uintptr_t(sysconf(_SC_PAGESIZE));

std::unique_ptr<UnmapWatch> open_watch(size_t capacity = 4096) {
    std::string why;
    auto w = UnmapWatch::open(&why, capacity);
    EXPECT_TRUE(w) << why;
    return w;
}

char *map_pages(size_t n) {
    void *p = mmap(nullptr, n * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    std::fill_n(static_cast<char *>(p), n * kPage, 'x');
    return static_cast<char *>(p);
}

uintptr_t at(const char *p) {
    return reinterpret_cast<uintptr_t>(p);
}

std::vector<UnmapWatch::Range> taken(UnmapWatch &w, bool *complete = nullptr) {
    std::vector<UnmapWatch::Range> out;
    const bool c = w.take(out);
    if (complete) *complete = c;
    return out;
}

bool covers(const std::vector<UnmapWatch::Range> &rs, uintptr_t start, uintptr_t end) {
    return std::any_of(rs.begin(), rs.end(),
                       [&](const UnmapWatch::Range &r) { return r.start <= start && r.end >= end; });
}

TEST(UnmapWatch, MunmapOfPartOfAWatchedRangeIsReportedBeforeItReturns) {
    auto w = open_watch();
    ASSERT_TRUE(w);
    char *p = map_pages(4);
    ASSERT_TRUE(w->watch(at(p), at(p) + 4 * kPage));
    EXPECT_TRUE(taken(*w).empty());
    ASSERT_EQ(munmap(p + kPage, 2 * kPage), 0);
    const auto gone = taken(*w);
    ASSERT_EQ(gone.size(), 1u);
    EXPECT_EQ(gone[0].start, at(p) + kPage);
    EXPECT_EQ(gone[0].end, at(p) + 3 * kPage);
    EXPECT_TRUE(taken(*w).empty());  // each range is reported once
    munmap(p, 4 * kPage);
}

TEST(UnmapWatch, MadviseDontneedAndMapFixedOverTheRangeAreReported) {
    auto w = open_watch();
    ASSERT_TRUE(w);
    char *p = map_pages(4);
    ASSERT_TRUE(w->watch(at(p), at(p) + 4 * kPage));
    ASSERT_EQ(madvise(p, kPage, MADV_DONTNEED), 0);
    EXPECT_TRUE(covers(taken(*w), at(p), at(p) + kPage));
    void *q = mmap(p + 2 * kPage, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                   -1, 0);
    ASSERT_EQ(q, p + 2 * kPage);
    EXPECT_TRUE(covers(taken(*w), at(p) + 2 * kPage, at(p) + 4 * kPage));
    munmap(p, 4 * kPage);
}

TEST(UnmapWatch, MremapThatMovesTheRangeReportsWhereItWas) {
    auto w = open_watch();
    ASSERT_TRUE(w);
    char *p = map_pages(2);
    ASSERT_TRUE(w->watch(at(p), at(p) + 2 * kPage));
    void *q = mremap(p, 2 * kPage, 64 * kPage, MREMAP_MAYMOVE);
    ASSERT_NE(q, MAP_FAILED);
    if (q == p) GTEST_SKIP() << "the kernel grew the mapping in place";
    EXPECT_TRUE(covers(taken(*w), at(p), at(p) + 2 * kPage));
    munmap(q, 64 * kPage);
}

TEST(UnmapWatch, MemoryNoLongerWatchedIsNotReported) {
    auto w = open_watch();
    ASSERT_TRUE(w);
    char *p = map_pages(2);
    char *other = map_pages(2);
    ASSERT_TRUE(w->watch(at(p), at(p) + 2 * kPage));
    w->unwatch(at(p), at(p) + 2 * kPage);
    munmap(p, 2 * kPage);
    munmap(other, 2 * kPage);
    EXPECT_TRUE(taken(*w).empty());
}

// The shm wire's adopted pages and the verbs wire's registrations of them are watched by two
// watches of one process (a range belongs to one userfaultfd only): one letting go of the
// range leaves the other's watch in place.
TEST(UnmapWatch, TwoWatchesOfOneRangeEachSeeItGoAfterTheOtherLetGo) {
    auto a = open_watch(), b = open_watch();
    ASSERT_TRUE(a && b);
    char *p = map_pages(4);
    ASSERT_TRUE(a->watch(at(p), at(p) + 4 * kPage));
    ASSERT_TRUE(b->watch(at(p) + kPage, at(p) + 3 * kPage));
    a->unwatch(at(p), at(p) + 4 * kPage);
    ASSERT_EQ(munmap(p + kPage, kPage), 0);
    EXPECT_TRUE(covers(taken(*b), at(p) + kPage, at(p) + 2 * kPage)) << "b's watch went with a's";
    b->unwatch(at(p) + kPage, at(p) + 3 * kPage);
    taken(*a);
    ASSERT_EQ(munmap(p + 2 * kPage, kPage), 0);
    EXPECT_TRUE(taken(*a).empty()) << "nobody watches it any more";
    EXPECT_TRUE(taken(*b).empty());
    munmap(p, 4 * kPage);
}

// The shm wire adopts pages the verbs cache watched: its MAP_FIXED ends the cache's watch (an
// event for it), the shm side then watches the new mapping, and the cache's unwatch of its
// old range must not take the new watch away (it once did: the count was the process's).
TEST(UnmapWatch, AWatchLettingGoOfARangeRemappedSinceLeavesTheNewWatchOfIt) {
    auto cache = open_watch(), adopted = open_watch();
    ASSERT_TRUE(cache && adopted);
    char *p = map_pages(2);
    ASSERT_TRUE(cache->watch(at(p), at(p) + 2 * kPage));
    void *q = mmap(p, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    ASSERT_EQ(q, p);
    ASSERT_TRUE(adopted->watch(at(p), at(p) + 2 * kPage));
    EXPECT_TRUE(covers(taken(*cache), at(p), at(p) + 2 * kPage));
    cache->unwatch(at(p), at(p) + 2 * kPage);  // what the cache does with a range gone
    taken(*adopted);
    ASSERT_EQ(munmap(p, 2 * kPage), 0);
    EXPECT_TRUE(covers(taken(*adopted), at(p), at(p) + 2 * kPage)) << "the new watch went with the old";
}

// Adopted pages are a shared mapping of a memory file (shmem): watchable, as anonymous memory.
TEST(UnmapWatch, AMemoryFileMappingIsWatched) {
    auto w = open_watch();
    ASSERT_TRUE(w);
    const int fd = memfd_create("unmap-watch-test", MFD_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, off_t(2 * kPage)), 0);
    void *p = mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    ASSERT_NE(p, MAP_FAILED);
    char *c = static_cast<char *>(p);
    ASSERT_TRUE(w->watch(at(c), at(c) + 2 * kPage));
    ASSERT_EQ(munmap(c, 2 * kPage), 0);
    EXPECT_TRUE(covers(taken(*w), at(c), at(c) + 2 * kPage));
}

TEST(UnmapWatch, FileBackedMemoryCannotBeWatched) {
    auto w = open_watch();
    ASSERT_TRUE(w);
    const int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    void *p = mmap(nullptr, kPage, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    ASSERT_NE(p, MAP_FAILED);
    EXPECT_FALSE(w->watch(at(static_cast<char *>(p)), at(static_cast<char *>(p)) + kPage));
    munmap(p, kPage);
}

TEST(UnmapWatch, MoreRangesThanItCanHoldSayEverythingMayBeGone) {
    auto w = open_watch(4);
    ASSERT_TRUE(w);
    char *p = map_pages(16);
    ASSERT_TRUE(w->watch(at(p), at(p) + 16 * kPage));
    for (int i = 0; i < 16; i += 2) ASSERT_EQ(munmap(p + i * kPage, kPage), 0);
    bool complete = true;
    EXPECT_EQ(taken(*w, &complete).size(), 4u);
    EXPECT_FALSE(complete);
    EXPECT_TRUE(taken(*w, &complete).empty());
    EXPECT_TRUE(complete);
    munmap(p, 16 * kPage);
}

// Not every site enables vm.unprivileged_userfaultfd; an ordinary user's process must still
// get its events (a userfaultfd for user-mode faults, none of which it ever traps).
TEST(UnmapWatch, WorksForAnUnprivilegedProcess) {
    if (geteuid() != 0) GTEST_SKIP() << "already unprivileged: the other tests cover it";
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
        std::string why;
        auto w = UnmapWatch::open(&why);
        if (!w) _exit(3);
        char *p = static_cast<char *>(
            mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        p[0] = 1;
        if (!w->watch(at(p), at(p) + 2 * kPage)) _exit(4);
        munmap(p, 2 * kPage);
        std::vector<UnmapWatch::Range> out;
        w->take(out);
        _exit(covers(out, at(p), at(p) + 2 * kPage) ? 0 : 5);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "2: setuid, 3: no userfaultfd, 4: watch refused, 5: no event";
}

}  // namespace
