// The initiator side of data movement (§3.15): argument checks, building the request
// (inline, or rendezvous with the data left in place for the target to pull), the local
// SEND event, and turning ACK / REPLY responses into events (digest §7.2, §9).
#include <algorithm>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "../wire/shm/shm_wire.h"
#include "atomic_ops.h"
#include "engine.h"
#include "events.h"

namespace ptl {

namespace {

// The region's bytes as segments the peer's wire can reach; false if the wire cannot export
// them (the data then travels inline).
bool add_segments(Wire &w, PeerId peer, const Region &r, uint64_t off, uint64_t len, bool writable,
                  SmallVec<proto::Segment, 8> &out, uint64_t *export_id) {
    IovList v;
    r.pieces(off, len, v);
    SmallVec<uint64_t, 8> keys(v.size());
    if (!w.export_memory(peer, v.data(), int(v.size()), writable, keys.data(), export_id)) return false;
    for (size_t i = 0; i < v.size(); ++i)
        out.push_back({reinterpret_cast<uint64_t>(v[i].iov_base), v[i].iov_len, keys[i]});
    return true;
}

void drop_segments(Wire &w, SmallVec<proto::Segment, 8> &segs, uint64_t *export_id) {
    segs.clear();
    if (*export_id) w.release_export(std::exchange(*export_id, 0));
}

bool all_mapped(const Wire &w, const SmallVec<proto::Segment, 8> &segs) {
    for (const proto::Segment &g : segs)
        if (!w.bulk_by_mapping(g.key)) return false;
    return !segs.empty();
}

// Gets this small have their reply inline even from mapped memory: the bulk reply's extra
// segment list and lookups cost more than copying a few cells.
constexpr uint64_t kMappedGetMin = 4096;

}  // namespace

void Engine::post_initiator_event(Md *md, ptl_event_kind_t type, ptl_ni_fail_t fail, ptl_size_t mlength,
                                  ptl_size_t offset, ptl_list_t list, void *user_ptr, bool full_allowed) {
    const bool success = fail == PTL_NI_OK;
    if (full_allowed && md_allows_full(*md, type, success)) {
        ptl_event_t ev{};
        ev.type = type;
        ev.user_ptr = user_ptr;
        ev.mlength = mlength;
        ev.remote_offset = offset;
        ev.ptl_list = list;
        ev.ni_fail_type = fail;
        post_event(md->eq, ev);
    }
    if (uint64_t amt = md_count_amount(*md, type, success, mlength)) ct_add(md->ct, success, amt);
}

int Engine::data_op(TrigKind kind, const DataOpArgs &a) {
    // One body per kind, each with its checks inlined: the kind's tests fold away.
    switch (kind) {
        case TrigKind::Put: return put(a);
        case TrigKind::Get: return data_op_of<TrigKind::Get>(a);
        case TrigKind::Atomic: return data_op_of<TrigKind::Atomic>(a);
        case TrigKind::FetchAtomic: return data_op_of<TrigKind::FetchAtomic>(a);
        default: return data_op_of<TrigKind::Swap>(a);
    }
}

template <TrigKind kind>
int Engine::data_op_of(const DataOpArgs &a) {
    Lock lk(mu_);
    const int rc = data_op_locked<kind>(a);
    finish_call();
    return rc;
}

template <TrigKind kind>
int Engine::data_op_locked(const DataOpArgs &a) {
    CheckedOp c;
    int rc = check_op_inline(kind, a, c);
    if (rc == PTL_OK && (rc = try_direct_of<kind>(a, c, true)) == kNotDirect) {
        rc = send_op(kind, a, c);
        if (quiet_.load(std::memory_order_relaxed)) note_send_left_work();
    }
    return rc;
}

template int Engine::data_op_locked<TrigKind::Put>(const DataOpArgs &);

// The argument rules of §3.15 (B9, D8, D10, A1, A2, LA1), shared by the immediate calls
// and by PtlTriggered*, which must refuse at post time what could never fire.
int Engine::check_op(TrigKind kind, const DataOpArgs &a, CheckedOp &c) {
    return check_op_inline(kind, a, c);
}

inline int Engine::check_op_inline(TrigKind kind, const DataOpArgs &a, CheckedOp &c) {
    const bool two_mds = kind == TrigKind::FetchAtomic || kind == TrigKind::Swap;
    Md *put_md = c.put_md = kind == TrigKind::Get ? nullptr : md_of(a.md);
    Md *get_md = c.get_md = kind == TrigKind::Get ? md_of(a.md) : two_mds ? md_of(a.get_md) : nullptr;
    if (kind != TrigKind::Get && !put_md) return PTL_ARG_INVALID;
    if ((kind == TrigKind::Get || two_mds) && !get_md) return PTL_ARG_INVALID;
    if (two_mds && put_md->ni != get_md->ni) return PTL_ARG_INVALID;  // D10
    Ni *n = c.ni = put_md ? put_md->ni : get_md->ni;
    if (n->logical() && !n->map_set) return PTL_ARG_INVALID;
    if (a.pt_index >= n->pts.size()) return PTL_ARG_INVALID;
    if (a.length > n->limits.max_msg_size) return PTL_ARG_INVALID;
    const ptl_size_t put_off = c.put_off = kind == TrigKind::Get ? 0 : a.local_offset;
    const ptl_size_t get_off = c.get_off = kind == TrigKind::Get ? a.local_offset : a.local_get_offset;
    if (put_md && (put_off > put_md->region.length || a.length > put_md->region.length - put_off))
        return PTL_ARG_INVALID;  // B9
    if (get_md && (get_off > get_md->region.length || a.length > get_md->region.length - get_off))
        return PTL_ARG_INVALID;
    const ptl_ack_req_t ack_req = c.ack_req =
        (kind == TrigKind::Put || kind == TrigKind::Atomic) ? a.ack_req : PTL_NO_ACK_REQ;
    if (ack_req > PTL_OC_ACK_REQ) return PTL_ARG_INVALID;
    if (put_md && (put_md->desc.options & PTL_MD_UNRELIABLE) &&
        (kind != TrigKind::Put || ack_req != PTL_NO_ACK_REQ))
        return PTL_ARG_INVALID;  // D8
    c.operand_len = 0;
    if (kind == TrigKind::Atomic || two_mds) {
        const atomics::Call call = kind == TrigKind::Atomic ? atomics::Call::Atomic
                                   : kind == TrigKind::Swap ? atomics::Call::Swap
                                                            : atomics::Call::FetchAtomic;
        if (!atomics::legal(a.op, a.datatype, call)) return PTL_ARG_INVALID;
        const size_t dts = atomics::datatype_size(a.datatype);
        const ptl_size_t limit =
            kind == TrigKind::Atomic ? n->limits.max_atomic_size : n->limits.max_fetch_atomic_size;
        if (a.length > limit || a.length % dts) return PTL_ARG_INVALID;  // A1, A2
        if (kind == TrigKind::Swap && a.op != PTL_SWAP) {
            if (a.length != dts) return PTL_ARG_INVALID;
            c.operand_len = dts;
        }
    }
    if (!n->resolve(a.target, &c.peer)) return PTL_ARG_INVALID;
    return PTL_OK;
}

int Engine::start_op(TrigKind kind, const DataOpArgs &a) {
    CheckedOp c;
    if (int rc = check_op(kind, a, c); rc != PTL_OK) return rc;
    if (const int done = try_direct(kind, a, c, false); done != kNotDirect) return done;
    return send_op(kind, a, c);
}

int Engine::send_op(TrigKind kind, const DataOpArgs &a, const CheckedOp &c) {
    const uint8_t op = proto_op(kind);
    Md *put_md = c.put_md, *get_md = c.get_md;
    Ni *n = c.ni;
    const ptl_size_t put_off = c.put_off, get_off = c.get_off;
    const ptl_ack_req_t ack_req = c.ack_req;
    const size_t operand_len = c.operand_len;
    const PeerId peer = c.peer;

    proto::Header h{};
    h.op = op;
    h.ni_index = uint8_t(n->index);
    h.ack_req = ack_req;
    h.atomic_op = a.op;
    h.atomic_type = a.datatype;
    h.pt_index = a.pt_index;
    h.uid = uid_;
    h.src_rank = n->logical() ? n->self_rank : PTL_RANK_ANY;
    h.operand_len = uint32_t(operand_len);
    h.match_bits = a.match_bits;
    h.hdr_data = a.hdr_data;
    h.remote_offset = a.remote_offset;
    h.length = a.length;
    if (put_md && (put_md->desc.options & PTL_MD_UNORDERED)) h.flags |= proto::kUnordered;

    Wire *w = wire_for(peer);
    // What one message to the peer holds (operand included), and for a get what one from it
    // holds (the reply, into our ring on shared memory): each ring is sized by its owner.
    const size_t payload_room = w ? w->max_inline(peer) - sizeof h : 0;
    const size_t reply_room = w && kind == TrigKind::Get ? w->max_inline_from(peer) - sizeof h : 0;
    IovList iov;
    SmallVec<proto::Segment, 8> segs;
    if (operand_len) iov.push_back({const_cast<unsigned char *>(a.operand), operand_len});
    bool rndv = false;
    uint64_t export_id = 0;
    char *bounce = nullptr;  // a volatile put's copy (PendingOp::bounce)
    // Through shared memory, data the peer cannot map (the brk heap, pages shared with other
    // objects) moves through the ring up to shm_copy_max: two memcpys beat one cross-memory
    // attach, which pins every page it touches (docs/adoption.md).
    const bool shm = w == shm_.get();
    const uint64_t copy_max =
        shm ? std::min<uint64_t>(cfg_.shm_copy_max,
                                 kind == TrigKind::Get ? reply_room : payload_room - operand_len)
            : 0;
    if (kind == TrigKind::Get) {
        // Below the threshold only where the target writes the reply through a mapping of ours
        // (one copy, where inline is two): the shm wire's adopted pages.
        const bool big = a.length > cfg_.rndv_threshold || a.length > reply_room;
        if ((big || (shm && a.length > kMappedGetMin)) && w && w->has_bulk(peer) &&
            add_segments(*w, peer, get_md->region, get_off, a.length, true, segs, &export_id)) {
            if ((big && a.length > copy_max) || all_mapped(*w, segs))
                h.flags |= proto::kBulkReply;
            else
                drop_segments(*w, segs, &export_id);
        }
    } else {
        const bool volatile_fits =
            (put_md->desc.options & PTL_MD_VOLATILE) && operand_len + a.length <= payload_room;
        const bool too_big = a.length > cfg_.rndv_threshold || operand_len + a.length > payload_room;
        rndv = kind == TrigKind::Put && too_big && !volatile_fits && w && w->has_bulk(peer) &&
               add_segments(*w, peer, put_md->region, put_off, a.length, false, segs, &export_id);
        // Through the ring only while it has room: a message waiting in our backlog is copied
        // once more, and a stream of them fills the ring (a 2 MiB ring holds 7 of 256 KiB).
        if (rndv && a.length <= copy_max && !all_mapped(*w, segs) &&
            shm_->has_room_now(peer, sizeof h, operand_len + a.length)) {
            drop_segments(*w, segs, &export_id);
            rndv = false;
        }
        // The target reads a rendezvous' data later, when the caller of a volatile put may have
        // changed it (the spec lets it up to max_volatile_size): the data it reads is a copy.
        if (rndv && (put_md->desc.options & PTL_MD_VOLATILE) && a.length <= n->limits.max_volatile_size) {
            drop_segments(*w, segs, &export_id);
            bounce = new (std::nothrow) char[a.length ? a.length : 1];
            rndv = bounce && put_md->region.read(put_off, bounce, a.length, false) &&
                   add_segments(*w, peer, Region::contiguous(bounce, a.length), 0, a.length, false, segs,
                                &export_id);
            if (!rndv) {
                delete[] std::exchange(bounce, nullptr);
                drop_segments(*w, segs, &export_id);
            }
        }
        if (rndv) {
            h.flags |= proto::kRendezvous;
        } else {
            put_md->region.pieces(put_off, a.length, iov);
        }
    }
    if (!segs.empty()) iov.push_back({segs.data(), segs.size() * sizeof(proto::Segment)});

    const bool reply_due = get_md != nullptr;
    const bool response_due = reply_due || rndv || ack_req != PTL_NO_ACK_REQ;
    size_t bytes = 0;
    for (auto &v : iov) bytes += v.iov_len;
    // Registered before the send: its id travels in the header.
    if (response_due) {
        PendingOp p{};
        p.op = op;
        p.put_md = put_md ? put_md->handle : PTL_INVALID_HANDLE;
        p.get_md = get_md ? get_md->handle : PTL_INVALID_HANDLE;
        p.local_get_offset = get_off;
        p.length = a.length;
        p.user_ptr = a.user_ptr;
        p.peer = peer;
        p.ack_req = ack_req;
        p.send_due = rndv;
        p.reply_due = reply_due;
        p.export_id = export_id;
        p.bounce = bounce;
        h.op_id = n->pending.add(p);
    }
    const bool sent = w && bytes <= payload_room && w->send(peer, &h, sizeof h, iov.data(), int(iov.size()));
    if (trace_) [[unlikely]]
        trace_send(n, op, peer, a, ack_req, h.op_id, rndv, sent);
    if (!sent) {
        PendingOp unused;
        if (response_due) n->pending.take(h.op_id, &unused);
        if (export_id) w->release_export(export_id);
        delete[] bounce;
        // Undeliverable right away: complete locally with the failure (F1).
        if (put_md) initiator_event(put_md, PTL_EVENT_SEND, PTL_NI_UNDELIVERABLE, 0, 0, 0, a.user_ptr, true);
        if (get_md)
            initiator_event(get_md, PTL_EVENT_REPLY, PTL_NI_UNDELIVERABLE, 0, 0, 0, a.user_ptr, true);
        else if (ack_req != PTL_NO_ACK_REQ)
            initiator_event(put_md, PTL_EVENT_ACK, PTL_NI_UNDELIVERABLE, 0, 0, 0, a.user_ptr,
                            ack_req == PTL_ACK_REQ);
        return PTL_OK;
    }
    if (rndv) ++put_md->pending;
    if (reply_due) ++get_md->pending;
    // The data was copied into the wire, so the buffer may be reused: SEND now.
    if (!rndv) initiator_event(put_md, PTL_EVENT_SEND, PTL_NI_OK, a.length, 0, 0, a.user_ptr, true);
    return PTL_OK;
}

void Engine::trace_send(const Ni *n, uint8_t op, PeerId peer, const DataOpArgs &a, ptl_ack_req_t ack_req,
                        uint64_t op_id, bool rndv, bool sent) {
    trace_->line_or_notable(
        !sent, "ni%u %s -> 0x%x:%u%s pt %u bits 0x%llx len %llu ack %d op %llu%s%s", n->index,
        proto::op_name(op), peer.nid, peer.pid, RankNote(n->logical(), a.target.rank).text, a.pt_index,
        (unsigned long long)a.match_bits, (unsigned long long)a.length, int(ack_req),
        (unsigned long long)op_id, rndv ? " rendezvous" : "", sent ? "" : ": undeliverable");
}

// The operation an ACK or REPLY answers; false (counted as a drop) if none of ours does.
bool Engine::take_response(Ni *n, PeerId from, const proto::Header &h, PendingOp *p) {
    const bool known = n->pending.take_response(h.op_id, from, p);
    if (trace_) [[unlikely]]
        trace_->line_or_notable(
            !known || h.ni_fail != PTL_NI_OK, "ni%u %s <- 0x%x:%u op %llu fail %d mlength %llu%s", n->index,
            proto::op_name(h.op), from.nid, from.pid, (unsigned long long)h.op_id, int(h.ni_fail),
            (unsigned long long)h.mlength, known ? "" : ": no such operation, dropped");
    if (!known) n->count(PTL_SR_DROP_COUNT);
    return known;
}

void Engine::on_ack(Ni *n, PeerId from, const proto::Header &h) {
    PendingOp p;
    if (!take_response(n, from, h, &p)) return;
    release_export(p);
    Md *md = n->md(p.put_md);
    const ptl_ni_fail_t fail = h.ni_fail;
    if (p.send_due) {
        if (md) {
            --md->pending;
            // The data left our buffer (or never will): local completion.
            const bool delivered = !(h.flags & proto::kSendOnly) || fail == PTL_NI_OK;
            initiator_event(md, PTL_EVENT_SEND, delivered ? PTL_NI_OK : fail, p.length, 0, 0, p.user_ptr,
                            true);
        }
    }
    if (h.flags & proto::kSendOnly || p.ack_req == PTL_NO_ACK_REQ) return;
    if (!md) {  // released before the ack arrived: discarded (§3.10.4)
        n->count(PTL_SR_DROP_COUNT);
        return;
    }
    if (p.ack_req == PTL_OC_ACK_REQ) {
        // Counts operation completion: drops and permission failures are not failures (C6).
        const bool failed = fail == PTL_NI_PT_DISABLED || fail == PTL_NI_UNDELIVERABLE || fail == PTL_NI_SEGV;
        if (md->ct && (md->desc.options & PTL_MD_EVENT_CT_ACK)) ct_add(md->ct, !failed, 1);
        return;
    }
    initiator_event(md, PTL_EVENT_ACK, fail, h.mlength, h.remote_offset, h.ptl_list, p.user_ptr,
                    p.ack_req == PTL_ACK_REQ);
}

void Engine::on_reply(Ni *n, PeerId from, const proto::Header &h, const void *payload, size_t len) {
    PendingOp p;
    if (!take_response(n, from, h, &p)) return;
    release_export(p);
    Md *md = n->md(p.get_md);
    if (!md) {
        n->count(PTL_SR_DROP_COUNT);
        return;
    }
    --md->pending;
    ptl_ni_fail_t fail = h.ni_fail;
    const ptl_size_t mlength = std::min<ptl_size_t>(h.mlength, p.length);
    if (fail == PTL_NI_OK && !(h.flags & proto::kDataWritten)) {
        if (len < mlength || !md->region.write(p.local_get_offset, payload, mlength, false))
            fail = PTL_NI_SEGV;
    }
    initiator_event(md, PTL_EVENT_REPLY, fail, mlength, h.remote_offset, h.ptl_list, p.user_ptr, true);
}

// The target is done with our memory: its bulk transfer finished before its response left,
// or it is gone.
void Engine::release_export(const PendingOp &p) {
    delete[] p.bounce;
    if (!p.export_id) return;
    if (Wire *w = wire_for(p.peer)) w->release_export(p.export_id);
}

void Engine::fail_op(Ni *n, uint64_t id, ptl_ni_fail_t fail) {
    PendingOp p;
    if (!n->pending.take(id, &p)) return;
    PTL_TRACE_NOTABLE(trace_.get(), "ni%u op %llu to 0x%x:%u failed locally: fail %d", n->index,
                      (unsigned long long)id, p.peer.nid, p.peer.pid, int(fail));
    release_export(p);
    if (Md *md = n->md(p.put_md)) {
        if (p.send_due) {
            --md->pending;
            initiator_event(md, PTL_EVENT_SEND, fail, 0, 0, 0, p.user_ptr, true);
        }
        if (p.ack_req == PTL_ACK_REQ || p.ack_req == PTL_CT_ACK_REQ)
            initiator_event(md, PTL_EVENT_ACK, fail, 0, 0, 0, p.user_ptr, p.ack_req == PTL_ACK_REQ);
        else if (p.ack_req == PTL_OC_ACK_REQ && md->ct && (md->desc.options & PTL_MD_EVENT_CT_ACK))
            ct_add(md->ct, false, 1);
    }
    if (Md *md = n->md(p.get_md); md && p.reply_due) {
        --md->pending;
        initiator_event(md, PTL_EVENT_REPLY, fail, 0, 0, 0, p.user_ptr, true);
    }
}

void Engine::check_dead_peers() {
    for (Ni *n : nis_) {
        if (!n || n->pending.empty()) continue;
        for (uint64_t id : n->pending.select([&](const PendingOp &p) { return peer_gone(p.peer); }))
            fail_op(n, id, PTL_NI_UNDELIVERABLE);  // in issue order
    }
}

}  // namespace ptl
