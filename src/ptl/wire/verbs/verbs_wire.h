// The verbs wire: processes on other hosts reached over an RDMA device (InfiniBand, RoCE;
// soft-RoCE in the guest tests). Each pair of processes shares one reliable-connected QP for
// both directions, created by whichever sends first (both at once: the lower (nid, pid)'s
// attempt wins) and agreed over the tcp wire (verbs_control.h); messages wait in order until
// it is up, or go over tcp when the peer has no verbs. Once a QP is up the tcp connections to
// that peer close (a peer costs no descriptor): a later setup opens one again, and a peer we wait
// on that stays silent for probe_ms is probed on its tcp port (refused: its process is gone).
//
// Memory does not grow with peers: every QP receives from one shared receive queue (SRQ) of
// srq_depth buffers, and sends leave from one pool of tx_bufs buffers (or straight from the
// caller's memory when the device inlines them). Flow control: each peer may have `credits`
// messages unhandled at the receiver; every send carries, in its immediate data, how many of
// the peer's messages we consumed, and a receiver with nothing to send returns them by a
// zero-length send. Credits of all peers together may exceed the SRQ: a message that finds
// it empty is retried by the device (receiver-not-ready, forever), never lost, so bursts from
// many peers at once slow down rather than fail. A peer thus costs a QP's send queue and a
// little bookkeeping (PtlXWireUsage reports the sum).
//
// QPs beyond max_qps are reclaimed: the least active connection with nothing in flight asks
// its peer, in band, to close (CLOSE_REQ, a send without immediate data after everything we
// sent); a peer with nothing in flight either answers CLOSE_ACK as its last message and
// destroys its QP once the device confirms it arrived, we destroy ours when it arrives (after
// every message of the peer's), and whoever has something to send later connects again. A peer
// with RDMA in flight or memory exported to us answers CLOSE_NAK and the connection stays.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "../wire.h"
#include "verbs_control.h"
#include "verbs_device.h"
#include "verbs_reg_cache.h"

namespace ptl::verbs {

struct VerbsConfig {
    std::string device;                        // PTL_VERBS_DEVICE: name[:port]; empty: the first active one
    int gid_index = -1;                        // PTL_VERBS_GID_INDEX
    uint32_t srq_depth = 2048;                 // PTL_VERBS_SRQ_DEPTH: receive buffers, shared by all peers
    uint32_t tx_bufs = 256;                    // PTL_VERBS_TX_BUFS: send buffers, shared by all peers
    uint32_t credits = 32;                     // PTL_VERBS_CREDITS: a peer's messages unhandled at once
    uint32_t buf_size = 8192;                  // PTL_VERBS_BUF_SIZE
    uint32_t send_queue = 4096;                // PTL_VERBS_SEND_QUEUE: sends in flight, all peers together
    long bulk_timeout_ms = 10000;              // PTL_VERBS_BULK_TIMEOUT_MS: an RDMA transfer's deadline
    long probe_ms = 1000;                      // PTL_VERBS_PROBE_MS: silence before a probe (peer_dead)
    uint32_t max_qps = 0;                      // PTL_VERBS_MAX_QPS: idle QPs closed beyond it; 0: no limit
    uint64_t max_message = uint64_t(1) << 40;  // as tcp: larger messages are refused
    long timeout_ms = 10000;                   // connection setup bound (PTL_TCP_TIMEOUT_MS)
    uint8_t ack_timeout = 18;                  // QP ACK timeout exponent: 4.096 us << 18 = 1.07 s, 7 retries
    bool reg_cache = true;                     // registrations kept while their memory stays mapped
    uint64_t reg_cache_max = uint64_t(1) << 30;  // bytes of unused registrations kept
    bool stats = false;                          // counters on stderr when the wire closes
    // The word of handled messages a peer that goes direct needs: with (a progress thread),
    // sent when the peer asks for it (a message it sent instead of going direct), with our
    // next send to it or at our next progress; without (nobody may call progress again:
    // PTL_PROGRESS=manual), for every message, at the end of the progress that handled it.
    bool defer_returns = true;
};

// What the wire holds on the device (PtlXWireUsage).
struct VerbsUsage {
    uint64_t pinned_bytes = 0;      // its own buffers and queues
    uint64_t registered_bytes = 0;  // application memory: registration cache and one-sided regions
    uint64_t peers = 0;             // connections up
    uint64_t qps_closed = 0;        // closed to stay within max_qps (both sides count)
};

class VerbsWire final : public Wire {
public:
    // `control` (the tcp wire) carries connection setup and the peers without verbs.
    static std::unique_ptr<VerbsWire> create(PeerId self, const VerbsConfig &cfg, Wire *control,
                                             std::function<void()> wake, std::string *err);
    ~VerbsWire() override;

    bool send(PeerId to, const void *header, size_t header_len, const struct iovec *payload,
              int payload_count) override;
    bool send_deferrable(PeerId to, const void *header, size_t header_len, const struct iovec *payload,
                         int payload_count) override;
    size_t max_inline(PeerId) override { return size_t(cfg_.max_message); }
    int progress(const MessageHandler &handler) override;
    bool peer_dead(PeerId) override;

    // Bulk data by RDMA read/write on the QP the peer's messages arrive on, from memory the
    // peer exported (its keys are rkeys); the call returns when the transfer is complete.
    bool has_bulk(PeerId to) const override;
    bool bulk_async() const override { return true; }
    bool bulk_start(PeerId peer, bool read, const struct iovec *local, int nl, const struct iovec *remote,
                    int nr, const uint64_t *keys, uint64_t cookie) override;
    void set_bulk_done(BulkDone done) override { bulk_done_ = std::move(done); }
    bool bulk_read(PeerId from, const struct iovec *local, int nl, const struct iovec *remote, int nr,
                   const uint64_t *keys) override;
    bool bulk_write(PeerId to, const struct iovec *local, int nl, const struct iovec *remote, int nr,
                    const uint64_t *keys) override;
    bool export_memory(PeerId, const struct iovec *pieces, int n, bool writable, uint64_t *keys,
                       uint64_t *id) override;
    void release_export(uint64_t id) override;

    // One-sided access (the engine's direct path): RDMA reads and writes on the QP our
    // messages to the peer take, so RC keeps them in order with those messages.
    bool remote_register(void *addr, size_t len, bool writable, bool atomic, uint64_t *key,
                         uint64_t *handle) override;
    bool remote_counts() const override { return dev_->atomics() && words_mr_; }
    void remote_deregister(uint64_t handle) override;
    bool remote_access(PeerId to, bool read, void *local, size_t len, uint64_t remote_addr, uint64_t key,
                       uint64_t cookie, bool must_copy, const RemoteCount &count) override;
    bool remote_atomic(PeerId to, AtomicOp op, uint64_t remote_addr, uint64_t key, uint64_t operand,
                       uint64_t compare, uint64_t cookie, const RemoteCount &count) override;
    bool remote_atomics() const override { return dev_->atomics() && words_mr_ && loop_qp_; }
    bool own_atomic(AtomicOp op, uint64_t addr, uint64_t key, uint64_t operand, uint64_t compare,
                    uint64_t *old) override;
    void set_remote_done(RemoteDone done) override { remote_done_ = std::move(done); }
    size_t remote_inline() const override { return dev_->max_inline_data(); }
    void reap_remote() override { poll_sends(); }
    void set_holding(bool holding) override;
    void report_handled_promptly(PeerId from) override;
    void set_peer_connected(std::function<void(PeerId)> f) override { peer_connected_ = std::move(f); }
    void withhold_credits(PeerId peer, bool on) override;

    // A connection-setup message that arrived over the control wire.
    void on_control(const InMessage &m);
    // The next completion calls `wake` once. Call after deciding to sleep.
    void arm_wakeup();
    // From now on the engine's sleepers poll the completion channel themselves (a completion
    // wakes the thread that waits for it, not this wire's watcher, which then hands it on):
    // they arm_wakeup(), poll channel_fd() and take_channel_events() once it is readable.
    void leave_channel_to_sleepers();
    int channel_fd() const { return channel_->fd; }
    // Reads (and acknowledges) the channel's events until none is left; true if there were.
    bool take_channel_events();
    uint64_t take_malformed();
    const std::string &device_name() const { return dev_->name(); }
    VerbsUsage usage() const;
    // Whether the control wire has news for us soon: connections in setup, peers it carries.
    bool control_busy() const { return connecting_ || accepting_ || over_control_; }

private:
    // Accepted: our QP is connected, the peer's perhaps not yet; sends wait (make_ready).
    // Closing: we asked the peer to close, or agreed to; nothing new is posted (sends wait in
    // the backlog for the next connection).
    enum class State { Connecting, Accepted, Ready, Closing, OverControl, Failed };
    // What a posted send-queue entry holds until the device is done with it.
    struct SqEntry {
        int32_t tx_buf = -1;  // a send buffer of the pool
        int32_t remote = -1;  // a one-sided operation (remote_ops_)
        uint32_t transfer = 0;  // a piece of this bulk transfer (transfers_)
        bool close_ack = false;  // our CLOSE_ACK: once complete, the peer has all we sent
    };
    struct Conn {
        PeerId peer{};
        uint32_t id = 0;
        State state = State::Connecting;
        ibv_qp *qp = nullptr;
        uint32_t psn = 0;
        uint32_t epoch = 0;  // of the attempt that made the connection (ours while connecting)
        uint64_t started_ns = 0;
        // Sending.
        uint32_t credits = 0;
        uint32_t window = 0;                        // the peer's grant: credits when it handled all we sent
        uint32_t peer_consumed = 0;                 // the last count the peer returned
        bool peer_holding = false;                  // its engine holds messages back (not yet handled)
        bool want_word = false;                     // we would go direct: our sends ask for its word
        uint32_t buf_size = 0;                      // the peer's receive buffers
        uint32_t remote_ops = 0, remote_reads = 0;  // one-sided operations in flight
        std::vector<SqEntry> sq;  // by sequence number modulo its size
        uint32_t sq_posted = 0, sq_done = 0;
        uint32_t unsignaled = 0;
        std::deque<std::vector<char>> backlog;  // whole frames not yet posted, in order
        size_t backlog_off = 0;                 // bytes of the front frame already posted
        bool blocked = false;                   // in blocked_: waits for pool buffers or send queue
        // Sends filled and counted but not yet handed to the device, posted as one chain
        // (one doorbell): deferrable ones wait there for the next send or progress.
        static constexpr int kMaxHeld = 16;
        ibv_send_wr held_wr[kMaxHeld];
        ibv_sge held_sge[kMaxHeld];
        int held = 0;
        bool corked = false;  // in corked_: holds deferred sends
        // Receiving.
        uint32_t consumed = 0, returned = 0;
        std::vector<char> partial;  // a message spanning buffers
        size_t partial_want = 0;
        bool prompt = false;  // report_handled_promptly
        bool owing = false;   // in owing_
        bool peer_wants = false;    // its last send asked for our word (it would go direct)
        bool told_holding = false;  // the holding bit of the last word we sent
        bool withheld = false;      // withhold_credits: our words repeat the count last returned
        bool port_failed = false;   // failed by a port or device event: may reconnect when it is back
        // Liveness once the control wire let go of the peer: completions seen from it (heard),
        // the count at the last look and since when it has not changed, the last probe.
        bool released = false;
        uint64_t heard = 0, heard_mark = 0, quiet_since_ns = 0, probed_ns = 0;
        // Reclaim (max_qps): transfers on this QP, activity (heard + sq_posted) at the last
        // trim, when the peer last refused to close, our close request, our agreement to the
        // peer's, an answer waiting for send-queue room, a CONNECT that waits for the close.
        uint32_t transfers = 0;
        uint64_t activity_mark = 0, refused_ns = 0;
        bool close_asked = false, close_agreed = false;
        uint32_t answer_owed = 0;
        bool connect_waiting = false;
        ControlMsg waiting_connect{};
        ~Conn();
    };

    VerbsWire(PeerId self, const VerbsConfig &cfg, Wire *control)
        : self_(self), cfg_(cfg), control_(control) {}
    bool init(std::string *err);
    Conn *conn_to(PeerId to);
    // The connection a completion came by. Both conn_to and this look at the last one first
    // (last_conn_): traffic mostly goes to and comes from one peer at a time.
    Conn *conn_by_qpn(uint32_t qpn) {
        if (last_conn_ && last_conn_->qp && last_conn_->qp->qp_num == qpn) return last_conn_;
        const auto it = by_qpn_.find(qpn);
        return it == by_qpn_.end() ? nullptr : (last_conn_ = it->second);
    }
    Conn *new_conn(PeerId peer);
    void drop_conn(Conn &c);
    bool make_ready(Conn &c, const ControlMsg &m, bool accepting, std::string *err);
    void promote(Conn &c);
    void on_connect(PeerId from, const ControlMsg &c);
    void on_accept(PeerId from, const ControlMsg &c);
    void fall_back(Conn &c);
    void fail(Conn &c);
    // The QP is up both ways: the control wire's connections to the peer close.
    void release_control(Conn &c);
    // Probes a released peer that has been silent for probe_ms (peer_dead's caller waits on it).
    void suspect(Conn &c);
    uint32_t sq_room(const Conn &c) const;
    uint32_t credit_word(Conn &c);
    void owe(Conn &c);
    // Posts as much of the backlog as credits, buffers and the send queue allow.
    void drain(Conn &c);
    void drain_blocked();
    bool send_frame(PeerId to, const void *header, size_t header_len, const struct iovec *payload,
                    int payload_count, bool deferrable);
    bool send_inline(Conn &c, const void *header, size_t header_len, const struct iovec *payload,
                     int payload_count, size_t payload_len);
    void hold_buf(Conn &c, uint32_t buf, size_t len);
    bool post_held(Conn &c);
    void flush_corked();
    char *tx_buf(uint32_t b) const { return tx_mem_.get() + size_t(b) * cfg_.buf_size; }
    // Takes the next send-queue entry of `c` for `e`; returns its sequence number.
    uint32_t take_sq(Conn &c, const SqEntry &e);
    void post_rx(uint32_t slot);
    void post_unposted_rx();
    void return_credits(Conn &c, bool now = false, bool signal = false);
    void reclaim_send_queue();
    void return_owed_credits();
    void return_withheld(Conn &c);
    void on_receive(Conn &c, uint32_t slot, uint32_t len, const MessageHandler &handler);
    int handle_recv(const ibv_wc &wc, const MessageHandler &handler);
    void stash_recv(const ibv_wc *wc, int n);
    void poll_credits();
    // Send completions concern only what we sent: handled wherever they are met.
    int poll_sends(bool always = false);
    int post_send(ibv_qp *qp, ibv_send_wr *wr, ibv_send_wr **bad);
    void on_send_done(const ibv_wc &wc);
    void report_remote();
    struct RemoteOp;
    Conn *ready_for_remote(PeerId to, uint32_t need);
    bool post_remote(Conn &c, ibv_send_wr &wr, const RemoteCount &count, RemoteOp op);
    void open_loopback();
    bool handled_all(Conn &c);
    int drain_stash(const MessageHandler &handler);
    void check_timeouts();
    void handle_device_events();
    bool bulk(PeerId peer, bool read, const struct iovec *local, int nl, const struct iovec *remote, int nr,
              const uint64_t *keys);
    // Posts what the send queue and the transfer's window allow, fails transfers past their
    // deadline or without their connection, and moves finished ones to bulk_results_.
    void pump_transfers();
    void report_bulk();
    void watch();
    ControlMsg describe(ControlKind kind, const Conn &c) const;
    // QP reclaim (max_qps).
    static bool carries_rdma(const Conn &c);
    void maybe_trim();
    bool closable(const Conn &c, uint64_t now) const;
    void start_close(Conn &c);
    void enter_closing(Conn &c);
    bool send_close(Conn &c, uint32_t kind);
    void answer_close(Conn &c, uint32_t kind);
    void send_answers();
    void on_close_message(Conn &c, const char *buf, uint32_t len);
    void reap_closed();

    PeerId self_;
    VerbsConfig cfg_;
    Wire *control_;
    std::unique_ptr<Device> dev_;
    ibv_comp_channel *channel_ = nullptr;
    ibv_cq *send_cq_ = nullptr, *recv_cq_ = nullptr;
    ibv_srq *srq_ = nullptr;
    uint32_t sq_depth_ = 0;     // entries of each QP's send queue
    uint32_t send_budget_ = 0;  // send-queue entries that may still be posted, all QPs
    // Signalled work requests posted and not yet completed (a hint: a failed QP's flush
    // completes unsignalled ones too, a destroyed one completes none); the send CQ is polled
    // at every progress while any is out, otherwise every kQuietSendPolls-th.
    uint32_t signaled_out_ = 0, quiet_send_polls_ = 0;
    std::unique_ptr<char[]> rx_mem_, tx_mem_;
    ibv_mr *rx_mr_ = nullptr, *tx_mr_ = nullptr;
    std::vector<uint32_t> free_tx_;
    std::unordered_map<PeerId, std::unique_ptr<Conn>, PeerIdHash> conns_;
    std::unordered_map<uint32_t, Conn *> by_id_;
    std::unordered_map<uint32_t, Conn *> by_qpn_;
    Conn *last_conn_ = nullptr;  // of conns_, or null
    static constexpr uint32_t kMaxRxBatch = 16;
    uint32_t rx_batch_ = 1;
    uint32_t rx_unposted_[kMaxRxBatch];
    uint32_t rx_unposted_count_ = 0;
    std::unordered_set<PeerId, PeerIdHash> dead_;
    uint32_t next_id_ = 1;
    uint32_t epoch_seed_ = 0;
    int connecting_ = 0;
    uint32_t ready_ = 0;         // QPs connected (Accepted or Ready)
    uint32_t accepting_ = 0;     // Accepted, not yet Ready
    uint32_t over_control_ = 0;  // peers the control wire carries
    uint32_t qps_ = 0;           // QPs to peers, in any state
    uint32_t closing_ = 0;       // of them in State::Closing
    uint64_t qps_closed_ = 0;
    uint64_t next_trim_ns_ = 0;
    int progress_depth_ = 0;         // closed connections are dropped by the outermost progress only
    std::vector<uint32_t> closed_;   // ids of Closing connections whose close completed
    std::vector<uint32_t> answers_;  // ids of connections owing a close answer
    std::unordered_map<PeerId, uint32_t, PeerIdHash> exports_to_;  // the peer may read or write them
    uint64_t malformed_ = 0;
    std::deque<ibv_wc> stashed_;  // receive completions polled, not yet handled, oldest first
    std::unique_ptr<RegCache> cache_;
    struct Export;
    std::unordered_set<Export *> exports_;  // handed to the engine, not yet released
    std::vector<Conn *> corked_;            // connections holding deferred sends
    std::vector<Conn *> blocked_;           // connections waiting for send resources
    uint64_t rdma_ops_ = 0, rdma_bytes_ = 0;
    struct Counters {  // PTL_VERBS_STATS
        uint64_t sends = 0, doorbells = 0, credit_sends = 0, receives = 0, credit_receives = 0, progress = 0,
                 arms = 0, withholds = 0;
    };
    Counters counters_;
    std::atomic<uint64_t> channel_events_{0};  // completion channel events, whoever took them
    size_t remote_registered_ = 0;  // bytes of remote_register's regions
    // One-sided operations in flight, by the slot their send-queue entry names.
    struct RemoteOp {
        uint64_t cookie = 0;
        RegCache::Region *region = nullptr;  // our side, unless inlined
        uint32_t conn = 0;
        bool read = false;    // a read or an atomic: later sends fence behind it
        int32_t result = -1;  // an atomic's: its word in words_->fetched
    };
    std::vector<RemoteOp> remote_ops_;
    std::vector<uint32_t> free_remote_ops_;
    struct RemoteResult {
        uint64_t cookie;
        bool ok;
        uint64_t fetched;
    };
    std::vector<RemoteResult> remote_results_;  // completed, to report outside a bulk transfer
    bool in_bulk_ = false;
    // Bulk transfers in flight: RDMA reads or writes of up to kBulkChunk bytes each, at most
    // kBulkWindow of a transfer posted at once, the rest posted as those complete.
    struct Transfer {
        struct Piece {
            uint64_t laddr;
            uint32_t len, lkey;
            uint64_t raddr;
            uint32_t rkey;
        };
        uint64_t cookie = 0;
        uint32_t conn = 0;
        bool read = false;
        std::unique_ptr<Export> local;  // our pieces' registrations, held until it ends
        std::vector<Piece> pieces;
        size_t next = 0;  // the first piece not yet posted
        uint32_t inflight = 0;
        bool failed = false;
        uint64_t deadline_ns = 0;
        Transfer();
        ~Transfer();  // where Export is complete
    };
    std::unordered_map<uint32_t, std::unique_ptr<Transfer>> transfers_;
    uint32_t next_transfer_ = 1;
    struct BulkResult {
        uint64_t cookie;
        bool ok;
    };
    std::vector<BulkResult> bulk_results_;  // finished, for the next progress to report
    BulkDone bulk_done_;
    // Words the device writes: old values of counters nobody reads, own_atomic's result, and
    // those our remote atomics fetch (one per atomic in flight).
    static constexpr uint32_t kAtomicResults = 1024;
    struct Words {
        uint64_t sink[8];
        uint64_t own;
        uint64_t fetched[kAtomicResults];
        uint32_t close[4];  // the close messages' contents, by kind
    };
    std::unique_ptr<Words> words_;
    ibv_mr *words_mr_ = nullptr;
    std::vector<uint32_t> free_results_;
    // A QP connected to itself: own_atomic's device atomics on our own memory.
    ibv_cq *loop_cq_ = nullptr;
    ibv_qp *loop_qp_ = nullptr;
    RemoteDone remote_done_;
    std::function<void(PeerId)> peer_connected_;
    bool holding_ = false;
    std::vector<Conn *> owing_;  // prompt connections that consumed since their last return

    // Asynchronous device events, read by the watcher thread for the engine's.
    struct DeviceEvent {
        ibv_event_type type;
        uint32_t qp_num;  // of a QP event; 0 for port and device events
    };
    std::mutex events_mu_;
    std::vector<DeviceEvent> device_events_;
    std::atomic<bool> have_events_{false};

    std::function<void()> wake_;
    int stop_fd_ = -1;
    std::atomic<bool> stop_{false};
    std::atomic<bool> channel_to_sleepers_{false};
    std::thread watcher_;
};

}  // namespace ptl::verbs
