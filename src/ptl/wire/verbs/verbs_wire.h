// The verbs wire: processes on other hosts reached over an RDMA device (InfiniBand, RoCE;
// soft-RoCE in the guest tests). Each direction between two processes is one reliable
// connected QP, created by the first send and agreed over the tcp wire (verbs_control.h);
// messages wait in order until it is up, or go over tcp when the peer has no verbs. Messages
// land in receive buffers the receiver posted for that sender; the sender spends one credit
// per buffer and the receiver returns them in batches (a zero-length send with the count in
// its immediate data), so a message never meets a missing buffer. Larger messages span
// several buffers. One completion queue serves every QP; a watcher thread turns completions
// into a wake-up only while the engine sleeps.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
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
    uint32_t rx_depth = 64;                    // PTL_VERBS_RX_DEPTH: receive buffers per sending peer
    uint32_t buf_size = 8192;                  // PTL_VERBS_BUF_SIZE
    uint64_t max_message = uint64_t(1) << 40;  // as tcp: larger messages are refused
    long timeout_ms = 10000;                   // connection setup bound (PTL_TCP_TIMEOUT_MS)
    uint8_t ack_timeout = 18;                  // QP ACK timeout exponent: 4.096 us << 18 = 1.07 s, 7 retries
    bool reg_cache = true;                     // registrations kept while their memory stays mapped
    uint64_t reg_cache_max = uint64_t(1) << 30;  // bytes of unused registrations kept
    bool stats = false;                          // counters on stderr when the wire closes
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
    size_t max_inline(PeerId) const override { return size_t(cfg_.max_message); }
    int progress(const MessageHandler &handler) override;
    bool peer_dead(PeerId) override;

    // Bulk data by RDMA read/write on the QP the peer's messages arrive on, from memory the
    // peer exported (its keys are rkeys); the call returns when the transfer is complete.
    bool has_bulk(PeerId to) const override;
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
    void reap_remote() override { poll_own_completions(); }
    void set_holding(bool holding) override;
    void report_handled_promptly(PeerId from) override;
    void set_peer_connected(std::function<void(PeerId)> f) override { peer_connected_ = std::move(f); }

    // A connection-setup message that arrived over the control wire.
    void on_control(const InMessage &m);
    // The next completion calls `wake` once. Call after deciding to sleep.
    void arm_wakeup();
    uint64_t take_malformed();
    const std::string &device_name() const { return dev_->name(); }

private:
    enum class State { Connecting, Ready, OverControl, Failed };
    struct OutConn {
        PeerId peer{};
        uint32_t id = 0;
        State state = State::Connecting;
        ibv_qp *qp = nullptr;
        uint32_t psn = 0;
        uint32_t epoch = 0;
        uint64_t started_ns = 0;
        uint32_t credits = 0;
        uint32_t peer_rx_depth = 0;             // credits when the receiver has handled all we sent
        uint32_t peer_consumed = 0;             // the last count the receiver returned
        bool peer_holding = false;              // its engine holds messages back (not yet handled)
        uint32_t remote_ops = 0, remote_reads = 0;  // one-sided operations in flight
        uint32_t buf_size = 0;                  // the receiver's buffers
        uint32_t tx_head = 0, tx_tail = 0;      // sends posted / known complete (counts)
        std::deque<std::vector<char>> backlog;  // whole frames not yet posted, in order
        size_t backlog_off = 0;                 // bytes of the front frame already posted
        std::unique_ptr<char[]> tx;             // tx_depth_ slots of buf_size bytes
        ibv_mr *tx_mr = nullptr;
        // Sends filled and counted but not yet handed to the device, posted as one chain
        // (one doorbell): deferrable ones wait there for the next send or progress.
        static constexpr int kMaxHeld = 16;
        ibv_send_wr held_wr[kMaxHeld];
        ibv_sge held_sge[kMaxHeld];
        int held = 0;
        bool corked = false;  // in corked_: holds deferred sends
        ~OutConn();
    };
    struct InConn {
        PeerId peer{};
        uint32_t id = 0;
        ibv_qp *qp = nullptr;
        uint32_t epoch = 0;
        uint32_t consumed = 0, returned = 0;
        uint32_t credit_sends = 0;  // posted, not completed
        std::vector<char> partial;  // a message spanning buffers
        size_t partial_want = 0;
        bool failed = false;
        bool prompt = false;         // report_handled_promptly
        bool owing = false;          // in owing_
        std::unique_ptr<char[]> rx;  // rx_depth slots of buf_size bytes
        ibv_mr *rx_mr = nullptr;
        ~InConn();
    };

    VerbsWire(PeerId self, const VerbsConfig &cfg, Wire *control)
        : self_(self), cfg_(cfg), control_(control) {}
    bool init(std::string *err);
    OutConn *out_conn(PeerId to);
    void on_connect(PeerId from, const ControlMsg &c);
    void on_accept(PeerId from, const ControlMsg &c);
    void fall_back(OutConn &c);
    void fail_out(OutConn &c);
    bool reserve_cq(uint32_t entries);
    // Posts as much of the backlog as credits and send slots allow.
    void drain(OutConn &c);
    bool send_frame(PeerId to, const void *header, size_t header_len, const struct iovec *payload,
                    int payload_count, bool deferrable);
    char *tx_slot(OutConn &c) const;
    void hold_slot(OutConn &c, size_t len);
    bool post_held(OutConn &c);
    void flush_corked();
    void post_rx(InConn &c, uint32_t slot);
    void post_credit_rx(OutConn &c);
    void return_credits(InConn &c, bool now = false);
    void return_owed_credits();
    void on_receive(InConn &c, uint32_t slot, uint32_t len, const MessageHandler &handler);
    int handle_wc(const ibv_wc &wc, const MessageHandler &handler);
    void remote_done(const ibv_wc &wc);
    struct RemoteOp;
    OutConn *ready_for_remote(PeerId to, uint32_t need);
    bool post_remote(OutConn &c, ibv_send_wr &wr, const RemoteCount &count, RemoteOp op);
    void open_loopback();
    void poll_own_completions();
    bool handled_all(const OutConn &c);
    int drain_stash(const MessageHandler &handler);
    void check_timeouts();
    bool bulk(PeerId peer, bool read, const struct iovec *local, int nl, const struct iovec *remote, int nr,
              const uint64_t *keys);
    void watch();
    ControlMsg describe(ControlKind kind, ibv_qp *qp, uint32_t psn) const;

    PeerId self_;
    VerbsConfig cfg_;
    Wire *control_;
    std::unique_ptr<Device> dev_;
    ibv_comp_channel *channel_ = nullptr;
    ibv_cq *cq_ = nullptr;
    uint32_t cq_size_ = 0, cq_used_ = 0;
    uint32_t tx_depth_ = 0;
    std::unordered_map<PeerId, std::unique_ptr<OutConn>, PeerIdHash> out_;
    std::unordered_map<PeerId, std::unique_ptr<InConn>, PeerIdHash> in_;
    std::unordered_map<uint32_t, OutConn *> out_by_id_;
    std::unordered_map<uint32_t, InConn *> in_by_id_;
    std::unordered_set<PeerId, PeerIdHash> dead_;
    uint32_t next_id_ = 1;
    uint32_t epoch_seed_ = 0;
    int connecting_ = 0;
    uint64_t malformed_ = 0;
    std::deque<ibv_wc> stashed_;  // polled while arming or in a bulk transfer, oldest first
    uint32_t bulk_seq_ = 0;
    std::unique_ptr<RegCache> cache_;
    struct Export;
    std::unordered_set<Export *> exports_;  // handed to the engine, not yet released
    std::vector<OutConn *> corked_;         // connections holding deferred sends
    uint64_t rdma_ops_ = 0, rdma_bytes_ = 0;
    // One-sided operations in flight, by the slot their work request names.
    struct RemoteOp {
        uint64_t cookie = 0;
        RegCache::Region *region = nullptr;  // our side, unless inlined
        uint32_t conn = 0;
        bool read = false;    // a read or an atomic: later sends fence behind it
        int32_t result = -1;  // an atomic's: its word in words_->fetched
    };
    std::vector<RemoteOp> remote_ops_;
    std::vector<uint32_t> free_remote_ops_;
    // Words the device writes: old values of counters nobody reads, own_atomic's result, and
    // those our remote atomics fetch (one per atomic in flight).
    static constexpr uint32_t kAtomicResults = 1024;
    struct Words {
        uint64_t sink[8];
        uint64_t own;
        uint64_t fetched[kAtomicResults];
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
    std::vector<InConn *> owing_;  // prompt connections that consumed since their last return

    std::function<void()> wake_;
    int stop_fd_ = -1;
    std::atomic<bool> stop_{false};
    std::thread watcher_;
};

}  // namespace ptl::verbs
