// §3.15 data movement and §3.16 triggered operations.
#include <cstring>

#include "../engine/atomic_ops.h"
#include "api_guard.h"

using ptl::DataOpArgs;
using ptl::engine;
using ptl::TrigKind;
using ptl::TrigOp;

namespace {

DataOpArgs put_args(ptl_handle_md_t md, ptl_size_t off, ptl_size_t len, ptl_ack_req_t ack,
                    ptl_process_t target, ptl_pt_index_t pt, ptl_match_bits_t bits,
                    ptl_size_t roff, void *user_ptr, ptl_hdr_data_t hdr) {
    DataOpArgs a;
    a.md = md;
    a.local_offset = off;
    a.length = len;
    a.ack_req = ack;
    a.target = target;
    a.pt_index = pt;
    a.match_bits = bits;
    a.remote_offset = roff;
    a.user_ptr = user_ptr;
    a.hdr_data = hdr;
    return a;
}

DataOpArgs fetch_args(ptl_handle_md_t get_md, ptl_size_t get_off, ptl_handle_md_t put_md,
                      ptl_size_t put_off, ptl_size_t len, ptl_process_t target, ptl_pt_index_t pt,
                      ptl_match_bits_t bits, ptl_size_t roff, void *user_ptr, ptl_hdr_data_t hdr,
                      ptl_op_t op, ptl_datatype_t dt) {
    DataOpArgs a = put_args(put_md, put_off, len, PTL_NO_ACK_REQ, target, pt, bits, roff, user_ptr, hdr);
    a.get_md = get_md;
    a.local_get_offset = get_off;
    a.op = op;
    a.datatype = dt;
    return a;
}

// The operand is one element, copied now: it is an argument, not buffer state (TR3).
bool set_operand(DataOpArgs &a, const void *operand) {
    if (a.op == PTL_SWAP) return true;
    const size_t n = ptl::atomics::datatype_size(a.datatype);
    if (!operand || n == 0 || n > sizeof a.operand) return false;
    std::memcpy(a.operand, operand, n);
    return true;
}

int trigger(TrigKind kind, const DataOpArgs &a, ptl_handle_ct_t ct, ptl_size_t threshold) {
    TrigOp op{};
    op.kind = kind;
    op.args = a;
    return engine().triggered(op, ct, threshold);
}

}  // namespace

PTL_API int PtlPut(ptl_handle_md_t md, ptl_size_t off, ptl_size_t len, ptl_ack_req_t ack,
                   ptl_process_t target, ptl_pt_index_t pt, ptl_match_bits_t bits,
                   ptl_size_t roff, void *user_ptr, ptl_hdr_data_t hdr) {
    REQUIRE_INIT();
    return engine().put(put_args(md, off, len, ack, target, pt, bits, roff, user_ptr, hdr));
}

PTL_API int PtlXPutAndCopy(ptl_handle_md_t md, ptl_size_t off, ptl_size_t len, ptl_ack_req_t ack,
                           ptl_process_t target, ptl_pt_index_t pt, ptl_match_bits_t bits,
                           ptl_size_t roff, void *user_ptr, ptl_hdr_data_t hdr, void *copy_to) {
    REQUIRE_INIT();
    if (!copy_to) return len ? PTL_ARG_INVALID : PtlPut(md, off, len, ack, target, pt, bits, roff, user_ptr, hdr);
    return engine().put_and_copy(put_args(md, off, len, ack, target, pt, bits, roff, user_ptr, hdr), copy_to);
}

PTL_API int PtlGet(ptl_handle_md_t md, ptl_size_t off, ptl_size_t len, ptl_process_t target,
                   ptl_pt_index_t pt, ptl_match_bits_t bits, ptl_size_t roff, void *user_ptr) {
    REQUIRE_INIT();
    return engine().data_op(TrigKind::Get, put_args(md, off, len, PTL_NO_ACK_REQ, target, pt, bits, roff, user_ptr, 0));
}

PTL_API int PtlAtomic(ptl_handle_md_t md, ptl_size_t off, ptl_size_t len, ptl_ack_req_t ack,
                      ptl_process_t target, ptl_pt_index_t pt, ptl_match_bits_t bits,
                      ptl_size_t roff, void *user_ptr, ptl_hdr_data_t hdr, ptl_op_t op,
                      ptl_datatype_t dt) {
    REQUIRE_INIT();
    DataOpArgs a = put_args(md, off, len, ack, target, pt, bits, roff, user_ptr, hdr);
    a.op = op;
    a.datatype = dt;
    return engine().data_op(TrigKind::Atomic, a);
}

PTL_API int PtlFetchAtomic(ptl_handle_md_t get_md, ptl_size_t get_off, ptl_handle_md_t put_md,
                           ptl_size_t put_off, ptl_size_t len, ptl_process_t target,
                           ptl_pt_index_t pt, ptl_match_bits_t bits, ptl_size_t roff,
                           void *user_ptr, ptl_hdr_data_t hdr, ptl_op_t op, ptl_datatype_t dt) {
    REQUIRE_INIT();
    return engine().data_op(TrigKind::FetchAtomic, fetch_args(get_md, get_off, put_md, put_off, len, target,
                                                              pt, bits, roff, user_ptr, hdr, op, dt));
}

PTL_API int PtlSwap(ptl_handle_md_t get_md, ptl_size_t get_off, ptl_handle_md_t put_md,
                    ptl_size_t put_off, ptl_size_t len, ptl_process_t target, ptl_pt_index_t pt,
                    ptl_match_bits_t bits, ptl_size_t roff, void *user_ptr, ptl_hdr_data_t hdr,
                    const void *operand, ptl_op_t op, ptl_datatype_t dt) {
    REQUIRE_INIT();
    DataOpArgs a = fetch_args(get_md, get_off, put_md, put_off, len, target, pt, bits, roff, user_ptr, hdr, op, dt);
    if (!set_operand(a, operand)) return PTL_ARG_INVALID;
    return engine().data_op(TrigKind::Swap, a);
}

PTL_API int PtlAtomicSync(void) {
    REQUIRE_INIT();
    return engine().atomic_sync();
}

PTL_API int PtlTriggeredPut(ptl_handle_md_t md, ptl_size_t off, ptl_size_t len, ptl_ack_req_t ack,
                            ptl_process_t target, ptl_pt_index_t pt, ptl_match_bits_t bits,
                            ptl_size_t roff, void *user_ptr, ptl_hdr_data_t hdr,
                            ptl_handle_ct_t ct, ptl_size_t threshold) {
    REQUIRE_INIT();
    return trigger(TrigKind::Put, put_args(md, off, len, ack, target, pt, bits, roff, user_ptr, hdr), ct, threshold);
}

PTL_API int PtlTriggeredGet(ptl_handle_md_t md, ptl_size_t off, ptl_size_t len, ptl_process_t target,
                            ptl_pt_index_t pt, ptl_match_bits_t bits, ptl_size_t roff,
                            void *user_ptr, ptl_handle_ct_t ct, ptl_size_t threshold) {
    REQUIRE_INIT();
    return trigger(TrigKind::Get, put_args(md, off, len, PTL_NO_ACK_REQ, target, pt, bits, roff, user_ptr, 0), ct,
                   threshold);
}

PTL_API int PtlTriggeredAtomic(ptl_handle_md_t md, ptl_size_t off, ptl_size_t len, ptl_ack_req_t ack,
                               ptl_process_t target, ptl_pt_index_t pt, ptl_match_bits_t bits,
                               ptl_size_t roff, void *user_ptr, ptl_hdr_data_t hdr, ptl_op_t op,
                               ptl_datatype_t dt, ptl_handle_ct_t ct, ptl_size_t threshold) {
    REQUIRE_INIT();
    DataOpArgs a = put_args(md, off, len, ack, target, pt, bits, roff, user_ptr, hdr);
    a.op = op;
    a.datatype = dt;
    return trigger(TrigKind::Atomic, a, ct, threshold);
}

PTL_API int PtlTriggeredFetchAtomic(ptl_handle_md_t get_md, ptl_size_t get_off, ptl_handle_md_t put_md,
                                    ptl_size_t put_off, ptl_size_t len, ptl_process_t target,
                                    ptl_pt_index_t pt, ptl_match_bits_t bits, ptl_size_t roff,
                                    void *user_ptr, ptl_hdr_data_t hdr, ptl_op_t op,
                                    ptl_datatype_t dt, ptl_handle_ct_t ct, ptl_size_t threshold) {
    REQUIRE_INIT();
    return trigger(TrigKind::FetchAtomic,
                   fetch_args(get_md, get_off, put_md, put_off, len, target, pt, bits, roff, user_ptr, hdr, op, dt),
                   ct, threshold);
}

PTL_API int PtlTriggeredSwap(ptl_handle_md_t get_md, ptl_size_t get_off, ptl_handle_md_t put_md,
                             ptl_size_t put_off, ptl_size_t len, ptl_process_t target,
                             ptl_pt_index_t pt, ptl_match_bits_t bits, ptl_size_t roff,
                             void *user_ptr, ptl_hdr_data_t hdr, const void *operand, ptl_op_t op,
                             ptl_datatype_t dt, ptl_handle_ct_t ct, ptl_size_t threshold) {
    REQUIRE_INIT();
    DataOpArgs a = fetch_args(get_md, get_off, put_md, put_off, len, target, pt, bits, roff, user_ptr, hdr, op, dt);
    if (!set_operand(a, operand)) return PTL_ARG_INVALID;
    return trigger(TrigKind::Swap, a, ct, threshold);
}

PTL_API int PtlTriggeredCTInc(ptl_handle_ct_t ct, ptl_ct_event_t inc, ptl_handle_ct_t trig,
                              ptl_size_t threshold) {
    REQUIRE_INIT();
    TrigOp op{};
    op.kind = TrigKind::CtInc;
    op.ct = ct;
    op.value = inc;
    return engine().triggered(op, trig, threshold);
}

PTL_API int PtlTriggeredCTSet(ptl_handle_ct_t ct, ptl_ct_event_t v, ptl_handle_ct_t trig,
                              ptl_size_t threshold) {
    REQUIRE_INIT();
    TrigOp op{};
    op.kind = TrigKind::CtSet;
    op.ct = ct;
    op.value = v;
    return engine().triggered(op, trig, threshold);
}
