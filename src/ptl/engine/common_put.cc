// The initiator's common case, top to bottom: a PtlPut with no acknowledgement of a few
// bytes from a contiguous MD to a process on this host, whose entry is not exported for the
// direct path. Everything here is what send_op and the checks before it do for such a put,
// without their generality (no iovec lists, no pending-operation record, no rendezvous choice,
// the header written once, in the ring): what the checks find about the MD and the target is
// kept (PutRoute) and reused while the next put goes from the same MD to the same target.
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

static_assert(sizeof(ptl_process_t) == sizeof(uint64_t));

int Engine::common_put(const DataOpArgs &a) {
    if (a.ack_req != PTL_NO_ACK_REQ || trace_) return kNotCommon;
    const PutRoute &r = route_;
    uint64_t target, route_target;
    std::memcpy(&target, &a.target, sizeof target);
    std::memcpy(&route_target, &r.target, sizeof route_target);
    const bool same_target = r.logical ? a.target.rank == r.target.rank : target == route_target;
    if ((!r.md || a.md != r.md_handle || !same_target) && !set_put_route(a)) return kNotCommon;
    // B9: inside the MD; small enough to travel inline.
    if (a.pt_index >= r.pt_count || a.local_offset > r.md_length || a.length > r.md_length - a.local_offset ||
        a.length > r.max_length)
        return kNotCommon;
    // The direct path's turn when the peer exports the entry this put would reach.
    direct::PeerTable *table = r.table;
    if (!table && r.table_may_appear) [[unlikely]]
        table = route_.table = peer_table(r.peer->id);
    if (const uint64_t version = table ? table->version() : 0;
        table && !(version == r.unexported_version && a.pt_index == r.unexported_pt &&
                   a.match_bits == r.unexported_bits)) {
        if (table->find(r.header.ni_index, uint16_t(a.pt_index), a.match_bits, r.matching).slot >= 0)
            return kNotCommon;
        route_.unexported_version = version;  // read first: a later change is seen next time
        route_.unexported_pt = a.pt_index;
        route_.unexported_bits = a.match_bits;
    }

    const bool sent =
        shm_->send_now(r.peer, sizeof(proto::Header), reinterpret_cast<const char *>(r.base + a.local_offset),
                       a.length, [&](void *at) {
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
    // The data was copied into the ring: SEND now; counted inline (the usual sender's event).
    Md *md = r.md;
    if (md->eq && r.send_event)
        post_initiator_event(md, PTL_EVENT_SEND, PTL_NI_OK, a.length, 0, 0, a.user_ptr,
                             true);  // and its count
    else if (md->ct && r.count_send)
        ct_add(md->ct, true, r.count_bytes ? a.length : 1);
    return PTL_OK;
}

// The checks of a put that depend only on its MD and target, and the header all such puts
// share. Out of line: once per change of MD or target.
bool Engine::set_put_route(const DataOpArgs &a) {
    route_.md = nullptr;
    Md *md = md_of(a.md);
    if (!md) return false;
    Ni *n = md->ni;
    // Contiguous: its start may be 0 (an MD over all memory, whose offsets are addresses).
    const uintptr_t base = reinterpret_cast<uintptr_t>(md->region.start);
    PeerId peer;
    if (md->region.iov || (n->logical() && !n->map_set) || !n->resolve(a.target, &peer) ||
        peer.nid != self_.nid || wire_for(peer) != shm_.get())
        return false;
    shm::Peer *p = shm_->peer(peer);
    const size_t ring_room = shm_->max_inline(peer);
    if (!p || ring_room <= sizeof(proto::Header)) return false;

    PutRoute &r = route_;
    r.md_handle = a.md;
    r.logical = n->logical();
    r.matching = n->matching();
    const unsigned o = md->desc.options;
    r.send_event = !(o & (PTL_MD_EVENT_SEND_DISABLE | PTL_MD_EVENT_SUCCESS_DISABLE));
    r.count_send = o & PTL_MD_EVENT_CT_SEND;
    r.count_bytes = o & PTL_MD_EVENT_CT_BYTES;
    r.target = a.target;
    r.base = base;
    r.md_length = md->region.length;
    r.max_length =
        std::min<uint64_t>({cfg_.rndv_threshold, n->limits.max_msg_size, ring_room - sizeof(proto::Header)});
    r.pt_count = uint32_t(n->pts.size());
    r.peer = p;
    r.table = last_table_ && last_table_peer_ == peer ? last_table_ : peer_table(peer);
    r.unexported_version = ~0ull;
    r.table_may_appear = !r.table && exports_;

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

}  // namespace ptl
