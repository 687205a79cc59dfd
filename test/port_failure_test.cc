// The RDMA port of one host going down and coming back (verbs wire; digest F1, N1): the
// operations of the process on that host fail with error events instead of hanging, its peer
// counts as failed; once the port is active again the two reconnect by themselves and
// messages flow both ways. Once a QP is up the tcp connections between the two close
// (verbs_wire.h); the setup after the port's return opens one again, which closes too. Run by
// test/run_verbs_guest.sh with `ptlrun -n 2`, the ranks on two soft-RoCE hosts of
// contrib/guest-rxe-hosts.sh, whose RDMA links live in the initial network namespace: rank 0
// takes its own device's link down and up there (nsenter, as root), while the tcp wire's links
// (each host's eth0, which carries connection setup) stay up.
#include <portals4_ext.h>
#include <portals4_rt.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "peer_failure_common.h"
#include "ptl_test_util.h"

using namespace ptltest;

namespace {

constexpr ptl_pt_index_t kPt = 7;
// A port event is read at the next progress; without it the QP would notice only when its
// retries run out (PTL_VERBS_ACK_TIMEOUT: 7 x 1.07 s).
constexpr double kNoticeBoundS = 3;
constexpr double kReconnectBoundS = 30;  // the port's return, then a new QP by the tcp wire
constexpr double kControlCloseBoundS = 5;

// The network device under PTL_VERBS_DEVICE (name[:port]), as `rdma link` names it in the
// initial network namespace (in ours the netdev is not shown).
std::string netdev_of_rdma_device() {
    const char *d = std::getenv("PTL_VERBS_DEVICE");
    if (!d) return {};
    std::string dev(d);
    dev = dev.substr(0, dev.find(':'));
    return word_after("nsenter -t 1 -n rdma link show " + dev + "/1 2>/dev/null", "netdev");
}

// In the initial network namespace, where contrib/guest-rxe-hosts.sh puts the RDMA links.
bool set_link(const std::string &netdev, const char *state) {
    return std::system(("nsenter -t 1 -n ip link set dev " + netdev + " " + state).c_str()) == 0;
}

struct Job {
    ptl_handle_ni_t ni = PTL_INVALID_HANDLE;
    ptl_process_t ids[2]{};
    ptl_handle_eq_t eq = PTL_INVALID_HANDLE;
    ptl_handle_md_t md = PTL_INVALID_HANDLE;
    ptl_handle_me_t me = PTL_INVALID_HANDLE;
    char out[8] = {}, in[8] = {};
};

void start(Job &j) {
    ASSERT_EQ(PtlInit(), PTL_OK);
    ASSERT_EQ(
        PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, nullptr, nullptr, &j.ni),
        PTL_OK);
    ASSERT_EQ(PtlEQAlloc(j.ni, 256, &j.eq), PTL_OK);
    ptl_pt_index_t pt;
    ASSERT_EQ(PtlPTAlloc(j.ni, 0, j.eq, kPt, &pt), PTL_OK);
    ptl_me_t me = me_desc(j.in, sizeof j.in, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE, 1);
    ASSERT_EQ(PtlMEAppend(j.ni, kPt, &me, PTL_PRIORITY_LIST, nullptr, &j.me), PTL_OK);
    const ptl_md_t md = md_desc(j.out, sizeof j.out, j.eq);
    ASSERT_EQ(PtlMDBind(j.ni, &md, &j.md), PTL_OK);
    ASSERT_EQ(ptlrt_exchange_ids(j.ni, j.ids), PTL_OK);
}

// A put with an acknowledgement to `to`: the ACK's failure type, or -1 if none came within
// `bound_s` (the peer's PUT events are skipped).
int put_acked(const Job &j, const ptl_process_t &to, double bound_s) {
    if (PtlPut(j.md, 0, sizeof j.out, PTL_ACK_REQ, to, kPt, 1, 0, nullptr, 0) != PTL_OK) return -2;
    const double give_up = now_s() + bound_s;
    while (now_s() < give_up) {
        ptl_event_t ev{};
        unsigned which = 0;
        const int rc = PtlEQPoll(&j.eq, 1, 100, &ev, &which);
        if (rc == PTL_OK && ev.type == PTL_EVENT_ACK) return int(ev.ni_fail_type);
        // A put that failed at the start says so in its SEND event; its ACK follows.
    }
    return -1;
}

// Whether PtlXPeerAlive answers `alive` for `peer` within `bound_s`, driving progress while
// asking (a port event is read by progress).
bool peer_becomes(const Job &j, const ptl_process_t &peer, int alive, double bound_s) {
    const double give_up = now_s() + bound_s;
    do {
        if (PtlXPeerAlive(j.ni, peer) == alive) return true;
        PtlXProgress();
        ptl_event_t ev;
        PtlEQGet(j.eq, &ev);  // the peer's puts, if any
    } while (now_s() < give_up);
    return false;
}

// Whether the tcp wire's connections (setup of the QP) are all closed within `bound_s`.
bool control_connections_close(const Job &j, double bound_s) {
    const double give_up = now_s() + bound_s;
    ptlx_wire_usage_t u{};
    do {
        if (PtlXWireUsage(j.ni, &u) == PTL_OK && u.tcp_connections == 0) return true;
        PtlXProgress();
        ptl_event_t ev;
        PtlEQGet(j.eq, &ev);
    } while (now_s() < give_up);
    std::printf("tcp connections still open: %llu\n", (unsigned long long)u.tcp_connections);
    return false;
}

TEST(PortFailure, LinkDownFailsOperationsAndTheReturnReconnects_F1) {
    ASSERT_EQ(ptlrt_size(), 2) << "run with ptlrun -n 2";
    if (!std::getenv("PTL_VERBS_DEVICE")) GTEST_SKIP() << "needs the verbs wire (PTL_VERBS_DEVICE)";
    Job j;
    start(j);
    const int me = ptlrt_rank(), other = 1 - me;
    ASSERT_EQ(ptlrt_barrier(), 0);  // both exposed
    if (me == 0) {
        const std::string netdev = netdev_of_rdma_device();
        ASSERT_FALSE(netdev.empty()) << "no netdev under PTL_VERBS_DEVICE (rdma link show)";
        ASSERT_EQ(put_acked(j, j.ids[other], kReconnectBoundS), PTL_NI_OK) << "the first put (connection)";
        EXPECT_TRUE(control_connections_close(j, kControlCloseBoundS)) << "tcp kept after the QP came up";

        ASSERT_TRUE(set_link(netdev, "down")) << "cannot take " << netdev << " down";
        double t0 = now_s();
        const bool noticed = peer_becomes(j, j.ids[other], 0, kNoticeBoundS);
        std::printf("port down: peer failed after %.3f s\n", now_s() - t0);
        EXPECT_TRUE(noticed) << "the port went down and the peer still counts as alive";
        t0 = now_s();
        const int failed = put_acked(j, j.ids[other], kNoticeBoundS);
        EXPECT_NE(failed, -1) << "a put while the port is down got no answer: a hang";
        EXPECT_NE(failed, int(PTL_NI_OK)) << "a put while the port is down was acknowledged";
        std::printf("port down: a put failed (ni_fail_type %d) after %.3f s\n", failed, now_s() - t0);

        ASSERT_TRUE(set_link(netdev, "up")) << "cannot take " << netdev << " up";
        t0 = now_s();
        const bool back = peer_becomes(j, j.ids[other], 1, kReconnectBoundS);
        std::printf("port up: peer usable again after %.3f s\n", now_s() - t0);
        EXPECT_TRUE(back) << "the port is back and the peer still counts as failed";
        t0 = now_s();
        EXPECT_EQ(put_acked(j, j.ids[other], kReconnectBoundS), PTL_NI_OK) << "no reconnection";
        std::printf("port up: a put acknowledged after %.3f s\n", now_s() - t0);
        EXPECT_TRUE(control_connections_close(j, kControlCloseBoundS)) << "tcp kept after reconnecting";
    }
    ASSERT_EQ(ptlrt_barrier(), 0);  // rank 0 reconnected
    if (me == 1) {
        // Our old QP to rank 0 was replaced when it reconnected, or fails now and is replaced.
        EXPECT_EQ(put_acked(j, j.ids[other], kReconnectBoundS), PTL_NI_OK) << "no way back to rank 0";
        EXPECT_TRUE(control_connections_close(j, kControlCloseBoundS)) << "tcp kept after the QP came up";
    }
    ASSERT_EQ(ptlrt_barrier(), 0);
    EXPECT_EQ(PtlMEUnlink(j.me), PTL_OK);
    EXPECT_EQ(PtlMDRelease(j.md), PTL_OK);
    EXPECT_EQ(PtlNIFini(j.ni), PTL_OK);
    PtlFini();
}

}  // namespace

int main(int argc, char **argv) {
    ::testing::InitGoogleTest(&argc, argv);
    if (ptlrt_init() != 0) {
        std::fprintf(stderr, "port_failure_test: cannot join the ptlrun job\n");
        return 1;
    }
    return RUN_ALL_TESTS();
}
