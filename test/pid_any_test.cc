// PTL_PID_ANY never hands out physical pid 0. Open MPI's mtl portals4 publishes pid 0 for a
// peer when it runs on logical addressing, and its coll portals4 reads a physical pid of 0
// as that mark: it disqualifies itself on that rank alone, which then runs libnbc's
// collectives while the others run coll portals4's, and the job hangs in its first
// collective. Seen as an intermittent hang of MPI_Win_allocate in the Open MPI suite: the
// choice started at the OS pid modulo PTL_PID_MAX, so one process in 1024 was given 0.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "../src/ptl/runtime/identity.h"
#include "ptl_test_util.h"

namespace {

// A nid no interface of this host has, so no live process shares these pids and locks.
constexpr uint32_t kNid = 0x7f0000fe;

class PidAny : public ::testing::Test {
protected:
    void SetUp() override {
        // One lock fd per pid, PTL_PID_MAX of them, besides the test's own.
        rlimit r{};
        ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &r), 0);
        if (r.rlim_cur < 2 * PTL_PID_MAX && r.rlim_max >= 2 * PTL_PID_MAX) {
            r.rlim_cur = 2 * PTL_PID_MAX;
            ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &r), 0);
        }
        if (r.rlim_cur < 2 * PTL_PID_MAX) GTEST_SKIP() << "RLIMIT_NOFILE below " << 2 * PTL_PID_MAX;
    }
    void TearDown() override {
        for (int fd : held_) close(fd);
        for (uint32_t p = 0; p < PTL_PID_MAX; ++p) unlink(ptl::identity::lock_path(kNid, p).c_str());
    }
    // Holds pid `p` as another process would (its own lock on the pid's lock file).
    void hold(uint32_t p) {
        const int fd = open(ptl::identity::lock_path(kNid, p).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0) << "pid " << p;
        held_.push_back(fd);
    }
    std::vector<int> held_;
};

}  // namespace

TEST_F(PidAny, PidZeroIsNotGivenEvenWhenItIsTheOnlyFreeOne) {
    for (uint32_t p = 1; p < PTL_PID_MAX; ++p) hold(p);
    int fd = -1;
    std::string err;
    const int64_t got = ptl::identity::acquire_pid(kNid, PTL_PID_ANY, &fd, &err);
    EXPECT_EQ(got, -1) << "PTL_PID_ANY was given pid " << got;
    if (got >= 0) held_.push_back(fd);
}

TEST_F(PidAny, EveryOtherPidIsGivenWhenFree) {
    // Whatever this process's OS pid points at: the one free pid is found.
    for (uint32_t free_one : {1u, 2u, 511u, uint32_t(PTL_PID_MAX - 1)}) {
        for (int fd : held_) close(fd);
        held_.clear();
        for (uint32_t p = 1; p < PTL_PID_MAX; ++p)
            if (p != free_one) hold(p);
        int fd = -1;
        std::string err;
        EXPECT_EQ(ptl::identity::acquire_pid(kNid, PTL_PID_ANY, &fd, &err), int64_t(free_one)) << err;
        if (fd >= 0) held_.push_back(fd);
    }
}

TEST_F(PidAny, PidZeroAskedForByNumberIsGiven) {
    int fd = -1;
    std::string err;
    EXPECT_EQ(ptl::identity::acquire_pid(kNid, 0, &fd, &err), 0) << err;
    if (fd >= 0) held_.push_back(fd);
}
