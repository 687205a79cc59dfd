// A process killed without finalizing leaves its receive ring in /dev/shm; the next process
// of the same user that opens an NI removes it (rings whose pid lock nobody holds), so
// killed ranks do not pile up shared memory (issue 4: "nothing leaks").
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "ptl_test_util.h"

namespace {

std::string ring_path(const ptl_process_t &id) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "/dev/shm/ptl4-%u-%08x-%u", unsigned(getuid()), id.phys.nid, id.phys.pid);
    return buf;
}

bool exists(const std::string &path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

}  // namespace

TEST(StaleRings, RingOfAKilledProcessIsRemovedByTheNextNIInit) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {  // opens an NI, reports its id, dies without a word
        ptl_handle_ni_t ni;
        ptl_process_t id{};
        if (PtlInit() != PTL_OK ||
            PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, nullptr, nullptr,
                      &ni) != PTL_OK ||
            PtlGetPhysId(ni, &id) != PTL_OK)
            _exit(1);
        if (write(fds[1], &id, sizeof id) != ssize_t(sizeof id)) _exit(1);
        raise(SIGKILL);
    }
    close(fds[1]);
    ptl_process_t dead{};
    ASSERT_EQ(read(fds[0], &dead, sizeof dead), ssize_t(sizeof dead));
    close(fds[0]);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status));
    const std::string ring = ring_path(dead);
    ASSERT_TRUE(exists(ring)) << ring << ": the killed process had no ring to leave";

    ASSERT_EQ(PtlInit(), PTL_OK);
    ptl_handle_ni_t ni;
    ASSERT_EQ(
        PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, nullptr, nullptr, &ni),
        PTL_OK);
    EXPECT_FALSE(exists(ring)) << ring << " left behind";
    ptl_process_t me{};
    ASSERT_EQ(PtlGetPhysId(ni, &me), PTL_OK);
    EXPECT_TRUE(exists(ring_path(me))) << "our own ring is not stale";
    EXPECT_EQ(PtlNIFini(ni), PTL_OK);
    PtlFini();
}
