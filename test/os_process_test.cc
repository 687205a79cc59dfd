// Peer liveness as the shm wire and ptlrun see it (src/ptl/wire/os_process.h). A zombie is a
// dead peer: launchers such as Hydra reap their ranks only when the whole job ends, and a
// peer counted alive until then would leave the survivors' operations pending (spec F1: a
// failed target must produce failure events, not a hang).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "../src/ptl/wire/os_process.h"

namespace {

// Waits (bounded) for `pid` to reach the wanted state, since exit and reap are asynchronous.
bool becomes_gone(pid_t pid, bool want) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (ptl::os_process_gone(pid) != want) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

}  // namespace

TEST(OsProcess, RunningProcessIsAlive) {
    EXPECT_FALSE(ptl::os_process_gone(getpid()));
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        pause();
        _exit(0);
    }
    EXPECT_FALSE(ptl::os_process_gone(child));
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
}

TEST(OsProcess, UnreapedZombieIsGone_F1) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) _exit(0);
    EXPECT_TRUE(becomes_gone(child, true)) << "exited child not seen as gone before it is reaped";
    EXPECT_EQ(kill(child, 0), 0) << "the child should still be an unreaped zombie";
    waitpid(child, nullptr, 0);
    EXPECT_TRUE(ptl::os_process_gone(child));
}
