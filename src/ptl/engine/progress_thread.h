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
    // A waiter that slept on the wires leaves: poke() if we park for long meanwhile.
    void resume_if_long_parked();
    // Progress is due by `due_ns` (monotonic_ns) though nothing may arrive to wake us: the tcp
    // wire corked frames. Called under the engine lock.
    void flush_by(uint64_t due_ns);

private:
    void run(int cpu, int caller_cpu);
    bool recently_polled();
    // Waits (parked or asleep) unless progress fell due meanwhile; `wait` gets the futex value
    // park_word_ had before the check.
    template <class Wait>
    void wait_unless_due(Wait &&wait);
    Engine &engine_;
    std::atomic<bool> stop_{false};
    std::atomic<uint32_t> park_word_{0};
    std::atomic<uint64_t> flush_due_ns_{0};  // 0: nothing due
    std::atomic<bool> waiting_{false};
    std::atomic<bool> long_parked_{false};  // parked while every poller sleeps on the wires
    uint32_t seen_calls_ = 0;     // the engine's app_calls_ at this thread's last look
    uint64_t seen_calls_ns_ = 0;  // when that look found it changed
    std::thread thread_;
};

}  // namespace ptl
