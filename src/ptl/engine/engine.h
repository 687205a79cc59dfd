// The engine: Portals 4.3 semantics for one process, shared by libportals4 and the UCT
// component (DESIGN decision 1). It is a software NIC (decision 2): target-side processing
// runs in progress(), driven by a progress thread or by the caller (PTL_PROGRESS=manual).
// One lock serialises API calls against incoming operations, which makes every call atomic
// with respect to data movement (§2.9, T1).
#pragma once

#include <portals4.h>
#include <portals4_ext.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "../util/clock.h"
#include "../util/futex_mutex.h"
#include "../wire/loopback/loopback_wire.h"
#include "../wire/wire.h"
#include "bulk_delivery.h"
#include "config.h"
#include "direct_exports.h"
#include "empty_eqs.h"
#include "events.h"
#include "held_messages.h"
#include "idle_backoff.h"
#include "ni.h"
#include "protocol.h"
#include "remote_exports.h"
#include "trace.h"
#include "triggered.h"

namespace ptl {

namespace shm {
class ShmWire;
struct Peer;
}
namespace tcp {
class TcpWire;
}
namespace verbs {
class VerbsWire;
}

// The request a data operation sends (its trace name on the direct path too).
inline uint8_t proto_op(TrigKind k) {
    switch (k) {
        case TrigKind::Put: return proto::kPut;
        case TrigKind::Get: return proto::kGet;
        case TrigKind::Atomic: return proto::kAtomic;
        case TrigKind::FetchAtomic: return proto::kFetchAtomic;
        default: return proto::kSwap;
    }
}

class Engine {
public:
    Engine();
    ~Engine();

    // PtlInit / PtlFini reference counting and PtlAbort.
    int init();
    void fini();
    bool initialized() const { return init_refs_.load(std::memory_order_acquire) > 0; }
    void abort();
    bool aborted() const { return aborted_.load(std::memory_order_acquire); }

    // §3.6 network interfaces
    int ni_init(ptl_interface_t iface, unsigned options, ptl_pid_t pid, const ptl_ni_limits_t *desired,
                ptl_ni_limits_t *actual, ptl_handle_ni_t *out);
    int ni_fini(ptl_handle_ni_t);
    int ni_status(ptl_handle_ni_t, ptl_sr_index_t, ptl_sr_value_t *);
    int ni_handle(ptl_handle_any_t, ptl_handle_ni_t *);
    int set_map(ptl_handle_ni_t, ptl_size_t, const ptl_process_t *);
    int get_map(ptl_handle_ni_t, ptl_size_t, ptl_process_t *, ptl_size_t *);
    // §3.7 portal table
    int pt_alloc(ptl_handle_ni_t, unsigned options, ptl_handle_eq_t, ptl_pt_index_t req, ptl_pt_index_t *out);
    int pt_free(ptl_handle_ni_t, ptl_pt_index_t);
    int pt_disable(ptl_handle_ni_t, ptl_pt_index_t);
    int pt_enable(ptl_handle_ni_t, ptl_pt_index_t);
    // §3.8, §3.9 identification
    int get_uid(ptl_handle_ni_t, ptl_uid_t *);
    int get_id(ptl_handle_ni_t, ptl_process_t *);
    int get_phys_id(ptl_handle_ni_t, ptl_process_t *);
    // §3.10 memory descriptors
    int md_bind(ptl_handle_ni_t, const ptl_md_t *, ptl_handle_md_t *);
    int md_release(ptl_handle_md_t);
    // §3.11, §3.12 list entries; an LE is passed as an ME with is_me = false
    int append(ptl_handle_ni_t, ptl_pt_index_t, const ptl_me_t *, bool is_me, ptl_list_t, void *user_ptr,
               uint32_t *out);
    int unlink(uint32_t handle, bool is_me);
    int give_slots(uint32_t me, const ptl_size_t *offsets, unsigned count);  // PtlXMEGiveSlots
    int search(ptl_handle_ni_t, ptl_pt_index_t, const ptl_me_t *, bool is_me, ptl_search_op_t,
               void *user_ptr);
    // §3.13 event queues
    int eq_alloc(ptl_handle_ni_t, ptl_size_t count, ptl_handle_eq_t *);
    int eq_free(ptl_handle_eq_t);
    int eq_get(ptl_handle_eq_t, ptl_event_t *);
    int eq_poll(const ptl_handle_eq_t *, unsigned size, ptl_time_t timeout, ptl_event_t *, unsigned *which);
    // §3.14 counting events
    int ct_alloc(ptl_handle_ni_t, ptl_handle_ct_t *);
    int ct_free(ptl_handle_ct_t);
    int ct_cancel_triggered(ptl_handle_ct_t);
    int ct_get(ptl_handle_ct_t, ptl_ct_event_t *);
    int ct_poll(const ptl_handle_ct_t *, const ptl_size_t *tests, unsigned size, ptl_time_t timeout,
                ptl_ct_event_t *, unsigned *which);
    int ct_set(ptl_handle_ct_t, ptl_ct_event_t);
    int ct_inc(ptl_handle_ct_t, ptl_ct_event_t);
    // §3.15 data movement
    int data_op(TrigKind kind, const DataOpArgs &a);
    int put(const DataOpArgs &a);  // data_op(Put, a), its common case first (common_put.cc)
    // put(), the data also copied to `copy_to` once sent, before any later message is handled
    // (PtlXPutAndCopy).
    int put_and_copy(const DataOpArgs &a, void *copy_to);
    int put_from_copy(const DataOpArgs &a, void *copy_to);
    int atomic_sync();
    // §3.16 triggered operations
    int triggered(const TrigOp &op, ptl_handle_ct_t trig_ct, ptl_size_t threshold);
    // §3.17 bundles
    int start_bundle(ptl_handle_ni_t);
    int end_bundle(ptl_handle_ni_t);

    // Drives the wires: delivers incoming messages and retries queued sends. Returns work.
    int progress();

    // portals-ucx extensions (portals4_ext.h). app_progress() is progress() for a caller
    // that polls in a loop: the progress thread stays out of its way meanwhile. eq_arm()
    // makes the next event posted to an empty EQ write to `fd` (an eventfd), once.
    int app_progress();
    int eq_arm(ptl_handle_eq_t, int fd);
    int eq_grow(ptl_handle_eq_t, ptl_size_t count);
    int eq_take(ptl_handle_eq_t, ptl_event_t *evs, unsigned max, unsigned *taken);
    // app_progress() and eq_take() under one lock.
    int app_progress_take(ptl_handle_eq_t, ptl_event_t *evs, unsigned max, unsigned *taken);
    int nid_reachable(ptl_handle_ni_t, ptl_nid_t);
    int set_notify_drops(ptl_handle_ni_t ni, bool enable);
    int peer_alive(ptl_handle_ni_t ni, ptl_process_t peer);
    int wire_usage(ptl_handle_ni_t ni, ptlx_wire_usage_t *usage);

    const Config &config() const { return cfg_; }

    // Hooks for the wires and the progress thread.
    // Sleepers arm the flag before sleeping; one wake-up serves all of them, so a stream of
    // events costs one system call per sleep, not one per event. Inline: every event's and
    // every count's.
    void notify_waiters() {
        event_seq_.fetch_add(1, std::memory_order_seq_cst);
        if (sleepers_armed_.load(std::memory_order_seq_cst)) [[unlikely]]
            wake_sleepers();
    }
    void wake_sleepers();
    void on_verbs_completion();  // the verbs wire's watcher thread (wires.cc)
    // A message as if a wire had just received it: the fuzz target's way in (test/fuzz).
    void inject(const InMessage &m);

private:
    friend class ProgressThread;
    using Lock = std::unique_lock<FutexMutex>;

    Ni *ni_of(ptl_handle_ni_t h) const;
    Ni *ni_for_object(uint32_t h) const {
        const HandleParts p = split_handle(h);
        return p.type == ObjType::None || p.type == ObjType::Bad ? nullptr : nis_[p.ni];
    }
    Eq *eq_of(ptl_handle_eq_t h) const {
        Ni *n = ni_for_object(h);
        return n ? n->eq(h) : nullptr;
    }
    Ct *ct_of(ptl_handle_ct_t h) const {
        Ni *n = ni_for_object(h);
        return n ? n->ct(h) : nullptr;
    }
    Md *md_of(ptl_handle_md_t h) const {
        Ni *n = ni_for_object(h);
        return n ? n->md(h) : nullptr;
    }

    void choose_shm_copy_max();  // PTL_SHM_COPY_MAX=auto (wires.cc)
    int open_physical(ptl_pid_t pid);
    void close_physical();
    // now_ns: the caller's fresh clock reading, or 0 to use the coarse clock (coarse_now).
    int progress_locked(uint64_t now_ns = 0);
    // Whether a progress could only find messages in the shm ring (quiet_).
    void note_quiet();
    // After a data operation: what a send can leave for a progress ends quiet_.
    void note_send_left_work();
    // entered_ns: when a sampled call was made, read before the lock (app_entry_stamp), or 0.
    int app_progress_locked(uint64_t entered_ns = 0);
    uint64_t app_entry_stamp() const;
    int take_events(Eq *e, ptl_event_t *evs, unsigned max, unsigned *taken);
    int pop_event(Eq *e, ptl_event_t *ev);  // the application reads one event (take_events: many)
    void note_unlink_read(Eq *e, const ptl_event_t &ev);
    uint64_t coarse_now() {
        constexpr uint32_t kCoarseClockCalls = 16;
        if (++coarse_calls_ < kCoarseClockCalls && coarse_now_ns_) [[likely]]
            return coarse_now_ns_;
        return read_coarse_clock();
    }
    uint64_t read_coarse_clock();
    void handle_message(const InMessage &m);
    [[gnu::always_inline]] inline void process_message(const InMessage &m);  // handle_message and replay_held
    // Retries held messages in order (held_messages.h); returns how many were processed.
    int replay_held(uint64_t now_ns);
    // In on_request: whether this message may still be held instead of triggering flow control.
    bool hold_instead_of_flow_control();
    bool hold_until_unlink_read(const Eq &eq);
    bool hold_for_replaced_entry(const Pt &pt, ptl_pt_index_t pti);
    Wire *wire_for(PeerId p);
    // No wire reaches it (unreachable node) or its wire saw it die: operations to it fail.
    bool peer_gone(PeerId p);
    // Sleeps until a wire has traffic, wake-up or timeout (progress thread, manual waits).
    // `also_due`: work of the caller's that a sleep must not miss (checked once the doorbell
    // would wake it, as the ring is).
    void sleep_for_traffic(long timeout_us, const std::function<bool()> &also_due = {});
    void on_verbs_control(const InMessage &m);
    // deferrable: an acknowledgement, which may wait for the next message to the peer (Wire).
    bool send(PeerId to, const proto::Header &h, const struct iovec *payload, int n, bool deferrable = false);

    // events and counting
    void post_event(Eq *eq, const ptl_event_t &ev);
    // After an event written in place (Eq::emplace): wakes its readers.
    void event_posted(Eq *eq);
    // Inline: every counted operation's.
    [[gnu::always_inline]] void ct_add(Ct *ct, bool success, uint64_t amount) {
        if (!ct) return;
        std::atomic<uint64_t> &count = success ? ct->success : ct->failure;
        count.fetch_add(amount, std::memory_order_acq_rel);
        ct_changed(ct);
    }
    void ct_changed(Ct *ct) {
        if (!ct->triggered.empty() &&
            std::find(changed_cts_.begin(), changed_cts_.end(), ct) == changed_cts_.end())
            changed_cts_.push_back(ct);
        // Under the engine lock, as every waiter arms (wait_until): one that is not armed yet
        // will look at the count, so only an armed sleeper needs the number moved. (EQ events
        // move it always: polls read it without the lock, empty_eqs.h.)
        if (sleepers_armed_.load(std::memory_order_relaxed)) [[unlikely]]
            notify_waiters();
    }
    // Fires what the changed CTs reached; inline because nearly every call finds none.
    void run_triggers() {
        if (!changed_cts_.empty() && !in_triggers_) fire_triggers();
    }
    void fire_triggers();
    // The end of an API call that may have started operations: fires the triggers it reached
    // and completes what it sent to this process itself (complete_own_operations).
    void finish_call() {
        run_triggers();
        if (loop_->pending()) [[unlikely]]
            complete_own_operations();
        if (stamp_returns_) [[unlikely]]
            app_returned_ns_ = monotonic_ns();
    }
    void complete_own_operations();

    // initiator side
    struct CheckedOp {
        Md *put_md = nullptr;
        Md *get_md = nullptr;
        Ni *ni = nullptr;
        ptl_size_t put_off = 0, get_off = 0;
        ptl_ack_req_t ack_req = PTL_NO_ACK_REQ;
        size_t operand_len = 0;
        PeerId peer{};
    };
    int check_op(TrigKind kind, const DataOpArgs &a, CheckedOp &c);
    [[gnu::always_inline]] int check_op_inline(TrigKind kind, const DataOpArgs &a, CheckedOp &c);
    template <TrigKind kind>
    int data_op_of(const DataOpArgs &a);
    template <TrigKind kind>
    int data_op_locked(const DataOpArgs &a);
    // initiator.cc's checks and send_op for the common small put (common_put.cc); kNotCommon:
    // not such a put, nothing done.
    static constexpr int kNotCommon = -2;
    [[gnu::always_inline]] inline int common_put(const DataOpArgs &a);
    // What the common put's checks found about a target, kept per target so that puts
    // alternating between targets (a SHMEM or MPI rank's neighbours) find theirs: true until
    // the map is set, the NI closed or the wires closed (forget_put_targets). A few slots,
    // direct-mapped by rank or process: most processes talk to a few at a time.
    struct PutTarget {
        uint64_t key = 0;   // the target's rank (logical NI) or ptl_process_t bits (physical)
        int ni_index = -1;  // -1: empty
        shm::Peer *peer = nullptr;  // on this host: its ring
        Wire *wire = nullptr;       // or else the wire that carries its messages (verbs, tcp)
        PeerId id{};                // then: who it is
        direct::PeerTable *table = nullptr;
        bool table_may_appear = false;  // no export table of the peer's yet: look again
        uint64_t ring_room = 0;         // the largest payload its ring (or wire) takes inline
        // The last portal index and match bits the table had no entry for, at its version.
        uint64_t unexported_version = ~0ull;
        uint64_t unexported_bits = 0;
        uint32_t unexported_pt = 0;
    };
    static constexpr unsigned kPutTargets = 64;
    // The common put to another host's process (or one tcp carries): a message on its wire.
    int common_put_by_wire(const DataOpArgs &a, const PutTarget &t);
    void count_common_send(const DataOpArgs &a);
    // What the common put's checks found for the last MD it sent from and the target it sent
    // to: true until the MD is released (forget_put_route) or the targets are forgotten.
    struct PutRoute {
        Md *md = nullptr;  // null: no route
        ptl_handle_md_t md_handle = PTL_INVALID_HANDLE;
        bool logical = false;  // then only target.rank names the target
        bool matching = false;
        bool send_event = false;  // a SEND event, when the MD has an EQ
        bool count_send = false;  // else a SEND count, when it has a CT
        bool count_bytes = false;
        uintptr_t base = 0;  // the MD's memory, contiguous (0 for an MD over all memory)
        uint64_t md_length = 0;
        uint64_t md_max_length = 0;  // the rendezvous threshold and max_msg_size
        uint64_t max_length = 0;     // and the target's ring room: what travels inline
        uint32_t pt_count = 0;
        PutTarget *to = nullptr;  // the target, when it is one the common put reaches
        proto::Header header{};   // all but pt_index, match_bits, hdr_data, remote_offset, length
    };
    bool set_put_route(const DataOpArgs &a);
    // The target's slot, filled on a miss; null if the common put cannot reach it.
    PutTarget *set_put_target(const Ni &n, const ptl_process_t &target, uint64_t key);
    static uint64_t put_target_key(bool logical, const ptl_process_t &t) {
        uint64_t bits;
        std::memcpy(&bits, &t, sizeof bits);
        return logical ? uint64_t(t.rank) : bits;
    }
    void forget_put_route() { route_ = PutRoute(); }
    void forget_put_targets() {
        forget_put_route();
        put_targets_.fill(PutTarget());
    }
    // A fired trigger's operation: checked, then direct or sent.
    int start_op(TrigKind kind, const DataOpArgs &a);
    // The message path: the request to the target's engine.
    int send_op(TrigKind kind, const DataOpArgs &a, const CheckedOp &c);

    // The direct path (direct.cc, DESIGN decision 9).
    static constexpr uint64_t kExportAreaBytes = 256 * 1024;
    void open_exports();
    bool exportable(const Ni &n, const Pt &pt, const Entry &e) const;
    void export_entry(Ni *n, Pt &pt, Entry *e);
    void export_shared(Ni *n, Pt &pt, Entry *e);
    // Returns once no peer is inside the entry's memory or can enter it.
    void revoke_export(Pt &pt, Entry *e);
    void close_slot(uint32_t i);
    void enable_device_atomics();
    void revoke_exports(const Ni *n, ptl_pt_index_t pti, bool whole_ni);
    // Exports what became the entry the match picks after `removed` left (null: the portal's
    // every candidate, as after PtlPTEnable).
    void export_front(Ni *n, Pt &pt, const Entry *removed);
    void set_holding(bool holding);
    // Counts peers made on our CTs (direct_exports.h): their waiters and triggers learn of
    // them at our next progress.
    void take_remote_counts();
    void release_remote_counter(Ct *c);
    int32_t remote_counter(Ct *c);  // the export table's counter for `c`, given on first use
    enum class SharedAtomics { No, Cpu, Device };
    SharedAtomics shared_atomics(const Entry &e, ptl_datatype_t type, ptl_size_t offset, ptl_size_t mlength,
                                 size_t data_len) const;
    bool apply_shared(SharedAtomics how, ptl_op_t op, ptl_datatype_t type, void *at, const void *data,
                      const void *operand, size_t len, void *fetched);
    // The table of a peer the direct path may reach (same host, shm wire), or nullptr.
    direct::PeerTable *peer_table(PeerId p);
    // kNotDirect: the message path's turn; else done, PTL_OK or, `in_call` (an API call, not a
    // triggered operation) from a PTLX_MD_COMPLETE_IN_CALL MD, PTLX_DONE (direct.cc).
    static constexpr int kNotDirect = -1;
    int try_direct(TrigKind kind, const DataOpArgs &a, const CheckedOp &c, bool in_call);
    template <TrigKind kind>
    int try_direct_of(const DataOpArgs &a, const CheckedOp &c, bool in_call);
    void direct_atomic(TrigKind kind, const DataOpArgs &a, const CheckedOp &c, char *at);
    bool cma_direct(bool write, const CheckedOp &c, uint64_t remote, uint64_t len, direct::PeerTable &table);
    // The direct path over RDMA (direct_remote.cc, remote_exports.h).
    void open_remote();
    void close_remote();
    void export_remote(Ni *n, Pt &pt, Entry *e);
    void on_rdma_peer(PeerId p);
    void add_holder(PeerId p);
    void send_export_info(PeerId to, uint32_t slot);
    // Returns once no holder can reach the entries' memory (or PTL_DIRECT_REVOKE_MS passed).
    // `wait` false (the NI closes): holders still told, late accesses fail their connection.
    void revoke_remote(const Entry *const *entries, size_t count, bool wait = true);
    static constexpr uint64_t kNoCookie = ~uint64_t(0);  // a one-sided operation nobody waits for
    // While revoke_remote waits: puts every other message off to held_ (true if it did).
    bool divert_while_revoking(const InMessage &m);
    void on_direct_control(const InMessage &m, const proto::Header &h);
    template <TrigKind kind>
    int try_remote_of(const DataOpArgs &a, const CheckedOp &c);
    const direct::RemoteTarget *remote_target(PeerId peer, const direct::EntryKey &key);
    template <TrigKind kind>
    int try_remote_atomic(const DataOpArgs &a, const CheckedOp &c, const direct::RemoteTarget &t);
    uint32_t take_remote_cookie();
    void on_remote_done(uint64_t cookie, bool ok, uint64_t fetched);
    // The key of our registration that peers' device atomics reach [at, +len) through, or 0.
    uint64_t device_atomics_key(const void *at, size_t len) const;
    // Our own atomics there, through the device (false: it failed).
    bool apply_by_device(ptl_op_t op, ptl_datatype_t type, void *at, const void *data, const void *operand,
                         size_t len, void *fetched);
    int32_t nic_counter(Ct *c);  // the registered counter word peers add `c`'s counts to
    void release_nic_counter(Ct *c);
    void take_nic_counts();
    // The initiator's event and count of an operation; inline so that an MD with neither (most
    // senders: SEND disabled, no CT) costs a test, not a call.
    void initiator_event(Md *md, ptl_event_kind_t type, ptl_ni_fail_t fail, ptl_size_t mlength,
                         ptl_size_t offset, ptl_list_t list, void *user_ptr, bool full_allowed) {
        if (md && ((full_allowed && md_allows_full(*md, type, fail == PTL_NI_OK)) ||
                   md_count_amount(*md, type, fail == PTL_NI_OK, mlength)))
            post_initiator_event(md, type, fail, mlength, offset, list, user_ptr, full_allowed);
    }
    void post_initiator_event(Md *md, ptl_event_kind_t type, ptl_ni_fail_t fail, ptl_size_t mlength,
                              ptl_size_t offset, ptl_list_t list, void *user_ptr, bool full_allowed);
    bool take_response(Ni *n, PeerId from, const proto::Header &h, PendingOp *p);
    [[gnu::cold, gnu::noinline]] void trace_send(const Ni *n, uint8_t op, PeerId peer, const DataOpArgs &a,
                                                 ptl_ack_req_t ack_req, uint64_t op_id, bool rndv, bool sent);
    void on_ack(Ni *ni, PeerId from, const proto::Header &h);
    void on_reply(Ni *ni, PeerId from, const proto::Header &h, const void *payload, size_t len);
    void release_export(const PendingOp &p);
    void fail_op(Ni *ni, uint64_t id, ptl_ni_fail_t fail);
    void check_dead_peers();

    // target side
    template <uint8_t op>
    void on_request(Ni *ni, const InMessage &m, const proto::Header &h);
    void on_unmatched(Ni *ni, Pt &pt, const InMessage &m, const proto::Header &h);
    template <uint8_t op>
    [[gnu::noinline]] void on_matched(Ni *ni, Pt &pt, Entry *e, ptl_list_t list, const InMessage &m,
                                      const proto::Header &h);
    // A put into a plain_put entry (entry.h), matched: delivered with only the steps such an
    // entry needs; false (nothing done) if the general path must report it.
    [[gnu::always_inline]] inline bool deliver_plain_put(Ni *n, Pt &pt, Entry *e, const InMessage &m,
                                                         const proto::Header &h, ptl_list_t list);
    // A request that goes no further: the response the initiator waits for, if any (an ACK,
    // a reply, or a rendezvous put's SEND), carries `fail`.
    void refuse(const InMessage &m, const proto::Header &h, ptl_ni_fail_t fail);
    // A silent drop (no match, unexpected list full, no flow control): nothing is sent unless
    // an operation-completion ack, a rendezvous SEND or PTL_NOTIFY_DROPS needs it (X3).
    void silent_drop(Ni *ni, const InMessage &m, const proto::Header &h);
    // FC4-FC7: disables the portal, reports PT_DISABLED (unless the matched entry `cause`
    // suppresses it) and drops the message.
    void disable_pt(Ni *ni, Pt &pt, Entry *cause, const InMessage &m, const proto::Header &h);
    void count_malformed(uint64_t amount = 1);
    // The comm event and counts of a delivery; the ACK or REPLY it owes the initiator.
    void post_comm_event(Ni *n, Pt &pt, Entry *e, const InMessage &m, const proto::Header &h,
                         ptl_event_kind_t kind, void *start, ptl_size_t mlength, ptl_ni_fail_t fail,
                         ptl_list_t list);
    void respond_to(const InMessage &m, const proto::Header &h, ptl_ni_fail_t fail, ptl_size_t mlength,
                    ptl_size_t offset, ptl_list_t list, const void *data, size_t data_len,
                    uint8_t reply_flags);
    // bulk_delivery.h
    void start_bulk_delivery(Ni *n, Pt &pt, Entry *e, const InMessage &m, const proto::Header &h,
                             ptl_size_t offset, ptl_size_t mlength, bool exhausted, const char *data,
                             size_t data_len, ptl_list_t list, UnexpectedHeader *uh);
    // Before `e` claims unexpected headers: those it matches whose data is still moving land.
    void wait_for_overflow_data(Ni &n, Pt &pt, const Entry &e);
    void on_bulk_done(uint64_t cookie, bool ok);
    void finish_bulk_delivery(const BulkDelivery &d, bool ok);
    void begin_bulk_hold(PeerId from);
    void end_bulk_hold(PeerId from);
    // A request from an initiator with transfers in flight: queued behind them (true).
    bool hold_for_bulk(const InMessage &m);
    void release_bulk_hold_credits(PeerId from, BulkHold &hold, bool ending);
    // Drives progress until no delivery `matches` is in flight (the wire's deadline bounds it).
    void wait_for_bulk(const std::function<bool(const BulkDelivery &)> &matches);
    // An automatic unlink in two steps: out of the list at the match, the event after the
    // comm event (a transfer in between).
    void detach_entry(Ni *n, Pt &pt, Entry *e);
    void announce_unlink(Ni *n, Pt &pt, Entry *e);
    void respond(const InMessage &m, const proto::Header &req, uint8_t op, ptl_ni_fail_t fail,
                 ptl_size_t mlength, ptl_size_t offset, ptl_list_t list, const void *data, size_t data_len,
                 uint8_t extra_flags);
    void entry_event(Pt &pt, const Entry &e, ptl_event_kind_t type);
    void consume_header(Ni *ni, Pt &pt, UnexpectedHeader *u);
    void maybe_auto_free(Ni *ni, Entry *e);
    void auto_unlink(Ni *ni, Pt &pt, Entry *e);
    void free_zombies(Ni *ni);

    // waiting
    // `peek`, without the lock: whether `ready` may now succeed with no progress (a CT that
    // peers count directly); a waiter spins on it between polls.
    struct NothingToPeek {
        bool operator()() const { return false; }
    };
    template <typename Ready, typename Peek = NothingToPeek>
    int wait_until(Lock &lk, ptl_time_t timeout_ms, Ready &&ready, Peek &&peek = Peek());

    Config cfg_;
    IdleBackoff backoff_;
    mutable FutexMutex mu_;
    std::atomic<int> init_refs_{0};
    std::atomic<bool> aborted_{false};
    std::atomic<uint32_t> event_seq_{0};
    std::atomic<bool> sleepers_armed_{false};
    std::atomic<uint32_t> active_pollers_{0};
    // wait_until callers asleep on the wires' descriptors (with a progress thread).
    std::atomic<uint32_t> wire_waiters_{0};
    std::atomic<uint32_t> traffic_sleepers_{0};  // threads in sleep_for_traffic
    std::atomic<uint64_t> last_poll_ns_{0};
    // How many of the recent sampled app_progress calls came within PTL_BUSY_POLL_GAP_US of the
    // application's previous call into the engine, smoothed, out of kShortPollsAll. A share, not
    // a mean gap: on a small machine the polling thread is preempted now and then for
    // milliseconds, and one such gap in a mean woke the progress thread to compete with it.
    static constexpr uint32_t kShortPollsAll = 256;
    std::atomic<uint32_t> app_short_polls_{0};
    // Nothing for a progress to do but read the shm ring (no held message, loopback, shm
    // backlog, tcp connection, pending trigger): app_progress_take may then answer an idle
    // poll without the lock. Set under the lock at the end of each progress and data operation.
    std::atomic<bool> quiet_{false};
    EmptyEqs empty_eqs_;  // app_progress_take's lock-free answers

    // The physical NI: identity and wires, shared by up to four logical NIs (§3.6).
    PeerId self_{};
    ptl_uid_t uid_ = 0;  // the usage id carried in every request (§3.8)
    bool phys_open_ = false;
    int pid_lock_fd_ = -1;
    std::string iface_name_;
    std::unique_ptr<shm::ShmWire> shm_;
    std::unique_ptr<tcp::TcpWire> tcp_;  // null with PTL_WIRE=shm
#ifdef PTL_HAVE_VERBS
    std::unique_ptr<verbs::VerbsWire> verbs_;  // null without an RDMA device
#endif
    std::unique_ptr<LoopbackWire> loop_;
    bool completing_own_ = false;  // complete_own_operations is delivering: no wake-up needed
    // The direct path: our export table (in the shm wire's segment) and its entries, the
    // tables of peers we reached, and whether peers were told we hold messages.
    direct::Area *exports_ = nullptr;
    bool light_marks_ = false;  // registered for the owners' membarrier (asymmetric_fence.h)
    bool cma_exports_ = false;  // entries not on a memory file are exported too (direct::kByCma)
    std::vector<Entry *> export_owner_;
    std::vector<Ct *> counter_owner_;
    std::vector<Ct *> remote_cts_;  // the CTs among them, for take_remote_counts
    std::unordered_map<PeerId, std::unique_ptr<direct::PeerTable>, PeerIdHash> peer_tables_;
    PeerId last_table_peer_{};
    direct::PeerTable *last_table_ = nullptr;
    PutRoute route_;
    std::array<PutTarget, kPutTargets> put_targets_{};
    bool holding_published_ = false;
    // The direct path over RDMA: the wire, our exports by slot and who holds them (owner
    // side), what peers exported to us and our operations in flight (initiator side).
    Wire *rdma_ = nullptr;
    std::vector<direct::RemoteExport> remote_exports_;
    std::vector<PeerId> holders_;
    std::vector<uint32_t> acks_owed_;  // by holder, while revoke_remote waits
    uint64_t revoke_round_ = 0;
    bool revoking_ = false;
    std::unordered_map<PeerId, direct::RemotePeer, PeerIdHash> remote_peers_;
    PeerId last_remote_peer_{};
    direct::RemotePeer *last_remote_ = nullptr;    // remote_peers_'s node for it (nodes stay put)
    bool last_remote_absent_ = false;              // or: it has none (last_remote_ null)
    void forget_last_remote() {
        last_remote_ = nullptr;
        last_remote_absent_ = false;
    }
    std::vector<direct::RemoteOpRef> remote_ops_;  // by the wire's cookie
    bool device_atomics_on_ = false;  // a peer may apply device atomics to our memory (enable_device_atomics)
    // Counter words peers' RDMA fetch-and-adds land in (one per CT that counts exported entries).
    std::unique_ptr<std::atomic<uint64_t>[]> nic_counts_;
    uint64_t nic_counts_handle_ = 0, nic_counts_key_ = 0;
    std::vector<Ct *> nic_owner_;  // by counter word
    std::vector<Ct *> nic_cts_;    // those CTs, for take_nic_counts
    std::vector<uint32_t> free_remote_ops_;
    // PTL_TRACE; null otherwise, and read as such on every path. Kept from the first open of the
    // physical NI to the end of the process: a process that closes and reopens it (UCX does)
    // keeps one file.
    std::unique_ptr<Trace> trace_;
    Ni *nis_[4] = {};
    uint32_t ni_gen_ = 0;
    uint64_t last_liveness_check_ns_ = 0;
    // Reading the clock costs as much as a message's matching (a vDSO call of ~30 ns on a VM):
    // polls on the hot path read it every kCoarseClockCalls calls (coarse_now).
    uint64_t coarse_now_ns_ = 0;
    uint32_t coarse_calls_ = 0;
    std::atomic<uint32_t> app_calls_{0};  // incremented without RMW: a lost count only shifts sampling
    uint64_t app_returned_ns_ = 0;        // when the app last left the engine before a sampled app_progress
    bool stamp_returns_ = false;          // a sampled app_progress is next: API calls note their return
    MessageHandler deliver_;              // handle_message, built once
    MessageHandler tcp_deliver_;          // deliver_, less the verbs wire's connection setup
    std::unique_ptr<class ProgressThread> progress_thread_;
    bool in_triggers_ = false;
    HeldMessages held_;
    std::unordered_map<uint64_t, std::unique_ptr<BulkDelivery>> bulk_deliveries_;  // by cookie
    uint64_t next_bulk_cookie_ = 1;
    uint32_t pending_overflow_ = 0;  // unexpected headers whose data is still moving
    std::unordered_map<PeerId, BulkHold, PeerIdHash> bulk_holds_;
    bool hold_allowed_ = false;    // the message being processed may be held
    bool hold_requested_ = false;  // on_request put it off
    // hold_until_unlink_read: the reads of the queue it waits for, kept with the held message.
    uint64_t hold_queue_read_now_ = HeldMessages::kNoQueue;
    bool hold_traced_ = false;  // the message being processed was traced as held before
    bool warned_grace_expired_ = false;
    std::vector<Ct *> changed_cts_;

    // trace.h: a request's arrival and what became of it (notable unless it was delivered);
    // out of line, so that the delivery path stays as it was without a trace.
    // A hold is traced when it begins, not at each retry.
    bool tracing_hold() const {
        return trace_ && !hold_traced_;
    }
    [[gnu::cold, gnu::noinline]] void trace_delivery(const Ni *n, const InMessage &m, const proto::Header &h,
                                                     const Entry *e, ptl_list_t list, ptl_ni_fail_t fail,
                                                     ptl_size_t mlength, ptl_size_t offset, bool keep_header);
    [[gnu::cold, gnu::noinline]] void trace_arrival(const Ni *n, const InMessage &m, const proto::Header &h,
                                                    const char *outcome, const Entry *e = nullptr,
                                                    ptl_list_t list = PTL_PRIORITY_LIST, bool notable = true);
};

// The process's engine, made on first use and never destroyed (atexit order must not matter).
// Inline: every API call asks for it, several times per message.
Engine &make_engine();
extern std::atomic<Engine *> the_engine;
inline Engine &engine() {
    if (Engine *e = the_engine.load(std::memory_order_acquire)) [[likely]]
        return *e;
    return make_engine();
}

}  // namespace ptl
