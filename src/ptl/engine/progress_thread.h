// The per-process progress thread (application bypass, §1.6): it drives the engine while the
// application computes and sleeps on the shm doorbell when idle, so an idle process burns no
// core. While an application thread is itself polling in a wait call, the thread parks on a
// private futex instead, so senders need no wake-up system call.
#pragma once

#include <atomic>
#include <thread>

namespace ptl {

class Engine;

class ProgressThread {
public:
    ProgressThread(Engine &e, int cpu);
    ~ProgressThread();
    void poke();  // a poller left: take over again

private:
    void run(int cpu, int caller_cpu);
    bool recently_polled() const;
    Engine &engine_;
    std::atomic<bool> stop_{false};
    std::atomic<uint32_t> park_word_{0};
    std::thread thread_;
};

}  // namespace ptl
