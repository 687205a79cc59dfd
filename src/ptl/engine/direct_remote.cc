// The direct path over RDMA (DESIGN decision 9, issue 32; protocol in remote_exports.h).
//
// Owner side: an entry the direct path may export (exportable, direct.cc) is registered with
// the RDMA wire, and every holder hears of it; one that counts on a CT also names a registered
// counter word of that CT's. Revocation (unlink, portal disabled, NI closed, CT freed) waits
// for the holders' answers, then deregisters.
//
// Initiator side: a put or get to a peer on the RDMA wire, whose entry the peer exported to
// us, whose permissions and bounds hold, from contiguous memory, while the peer's engine has
// handled everything we sent it, is an RDMA write or read, followed in the same post by a
// fetch-and-add on the counter word where the entry counts. Its completion (the data placed at
// both ends) posts what the target's ACK or REPLY would have: SEND and ACK for a put, REPLY
// for a get. Atomics keep the message path: the target's CPU applies every atomic on an
// entry, one mechanism whichever path the others took.
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "../util/clock.h"
#include "../wire/tcp/tcp_wire.h"
#ifdef PTL_HAVE_VERBS
#include "../wire/verbs/verbs_wire.h"
#endif
#include "atomic_ops.h"
#include "engine.h"
#include "events.h"

namespace ptl {

namespace {

constexpr uint64_t kRevokeSpinNs = 1000000;

bool is_direct_control(const InMessage &m) {
    proto::Header h;
    if (m.header_len != sizeof h) return false;
    std::memcpy(&h, m.header, sizeof h);
    return h.op >= proto::kExportInfo && h.op <= proto::kReleased;
}

}  // namespace

void Engine::open_remote() {
#ifdef PTL_HAVE_VERBS
    rdma_ = cfg_.direct && verbs_ ? verbs_.get() : nullptr;
    if (verbs_) verbs_->set_peer_connected([this](PeerId p) { on_rdma_peer(p); });
#endif
    if (!rdma_) return;
    rdma_->set_remote_done(
        [this](uint64_t cookie, bool ok, uint64_t fetched) { on_remote_done(cookie, ok, fetched); });
    // Without device atomics, entries that count keep the message path.
    if (rdma_->remote_counts()) {
        nic_counts_.reset(new std::atomic<uint64_t>[direct::kCounters]());
        if (!rdma_->remote_register(nic_counts_.get(), direct::kCounters * sizeof(uint64_t), true, true,
                                    &nic_counts_key_, &nic_counts_handle_))
            nic_counts_.reset();
        nic_owner_.assign(direct::kCounters, nullptr);
    }
}

// A peer whose RDMA connection came up: it may reach our memory now.
void Engine::on_rdma_peer(PeerId p) {
    if (rdma_) add_holder(p);
#ifdef PTL_HAVE_VERBS
    if (trace_ && verbs_) {
        const verbs::VerbsUsage u = verbs_->usage();
        PTL_TRACE_NOTABLE(trace_.get(),
                          "0x%x:%u connected over RDMA: %llu peers, %llu bytes pinned, %llu registered",
                          p.nid, p.pid, (unsigned long long)u.peers, (unsigned long long)u.pinned_bytes,
                          (unsigned long long)u.registered_bytes);
    }
#endif
}

// A peer that connected to us may reach our memory: it hears of every export from now on.
// Told at once, while we handle its connection: a target that stops calling in after set-up
// (PTL_PROGRESS=manual) has pushed its exports by then.
void Engine::add_holder(PeerId p) {
    // A new connection from `p` may be a new process at that address: what the old one
    // exported to us is forgotten (its exports come again over this connection).
    remote_peers_.erase(p);
    forget_last_remote();
    if (std::find(holders_.begin(), holders_.end(), p) == holders_.end()) {
        holders_.push_back(p);
        acks_owed_.push_back(0);
    }
    rdma_->report_handled_promptly(p);
    enable_device_atomics();
    for (uint32_t s = 0; s < remote_exports_.size(); ++s)
        if (remote_exports_[s].entry) send_export_info(p, s);
    PTL_TRACE(trace_.get(), "0x%x:%u connected: told of our %zu RDMA exports", p.nid, p.pid,
              size_t(std::count_if(remote_exports_.begin(), remote_exports_.end(),
                                   [](const direct::RemoteExport &x) { return x.entry != nullptr; })));
}

void Engine::close_remote() {
    // Behind every RDMA operation we posted to them, as kRevoked is; best effort: a wire torn
    // down right after may lose it, and then their revocations wait for the wire's verdict.
    proto::Header bye{};
    bye.op = proto::kReleased;
    for (const PeerId &h : holders_)
        if (!peer_gone(h)) send(h, bye, nullptr, 0);
    for (direct::RemoteExport &x : remote_exports_) {
        if (!x.entry) continue;
        rdma_->remote_deregister(x.handle);
        x.entry->remote_slot = -1;
        x.entry = nullptr;
    }
    remote_exports_.clear();
    for (Ct *c : std::vector<Ct *>(nic_cts_)) release_nic_counter(c);
    if (nic_counts_) rdma_->remote_deregister(nic_counts_handle_);
    nic_counts_.reset();
    nic_owner_.clear();
    holders_.clear();
    acks_owed_.clear();
    device_atomics_on_ = false;
    remote_peers_.clear();
    forget_last_remote();
    remote_ops_.clear();
    free_remote_ops_.clear();
    if (rdma_) rdma_->set_remote_done(nullptr);
#ifdef PTL_HAVE_VERBS
    if (verbs_) verbs_->set_peer_connected(nullptr);
#endif
    rdma_ = nullptr;
}

void Engine::export_remote(Ni *n, Pt &pt, Entry *e) {
    (void)pt;
    const unsigned o = e->opts();
    const bool counted = e->ct && (o & PTL_ME_EVENT_CT_COMM);
    if (counted && (!nic_counts_ || (e->ct->nic_slot < 0 && std::find(nic_owner_.begin(), nic_owner_.end(),
                                                                      nullptr) == nic_owner_.end())))
        return;
    // Registration pins the pages the entry has now: the shm path's adoption, which maps new
    // ones at the same addresses, must come first.
    // Nor over memory peers on this host reach by cross-memory attach: a later adoption of its
    // pages (another entry's) would leave the registration on the old ones.
    if (exports_ && (e->export_slot < 0 || exports_->slots[e->export_slot].fd == direct::kByCma)) return;
    uint64_t key = 0, handle = 0;
    const bool device_atomics = (o & PTL_ME_OP_PUT) && rdma_->remote_atomics();
    if (!rdma_->remote_register(e->region.start, e->region.length, (o & PTL_ME_OP_PUT) != 0, device_atomics,
                                &key, &handle)) {
        PTL_TRACE(trace_.get(), "ni%u pt %u %s 0x%x not exported by RDMA: its memory cannot be registered",
                  n->index, e->pt, e->is_me ? "me" : "le", e->handle);
        return;
    }
    size_t slot = 0;
    while (slot < remote_exports_.size() && remote_exports_[slot].entry) ++slot;
    if (slot == remote_exports_.size()) remote_exports_.emplace_back();
    direct::RemoteExport &x = remote_exports_[slot];
    x.entry = e;
    x.handle = handle;
    x.key = key;
    x.device_atomics = device_atomics;
    ++x.gen;
    e->remote_slot = int32_t(slot);
    if (counted) nic_counter(e->ct);
    for (const PeerId &h : holders_) send_export_info(h, uint32_t(slot));
    PTL_TRACE(trace_.get(), "ni%u pt %u %s 0x%x exported by RDMA: slot %zu, %zu holders", n->index, e->pt,
              e->is_me ? "me" : "le", e->handle, slot, holders_.size());
}

void Engine::send_export_info(PeerId to, uint32_t slot) {
    const direct::RemoteExport &x = remote_exports_[slot];
    const Entry &e = *x.entry;
    proto::Header h{};
    h.op = proto::kExportInfo;
    h.ni_index = uint8_t(e.ni->index);
    h.pt_index = e.pt;
    h.match_bits = e.is_me ? e.desc.match_bits : 0;
    h.uid = e.desc.uid;
    h.atomic_type = e.is_me;
    h.remote_offset = reinterpret_cast<uint64_t>(e.region.start);
    h.length = e.region.length;
    h.hdr_data = x.key;
    h.mlength = e.opts();
    h.op_id = uint64_t(slot) << 32 | x.gen;
    direct::RemoteExportInfo info;
    if (e.ct && (e.opts() & PTL_ME_EVENT_CT_COMM) && e.ct->nic_slot >= 0) {
        info.addr = reinterpret_cast<uint64_t>(&nic_counts_[size_t(e.ct->nic_slot)]);
        info.key = nic_counts_key_;
        info.count_bytes = (e.opts() & PTL_ME_EVENT_CT_BYTES) != 0;
    }
    info.device_atomics = x.device_atomics;
    iovec v{&info, sizeof info};
    send(to, h, &v, 1);
}

int32_t Engine::nic_counter(Ct *c) {
    if (c->nic_slot >= 0) return c->nic_slot;
    const auto it = std::find(nic_owner_.begin(), nic_owner_.end(), nullptr);  // export_remote checked
    const int32_t i = int32_t(it - nic_owner_.begin());
    const ptl_ct_event_t v = c->value();
    nic_counts_[size_t(i)].store(0, std::memory_order_relaxed);
    *it = c;
    nic_cts_.push_back(c);
    c->nic.store(&nic_counts_[size_t(i)], std::memory_order_release);
    c->nic_slot = i;
    c->nic_seen = 0;
    c->set(v);
    return i;
}

// The CT is freed or its NI closes: the entries that count there are revoked first, so no
// peer adds to the word once it is given to another CT.
void Engine::release_nic_counter(Ct *c) {
    if (c->nic_slot < 0) return;
    SmallVec<const Entry *, 8> counting;
    for (const direct::RemoteExport &x : remote_exports_)
        if (x.entry && x.entry->ct == c) counting.push_back(x.entry);
    revoke_remote(counting.data(), counting.size());
    const ptl_ct_event_t v = c->value();  // the counts stay the CT's own
    nic_owner_[size_t(c->nic_slot)] = nullptr;
    std::erase(nic_cts_, c);
    c->nic.store(nullptr, std::memory_order_release);
    c->nic_slot = -1;
    c->set(v);
}

// From progress: counts peers made by RDMA reach the CTs' waiters and triggers.
void Engine::take_nic_counts() {
    for (Ct *c : nic_cts_) {
        const uint64_t k = c->nic_count();
        if (k != c->nic_seen) {
            c->nic_seen = k;
            ct_changed(c);
        }
    }
}

void Engine::revoke_remote(const Entry *const *entries, size_t count, bool wait) {
    SmallVec<uint32_t, 8> slots;
    for (size_t i = 0; i < count; ++i)
        if (entries[i]->remote_slot >= 0) slots.push_back(uint32_t(entries[i]->remote_slot));
    if (slots.empty()) return;
    ++revoke_round_;
    acks_owed_.assign(holders_.size(), 0);
    for (size_t i = 0; i < holders_.size(); ++i) {
        if (peer_gone(holders_[i])) continue;
        for (uint32_t s : slots) {
            proto::Header h{};
            h.op = proto::kRevoke;
            h.op_id = uint64_t(s) << 32 | remote_exports_[s].gen;
            h.hdr_data = revoke_round_;
            if (send(holders_[i], h, nullptr, 0)) ++acks_owed_[i];
        }
    }
    // Messages other than the answers wait in held_ meanwhile (handle_message): we are inside
    // an API call or a delivery, and they go on in order at the next progress.
    const uint64_t started = monotonic_ns();
    const uint64_t deadline = started + uint64_t(cfg_.direct_revoke_ms) * 1000000ull;
    uint64_t turns = 0;
    revoking_ = true;
    while (wait) {
        bool owed = false;
        for (size_t i = 0; i < holders_.size(); ++i) {
            if (acks_owed_[i] && peer_gone(holders_[i])) acks_owed_[i] = 0;
            owed = owed || acks_owed_[i];
        }
        if (!owed) break;
        const uint64_t now = monotonic_ns();
        if (now > deadline) {
            std::fprintf(stderr,
                         "portals: a peer holding our RDMA exports did not answer their revocation within "
                         "PTL_DIRECT_REVOKE_MS=%ld; its next access there fails\n",
                         cfg_.direct_revoke_ms);
            break;
        }
        rdma_->progress(deliver_);
        // A holder's death shows on the tcp wire (its connection, or the probe peer_gone
        // started): read it, or a process tearing down after its peer exited waits out the
        // whole bound.
        if (tcp_) tcp_->progress(tcp_deliver_, now);
        // An answer takes a round trip; a holder silent for a millisecond is busy or gone (the
        // wire's verdict on a dead one can take seconds): stop taking a CPU from the rest.
        if (now - started < kRevokeSpinNs)
            sched_yield();
        else
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        ++turns;
    }
    revoking_ = false;
    PTL_TRACE(trace_.get(), "revocation of %zu export(s) from %zu holder(s): %llu turns, %llu us",
              slots.size(), holders_.size(), (unsigned long long)turns,
              (unsigned long long)(monotonic_ns() - started) / 1000);
    for (uint32_t s : slots) {
        direct::RemoteExport &x = remote_exports_[s];
        rdma_->remote_deregister(x.handle);
        PTL_TRACE(trace_.get(), "ni%u pt %u %s 0x%x RDMA export revoked: slot %u", x.entry->ni->index,
                  x.entry->pt, x.entry->is_me ? "me" : "le", x.entry->handle, s);
        x.entry->remote_slot = -1;
        x.entry = nullptr;
        x.handle = 0;
    }
}

bool Engine::divert_while_revoking(const InMessage &m) {
    if (is_direct_control(m)) return false;
    held_.push(m, 0);
    if (!holding_published_) {
        holding_published_ = true;
        set_holding(true);
    }
    return true;
}

void Engine::on_direct_control(const InMessage &m, const proto::Header &h) {
    // Only over the RDMA wire, whose sender is who the connection says; with PTL_DIRECT=0
    // nobody is answered, and the asker keeps the message path.
    if (!rdma_ || m.via != rdma_) return;
    const uint32_t slot = uint32_t(h.op_id >> 32);
    switch (h.op) {
        case proto::kExportInfo: {
            direct::RemotePeer &rp = remote_peers_[m.from];
            if (last_remote_absent_ && last_remote_peer_ == m.from) forget_last_remote();
            const direct::EntryKey key =
                direct::entry_key(h.ni_index, h.pt_index, h.match_bits, h.atomic_type);
            if (auto old = rp.by_slot.find(slot); old != rp.by_slot.end()) rp.by_key.erase(old->second);
            direct::RemoteTarget t{h.remote_offset, h.length, h.hdr_data, uint32_t(h.mlength), h.uid, {}};
            if (m.payload_len >= sizeof t.info) std::memcpy(&t.info, m.payload, sizeof t.info);
            rp.by_key[key] = t;
            rp.by_slot[slot] = key;
            rp.missed = direct::EntryKey{~0u, 0};
            break;
        }
        case proto::kRevoke: {
            if (auto p = remote_peers_.find(m.from); p != remote_peers_.end()) {
                direct::RemotePeer &rp = p->second;
                if (auto old = rp.by_slot.find(slot); old != rp.by_slot.end()) {
                    rp.by_key.erase(old->second);
                    rp.by_slot.erase(old);
                }
            }
            // Behind every RDMA operation we posted there: once it arrives, none is in flight.
            proto::Header r{};
            r.op = proto::kRevoked;
            r.op_id = h.op_id;
            r.hdr_data = h.hdr_data;
            send(m.from, r, nullptr, 0);
            break;
        }
        case proto::kReleased: {
            remote_peers_.erase(m.from);
            forget_last_remote();
            const auto it = std::find(holders_.begin(), holders_.end(), m.from);
            if (it == holders_.end()) break;
            // A wait in revoke_remote reads both afresh after each progress.
            acks_owed_.erase(acks_owed_.begin() + (it - holders_.begin()));
            holders_.erase(it);
            PTL_TRACE(trace_.get(), "0x%x:%u released our RDMA exports (closed)", m.from.nid, m.from.pid);
            break;
        }
        case proto::kRevoked: {
            if (h.hdr_data != revoke_round_) break;  // of a revocation that gave up waiting
            const auto it = std::find(holders_.begin(), holders_.end(), m.from);
            const size_t i = size_t(it - holders_.begin());
            if (it != holders_.end() && i < acks_owed_.size() && acks_owed_[i]) --acks_owed_[i];
            break;
        }
        default: break;
    }
}

// What `peer` exported to us at `key`, or null. The last peer's exports are the common case
// (one-sided traffic mostly goes to one), and so is a peer that exports nothing to us
// (remembered as last_remote_ null, absent).
const direct::RemoteTarget *Engine::remote_target(PeerId peer, const direct::EntryKey &key) {
    if (!(last_remote_peer_ == peer) || (!last_remote_ && !last_remote_absent_)) {
        const auto it = remote_peers_.find(peer);
        last_remote_peer_ = peer;
        last_remote_ = it == remote_peers_.end() ? nullptr : &it->second;
        last_remote_absent_ = !last_remote_;
    }
    if (!last_remote_) return nullptr;
    direct::RemotePeer &rp = *last_remote_;
    if (key == rp.missed) return nullptr;
    const auto it = rp.by_key.find(key);
    if (it == rp.by_key.end()) {
        rp.missed = key;
        return nullptr;
    }
    return &it->second;
}

template <TrigKind kind>
int Engine::try_remote_of(const DataOpArgs &a, const CheckedOp &c) {
    Ni *n = c.ni;
    const direct::RemoteTarget *found =
        remote_target(c.peer, direct::entry_key(n->index, a.pt_index, a.match_bits, n->matching()));
    if (!found) return kNotDirect;
    const direct::RemoteTarget &t = *found;
    constexpr bool get = kind == TrigKind::Get;
    constexpr unsigned need = get ? PTL_ME_OP_GET
                              : kind == TrigKind::Put || kind == TrigKind::Atomic
                                  ? PTL_ME_OP_PUT
                                  : PTL_ME_OP_PUT | PTL_ME_OP_GET;
    const uint64_t len = a.length, off = a.remote_offset;
    // Permissions and truncation are the target's to report: the message path takes them.
    if ((t.options & need) != need || (t.uid != PTL_UID_ANY && t.uid != uid_) || off > t.length ||
        len > t.length - off)
        return kNotDirect;
    if constexpr (kind != TrigKind::Put && kind != TrigKind::Get) return try_remote_atomic<kind>(a, c, t);
    Md *md = get ? c.get_md : c.put_md;
    char *local = md->region.contiguous_at(get ? c.get_off : c.put_off);
    if (!local) return kNotDirect;
    Wire *w = rdma_;  // the peer's exports came over it
    // The entry's count, added by the device right after the data.
    Wire::RemoteCount count;
    if (t.info.addr) count = {t.info.addr, t.info.key, t.info.count_bytes ? len : 1};
    // A small put nobody acknowledges is copied by the wire and done, as a message would be.
    if (!get && c.ack_req == PTL_NO_ACK_REQ && len <= w->remote_inline()) {
        if (!w->remote_access(c.peer, false, local, len, t.addr + off, t.key, kNoCookie, true, count))
            return kNotDirect;
        initiator_event(md, PTL_EVENT_SEND, PTL_NI_OK, len, 0, 0, a.user_ptr, true);
        if (trace_) [[unlikely]]
            trace_->line("ni%u put -> 0x%x:%u pt %u bits 0x%llx len %llu: direct by RDMA, inline", n->index,
                         c.peer.nid, c.peer.pid, a.pt_index, (unsigned long long)a.match_bits,
                         (unsigned long long)len);
        return PTL_OK;
    }

    PendingOp p{};
    p.op = proto_op(kind);
    p.put_md = get ? PTL_INVALID_HANDLE : md->handle;
    p.get_md = get ? md->handle : PTL_INVALID_HANDLE;
    p.local_get_offset = c.get_off;
    p.length = len;
    p.user_ptr = a.user_ptr;
    p.peer = c.peer;
    p.ack_req = c.ack_req;
    p.send_due = !get;  // the buffer is the NIC's until the write completes
    p.reply_due = get;
    const uint64_t id = n->pending.add(p);
    const uint32_t cookie = take_remote_cookie();
    const bool must_copy = !get && (md->desc.options & PTL_MD_VOLATILE);
    if (!w->remote_access(c.peer, get, local, len, t.addr + off, t.key, cookie, must_copy, count)) {
        PendingOp unused;
        n->pending.take(id, &unused);
        free_remote_ops_.push_back(cookie);
        return kNotDirect;
    }
    remote_ops_[cookie] = direct::RemoteOpRef{id, len, off, c.peer, uint8_t(n->index), p.op, true};
    ++md->pending;
    if (trace_) [[unlikely]]
        trace_->line("ni%u %s -> 0x%x:%u pt %u bits 0x%llx len %llu: direct by RDMA, op %llu", n->index,
                     proto::op_name(proto_op(kind)), c.peer.nid, c.peer.pid, a.pt_index,
                     (unsigned long long)a.match_bits, (unsigned long long)len, (unsigned long long)id);
    return PTL_OK;
}

template int Engine::try_remote_of<TrigKind::Put>(const DataOpArgs &, const CheckedOp &);
template int Engine::try_remote_of<TrigKind::Get>(const DataOpArgs &, const CheckedOp &);
template int Engine::try_remote_of<TrigKind::Atomic>(const DataOpArgs &, const CheckedOp &);
template int Engine::try_remote_of<TrigKind::FetchAtomic>(const DataOpArgs &, const CheckedOp &);
template int Engine::try_remote_of<TrigKind::Swap>(const DataOpArgs &, const CheckedOp &);

uint32_t Engine::take_remote_cookie() {
    if (free_remote_ops_.empty()) {
        remote_ops_.emplace_back();
        return uint32_t(remote_ops_.size() - 1);
    }
    const uint32_t cookie = free_remote_ops_.back();
    free_remote_ops_.pop_back();
    return cookie;
}

// One 8-byte integer sum, difference or compare-and-swap, as the device does them; the rest
// (other types and operations, several elements) go to the owner, which applies them through
// its device too.
template <TrigKind kind>
int Engine::try_remote_atomic(const DataOpArgs &a, const CheckedOp &c, const direct::RemoteTarget &t) {
    if (!t.info.device_atomics || a.length != 8 || (a.datatype != PTL_INT64_T && a.datatype != PTL_UINT64_T))
        return kNotDirect;
    Wire::AtomicOp op;
    uint64_t value = 0, compare = 0;
    if (!c.put_md->region.read(c.put_off, &value, 8, false)) return kNotDirect;
    if (kind == TrigKind::Swap && a.op == PTL_CSWAP) {
        op = Wire::AtomicOp::CompareSwap;
        std::memcpy(&compare, a.operand, 8);
    } else if (kind != TrigKind::Swap && (a.op == PTL_SUM || a.op == PTL_DIFF)) {
        op = Wire::AtomicOp::FetchAdd;
        if (a.op == PTL_DIFF) value = uint64_t(0) - value;
    } else {
        return kNotDirect;
    }
    Ni *n = c.ni;
    Wire::RemoteCount count;
    if (t.info.addr) count = {t.info.addr, t.info.key, t.info.count_bytes ? 8u : 1u};
    const uint64_t raddr = t.addr + a.remote_offset;
    // The operand travels in the work request: the put buffer is free at once.
    if (kind == TrigKind::Atomic && c.ack_req == PTL_NO_ACK_REQ) {
        if (!rdma_->remote_atomic(c.peer, op, raddr, t.key, value, compare, kNoCookie, count))
            return kNotDirect;
        initiator_event(c.put_md, PTL_EVENT_SEND, PTL_NI_OK, 8, 0, 0, a.user_ptr, true);
        return PTL_OK;
    }
    PendingOp p{};
    p.op = proto_op(kind);
    p.put_md = c.put_md->handle;
    p.get_md = c.get_md ? c.get_md->handle : PTL_INVALID_HANDLE;
    p.local_get_offset = c.get_off;
    p.length = 8;
    p.user_ptr = a.user_ptr;
    p.peer = c.peer;
    p.ack_req = c.ack_req;
    p.reply_due = c.get_md != nullptr;
    const uint64_t id = n->pending.add(p);
    const uint32_t cookie = take_remote_cookie();
    if (!rdma_->remote_atomic(c.peer, op, raddr, t.key, value, compare, cookie, count)) {
        PendingOp unused;
        n->pending.take(id, &unused);
        free_remote_ops_.push_back(cookie);
        return kNotDirect;
    }
    remote_ops_[cookie] = direct::RemoteOpRef{id, 8, a.remote_offset, c.peer, uint8_t(n->index), p.op, true};
    if (c.get_md) ++c.get_md->pending;
    initiator_event(c.put_md, PTL_EVENT_SEND, PTL_NI_OK, 8, 0, 0, a.user_ptr, true);
    if (trace_) [[unlikely]]
        trace_->line("ni%u %s -> 0x%x:%u pt %u bits 0x%llx: device atomic, op %llu", n->index,
                     proto::op_name(p.op), c.peer.nid, c.peer.pid, a.pt_index,
                     (unsigned long long)a.match_bits, (unsigned long long)id);
    return PTL_OK;
}

uint64_t Engine::device_atomics_key(const void *at, size_t len) const {
    if (!device_atomics_on_) return 0;
    const uintptr_t a = reinterpret_cast<uintptr_t>(at);
    for (const direct::RemoteExport &x : remote_exports_) {
        if (!x.entry || !x.device_atomics) continue;
        const uintptr_t start = reinterpret_cast<uintptr_t>(x.entry->region.start);
        if (a >= start && a + len <= start + x.entry->region.length) return x.key;
    }
    return 0;
}

bool Engine::apply_by_device(ptl_op_t op, ptl_datatype_t type, void *at, const void *data,
                             const void *operand, size_t len, void *fetched) {
    struct Device final : atomics::WordAtomics {
        Wire *w;
        uint64_t key;
        Device(Wire *wire, uint64_t k) : w(wire), key(k) {}
        bool fetch_add(uint64_t *word, uint64_t add, uint64_t *old) override {
            return w->own_atomic(Wire::AtomicOp::FetchAdd, reinterpret_cast<uint64_t>(word), key, add, 0,
                                 old);
        }
        bool compare_swap(uint64_t *word, uint64_t expect, uint64_t desired, uint64_t *old) override {
            return w->own_atomic(Wire::AtomicOp::CompareSwap, reinterpret_cast<uint64_t>(word), key, desired,
                                 expect, old);
        }
    } dev(rdma_, device_atomics_key(at, len));
    return atomics::apply_by_word_atomics(op, type, at, data, operand, len, fetched, dev);
}

// From the RDMA wire's progress, under the lock: what the target's response would have done.
void Engine::on_remote_done(uint64_t cookie, bool ok, uint64_t fetched) {
    if (cookie >= remote_ops_.size() || !remote_ops_[cookie].live) return;
    const direct::RemoteOpRef r = remote_ops_[cookie];
    remote_ops_[cookie].live = false;
    free_remote_ops_.push_back(uint32_t(cookie));
    Ni *n = nis_[r.ni];
    if (!n) return;
    if (!ok) {
        fail_op(n, r.op_id, PTL_NI_UNDELIVERABLE);
        return;
    }
    const bool reply = r.op == proto::kGet || r.op == proto::kFetchAtomic || r.op == proto::kSwap;
    proto::Header h{};
    h.op = reply ? proto::kReply : proto::kAck;
    h.ni_index = r.ni;
    h.ni_fail = PTL_NI_OK;
    h.ptl_list = PTL_PRIORITY_LIST;
    h.mlength = r.length;
    h.remote_offset = r.offset;
    h.op_id = r.op_id;
    if (r.op == proto::kGet) {
        h.flags = proto::kDataWritten;
        on_reply(n, r.peer, h, nullptr, 0);
    } else if (reply) {
        on_reply(n, r.peer, h, &fetched, sizeof fetched);  // the word before (little-endian, as our CPU's)
    } else {
        on_ack(n, r.peer, h);
    }
}

}  // namespace ptl
