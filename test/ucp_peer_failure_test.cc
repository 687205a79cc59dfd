// UCP's peer-failure mode over UCX_TLS=portals (the UCT face's error handling): run by
// test/run_peer_failure.sh under `ptlrun -n 2` with the module preloaded (env.sh). Rank 1,
// the survivor, connects with UCP_ERR_HANDLING_MODE_PEER, proves the path with a small
// message, then starts a 64 MiB tagged send (rendezvous: the victim holds the announcement,
// the data waits to be fetched) and many eager sends. Rank 0, the victim, receives the eager
// messages and kills itself once the announcement has arrived, so the survivor's engine has
// nothing left to fail: the UCT face must learn of the death from the wire. The survivor's requests must all
// complete with an error, the ep's error callback must report UCS_ERR_ENDPOINT_TIMEOUT, later sends must fail
// at once, and everything must close cleanly, within the bound (PTL_TEST_FAILURE_BOUND_S, default 5 s).
#include <portals4_rt.h>
#include <ucp/api/ucp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "peer_failure_common.h"

namespace {

using namespace ptltest;

#define CHECK(cond)                                                                                      \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            std::fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", ptlrt_rank(), __FILE__, __LINE__, \
                         #cond);                                                                         \
            std::exit(1);                                                                                \
        }                                                                                                \
    } while (0)

constexpr ucp_tag_t kSmokeTag = 1, kBigTag = 2, kEagerTag = 3;
constexpr size_t kBig = size_t(64) << 20;
constexpr int kEagerSends = 64;

// Worker addresses are larger than one ptlrt_allgather slot: gathered in slices.
std::vector<std::vector<char>> gather_addresses(const void *addr, size_t len) {
    const int n = ptlrt_size();
    std::vector<uint64_t> lens(static_cast<size_t>(n));
    const uint64_t mine = len;
    CHECK(ptlrt_allgather(&mine, lens.data(), sizeof mine) == 0);
    uint64_t longest = 0;
    for (uint64_t l : lens) longest = l > longest ? l : longest;
    std::vector<std::vector<char>> all(static_cast<size_t>(n), std::vector<char>(longest));
    std::vector<char> padded(longest);
    std::memcpy(padded.data(), addr, len);
    std::vector<char> slice(size_t(n) * PTLRT_MAX_GATHER);
    for (uint64_t off = 0; off < longest; off += PTLRT_MAX_GATHER) {
        const size_t chunk = size_t(std::min<uint64_t>(PTLRT_MAX_GATHER, longest - off));
        CHECK(ptlrt_allgather(padded.data() + off, slice.data(), chunk) == 0);
        for (int r = 0; r < n; ++r)
            std::memcpy(all[size_t(r)].data() + off, slice.data() + size_t(r) * chunk, chunk);
    }
    return all;
}

struct EpError {
    int count = 0;
    ucs_status_t status = UCS_OK;
};

void on_ep_error(void *arg, ucp_ep_h, ucs_status_t status) {
    auto *e = static_cast<EpError *>(arg);
    ++e->count;
    e->status = status;
}

ucs_status_t wait(ucp_worker_h w, void *req, double deadline) {
    if (!UCS_PTR_IS_PTR(req)) return UCS_PTR_STATUS(req);
    ucs_status_t s;
    while ((s = ucp_request_check_status(req)) == UCS_INPROGRESS && now_s() < deadline)
        ucp_worker_progress(w);
    ucp_request_free(req);
    return s;
}

void *send(ucp_ep_h ep, const void *buf, size_t len, ucp_tag_t tag) {
    ucp_request_param_t p{};
    return ucp_tag_send_nbx(ep, buf, len, tag, &p);
}

void victim(ucp_worker_h w) {
    char small[8];
    ucp_request_param_t p{};
    void *r = ucp_tag_recv_nbx(w, small, sizeof small, kSmokeTag, ~ucp_tag_t(0), &p);
    CHECK(wait(w, r, now_s() + 30) == UCS_OK);
    CHECK(ptlrt_barrier() == 0);  // the survivor starts its sends
    // Every eager message arrives (so nothing of the survivor's is left in its engine), then
    // the victim dies once the rendezvous announcement is here: its data is still to be
    // fetched, and only the peer's death can end that send.
    std::vector<char> msg(1024);
    for (int i = 0; i < kEagerSends; ++i)
        CHECK(wait(w, ucp_tag_recv_nbx(w, msg.data(), msg.size(), kEagerTag, ~ucp_tag_t(0), &p),
                   now_s() + 30) == UCS_OK);
    ucp_tag_recv_info_t info;
    const double deadline = now_s() + 30;
    while (!ucp_tag_probe_nb(w, kBigTag, ~ucp_tag_t(0), 0, &info) && now_s() < deadline)
        ucp_worker_progress(w);
    CHECK(info.length == kBig);
    die_as_victim();
}

void survivor(ucp_worker_h w, ucp_ep_h ep, EpError &err) {
    const char small[8] = "ping";
    CHECK(wait(w, send(ep, small, sizeof small, kSmokeTag), now_s() + 30) == UCS_OK);
    std::vector<char> big(kBig, 'b');
    CHECK(ptlrt_barrier() == 0);
    void *big_req = send(ep, big.data(), big.size(), kBigTag);
    CHECK(UCS_PTR_IS_PTR(big_req));  // a rendezvous cannot complete before the data is fetched
    std::vector<void *> eager;
    std::vector<char> msg(1024, 'e');
    for (int i = 0; i < kEagerSends; ++i) eager.push_back(send(ep, msg.data(), msg.size(), kEagerTag));

    const double start = now_s(), deadline = start + failure_bound_seconds();
    const ucs_status_t big_status = wait(w, big_req, deadline);
    while (err.count == 0 && now_s() < deadline) ucp_worker_progress(w);
    const double took = now_s() - start;
    int eager_failed = 0;
    for (void *r : eager) eager_failed += UCS_STATUS_IS_ERR(wait(w, r, deadline));
    std::printf(
        "survivor: peer failure noticed %.2f s after the sends started: rendezvous send %s, error callback "
        "%d x %s, "
        "%d of %d eager sends failed\n",
        took, ucs_status_string(big_status), err.count, ucs_status_string(err.status), eager_failed,
        kEagerSends);
    CHECK(eager_failed == 0);  // all delivered before the victim died
    CHECK(err.count == 1);
    CHECK(err.status == UCS_ERR_ENDPOINT_TIMEOUT);
    CHECK(big_status == UCS_ERR_ENDPOINT_TIMEOUT || big_status == UCS_ERR_CANCELED);
    // A failed ep fails what comes after at once.
    CHECK(UCS_STATUS_IS_ERR(wait(w, send(ep, small, sizeof small, kSmokeTag), now_s() + 1)));
    ucp_request_param_t close{};
    close.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    close.flags = UCP_EP_CLOSE_FLAG_FORCE;
    const ucs_status_t closed = wait(w, ucp_ep_close_nbx(ep, &close), now_s() + failure_bound_seconds());
    CHECK(closed == UCS_OK || UCS_STATUS_IS_ERR(closed));
    CHECK(closed != UCS_INPROGRESS);
}

}  // namespace

int main() {
    CHECK(ptlrt_init() == 0);
    CHECK(ptlrt_size() == 2);
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    ucp_context_h ctx;
    CHECK(ucp_init(&params, nullptr, &ctx) == UCS_OK);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    ucp_worker_h w;
    CHECK(ucp_worker_create(ctx, &wp, &w) == UCS_OK);
    ucp_address_t *addr;
    size_t addr_len;
    CHECK(ucp_worker_get_address(w, &addr, &addr_len) == UCS_OK);
    const auto addrs = gather_addresses(addr, addr_len);
    ucp_worker_release_address(w, addr);

    if (ptlrt_rank() == 0) {
        victim(w);
        return 1;  // not reached
    }
    EpError err;
    ucp_ep_params_t ep_params{};
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                           UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep_params.address = reinterpret_cast<const ucp_address_t *>(addrs[0].data());
    ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep_params.err_handler.cb = on_ep_error;
    ep_params.err_handler.arg = &err;
    ucp_ep_h ep;
    CHECK(ucp_ep_create(w, &ep_params, &ep) == UCS_OK);
    survivor(w, ep, err);
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
    ptlrt_fini();
    return 0;
}
