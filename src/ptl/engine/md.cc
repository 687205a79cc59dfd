// Memory descriptors (§3.10).
#include "engine.h"

namespace ptl {

int Engine::md_bind(ptl_handle_ni_t h, const ptl_md_t *d, ptl_handle_md_t *out) {
    Lock lk(mu_);
    Ni *n = ni_of(h);
    if (!n || !d || !out) return PTL_ARG_INVALID;
    constexpr unsigned known = PTL_IOVEC | PTL_MD_EVENT_CT_SEND | PTL_MD_EVENT_CT_REPLY |
                               PTL_MD_EVENT_CT_ACK | PTL_MD_UNORDERED | PTL_MD_EVENT_SUCCESS_DISABLE |
                               PTL_MD_VOLATILE | PTL_MD_EVENT_SEND_DISABLE | PTL_MD_UNRELIABLE |
                               PTL_MD_EVENT_CT_BYTES | PTLX_MD_COMPLETE_IN_CALL;
    if (d->options & ~known) return PTL_ARG_INVALID;
    auto md = std::make_unique<Md>();
    md->ni = n;
    md->desc = *d;
    if (d->eq_handle != PTL_EQ_NONE && !(md->eq = n->eq(d->eq_handle))) return PTL_ARG_INVALID;
    if (d->ct_handle != PTL_CT_NONE && !(md->ct = n->ct(d->ct_handle))) return PTL_ARG_INVALID;
    if (d->options & PTL_IOVEC) {
        if (!d->start && d->length) return PTL_ARG_INVALID;
        if (d->length > uint64_t(n->limits.max_iovecs)) return PTL_ARG_INVALID;
        md->region = Region::iovec(static_cast<const ptl_iovec_t *>(d->start), d->length);
    } else {
        md->region = Region::contiguous(d->start, d->length);
    }
    const uint32_t slot = n->mds.insert(std::move(md));
    if (slot == UINT32_MAX) return PTL_NO_SPACE;
    Md *m = n->mds.get(slot, n->mds.gen(slot));
    m->handle = make_handle(ObjType::Md, n->index, slot, n->mds.gen(slot));
    *out = m->handle;
    return PTL_OK;
}

int Engine::md_release(ptl_handle_md_t h) {
    Lock lk(mu_);
    Md *m = md_of(h);
    if (!m) return PTL_ARG_INVALID;
    if (m->pending && rdma_) rdma_->reap_remote();  // one-sided operations complete without progress
    if (m->pending) return PTL_IN_USE;              // a SEND or REPLY is still due (I-list 19)
    m->ni->mds.remove(split_handle(h).slot);
    if (route_.md == m) forget_put_route();
    return PTL_OK;
}

}  // namespace ptl
