// The engine lock (util/futex_mutex.h): mutual exclusion under contention, and a waiter asleep
// on the futex woken by unlock (a lost wake-up would leave it asleep: the test gives up after
// 10 s rather than hang).
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../src/ptl/util/futex_mutex.h"

namespace {

using Clock = std::chrono::steady_clock;

// The scheduler state of thread `tid` of this process ('R', 'S', ...).
char thread_state(pid_t tid) {
    std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/stat");
    std::string line;
    std::getline(f, line);
    const size_t close = line.rfind(')');
    return close == std::string::npos || close + 2 >= line.size() ? '?' : line[close + 2];
}

}  // namespace

TEST(FutexMutex, ExcludesUnderContention) {
    ptl::FutexMutex mu;
    constexpr int kThreads = 4, kRounds = 100000;
    long counter = 0;  // plain: only the lock orders the increments
    std::atomic<int> inside{0}, overlaps{0}, ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&] {
            ready.fetch_add(1);
            while (ready.load() < kThreads) std::this_thread::yield();  // all start together
            for (int i = 0; i < kRounds; ++i) {
                std::lock_guard<ptl::FutexMutex> g(mu);
                if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
                ++counter;
                inside.fetch_sub(1);
            }
        });
    for (auto &t : threads) t.join();
    EXPECT_EQ(counter, long(kThreads) * kRounds);
    EXPECT_EQ(overlaps.load(), 0);
}

TEST(FutexMutex, UnlockWakesSleepingWaiters) {
    ptl::FutexMutex mu;
    for (int round = 0; round < 20; ++round) {
        mu.lock();
        constexpr int kWaiters = 2;
        std::atomic<pid_t> tids[kWaiters] = {};
        std::atomic<int> got{0};
        std::vector<std::thread> waiters;
        for (int i = 0; i < kWaiters; ++i)
            waiters.emplace_back([&, i] {
                tids[i].store(pid_t(syscall(SYS_gettid)));
                std::lock_guard<ptl::FutexMutex> g(mu);
                got.fetch_add(1);
            });
        auto deadline = Clock::now() + std::chrono::seconds(10);
        auto asleep = [&] {
            for (auto &t : tids)
                if (t.load() == 0 || thread_state(t.load()) != 'S') return false;
            return true;
        };
        while (!asleep() && Clock::now() < deadline) std::this_thread::yield();
        ASSERT_LT(Clock::now(), deadline) << "the waiters never went to sleep";
        mu.unlock();
        deadline = Clock::now() + std::chrono::seconds(10);
        while (got.load() < kWaiters && Clock::now() < deadline) std::this_thread::yield();
        if (got.load() < kWaiters) {
            // Joining would hang on the sleeper nobody woke.
            std::fprintf(stderr, "FutexMutex: round %d: %d of %d waiters never woke\n", round, got.load(),
                         kWaiters);
            std::_Exit(1);
        }
        for (auto &t : waiters) t.join();
    }
}
