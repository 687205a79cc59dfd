// A consumer that must also wait on file descriptors (the verbs completion channel, the tcp
// wire's sockets) cannot sleep on the ring's doorbell futex: it sleeps in poll() with a
// datagram socket named after its OS pid among the descriptors, and a producer that finds it
// asleep sends that socket a byte (the way UCX's mm transport wakes a peer). The name is in
// the abstract namespace, so nothing is left behind by a process that dies.
#pragma once

#include <sys/types.h>

#include <string>

namespace ptl::shm {

class WakeSocket {
public:
    WakeSocket() = default;
    WakeSocket(const WakeSocket &) = delete;
    WakeSocket &operator=(const WakeSocket &) = delete;
    ~WakeSocket();
    // Binds this process's socket; false (with the reason) if it cannot be had.
    bool open(std::string *err);
    int fd() const { return fd_; }
    // Reads what producers sent, so the next poll sleeps.
    void drain();
    // Wakes the process `os_pid` of this user sleeping on its socket; from any process.
    static void send_to(pid_t os_pid);

private:
    int fd_ = -1;
};

}  // namespace ptl::shm
