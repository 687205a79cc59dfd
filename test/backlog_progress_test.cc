// Messages that found the receiver's shm ring full wait in the sender's backlog, and only the
// sender's own progress moves them on: no doorbell rings for them. When the application
// stops calling Portals after a burst, its progress thread must do it, even if it was asleep
// waiting for traffic when the backlog began (it slept through whole bursts: a 200 ms stall,
// PTL_LIVENESS_MS, in half of bench/ptl_pingpong's message-rate runs). The puts arrive in
// the order they were made, whether they went straight into the ring (common_put.cc) or
// waited in the backlog: a put never overtakes the backlog. The tcp wire holds a burst's small
// sends back too (corked, tcp_wire.h): they must leave by their deadline the same way.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "ptl_test_util.h"

using namespace ptltest;

namespace {

constexpr int kPuts = 2000;  // far more than the receiver's 64-cell ring holds
constexpr int kOvertakePuts = 100000;  // many rounds of the ring filling and draining (20,000 missed
                                       // a put sent past the backlog 2 runs in 3)
constexpr ptl_pt_index_t kPt = 4;

// The sender: opens an NI (its progress thread then falls asleep for want of traffic), learns
// the target, puts kPuts messages to it, tells the parent, and calls nothing more until told
// to finish. Forked before the parent opens its NI: a child of a process with an open NI
// would share it.
[[noreturn]] void sender(int to_parent, int from_parent, int puts = kPuts) {
    setenv("PTL_LIVENESS_MS", "60000", 1);  // the sleep a missed wake-up would last
    unsetenv("PTL_PROGRESS");
    ptl_handle_ni_t ni;
    ptl_handle_md_t md;
    static char buf[8];
    if (PtlInit() != PTL_OK || PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_NO_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY,
                                         nullptr, nullptr, &ni) != PTL_OK)
        _exit(1);
    const ptl_md_t d = md_desc(buf, sizeof buf, PTL_EQ_NONE, PTL_CT_NONE, 0);
    if (PtlMDBind(ni, &d, &md) != PTL_OK) _exit(1);
    ptl_process_t target;
    if (read(from_parent, &target, sizeof target) != ssize_t(sizeof target)) _exit(1);
    // The first put opens the way (a tcp connection), then the progress thread has long enough
    // to go to sleep before the rest.
    if (PtlPut(md, 0, sizeof buf, PTL_NO_ACK_REQ, target, kPt, 0, 0, nullptr, 0) != PTL_OK) _exit(1);
    usleep(100000);
    for (int i = 1; i < puts; ++i)
        if (PtlPut(md, 0, sizeof buf, PTL_NO_ACK_REQ, target, kPt, 0, 0, nullptr, ptl_hdr_data_t(i)) !=
            PTL_OK)
            _exit(1);
    char c = 'p';
    if (write(to_parent, &c, 1) != 1 || read(from_parent, &c, 1) != 1) _exit(1);
    PtlMDRelease(md);
    PtlNIFini(ni);
    PtlFini();
    _exit(0);
}

// The receiver (this process) and a forked sender of `puts` puts: a small ring, and no
// progress thread of its own (manual progress), so only its own calls take messages out of
// its ring. Each put carries its index in hdr_data; the receiver's events say the order.
class Burst {
public:
    // `wire`: PTL_WIRE for both processes; `cork_us`: the sender's PTL_TCP_CORK_US, if given.
    void start(int puts, const char *wire = "shm", const char *cork_us = nullptr) {
        setenv("PTL_WIRE", wire, 1);
        if (cork_us) setenv("PTL_TCP_CORK_US", cork_us, 1);
        ASSERT_EQ(pipe(up_), 0);
        ASSERT_EQ(pipe(down_), 0);
        child_ = fork();
        ASSERT_GE(child_, 0);
        if (child_ == 0) {
            close(up_[0]);
            close(down_[1]);
            sender(up_[1], down_[0], puts);
        }
        close(up_[1]);
        close(down_[0]);
        unsetenv("PTL_TCP_CORK_US");
        setenv("PTL_SHM_CELLS", "64", 1);
        setenv("PTL_PROGRESS", "manual", 1);
        ASSERT_EQ(PtlInit(), PTL_OK);
        unsetenv("PTL_SHM_CELLS");
        unsetenv("PTL_PROGRESS");
        unsetenv("PTL_WIRE");
        ASSERT_EQ(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_NO_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, nullptr,
                            nullptr, &ni_),
                  PTL_OK);
        ptl_process_t self{};
        ASSERT_EQ(PtlGetPhysId(ni_, &self), PTL_OK);
        ASSERT_EQ(PtlCTAlloc(ni_, &ct_), PTL_OK);
        ASSERT_EQ(PtlEQAlloc(ni_, ptl_size_t(puts) + 16, &eq_), PTL_OK);
        ASSERT_EQ(PtlPTAlloc(ni_, 0, eq_, kPt, &pt_), PTL_OK);
        static char rbuf[8];
        const ptl_le_t le =
            le_desc(rbuf, sizeof rbuf, PTL_LE_OP_PUT | PTL_LE_EVENT_CT_COMM | PTL_LE_EVENT_LINK_DISABLE, ct_);
        ASSERT_EQ(PtlLEAppend(ni_, pt_, &le, PTL_PRIORITY_LIST, nullptr, &le_), PTL_OK);
        ASSERT_EQ(write(down_[1], &self, sizeof self), ssize_t(sizeof self));
    }
    // Blocks until the sender has made every put (not until they arrived).
    void wait_sender_done() {
        char c;
        ASSERT_EQ(read(up_[0], &c, 1), 1) << "the sender failed";
    }
    // The next event, in put order (each waits up to 10 s, driving progress meanwhile).
    void expect_put(int i) {
        ptl_event_t ev;
        unsigned which;
        ASSERT_EQ(PtlEQPoll(&eq_, 1, 10000, &ev, &which), PTL_OK) << "put " << i << " never arrived";
        ASSERT_EQ(ev.type, PTL_EVENT_PUT) << i;
        ASSERT_EQ(ev.hdr_data, ptl_hdr_data_t(i)) << "a put arrived out of order";
    }
    ptl_handle_ct_t ct() const { return ct_; }
    void finish() {
        ASSERT_EQ(write(down_[1], "x", 1), 1);
        int status = 0;
        ASSERT_EQ(waitpid(child_, &status, 0), child_);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        close(up_[0]);
        close(down_[1]);
        EXPECT_EQ(PtlLEUnlink(le_), PTL_OK);
        EXPECT_EQ(PtlPTFree(ni_, pt_), PTL_OK);
        EXPECT_EQ(PtlEQFree(eq_), PTL_OK);
        EXPECT_EQ(PtlCTFree(ct_), PTL_OK);
        EXPECT_EQ(PtlNIFini(ni_), PTL_OK);
        PtlFini();
    }

private:
    int up_[2] = {-1, -1}, down_[2] = {-1, -1};
    pid_t child_ = -1;
    ptl_handle_ni_t ni_{};
    ptl_handle_ct_t ct_{};
    ptl_handle_eq_t eq_{};
    ptl_pt_index_t pt_ = 0;
    ptl_handle_le_t le_{};
};

}  // namespace

TEST(ProgressThread, MovesABacklogOnWhileTheApplicationIsAway) {
    Burst b;
    ASSERT_NO_FATAL_FAILURE(b.start(kPuts));
    // Nothing is taken out of the ring until the burst is over and the sender's backlog holds
    // the rest; the sender is away then, and only its progress thread can deliver the rest.
    ASSERT_NO_FATAL_FAILURE(b.wait_sender_done());
    const ptl_ct_event_t got = ct_wait(b.ct(), kPuts, 10000);
    EXPECT_EQ(got.success, ptl_size_t(kPuts));
    EXPECT_EQ(got.failure, 0u);
    for (int i = 0; i < kPuts; ++i) ASSERT_NO_FATAL_FAILURE(b.expect_put(i));
    b.finish();
}

// The receiver drains its ring while the burst goes on, so room appears while the sender's
// backlog still holds messages: a later put must still queue behind them (ShmWire::send_now
// refuses while there is a backlog), never go straight into the freed cells.
TEST(ProgressThread, PutsNeverOvertakeTheBacklog) {
    Burst b;
    ASSERT_NO_FATAL_FAILURE(b.start(kOvertakePuts));
    for (int i = 0; i < kOvertakePuts; ++i) ASSERT_NO_FATAL_FAILURE(b.expect_put(i));
    ASSERT_NO_FATAL_FAILURE(b.wait_sender_done());
    b.finish();
}

// Over tcp the burst's small puts are corked (PTL_TCP_CORK_US: each is made within the window
// of the one before); the last cork must leave by its deadline although the application makes
// no further call and its progress thread sleeps for want of traffic (PTL_LIVENESS_MS=60000 in
// the sender: without the cork's wake-up the tail would wait up to a minute).
TEST(ProgressThread, SendsACorkedTcpBurstOnWhileTheApplicationIsAway) {
    Burst b;
    ASSERT_NO_FATAL_FAILURE(b.start(kPuts, "tcp", "1000"));
    ASSERT_NO_FATAL_FAILURE(b.wait_sender_done());
    for (int i = 0; i < kPuts; ++i) ASSERT_NO_FATAL_FAILURE(b.expect_put(i));
    b.finish();
}
