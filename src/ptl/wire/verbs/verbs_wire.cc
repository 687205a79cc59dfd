#include "verbs_wire.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>

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

constexpr uint32_t kMaxHeader = 4096;
constexpr int kPollBatch = 32;

constexpr uint32_t kBulkWindow = 16;     // RDMA reads/writes of one transfer in flight
constexpr size_t kBulkChunk = 1u << 20;  // bytes per RDMA work request
constexpr uint32_t kRemoteWindow = 16;   // one-sided operations in flight per connection
constexpr size_t kRemoteMax = 1u << 30;  // bytes of one one-sided operation
constexpr uint32_t kQuietSendPolls = 64;  // see signaled_out_
constexpr uint32_t kSignalEvery = 16;    // a send in this many asks for a completion at least

// A send's immediate data: the count of the peer's buffers we consumed, and whether our
// engine holds messages back (then consumed is not handled).
constexpr uint32_t kHoldingBit = 0x80000000u;
constexpr uint32_t kWantBit = 0x40000000u;  // the sender asks for our word (it would go direct)
constexpr uint32_t kConsumedMask = 0x3fffffffu;

// A send without immediate data is about closing the connection (max_qps): four bytes,
// kCloseMagic | kind.
constexpr uint32_t kCloseMagic = 0x434c5300u;  // "CLS"
constexpr uint32_t kCloseReq = 1, kCloseNak = 2, kCloseAck = 3;
constexpr uint64_t kRefusedBackoffNs = 100'000'000;  // a peer that refused is not asked again sooner
constexpr uint64_t kTrimRetryNs = 10'000'000;        // over max_qps with nothing closable: look again

enum WrKind : uint64_t { kSend = 0, kRx = 2, kBulk = 4, kRemote = 5 };

uint64_t wr_id(WrKind k, uint32_t conn, uint32_t seq) {
    return uint64_t(k) << 60 | uint64_t(conn & 0x0fffffff) << 32 | seq;
}
uint32_t conn_of(uint64_t id) {
    return uint32_t(id >> 32) & 0x0fffffff;
}
uint32_t seq_of(uint64_t id) {
    return uint32_t(id);
}

bool lower(PeerId a, PeerId b) {
    return a.nid != b.nid ? a.nid < b.nid : a.pid < b.pid;
}

void print_peer(const char *what, PeerId p, const std::string &why) {
    std::fprintf(stderr, "portals: verbs connection %s %u.%u.%u.%u:%u: %s\n", what, p.nid >> 24,
                 (p.nid >> 16) & 255, (p.nid >> 8) & 255, p.nid & 255, p.pid, why.c_str());
}

}  // namespace

// Registrations held for one operation: memory exported to a peer until the engine releases
// it, or our side of one bulk transfer.
struct VerbsWire::Export {
    RegCache &cache;
    std::vector<RegCache::Region *> regions;
    PeerId peer{};  // exported to (export_memory): the connection to it is not closed meanwhile
    explicit Export(RegCache &c) : cache(c) {}
    ~Export() {
        for (RegCache::Region *r : regions) cache.release(r);
    }
};

VerbsWire::Transfer::Transfer() = default;
VerbsWire::Transfer::~Transfer() = default;

VerbsWire::Conn::~Conn() {
    if (qp) ibv_destroy_qp(qp);
}

std::unique_ptr<VerbsWire> VerbsWire::create(PeerId self, const VerbsConfig &cfg, Wire *control,
                                             std::function<void()> wake, std::string *err) {
    std::unique_ptr<VerbsWire> w(new VerbsWire(self, cfg, control));
    w->wake_ = std::move(wake);
    if (!w->init(err)) return nullptr;
    return w;
}

bool VerbsWire::init(std::string *err) {
    cfg_.buf_size = std::max<uint32_t>(cfg_.buf_size, 256);
    cfg_.srq_depth = std::max<uint32_t>(cfg_.srq_depth, 16);
    cfg_.tx_bufs = std::max<uint32_t>(cfg_.tx_bufs, 8);
    cfg_.credits = std::clamp<uint32_t>(cfg_.credits, 2, cfg_.srq_depth);
    // A peer's sends in flight: its credits' worth of messages, one-sided operations, and a
    // credit return or two.
    sq_depth_ = cfg_.credits + kRemoteWindow + 4;
    cfg_.send_queue = std::max(cfg_.send_queue, sq_depth_);
    send_budget_ = cfg_.send_queue;
    dev_.reset(Device::open(cfg_.device, cfg_.gid_index, err));
    if (!dev_) return false;
    auto fail_with = [&](const char *what) {
        *err = std::string(what) + ": " + std::strerror(errno);
        return false;
    };
    if (!(channel_ = ibv_create_comp_channel(dev_->context()))) return fail_with("ibv_create_comp_channel");
    // Whoever polls it (the watcher, or several sleepers) reads it until it is empty, and the
    // one that finds an event taken already must not block.
    const int flags = fcntl(channel_->fd, F_GETFL);
    if (flags < 0 || fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) < 0)
        return fail_with("fcntl(O_NONBLOCK)");
    // Neither queue ever overflows: a receive completes once per buffer posted, and sends
    // are posted only within send_budget_ (a QP in error completes every send it holds).
    if (!(recv_cq_ = ibv_create_cq(dev_->context(), int(cfg_.srq_depth), nullptr, channel_, 0)))
        return fail_with("ibv_create_cq");
    if (!(send_cq_ = ibv_create_cq(dev_->context(), int(cfg_.send_queue), nullptr, channel_, 0)))
        return fail_with("ibv_create_cq");
    if (!(srq_ = dev_->create_srq(cfg_.srq_depth, err))) return false;
    const size_t rx_bytes = size_t(cfg_.srq_depth) * cfg_.buf_size,
                 tx_bytes = size_t(cfg_.tx_bufs) * cfg_.buf_size;
    rx_mem_.reset(new char[rx_bytes]);
    tx_mem_.reset(new char[tx_bytes]);
    if (!(rx_mr_ = ibv_reg_mr(dev_->pd(), rx_mem_.get(), rx_bytes, IBV_ACCESS_LOCAL_WRITE)) ||
        !(tx_mr_ = ibv_reg_mr(dev_->pd(), tx_mem_.get(), tx_bytes, IBV_ACCESS_LOCAL_WRITE)))
        return fail_with("ibv_reg_mr (receive and send buffers; see PTL_VERBS_SRQ_DEPTH)");
    rx_batch_ = std::clamp<uint32_t>(cfg_.srq_depth / 64, 1, kMaxRxBatch);
    for (uint32_t i = 0; i < cfg_.srq_depth; ++i) post_rx(i);
    post_unposted_rx();
    free_tx_.reserve(cfg_.tx_bufs);
    for (uint32_t i = cfg_.tx_bufs; i > 0; --i) free_tx_.push_back(i - 1);
    if ((stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) return fail_with("eventfd");
    std::unique_ptr<UnmapWatch> unmap_watch;
    std::string why;
    if (cfg_.reg_cache && !(unmap_watch = UnmapWatch::open(&why)) && cfg_.stats)
        std::fprintf(stderr, "portals: verbs registrations are not cached (%s)\n", why.c_str());
    cache_ = std::make_unique<RegCache>(dev_->pd(), std::move(unmap_watch), size_t(cfg_.reg_cache_max));
    epoch_seed_ = uint32_t(std::random_device{}());
    words_.reset(new Words{});
    for (uint32_t k = 0; k < 4; ++k) words_->close[k] = kCloseMagic | k;
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
        const VerbsUsage u = usage();
        const Counters &k = counters_;
        std::fprintf(
            stderr,
            "portals: verbs wire on %s: %llu RDMA transfers, %llu bytes; %llu bytes pinned for %llu peers; "
            "%llu sends in %llu doorbells (%llu credit returns), %llu receives (%llu credit returns), %llu "
            "progress calls, %llu arms, %llu completion events, %llu credit withholds; "
            "at exit %d connecting, %u accepting, %u over tcp; "
            "registration cache %s: %llu hits, %llu misses, %llu uncached, %llu invalidated, %llu evicted\n",
            dev_->name().c_str(), (unsigned long long)rdma_ops_, (unsigned long long)rdma_bytes_,
            (unsigned long long)u.pinned_bytes, (unsigned long long)u.peers, (unsigned long long)k.sends,
            (unsigned long long)k.doorbells, (unsigned long long)k.credit_sends,
            (unsigned long long)k.receives, (unsigned long long)k.credit_receives,
            (unsigned long long)k.progress, (unsigned long long)k.arms,
            (unsigned long long)channel_events_.load(), (unsigned long long)k.withholds, connecting_,
            accepting_, over_control_, cache_->caching() ? "on" : "off", (unsigned long long)st.hits,
            (unsigned long long)st.misses, (unsigned long long)st.uncached,
            (unsigned long long)st.invalidated, (unsigned long long)st.evicted);
    }
    for (Export *e : exports_) delete e;
    exports_.clear();
    for (RemoteOp &op : remote_ops_)
        if (op.region) cache_->release(op.region);
    cache_.reset();
    if (loop_qp_) ibv_destroy_qp(loop_qp_);
    if (loop_cq_) ibv_destroy_cq(loop_cq_);
    if (words_mr_) ibv_dereg_mr(words_mr_);
    by_id_.clear();
    by_qpn_.clear();
    last_conn_ = nullptr;
    conns_.clear();
    if (srq_) ibv_destroy_srq(srq_);
    if (rx_mr_) ibv_dereg_mr(rx_mr_);
    if (tx_mr_) ibv_dereg_mr(tx_mr_);
    if (send_cq_) ibv_destroy_cq(send_cq_);
    if (recv_cq_) ibv_destroy_cq(recv_cq_);
    if (channel_) ibv_destroy_comp_channel(channel_);
    if (stop_fd_ >= 0) close(stop_fd_);
}

// Completion queue entries are 64 bytes on the devices we know; receive queue entries a
// 16-byte header and one gather entry.
VerbsUsage VerbsWire::usage() const {
    VerbsUsage u;
    const uint64_t buffers = (uint64_t(cfg_.srq_depth) + cfg_.tx_bufs) * cfg_.buf_size + sizeof(Words);
    const uint64_t queues = (uint64_t(cfg_.srq_depth) + cfg_.send_queue) * 64 + uint64_t(cfg_.srq_depth) * 32;
    const uint64_t per_qp = uint64_t(sq_depth_) * dev_->send_wqe_bytes();
    const uint64_t qps =
        uint64_t(std::count_if(conns_.begin(), conns_.end(), [](const auto &c) { return c.second->qp; }));
    u.pinned_bytes = buffers + queues + per_qp * (qps + (loop_qp_ ? 1 : 0));
    u.registered_bytes = (cache_ ? cache_->registered_bytes() : 0) + remote_registered_;
    u.peers = ready_;
    u.qps_closed = qps_closed_;
    return u;
}

ControlMsg VerbsWire::describe(ControlKind kind, const Conn &c) const {
    ControlMsg m{};
    m.magic = kControlMagic;
    m.kind = uint8_t(kind);
    const PortAddress &a = dev_->address();
    m.link_layer = a.link_layer;
    m.mtu = a.mtu;
    m.lid = a.lid;
    std::memcpy(m.gid, a.gid, 16);
    m.qpn = c.qp ? c.qp->qp_num : 0;
    m.psn = c.psn;
    m.credits = cfg_.credits;
    m.buf_size = cfg_.buf_size;
    m.epoch = c.epoch;
    // Messages of the peer's we hold back, perhaps from a connection closed before this one:
    // it may not go direct until our word says they were handled.
    m.reserved = holding_ ? kControlHolding : 0;
    return m;
}

// ---------------------------------------------------------------------------------------
// Connections

VerbsWire::Conn *VerbsWire::new_conn(PeerId peer) {
    last_conn_ = nullptr;  // it may replace the one cached
    auto c = std::make_unique<Conn>();
    c->peer = peer;
    c->id = next_id_++;
    c->psn = (epoch_seed_ + c->id * 7919u) & 0xffffff;
    c->epoch = epoch_seed_ ^ (c->id * 0x9e3779b9u);
    c->started_ns = monotonic_ns();
    c->sq.resize(sq_depth_);
    std::string err;
    Device::QpQueues q;
    q.send_cq = send_cq_;
    q.recv_cq = recv_cq_;
    q.srq = srq_;
    q.max_send = sq_depth_;
    if (!(c->qp = dev_->create_qp(q, &err))) {
        print_peer("to", peer, err + "; using tcp");
        c->state = State::OverControl;
        ++over_control_;
    } else {
        by_qpn_[c->qp->qp_num] = c.get();
        ++qps_;
        next_trim_ns_ = 0;  // over max_qps now: the next progress looks for idle ones
    }
    Conn *raw = c.get();
    by_id_[raw->id] = raw;
    conns_[peer] = std::move(c);
    return raw;
}

// The connection a send to `to` takes, started if there is none.
VerbsWire::Conn *VerbsWire::conn_to(PeerId to) {
    if (last_conn_ && last_conn_->peer == to) return last_conn_;
    auto it = conns_.find(to);
    if (it != conns_.end()) return last_conn_ = it->second.get();
    Conn *c = new_conn(to);
    if (c->state != State::Connecting) return c;
    const ControlMsg m = describe(ControlKind::Connect, *c);
    if (control_->send(to, &m, sizeof m, nullptr, 0)) {
        ++connecting_;
    } else {
        c->state = State::Failed;
        dead_.insert(to);
    }
    return c;
}

void VerbsWire::drop_conn(Conn &c) {
    if (c.state == State::Connecting) --connecting_;
    if (c.state == State::Ready || c.state == State::Accepted) --ready_;
    if (c.state == State::Accepted) --accepting_;
    if (c.state == State::OverControl) --over_control_;
    if (c.state == State::Closing) --closing_;
    if (c.qp) --qps_;
    std::erase(owing_, &c);
    std::erase(corked_, &c);
    std::erase(blocked_, &c);
    // Its buffers go back to the pool: the QP is destroyed first, so the device is done with them.
    std::vector<SqEntry> held(c.sq);
    const uint32_t outstanding = c.sq_posted - c.sq_done;
    if (c.qp) by_qpn_.erase(c.qp->qp_num);
    by_id_.erase(c.id);
    const PeerId peer = c.peer;
    for (uint32_t s = c.sq_done; s != c.sq_posted; ++s) {
        const SqEntry &e = held[s % sq_depth_];
        if (e.tx_buf >= 0) free_tx_.push_back(uint32_t(e.tx_buf));
        if (e.remote >= 0) {
            RemoteOp &op = remote_ops_[size_t(e.remote)];
            if (op.region) cache_->release(op.region);
            if (op.result >= 0) free_results_.push_back(uint32_t(op.result));
            if (op.cookie != ~uint64_t(0)) remote_results_.push_back({op.cookie, false, 0});
            op = RemoteOp{};
            free_remote_ops_.push_back(uint32_t(e.remote));
        }
    }
    send_budget_ += outstanding;
    if (last_conn_ == &c) last_conn_ = nullptr;
    conns_.erase(peer);
}

// Both sides' QPs exist; ours goes to RTS towards the peer's. The side that accepted sends
// nothing until it knows the other's QP is connected too (a packet for a QP not yet ready to
// receive is dropped, and costs an ACK timeout): its first message on the QP, or READY over
// the control wire, tells (promote).
bool VerbsWire::make_ready(Conn &c, const ControlMsg &m, bool accepting, std::string *err) {
    PortAddress remote;
    remote.link_layer = m.link_layer;
    remote.mtu = m.mtu;
    remote.lid = m.lid;
    std::memcpy(remote.gid, m.gid, 16);
    if (!dev_->connect_qp(c.qp, c.psn, remote, m.qpn, m.psn, cfg_.ack_timeout, err)) return false;
    c.buf_size = std::max<uint32_t>(256, m.buf_size);
    c.credits = c.window = std::max<uint32_t>(1, m.credits);
    c.peer_holding = (m.reserved & kControlHolding) != 0;
    c.state = accepting ? State::Accepted : State::Ready;
    if (accepting) ++accepting_;
    ++ready_;
    return true;
}

void VerbsWire::promote(Conn &c) {
    c.state = State::Ready;
    --accepting_;
    drain(c);
    if (c.state == State::Ready) release_control(c);
}

void VerbsWire::release_control(Conn &c) {
    c.released = true;
    c.heard_mark = c.heard;
    c.quiet_since_ns = monotonic_ns();
    control_->release_peer(c.peer);
}

void VerbsWire::suspect(Conn &c) {
    const uint64_t now = monotonic_ns(), quiet = uint64_t(cfg_.probe_ms) * 1000000ull;
    if (c.heard != c.heard_mark) {
        c.heard_mark = c.heard;
        c.quiet_since_ns = now;
        return;
    }
    if (now - c.quiet_since_ns < quiet || now - c.probed_ns < quiet) return;
    c.probed_ns = now;
    control_->probe_peer(c.peer);
}

void VerbsWire::on_connect(PeerId from, const ControlMsg &m) {
    if (m.link_layer != dev_->address().link_layer) {
        send_reject(*control_, from, m.epoch);
        return;
    }
    Conn *c = nullptr;
    if (auto it = conns_.find(from); it != conns_.end()) {
        c = it->second.get();
        if (c->epoch == m.epoch) return;  // a duplicate
        // The peer closed and connects again before we saw its last messages: they come first.
        if (c->state == State::Closing) {
            c->connect_waiting = true;
            c->waiting_connect = m;
            return;
        }
        // Both connect at once: the lower side's attempt is the one.
        if (c->state == State::Connecting && lower(self_, from)) return;
        if (c->state != State::Connecting) {  // the peer starts over: a new process or QP
            drop_conn(*c);
            c = nullptr;
        } else {
            --connecting_;
        }
    }
    if (!c) c = new_conn(from);
    std::string err = "no QP";
    c->epoch = m.epoch;
    if (c->state == State::OverControl || !make_ready(*c, m, true, &err)) {
        print_peer("from", from, "refused (" + err + "); tcp carries our messages to it");
        send_reject(*control_, from, m.epoch);
        fall_back(*c);
        return;
    }
    dead_.erase(from);  // a new process at the address, or the peer starting over
    const ControlMsg a = describe(ControlKind::Accept, *c);
    control_->send(from, &a, sizeof a, nullptr, 0);
    if (peer_connected_) peer_connected_(from);
}

void VerbsWire::on_accept(PeerId from, const ControlMsg &m) {
    auto it = conns_.find(from);
    if (it == conns_.end()) return;
    Conn &c = *it->second;
    if (c.state != State::Connecting || m.epoch != c.epoch) return;
    --connecting_;
    if (ControlKind(m.kind) == ControlKind::Reject || m.link_layer != dev_->address().link_layer) {
        fall_back(c);
        return;
    }
    std::string err;
    if (!make_ready(c, m, false, &err)) {
        print_peer("to", from, err + "; using tcp");
        fall_back(c);
        return;
    }
    ControlMsg r = describe(ControlKind::Ready, c);
    control_->send(from, &r, sizeof r, nullptr, 0);
    drain(c);
    if (c.state == State::Ready) release_control(c);  // after READY: the Bye follows it
    if (peer_connected_) peer_connected_(from);
}

void VerbsWire::fall_back(Conn &c) {
    if (c.state == State::Accepted) --accepting_;
    if (c.state == State::Ready || c.state == State::Accepted) --ready_;
    if (c.state != State::OverControl) ++over_control_;
    c.state = State::OverControl;
    for (auto &f : c.backlog) {
        FrameHead fh;
        std::memcpy(&fh, f.data(), sizeof fh);
        iovec v{f.data() + sizeof fh + fh.header_len, size_t(fh.payload_len)};
        control_->send(c.peer, f.data() + sizeof fh, fh.header_len, &v, 1);
    }
    c.backlog.clear();
}

// The peer is lost to us: nothing more is sent, and what the device still holds completes
// in error (the QP goes to the error state, which flushes it).
void VerbsWire::fail(Conn &c) {
    if (c.state == State::Failed) return;
    if (c.state == State::Connecting) --connecting_;
    if (c.state == State::Ready || c.state == State::Accepted) --ready_;
    if (c.state == State::Accepted) --accepting_;
    if (c.state == State::OverControl) --over_control_;
    if (c.state == State::Closing) --closing_;
    c.state = State::Failed;
    c.held = 0;
    c.backlog.clear();
    dead_.insert(c.peer);
    if (c.qp) {
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_ERR;
        ibv_modify_qp(c.qp, &a, IBV_QP_STATE);
    }
}

void VerbsWire::on_control(const InMessage &m) {
    const ControlMsg c = control_of(m);
    switch (ControlKind(c.kind)) {
        case ControlKind::Connect: on_connect(m.from, c); break;
        case ControlKind::Accept:
        case ControlKind::Reject: on_accept(m.from, c); break;
        case ControlKind::Ready:
            if (auto it = conns_.find(m.from);
                it != conns_.end() && it->second->state == State::Accepted && it->second->epoch == c.epoch)
                promote(*it->second);
            break;
        default: ++malformed_;
    }
}

// A broken QP fails its peer; a port or device going down fails every peer; a port coming back
// lets the peers it failed connect again (their next send, or theirs, sets up a new QP).
void VerbsWire::handle_device_events() {
    std::vector<DeviceEvent> list;
    {
        std::lock_guard<std::mutex> g(events_mu_);
        list.swap(device_events_);
        have_events_.store(false, std::memory_order_relaxed);
    }
    for (const DeviceEvent &e : list) {
        const char *what = ibv_event_type_str(e.type);
        if (e.qp_num) {
            auto it = by_qpn_.find(e.qp_num);
            if (it == by_qpn_.end() || it->second->state == State::Failed) continue;
            print_peer("to", it->second->peer, std::string(what) + ": the peer counts as failed");
            fail(*it->second);
            continue;
        }
        switch (e.type) {
            case IBV_EVENT_PORT_ERR:
            case IBV_EVENT_DEVICE_FATAL:
            case IBV_EVENT_CQ_ERR: {
                std::fprintf(stderr, "portals: verbs device %s: %s; its peers count as failed\n",
                             dev_->name().c_str(), what);
                for (auto &[peer, c] : conns_) {
                    if (c->state == State::Failed || c->state == State::OverControl) continue;
                    c->port_failed = true;
                    fail(*c);
                }
                break;
            }
            case IBV_EVENT_PORT_ACTIVE: {
                std::vector<PeerId> back;
                for (auto &[peer, c] : conns_)
                    if (c->state == State::Failed && c->port_failed) back.push_back(peer);
                for (const PeerId &p : back) {
                    drop_conn(*conns_[p]);
                    dead_.erase(p);
                }
                if (!back.empty())
                    std::fprintf(stderr,
                                 "portals: verbs device %s: port active again; %zu peers may reconnect\n",
                                 dev_->name().c_str(), back.size());
                break;
            }
            default: break;
        }
    }
}

void VerbsWire::check_timeouts() {
    const uint64_t now = monotonic_ns();
    for (auto &[peer, c] : conns_) {
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
    auto it = conns_.find(p);
    Conn *c = it == conns_.end() ? nullptr : it->second.get();
    if (c && c->released && c->state != State::Failed) suspect(*c);
    if (!control_->peer_dead(p)) return false;
    // Its process is gone: what the device still holds for it fails now, not at its retry limit.
    // (Quietly: peers exit at the end of every job.)
    if (c && c->state != State::OverControl && c->state != State::Failed) fail(*c);
    return true;
}

uint64_t VerbsWire::take_malformed() {
    const uint64_t m = malformed_;
    malformed_ = 0;
    return m;
}

// ---------------------------------------------------------------------------------------
// Sending

uint32_t VerbsWire::sq_room(const Conn &c) const {
    return std::min(sq_depth_ - (c.sq_posted - c.sq_done), send_budget_);
}

// What a send tells the peer: the count of its messages we consumed and whether we hold
// messages back. Every send carries it, so the peer hears it from then on.
uint32_t VerbsWire::credit_word(Conn &c) {
    if (!c.withheld) c.returned = c.consumed;
    c.told_holding = holding_;
    return htonl((c.returned & kConsumedMask) | (holding_ ? kHoldingBit : 0) | (c.want_word ? kWantBit : 0));
}

uint32_t VerbsWire::take_sq(Conn &c, const SqEntry &e) {
    const uint32_t seq = c.sq_posted++;
    c.sq[seq % sq_depth_] = e;
    --send_budget_;
    return seq;
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
    if (!dead_.empty() && dead_.count(to)) return false;
    Conn *c = conn_to(to);
    if (c->state == State::OverControl) return control_->send(to, header, header_len, payload, payload_count);
    if (c->state == State::Failed) return false;
    size_t plen = 0;
    for (int i = 0; i < payload_count; ++i) plen += payload[i].iov_len;
    if (header_len > kMaxHeader || plen > cfg_.max_message) return false;
    FrameHead fh{uint32_t(header_len), 0, plen};
    const size_t total = sizeof fh + header_len + plen;
    const bool can_post = c->state == State::Ready && c->backlog.empty() && c->credits > 0 && sq_room(*c) > 0;
    // Small and not held back: gathered by the device straight from the caller's memory.
    if (can_post && !deferrable && total <= dev_->max_inline_data() &&
        payload_count + 2 <= int(Device::kMaxSendSge))
        return send_inline(*c, header, header_len, payload, payload_count, plen);
    if (c->held == Conn::kMaxHeld && !post_held(*c)) {
        fail(*c);
        return false;
    }
    // A message that fits one buffer with a credit, a buffer and a send-queue entry free is
    // gathered straight into the buffer; the rest waits whole in the backlog.
    const bool direct = can_post && c->held < Conn::kMaxHeld && total <= c->buf_size && !free_tx_.empty();
    std::vector<char> frame(direct ? 0 : total);
    uint32_t buf = 0;
    if (direct) {
        buf = free_tx_.back();
        free_tx_.pop_back();
    }
    char *p = direct ? tx_buf(buf) : frame.data();
    std::memcpy(p, &fh, sizeof fh);
    p += sizeof fh;
    std::memcpy(p, header, header_len);
    p += header_len;
    for (int i = 0; i < payload_count; ++i) {
        if (payload[i].iov_len) std::memcpy(p, payload[i].iov_base, payload[i].iov_len);
        p += payload[i].iov_len;
    }
    if (direct) {
        hold_buf(*c, buf, total);
        if (deferrable) {
            if (!c->corked) {
                c->corked = true;
                corked_.push_back(c);
            }
            return true;
        }
        if (post_held(*c)) return true;
        fail(*c);
        return false;
    }
    c->backlog.push_back(std::move(frame));
    if (c->state == State::Ready) drain(*c);
    return true;
}

// The device copies inline data at the post: the caller's memory is free when it returns.
bool VerbsWire::send_inline(Conn &c, const void *header, size_t header_len, const struct iovec *payload,
                            int payload_count, size_t payload_len) {
    if (c.held && !post_held(c)) {  // what was held goes first
        fail(c);
        return false;
    }
    const FrameHead fh{uint32_t(header_len), 0, payload_len};
    ibv_sge sge[Device::kMaxSendSge];
    int n = 0;
    sge[n++] = ibv_sge{reinterpret_cast<uint64_t>(&fh), uint32_t(sizeof fh), 0};
    sge[n++] = ibv_sge{reinterpret_cast<uint64_t>(header), uint32_t(header_len), 0};
    for (int i = 0; i < payload_count; ++i)
        if (payload[i].iov_len)
            sge[n++] =
                ibv_sge{reinterpret_cast<uint64_t>(payload[i].iov_base), uint32_t(payload[i].iov_len), 0};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.sg_list = sge;
    wr.num_sge = n;
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.imm_data = credit_word(c);
    // Signalled now and then: its entry holds no buffer, only send-queue room.
    const bool signal = ++c.unsignaled >= kSignalEvery || send_budget_ < cfg_.send_queue / 4;
    wr.send_flags =
        IBV_SEND_INLINE | (signal ? IBV_SEND_SIGNALED : 0) | (c.remote_reads ? IBV_SEND_FENCE : 0);
    if (signal) c.unsignaled = 0;
    wr.wr_id = wr_id(kSend, c.id, take_sq(c, SqEntry{}));
    --c.credits;
    ++counters_.doorbells;
    ++counters_.sends;
    if (post_send(c.qp, &wr, &bad) == 0) return true;
    fail(c);
    return false;
}

// Counts `buf`, filled with `len` bytes, as sent. A send holding a pool buffer asks for a
// completion when it is the last of its chain (post_held) or every kSignalEvery-th: RC
// completes a QP's sends in order, so one completion returns the buffers of those before it,
// and no buffer waits long for a peer we stopped sending to.
void VerbsWire::hold_buf(Conn &c, uint32_t buf, size_t len) {
    ibv_sge &sge = c.held_sge[c.held];
    sge = ibv_sge{reinterpret_cast<uint64_t>(tx_buf(buf)), uint32_t(len), tx_mr_->lkey};
    ibv_send_wr &wr = c.held_wr[c.held];
    wr = ibv_send_wr{};
    SqEntry e;
    e.tx_buf = int32_t(buf);
    wr.wr_id = wr_id(kSend, c.id, take_sq(c, e));
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.imm_data = credit_word(c);
    const bool signal = ++c.unsignaled >= kSignalEvery;
    if (signal) c.unsignaled = 0;
    // After an RDMA read the QP may start later requests before the read's data is read.
    wr.send_flags = (signal ? IBV_SEND_SIGNALED : 0) |
                    (len <= dev_->max_inline_data() ? IBV_SEND_INLINE : 0) |
                    (c.remote_reads ? IBV_SEND_FENCE : 0);
    ++c.held;
    --c.credits;
}

bool VerbsWire::post_held(Conn &c) {
    if (c.held == 0) return true;
    for (int i = 0; i + 1 < c.held; ++i) c.held_wr[i].next = &c.held_wr[i + 1];
    ibv_send_wr &last = c.held_wr[c.held - 1];
    last.next = nullptr;
    if (!(last.send_flags & IBV_SEND_SIGNALED)) {
        last.send_flags |= IBV_SEND_SIGNALED;
        c.unsignaled = 0;
    }
    ibv_send_wr *bad = nullptr;
    counters_.sends += uint64_t(c.held);
    ++counters_.doorbells;
    c.held = 0;
    return post_send(c.qp, c.held_wr, &bad) == 0;
}

// The lists below are swapped out to be walked (what they call may queue more); the walked
// list's buffer goes back when nothing was queued meanwhile: a swap per message was a malloc
// and a free per message.
template <typename T>
static void give_back_capacity(std::vector<T> &queue, std::vector<T> &walked) {
    if (!queue.empty()) return;
    walked.clear();
    queue.swap(walked);
}

void VerbsWire::flush_corked() {
    std::vector<Conn *> list;
    list.swap(corked_);
    for (Conn *c : list) {
        c->corked = false;
        if (c->state == State::Ready && !post_held(*c)) fail(*c);
    }
    give_back_capacity(corked_, list);
}

void VerbsWire::drain(Conn &c) {
    while (!c.backlog.empty() && c.state == State::Ready) {
        const std::vector<char> &f = c.backlog.front();
        while (c.backlog_off < f.size() && c.credits > 0) {
            if (c.held == Conn::kMaxHeld && !post_held(c)) {
                fail(c);
                return;
            }
            if (free_tx_.empty() || sq_room(c) == 0) {
                if (!c.blocked) {
                    c.blocked = true;
                    blocked_.push_back(&c);
                }
                break;
            }
            const uint32_t buf = free_tx_.back();
            free_tx_.pop_back();
            const size_t len = std::min<size_t>(c.buf_size, f.size() - c.backlog_off);
            std::memcpy(tx_buf(buf), f.data() + c.backlog_off, len);
            hold_buf(c, buf, len);
            c.backlog_off += len;
        }
        if (c.backlog_off < f.size()) break;  // until credits, buffers or send-queue room come back
        c.backlog.pop_front();
        c.backlog_off = 0;
    }
    if (c.state == State::Ready && !post_held(c)) fail(c);
}

void VerbsWire::drain_blocked() {
    std::vector<Conn *> list;
    list.swap(blocked_);
    for (Conn *c : list) {
        c->blocked = false;
        if (c->state == State::Ready) drain(*c);
    }
    give_back_capacity(blocked_, list);
}

// ---------------------------------------------------------------------------------------
// Receiving

// Buffers go back to the shared queue in chains of rx_batch_ (one post, one provider lock, for
// them all): at most rx_batch_ - 1 of srq_depth are out of the queue meanwhile.
void VerbsWire::post_rx(uint32_t slot) {
    rx_unposted_[rx_unposted_count_++] = slot;
    if (rx_unposted_count_ >= rx_batch_) post_unposted_rx();
}

void VerbsWire::post_unposted_rx() {
    ibv_sge sge[kMaxRxBatch];
    ibv_recv_wr wr[kMaxRxBatch], *bad = nullptr;
    const uint32_t n = rx_unposted_count_;
    for (uint32_t i = 0; i < n; ++i) {
        const uint32_t slot = rx_unposted_[i];
        sge[i] = ibv_sge{reinterpret_cast<uint64_t>(rx_mem_.get() + size_t(slot) * cfg_.buf_size),
                         cfg_.buf_size, rx_mr_->lkey};
        wr[i] = ibv_recv_wr{};
        wr[i].wr_id = wr_id(kRx, 0, slot);
        wr[i].sg_list = &sge[i];
        wr[i].num_sge = 1;
        wr[i].next = i + 1 < n ? &wr[i + 1] : nullptr;
    }
    rx_unposted_count_ = 0;
    if (n && ibv_post_srq_recv(srq_, wr, &bad) != 0) ++malformed_;  // cannot happen: the slots were taken
}

// Returned in quarters of the peer's credits when we have nothing to send it (each send
// carries the count): a sender with no credits left is owed a whole window, so a receiver
// that keeps consuming always returns some. `now`: whatever is owed, even nothing (a change
// of holding_ is news too).
void VerbsWire::return_credits(Conn &c, bool now, bool signal) {
    const uint32_t owed = c.consumed - c.returned;
    if (c.state != State::Ready || c.withheld || (!now && owed < std::max<uint32_t>(1, cfg_.credits / 4)) ||
        sq_room(c) == 0)
        return;
    if (c.held && !post_held(c)) {  // they carry an older count: go first
        fail(c);
        return;
    }
    ibv_send_wr wr{}, *bad = nullptr;
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.imm_data = credit_word(c);
    wr.num_sge = 0;
    signal = signal || ++c.unsignaled >= kSignalEvery;
    if (signal) c.unsignaled = 0;
    wr.send_flags = signal ? IBV_SEND_SIGNALED : 0;
    wr.wr_id = wr_id(kSend, c.id, take_sq(c, SqEntry{}));
    ++counters_.doorbells;
    ++counters_.credit_sends;
    if (post_send(c.qp, &wr, &bad) != 0) {
        fail(c);
        return;
    }
}

void VerbsWire::on_receive(Conn &c, uint32_t slot, uint32_t len, const MessageHandler &handler) {
    const char *buf = rx_mem_.get() + size_t(slot) * cfg_.buf_size;
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
    ++c.consumed;
    return_credits(c);
    if (c.prompt && (c.peer_wants || !cfg_.defer_returns)) owe(c);
}

// A peer that reaches our memory directly must hear what we handled (and whether we hold
// messages back): until then it may not go direct (ordering). Told by our next send to it, or
// else at our next progress (or before we sleep; cfg_.defer_returns): a reply that follows at
// once, as in a ping-pong, carries it, and the peer gets no extra message. Owed only when the
// peer asked (kWantBit) unless nobody may progress again (!defer_returns): a peer streaming
// messages, which could not go direct anyway, costs no word per message.
void VerbsWire::owe(Conn &c) {
    if (c.owing) return;
    c.owing = true;
    owing_.push_back(&c);
}

void VerbsWire::return_owed_credits() {
    std::vector<Conn *> list;
    list.swap(owing_);
    for (Conn *c : list) {
        c->owing = false;
        auto owed = [&] { return c->consumed != c->returned || c->told_holding != holding_; };
        if (owed()) return_credits(*c, true);
        if (owed() && c->state == State::Ready && !c->withheld) owe(*c);  // no room: at the next progress
    }
    give_back_capacity(owing_, list);
}

// A receive from the SRQ: the QP it came by names the peer. The buffer goes back at once;
// its bytes were handled (or copied into a partial message) before.
int VerbsWire::handle_recv(const ibv_wc &wc, const MessageHandler &handler) {
    const uint32_t slot = seq_of(wc.wr_id);
    Conn *c = conn_by_qpn(wc.qp_num);
    if (wc.status != IBV_WC_SUCCESS) {
        // A QP in error hands back the receive it had started; the peer is gone for us.
        if (c && wc.status != IBV_WC_WR_FLUSH_ERR) fail(*c);
        post_rx(slot);
        return 1;
    }
    if (!c || c->state == State::Failed) {
        post_rx(slot);
        return 1;
    }
    ++c->heard;
    if (!(wc.wc_flags & IBV_WC_WITH_IMM)) [[unlikely]] {
        on_close_message(*c, rx_mem_.get() + size_t(slot) * cfg_.buf_size, wc.byte_len);
        post_rx(slot);
        return 1;
    }
    if (wc.byte_len > 0)
        on_receive(*c, slot, wc.byte_len, handler);
    else
        ++counters_.credit_receives;
    ++counters_.receives;
    post_rx(slot);
    return 1;
}

// Receives polled: the credits they carry count at once (they concern only what we sent, and a
// sender waiting for them must not wait for the messages before them to be handled); the
// messages wait in stashed_, in order.
void VerbsWire::stash_recv(const ibv_wc *wc, int n) {
    for (int i = 0; i < n; ++i) {
        stashed_.push_back(wc[i]);
        if (wc[i].status != IBV_WC_SUCCESS) continue;
        Conn *found = conn_by_qpn(wc[i].qp_num);
        if (!found) continue;
        Conn &c = *found;
        if (c.state == State::Accepted) promote(c);
        if (!(wc[i].wc_flags & IBV_WC_WITH_IMM)) continue;                   // a close message: no credits
        if (c.state != State::Ready && c.state != State::Closing) continue;  // Closing: a refusal may follow
        const uint32_t imm = ntohl(wc[i].imm_data), consumed = imm & kConsumedMask;
        const uint32_t fresh = (consumed - c.peer_consumed) & kConsumedMask;
        c.credits += fresh;
        c.peer_consumed = consumed;
        c.peer_holding = (imm & kHoldingBit) != 0;
        c.peer_wants = (imm & kWantBit) != 0;
        if (c.peer_wants && c.prompt) owe(c);  // also when it asks with a credit return
        if (fresh && !c.backlog.empty() && c.state == State::Ready) drain(c);
    }
}

// A completed send (signalled, or any send of a QP in error) completes every earlier one of
// its QP: their buffers and send-queue entries come back, one-sided operations are reported.
void VerbsWire::on_send_done(const ibv_wc &wc) {
    auto it = by_id_.find(conn_of(wc.wr_id));
    if (it == by_id_.end()) return;  // of a connection dropped since (its entries went with it)
    Conn &c = *it->second;
    const uint32_t seq = seq_of(wc.wr_id);
    if (seq - c.sq_done >= c.sq_posted - c.sq_done) return;  // retired already
    const bool ok = wc.status == IBV_WC_SUCCESS;
    bool close_acked = false;
    for (uint32_t s = c.sq_done; s != seq + 1; ++s) {
        SqEntry &e = c.sq[s % sq_depth_];
        if (e.tx_buf >= 0) free_tx_.push_back(uint32_t(e.tx_buf));
        close_acked |= e.close_ack;
        if (e.transfer) {
            if (auto t = transfers_.find(e.transfer); t != transfers_.end()) {
                --t->second->inflight;
                if (!ok) t->second->failed = true;
            }
        }
        if (e.remote >= 0) {
            RemoteOp op = remote_ops_[size_t(e.remote)];
            remote_ops_[size_t(e.remote)] = RemoteOp{};
            free_remote_ops_.push_back(uint32_t(e.remote));
            if (op.region) cache_->release(op.region);
            uint64_t fetched = 0;
            if (op.result >= 0) {
                fetched = words_->fetched[op.result];
                free_results_.push_back(uint32_t(op.result));
            }
            --c.remote_ops;
            if (op.read) --c.remote_reads;
            if (op.cookie != ~uint64_t(0)) remote_results_.push_back({op.cookie, ok, fetched});
        }
        e = SqEntry{};
    }
    send_budget_ += seq + 1 - c.sq_done;
    c.sq_done = seq + 1;
    if (ok) ++c.heard;
    // A bad key (the peer revoked the memory before we knew), a peer gone: the QP is broken,
    // the peer lost to us.
    if (!ok && c.state != State::Failed)
        fail(c);
    else if (ok && close_acked && c.state == State::Closing)
        closed_.push_back(c.id);  // the peer has our last message: the QP goes (reap_closed)
}

int VerbsWire::post_send(ibv_qp *qp, ibv_send_wr *wr, ibv_send_wr **bad) {
    *bad = nullptr;
    const int rc = ibv_post_send(qp, wr, bad);
    for (const ibv_send_wr *w = wr; w && w != *bad; w = w->next)
        if (w->send_flags & IBV_SEND_SIGNALED) ++signaled_out_;
    return rc;
}

// An empty poll of the send CQ is most of an idle progress call's device work, and a
// latency-bound exchange (one message each way) finds it empty nearly every time.
int VerbsWire::poll_sends(bool always) {
    if (signaled_out_ == 0 && !always && ++quiet_send_polls_ < kQuietSendPolls) return 0;
    quiet_send_polls_ = 0;
    ibv_wc wc[kPollBatch];
    int total = 0, n;
    while ((n = ibv_poll_cq(send_cq_, kPollBatch, wc)) > 0) {
        for (int i = 0; i < n; ++i) on_send_done(wc[i]);
        total += n;
        signaled_out_ -= std::min(signaled_out_, uint32_t(n));
        if (n < kPollBatch) break;
    }
    if (total == 0 && send_budget_ == cfg_.send_queue) signaled_out_ = 0;  // nothing can be out
    if (total && !blocked_.empty()) drain_blocked();
    if (!in_bulk_ && !remote_results_.empty()) report_remote();
    return total;
}

void VerbsWire::report_remote() {
    if (remote_results_.empty()) return;
    std::vector<RemoteResult> list;
    list.swap(remote_results_);
    for (const RemoteResult &r : list)
        if (remote_done_) remote_done_(r.cookie, r.ok, r.fetched);
    give_back_capacity(remote_results_, list);
}

// Receive completions are handled in the order the CQ gave them (messages of one connection
// must reach the engine in order): progress puts each batch at the back of stashed_ and takes
// from the front, so a handler that calls progress again (the engine waiting for peers inside
// a delivery) continues the same sequence.
int VerbsWire::drain_stash(const MessageHandler &handler) {
    int work = 0;
    while (!stashed_.empty()) {
        const ibv_wc wc = stashed_.front();
        stashed_.pop_front();
        work += handle_recv(wc, handler);
    }
    return work;
}

int VerbsWire::progress(const MessageHandler &handler) {
    ++counters_.progress;
    ++progress_depth_;
    if (have_events_.load(std::memory_order_acquire)) [[unlikely]]
        handle_device_events();
    if (!corked_.empty()) flush_corked();
    if (!owing_.empty()) return_owed_credits();
    int work = poll_sends();
    if (!transfers_.empty() || !bulk_results_.empty()) [[unlikely]] {
        pump_transfers();
        work += int(bulk_results_.size());
        report_bulk();
    }
    work += drain_stash(handler);
    ibv_wc wc[kPollBatch];
    for (int round = 0; round < 4; ++round) {
        const int n = ibv_poll_cq(recv_cq_, kPollBatch, wc);
        if (n <= 0) break;
        stash_recv(wc, n);
        work += drain_stash(handler);
        if (n < kPollBatch) break;
    }
    if (!cfg_.defer_returns && !owing_.empty()) return_owed_credits();
    if (send_budget_ < cfg_.send_queue / 4) reclaim_send_queue();
    if (connecting_) check_timeouts();
    if (!answers_.empty()) [[unlikely]]
        send_answers();
    if (--progress_depth_ == 0) {  // no caller holds a connection of ours now
        if (cfg_.max_qps && qps_ - closing_ > cfg_.max_qps) [[unlikely]]
            maybe_trim();
        if (!closed_.empty()) [[unlikely]]
            reap_closed();
    }
    return work;
}

// Unsignalled sends complete only with a later signalled one of their QP: a peer we stopped
// sending to keeps up to kSignalEvery - 1 entries of the send budget. When the budget runs
// low, those peers get a signalled credit return (which carries news anyway) to free them.
void VerbsWire::reclaim_send_queue() {
    for (auto &[peer, c] : conns_)
        if (c->state == State::Ready && c->unsignaled && c->sq_posted != c->sq_done)
            return_credits(*c, true, true);
}

// ---------------------------------------------------------------------------------------
// Reclaiming QPs beyond max_qps

// RDMA for an operation of the peer's may still start while our close request is unanswered:
// the peer exported the memory, so it will refuse to close.
bool VerbsWire::carries_rdma(const Conn &c) {
    return c.state == State::Ready || (c.state == State::Closing && c.close_asked && !c.close_agreed);
}

// Nothing of ours needs the QP: no message half sent, no RDMA in flight, no memory the peer may
// still reach through it for an operation of ours.
bool VerbsWire::closable(const Conn &c, uint64_t now) const {
    return c.state == State::Ready && c.released && !c.withheld && c.backlog.empty() && !c.held &&
           !c.corked && !c.remote_ops && !c.transfers && !c.answer_owed && sq_room(c) > 0 &&
           now - c.refused_ns >= kRefusedBackoffNs && !exports_to_.count(c.peer);
}

// Asks the least active closable peers since the last look to close, until the QPs left open
// are within max_qps (those closing already do not count).
void VerbsWire::maybe_trim() {
    const uint64_t now = monotonic_ns();
    if (now < next_trim_ns_ || !words_mr_) return;
    next_trim_ns_ = now + kTrimRetryNs;
    std::vector<std::pair<uint64_t, Conn *>> idle;
    for (auto &[peer, c] : conns_) {
        const uint64_t activity = c->heard + c->sq_posted;
        if (closable(*c, now)) idle.emplace_back(activity - c->activity_mark, c.get());
        c->activity_mark = activity;
    }
    std::sort(idle.begin(), idle.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
    for (const auto &[delta, c] : idle) {
        if (qps_ - closing_ <= cfg_.max_qps) break;
        start_close(*c);
    }
}

void VerbsWire::start_close(Conn &c) {
    if (!send_close(c, kCloseReq)) return;
    c.close_asked = true;
    enter_closing(c);
}

void VerbsWire::enter_closing(Conn &c) {
    c.state = State::Closing;
    --ready_;
    ++closing_;
}

// After whatever we sent before (held sends go first), signalled: CLOSE_ACK's completion is
// the moment the QP may go.
bool VerbsWire::send_close(Conn &c, uint32_t kind) {
    if (c.held && !post_held(c)) {
        fail(c);
        return false;
    }
    ibv_sge sge{reinterpret_cast<uint64_t>(&words_->close[kind]), uint32_t(sizeof(uint32_t)),
                words_mr_->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED | (c.remote_reads ? IBV_SEND_FENCE : 0);
    SqEntry e;
    e.close_ack = kind == kCloseAck;
    wr.wr_id = wr_id(kSend, c.id, take_sq(c, e));
    c.unsignaled = 0;
    ++counters_.doorbells;
    if (post_send(c.qp, &wr, &bad) == 0) return true;
    fail(c);
    return false;
}

// Sent now, or by the next progress once the send queue has room.
void VerbsWire::answer_close(Conn &c, uint32_t kind) {
    if (!c.answer_owed && sq_room(c) > 0) {
        send_close(c, kind);
        return;
    }
    if (!c.answer_owed) answers_.push_back(c.id);
    c.answer_owed = kind;
}

void VerbsWire::send_answers() {
    std::vector<uint32_t> list;
    list.swap(answers_);
    for (uint32_t id : list) {
        auto it = by_id_.find(id);
        if (it == by_id_.end()) continue;
        Conn &c = *it->second;
        if (c.state == State::Failed || !c.answer_owed) {
            c.answer_owed = 0;
        } else if (sq_room(c) == 0) {
            answers_.push_back(id);
        } else {
            send_close(c, std::exchange(c.answer_owed, 0));
        }
    }
}

// In order with the peer's messages: a request comes after everything it sent us, an ACK after
// everything it will send on this QP.
void VerbsWire::on_close_message(Conn &c, const char *buf, uint32_t len) {
    uint32_t word = 0;
    if (len == sizeof word) std::memcpy(&word, buf, sizeof word);
    if ((word & ~0xffu) != kCloseMagic) {
        ++malformed_;
        return;
    }
    switch (word & 0xff) {
        case kCloseReq:
            if (c.state == State::Closing) {
                // Both asked at once: the lower side's request is the one, the lower ignores ours.
                if (c.close_asked && !c.close_agreed && !lower(self_, c.peer)) {
                    c.close_agreed = true;
                    answer_close(c, kCloseAck);
                }
                return;
            }
            if (c.state != State::Ready) return;
            if (!c.backlog.empty() || c.remote_ops || c.transfers || c.withheld ||
                exports_to_.count(c.peer)) {
                answer_close(c, kCloseNak);
                return;
            }
            c.close_agreed = true;
            enter_closing(c);
            answer_close(c, kCloseAck);
            return;
        case kCloseNak:
            if (c.state != State::Closing || !c.close_asked || c.close_agreed) return;
            c.close_asked = false;
            c.refused_ns = monotonic_ns();
            c.state = State::Ready;
            --closing_;
            ++ready_;
            drain(c);
            // What we consumed while closing was not returned: the peer may be waiting for it
            // (a backlog is a reason to refuse).
            return_withheld(c);
            return;
        case kCloseAck:
            if (c.state == State::Closing && c.close_asked && !c.close_agreed) closed_.push_back(c.id);
            return;
        default: ++malformed_;
    }
}

// Closes completed: the QPs go; what waited to be sent, and a CONNECT the peer sent meanwhile,
// start the next connection.
void VerbsWire::reap_closed() {
    std::vector<uint32_t> list;
    list.swap(closed_);
    for (uint32_t id : list) {
        auto it = by_id_.find(id);
        if (it == by_id_.end() || it->second->state != State::Closing) continue;
        Conn &c = *it->second;
        const PeerId peer = c.peer;
        std::deque<std::vector<char>> backlog = std::move(c.backlog);
        const bool connect = c.connect_waiting;
        const ControlMsg m = c.waiting_connect;
        ++qps_closed_;
        drop_conn(c);
        if (connect) on_connect(peer, m);
        if (backlog.empty()) continue;
        Conn *n = conn_to(peer);
        if (n->state == State::Failed) continue;
        for (auto &f : backlog) n->backlog.push_back(std::move(f));
        if (n->state == State::OverControl)
            fall_back(*n);
        else if (n->state == State::Ready)
            drain(*n);
    }
}

// ---------------------------------------------------------------------------------------
// Bulk data

// Closing too: a rendezvous sent now waits for the next connection, whose QP reaches the same
// registrations (keys belong to the memory, not to a QP).
bool VerbsWire::has_bulk(PeerId to) const {
    auto it = conns_.find(to);
    return it != conns_.end() && (it->second->state == State::Ready || it->second->state == State::Closing);
}

bool VerbsWire::export_memory(PeerId peer, const struct iovec *pieces, int n, bool writable, uint64_t *keys,
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
    e->peer = peer;
    ++exports_to_[peer];
    exports_.insert(e.get());
    *id = reinterpret_cast<uint64_t>(e.release());
    return true;
}

void VerbsWire::release_export(uint64_t id) {
    Export *e = reinterpret_cast<Export *>(id);
    if (!exports_.erase(e)) return;
    if (auto it = exports_to_.find(e->peer); it != exports_to_.end() && --it->second == 0)
        exports_to_.erase(it);
    delete e;
}

bool VerbsWire::bulk_read(PeerId from, const struct iovec *local, int nl, const struct iovec *remote, int nr,
                          const uint64_t *keys) {
    return bulk(from, true, local, nl, remote, nr, keys);
}

bool VerbsWire::bulk_write(PeerId to, const struct iovec *local, int nl, const struct iovec *remote, int nr,
                           const uint64_t *keys) {
    return bulk(to, false, local, nl, remote, nr, keys);
}

// Waits for a transfer as bulk_start runs it (within its deadline: past it the QP is failed,
// which completes - flushes - what it still holds, so nothing lands in `local` once this
// returns). Other transfers' results wait for progress.
bool VerbsWire::bulk(PeerId peer, bool read, const struct iovec *local, int nl, const struct iovec *remote,
                     int nr, const uint64_t *keys) {
    const uint64_t cookie = ~uint64_t(0) - next_transfer_;
    if (!bulk_start(peer, read, local, nl, remote, nr, keys, cookie)) return false;
    in_bulk_ = true;
    bool done = false, ok = false;
    while (!done) {
        poll_sends(true);
        pump_transfers();
        for (size_t i = 0; i < bulk_results_.size(); ++i) {
            if (bulk_results_[i].cookie != cookie) continue;
            ok = bulk_results_[i].ok;
            bulk_results_.erase(bulk_results_.begin() + ptrdiff_t(i));
            done = true;
            break;
        }
    }
    in_bulk_ = false;
    if (!remote_results_.empty() || !bulk_results_.empty()) wake_();  // reported by the next progress
    return ok;
}

bool VerbsWire::bulk_start(PeerId peer, bool read, const struct iovec *local, int nl,
                           const struct iovec *remote, int nr, const uint64_t *keys, uint64_t cookie) {
    auto it = conns_.find(peer);
    if (it == conns_.end() || !carries_rdma(*it->second) || !keys) return false;
    Conn &c = *it->second;
    if (c.held && !post_held(c)) {
        fail(c);
        return false;
    }
    auto t = std::make_unique<Transfer>();
    t->cookie = cookie;
    t->conn = c.id;
    t->read = read;
    t->local = std::make_unique<Export>(*cache_);  // a read lands in them, a write leaves them
    std::vector<uint32_t> lkeys(size_t(nl), 0);
    for (int i = 0; i < nl; ++i) {
        if (!local[i].iov_len) continue;
        RegCache::Region *r = cache_->acquire(local[i].iov_base, local[i].iov_len, read);
        if (!r) return false;
        t->local->regions.push_back(r);
        lkeys[size_t(i)] = RegCache::lkey(r);
    }
    int li = 0, ri = 0;
    size_t loff = 0, roff = 0;
    while (li < nl && ri < nr) {
        const size_t k = std::min({local[li].iov_len - loff, remote[ri].iov_len - roff, kBulkChunk});
        if (k)
            t->pieces.push_back({reinterpret_cast<uint64_t>(local[li].iov_base) + loff, uint32_t(k),
                                 lkeys[size_t(li)], reinterpret_cast<uint64_t>(remote[ri].iov_base) + roff,
                                 uint32_t(keys[ri])});
        loff += k;
        roff += k;
        if (loff == local[li].iov_len) ++li, loff = 0;
        if (roff == remote[ri].iov_len) ++ri, roff = 0;
    }
    t->deadline_ns = monotonic_ns() + uint64_t(cfg_.bulk_timeout_ms) * 1000000ull;
    const uint32_t id = next_transfer_++;
    if (next_transfer_ == 0) next_transfer_ = 1;
    transfers_.emplace(id, std::move(t));
    ++c.transfers;
    pump_transfers();
    return true;
}

void VerbsWire::pump_transfers() {
    if (transfers_.empty()) return;
    const uint64_t now = monotonic_ns();
    for (auto it = transfers_.begin(); it != transfers_.end();) {
        Transfer &t = *it->second;
        auto ci = by_id_.find(t.conn);
        Conn *c = ci == by_id_.end() ? nullptr : ci->second;
        if (!c) {
            t.failed = true;  // its QP was destroyed: nothing more lands
            t.inflight = 0;
        } else if (!carries_rdma(*c)) {
            t.failed = true;  // failed: the device flushes what it holds
        } else if (now > t.deadline_ns && !t.failed) {
            print_peer("to", c->peer, "an RDMA transfer missed its deadline (PTL_VERBS_BULK_TIMEOUT_MS)");
            t.failed = true;
            fail(*c);
        }
        while (!t.failed && t.next < t.pieces.size() && t.inflight < kBulkWindow && sq_room(*c) > 0) {
            const Transfer::Piece &p = t.pieces[t.next];
            ibv_sge sge{p.laddr, p.len, p.lkey};
            ibv_send_wr wr{}, *bad = nullptr;
            SqEntry e;
            e.transfer = it->first;
            wr.wr_id = wr_id(kBulk, c->id, take_sq(*c, e));
            wr.sg_list = &sge;
            wr.num_sge = 1;
            wr.opcode = t.read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.wr.rdma.remote_addr = p.raddr;
            wr.wr.rdma.rkey = p.rkey;
            if (post_send(c->qp, &wr, &bad) != 0) {
                // Never reached the device: its entry is taken back here.
                c->sq[(c->sq_posted - 1) % sq_depth_] = SqEntry{};
                --c->sq_posted;
                ++send_budget_;
                t.failed = true;
                fail(*c);
                break;
            }
            ++t.inflight;
            ++t.next;
            ++rdma_ops_;
            rdma_bytes_ += p.len;
        }
        // A failed QP that is never flushed (a broken device) would keep the transfer forever.
        const bool abandoned = t.failed && t.inflight && now > t.deadline_ns + 2'000'000'000ull;
        if (abandoned && c) print_peer("to", c->peer, "the device does not flush a failed QP");
        if ((t.inflight == 0 && (t.failed || t.next == t.pieces.size())) || abandoned) {
            bulk_results_.push_back({t.cookie, !t.failed});
            if (c) --c->transfers;
            it = transfers_.erase(it);
        } else {
            ++it;
        }
    }
}

void VerbsWire::report_bulk() {
    if (bulk_results_.empty() || in_bulk_) return;
    std::vector<BulkResult> list;
    list.swap(bulk_results_);
    for (const BulkResult &r : list)
        if (bulk_done_) bulk_done_(r.cookie, r.ok);
    give_back_capacity(bulk_results_, list);
}

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
bool VerbsWire::handled_all(Conn &c) {
    auto handled = [&] {
        return c.state == State::Ready && c.backlog.empty() && c.held == 0 && !c.peer_holding &&
               c.credits == c.window;
    };
    if (handled()) return true;
    // The answer may be in the queue: an initiator that never waits (PTL_PROGRESS=manual)
    // would otherwise never learn it.
    poll_credits();
    return handled();
}

// Credits and one-sided completions concern only what we sent: taken from the queues at once.
// The messages polled with the credits wait in stashed_, in order, for the next progress.
void VerbsWire::poll_credits() {
    poll_sends();
    ibv_wc wc[kPollBatch];
    const int n = ibv_poll_cq(recv_cq_, kPollBatch, wc);
    if (n <= 0) return;
    stash_recv(wc, n);
    wake_();
}

void VerbsWire::set_holding(bool holding) {
    if (holding_ == holding) return;
    holding_ = holding;
    // The peers that go direct hear it with our next send or progress (owe): holding, they
    // wait; released, they may go. A message held now was not yet returned to its sender, so
    // the return that tells of it carries the holding bit.
    for (auto &[peer, c] : conns_)
        if (c->prompt) owe(*c);
}

// The peer's credits stay with us while its messages queue in the engine: it sends at most its
// credits more, then waits (its sends wait in its backlog) until we resume.
void VerbsWire::withhold_credits(PeerId peer, bool on) {
    auto it = conns_.find(peer);
    if (it == conns_.end() || it->second->withheld == on) return;
    Conn &c = *it->second;
    c.withheld = on;
    if (on)
        ++counters_.withholds;
    else
        return_withheld(c);
}

// Credits kept back (withheld, or consumed while closing) go now, or with the next progress
// when the send queue has no room: nothing else may trigger them, the peer waits for them.
void VerbsWire::return_withheld(Conn &c) {
    auto owed = [&] { return c.consumed != c.returned || c.told_holding != holding_; };
    if (c.state != State::Ready || !owed()) return;
    return_credits(c, true);
    if (owed()) owe(c);
}

void VerbsWire::report_handled_promptly(PeerId from) {
    if (auto it = conns_.find(from); it != conns_.end()) it->second->prompt = true;
}

// The connection a one-sided operation to `to` may take now (`need` work requests), or null.
VerbsWire::Conn *VerbsWire::ready_for_remote(PeerId to, uint32_t need) {
    auto it = conns_.find(to);
    if (it == conns_.end()) return nullptr;
    Conn &c = *it->second;
    // A peer the control wire saw die is not written to: its QP would take the retry time to
    // say so.
    if (control_->peer_dead(to)) return nullptr;
    // Not yet told that everything we sent was handled: this operation goes as a message,
    // which asks the peer for its word (a receiver with a progress thread sends it only on
    // request; cfg_.defer_returns), so the next one may go direct.
    c.want_word = !handled_all(c);
    if (c.want_word) return nullptr;
    if (c.remote_ops + need > kRemoteWindow || sq_room(c) < need) poll_sends(true);
    if (c.state != State::Ready || c.remote_ops + need > kRemoteWindow || sq_room(c) < need) return nullptr;
    return &c;
}

bool VerbsWire::remote_access(PeerId to, bool read, void *local, size_t len, uint64_t remote_addr,
                              uint64_t key, uint64_t cookie, bool must_copy, const RemoteCount &count) {
    if (len > kRemoteMax || (count.amount && !remote_counts())) return false;
    Conn *cp = ready_for_remote(to, count.amount ? 2 : 1);
    if (!cp) return false;
    Conn &c = *cp;
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

// Posts `wr` (its send-queue entry, signalling and fence filled in here) with the count behind
// it; on success the entry holds `op` until the completion.
bool VerbsWire::post_remote(Conn &c, ibv_send_wr &wr, const RemoteCount &count, RemoteOp op) {
    if (c.held && !post_held(c)) {  // messages sent before go first
        fail(c);
        return false;
    }
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
    remote_ops_[slot] = op;
    SqEntry e;
    e.remote = int32_t(slot);
    ibv_send_wr add{}, *bad = nullptr;
    wr.wr_id = wr_id(kRemote, c.id, take_sq(c, e));
    // With a count behind it only the count's completion is asked for: it retires the data's
    // entry too (on_send_done retires in order), and a failed write still completes (in
    // error). One completion per operation, not two: each one that finds the engine asleep
    // costs a wake-up.
    wr.send_flags |= (count.amount ? 0 : IBV_SEND_SIGNALED) | (c.remote_reads ? IBV_SEND_FENCE : 0);
    // The count after the data: RC executes them in order at the peer, so whoever sees the
    // count sees the data.
    ibv_sge add_sge{reinterpret_cast<uint64_t>(words_->sink), 8, words_mr_ ? words_mr_->lkey : 0};
    if (count.amount) {
        remote_ops_[add_slot] = RemoteOp{~uint64_t(0), nullptr, c.id, false, -1};
        SqEntry ae;
        ae.remote = int32_t(add_slot);
        wr.next = &add;
        add.wr_id = wr_id(kRemote, c.id, take_sq(c, ae));
        add.sg_list = &add_sge;
        add.num_sge = 1;
        add.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
        add.send_flags = IBV_SEND_SIGNALED;
        add.wr.atomic.remote_addr = count.addr;
        add.wr.atomic.rkey = uint32_t(count.key);
        add.wr.atomic.compare_add = count.amount;
        ++c.remote_ops;
    }
    ++c.remote_ops;
    if (op.read) ++c.remote_reads;
    if (post_send(c.qp, &wr, &bad) != 0) {
        // Entries the device never took stay in the queue: the failed QP's flush cannot
        // return them, so they are returned here (the caller releases `op`'s region).
        const bool data_went = bad == &add;
        const uint32_t undo = data_went ? 1 : (count.amount ? 2 : 1);
        for (uint32_t i = 0; i < undo; ++i) {
            const uint32_t seq = --c.sq_posted;
            const SqEntry u = c.sq[seq % sq_depth_];
            c.sq[seq % sq_depth_] = SqEntry{};
            ++send_budget_;
            --c.remote_ops;
            remote_ops_[size_t(u.remote)] = RemoteOp{};
            free_remote_ops_.push_back(uint32_t(u.remote));
        }
        if (op.read && !data_went) --c.remote_reads;
        // The data went without its count: the peer cannot be trusted to count.
        if (data_went) {
            fail(c);
            return true;  // reported failed by the flush
        }
        return false;
    }
    ++rdma_ops_;
    return true;
}

bool VerbsWire::remote_atomic(PeerId to, AtomicOp op, uint64_t remote_addr, uint64_t key, uint64_t operand,
                              uint64_t compare, uint64_t cookie, const RemoteCount &count) {
    if (!remote_atomics() || free_results_.empty() || (remote_addr & 7)) return false;
    Conn *cp = ready_for_remote(to, count.amount ? 2 : 1);
    if (!cp) return false;
    Conn &c = *cp;
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
    Device::QpQueues q;
    q.send_cq = q.recv_cq = loop_cq_;
    q.max_send = 2;
    q.max_recv = 1;
    if (loop_cq_) loop_qp_ = dev_->create_qp(q, &err);
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
    if (!owing_.empty()) return_owed_credits();
    ++counters_.arms;
    ibv_req_notify_cq(recv_cq_, 0);
    ibv_req_notify_cq(send_cq_, 0);
    // A completion that came before the request raises no event: look once more.
    ibv_wc wc[kPollBatch];
    const int n = ibv_poll_cq(recv_cq_, kPollBatch, wc);
    if (n > 0) stash_recv(wc, n);
    if (n > 0 || poll_sends(true) > 0) wake_();
}

void VerbsWire::leave_channel_to_sleepers() {
    channel_to_sleepers_.store(true, std::memory_order_release);
    const uint64_t one = 1;  // the watcher polls again, without the channel
    if (write(stop_fd_, &one, sizeof one) < 0) {
    }
}

bool VerbsWire::take_channel_events() {
    ibv_cq *cq;
    void *ctx;
    bool any = false;
    while (ibv_get_cq_event(channel_, &cq, &ctx) == 0) {
        channel_events_.fetch_add(1, std::memory_order_relaxed);
        ibv_ack_cq_events(cq, 1);
        any = true;
    }
    return any;
}

// Also reads the device's asynchronous events (a QP broken, a port down or up, the device
// lost): they are queued for the engine's thread, which acts on them at its next progress.
void VerbsWire::watch() {
    pthread_setname_np(pthread_self(), "ptl-verbs-watch");
    pollfd fds[3] = {
        {channel_->fd, POLLIN, 0}, {stop_fd_, POLLIN, 0}, {dev_->context()->async_fd, POLLIN, 0}};
    while (!stop_.load(std::memory_order_acquire)) {
        // Without the channel: an fd of -1 is not polled.
        fds[0].fd = channel_to_sleepers_.load(std::memory_order_acquire) ? -1 : channel_->fd;
        fds[0].revents = 0;
        if (poll(fds, 3, -1) < 0) continue;
        if (stop_.load(std::memory_order_acquire)) break;
        if (fds[1].revents & POLLIN) {  // leave_channel_to_sleepers
            uint64_t n;
            if (read(stop_fd_, &n, sizeof n) < 0) {
            }
        }
        if (fds[2].revents & POLLIN) {
            ibv_async_event ev;
            if (ibv_get_async_event(dev_->context(), &ev) == 0) {
                DeviceEvent d{ev.event_type, 0};
                switch (ev.event_type) {
                    case IBV_EVENT_QP_FATAL:
                    case IBV_EVENT_QP_REQ_ERR:
                    case IBV_EVENT_QP_ACCESS_ERR:
                    case IBV_EVENT_PATH_MIG_ERR: d.qp_num = ev.element.qp->qp_num; break;
                    default: break;
                }
                ibv_ack_async_event(&ev);
                {
                    std::lock_guard<std::mutex> g(events_mu_);
                    device_events_.push_back(d);
                }
                have_events_.store(true, std::memory_order_release);
                wake_();
            }
        }
        if (fds[0].fd >= 0 && (fds[0].revents & POLLIN) && take_channel_events()) wake_();
    }
}

}  // namespace ptl::verbs
