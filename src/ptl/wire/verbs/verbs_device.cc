#include "verbs_device.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

namespace ptl::verbs {

namespace {

bool ipv4_mapped(const uint8_t *g) {
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::memcmp(g, prefix, sizeof prefix) == 0;
}

std::string errno_text(const char *what) {
    return std::string(what) + ": " + std::strerror(errno);
}

// RoCE v2 over IPv4 routes like the IP network it runs on; v2 over IPv6 next; v1 last.
int pick_gid(ibv_context *ctx, uint8_t port, int table_len) {
    // One call for the valid entries: a query per index was a system call each (rxe's table
    // has 1,024 slots, nearly all empty: ~80 ms of an emulated guest's start-up).
    std::vector<ibv_gid_entry> entries(size_t(std::max(table_len, 1)) * 2);
    ssize_t n = ibv_query_gid_table(ctx, entries.data(), entries.size(), 0);
    if (n < 0) {  // a provider without the table query: one entry at a time
        n = 0;
        for (int i = 0; i < table_len; ++i)
            if (ibv_query_gid_ex(ctx, port, uint32_t(i), &entries[size_t(n)], 0) == 0) ++n;
    }
    int best = -1, best_rank = -1;
    for (ssize_t i = 0; i < n; ++i) {
        const ibv_gid_entry &e = entries[size_t(i)];
        if (e.port_num != port) continue;
        int rank = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? (ipv4_mapped(e.gid.raw) ? 3 : 2) : 1;
        if (rank > best_rank) {
            best = int(e.gid_index);
            best_rank = rank;
        }
    }
    return best;
}

}  // namespace

Device *Device::open(const std::string &spec, int gid_index, std::string *err) {
    std::string want = spec;
    int want_port = 0;
    if (auto colon = spec.rfind(':'); colon != std::string::npos) {
        want = spec.substr(0, colon);
        want_port = std::atoi(spec.c_str() + colon + 1);
    }
    int n = 0;
    ibv_device **list = ibv_get_device_list(&n);
    if (!list) {
        *err = errno_text("ibv_get_device_list");
        return nullptr;
    }
    std::unique_ptr<Device> d(new Device);
    for (int i = 0; i < n && !d->ctx_; ++i) {
        const char *name = ibv_get_device_name(list[i]);
        if (!want.empty() && want != name) continue;
        ibv_context *ctx = ibv_open_device(list[i]);
        if (!ctx) continue;
        ibv_device_attr da{};
        if (ibv_query_device(ctx, &da) != 0) {
            ibv_close_device(ctx);
            continue;
        }
        for (int p = 1; p <= da.phys_port_cnt; ++p) {
            if (want_port && p != want_port) continue;
            ibv_port_attr pa{};
            if (ibv_query_port(ctx, uint8_t(p), &pa) != 0 || pa.state != IBV_PORT_ACTIVE) continue;
            d->ctx_ = ctx;
            d->name_ = name;
            d->port_ = uint8_t(p);
            d->addr_.link_layer = pa.link_layer;
            d->addr_.mtu = uint8_t(pa.active_mtu);
            d->addr_.lid = pa.lid;
            d->max_rd_atom_ = uint8_t(std::clamp(da.max_qp_rd_atom, 1, 16));
            d->max_init_rd_atom_ = uint8_t(std::clamp(da.max_qp_init_rd_atom, 1, 16));
            d->atomics_ = da.atomic_cap != IBV_ATOMIC_NONE;
            d->gid_index_ = gid_index >= 0 ? gid_index : pick_gid(ctx, uint8_t(p), pa.gid_tbl_len);
            break;
        }
        if (!d->ctx_) ibv_close_device(ctx);
    }
    ibv_free_device_list(list);
    if (!d->ctx_) {
        *err = want.empty() ? "no RDMA device with an active port"
                            : "RDMA device " + spec + ": not found or no active port";
        return nullptr;
    }
    if (d->addr_.link_layer == IBV_LINK_LAYER_ETHERNET || d->gid_index_ >= 0) {
        ibv_gid g{};
        if (d->gid_index_ < 0 || ibv_query_gid(d->ctx_, d->port_, d->gid_index_, &g) != 0) {
            if (d->addr_.link_layer == IBV_LINK_LAYER_ETHERNET) {
                *err = d->name_ + ": no usable GID (is an IP address configured on its netdev?)";
                return nullptr;
            }
            d->gid_index_ = -1;
        } else {
            std::memcpy(d->addr_.gid, g.raw, 16);
        }
    }
    d->pd_ = ibv_alloc_pd(d->ctx_);
    if (!d->pd_) {
        *err = errno_text("ibv_alloc_pd");
        return nullptr;
    }
    return d.release();
}

Device::~Device() {
    if (pd_) ibv_dealloc_pd(pd_);
    if (ctx_) ibv_close_device(ctx_);
}

ibv_qp *Device::create_qp(const QpQueues &q, std::string *err) {
    ibv_qp_init_attr ia{};
    ia.send_cq = q.send_cq;
    ia.recv_cq = q.recv_cq;
    ia.srq = q.srq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = q.max_send;
    ia.cap.max_recv_wr = q.srq ? 0 : q.max_recv;
    ia.cap.max_send_sge = kMaxSendSge;
    ia.cap.max_recv_sge = q.srq ? 0 : 1;
    ia.cap.max_inline_data = 128;
    ibv_qp *qp = ibv_create_qp(pd_, &ia);
    if (!qp) {
        ia.cap.max_inline_data = 0;  // not every device inlines
        qp = ibv_create_qp(pd_, &ia);
    }
    if (!qp) {
        *err = errno_text("ibv_create_qp");
        return nullptr;
    }
    send_wqe_bytes_ = wqe_bytes(ia.cap.max_send_sge, ia.cap.max_inline_data);
    max_inline_ = ia.cap.max_inline_data;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = port_;
    a.qp_access_flags =
        IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
        *err = errno_text("ibv_modify_qp(INIT)");
        ibv_destroy_qp(qp);
        return nullptr;
    }
    return qp;
}

// What a device keeps per send queue entry, for the pinned-memory report: a 64-byte control
// and address part and room for the larger of the gather list and the inline data, in 64-byte
// units (mlx5's layout; other devices are within a factor of two).
size_t Device::wqe_bytes(uint32_t sges, uint32_t inline_data) {
    const size_t room = std::max<size_t>(size_t(sges) * 16, inline_data);
    return (64 + room + 63) / 64 * 64;
}

ibv_srq *Device::create_srq(uint32_t depth, std::string *err) {
    ibv_srq_init_attr ia{};
    ia.attr.max_wr = depth;
    ia.attr.max_sge = 1;
    ibv_srq *srq = ibv_create_srq(pd_, &ia);
    if (!srq) *err = errno_text("ibv_create_srq");
    return srq;
}

bool Device::connect_qp(ibv_qp *qp, uint32_t my_psn, const PortAddress &remote, uint32_t remote_qpn,
                        uint32_t remote_psn, uint8_t timeout, std::string *err) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = ibv_mtu(std::min(addr_.mtu, remote.mtu));
    a.dest_qp_num = remote_qpn;
    a.rq_psn = remote_psn;
    a.max_dest_rd_atomic = max_rd_atom_;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = port_;
    a.ah_attr.dlid = remote.lid;
    if (addr_.link_layer == IBV_LINK_LAYER_ETHERNET || gid_index_ >= 0) {
        a.ah_attr.is_global = 1;
        std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid, 16);
        a.ah_attr.grh.sgid_index = uint8_t(gid_index_);
        a.ah_attr.grh.hop_limit = 64;
    }
    if (ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
        *err = errno_text("ibv_modify_qp(RTR)");
        return false;
    }
    ibv_qp_attr s{};
    s.qp_state = IBV_QPS_RTS;
    s.timeout = timeout;
    s.retry_cnt = 7;
    s.rnr_retry = 7;
    s.sq_psn = my_psn;
    s.max_rd_atomic = max_init_rd_atom_;
    if (ibv_modify_qp(qp, &s,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
        *err = errno_text("ibv_modify_qp(RTS)");
        return false;
    }
    return true;
}

}  // namespace ptl::verbs
