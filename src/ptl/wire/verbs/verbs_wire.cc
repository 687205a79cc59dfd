#include "verbs_wire.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "../../util/clock.h"

namespace ptl::verbs {

namespace {

// The first buffer of every message starts with this; the rest of the message follows it
// and continues in the next buffers of the same connection (RC keeps them in order).
struct FrameHead {
    uint32_t header_len;
    uint32_t reserved;
    uint64_t payload_len;
};
static_assert(sizeof(FrameHead) == 16);

constexpr uint32_t kCreditRecvs = 16;  // on a sending QP, for the receiver's credit returns
constexpr uint32_t kCreditSends = 8;   // on a receiving QP, outstanding credit returns
constexpr uint32_t kMaxHeader = 4096;
constexpr int kPollBatch = 32;

constexpr uint32_t kBulkWindow = 16;     // RDMA reads/writes of one transfer in flight
constexpr size_t kBulkChunk = 1u << 20;  // bytes per RDMA work request
constexpr uint32_t kRemoteWindow = 32;   // one-sided operations in flight per connection
constexpr size_t kRemoteMax = 1u << 30;  // bytes of one one-sided operation

// A credit return's immediate: the count of buffers consumed, and whether the engine holds
// messages back (then consumed is not handled).
constexpr uint32_t kHoldingBit = 0x80000000u;
constexpr uint32_t kConsumedMask = 0x7fffffffu;

enum WrKind : uint64_t { kTxSend = 0, kCreditRecv = 1, kRx = 2, kCreditSend = 3, kBulk = 4, kRemote = 5 };

uint64_t wr_id(WrKind k, uint32_t conn, uint32_t slot) {
    return uint64_t(k) << 60 | uint64_t(conn & 0x0fffffff) << 32 | slot;
}
WrKind kind_of(uint64_t id) {
    return WrKind(id >> 60);
}
uint32_t conn_of(uint64_t id) {
    return uint32_t(id >> 32) & 0x0fffffff;
}
uint32_t slot_of(uint64_t id) {
    return uint32_t(id);
}

}  // namespace

// Registrations held for one operation: memory exported to a peer until the engine releases
// it, or our side of one bulk transfer.
struct VerbsWire::Export {
    RegCache &cache;
    std::vector<RegCache::Region *> regions;
    explicit Export(RegCache &c) : cache(c) {}
    ~Export() {
        for (RegCache::Region *r : regions) cache.release(r);
    }
};

VerbsWire::OutConn::~OutConn() {
    if (qp) ibv_destroy_qp(qp);
    if (tx_mr) ibv_dereg_mr(tx_mr);
}

VerbsWire::InConn::~InConn() {
    if (qp) ibv_destroy_qp(qp);
    if (rx_mr) ibv_dereg_mr(rx_mr);
}

std::unique_ptr<VerbsWire> VerbsWire::create(PeerId self, const VerbsConfig &cfg, Wire *control,
                                             std::function<void()> wake, std::string *err) {
    std::unique_ptr<VerbsWire> w(new VerbsWire(self, cfg, control));
    w->wake_ = std::move(wake);
    if (!w->init(err)) return nullptr;
    return w;
}

bool VerbsWire::init(std::string *err) {
    if (cfg_.buf_size < 256) cfg_.buf_size = 256;
    if (cfg_.rx_depth < 8) cfg_.rx_depth = 8;
    tx_depth_ = std::min<uint32_t>(cfg_.rx_depth, 128);
    dev_.reset(Device::open(cfg_.device, cfg_.gid_index, err));
    if (!dev_) return false;
    channel_ = ibv_create_comp_channel(dev_->context());
    if (!channel_) {
        *err = std::string("ibv_create_comp_channel: ") + std::strerror(errno);
        return false;
    }
    cq_size_ = 4096;
    cq_ = ibv_create_cq(dev_->context(), int(cq_size_), nullptr, channel_, 0);
    if (!cq_) {
        *err = std::string("ibv_create_cq: ") + std::strerror(errno);
        return false;
    }
    stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (stop_fd_ < 0) {
        *err = std::string("eventfd: ") + std::strerror(errno);
        return false;
    }
    std::unique_ptr<UnmapWatch> unmap_watch;
    std::string why;
    if (cfg_.reg_cache && !(unmap_watch = UnmapWatch::open(&why)) && cfg_.stats)
        std::fprintf(stderr, "portals: verbs registrations are not cached (%s)\n", why.c_str());
    cache_ = std::make_unique<RegCache>(dev_->pd(), std::move(unmap_watch), size_t(cfg_.reg_cache_max));
    epoch_seed_ = uint32_t(std::random_device{}());
    words_.reset(new Words{});
    words_mr_ = ibv_reg_mr(dev_->pd(), words_.get(), sizeof(Words), IBV_ACCESS_LOCAL_WRITE);
    for (uint32_t i = kAtomicResults; i > 0; --i) free_results_.push_back(i - 1);
    if (words_mr_ && dev_->atomics()) open_loopback();
    watcher_ = std::thread([this] { watch(); });
    return true;
}

VerbsWire::~VerbsWire() {
    stop_.store(true, std::memory_order_release);
    if (stop_fd_ >= 0) {
        const uint64_t one = 1;
        if (write(stop_fd_, &one, sizeof one) < 0) {
        }
    }
    if (watcher_.joinable()) watcher_.join();
    if (cfg_.stats && cache_) {
        const RegCacheStats &st = cache_->stats();
        std::fprintf(
            stderr,
            "portals: verbs wire on %s: %llu RDMA transfers, %llu bytes; registration cache %s: %llu hits, "
            "%llu misses, %llu uncached, %llu invalidated, %llu evicted\n",
            dev_->name().c_str(), (unsigned long long)rdma_ops_, (unsigned long long)rdma_bytes_,
            cache_->caching() ? "on" : "off", (unsigned long long)st.hits, (unsigned long long)st.misses,
            (unsigned long long)st.uncached, (unsigned long long)st.invalidated,
            (unsigned long long)st.evicted);
    }
    for (Export *e : exports_) delete e;
    exports_.clear();
    for (RemoteOp &op : remote_ops_)
        if (op.region) cache_->release(op.region);
    cache_.reset();
    if (loop_qp_) ibv_destroy_qp(loop_qp_);
    if (loop_cq_) ibv_destroy_cq(loop_cq_);
    if (words_mr_) ibv_dereg_mr(words_mr_);
    out_by_id_.clear();
    in_by_id_.clear();
    out_.clear();
    in_.clear();
    if (cq_) ibv_destroy_cq(cq_);
    if (channel_) ibv_destroy_comp_channel(channel_);
    if (stop_fd_ >= 0) close(stop_fd_);
}

bool VerbsWire::reserve_cq(uint32_t entries) {
    if (cq_used_ + entries > cq_size_) {
        uint32_t want = cq_size_;
        while (cq_used_ + entries > want) want *= 2;
        if (ibv_resize_cq(cq_, int(want)) != 0) return false;
        cq_size_ = want;
    }
    cq_used_ += entries;
    return true;
}

ControlMsg VerbsWire::describe(ControlKind kind, ibv_qp *qp, uint32_t psn) const {
    ControlMsg c{};
    c.magic = kControlMagic;
    c.kind = uint8_t(kind);
    const PortAddress &a = dev_->address();
    c.link_layer = a.link_layer;
    c.mtu = a.mtu;
    c.lid = a.lid;
    std::memcpy(c.gid, a.gid, 16);
    c.qpn = qp ? qp->qp_num : 0;
    c.psn = psn;
    return c;
}

// ---------------------------------------------------------------------------------------
// Sending side

VerbsWire::OutConn *VerbsWire::out_conn(PeerId to) {
    auto it = out_.find(to);
    if (it != out_.end()) return it->second.get();
    auto c = std::make_unique<OutConn>();
    c->peer = to;
    c->id = next_id_++;
    c->psn = (epoch_seed_ + c->id * 7919u) & 0xffffff;
    c->epoch = epoch_seed_ ^ c->id;
    c->started_ns = monotonic_ns();
    std::string err;
    if (!reserve_cq(tx_depth_ + kCreditRecvs + kRemoteWindow + 4)) {
        c->state = State::OverControl;
    } else if (!(c->qp = dev_->create_qp(cq_, tx_depth_ + kRemoteWindow + 4, kCreditRecvs, &err))) {
        c->state = State::OverControl;
    } else {
        for (uint32_t i = 0; i < kCreditRecvs; ++i) post_credit_rx(*c);
        ControlMsg m = describe(ControlKind::Connect, c->qp, c->psn);
        m.epoch = c->epoch;
        if (control_->send(to, &m, sizeof m, nullptr, 0)) {
            ++connecting_;
        } else {
            c->state = State::Failed;
            dead_.insert(to);
        }
    }
    OutConn *raw = c.get();
    out_by_id_[raw->id] = raw;
    out_[to] = std::move(c);
    return raw;
}

bool VerbsWire::send(PeerId to, const void *header, size_t header_len, const struct iovec *payload,
                     int payload_count) {
    return send_frame(to, header, header_len, payload, payload_count, false);
}

// An acknowledgement waits for the next send to the peer or the next progress: a ping-pong's
// ACK then leaves with the pong, one doorbell (a system call on soft-RoCE) for both.
bool VerbsWire::send_deferrable(PeerId to, const void *header, size_t header_len, const struct iovec *payload,
                                int payload_count) {
    return send_frame(to, header, header_len, payload, payload_count, true);
}

bool VerbsWire::send_frame(PeerId to, const void *header, size_t header_len, const struct iovec *payload,
                           int payload_count, bool deferrable) {
    if (dead_.count(to)) return false;
    OutConn *c = out_conn(to);
    if (c->state == State::OverControl) return control_->send(to, header, header_len, payload, payload_count);
    if (c->state == State::Failed) return false;
    size_t plen = 0;
    for (int i = 0; i < payload_count; ++i) plen += payload[i].iov_len;
    if (header_len > kMaxHeader || plen > cfg_.max_message) return false;
    FrameHead fh{uint32_t(header_len), 0, plen};
    const size_t total = sizeof fh + header_len + plen;
    if (c->held == OutConn::kMaxHeld && !post_held(*c)) {
        fail_out(*c);
        return false;
    }
    // The common case, a message that fits one buffer with a credit and a slot free, is
    // gathered straight into the slot; the rest waits whole in the backlog.
    const bool direct = c->state == State::Ready && c->backlog.empty() && total <= c->buf_size &&
                        c->credits > 0 && c->tx_head - c->tx_tail < tx_depth_;
    std::vector<char> frame(direct ? 0 : total);
    char *p = direct ? tx_slot(*c) : frame.data();
    std::memcpy(p, &fh, sizeof fh);
    p += sizeof fh;
    std::memcpy(p, header, header_len);
    p += header_len;
    for (int i = 0; i < payload_count; ++i) {
        if (payload[i].iov_len) std::memcpy(p, payload[i].iov_base, payload[i].iov_len);
        p += payload[i].iov_len;
    }
    if (direct) {
        hold_slot(*c, total);
        if (deferrable) {
            if (!c->corked) {
                c->corked = true;
                corked_.push_back(c);
            }
            return true;
        }
        if (post_held(*c)) return true;
        fail_out(*c);
        return false;
    }
    c->backlog.push_back(std::move(frame));
    if (c->state == State::Ready) drain(*c);
    return true;
}

char *VerbsWire::tx_slot(OutConn &c) const {
    return c.tx.get() + size_t(c.tx_head % tx_depth_) * c.buf_size;
}

// Counts the next slot, filled with `len` bytes, as sent. Only every tx_depth/4-th send asks
// for a completion: RC completes a QP's sends in order, so one stands for those before it.
void VerbsWire::hold_slot(OutConn &c, size_t len) {
    ibv_sge &sge = c.held_sge[c.held];
    sge = ibv_sge{reinterpret_cast<uint64_t>(tx_slot(c)), uint32_t(len), c.tx_mr->lkey};
    ibv_send_wr &wr = c.held_wr[c.held];
    wr = ibv_send_wr{};
    wr.wr_id = wr_id(kTxSend, c.id, c.tx_head);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    const uint32_t every = std::max<uint32_t>(1, tx_depth_ / 4);
    // After an RDMA read the QP may start later requests before the read's data is read.
    wr.send_flags = (c.tx_head % every == every - 1 ? IBV_SEND_SIGNALED : 0) |
                    (len <= dev_->max_inline_data() ? IBV_SEND_INLINE : 0) |
                    (c.remote_reads ? IBV_SEND_FENCE : 0);
    ++c.held;
    ++c.tx_head;
    --c.credits;
}

bool VerbsWire::post_held(OutConn &c) {
    if (c.held == 0) return true;
    for (int i = 0; i + 1 < c.held; ++i) c.held_wr[i].next = &c.held_wr[i + 1];
    c.held_wr[c.held - 1].next = nullptr;
    ibv_send_wr *bad = nullptr;
    c.held = 0;
    return ibv_post_send(c.qp, c.held_wr, &bad) == 0;
}

void VerbsWire::flush_corked() {
    std::vector<OutConn *> list;
    list.swap(corked_);
    for (OutConn *c : list) {
        c->corked = false;
        if (c->state == State::Ready && !post_held(*c)) fail_out(*c);
    }
}

void VerbsWire::drain(OutConn &c) {
    while (!c.backlog.empty() && c.state == State::Ready) {
        const std::vector<char> &f = c.backlog.front();
        while (c.backlog_off < f.size() && c.credits > 0 && c.tx_head - c.tx_tail < tx_depth_) {
            if (c.held == OutConn::kMaxHeld && !post_held(c)) {
                fail_out(c);
                return;
            }
            const size_t len = std::min<size_t>(c.buf_size, f.size() - c.backlog_off);
            std::memcpy(tx_slot(c), f.data() + c.backlog_off, len);
            hold_slot(c, len);
            c.backlog_off += len;
        }
        if (c.backlog_off < f.size()) break;  // until credits or slots come back
        c.backlog.pop_front();
        c.backlog_off = 0;
    }
    if (c.state == State::Ready && !post_held(c)) fail_out(c);
}

void VerbsWire::post_credit_rx(OutConn &c) {
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = wr_id(kCreditRecv, c.id, 0);
    wr.num_sge = 0;
    ibv_post_recv(c.qp, &wr, &bad);
}

void VerbsWire::on_accept(PeerId from, const ControlMsg &m) {
    auto it = out_.find(from);
    if (it == out_.end()) return;
    OutConn &c = *it->second;
    if (c.state != State::Connecting || m.epoch != c.epoch) return;
    --connecting_;
    if (ControlKind(m.kind) == ControlKind::Reject || m.link_layer != dev_->address().link_layer) {
        fall_back(c);
        return;
    }
    PortAddress remote;
    remote.link_layer = m.link_layer;
    remote.mtu = m.mtu;
    remote.lid = m.lid;
    std::memcpy(remote.gid, m.gid, 16);
    c.buf_size = std::max<uint32_t>(256, m.buf_size);
    c.credits = c.peer_rx_depth = m.rx_depth;
    c.tx.reset(new char[size_t(tx_depth_) * c.buf_size]);
    c.tx_mr = ibv_reg_mr(dev_->pd(), c.tx.get(), size_t(tx_depth_) * c.buf_size, IBV_ACCESS_LOCAL_WRITE);
    std::string err;
    if (!c.tx_mr || !dev_->connect_qp(c.qp, c.psn, remote, m.qpn, m.psn, cfg_.ack_timeout, &err)) {
        std::fprintf(stderr, "portals: verbs connection to %u.%u.%u.%u:%u failed (%s); using tcp\n",
                     from.nid >> 24, (from.nid >> 16) & 255, (from.nid >> 8) & 255, from.nid & 255, from.pid,
                     c.tx_mr ? err.c_str() : "ibv_reg_mr");
        fall_back(c);
        return;
    }
    c.state = State::Ready;
    drain(c);
}

void VerbsWire::fall_back(OutConn &c) {
    c.state = State::OverControl;
    for (auto &f : c.backlog) {
        FrameHead fh;
        std::memcpy(&fh, f.data(), sizeof fh);
        iovec v{f.data() + sizeof fh + fh.header_len, size_t(fh.payload_len)};
        control_->send(c.peer, f.data() + sizeof fh, fh.header_len, &v, 1);
    }
    c.backlog.clear();
}

void VerbsWire::fail_out(OutConn &c) {
    if (c.state == State::Connecting) --connecting_;
    c.state = State::Failed;
    c.held = 0;
    c.backlog.clear();
    dead_.insert(c.peer);
}

// ---------------------------------------------------------------------------------------
// Receiving side

void VerbsWire::on_control(const InMessage &m) {
    const ControlMsg c = control_of(m);
    switch (ControlKind(c.kind)) {
        case ControlKind::Connect: on_connect(m.from, c); break;
        case ControlKind::Accept:
        case ControlKind::Reject: on_accept(m.from, c); break;
        default: ++malformed_;
    }
}

void VerbsWire::on_connect(PeerId from, const ControlMsg &m) {
    if (m.link_layer != dev_->address().link_layer) {
        send_reject(*control_, from, m.epoch);
        return;
    }
    if (auto it = in_.find(from); it != in_.end()) {
        if (it->second->epoch == m.epoch) return;  // a duplicate
        in_by_id_.erase(it->second->id);           // the peer reconnects: a new process or QP
        std::erase(owing_, it->second.get());
        in_.erase(it);
    }
    auto c = std::make_unique<InConn>();
    c->peer = from;
    c->id = next_id_++;
    c->epoch = m.epoch;
    const uint32_t psn = (epoch_seed_ + c->id * 104729u) & 0xffffff;
    std::string err;
    const size_t bytes = size_t(cfg_.rx_depth) * cfg_.buf_size;
    c->rx.reset(new char[bytes]);
    c->rx_mr = ibv_reg_mr(dev_->pd(), c->rx.get(), bytes, IBV_ACCESS_LOCAL_WRITE);
    PortAddress remote;
    remote.link_layer = m.link_layer;
    remote.mtu = m.mtu;
    remote.lid = m.lid;
    std::memcpy(remote.gid, m.gid, 16);
    bool ok = c->rx_mr && reserve_cq(cfg_.rx_depth + kCreditSends + kBulkWindow);
    if (ok) ok = (c->qp = dev_->create_qp(cq_, kCreditSends + kBulkWindow, cfg_.rx_depth, &err)) != nullptr;
    if (ok) {
        for (uint32_t i = 0; i < cfg_.rx_depth; ++i) post_rx(*c, i);
        ok = dev_->connect_qp(c->qp, psn, remote, m.qpn, m.psn, cfg_.ack_timeout, &err);
    }
    if (!ok) {
        std::fprintf(stderr, "portals: verbs connection from %u.%u.%u.%u:%u refused (%s)\n", from.nid >> 24,
                     (from.nid >> 16) & 255, (from.nid >> 8) & 255, from.nid & 255, from.pid,
                     err.empty() ? "no memory for its buffers" : err.c_str());
        send_reject(*control_, from, m.epoch);
        return;
    }
    ControlMsg a = describe(ControlKind::Accept, c->qp, psn);
    a.epoch = m.epoch;
    a.rx_depth = cfg_.rx_depth;
    a.buf_size = cfg_.buf_size;
    in_by_id_[c->id] = c.get();
    in_[from] = std::move(c);
    control_->send(from, &a, sizeof a, nullptr, 0);
    if (peer_connected_) peer_connected_(from);
}

void VerbsWire::post_rx(InConn &c, uint32_t slot) {
    ibv_sge sge{reinterpret_cast<uint64_t>(c.rx.get() + size_t(slot) * cfg_.buf_size), cfg_.buf_size,
                c.rx_mr->lkey};
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = wr_id(kRx, c.id, slot);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_recv(c.qp, &wr, &bad) != 0) c.failed = true;
}

// Returned in quarters of the buffers: a sender with no credits left has rx_depth
// unreturned, so a receiver that keeps consuming always owes it a return.
// `now`: whatever is owed, even nothing (a change of holding_ is news too).
void VerbsWire::return_credits(InConn &c, bool now) {
    const uint32_t owed = c.consumed - c.returned;
    if ((!now && owed < std::max<uint32_t>(1, cfg_.rx_depth / 4)) || c.credit_sends >= kCreditSends) return;
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = wr_id(kCreditSend, c.id, 0);
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl((c.consumed & kConsumedMask) | (holding_ ? kHoldingBit : 0));
    wr.num_sge = 0;
    if (ibv_post_send(c.qp, &wr, &bad) != 0) {
        c.failed = true;
        return;
    }
    ++c.credit_sends;
    c.returned = c.consumed;
}

void VerbsWire::on_receive(InConn &c, uint32_t slot, uint32_t len, const MessageHandler &handler) {
    const char *buf = c.rx.get() + size_t(slot) * cfg_.buf_size;
    auto deliver = [&](const char *frame) {
        FrameHead fh;
        std::memcpy(&fh, frame, sizeof fh);
        InMessage m;
        m.from = c.peer;
        m.header = frame + sizeof fh;
        m.header_len = fh.header_len;
        m.payload = frame + sizeof fh + fh.header_len;
        m.payload_len = size_t(fh.payload_len);
        m.via = this;
        handler(m);
    };
    if (c.partial_want == 0) {
        FrameHead fh;
        if (len < sizeof fh) {
            ++malformed_;
        } else {
            std::memcpy(&fh, buf, sizeof fh);
            const uint64_t total = sizeof fh + uint64_t(fh.header_len) + fh.payload_len;
            if (fh.header_len > kMaxHeader || fh.payload_len > cfg_.max_message || len > total ||
                (len < total && len != cfg_.buf_size)) {
                ++malformed_;
            } else if (len == total) {
                deliver(buf);
            } else {
                c.partial.assign(buf, buf + len);
                c.partial_want = size_t(total);
            }
        }
    } else {
        const size_t room = c.partial_want - c.partial.size();
        if (len > room || (len < room && len != cfg_.buf_size)) {
            ++malformed_;
            c.partial.clear();
            c.partial_want = 0;
        } else {
            c.partial.insert(c.partial.end(), buf, buf + len);
            if (c.partial.size() == c.partial_want) {
                std::vector<char> whole;
                whole.swap(c.partial);
                c.partial_want = 0;
                deliver(whole.data());
            }
        }
    }
    post_rx(c, slot);
    ++c.consumed;
    return_credits(c);
    if (c.prompt && !c.owing && c.consumed != c.returned) {
        c.owing = true;
        owing_.push_back(&c);
    }
}

// A peer that reaches our memory directly learns that we handled its messages when they run
// out, not a quarter of the buffers later: until then it may not go direct (ordering).
void VerbsWire::return_owed_credits() {
    std::vector<InConn *> list;
    list.swap(owing_);
    for (InConn *c : list) {
        c->owing = false;
        if (c->consumed != c->returned) return_credits(*c, true);
        if (c->consumed != c->returned) {  // no send free: at the next progress
            c->owing = true;
            owing_.push_back(c);
        }
    }
}

int VerbsWire::handle_wc(const ibv_wc &wc, const MessageHandler &handler) {
    const WrKind kind = kind_of(wc.wr_id);
    if (kind == kBulk) return 0;  // of a transfer that gave up waiting
    if (kind == kRemote) {
        remote_done(wc);
        return 1;
    }
    const uint32_t id = conn_of(wc.wr_id);
    if (kind == kTxSend || kind == kCreditRecv) {
        auto it = out_by_id_.find(id);
        if (it == out_by_id_.end()) return 0;
        OutConn &c = *it->second;
        if (wc.status != IBV_WC_SUCCESS) {
            if (wc.status != IBV_WC_WR_FLUSH_ERR || c.state != State::Failed) fail_out(c);
            return 1;
        }
        if (kind == kTxSend) {
            c.tx_tail = slot_of(wc.wr_id) + 1;  // and every unsignaled send before it
        } else {
            const uint32_t imm = ntohl(wc.imm_data), consumed = imm & kConsumedMask;
            c.credits += (consumed - c.peer_consumed) & kConsumedMask;
            c.peer_consumed = consumed;
            c.peer_holding = (imm & kHoldingBit) != 0;
            post_credit_rx(c);
        }
        drain(c);
        return 1;
    }
    auto it = in_by_id_.find(id);
    if (it == in_by_id_.end()) return 0;
    InConn &c = *it->second;
    if (wc.status != IBV_WC_SUCCESS) {
        c.failed = true;
        return 1;
    }
    if (kind == kRx)
        on_receive(c, slot_of(wc.wr_id), wc.byte_len, handler);
    else if (--c.credit_sends == kCreditSends - 1)
        return_credits(c);  // one was held back for want of a send slot
    return 1;
}

void VerbsWire::remote_done(const ibv_wc &wc) {
    const uint32_t slot = slot_of(wc.wr_id);
    if (slot >= remote_ops_.size()) return;
    const RemoteOp op = remote_ops_[slot];
    remote_ops_[slot] = RemoteOp{};
    free_remote_ops_.push_back(slot);
    if (op.region) cache_->release(op.region);
    uint64_t fetched = 0;
    if (op.result >= 0) {
        fetched = words_->fetched[op.result];
        free_results_.push_back(uint32_t(op.result));
    }
    const bool ok = wc.status == IBV_WC_SUCCESS;
    if (auto it = out_by_id_.find(op.conn); it != out_by_id_.end()) {
        OutConn &c = *it->second;
        --c.remote_ops;
        if (op.read) --c.remote_reads;
        // A bad key (the peer revoked the memory before we knew) breaks the QP: the peer is
        // lost to us, as after any failed send.
        if (!ok && c.state != State::Failed) fail_out(c);
    }
    if (remote_done_) remote_done_(op.cookie, ok, fetched);
}

// Completions are handled in the order the CQ gave them (messages of one connection must reach
// the engine in order): progress puts each batch at the back of stashed_ and takes from the
// front; a receive handler that starts a bulk transfer stashes the newer completions it meets
// behind the rest, and the stash is emptied before the CQ is polled again.
int VerbsWire::drain_stash(const MessageHandler &handler) {
    int work = 0;
    while (!stashed_.empty()) {
        const ibv_wc wc = stashed_.front();
        stashed_.pop_front();
        work += handle_wc(wc, handler);
    }
    return work;
}

// Every completion goes through stashed_, oldest first: a handler that calls progress again
// (the engine waiting for peers inside a delivery) continues the same sequence.
int VerbsWire::progress(const MessageHandler &handler) {
    if (!corked_.empty()) flush_corked();
    int work = drain_stash(handler);
    ibv_wc wc[kPollBatch];
    for (int round = 0; round < 4; ++round) {
        const int n = ibv_poll_cq(cq_, kPollBatch, wc);
        if (n <= 0) break;
        stashed_.insert(stashed_.end(), wc, wc + n);
        work += drain_stash(handler);
        if (n < kPollBatch) break;
    }
    if (!owing_.empty()) return_owed_credits();
    if (connecting_) check_timeouts();
    return work;
}

void VerbsWire::check_timeouts() {
    const uint64_t now = monotonic_ns();
    for (auto &[peer, c] : out_) {
        if (c->state != State::Connecting) continue;
        if (now - c->started_ns < uint64_t(cfg_.timeout_ms) * 1000000ull) continue;
        // No answer at all: the peer may be an engine that ignores our setup messages; tcp
        // reaches it if anything does.
        --connecting_;
        fall_back(*c);
    }
}

bool VerbsWire::peer_dead(PeerId p) {
    if (dead_.count(p)) return true;
    if (auto it = in_.find(p); it != in_.end() && it->second->failed) return true;
    return control_->peer_dead(p);
}

uint64_t VerbsWire::take_malformed() {
    const uint64_t m = malformed_;
    malformed_ = 0;
    return m;
}

// ---------------------------------------------------------------------------------------
// Bulk data

bool VerbsWire::has_bulk(PeerId to) const {
    auto it = out_.find(to);
    return it != out_.end() && it->second->state == State::Ready;
}

bool VerbsWire::export_memory(PeerId, const struct iovec *pieces, int n, bool writable, uint64_t *keys,
                              uint64_t *id) {
    auto e = std::make_unique<Export>(*cache_);
    for (int i = 0; i < n; ++i) {
        keys[i] = 0;
        if (!pieces[i].iov_len) continue;
        RegCache::Region *r = cache_->acquire(pieces[i].iov_base, pieces[i].iov_len, writable);
        if (!r) return false;  // e's destructor releases the others
        e->regions.push_back(r);
        keys[i] = RegCache::rkey(r);
    }
    exports_.insert(e.get());
    *id = reinterpret_cast<uint64_t>(e.release());
    return true;
}

void VerbsWire::release_export(uint64_t id) {
    Export *e = reinterpret_cast<Export *>(id);
    if (exports_.erase(e)) delete e;
}

bool VerbsWire::bulk_read(PeerId from, const struct iovec *local, int nl, const struct iovec *remote, int nr,
                          const uint64_t *keys) {
    return bulk(from, true, local, nl, remote, nr, keys);
}

bool VerbsWire::bulk_write(PeerId to, const struct iovec *local, int nl, const struct iovec *remote, int nr,
                           const uint64_t *keys) {
    return bulk(to, false, local, nl, remote, nr, keys);
}

// On the QP the peer's messages arrive on. Completions of anything else met while waiting
// are kept, in order, for the next progress.
bool VerbsWire::bulk(PeerId peer, bool read, const struct iovec *local, int nl, const struct iovec *remote,
                     int nr, const uint64_t *keys) {
    auto it = in_.find(peer);
    if (it == in_.end() || it->second->failed || !keys) return false;
    InConn &c = *it->second;
    Export local_regions(*cache_);  // a read lands in them, a write leaves them
    std::vector<uint32_t> lkeys(size_t(nl), 0);
    for (int i = 0; i < nl; ++i) {
        if (!local[i].iov_len) continue;
        RegCache::Region *r = cache_->acquire(local[i].iov_base, local[i].iov_len, read);
        if (!r) return false;
        local_regions.regions.push_back(r);
        lkeys[size_t(i)] = RegCache::lkey(r);
    }
    const uint32_t seq_base = bulk_seq_;
    uint32_t posted = 0, done = 0;
    bool ok = true;
    auto reap = [&](bool all) {
        ibv_wc wc[kPollBatch];
        while (done < posted && (all || posted - done >= kBulkWindow)) {
            const int n = ibv_poll_cq(cq_, kPollBatch, wc);
            if (n < 0) {
                c.failed = true;
                ok = false;
                return;
            }
            for (int i = 0; i < n; ++i) {
                if (kind_of(wc[i].wr_id) == kBulk && conn_of(wc[i].wr_id) == (c.id & 0x0fffffff) &&
                    slot_of(wc[i].wr_id) - seq_base < posted) {
                    ++done;
                    if (wc[i].status != IBV_WC_SUCCESS) {
                        ok = false;
                        c.failed = true;
                    }
                } else {
                    stashed_.push_back(wc[i]);
                }
            }
        }
    };
    int li = 0, ri = 0;
    size_t loff = 0, roff = 0;
    while (ok && li < nl && ri < nr) {
        const size_t k = std::min({local[li].iov_len - loff, remote[ri].iov_len - roff, kBulkChunk});
        if (k) {
            ibv_sge sge{reinterpret_cast<uint64_t>(local[li].iov_base) + loff, uint32_t(k),
                        lkeys[size_t(li)]};
            ibv_send_wr wr{}, *bad = nullptr;
            wr.wr_id = wr_id(kBulk, c.id, bulk_seq_++);
            wr.sg_list = &sge;
            wr.num_sge = 1;
            wr.opcode = read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(remote[ri].iov_base) + roff;
            wr.wr.rdma.rkey = uint32_t(keys[ri]);
            if (ibv_post_send(c.qp, &wr, &bad) != 0) {
                ok = false;
                break;
            }
            ++posted;
            ++rdma_ops_;
            rdma_bytes_ += k;
            reap(false);
        }
        loff += k;
        roff += k;
        if (loff == local[li].iov_len) ++li, loff = 0;
        if (roff == remote[ri].iov_len) ++ri, roff = 0;
    }
    reap(true);
    if (!stashed_.empty()) wake_();  // taken from the queue the next progress reads
    return ok;
}

// ---------------------------------------------------------------------------------------
// One-sided access

// Not through the registration cache: once remote_deregister returns, the key reaches nothing.
bool VerbsWire::remote_register(void *addr, size_t len, bool writable, bool atomic, uint64_t *key,
                                uint64_t *handle) {
    const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                       (writable ? IBV_ACCESS_REMOTE_WRITE : 0) | (atomic ? IBV_ACCESS_REMOTE_ATOMIC : 0);
    ibv_mr *mr = ibv_reg_mr(dev_->pd(), addr, len, access);
    if (!mr) return false;
    *key = mr->rkey;
    *handle = reinterpret_cast<uint64_t>(mr);
    return true;
}

void VerbsWire::remote_deregister(uint64_t handle) {
    if (handle) ibv_dereg_mr(reinterpret_cast<ibv_mr *>(handle));
}

// Whether the peer's engine has handled everything we sent it (see remote_access).
bool VerbsWire::handled_all(const OutConn &c) {
    auto handled = [&] {
        return c.state == State::Ready && c.backlog.empty() && c.held == 0 && !c.peer_holding &&
               c.credits == c.peer_rx_depth;
    };
    if (handled()) return true;
    // The answer may be in the queue: an initiator that never waits (PTL_PROGRESS=manual)
    // would otherwise never learn it.
    poll_own_completions();
    return handled();
}

// Credit returns and one-sided completions concern only what we sent, so they are handled
// at once, in their order; the rest stays in stashed_, in order, for the next progress.
void VerbsWire::poll_own_completions() {
    ibv_wc wc[kPollBatch];
    const int n = ibv_poll_cq(cq_, kPollBatch, wc);
    if (n > 0) stashed_.insert(stashed_.end(), wc, wc + n);
    static const MessageHandler none;
    for (auto it = stashed_.begin(); it != stashed_.end();) {
        const WrKind k = kind_of(it->wr_id);
        if (k != kCreditRecv && k != kRemote) {
            ++it;
            continue;
        }
        const ibv_wc w = *it;
        it = stashed_.erase(it);
        handle_wc(w, none);
        it = stashed_.begin();  // handle_wc may have stashed more (never erased): start over
    }
    if (n > 0 && !stashed_.empty()) wake_();
}

void VerbsWire::set_holding(bool holding) {
    if (holding_ == holding) return;
    holding_ = holding;
    // The peers that go direct must hear it at once: holding, they wait; released, they may go.
    for (auto &[peer, c] : in_)
        if (c->prompt && !c->failed) return_credits(*c, true);
}

void VerbsWire::report_handled_promptly(PeerId from) {
    if (auto it = in_.find(from); it != in_.end()) it->second->prompt = true;
}

// The connection a one-sided operation to `to` may take now (`need` work requests), or null.
VerbsWire::OutConn *VerbsWire::ready_for_remote(PeerId to, uint32_t need) {
    auto it = out_.find(to);
    if (it == out_.end()) return nullptr;
    OutConn &c = *it->second;
    // A peer the control wire saw die is not written to: its QP would take the retry time to
    // say so.
    if (!handled_all(c) || control_->peer_dead(to)) return nullptr;
    if (c.remote_ops + need > kRemoteWindow) poll_own_completions();
    if (c.state != State::Ready || c.remote_ops + need > kRemoteWindow) return nullptr;
    return &c;
}

bool VerbsWire::remote_access(PeerId to, bool read, void *local, size_t len, uint64_t remote_addr,
                              uint64_t key, uint64_t cookie, bool must_copy, const RemoteCount &count) {
    if (len > kRemoteMax || (count.amount && !remote_counts())) return false;
    OutConn *cp = ready_for_remote(to, count.amount ? 2 : 1);
    if (!cp) return false;
    OutConn &c = *cp;
    const bool inlined = !read && len <= dev_->max_inline_data();
    if (must_copy && !inlined) return false;
    RegCache::Region *r = nullptr;
    ibv_sge sge{reinterpret_cast<uint64_t>(local), uint32_t(len), 0};
    if (!inlined && len) {
        if (!(r = cache_->acquire(local, len, read))) return false;
        sge.lkey = RegCache::lkey(r);
    }
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = len ? 1 : 0;
    wr.opcode = read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
    wr.send_flags = inlined ? IBV_SEND_INLINE : 0;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = uint32_t(key);
    if (!post_remote(c, wr, count, RemoteOp{cookie, r, c.id, read, -1})) {
        if (r) cache_->release(r);
        return false;
    }
    rdma_bytes_ += len;
    return true;
}

// Posts `wr` (its slot, signalling and fence filled in here) with the count behind it; on
// success the slot holds `op` until the completion.
bool VerbsWire::post_remote(OutConn &c, ibv_send_wr &wr, const RemoteCount &count, RemoteOp op) {
    auto take_slot = [&] {
        uint32_t s;
        if (!free_remote_ops_.empty()) {
            s = free_remote_ops_.back();
            free_remote_ops_.pop_back();
        } else {
            s = uint32_t(remote_ops_.size());
            remote_ops_.emplace_back();
        }
        return s;
    };
    const uint32_t slot = take_slot(), add_slot = count.amount ? take_slot() : 0;
    ibv_send_wr add{}, *bad = nullptr;
    wr.wr_id = wr_id(kRemote, c.id, slot);
    wr.send_flags |= IBV_SEND_SIGNALED | (c.remote_reads ? IBV_SEND_FENCE : 0);
    // The count after the data: RC executes them in order at the peer, so whoever sees the
    // count sees the data.
    ibv_sge add_sge{reinterpret_cast<uint64_t>(words_->sink), 8, words_mr_ ? words_mr_->lkey : 0};
    if (count.amount) {
        wr.next = &add;
        add.wr_id = wr_id(kRemote, c.id, add_slot);
        add.sg_list = &add_sge;
        add.num_sge = 1;
        add.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
        add.send_flags = IBV_SEND_SIGNALED;
        add.wr.atomic.remote_addr = count.addr;
        add.wr.atomic.rkey = uint32_t(count.key);
        add.wr.atomic.compare_add = count.amount;
    }
    if (ibv_post_send(c.qp, &wr, &bad) != 0) {
        if (bad == &add) {
            fail_out(c);  // the data went without its count: the peer cannot be trusted to count
        } else {
            free_remote_ops_.push_back(slot);
            if (count.amount) free_remote_ops_.push_back(add_slot);
            return false;
        }
    }
    remote_ops_[slot] = op;
    if (count.amount) {
        remote_ops_[add_slot] = RemoteOp{~uint64_t(0), nullptr, c.id, false, -1};
        ++c.remote_ops;
    }
    ++c.remote_ops;
    if (op.read) ++c.remote_reads;
    ++rdma_ops_;
    return true;
}

bool VerbsWire::remote_atomic(PeerId to, AtomicOp op, uint64_t remote_addr, uint64_t key, uint64_t operand,
                              uint64_t compare, uint64_t cookie, const RemoteCount &count) {
    if (!remote_atomics() || free_results_.empty() || (remote_addr & 7)) return false;
    OutConn *cp = ready_for_remote(to, count.amount ? 2 : 1);
    if (!cp) return false;
    OutConn &c = *cp;
    const uint32_t result = free_results_.back();
    ibv_sge sge{reinterpret_cast<uint64_t>(&words_->fetched[result]), 8, words_mr_->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op == AtomicOp::FetchAdd ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
    wr.wr.atomic.remote_addr = remote_addr;
    wr.wr.atomic.rkey = uint32_t(key);
    wr.wr.atomic.compare_add = op == AtomicOp::FetchAdd ? operand : compare;
    wr.wr.atomic.swap = operand;
    if (!post_remote(c, wr, count, RemoteOp{cookie, nullptr, c.id, true, int32_t(result)})) return false;
    free_results_.pop_back();
    rdma_bytes_ += 8;
    return true;
}

// RC to itself: the device applies our own atomics as it applies the peers', one after another.
void VerbsWire::open_loopback() {
    std::string err;
    loop_cq_ = ibv_create_cq(dev_->context(), 4, nullptr, nullptr, 0);
    if (loop_cq_) loop_qp_ = dev_->create_qp(loop_cq_, 2, 1, &err);
    const uint32_t psn = epoch_seed_ & 0xffffff;
    if (loop_qp_ &&
        dev_->connect_qp(loop_qp_, psn, dev_->address(), loop_qp_->qp_num, psn, cfg_.ack_timeout, &err))
        return;
    if (cfg_.stats) std::fprintf(stderr, "portals: no device atomics on our own memory (%s)\n", err.c_str());
    if (loop_qp_) ibv_destroy_qp(loop_qp_);
    loop_qp_ = nullptr;
}

bool VerbsWire::own_atomic(AtomicOp op, uint64_t addr, uint64_t key, uint64_t operand, uint64_t compare,
                           uint64_t *old) {
    if (!loop_qp_) return false;
    ibv_sge sge{reinterpret_cast<uint64_t>(&words_->own), 8, words_mr_->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op == AtomicOp::FetchAdd ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.atomic.remote_addr = addr;
    wr.wr.atomic.rkey = uint32_t(key);
    wr.wr.atomic.compare_add = op == AtomicOp::FetchAdd ? operand : compare;
    wr.wr.atomic.swap = operand;
    if (ibv_post_send(loop_qp_, &wr, &bad) != 0) return false;
    // Bounded: a device that stops answering fails the operation, not the process.
    const uint64_t deadline = monotonic_ns() + 2'000'000'000ull;
    ibv_wc wc;
    int n;
    while ((n = ibv_poll_cq(loop_cq_, 1, &wc)) == 0 && monotonic_ns() < deadline) {
    }
    if (n != 1 || wc.status != IBV_WC_SUCCESS) {
        std::fprintf(stderr,
                     "portals: a device atomic on our own memory failed (%s); atomics there fail from now\n",
                     n == 1 ? ibv_wc_status_str(wc.status) : "no completion in 2 s");
        ibv_destroy_qp(loop_qp_);  // nothing may complete into words_->own later
        loop_qp_ = nullptr;
        return false;
    }
    *old = words_->own;
    return true;
}

// ---------------------------------------------------------------------------------------
// Sleeping

void VerbsWire::arm_wakeup() {
    if (!corked_.empty()) flush_corked();  // nothing deferred may wait out a sleep
    ibv_req_notify_cq(cq_, 0);
    // A completion that came before the request raises no event: look once more.
    ibv_wc wc[kPollBatch];
    const int n = ibv_poll_cq(cq_, kPollBatch, wc);
    if (n > 0) {
        stashed_.insert(stashed_.end(), wc, wc + n);
        wake_();
    }
}

void VerbsWire::watch() {
    pthread_setname_np(pthread_self(), "ptl-verbs-watch");
    pollfd fds[2] = {{channel_->fd, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    while (!stop_.load(std::memory_order_acquire)) {
        if (poll(fds, 2, -1) < 0) continue;
        if (stop_.load(std::memory_order_acquire)) break;
        if (fds[0].revents & POLLIN) {
            ibv_cq *cq;
            void *ctx;
            if (ibv_get_cq_event(channel_, &cq, &ctx) == 0) {
                ibv_ack_cq_events(cq, 1);
                wake_();
            }
        }
    }
}

}  // namespace ptl::verbs
