// A peer killed in the middle of an RDMA transfer of the verbs wire (digest F1, N1): the
// survivor's engine must give up within twice the transfer deadline (PTL_VERBS_BULK_TIMEOUT_MS),
// report the delivery it could not finish as failed (PTL_NI_SEGV: the memory it had to reach
// is gone), count the peer as failed and stay usable. Run by test/run_verbs_guest.sh with
// `ptlrun -n 2`, the ranks on two soft-RoCE hosts, one case per job (--gtest_filter):
//   KilledDuringRdmaRead   the victim puts 256 MiB to the survivor, which pulls it by RDMA reads
//   KilledDuringRdmaWrite  the victim gets 256 MiB from the survivor, which writes it by RDMA
// The victim kills itself once its device has moved part of the data (its hw_counters in
// rdma statistic: packets it sent for a read, received for a write), so the kill lands in the middle
// whatever the speed of the machine, and leaves the time of the kill in PTL_TEST_KILL_STAMP
// (both hosts are namespaces of one kernel: one monotonic clock).
#include <portals4_ext.h>
#include <portals4_rt.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "peer_failure_common.h"
#include "ptl_test_util.h"

using namespace ptltest;

namespace {

constexpr size_t kBig = size_t(256) << 20;
constexpr ptl_pt_index_t kPt = 7;
constexpr uint64_t kPacketsBeforeKill = 4096;  // about 16 MiB of the 256 at rxe's 4 KiB MTU

double deadline_s() {
    const char *v = std::getenv("PTL_VERBS_BULK_TIMEOUT_MS");
    return (v ? std::atof(v) : 10000.0) / 1000.0;
}

// A counter of the victim's RDMA device (PTL_VERBS_DEVICE, name[:port]) as iproute2's rdma
// tool reads it (by netlink: a network namespace's own sysfs shows no hw_counters); -1 when
// unreadable.
long long device_counter(const char *name) {
    const char *d = std::getenv("PTL_VERBS_DEVICE");
    if (!d) return -1;
    std::string link(d);
    if (link.find(':') == std::string::npos) link += ":1";
    link[link.find(':')] = '/';
    const std::string v = word_after("rdma statistic show link " + link + " 2>/dev/null", name);
    return v.empty() ? -1 : std::atoll(v.c_str());
}

[[noreturn]] void die_once_moved(const char *counter, long long base) {
    const double give_up = now_s() + 60;
    for (;;) {
        const long long v = device_counter(counter);
        if (v >= base + static_cast<long long>(kPacketsBeforeKill)) break;
        if (now_s() > give_up) {
            std::fprintf(stderr, "victim: %s rose from %lld to %lld in 60 s: the transfer never started\n",
                         counter, base, v);
            std::exit(3);
        }
    }
    if (const char *stamp = std::getenv("PTL_TEST_KILL_STAMP")) {
        std::ofstream f(stamp);
        f.precision(17);
        f << now_s() << '\n';
    }
    die_as_victim();
}

double kill_time() {
    const char *stamp = std::getenv("PTL_TEST_KILL_STAMP");
    std::ifstream f(stamp ? stamp : "");
    double t = 0;
    return f >> t ? t : 0;
}

struct Job {
    ptl_handle_ni_t ni = PTL_INVALID_HANDLE;
    ptl_process_t ids[2]{};
    ptl_handle_eq_t eq = PTL_INVALID_HANDLE;
};

Job start() {
    Job j;
    EXPECT_EQ(PtlInit(), PTL_OK);
    EXPECT_EQ(
        PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, nullptr, nullptr, &j.ni),
        PTL_OK);
    EXPECT_EQ(PtlEQAlloc(j.ni, 64, &j.eq), PTL_OK);
    ptl_pt_index_t pt;
    EXPECT_EQ(PtlPTAlloc(j.ni, 0, j.eq, kPt, &pt), PTL_OK);
    EXPECT_EQ(ptlrt_exchange_ids(j.ni, j.ids), PTL_OK);
    return j;
}

// The victim's first message sets up the RDMA connection: only a connected peer gets the
// large operation as a rendezvous.
void connect_from_victim(const Job &j) {
    char word[8] = {};
    ptl_md_t md = md_desc(word, sizeof word, j.eq);
    ptl_handle_md_t h;
    ASSERT_EQ(PtlMDBind(j.ni, &md, &h), PTL_OK);
    ASSERT_EQ(PtlPut(h, 0, sizeof word, PTL_ACK_REQ, j.ids[1], kPt, 1, 0, nullptr, 0), PTL_OK);
    for (int acked = 0; !acked;) {
        const ptl_event_t ev = next_event(j.eq, 30000);
        ASSERT_NE(ev.type, 0xff) << "no ACK for the connecting put";
        acked = ev.type == PTL_EVENT_ACK;
    }
    EXPECT_EQ(PtlMDRelease(h), PTL_OK);
}

// The survivor: `mem` exposed for the victim's large operation (match bits 0) and a word for
// its connecting put (match bits 1); waits for the large operation's event.
void survive(const Job &j, ptl_event_kind_t kind, unsigned op) {
    std::vector<char> mem(kBig, 's');
    char word[8];
    ptl_handle_me_t big, small;
    ptl_me_t me = me_desc(mem.data(), mem.size(), op | PTL_ME_USE_ONCE | PTL_ME_EVENT_LINK_DISABLE | PTL_ME_EVENT_UNLINK_DISABLE, 0);
    ASSERT_EQ(PtlMEAppend(j.ni, kPt, &me, PTL_PRIORITY_LIST, nullptr, &big), PTL_OK);
    me = me_desc(word, sizeof word, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE, 1);
    ASSERT_EQ(PtlMEAppend(j.ni, kPt, &me, PTL_PRIORITY_LIST, nullptr, &small), PTL_OK);
    ASSERT_EQ(ptlrt_barrier(), 0);  // exposed
    const ptl_event_t connected = next_event(j.eq, 30000);
    ASSERT_EQ(connected.type, PTL_EVENT_PUT);
    ASSERT_EQ(connected.match_bits, 1u);

    // Whatever comes, within the deadlines: the transfer's (the victim dies early in it) twice.
    const ptl_event_t ev = next_event(j.eq, ptl_time_t(120000));
    const double seen = now_s();
    ASSERT_EQ(ev.type, kind) << "no event for the interrupted transfer";
    EXPECT_EQ(ev.ni_fail_type, PTL_NI_SEGV) << "a transfer cut short must not count as delivered";
    const double killed = kill_time();
    ASSERT_GT(killed, 0) << "the victim left no kill time in PTL_TEST_KILL_STAMP";
    std::printf("peer failure noticed: the transfer failed %.3f s after the kill (deadline %.1f s)\n",
                seen - killed, deadline_s());
    EXPECT_LT(seen - killed, 2 * deadline_s());

    // Known dead now: a new operation to it fails at once, the engine goes on.
    EXPECT_EQ(PtlXPeerAlive(j.ni, j.ids[0]), 0);
    ptl_md_t md = md_desc(word, sizeof word, j.eq);
    ptl_handle_md_t h;
    ASSERT_EQ(PtlMDBind(j.ni, &md, &h), PTL_OK);
    const double t0 = now_s();
    ASSERT_EQ(PtlGet(h, 0, sizeof word, j.ids[0], kPt, 0, 0, nullptr), PTL_OK);
    const ptl_event_t reply = next_event(j.eq, 10000);
    EXPECT_EQ(reply.type, PTL_EVENT_REPLY);
    EXPECT_EQ(reply.ni_fail_type, PTL_NI_UNDELIVERABLE);
    EXPECT_LT(now_s() - t0, 1.0);
    EXPECT_EQ(PtlMDRelease(h), PTL_OK);
    EXPECT_EQ(PtlMEUnlink(small), PTL_OK);
}

void run(ptl_event_kind_t kind, unsigned op) {
    ASSERT_EQ(ptlrt_size(), 2) << "run with ptlrun -n 2";
    if (!std::getenv("PTL_VERBS_DEVICE")) GTEST_SKIP() << "needs the verbs wire (PTL_VERBS_DEVICE)";
    Job j = start();
    if (ptlrt_rank() == 1) {
        survive(j, kind, op);
    } else {
        std::vector<char> mem(kBig, 'v');
        ptl_md_t md = md_desc(mem.data(), mem.size(), j.eq);
        ptl_handle_md_t h;
        ASSERT_EQ(PtlMDBind(j.ni, &md, &h), PTL_OK);
        ASSERT_EQ(ptlrt_barrier(), 0);
        connect_from_victim(j);
        // A read: the survivor's device asks, ours answers with the data (packets we send).
        // A write: the data arrives (packets we receive).
        const char *counter = kind == PTL_EVENT_PUT ? "sent_pkts" : "rcvd_pkts";
        const long long base = device_counter(counter);
        ASSERT_GE(base, 0) << "no hw_counters/" << counter << " for PTL_VERBS_DEVICE";
        if (kind == PTL_EVENT_PUT)
            ASSERT_EQ(PtlPut(h, 0, kBig, PTL_ACK_REQ, j.ids[1], kPt, 0, 0, nullptr, 0), PTL_OK);
        else
            ASSERT_EQ(PtlGet(h, 0, kBig, j.ids[1], kPt, 0, 0, nullptr), PTL_OK);
        die_once_moved(counter, base);
    }
    EXPECT_EQ(PtlNIFini(j.ni), PTL_OK);
    PtlFini();
}

}  // namespace

TEST(BulkFailure, KilledDuringRdmaRead_F1) { run(PTL_EVENT_PUT, PTL_ME_OP_PUT); }

TEST(BulkFailure, KilledDuringRdmaWrite_F1) { run(PTL_EVENT_GET, PTL_ME_OP_GET); }

int main(int argc, char **argv) {
    ::testing::InitGoogleTest(&argc, argv);
    if (ptlrt_init() != 0) {
        std::fprintf(stderr, "bulk_failure_test: cannot join the ptlrun job\n");
        return 1;
    }
    return RUN_ALL_TESTS();
}
