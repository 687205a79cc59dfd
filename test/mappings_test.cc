// The process's mappings (src/ptl/util/mappings.h): what the direct path asks before it adopts
// pages. Both ways of reading them must agree; the query by address is the one that does not
// grow with the number of mappings.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../src/ptl/util/mappings.h"

using ptl::Mapping;

namespace {

const size_t kPage = size_t(sysconf(_SC_PAGESIZE));

std::string describe(const std::vector<Mapping> &ms) {
    std::string s;
    for (const Mapping &m : ms)
        s += std::to_string(m.lo) + "-" + std::to_string(m.hi) + " " + m.perms + " " +
             std::to_string(m.offset) + " " + std::to_string(m.inode) + " [" + m.name + "]\n";
    return s;
}

}  // namespace

// A private anonymous mapping, a shared memory file beside it, a hole, a read-only file
// mapping at an offset, the brk heap and the stack: both readers see the same mappings.
TEST(Mappings, TheQueryByAddressAndTheTextAgree) {
    char *area = static_cast<char *>(mmap(nullptr, 8 * kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(area, MAP_FAILED);
    ASSERT_NE(mmap(area, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
              MAP_FAILED);
    const int memfd = memfd_create("mappings-test", MFD_CLOEXEC);
    ASSERT_GE(memfd, 0);
    ASSERT_EQ(ftruncate(memfd, off_t(2 * kPage)), 0);
    ASSERT_NE(mmap(area + 2 * kPage, 2 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, memfd, 0),
              MAP_FAILED);
    ASSERT_EQ(munmap(area + 4 * kPage, kPage), 0);  // a hole
    const int file = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(file, 0);
    ASSERT_NE(mmap(area + 5 * kPage, kPage, PROT_READ, MAP_PRIVATE | MAP_FIXED, file, off_t(kPage)),
              MAP_FAILED);

    const uintptr_t base = reinterpret_cast<uintptr_t>(area);
    std::vector<Mapping> text;
    ASSERT_FALSE(ptl::read_mappings_as_text(base, base + 8 * kPage, &text, false)) << "the hole";
    ASSERT_EQ(text.size(), 2u) << describe(text);
    EXPECT_STREQ(text[0].perms, "rw-p");
    EXPECT_EQ(text[0].name, "");
    EXPECT_EQ(text[0].inode, 0u);
    EXPECT_STREQ(text[1].perms, "rw-s");
    EXPECT_EQ(text[1].name.rfind("/memfd:mappings-test", 0), 0u) << text[1].name;

    std::vector<Mapping> all_text;
    ASSERT_TRUE(ptl::read_mappings_as_text(base, base + 8 * kPage, &all_text, true));
    ASSERT_EQ(all_text.size(), 4u) << describe(all_text);  // the hole is no mapping
    EXPECT_EQ(all_text[2].offset, kPage);
    EXPECT_NE(all_text[2].inode, 0u);
    EXPECT_STREQ(all_text[2].perms, "r--p");
    EXPECT_STREQ(all_text[3].perms, "---p");

    const uintptr_t heap = reinterpret_cast<uintptr_t>(sbrk(0)) - 1;
    const uintptr_t stack = reinterpret_cast<uintptr_t>(&text);
    std::vector<Mapping> heap_text, stack_text;
    ptl::read_mappings_as_text(heap, heap + 1, &heap_text, false);
    ptl::read_mappings_as_text(stack, stack + 1, &stack_text, false);

    std::vector<Mapping> query, all_query, heap_query, stack_query;
    const int rc = ptl::read_mappings_by_query(base, base + 8 * kPage, &query, false);
    if (rc < 0) {
        // Linux before 6.11: the text is all there is, and read_mappings() reads it.
        std::vector<Mapping> chosen;
        EXPECT_FALSE(ptl::read_mappings(base, base + 8 * kPage, &chosen, false));
        EXPECT_EQ(describe(chosen), describe(text));
        GTEST_SKIP() << "this kernel has no PROCMAP_QUERY";
    }
    EXPECT_EQ(rc, 0) << "the hole";
    EXPECT_EQ(describe(query), describe(text));
    EXPECT_EQ(ptl::read_mappings_by_query(base, base + 8 * kPage, &all_query, true), 1);
    EXPECT_EQ(describe(all_query), describe(all_text));
    ptl::read_mappings_by_query(heap, heap + 1, &heap_query, false);
    ptl::read_mappings_by_query(stack, stack + 1, &stack_query, false);
    EXPECT_EQ(describe(heap_query), describe(heap_text));
    EXPECT_EQ(describe(stack_query), describe(stack_text));
    ASSERT_EQ(stack_query.size(), 1u);
    EXPECT_EQ(stack_query[0].name, "[stack]");

    std::vector<Mapping> chosen;
    EXPECT_FALSE(ptl::read_mappings(base, base + 8 * kPage, &chosen, false));
    EXPECT_EQ(describe(chosen), describe(text));
    munmap(area, 8 * kPage);
    close(file);
    close(memfd);
}
