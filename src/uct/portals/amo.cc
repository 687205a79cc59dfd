// Atomics 32/64: PtlAtomic (post), PtlFetchAtomic (fetch) and PtlSwap (swap, cswap) against
// the ME the rkey names. Operands live in the operation, which the engine reads at the call.
#include "iface_impl.h"

#include <cstring>

using namespace uct_portals;

namespace {

bool portals_op(unsigned uct_op, ptl_op_t *out) {
    switch (uct_op) {
        case UCT_ATOMIC_OP_ADD: *out = PTL_SUM; return true;
        case UCT_ATOMIC_OP_AND: *out = PTL_BAND; return true;
        case UCT_ATOMIC_OP_OR: *out = PTL_BOR; return true;
        case UCT_ATOMIC_OP_XOR: *out = PTL_BXOR; return true;
        case UCT_ATOMIC_OP_SWAP: *out = PTL_SWAP; return true;
        case UCT_ATOMIC_OP_CSWAP: *out = PTL_CSWAP; return true;
        default: return false;
    }
}

ucs_status_t post(uct_ep_h tl_ep, unsigned opcode, uint64_t value, unsigned size, uint64_t remote_addr,
                  uct_rkey_t rkey) {
    ptl_op_t op_kind;
    if (!portals_op(opcode, &op_kind) || op_kind == PTL_SWAP || op_kind == PTL_CSWAP)
        return UCS_ERR_UNSUPPORTED;
    const uct_portals_rkey_t *rk = rkey_of(rkey);
    if (!rk) return UCS_ERR_INVALID_PARAM;
    Ep *ep = ep_of(tl_ep);
    Iface *f = ep->iface;
    Op *op = f->next_op(ep);
    if (!op) return UCS_ERR_NO_RESOURCE;
    op->operand = value;
    const int rc = PtlAtomic(f->md_volatile, reinterpret_cast<uintptr_t>(&op->operand), size, PTL_ACK_REQ,
                             ep->peer, rk->pt, rk->key, remote_addr - rk->base, op, 0, op_kind,
                             size == 4 ? PTL_UINT32_T : PTL_UINT64_T);
    if (rc != PTL_OK) return rc == PTLX_DONE ? UCS_OK : status_of(rc);  // done by the engine in the call
    f->take_op(op, ep, OpType::AtomicPost, nullptr);
    return UCS_OK;
}

ucs_status_t fetch(uct_ep_h tl_ep, unsigned opcode, uint64_t value, uint64_t compare, void *result,
                   unsigned size, uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp) {
    ptl_op_t op_kind;
    if (!portals_op(opcode, &op_kind)) return UCS_ERR_UNSUPPORTED;
    const uct_portals_rkey_t *rk = rkey_of(rkey);
    if (!rk) return UCS_ERR_INVALID_PARAM;
    Ep *ep = ep_of(tl_ep);
    Iface *f = ep->iface;
    Op *op = f->next_op(ep);
    if (!op) return UCS_ERR_NO_RESOURCE;
    op->operand = value;
    op->compare = compare;
    const ptl_datatype_t type = size == 4 ? PTL_UINT32_T : PTL_UINT64_T;
    const uintptr_t get_off = reinterpret_cast<uintptr_t>(&op->fetched);
    const uintptr_t put_off = reinterpret_cast<uintptr_t>(&op->operand);
    int rc;
    if (op_kind == PTL_SWAP || op_kind == PTL_CSWAP) {
        rc = PtlSwap(f->md, get_off, f->md_volatile, put_off, size, ep->peer, rk->pt, rk->key,
                     remote_addr - rk->base, op, 0, &op->compare, op_kind, type);
    } else {
        rc = PtlFetchAtomic(f->md, get_off, f->md_volatile, put_off, size, ep->peer, rk->pt, rk->key,
                            remote_addr - rk->base, op, 0, op_kind, type);
    }
    if (rc == PTLX_DONE) std::memcpy(result, &op->fetched, size);  // done in the call: as the REPLY would
    if (rc != PTL_OK) return rc == PTLX_DONE ? UCS_OK : status_of(rc);
    f->take_op(op, ep, OpType::AtomicFetch, comp);
    op->result = result;
    op->result_size = size;
    return UCS_INPROGRESS;
}

}  // namespace

extern "C" ucs_status_t uct_portals_ep_atomic32_post(uct_ep_h ep, unsigned opcode, uint32_t value,
                                                     uint64_t remote_addr, uct_rkey_t rkey) {
    return post(ep, opcode, value, 4, remote_addr, rkey);
}

extern "C" ucs_status_t uct_portals_ep_atomic64_post(uct_ep_h ep, unsigned opcode, uint64_t value,
                                                     uint64_t remote_addr, uct_rkey_t rkey) {
    return post(ep, opcode, value, 8, remote_addr, rkey);
}

extern "C" ucs_status_t uct_portals_ep_atomic32_fetch(uct_ep_h ep, uct_atomic_op_t opcode, uint32_t value,
                                                      uint32_t *result, uint64_t remote_addr, uct_rkey_t rkey,
                                                      uct_completion_t *comp) {
    return fetch(ep, opcode, value, 0, result, 4, remote_addr, rkey, comp);
}

extern "C" ucs_status_t uct_portals_ep_atomic64_fetch(uct_ep_h ep, uct_atomic_op_t opcode, uint64_t value,
                                                      uint64_t *result, uint64_t remote_addr, uct_rkey_t rkey,
                                                      uct_completion_t *comp) {
    return fetch(ep, opcode, value, 0, result, 8, remote_addr, rkey, comp);
}

extern "C" ucs_status_t uct_portals_ep_atomic_cswap32(uct_ep_h ep, uint32_t compare, uint32_t swap,
                                                      uint64_t remote_addr, uct_rkey_t rkey, uint32_t *result,
                                                      uct_completion_t *comp) {
    return fetch(ep, UCT_ATOMIC_OP_CSWAP, swap, compare, result, 4, remote_addr, rkey, comp);
}

extern "C" ucs_status_t uct_portals_ep_atomic_cswap64(uct_ep_h ep, uint64_t compare, uint64_t swap,
                                                      uint64_t remote_addr, uct_rkey_t rkey, uint64_t *result,
                                                      uct_completion_t *comp) {
    return fetch(ep, UCT_ATOMIC_OP_CSWAP, swap, compare, result, 8, remote_addr, rkey, comp);
}
