// The engine lock (util/futex_mutex.h): mutual exclusion under contention, and waiters asleep
// on the futex woken by unlock (not by their 1 ms bound: a lost wake-up shows as that delay).
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
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

TEST(FutexMutex, UnlockWakesASleepingWaiter) {
    ptl::FutexMutex mu;
    std::vector<double> waits_us;
    for (int round = 0; round < 40; ++round) {
        mu.lock();
        std::atomic<pid_t> tid{0};
        std::atomic<bool> got{false};
        Clock::time_point got_at;
        std::thread waiter([&] {
            tid.store(pid_t(syscall(SYS_gettid)));
            mu.lock();
            got_at = Clock::now();
            got.store(true);
            mu.unlock();
        });
        const auto deadline = Clock::now() + std::chrono::seconds(10);
        while ((tid.load() == 0 || thread_state(tid.load()) != 'S') && Clock::now() < deadline)
            std::this_thread::yield();
        ASSERT_LT(Clock::now(), deadline) << "the waiter never went to sleep";
        const auto released = Clock::now();
        mu.unlock();
        waiter.join();
        ASSERT_TRUE(got.load());
        waits_us.push_back(std::chrono::duration<double, std::micro>(got_at - released).count());
    }
    std::sort(waits_us.begin(), waits_us.end());
    // Woken, a waiter runs within microseconds; left to its bound, after 1 ms.
    EXPECT_LT(waits_us[waits_us.size() / 2], 500.0) << "median wait after unlock";
}
