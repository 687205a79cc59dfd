// One-sided access without the target's CPU (DESIGN decision 9, issue 32), on the shm wire.
//
// Target side: a priority-list entry that needs no software at the target for an operation
// (no full event for it, not use-once, not locally managed, no counting event, contiguous)
// and that is the entry the match would pick for its key (the first LE of its portal; an ME
// with no ignore bits and any source, first for its match bits, no wildcard ME before it) is
// exported: its pages are adopted into a memory file (shared_pages.h) and a slot of the
// export table (direct_exports.h) says where; memory that cannot be adopted is exported for
// cross-memory attach at its address instead (direct::kByCma). Unlinking it, disabling its
// portal (by the application or by flow control) or closing the NI revokes the slot and waits
// out the peers inside it before returning.
//
// Initiator side: an operation to a peer on this host whose table has a live slot for its
// key, whose permissions and bounds hold, and which has handled every message we sent it
// before (the ordering rule: a direct operation never overtakes an earlier message) is done
// here: data by loads and stores through the mapped file (or, for a kByCma slot and a large
// put or get, one process_vm_writev/readv), atomics by CPU compare-and-swap.
// Whatever the slot does not allow, the message path does, so every violation is reported by
// the target exactly as before. The initiator's own events (SEND, ACK, REPLY) and counts are
// posted as the responses would have made them.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>

#include "../util/asymmetric_fence.h"
#include "../util/clock.h"
#include "../wire/os_process.h"
#include "../wire/shm/shm_wire.h"
#include "atomic_ops.h"
#include "engine.h"
#include "events.h"

namespace ptl {

void Engine::open_exports() {
    static_assert(sizeof(direct::Area) <= kExportAreaBytes);
    // With PTL_WIRE=tcp or verbs no peer reaches us through shared memory: nothing to export.
    const bool shm_peers = cfg_.wire == WireChoice::Auto || cfg_.wire == WireChoice::Shm;
    exports_ = cfg_.direct && shm_peers ? new (shm_->export_area()) direct::Area() : nullptr;
    if (exports_) {
        for (shm::ListedFile &f : exports_->files.files) f.fd.store(-1, std::memory_order_relaxed);
        shm_->list_files_in(&exports_->files, offsetof(direct::Area, files));
    }
    shm_->set_adoption_debug(cfg_.debug);
    light_marks_ = cfg_.direct && asymmetric_fence::register_hot_side();
    if (exports_ && light_marks_ && asymmetric_fence::heavy())
        exports_->header.light_marks.store(1, std::memory_order_release);
    export_owner_.assign(direct::kSlots, nullptr);
    counter_owner_.assign(direct::kCounters, nullptr);
    remote_cts_.clear();
}

bool Engine::exportable(const Ni &n, const Pt &pt, const Entry &e) const {
    if (!pt.enabled || e.list != PTL_PRIORITY_LIST || e.auto_unlinked) return false;
    const unsigned o = e.opts();
    if (o & (PTL_IOVEC | PTL_ME_USE_ONCE | PTL_ME_MANAGE_LOCAL)) return false;
    if (!(o & (PTL_ME_OP_PUT | PTL_ME_OP_GET)) || e.region.length == 0) return false;
    // PUT, GET, ATOMIC and FETCH_ATOMIC are suppressed by the same options.
    if (pt.eq && entry_allows_full(e, PTL_EVENT_PUT, true)) return false;
    // Counting on a CT peers can add to (not the overflow's, nor failures: those take the
    // message path).
    if (e.ct && (o & PTL_ME_EVENT_CT_COMM) && e.ct->remote_slot < 0 &&
        std::find(counter_owner_.begin(), counter_owner_.end(), nullptr) == counter_owner_.end())
        return false;
    const MatchList &prio = pt.lists[PTL_PRIORITY_LIST];
    if (!n.matching()) return prio.exact_size == 0 && prio.wildcard.front() == &e;
    if (!e.exact) return false;
    if (n.logical() ? e.desc.match_id.rank != PTL_RANK_ANY
                    : (e.desc.match_id.phys.nid != PTL_NID_ANY || e.desc.match_id.phys.pid != PTL_PID_ANY))
        return false;
    const Entry *w = prio.wildcard.front();
    if (w && w->seq < e.seq) return false;
    auto it = prio.exact.find(e.desc.match_bits);
    return it != prio.exact.end() && it->second.front() == &e;
}

void Engine::export_entry(Ni *n, Pt &pt, Entry *e) {
    const bool shared = exports_ && e->export_slot < 0, remote = rdma_ && e->remote_slot < 0;
    if ((!shared && !remote) || !exportable(*n, pt, *e)) return;
    if (shared) export_shared(n, pt, e);
    if (remote) export_remote(n, pt, e);
}

void Engine::export_shared(Ni *n, Pt &pt, Entry *e) {
    uint32_t i = 0;
    while (i < direct::kSlots && export_owner_[i]) ++i;
    if (i == direct::kSlots) return;
    const bool counted = e->ct && (e->opts() & PTL_ME_EVENT_CT_COMM);
    shm::SharedRange r;
    const bool adopted = shm_->adopt_pages(e->region.start, e->region.length, &r);
    if (!adopted) {
        // Peers reach it by cross-memory attach, where a message would take one (direct_exports.h):
        // not an entry no larger than that, which would cost a slot and a revocation for nothing.
        if (!cma_exports_ || e->region.length <= cfg_.rndv_threshold) {
            PTL_TRACE(trace_.get(), "ni%u pt %u %s 0x%x not exported: its memory is not whole private pages",
                      n->index, e->pt, e->is_me ? "me" : "le", e->handle);
            return;
        }
        r = shm::SharedRange{direct::kByCma, 0, 0, 0};
    }
    direct::Slot &s = exports_->slots[i];
    s.match_bits = e->is_me ? e->desc.match_bits : 0;
    s.start = reinterpret_cast<uint64_t>(e->region.start);
    s.length = e->region.length;
    s.file_offset = r.file_offset;
    s.file_len = r.file_len;
    s.file_ino = r.ino;
    s.fd = r.fd;
    s.options = e->opts();
    s.uid = e->desc.uid;
    s.pt_index = uint16_t(e->pt);
    s.ni_index = uint8_t(n->index);
    s.is_me = e->is_me;
    s.counter = counted ? remote_counter(e->ct) : -1;
    s.count_bytes = (e->opts() & PTL_ME_EVENT_CT_BYTES) != 0;
    s.device_atomics = device_atomics_on_;
    s.gen.fetch_add(1, std::memory_order_release);  // odd: live
    exports_->header.version.fetch_add(1, std::memory_order_release);
    export_owner_[i] = e;
    e->export_slot = int32_t(i);
    ++pt.exports;
    PTL_TRACE(trace_.get(), "ni%u pt %u %s 0x%x exported%s: slot %u, %llu bytes", n->index, e->pt,
              e->is_me ? "me" : "le", e->handle, adopted ? "" : " for cross-memory attach", i,
              (unsigned long long)s.length);
}

// Makes slot i dead and returns once no peer is inside it.
void Engine::close_slot(uint32_t i) {
    direct::Slot &s = exports_->slots[i];
    s.gen.fetch_add(1, std::memory_order_seq_cst);  // even: dead
    exports_->header.version.fetch_add(1, std::memory_order_release);
    if (exports_->header.light_marks.load(std::memory_order_relaxed) && !asymmetric_fence::heavy()) {
        // Not seen to fail where it once worked; should it, peers go back to full fences, and
        // one that entered with a light one just now may be missed.
        exports_->header.light_marks.store(0, std::memory_order_seq_cst);
        std::fprintf(stderr,
                     "portals: membarrier failed; the direct path's marks use full fences from now\n");
    }
    // Wait out the peers inside the slot: a marking process that is gone never clears its mark.
    const uint64_t warn_at = monotonic_ns() + 10'000'000'000ull;
    for (direct::Mark &m : exports_->marks) {
        while (m.inside.load(std::memory_order_seq_cst) == i + 1) {
            if (os_process_gone(m.os_pid.load(std::memory_order_relaxed))) break;
            if (monotonic_ns() > warn_at) {
                std::fprintf(stderr,
                             "portals: process %d has been inside a revoked entry for 10 s; going on\n",
                             int(m.os_pid.load(std::memory_order_relaxed)));
                break;
            }
            sched_yield();
        }
    }
}

// The first peer that may reach us by RDMA: from now on 8-byte atomics on our registered
// memory are the device's (remote_exports.h), so peers on this host stop applying them with
// CPU atomics first. Not before: a job on one host keeps them direct.
void Engine::enable_device_atomics() {
    if (device_atomics_on_ || !rdma_ || !rdma_->remote_atomics()) return;
    device_atomics_on_ = true;
    if (!exports_) return;
    for (uint32_t i = 0; i < direct::kSlots; ++i) {
        if (!export_owner_[i]) continue;
        close_slot(i);  // a peer may be inside with a CPU atomic
        direct::Slot &s = exports_->slots[i];
        s.device_atomics = 1;
        s.gen.fetch_add(1, std::memory_order_release);  // odd: live again, with the new rule
        exports_->header.version.fetch_add(1, std::memory_order_release);
    }
}

void Engine::revoke_export(Pt &pt, Entry *e) {
    if (e->remote_slot >= 0) revoke_remote(&e, 1);  // first: its registration pins the shared pages
    if (e->export_slot < 0) return;
    const uint32_t i = uint32_t(e->export_slot);
    direct::Slot &s = exports_->slots[i];
    close_slot(i);
    if (s.fd != direct::kByCma) shm_->release_pages(s.fd);
    export_owner_[i] = nullptr;
    e->export_slot = -1;
    --pt.exports;
}

void Engine::revoke_exports(const Ni *n, ptl_pt_index_t pti, bool whole_ni) {
    if (rdma_) {  // one round of answers for them all
        SmallVec<const Entry *, 16> gone;
        for (const direct::RemoteExport &x : remote_exports_)
            if (x.entry && x.entry->ni == n && (whole_ni || x.entry->pt == pti)) gone.push_back(x.entry);
        revoke_remote(gone.data(), gone.size(), !whole_ni);
    }
    if (!exports_) return;
    for (Entry *e : export_owner_)
        if (e && e->ni == n && (whole_ni || e->pt == pti)) revoke_export(e->ni->pts[e->pt], e);
}

void Engine::export_front(Ni *n, Pt &pt, const Entry *removed) {
    if (!exports_ && !rdma_) return;
    const MatchList &prio = pt.lists[PTL_PRIORITY_LIST];
    if (!n->matching()) {
        if (Entry *f = prio.wildcard.front()) export_entry(n, pt, f);
        return;
    }
    auto front_of = [&](ptl_match_bits_t bits) {
        auto it = prio.exact.find(bits);
        if (it != prio.exact.end())
            if (Entry *f = it->second.front()) export_entry(n, pt, f);
    };
    if (removed) {
        if (removed->exact) front_of(removed->desc.match_bits);
        return;
    }
    for (const auto &[bits, list] : prio.exact) front_of(bits);
}

int32_t Engine::remote_counter(Ct *c) {
    if (c->remote_slot >= 0) return c->remote_slot;
    const auto it = std::find(counter_owner_.begin(), counter_owner_.end(), nullptr);  // exportable checked
    const int32_t i = int32_t(it - counter_owner_.begin());
    direct::Counter &k = exports_->counters[i];
    const ptl_ct_event_t v = c->value();
    k.counts[0].store(0, std::memory_order_relaxed);
    k.counts[1].store(0, std::memory_order_relaxed);
    *it = c;
    remote_cts_.push_back(c);
    c->remote.store(k.counts, std::memory_order_release);
    c->remote_slot = i;
    c->set(v);
    return i;
}

void Engine::release_remote_counter(Ct *c) {
    release_nic_counter(c);
    if (!exports_ || c->remote_slot < 0) return;
    for (Entry *e : export_owner_)
        if (e && e->ct == c) revoke_export(e->ni->pts[e->pt], e);
    const ptl_ct_event_t v = c->value();  // the counts stay the CT's own
    counter_owner_[size_t(c->remote_slot)] = nullptr;
    std::erase(remote_cts_, c);
    c->remote.store(nullptr, std::memory_order_release);
    c->remote_slot = -1;
    c->set(v);
}

void Engine::take_remote_counts() {
    if (!exports_->header.counted.exchange(0, std::memory_order_seq_cst)) return;
    for (Ct *c : remote_cts_) ct_changed(c);
}

void Engine::set_holding(bool holding) {
    if (exports_) exports_->header.holding.store(holding, std::memory_order_release);
    if (rdma_) rdma_->set_holding(holding);
}

direct::PeerTable *Engine::peer_table(PeerId p) {
    if (!exports_ || p.nid != self_.nid || p == self_ || self_.pid >= direct::kMarks ||
        wire_for(p) != shm_.get())
        return nullptr;
    auto it = peer_tables_.find(p);
    if (it == peer_tables_.end()) {
        pid_t owner = 0;
        auto *area = static_cast<direct::Area *>(shm_->peer_export_area(p, &owner));
        if (!area) return nullptr;  // looked up again next time: the peer may not be up yet
        area->marks[self_.pid].os_pid.store(getpid(), std::memory_order_relaxed);
        it = peer_tables_.emplace(p, std::make_unique<direct::PeerTable>(area, owner)).first;
    }
    last_table_peer_ = p;
    return last_table_ = it->second.get();
}

// Operands are read and fetched values written in the MDs' memory when it is contiguous and a
// fetched value cannot overwrite an operand not yet read; else through copies.
void Engine::direct_atomic(TrigKind kind, const DataOpArgs &a, const CheckedOp &c, char *at) {
    const uint64_t len = a.length;
    SmallVec<char, 64> src_copy, fetched_copy;
    const char *src = c.put_md->region.contiguous_at(c.put_off);
    if (!src) {
        src_copy.resize(len);
        c.put_md->region.read(c.put_off, src_copy.data(), len, false);
        src = src_copy.data();
    }
    char *fetched = nullptr;
    if (kind != TrigKind::Atomic) {
        fetched = c.get_md->region.contiguous_at(c.get_off);
        if (!fetched || (fetched > src && fetched < src + len)) {
            fetched_copy.resize(len);
            fetched = fetched_copy.data();
        }
    }
    atomics::apply_in_place(a.op, a.datatype, at, src, c.operand_len ? a.operand : nullptr, len, fetched);
    if (!fetched_copy.empty()) c.get_md->region.write(c.get_off, fetched, len, false);
}

// A put (`write`) or get of `len` bytes at `remote` in the owner of `table`, by cross-memory
// attach between it and our MD's pieces. A partial put is rewritten whole by the message path.
bool Engine::cma_direct(bool write, const CheckedOp &c, uint64_t remote, uint64_t len,
                        direct::PeerTable &table) {
    const Md *md = write ? c.put_md : c.get_md;
    IovList local;
    md->region.pieces(write ? c.put_off : c.get_off, len, local);
    struct iovec r {
        reinterpret_cast<void *>(remote), len
    };
    if (shm_->cma(c.peer, local.data(), int(local.size()), &r, 1, write)) return true;
    if (errno == EPERM) table.refuse_cma();
    return false;
}

int Engine::try_direct(TrigKind kind, const DataOpArgs &a, const CheckedOp &c, bool in_call) {
    switch (kind) {
        case TrigKind::Put: return try_direct_of<TrigKind::Put>(a, c, in_call);
        case TrigKind::Get: return try_direct_of<TrigKind::Get>(a, c, in_call);
        case TrigKind::Atomic: return try_direct_of<TrigKind::Atomic>(a, c, in_call);
        case TrigKind::FetchAtomic: return try_direct_of<TrigKind::FetchAtomic>(a, c, in_call);
        case TrigKind::Swap: return try_direct_of<TrigKind::Swap>(a, c, in_call);
        default: return kNotDirect;
    }
}

// One body per kind (data_op_of calls them directly): the kind's tests fold away.
template <TrigKind kind>
int Engine::try_direct_of(const DataOpArgs &a, const CheckedOp &c, bool in_call) {
    // The last peer's table is the common case: every peer that has one passed the checks.
    direct::PeerTable *table = last_table_ && last_table_peer_ == c.peer ? last_table_ : peer_table(c.peer);
    if (!table) return rdma_ ? try_remote_of<kind>(a, c) : kNotDirect;
    direct::Area *area = table->area();
    Ni *n = c.ni;
    direct::Target &t = table->find(uint8_t(n->index), uint16_t(a.pt_index), a.match_bits, n->matching());
    // Files of entries the peer revoked are unmapped here too: their pages would otherwise
    // live as long as both processes (the peer frees them with its own last mapping).
    if (table->take_changed()) [[unlikely]]
        shm_->retain_peer_pages(c.peer, table->live_files());
    if (t.slot < 0) return kNotDirect;
    // After the lookup, which a message to an entry with events ends in our cache: the ring's
    // dequeue position is a line the peer writes as it consumes.
    if (area->header.holding.load(std::memory_order_acquire) || !shm_->peer_handled_all(c.peer))
        return kNotDirect;
    // A dead peer's operations take the message path, which fails them (F1).
    if (shm_->peer_known_dead(c.peer) || (table->liveness_due(coarse_now()) && shm_->peer_dead(c.peer)))
        return kNotDirect;
    const unsigned need = kind == TrigKind::Get                               ? PTL_ME_OP_GET
                          : kind == TrigKind::Put || kind == TrigKind::Atomic ? PTL_ME_OP_PUT
                                                                              : PTL_ME_OP_PUT | PTL_ME_OP_GET;
    const uint64_t len = a.length, off = a.remote_offset;
    // Permissions and truncation are the target's to report: the message path takes them.
    if ((t.options & need) != need || (t.uid != PTL_UID_ANY && t.uid != uid_) || off > t.length ||
        len > t.length - off)
        return kNotDirect;
    direct::Slot &s = area->slots[t.slot];
    constexpr bool atomic = kind != TrigKind::Put && kind != TrigKind::Get;
    char *at = nullptr;
    if (t.by_cma) {
        // One kernel copy where the message path takes one too (a rendezvous, or a reply
        // written into our memory); below that the ring's copies cost less than the system call.
        if (atomic || len <= cfg_.rndv_threshold || len <= cfg_.shm_copy_max || table->cma_refused())
            return kNotDirect;
    } else {
        if (!t.mapped) [[unlikely]] {
            if (s.file_offset > s.file_len || t.length > s.file_len - s.file_offset) return kNotDirect;
            char *file = shm_->map_peer_pages(c.peer, s.fd, s.file_ino, s.file_len);
            if (!file || s.gen.load(std::memory_order_acquire) != t.gen) return kNotDirect;
            t.mapped = file + s.file_offset;
        }
        at = t.mapped + off;
        // 8-byte atomics where peers on other hosts apply them with the device: the owner does.
        if (atomic && (!atomics::in_place_capable(a.datatype, at, len) ||
                       (t.device_atomics && atomics::datatype_size(a.datatype) == 8)))
            return kNotDirect;
    }
    const int i = t.slot;
    const uint64_t gen = t.gen;

    direct::Mark &mark = area->marks[self_.pid];
    if (light_marks_ && area->header.light_marks.load(std::memory_order_relaxed)) {
        mark.inside.store(uint32_t(i + 1), std::memory_order_relaxed);
        asymmetric_fence::light();
    } else {
        mark.inside.store(uint32_t(i + 1), std::memory_order_seq_cst);
    }
    if (s.gen.load(std::memory_order_seq_cst) != gen) {
        mark.inside.store(0, std::memory_order_release);
        return kNotDirect;
    }
    if (t.by_cma) {
        if (!cma_direct(kind == TrigKind::Put, c, t.start + off, len, *table)) {
            mark.inside.store(0, std::memory_order_release);
            return kNotDirect;  // the message path reports what went wrong, if anything did
        }
    } else {
        switch (kind) {
            case TrigKind::Put: c.put_md->region.read(c.put_off, at, len, false); break;
            case TrigKind::Get: c.get_md->region.write(c.get_off, at, len, false); break;
            default: direct_atomic(kind, a, c, at); break;
        }
    }
    if (t.counter >= 0) {
        // Inside the mark: a revoked counter may be given to another CT once we are out.
        // Sequentially consistent: the owner takes `counted` before it reads the counters, and
        // the last read-modify-write orders them before the look at its sleep (wake_peer).
        area->counters[t.counter].counts[0].fetch_add(t.count_bytes ? len : 1, std::memory_order_seq_cst);
        if (!area->header.counted.load(std::memory_order_seq_cst))
            area->header.counted.exchange(1, std::memory_order_seq_cst);
        shm_->wake_peer(c.peer);  // a target asleep in PtlCTWait, or its progress thread
    }
    mark.inside.store(0, std::memory_order_release);

    if (trace_) [[unlikely]]
        trace_->line("ni%u %s -> 0x%x:%u pt %u bits 0x%llx len %llu: direct (slot %d)", n->index,
                     proto::op_name(proto_op(kind)), c.peer.nid, c.peer.pid, a.pt_index,
                     (unsigned long long)a.match_bits, (unsigned long long)len, i);
    const Md *reporter = c.get_md ? c.get_md : c.put_md;
    if (in_call && (reporter->desc.options & PTLX_MD_COMPLETE_IN_CALL)) return PTLX_DONE;
    if (c.put_md) initiator_event(c.put_md, PTL_EVENT_SEND, PTL_NI_OK, len, 0, 0, a.user_ptr, true);
    if (c.get_md) {
        initiator_event(c.get_md, PTL_EVENT_REPLY, PTL_NI_OK, len, off, PTL_PRIORITY_LIST, a.user_ptr, true);
    } else if (c.ack_req == PTL_OC_ACK_REQ) {
        if (c.put_md->ct && (c.put_md->desc.options & PTL_MD_EVENT_CT_ACK)) ct_add(c.put_md->ct, true, 1);
    } else if (c.ack_req != PTL_NO_ACK_REQ) {
        initiator_event(c.put_md, PTL_EVENT_ACK, PTL_NI_OK, len, off, PTL_PRIORITY_LIST, a.user_ptr,
                        c.ack_req == PTL_ACK_REQ);
    }
    return PTL_OK;
}

template int Engine::try_direct_of<TrigKind::Put>(const DataOpArgs &, const CheckedOp &, bool);
template int Engine::try_direct_of<TrigKind::Get>(const DataOpArgs &, const CheckedOp &, bool);
template int Engine::try_direct_of<TrigKind::Atomic>(const DataOpArgs &, const CheckedOp &, bool);
template int Engine::try_direct_of<TrigKind::FetchAtomic>(const DataOpArgs &, const CheckedOp &, bool);
template int Engine::try_direct_of<TrigKind::Swap>(const DataOpArgs &, const CheckedOp &, bool);

}  // namespace ptl
