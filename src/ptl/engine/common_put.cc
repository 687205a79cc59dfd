// The initiator's common case, top to bottom: a PtlPut with no acknowledgement of a few
// bytes from a contiguous MD to a process whose entry is not exported for the direct path, on
// this host (through its ring) or another (a message on the verbs or tcp wire). Everything
// here is what send_op and the checks before it do for such a put, without their generality
// (no iovec lists, no pending-operation record, no rendezvous choice, on this host the header
// written once, in the ring): what the checks find about the MD and the target is kept per MD
// (PutRoute) and per target (PutTarget) and reused while puts go from the same MD to targets
// it has seen.
// Anything else (an argument error included, to report it the usual way) is not common and
// takes the general path.
#include <cstring>

#include "../wire/shm/shm_wire.h"
#include "engine.h"

namespace ptl {

int Engine::put(const DataOpArgs &a) {
    Lock lk(mu_);
    int rc = common_put(a);
    if (rc == kNotCommon) [[unlikely]]
        rc = data_op_locked<TrigKind::Put>(a);
    finish_call();
    return rc;
}

int Engine::put_and_copy(const DataOpArgs &a, void *copy_to) {
    Lock lk(mu_);
    int rc = common_put(a);
    if (rc == kNotCommon) [[unlikely]] {
        rc = put_from_copy(a, copy_to);
    } else if (rc == PTL_OK) {
        // Under the lock that message handling takes: no request that came after the put (a
        // target's fetch of what it truncated) is served before the copy is there.
        const Md *md = md_of(a.md);
        if (!md || !md->region.read(a.local_offset, copy_to, a.length, false)) rc = PTL_ARG_INVALID;
    }
    finish_call();
    return rc;
}

// PtlXPutAndCopy's put that does not travel inline at once: it may go by rendezvous, the
// target reading our memory later, when the caller's (a volatile MD's, a short send's) may
// have changed. So the copy is made first, and sent from where the MD covers it (the UCT
// face's MDs cover all memory).
int Engine::put_from_copy(const DataOpArgs &a, void *copy_to) {
    const Md *md = md_of(a.md);
    if (!md || a.local_offset > md->region.length || a.length > md->region.length - a.local_offset)
        return data_op_locked<TrigKind::Put>(a);  // reports the error
    if (!md->region.read(a.local_offset, copy_to, a.length, false)) return PTL_ARG_INVALID;
    const uintptr_t base = reinterpret_cast<uintptr_t>(md->region.start);
    const uintptr_t to = reinterpret_cast<uintptr_t>(copy_to);
    if (md->region.iov || to < base || to - base > md->region.length - a.length)
        return data_op_locked<TrigKind::Put>(a);
    DataOpArgs from_copy = a;
    from_copy.local_offset = to - base;
    return data_op_locked<TrigKind::Put>(from_copy);
}

static_assert(sizeof(ptl_process_t) == sizeof(uint64_t));

int Engine::common_put(const DataOpArgs &a) {
    if (a.ack_req != PTL_NO_ACK_REQ || trace_) return kNotCommon;
    if ((!route_.md || a.md != route_.md_handle) && !set_put_route(a)) return kNotCommon;
    const PutRoute &r = route_;
    PutTarget *t = r.to;  // of the route's NI: a new MD's route starts without one
    if (const uint64_t key = put_target_key(r.logical, a.target); !t || t->key != key) [[unlikely]] {
        t = set_put_target(*r.md->ni, a.target, key);
        if (!t) return kNotCommon;
    }
    // B9: inside the MD; small enough to travel inline.
    if (a.pt_index >= r.pt_count || a.local_offset > r.md_length || a.length > r.md_length - a.local_offset ||
        a.length > r.max_length)
        return kNotCommon;
    if (t->wire) return common_put_by_wire(a, *t);
    // The direct path's turn when the peer exports the entry this put would reach.
    direct::PeerTable *table = t->table;
    if (!table && t->table_may_appear) [[unlikely]]
        table = t->table = peer_table(t->peer->id);
    if (const uint64_t version = table ? table->version() : 0;
        table && !(version == t->unexported_version && a.pt_index == t->unexported_pt &&
                   a.match_bits == t->unexported_bits)) {
        // An entry peers reach by cross-memory attach takes none of these small puts directly.
        const direct::Target &found =
            table->find(r.header.ni_index, uint16_t(a.pt_index), a.match_bits, r.matching);
        if (found.slot >= 0 && !found.by_cma) return kNotCommon;
        t->unexported_version = version;  // read first: a later change is seen next time
        t->unexported_pt = a.pt_index;
        t->unexported_bits = a.match_bits;
    }

    const bool sent =
        shm_->send_now(t->peer, sizeof(proto::Header),
                       reinterpret_cast<const char *>(r.base + a.local_offset), a.length, [&](void *at) {
                           auto *h = static_cast<proto::Header *>(at);
                           *h = r.header;
                           h->pt_index = a.pt_index;
                           h->match_bits = a.match_bits;
                           h->hdr_data = a.hdr_data;
                           h->remote_offset = a.remote_offset;
                           h->length = a.length;
                       });
    if (!sent) return kNotCommon;
    // No note_send_left_work: a message in the ring is what a quiet progress looks for.
    count_common_send(a);
    return PTL_OK;
}

// The data was copied into the ring or the wire: SEND now; counted inline (the usual sender's
// event).
void Engine::count_common_send(const DataOpArgs &a) {
    const PutRoute &r = route_;
    Md *md = r.md;
    if (md->eq && r.send_event)
        post_initiator_event(md, PTL_EVENT_SEND, PTL_NI_OK, a.length, 0, 0, a.user_ptr,
                             true);  // and its count
    else if (md->ct && r.count_send)
        ct_add(md->ct, true, r.count_bytes ? a.length : 1);
}

int Engine::common_put_by_wire(const DataOpArgs &a, const PutTarget &t) {
    const PutRoute &r = route_;
    // The direct path's turn (an RDMA write) when the peer exported the entry.
    if (rdma_ &&
        remote_target(t.id, direct::entry_key(r.header.ni_index, a.pt_index, a.match_bits, r.matching)))
        return kNotCommon;
    proto::Header h = r.header;
    h.pt_index = a.pt_index;
    h.match_bits = a.match_bits;
    h.hdr_data = a.hdr_data;
    h.remote_offset = a.remote_offset;
    h.length = a.length;
    iovec data{reinterpret_cast<void *>(r.base + a.local_offset), size_t(a.length)};
    // Refused (a peer gone, a message the wire cannot take): the general path says so.
    if (!t.wire->send(t.id, &h, sizeof h, &data, 1)) return kNotCommon;
    if (quiet_.load(std::memory_order_relaxed)) note_send_left_work();
    count_common_send(a);
    return PTL_OK;
}

// The checks of a put that depend only on its MD, and the header all such puts share. Out of
// line: once per change of MD.
bool Engine::set_put_route(const DataOpArgs &a) {
    route_.md = nullptr;
    Md *md = md_of(a.md);
    if (!md) return false;
    Ni *n = md->ni;
    // Contiguous: its start may be 0 (an MD over all memory, whose offsets are addresses).
    if (md->region.iov || (n->logical() && !n->map_set)) return false;

    PutRoute &r = route_;
    r.md_handle = a.md;
    r.logical = n->logical();
    r.matching = n->matching();
    const unsigned o = md->desc.options;
    r.send_event = !(o & (PTL_MD_EVENT_SEND_DISABLE | PTL_MD_EVENT_SUCCESS_DISABLE));
    r.count_send = o & PTL_MD_EVENT_CT_SEND;
    r.count_bytes = o & PTL_MD_EVENT_CT_BYTES;
    r.base = reinterpret_cast<uintptr_t>(md->region.start);
    r.md_length = md->region.length;
    r.md_max_length = std::min<uint64_t>(cfg_.rndv_threshold, n->limits.max_msg_size);
    r.max_length = 0;
    r.pt_count = uint32_t(n->pts.size());
    r.to = nullptr;  // found again: its NI may differ

    proto::Header &h = r.header;
    h.op = proto::kPut;
    h.ni_index = uint8_t(n->index);
    h.ack_req = PTL_NO_ACK_REQ;
    h.flags = (o & PTL_MD_UNORDERED) ? proto::kUnordered : 0;
    h.uid = uid_;
    h.src_rank = n->logical() ? n->self_rank : PTL_RANK_ANY;
    r.md = md;
    return true;
}

// The checks of a put that depend only on its target. Out of line: once per target, and
// again when another target took its slot.
Engine::PutTarget *Engine::set_put_target(const Ni &n, const ptl_process_t &target, uint64_t key) {
    route_.to = nullptr;
    const uint64_t mixed = (key ^ (key >> 32)) * 0x9e3779b97f4a7c15ull;
    PutTarget &t = put_targets_[(mixed >> 32) % kPutTargets];
    if (t.key != key || t.ni_index != int(n.index)) {
        PeerId peer;
        if (!n.resolve(target, &peer)) return nullptr;
        t = PutTarget();
        t.key = key;
        t.ni_index = int(n.index);
        // Ourselves (the loopback wire): kept, so our puts take the general path at once.
        Wire *w = wire_for(peer);
        if (w == shm_.get()) {
            shm::Peer *p = shm_->peer(peer);
            const size_t ring_room = shm_->max_inline(peer);
            if (!p || ring_room <= sizeof(proto::Header)) {  // looked at again: it may not be up yet
                t.ni_index = -1;
                return nullptr;
            }
            t.peer = p;
            t.ring_room = ring_room - sizeof(proto::Header);
            t.table = last_table_ && last_table_peer_ == peer ? last_table_ : peer_table(peer);
            t.table_may_appear = !t.table && exports_;
        } else if (const size_t room = w && w != loop_.get() ? w->max_inline(peer) : 0;
                   room > sizeof(proto::Header)) {
            t.wire = w;
            t.id = peer;
            t.ring_room = room - sizeof(proto::Header);
        }
    }
    if (!t.peer && !t.wire) return nullptr;
    route_.to = &t;
    route_.max_length = std::min(route_.md_max_length, t.ring_room);
    return &t;
}

}  // namespace ptl
