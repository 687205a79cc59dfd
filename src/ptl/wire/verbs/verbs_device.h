// One RDMA device port opened for the verbs wire: its protection domain, the address its
// QPs are reached at (LID on InfiniBand, a GID on RoCE) and QP state changes.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

namespace ptl::verbs {

struct PortAddress {
    uint8_t link_layer = IBV_LINK_LAYER_INFINIBAND;
    uint8_t mtu = IBV_MTU_1024;
    uint16_t lid = 0;
    uint8_t gid[16] = {};
};

class Device {
public:
    // `spec`: "name" or "name:port"; empty picks the first device with an active port.
    // `gid_index` < 0 picks RoCE v2 with an IPv4 address where there is one.
    static Device *open(const std::string &spec, int gid_index, std::string *err);
    ~Device();
    Device(const Device &) = delete;
    Device &operator=(const Device &) = delete;

    ibv_context *context() const { return ctx_; }
    ibv_pd *pd() const { return pd_; }
    const std::string &name() const { return name_; }
    const PortAddress &address() const { return addr_; }
    uint32_t max_inline_data() const { return max_inline_; }
    bool atomics() const { return atomics_; }  // RDMA fetch-and-add and compare-and-swap

    // Gather entries of one send: frame head, header, payload pieces.
    static constexpr uint32_t kMaxSendSge = 4;
    struct QpQueues {
        ibv_cq *send_cq = nullptr, *recv_cq = nullptr;
        ibv_srq *srq = nullptr;  // receives come from it; else max_recv of the QP's own
        uint32_t max_send = 0, max_recv = 0;
    };
    // A reliable-connected QP, in INIT.
    ibv_qp *create_qp(const QpQueues &q, std::string *err);
    // A shared receive queue of `depth` single-buffer receives.
    ibv_srq *create_srq(uint32_t depth, std::string *err);
    // Bytes of device memory per send queue entry of the QPs made so far (an estimate).
    size_t send_wqe_bytes() const { return send_wqe_bytes_; }
    static size_t wqe_bytes(uint32_t sges, uint32_t inline_data);
    // INIT -> RTR -> RTS towards the remote QP at `remote`; `timeout` is the local ACK
    // timeout exponent (4.096 us << timeout), retried 7 times before the QP fails.
    bool connect_qp(ibv_qp *qp, uint32_t my_psn, const PortAddress &remote, uint32_t remote_qpn,
                    uint32_t remote_psn, uint8_t timeout, std::string *err);

private:
    Device() = default;
    ibv_context *ctx_ = nullptr;
    ibv_pd *pd_ = nullptr;
    std::string name_;
    uint8_t port_ = 1;
    int gid_index_ = 0;
    uint32_t max_inline_ = 0;
    size_t send_wqe_bytes_ = 128;
    uint8_t max_rd_atom_ = 1;       // RDMA reads a QP answers at once
    uint8_t max_init_rd_atom_ = 1;  // RDMA reads a QP has outstanding
    bool atomics_ = false;
    PortAddress addr_;
};

}  // namespace ptl::verbs
