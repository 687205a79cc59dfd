// Adopted pages (src/ptl/wire/shm/shared_pages.h): memory of ours that peers load, store and
// run CPU atomics on, at the address the application already uses, contents kept.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>

#include "../src/ptl/wire/shm/shared_pages.h"

using ptl::shm::AdoptedPages;
using ptl::shm::PeerPages;
using ptl::shm::SharedRange;

namespace {

const size_t kPage = size_t(sysconf(_SC_PAGESIZE));

char *map_anonymous(size_t len, void *at = nullptr) {
    void *p =
        mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<char *>(p);
}

// Runs `child` in a forked child; whether it returned true there.
template <typename F>
bool in_child(F &&child) {
    const pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) _exit(child() ? 0 : 1);
    int status = 0;
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

TEST(SharedPages, AdoptedMemoryKeepsItsAddressAndContentsAndIsSharedWithAPeersMapping) {
    char *m = map_anonymous(4 * kPage);
    ASSERT_NE(m, nullptr);
    std::memset(m, 'a', kPage);              // touched
    std::memset(m + 2 * kPage, 'c', kPage);  // touched; pages 1 and 3 never were
    AdoptedPages adopted;
    SharedRange r;
    ASSERT_TRUE(adopted.adopt(m, 4 * kPage, &r));
    EXPECT_EQ(r.file_offset, 0u);
    EXPECT_EQ(r.file_len, 4 * kPage);
    for (size_t i = 0; i < 4 * kPage; ++i) {
        const char want = i < kPage ? 'a' : i >= 2 * kPage && i < 3 * kPage ? 'c' : 0;
        ASSERT_EQ(m[i], want) << "byte " << i;
    }
    EXPECT_TRUE(adopted.covers(m + kPage, 8));
    EXPECT_FALSE(adopted.covers(m + 4 * kPage - 4, 8));

    PeerPages peer;  // this process stands in for the peer: /proc/self/fd/N is the same file
    char *view = peer.map(getpid(), r.fd, r.ino, r.file_len);
    ASSERT_NE(view, nullptr);
    EXPECT_NE(view, m);
    view[kPage + 5] = 'x';
    EXPECT_EQ(m[kPage + 5], 'x');
    m[3 * kPage + 7] = 'y';
    EXPECT_EQ(view[3 * kPage + 7], 'y');
    auto *counter = reinterpret_cast<uint64_t *>(view + 64);
    for (int i = 0; i < 1000; ++i) __atomic_fetch_add(counter, 1, __ATOMIC_SEQ_CST);
    EXPECT_EQ(*reinterpret_cast<volatile uint64_t *>(m + 64), 0x6161616161616161ull + 1000);
    EXPECT_EQ(peer.map(getpid(), r.fd, r.ino + 1, r.file_len), nullptr) << "another file under that number";

    SharedRange inner;
    ASSERT_TRUE(adopted.adopt(m + kPage, kPage, &inner)) << "a range inside an adopted one is reused";
    EXPECT_EQ(inner.fd, r.fd);
    EXPECT_EQ(inner.file_offset, kPage);
    munmap(m, 4 * kPage);
}

TEST(SharedPages, OnlyWholePagesOfPrivateWritableMemoryAreAdopted) {
    char *m = map_anonymous(2 * kPage);
    ASSERT_NE(m, nullptr);
    AdoptedPages adopted;
    SharedRange r;
    EXPECT_FALSE(adopted.adopt(m + 8, kPage, &r)) << "a partial first page";
    EXPECT_FALSE(adopted.adopt(m, kPage + 8, &r)) << "a partial last page";
    EXPECT_FALSE(adopted.adopt(m, 0, &r));
    char *ro = static_cast<char *>(mmap(nullptr, kPage, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(ro, MAP_FAILED);
    EXPECT_FALSE(adopted.adopt(ro, kPage, &r)) << "read-only memory";
    munmap(ro, kPage);
    ASSERT_TRUE(adopted.adopt(m, kPage, &r));
    EXPECT_FALSE(adopted.adopt(m, 2 * kPage, &r)) << "partly adopted already";
    munmap(m, 2 * kPage);
}

// After fork() the child must have private memory there, as it had before adoption: shared
// heap pages would let parent and child overwrite each other's allocations.
TEST(SharedPages, AForkedChildGetsPrivateCopies) {
    char *m = map_anonymous(2 * kPage);
    ASSERT_NE(m, nullptr);
    std::memset(m, 'p', 2 * kPage);
    AdoptedPages adopted;
    SharedRange r;
    ASSERT_TRUE(adopted.adopt(m, 2 * kPage, &r));
    EXPECT_TRUE(in_child([&] {
        const bool copied = m[0] == 'p' && m[2 * kPage - 1] == 'p';
        std::memset(m, 'c', 2 * kPage);
        return copied;
    })) << "the child did not see the contents";
    EXPECT_EQ(m[0], 'p') << "the child's write reached the parent";
    EXPECT_EQ(m[2 * kPage - 1], 'p');
    munmap(m, 2 * kPage);
}

// The application may free adopted memory and get new memory at the same address: it is
// adopted afresh, not answered with the old file, which no longer backs that address.
TEST(SharedPages, MemoryMappedAgainWhereAdoptedPagesWereIsAdoptedAfresh) {
    char *m = map_anonymous(2 * kPage);
    ASSERT_NE(m, nullptr);
    AdoptedPages adopted;
    SharedRange first, second;
    ASSERT_TRUE(adopted.adopt(m, 2 * kPage, &first));
    ASSERT_EQ(munmap(m, 2 * kPage), 0);
    ASSERT_EQ(map_anonymous(2 * kPage, m), m);
    std::memset(m, 'n', 2 * kPage);
    ASSERT_TRUE(adopted.adopt(m, 2 * kPage, &second));
    EXPECT_NE(second.ino, first.ino);
    PeerPages peer;
    char *view = peer.map(getpid(), second.fd, second.ino, second.file_len);
    ASSERT_NE(view, nullptr);
    EXPECT_EQ(view[kPage], 'n');
    view[0] = 'v';
    EXPECT_EQ(m[0], 'v');
    munmap(m, 2 * kPage);
}

// Issue 58: a buffer registered for every message (an MPI library's send and receive buffers)
// is copied into a file once. After the last release the pages stay adopted, their file open,
// until the application unmaps them: adopting them again is answered from the same file with
// no copy, and a forked child still gets private copies.
TEST(SharedPages, ReleasedPagesStayAdoptedAndAreAdoptedAgainWithoutACopyAndStayPrivateInAChild) {
    char *m = map_anonymous(2 * kPage);
    ASSERT_NE(m, nullptr);
    std::memset(m, 'r', 2 * kPage);
    AdoptedPages adopted;
    SharedRange first, again, second;
    ASSERT_TRUE(adopted.adopt(m, 2 * kPage, &first));
    ASSERT_TRUE(adopted.adopt(m, kPage, &again));  // a second user of the same file
    EXPECT_EQ(again.ino, first.ino);
    adopted.release(first.fd);
    EXPECT_TRUE(adopted.covers(m, 8)) << "still in use by the second";
    adopted.release(again.fd);
    EXPECT_TRUE(adopted.covers(m, 8)) << "released, but still mapped: kept";
    EXPECT_EQ(m[kPage], 'r');
    EXPECT_TRUE(in_child([&] {
        const bool copied = m[0] == 'r';
        std::memset(m, 'c', 2 * kPage);
        return copied;
    }));
    EXPECT_EQ(m[0], 'r') << "the child's write reached the parent";
    const uint64_t versions = adopted.version();
    for (int i = 0; i < 100; ++i) {  // what an MPI ping-pong does with its buffer
        ASSERT_TRUE(adopted.adopt(m, 2 * kPage, &second));
        EXPECT_EQ(second.ino, first.ino);
        EXPECT_EQ(second.fd, first.fd);
        adopted.release(second.fd);
    }
    EXPECT_EQ(adopted.stats().adoptions, 1u);
    EXPECT_EQ(adopted.stats().bytes_copied, 2 * kPage);
    EXPECT_EQ(adopted.stats().reused, 101u);
    EXPECT_EQ(adopted.version(), versions) << "peers would drop their mappings for nothing";
    ASSERT_TRUE(adopted.adopt(m, 2 * kPage, &second));
    PeerPages peer;
    char *view = peer.map(getpid(), second.fd, second.ino, second.file_len);
    ASSERT_NE(view, nullptr);
    EXPECT_EQ(view[2 * kPage - 1], 'r');
    view[0] = 'v';
    EXPECT_EQ(m[0], 'v');
    adopted.release(second.fd);
    peer.retain({});
    // Unmapped by the application: forgotten, the file closed.
    ASSERT_EQ(munmap(m, 2 * kPage), 0);
    char *other = map_anonymous(kPage);
    ASSERT_NE(other, nullptr);
    adopted.release(-1);  // any call looks at what went
    EXPECT_FALSE(adopted.covers(m, 8));
    EXPECT_NE(adopted.version(), versions);
    munmap(other, kPage);
}

// A larger request over ranges adopted before that no entry uses (a registration cache that
// grows its region as the messages grow) adopts the union anew, contents kept; over one in use
// it is refused, and the range in use is unchanged.
TEST(SharedPages, ARequestOverIdleAdoptedRangesAdoptsTheirUnionAndOneOverARangeInUseIsRefused) {
    char *m = map_anonymous(8 * kPage);
    ASSERT_NE(m, nullptr);
    for (size_t i = 0; i < 8; ++i) std::memset(m + i * kPage, 'a' + int(i), kPage);
    AdoptedPages adopted;
    SharedRange small, mid, big, held, refused;
    ASSERT_TRUE(adopted.adopt(m + kPage, kPage, &small));
    adopted.release(small.fd);
    ASSERT_TRUE(adopted.adopt(m + 4 * kPage, 2 * kPage, &mid));
    adopted.release(mid.fd);
    ASSERT_TRUE(adopted.adopt(m, 5 * kPage, &big));  // over the first, partly over the second
    EXPECT_EQ(big.file_offset, 0u);
    EXPECT_EQ(big.file_len, 6 * kPage) << "the union of the request and the idle ranges it meets";
    EXPECT_NE(big.ino, small.ino);
    for (size_t i = 0; i < 8; ++i) ASSERT_EQ(m[i * kPage + 7], 'a' + int(i)) << "page " << i;
    PeerPages peer;
    char *view = peer.map(getpid(), big.fd, big.ino, big.file_len);
    ASSERT_NE(view, nullptr);
    view[5 * kPage] = 'Z';
    EXPECT_EQ(m[5 * kPage], 'Z');
    ASSERT_TRUE(adopted.adopt(m + 6 * kPage, 2 * kPage, &held));  // in use
    EXPECT_FALSE(adopted.adopt(m + 4 * kPage, 4 * kPage, &refused)) << "overlaps two ranges in use";
    adopted.release(held.fd);
    EXPECT_EQ(m[6 * kPage], 'g');
    adopted.release(big.fd);
    peer.retain({});
    munmap(m, 8 * kPage);
}

// A fork after the application unmapped adopted pages and mapped something else there leaves
// the new mapping alone in the child (the fork handler once overwrote it with the old file's
// contents: UCX's tests crashed in their forked peers).
TEST(SharedPages, AForkAfterTheApplicationUnmappedAdoptedPagesLeavesWhatIsThereNow) {
    char *m = map_anonymous(2 * kPage);
    ASSERT_NE(m, nullptr);
    std::memset(m, 'o', 2 * kPage);
    AdoptedPages adopted;
    SharedRange r;
    ASSERT_TRUE(adopted.adopt(m, 2 * kPage, &r));
    ASSERT_EQ(munmap(m, 2 * kPage), 0);
    ASSERT_EQ(map_anonymous(2 * kPage, m), m);
    std::memset(m, 'z', 2 * kPage);
    ASSERT_EQ(mprotect(m, 2 * kPage, PROT_READ), 0);
    EXPECT_TRUE(in_child([&] { return m[0] == 'z' && m[2 * kPage - 1] == 'z'; }))
        << "the child's memory was overwritten";
    munmap(m, 2 * kPage);
}

// An application that registers many separate buffers (UCT's gtest posts a thousand tagged
// receives, each in its own mapping) has each adopted, beyond the 256 ranges the fork table
// once held, and a forked child still gets private copies of every one.
TEST(SharedPages, ManySeparateRangesAreAllAdoptedAndAForkedChildGetsPrivateCopiesOfEach) {
    constexpr int kRanges = 600;
    // Every other page, so that each range is a mapping of its own.
    char *area = map_anonymous(2 * kRanges * kPage);
    ASSERT_NE(area, nullptr);
    AdoptedPages adopted;
    for (int i = 0; i < kRanges; ++i) {
        char *m = area + 2 * size_t(i) * kPage;
        std::memset(m, 'a' + i % 26, kPage);
        SharedRange r;
        ASSERT_TRUE(adopted.adopt(m, kPage, &r)) << "range " << i;
        adopted.release(r.fd);
    }
    EXPECT_EQ(adopted.stats().adoptions, uint64_t(kRanges));
    EXPECT_TRUE(in_child([&] {
        for (int i = 0; i < kRanges; ++i) {
            char *m = area + 2 * size_t(i) * kPage;
            if (m[0] != 'a' + i % 26 || m[kPage - 1] != 'a' + i % 26) return false;
            m[0] = '!';
        }
        return true;
    })) << "the child did not see the contents";
    for (int i = 0; i < kRanges; ++i) ASSERT_EQ(area[2 * size_t(i) * kPage], 'a' + i % 26) << "range " << i;
    munmap(area, 2 * kRanges * kPage);
}
