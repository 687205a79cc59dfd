// The initiator's common case, top to bottom: a PtlPut with no acknowledgement of a few
// bytes from a contiguous MD to a process on this host, whose entry is not exported for the
// direct path. Everything here is what send_op and the checks before it do for such a put,
// without their generality (no iovec lists, no pending-operation record, no rendezvous choice,
// the header written once): about a third of the instructions. Anything else (an argument
// error included, to report it the usual way) is not common and takes the general path.
#include "../wire/shm/shm_wire.h"
#include "engine.h"

namespace ptl {

int Engine::put(const DataOpArgs &a) {
    Lock lk(mu_);
    int rc = common_put(a);
    if (rc == kNotCommon) rc = data_op_locked<TrigKind::Put>(a);
    finish_call();
    return rc;
}

int Engine::common_put(const DataOpArgs &a) {
    Md *md = md_of(a.md);
    if (!md || a.ack_req != PTL_NO_ACK_REQ || trace_) return kNotCommon;
    Ni *n = md->ni;
    const Region &r = md->region;
    // B9: inside the MD; small enough to travel inline.
    if (a.pt_index >= n->pts.size() || a.local_offset > r.length || a.length > r.length - a.local_offset ||
        a.length > cfg_.rndv_threshold || a.length > n->limits.max_msg_size)
        return kNotCommon;
    const char *data = r.contiguous_at(a.local_offset);
    PeerId peer;
    if (!data || (n->logical() && !n->map_set) || !n->resolve(a.target, &peer) || peer.nid != self_.nid ||
        wire_for(peer) != shm_.get())
        return kNotCommon;
    // The direct path's turn when the peer exports the entry this put would reach.
    direct::PeerTable *table = last_table_ && last_table_peer_ == peer ? last_table_ : peer_table(peer);
    if (table && table->find(uint8_t(n->index), uint16_t(a.pt_index), a.match_bits, n->matching()).slot >= 0)
        return kNotCommon;

    proto::Header h;
    h.op = proto::kPut;
    h.ni_index = uint8_t(n->index);
    h.ack_req = PTL_NO_ACK_REQ;
    h.flags = (md->desc.options & PTL_MD_UNORDERED) ? proto::kUnordered : 0;
    h.atomic_op = 0;
    h.atomic_type = 0;
    h.ni_fail = 0;
    h.ptl_list = 0;
    h.pt_index = a.pt_index;
    h.uid = uid_;
    h.src_rank = n->logical() ? n->self_rank : PTL_RANK_ANY;
    h.operand_len = 0;
    h.match_bits = a.match_bits;
    h.hdr_data = a.hdr_data;
    h.remote_offset = a.remote_offset;
    h.length = a.length;
    h.mlength = 0;
    h.op_id = 0;
    if (sizeof h + a.length > shm_->max_inline(peer) || !shm_->send_now(peer, &h, sizeof h, data, a.length))
        return kNotCommon;
    // No note_send_left_work: a message in the ring is what a quiet progress looks for.
    // The data was copied into the ring: SEND now; counted inline (the usual sender's event).
    const unsigned o = md->desc.options;
    if (md->eq && !(o & (PTL_MD_EVENT_SEND_DISABLE | PTL_MD_EVENT_SUCCESS_DISABLE)))
        post_initiator_event(md, PTL_EVENT_SEND, PTL_NI_OK, a.length, 0, 0, a.user_ptr,
                             true);  // and its count
    else if (md->ct && (o & PTL_MD_EVENT_CT_SEND))
        ct_add(md->ct, true, (o & PTL_MD_EVENT_CT_BYTES) ? a.length : 1);
    return PTL_OK;
}

}  // namespace ptl
