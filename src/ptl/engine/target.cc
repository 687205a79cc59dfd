// Target-side processing of an incoming put, get or atomic (digest §6.1): PT checks,
// matching, permissions, flow control, data movement, events, unexpected headers, unlinks
// and the response. Everything runs under the engine lock, so a delivery is atomic with
// respect to API calls (T1) and complete before its events appear (EO3, EO4).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "../util/clock.h"
#include "../util/copy_small.h"
#include "../wire/arriving.h"
#include "../wire/shm/shm_wire.h"
#include "atomic_ops.h"
#include "engine.h"
#include "events.h"
#include "match.h"

namespace ptl {

namespace {

bool is_request(uint8_t op) {
    return op >= proto::kPut && op <= proto::kSwap;
}
// Responses (ACK, REPLY) complete our own operations and never wait behind held requests: the
// application may be waiting for one before it makes room.
bool carries_request(const InMessage &m) {
    proto::Header h;
    if (m.header_len != sizeof h) return false;
    std::memcpy(&h, m.header, sizeof h);
    return is_request(h.op);
}

bool wants_reply(uint8_t op) {
    return op == proto::kGet || op == proto::kFetchAtomic || op == proto::kSwap;
}

ptl_event_kind_t comm_kind(uint8_t op) {
    switch (op) {
        case proto::kPut: return PTL_EVENT_PUT;
        case proto::kGet: return PTL_EVENT_GET;
        case proto::kAtomic: return PTL_EVENT_ATOMIC;
        default: return PTL_EVENT_FETCH_ATOMIC;
    }
}

UhKind uh_kind(uint8_t op) {
    switch (op) {
        case proto::kPut: return UhKind::Put;
        case proto::kGet: return UhKind::Get;
        case proto::kAtomic: return UhKind::Atomic;
        default: return UhKind::FetchAtomic;
    }
}

// The first `len` bytes of the initiator's segments, which travel after the operand, and
// the keys its wire gave them.
struct RemotePieces {
    IovList iov;
    SmallVec<uint64_t, 8> keys;
};
RemotePieces remote_pieces(const char *data, size_t data_len, ptl_size_t len) {
    RemotePieces r;
    const size_t n = data_len / sizeof(proto::Segment);
    for (size_t i = 0; i < n && len; ++i) {
        proto::Segment s;
        std::memcpy(&s, data + i * sizeof s, sizeof s);
        const size_t k = std::min<size_t>(s.len, len);
        r.iov.push_back({reinterpret_cast<void *>(s.addr), k});
        r.keys.push_back(s.key);
        len -= k;
    }
    return r;
}

// A rendezvous put's data: the first `len` bytes of the initiator's segments, pulled into
// [offset, +len) of `r` through the wire the request came by. Out of line: the inline
// delivery of a small put stays small.
[[gnu::noinline]] bool pull_rendezvous(const InMessage &m, const Region &r, ptl_size_t offset,
                                       const char *data, size_t data_len, ptl_size_t len) {
    if (len == 0) return true;
    IovList local_iov;
    r.pieces(offset, len, local_iov);
    RemotePieces remote = remote_pieces(data, data_len, len);
    Wire *w = m.via;
    return w && w->bulk_read(m.from, local_iov.data(), int(local_iov.size()), remote.iov.data(),
                             int(remote.iov.size()), remote.keys.data());
}

}  // namespace

// Atomics on memory that peers reach directly are applied as the peers apply theirs (the same
// tests they make): one mechanism for that memory whichever path each operation took, also
// through another entry over the same pages. Peers on other hosts apply 8-byte ones with the
// RDMA device (direct_remote.cc), whose atomics are not atomic with the CPU's: so do we, and
// peers on this host leave those to us (direct.cc). The rest, peers on this host apply with
// CPU atomics.
Engine::SharedAtomics Engine::shared_atomics(const Entry &e, ptl_datatype_t type, ptl_size_t offset,
                                             ptl_size_t mlength, size_t data_len) const {
    if (mlength > data_len || mlength == 0) return SharedAtomics::No;
    const void *at = e.region.address_at(offset);
    if (!e.region.iov && atomics::datatype_size(type) == 8 && atomics::in_place_capable(type, at, mlength) &&
        device_atomics_key(at, mlength))
        return SharedAtomics::Device;
    if (!(e.export_slot >= 0 || (exports_ && !e.region.iov))) return SharedAtomics::No;
    if (!atomics::in_place_capable(type, at, mlength) ||
        !(e.export_slot >= 0 || shm_->in_adopted_pages(at, mlength)))
        return SharedAtomics::No;
    // An entry that may cover unmapped memory (no PTL_ME_IS_ACCESSIBLE) fails an access there
    // with PTL_NI_SEGV, never a fault: the application may have unmapped adopted pages since.
    SmallVec<char, 64> probe(mlength);
    return !e.checked_access() || checked_copy_from(probe.data(), at, mlength) ? SharedAtomics::Cpu
                                                                               : SharedAtomics::No;
}

bool Engine::apply_shared(SharedAtomics how, ptl_op_t op, ptl_datatype_t type, void *at, const void *data,
                          const void *operand, size_t len, void *fetched) {
    if (how == SharedAtomics::Cpu) {
        atomics::apply_in_place(op, type, at, data, operand, len, fetched);
        return true;
    }
    return apply_by_device(op, type, at, data, operand, len, fetched);
}

// Counted on the first NI: a header that does not parse names no NI reliably.
void Engine::count_malformed(uint64_t amount) {
    for (Ni *n : nis_)
        if (n) {
            n->count(PTL_SR_MALFORMED_MESSAGES, int(amount));
            return;
        }
}

void Engine::handle_message(const InMessage &m) {
    if (revoking_ && divert_while_revoking(m)) [[unlikely]]
        return;
    if (!bulk_holds_.empty() && carries_request(m) && hold_for_bulk(m)) [[unlikely]]
        return;
    if (!held_.empty() && carries_request(m)) {  // requests keep their arrival order
        if (trace_) [[unlikely]] {
            proto::Header h;
            std::memcpy(&h, m.header, sizeof h);  // carries_request checked its length
            if (const Ni *n = h.ni_index < 4 ? nis_[h.ni_index] : nullptr)
                trace_arrival(n, m, h, "held behind earlier held messages", nullptr, PTL_PRIORITY_LIST,
                              false);
        }
        held_.push(m, 0);  // holding_published_ is set: held_ was not empty
        return;
    }
    hold_allowed_ = cfg_.flowctrl_grace_ms > 0;
    hold_requested_ = false;
    process_message(m);
    if (hold_requested_) [[unlikely]] {
        if (!holding_published_) {
            // Before the wire frees the message: a peer that sees it handled sees this too.
            holding_published_ = true;
            set_holding(true);
        }
        held_.push(m, coarse_now());
        held_.set_back_queue_read(std::exchange(hold_queue_read_now_, HeldMessages::kNoQueue));
    }
}

int Engine::replay_held(uint64_t now_ns) {
    int work = 0;
    while (!held_.empty()) {
        const uint64_t held_at = held_.front_held_at_ns();
        const bool expired =
            held_at != 0 && now_ns - held_at >= uint64_t(cfg_.flowctrl_grace_ms) * 1000000ull;
        hold_allowed_ = !expired;
        hold_requested_ = false;
        if (!bulk_holds_.empty() && carries_request(held_.front()) && hold_for_bulk(held_.front())) {
            held_.pop();  // behind its initiator's transfer now
            ++work;
            continue;
        }
        hold_traced_ = held_at != 0;  // its hold began at an earlier try
        process_message(held_.front());
        hold_traced_ = false;  // a fresh message's state (handle_message sets none of these)
        const uint64_t queue_read_now = std::exchange(hold_queue_read_now_, HeldMessages::kNoQueue);
        if (hold_requested_) {
            // Held although its grace period was over: hold_until_unlink_read began a new one.
            const bool restarted = expired;
            if (restarted)
                PTL_TRACE_NOTABLE(trace_.get(),
                                  "a held request waits longer: the application read %llu events since",
                                  (unsigned long long)(queue_read_now - held_.front_queue_read()));
            if (held_at == 0 || restarted) {
                held_.set_front_held_at(now_ns);
                held_.set_front_queue_read(queue_read_now);
            }
            break;
        }
        held_.pop();
        ++work;
    }
    return work;
}

// The initiator's requests that waited go through in order, until one starts a transfer of
// its own (the rest wait for that one) or is held for flow control (the rest go behind it).
void Engine::end_bulk_hold(PeerId from) {
    auto it = bulk_holds_.find(from);
    if (it == bulk_holds_.end() || --it->second.inflight > 0) return;
    while (!it->second.queue.empty()) {
        hold_allowed_ = cfg_.flowctrl_grace_ms > 0;
        hold_requested_ = false;
        process_message(it->second.queue.front());
        it = bulk_holds_.find(from);  // processing may have added holds
        if (hold_requested_) [[unlikely]] {
            if (!holding_published_) {
                holding_published_ = true;
                set_holding(true);
            }
            held_.push(it->second.queue.front(), coarse_now());
            held_.set_back_queue_read(std::exchange(hold_queue_read_now_, HeldMessages::kNoQueue));
            it->second.queue.pop();
            while (!it->second.queue.empty()) {
                held_.push(it->second.queue.front(), 0);
                it->second.queue.pop();
            }
            break;
        }
        it->second.queue.pop();
        if (it->second.inflight > 0) {
            release_bulk_hold_credits(from, it->second, false);
            return;
        }
    }
    release_bulk_hold_credits(from, it->second, it->second.inflight == 0);
    if (it->second.inflight == 0) bulk_holds_.erase(it);
}

bool Engine::hold_for_replaced_entry(const Pt &pt, ptl_pt_index_t pti) {
    if (pt.eq->holds_unread(PTL_EVENT_AUTO_UNLINK, pti)) return hold_until_unlink_read(*pt.eq);
    // Read, and the replacement may be on its way: the reading thread appends it after the
    // read returns, while this progress may run on another.
    const uint64_t grace_ns = uint64_t(cfg_.flowctrl_grace_ms) * 1000000ull;
    return pt.unlink_read_ns && monotonic_ns() - pt.unlink_read_ns < grace_ns &&
           hold_instead_of_flow_control();
}

bool Engine::hold_until_unlink_read(const Eq &eq) {
    // A hold is refused only to a replayed message (handle_message allows one), which is the
    // front of held_: if the application read from the queue since its grace period began, a
    // new one begins.
    if (!hold_allowed_ && cfg_.flowctrl_grace_ms > 0 && held_.front_queue_read() != HeldMessages::kNoQueue &&
        eq.taken != held_.front_queue_read())
        hold_allowed_ = true;
    hold_queue_read_now_ = eq.taken;
    return hold_instead_of_flow_control();
}

bool Engine::hold_instead_of_flow_control() {
    if (hold_allowed_) {
        hold_requested_ = true;
        return true;
    }
    if (cfg_.flowctrl_grace_ms > 0 && !warned_grace_expired_) {
        // Once per process: the application did not make room in time. Worth knowing when a
        // job slows down or stalls.
        warned_grace_expired_ = true;
        std::fprintf(stderr,
                     "portals: a message waited %ld ms (PTL_FLOWCTRL_GRACE_MS) for an event queue slot or a "
                     "receive buffer and was then refused\n",
                     cfg_.flowctrl_grace_ms);
    }
    return false;
}

void Engine::process_message(const InMessage &m) {
    proto::Header h;
    if (m.header_len != sizeof h) {
        PTL_TRACE_NOTABLE(trace_.get(), "malformed message <- 0x%x:%u dropped: header of %zu bytes",
                          m.from.nid, m.from.pid, size_t(m.header_len));
        count_malformed();
        return;
    }
    std::memcpy(&h, m.header, sizeof h);
    // Only a put's data is read as it arrives (copy_arriving); everything else reads it whole.
    if (m.arriving && (h.op != proto::kPut || (h.flags & proto::kRendezvous)) &&
        !payload_arrived(m, m.payload_len)) [[unlikely]] {
        PTL_TRACE_NOTABLE(trace_.get(), "message <- 0x%x:%u dropped: its sender died while writing it",
                          m.from.nid, m.from.pid);
        count_malformed();
        return;
    }
    if (h.op >= proto::kExportInfo && h.op <= proto::kReleased && h.ni_index < 4) [[unlikely]] {
        on_direct_control(m, h);  // between engines, for no NI in particular
        return;
    }
    Ni *n = h.ni_index < 4 ? nis_[h.ni_index] : nullptr;
    if (h.op == 0 || h.op > proto::kOpLast || h.ni_index >= 4 || h.operand_len > 32 ||
        h.operand_len > m.payload_len) {
        PTL_TRACE_NOTABLE(trace_.get(),
                          "malformed message <- 0x%x:%u dropped: op %u ni %u operand %u payload %zu",
                          m.from.nid, m.from.pid, h.op, h.ni_index, h.operand_len, size_t(m.payload_len));
        count_malformed();
        return;
    }
    if (!n) {
        PTL_TRACE_NOTABLE(trace_.get(), "%s <- 0x%x:%u for ni%u dropped: no such NI here",
                          proto::op_name(h.op), m.from.nid, m.from.pid, h.ni_index);
        // No such logical NI here: the message is dropped (§4.2.2); tell the initiator so
        // its operation completes.
        if (is_request(h.op))
            respond(m, h, wants_reply(h.op) ? proto::kReply : proto::kAck, PTL_NI_DROPPED, 0, 0, 0, nullptr,
                    0, 0);
        return;
    }
    // One body per request kind: the kind's tests fold away (a put has no reply to build).
    switch (h.op) {
        case proto::kAck: on_ack(n, m.from, h); break;
        case proto::kReply: on_reply(n, m.from, h, m.payload, m.payload_len); break;
        case proto::kPut: on_request<proto::kPut>(n, m, h); break;
        case proto::kGet: on_request<proto::kGet>(n, m, h); break;
        case proto::kAtomic: on_request<proto::kAtomic>(n, m, h); break;
        case proto::kFetchAtomic: on_request<proto::kFetchAtomic>(n, m, h); break;
        default: on_request<proto::kSwap>(n, m, h); break;
    }
}

void Engine::respond(const InMessage &m, const proto::Header &req, uint8_t op, ptl_ni_fail_t fail,
                     ptl_size_t mlength, ptl_size_t offset, ptl_list_t list, const void *data,
                     size_t data_len, uint8_t extra_flags) {
    proto::Header r{};
    r.op = op;
    r.ni_index = req.ni_index;
    r.ack_req = req.ack_req;
    r.flags = extra_flags;
    r.ni_fail = fail;
    r.ptl_list = list;
    r.pt_index = req.pt_index;
    r.mlength = mlength;
    r.remote_offset = offset;
    r.length = req.length;
    r.op_id = req.op_id;
    struct iovec iov {
        const_cast<void *>(data), data_len
    };
    // The ACK of a small message may wait for company (Wire::send_deferrable): a ping-pong's
    // rides with the pong. One of a large message goes at once: its system call is small next
    // to the data's, and an initiator waiting for it (a zero-copy send) is not held up if
    // the target stops calling in.
    constexpr uint64_t kDeferAckMaxBytes = 8192;
    send(m.from, r, &iov, data_len ? 1 : 0, op == proto::kAck && req.length <= kDeferAckMaxBytes);
}

void Engine::refuse(const InMessage &m, const proto::Header &h, ptl_ni_fail_t fail) {
    // A response is owed when the initiator waits for one: ACK requested, a reply, or a
    // rendezvous put whose SEND waits until we pulled the data.
    const bool reply = wants_reply(h.op);
    const bool ack_wanted = !reply && h.ack_req != PTL_NO_ACK_REQ;
    if (reply || ack_wanted || (h.flags & proto::kRendezvous))
        respond(m, h, reply ? proto::kReply : proto::kAck, fail, 0, h.remote_offset, 0, nullptr, 0,
                ack_wanted || reply ? 0 : proto::kSendOnly);
}

void Engine::silent_drop(Ni *n, const InMessage &m, const proto::Header &h) {
    n->count(PTL_SR_DROP_COUNT);
    if (cfg_.notify_drops || n->notify_drops || h.ack_req == PTL_OC_ACK_REQ)
        refuse(m, h, PTL_NI_DROPPED);
    else if (h.flags & proto::kRendezvous)  // no ACK (silent), but the initiator's SEND still has to complete
        respond(m, h, proto::kAck, PTL_NI_DROPPED, 0, 0, 0, nullptr, 0, proto::kSendOnly);
}

void Engine::disable_pt(Ni *n, Pt &pt, Entry *cause, const InMessage &m, const proto::Header &h) {
    pt.enabled = false;
    revoke_exports(n, h.pt_index, false);
    if (pt.eq && !(cause && (cause->opts() & PTL_ME_EVENT_FLOWCTRL_DISABLE))) {
        ptl_event_t ev{};
        ev.type = PTL_EVENT_PT_DISABLED;
        ev.pt_index = h.pt_index;
        ev.user_ptr = cause ? cause->user_ptr : nullptr;
        ev.ni_fail_type = PTL_NI_PT_DISABLED;
        post_event(pt.eq, ev);
    }
    n->count(PTL_SR_DROP_COUNT);
    refuse(m, h, PTL_NI_PT_DISABLED);
}

void Engine::trace_arrival(const Ni *n, const InMessage &m, const proto::Header &h, const char *outcome,
                           const Entry *e, ptl_list_t list, bool notable) {
    char entry[64] = "";
    if (e)
        std::snprintf(entry, sizeof entry, " %s 0x%x (%s list)", e->is_me ? "me" : "le", e->handle,
                      list == PTL_PRIORITY_LIST ? "priority" : "overflow");
    trace_->line_or_notable(notable, "ni%u %s <- 0x%x:%u%s pt %u bits 0x%llx len %llu op %llu: %s%s",
                            n->index, proto::op_name(h.op), m.from.nid, m.from.pid,
                            RankNote(n->logical(), h.src_rank).text, h.pt_index,
                            (unsigned long long)h.match_bits, (unsigned long long)h.length,
                            (unsigned long long)h.op_id, outcome, entry);
}

void Engine::trace_delivery(const Ni *n, const InMessage &m, const proto::Header &h, const Entry *e,
                            ptl_list_t list, ptl_ni_fail_t fail, ptl_size_t mlength, ptl_size_t offset,
                            bool keep_header) {
    char outcome[96];
    std::snprintf(outcome, sizeof outcome, "%s %llu bytes at offset %llu%s, matched",
                  fail == PTL_NI_OK ? "delivered" : "failed (segv):", (unsigned long long)mlength,
                  (unsigned long long)offset, keep_header ? ", header kept as unexpected" : "");
    trace_arrival(n, m, h, outcome, e, list, fail != PTL_NI_OK);
}

namespace {

// A message matched in the overflow list leaves an unexpected header unless the entry says not.
bool keeps_header(const Entry &e, ptl_list_t list) {
    return list == PTL_OVERFLOW_LIST && !(e.opts() & PTL_ME_UNEXPECTED_HDR_DISABLE);
}

ptl_process_t initiator_of(const Ni &n, const InMessage &m, const proto::Header &h) {
    ptl_process_t initiator{};
    if (n.logical())
        initiator.rank = h.src_rank;
    else
        initiator.phys = {m.from.nid, m.from.pid};
    return initiator;
}

// The header of a message matched in the overflow list, listed for entries appended later to
// claim (L4-L6); its data at `start` in the overflow entry.
UnexpectedHeader *list_unexpected(Ni &n, Pt &pt, Entry *e, const InMessage &m, const proto::Header &h,
                                  ptl_size_t rlength, ptl_size_t mlength, void *start) {
    auto *u = new UnexpectedHeader{};
    u->kind = uh_kind(h.op);
    u->initiator = initiator_of(n, m, h);
    u->src_nid = m.from.nid;
    u->src_pid = m.from.pid;
    u->src_rank = h.src_rank;
    u->uid = h.uid;
    u->match_bits = h.match_bits;
    u->hdr_data = h.hdr_data;
    u->rlength = rlength;
    u->mlength = mlength;
    u->remote_offset = h.remote_offset;
    u->atomic_op = h.atomic_op;
    u->atomic_type = h.atomic_type;
    u->entry = e;
    u->start = start;
    pt.unexpected.add(u);
    ++e->uh_count;
    ++n.unexpected;
    return u;
}

// The comm event of a request delivered into `e` (C7), written in place in its queue.
struct CommEvent {
    ptl_event_kind_t kind;
    void *start;
    ptl_size_t mlength;
    ptl_ni_fail_t fail;
    ptl_list_t list;
};
inline void fill_comm_event(ptl_event_t &ev, const Entry &e, const Ni &n, const InMessage &m,
                            const proto::Header &h, const CommEvent &c) {
    ev.start = c.start;
    ev.user_ptr = e.user_ptr;
    ev.hdr_data = h.hdr_data;
    ev.match_bits = e.is_me ? h.match_bits : 0;
    ev.rlength = h.length;
    ev.mlength = c.mlength;
    ev.remote_offset = h.remote_offset;
    ev.initiator = initiator_of(n, m, h);
    ev.uid = h.uid;
    ev.type = c.kind;
    ev.pt_index = h.pt_index;
    ev.ni_fail_type = c.fail;
    ev.atomic_operation = h.atomic_op;
    ev.atomic_type = h.atomic_type;
    ev.ptl_list = c.list;
}

}  // namespace

bool Engine::deliver_plain_put(Ni *n, Pt &pt, Entry *e, const InMessage &m, const proto::Header &h,
                               ptl_list_t list) {
    const bool pooled = e->pooled;
    const ptl_size_t offset = pooled ? e->slots.front() : h.remote_offset;
    const ptl_size_t length = e->region.length;
    const ptl_size_t room = pooled ? e->desc.min_free : offset >= length ? 0 : length - offset;
    const ptl_size_t mlength = std::min<ptl_size_t>(h.length, room);
    const size_t data_len = m.payload_len - h.operand_len;
    if (mlength > data_len) return false;  // a short payload: the general path says SEGV (B6)
    char *const start = static_cast<char *>(e->region.address_at(offset));
    if (!m.arriving) [[likely]] {
        copy_small(start, static_cast<const char *>(m.payload) + h.operand_len, mlength);
    } else if (!copy_arriving(m, h.operand_len, mlength, [start](size_t at, const char *from, size_t n) {
                   std::memcpy(start + at, from, n);
                   return true;
               })) {
        return false;  // its sender died: the general path reports what is missing
    }
    if (pooled) e->slots.pop();
    if (pt.eq && entry_allows_full(*e, PTL_EVENT_PUT, true)) {
        fill_comm_event(pt.eq->emplace(), *e, *n, m, h, {PTL_EVENT_PUT, start, mlength, PTL_NI_OK, list});
        event_posted(pt.eq);
    }
    if (uint64_t amount = entry_count_amount(*e, PTL_EVENT_PUT, true, mlength)) ct_add(e->ct, true, amount);
    if (h.ack_req != PTL_NO_ACK_REQ)
        respond(m, h, proto::kAck, PTL_NI_OK, mlength, offset, list, nullptr, 0, 0);
    return true;
}

// The error paths are member functions (refuse, silent_drop, disable_pt), not closures: a
// closure over a dozen locals was built for every message and used by few.
template <uint8_t op>
void Engine::on_request(Ni *n, const InMessage &m, const proto::Header &h) {
    if (h.pt_index >= n->pts.size() || !n->pts[h.pt_index].allocated) {
        if (trace_) trace_arrival(n, m, h, "dropped: no such portal");
        n->count(PTL_SR_DROP_COUNT);
        refuse(m, h, PTL_NI_DROPPED);
        return;
    }
    const ptl_pt_index_t pti = h.pt_index;
    Pt &pt = n->pts[pti];
    if (!pt.enabled) {
        if (trace_) trace_arrival(n, m, h, "dropped: portal disabled");
        n->count(PTL_SR_DROP_COUNT);
        refuse(m, h, PTL_NI_PT_DISABLED);
        return;
    }

    const Source src{m.from.nid, m.from.pid, h.src_rank};
    const ptl_size_t rlength = h.length;
    auto fits = [&](Entry *e) {
        if (!bits_match(*e, h.match_bits) || !source_matches(*n, *e, src)) return false;
        if (e->pooled)  // a slot given, and room in it (PTLX_ME_SLOT_POOL)
            return !e->slots.empty() && (rlength <= e->desc.min_free || !(e->opts() & PTL_ME_NO_TRUNCATE));
        if ((e->opts() & PTL_ME_NO_TRUNCATE) && rlength > 0) {  // M4
            const ptl_size_t off = (e->opts() & PTL_ME_MANAGE_LOCAL) ? e->local_offset : h.remote_offset;
            if (off > e->region.length || rlength > e->region.length - off) return false;
        }
        return true;
    };
    ptl_list_t list = PTL_PRIORITY_LIST;
    // A portal with nothing posted (the UCT face's active messages, a receiver all of whose
    // receives are taken) goes straight to its overflow list.
    Entry *e =
        pt.lists[PTL_PRIORITY_LIST].size ? pt.lists[PTL_PRIORITY_LIST].find(h.match_bits, fits) : nullptr;
    if (!e) {
        list = PTL_OVERFLOW_LIST;
        e = pt.lists[PTL_OVERFLOW_LIST].find(h.match_bits, fits);
    }
    if (!e) [[unlikely]] {
        on_unmatched(n, pt, m, h);
        return;
    }

    if constexpr (op == proto::kPut) {
        if (e->plain_put && !(h.flags & proto::kRendezvous) && !(pt.options & PTL_PT_FLOWCTRL) && !trace_ &&
            !keeps_header(*e, list) && deliver_plain_put(n, pt, e, m, h, list)) [[likely]]
            return;
    }
    on_matched<op>(n, pt, e, list, m, h);
}

// The message found no entry: flow control, a hold, or a drop.
void Engine::on_unmatched(Ni *n, Pt &pt, const InMessage &m, const proto::Header &h) {
    const ptl_pt_index_t pti = h.pt_index;
    if (pt.options & PTL_PT_FLOWCTRL) {
        if (hold_instead_of_flow_control()) {
            if (tracing_hold()) trace_arrival(n, m, h, "held: no entry matched (PTL_FLOWCTRL_GRACE_MS)");
        } else {
            if (trace_) trace_arrival(n, m, h, "portal disabled by flow control: no entry matched");
            disable_pt(n, pt, nullptr, m, h);
        }
    } else if (!(pt.eq && hold_for_replaced_entry(pt, pti))) {
        // Without flow control an unmatched message is dropped - unless an entry of this
        // portal was used up and the application has not yet read that it was, or has
        // just read it: a client that replaces its receive buffers as it learns of them
        // (Open MPI's btl) gets the grace period to do so instead of losing the message.
        if (trace_) trace_arrival(n, m, h, "dropped: no entry matched");
        silent_drop(n, m, h);
    } else if (tracing_hold()) {
        trace_arrival(n, m, h,
                      "held: no entry matched, an entry of the portal was used up (PTL_FLOWCTRL_GRACE_MS)");
    }
}

// A message and the entry it matched, in general: permissions, flow control, offsets of every
// kind, every operation, events, unexpected headers, unlinks and responses.
template <uint8_t op>
void Engine::on_matched(Ni *n, Pt &pt, Entry *e, ptl_list_t list, const InMessage &m,
                        const proto::Header &h) {
    const bool rndv = h.flags & proto::kRendezvous;
    const ptl_size_t rlength = h.length;
    // Permissions end the walk: no fall-through to later entries (M6, tricky point 1).
    if (e->desc.uid != PTL_UID_ANY && e->desc.uid != h.uid) {
        if (trace_) trace_arrival(n, m, h, "refused: the uid is not the entry's", e, list);
        n->count(PTL_SR_PERMISSION_VIOLATIONS);
        refuse(m, h, PTL_NI_PERM_VIOLATION);
        return;
    }
    const unsigned need = op == proto::kGet                           ? PTL_ME_OP_GET
                          : op == proto::kPut || op == proto::kAtomic ? PTL_ME_OP_PUT
                                                                      : PTL_ME_OP_PUT | PTL_ME_OP_GET;
    if ((e->opts() & need) != need) {
        if (trace_) trace_arrival(n, m, h, "refused: the operation is not allowed by", e, list);
        n->count(PTL_SR_OPERATION_VIOLATIONS);
        refuse(m, h, PTL_NI_OP_VIOLATION);
        return;
    }
    const bool keep_header = keeps_header(*e, list);
    if (keep_header && n->unexpected >= uint32_t(n->limits.max_unexpected_headers)) {
        if (!(pt.options & PTL_PT_FLOWCTRL)) {
            if (trace_) trace_arrival(n, m, h, "dropped: max_unexpected_headers reached, matched", e, list);
            silent_drop(n, m, h);
        } else if (!hold_instead_of_flow_control()) {
            if (trace_)
                trace_arrival(n, m, h, "portal disabled by flow control: max_unexpected_headers", e, list);
            disable_pt(n, pt, e, m, h);
        } else if (tracing_hold()) {
            trace_arrival(n, m, h, "held: max_unexpected_headers reached (PTL_FLOWCTRL_GRACE_MS)", e, list);
        }
        return;
    }
    const ptl_event_kind_t kind = comm_kind(op);
    if ((pt.options & PTL_PT_FLOWCTRL) && pt.eq && entry_allows_full(*e, kind, true) &&
        !pt.eq->has_room_for_regular()) {
        if (!hold_instead_of_flow_control()) {
            if (trace_) trace_arrival(n, m, h, "portal disabled by flow control: event queue full", e, list);
            disable_pt(n, pt, e, m, h);
        } else if (tracing_hold()) {
            trace_arrival(n, m, h, "held: event queue full (PTL_FLOWCTRL_GRACE_MS)", e, list);
        }
        return;
    }

    // Offset and length (B1-B4, step 10-11).
    const bool local = e->opts() & PTL_ME_MANAGE_LOCAL;
    const bool pooled = e->pooled;
    const ptl_size_t offset = pooled ? e->slots.front() : local ? e->local_offset : h.remote_offset;
    const ptl_size_t room = pooled                       ? e->desc.min_free
                            : offset >= e->region.length ? 0
                                                         : e->region.length - offset;
    ptl_size_t mlength = std::min(rlength, room);
    const bool is_atomic = op == proto::kAtomic || op == proto::kFetchAtomic || op == proto::kSwap;
    const size_t dts = is_atomic ? atomics::datatype_size(h.atomic_type) : 1;
    if (is_atomic && dts) mlength -= mlength % dts;

    const char *payload = static_cast<const char *>(m.payload);
    const void *operand = h.operand_len ? payload : nullptr;
    const char *data = payload + h.operand_len;
    const size_t data_len = m.payload_len - h.operand_len;

    // The entry's offsets move on at once: the next message lands beyond this one however
    // long this one's data takes.
    const bool slotted = local && (e->opts() & PTLX_ME_SLOTS) && e->desc.min_free;
    if (pooled) {
        e->slots.pop();
    } else if (local) {
        if (slotted) {
            // Whole slots, at least one: each message starts a slot of its own.
            const ptl_size_t slot = e->desc.min_free;
            e->local_offset += std::max<ptl_size_t>(1, (mlength + slot - 1) / slot) * slot;
        } else {
            e->local_offset += mlength;  // I-list 25
        }
    }
    // Automatic unlink (use-once, or min_free on local offsets; slots last while another slot
    // can start, however short the last one), after the comm event.
    const bool exhausted =
        (e->opts() & PTL_ME_USE_ONCE) ||
        (local && e->desc.min_free && !pooled &&
         (slotted ? e->local_offset >= e->region.length
                  : e->region.length - std::min(e->local_offset, e->region.length) < e->desc.min_free));

    // Data a device moves (RDMA): started now, reported when done (finish_bulk_delivery).
    if constexpr (op == proto::kPut || op == proto::kGet) {
        const bool bulk = op == proto::kPut ? rndv : (h.flags & proto::kBulkReply) != 0;
        if (bulk && mlength && m.via && m.via->bulk_async()) {
            UnexpectedHeader *uh =
                keep_header ? list_unexpected(*n, pt, e, m, h, rlength, mlength, e->region.address_at(offset))
                            : nullptr;
            start_bulk_delivery(n, pt, e, m, h, offset, mlength, exhausted, data, data_len, list, uh);
            return;
        }
    }
    const bool checked = e->checked_access();
    bool ok = true;
    SmallVec<char, 256> out;  // reply data
    uint8_t reply_flags = 0;
    const SharedAtomics shared = is_atomic && list == PTL_PRIORITY_LIST
                                     ? shared_atomics(*e, h.atomic_type, offset, mlength, data_len)
                                     : SharedAtomics::No;

    auto write_in = [&](ptl_size_t len) -> bool {
        if (!rndv) [[likely]] {
            if (len > data_len) return false;
            if (!m.arriving) [[likely]]
                return e->region.write(offset, data, len, checked);
            const bool in = copy_arriving(m, h.operand_len, len, [&](size_t at, const char *from, size_t n) {
                return e->region.write(offset + at, from, n, checked);
            });
            if (!in && m.arriving->load(std::memory_order_acquire) < h.operand_len + len) {  // no data
                PTL_TRACE_NOTABLE(trace_.get(), "put <- 0x%x:%u failed: its sender stopped writing it",
                                  m.from.nid, m.from.pid);
                count_malformed();
            }
            return in;
        }
        return pull_rendezvous(m, e->region, offset, data, data_len, len);
    };

    if (op == proto::kPut || (op == proto::kAtomic && list == PTL_OVERFLOW_LIST)) {
        ok = write_in(mlength);
    } else if (op == proto::kAtomic && shared != SharedAtomics::No) {
        ok = apply_shared(shared, h.atomic_op, h.atomic_type, e->region.address_at(offset), data, operand,
                          mlength, nullptr);
    } else if (op == proto::kAtomic) {
        SmallVec<char, 256> t(mlength);
        ok = mlength <= data_len && e->region.read(offset, t.data(), mlength, checked);
        if (ok) {
            atomics::apply(h.atomic_op, h.atomic_type, t.data(), data, operand, mlength);
            ok = e->region.write(offset, t.data(), mlength, checked);
        }
    } else if (op == proto::kGet || list == PTL_OVERFLOW_LIST) {
        // A get, or a fetching atomic matched in the overflow list, which behaves as a get
        // of the overflow bytes (A11).
        if (h.flags & proto::kBulkReply) {
            IovList local_iov;
            e->region.pieces(offset, mlength, local_iov);
            RemotePieces r = remote_pieces(data, data_len, mlength);
            Wire *w = m.via;
            ok = mlength == 0 || (w && w->bulk_write(m.from, local_iov.data(), int(local_iov.size()),
                                                     r.iov.data(), int(r.iov.size()), r.keys.data()));
            reply_flags = proto::kDataWritten;
        } else {
            out.resize(mlength);
            ok = e->region.read(offset, out.data(), mlength, checked);
        }
    } else if (shared != SharedAtomics::No) {
        out.resize(mlength);
        ok = apply_shared(shared, h.atomic_op, h.atomic_type, e->region.address_at(offset), data, operand,
                          mlength, out.data());
    } else {
        // Fetching atomic or swap in the priority list: reply with the value before (F41).
        out.resize(mlength);
        ok = mlength <= data_len && e->region.read(offset, out.data(), mlength, checked);
        if (ok) {
            SmallVec<char, 256> t(out);
            atomics::apply(h.atomic_op, h.atomic_type, t.data(), data, operand, mlength);
            ok = e->region.write(offset, t.data(), mlength, checked);
        }
    }
    const ptl_ni_fail_t fail = (ok || mlength == 0) ? PTL_NI_OK : PTL_NI_SEGV;  // B6
    if (fail != PTL_NI_OK) out.clear();

    // The comm event, on the entry that received the message (C7), written in place.
    void *const start = e->region.address_at(offset);
    post_comm_event(n, pt, e, m, h, kind, start, mlength, fail, list);

    if (keep_header) list_unexpected(*n, pt, e, m, h, rlength, mlength, start);

    if (trace_) [[unlikely]]
        trace_delivery(n, m, h, e, list, fail, mlength, offset, keep_header);

    if (exhausted) auto_unlink(n, pt, e);  // after the comm event (EO1)
    respond_to(m, h, fail, mlength, offset, list, out.data(), out.size(), reply_flags);
}

void Engine::post_comm_event(Ni *n, Pt &pt, Entry *e, const InMessage &m, const proto::Header &h,
                             ptl_event_kind_t kind, void *start, ptl_size_t mlength, ptl_ni_fail_t fail,
                             ptl_list_t list) {
    if (pt.eq && entry_allows_full(*e, kind, fail == PTL_NI_OK)) {
        fill_comm_event(pt.eq->emplace(), *e, *n, m, h, {kind, start, mlength, fail, list});
        event_posted(pt.eq);
    }
    if (uint64_t amt = entry_count_amount(*e, kind, fail == PTL_NI_OK, mlength))
        ct_add(e->ct, fail == PTL_NI_OK, amt);
}

void Engine::respond_to(const InMessage &m, const proto::Header &h, ptl_ni_fail_t fail, ptl_size_t mlength,
                        ptl_size_t offset, ptl_list_t list, const void *data, size_t data_len,
                        uint8_t reply_flags) {
    if (wants_reply(h.op)) {
        respond(m, h, proto::kReply, fail, mlength, offset, list, data, data_len, reply_flags);
    } else if (h.ack_req != PTL_NO_ACK_REQ || (h.flags & proto::kRendezvous)) {
        respond(m, h, proto::kAck, fail, mlength, offset, list, nullptr, 0,
                h.ack_req != PTL_NO_ACK_REQ ? 0 : proto::kSendOnly);
    }
}

// A rendezvous put's pull or a get's reply written into the initiator, by the wire on its
// own: the entry leaves its list now if this message used it up (no later message may match
// it), stays allocated until the transfer ends, and later requests of the same initiator
// wait for it (hold_for_bulk): its data lands before theirs, as a synchronous delivery's.
void Engine::start_bulk_delivery(Ni *n, Pt &pt, Entry *e, const InMessage &m, const proto::Header &h,
                                 ptl_size_t offset, ptl_size_t mlength, bool exhausted, const char *data,
                                 size_t data_len, ptl_list_t list, UnexpectedHeader *uh) {
    auto d = std::make_unique<BulkDelivery>();
    d->ni = n;
    d->entry = e;
    d->from = m.from;
    d->via = m.via;
    d->header = h;
    d->offset = offset;
    d->mlength = mlength;
    d->exhausted = exhausted;
    d->list = list;
    d->uh = uh;
    if (uh) {
        uh->pending_bulk = true;
        ++pending_overflow_;
    }
    if (exhausted) detach_entry(n, pt, e);
    ++e->transfers;
    // Its event's slot is taken now: flow control counted it in at the match (EQ2).
    d->eq = pt.eq;
    if (d->eq) ++d->eq->promised;
    IovList local_iov;
    e->region.pieces(offset, mlength, local_iov);
    RemotePieces r = remote_pieces(data, data_len, mlength);
    const uint64_t cookie = next_bulk_cookie_++;
    if (!m.via->bulk_start(m.from, h.op == proto::kPut, local_iov.data(), int(local_iov.size()), r.iov.data(),
                           int(r.iov.size()), r.keys.data(), cookie)) {
        finish_bulk_delivery(*d, false);  // nothing moved, nothing held back
        return;
    }
    begin_bulk_hold(m.from);
    bulk_deliveries_.emplace(cookie, std::move(d));
}

}  // namespace ptl
