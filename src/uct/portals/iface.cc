// The iface: Portals objects, capabilities, addresses, wake-up, flush and the operation pool.
// Progress and event delivery are in progress.cc.
#include "iface_impl.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

using namespace uct_portals;

namespace {

ptl_md_t whole_memory_md(ptl_handle_eq_t eq, unsigned options) {
    ptl_md_t md{};
    md.start = nullptr;
    md.length = PTL_SIZE_MAX;
    // RMA and atomics the engine does in the call (the direct path) complete there (UCS_OK).
    md.options = options | PTL_MD_EVENT_SEND_DISABLE | PTLX_MD_COMPLETE_IN_CALL;
    md.eq_handle = eq;
    md.ct_handle = PTL_CT_NONE;
    return md;
}

int append_ctl_mes(Iface &f) {
    const ptl_me_t pool = make_me(f.tx_buf, f.tx_stride * f.tx_free.size(),
                                  PTL_ME_OP_GET | PTL_ME_EVENT_SUCCESS_DISABLE, kTxPoolBits, 0);
    int rc = PtlMEAppend(f.ni, f.ctl_pt, &pool, PTL_PRIORITY_LIST, nullptr, &f.tx_pool_me);
    const ptl_me_t grants = make_me(nullptr, 0, PTL_ME_OP_PUT, kGrantBits, 0xff);
    if (rc == PTL_OK) rc = PtlMEAppend(f.ni, f.ctl_pt, &grants, PTL_PRIORITY_LIST, nullptr, &f.grant_me);
    const ptl_me_t probe =
        make_me(nullptr, 0, PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_ME_EVENT_SUCCESS_DISABLE, kProbeBits, 0);
    if (rc == PTL_OK) rc = PtlMEAppend(f.ni, f.ctl_pt, &probe, PTL_PRIORITY_LIST, nullptr, &f.probe_me);
    return rc;
}

// UCX_PORTALS_STATS=y (or UCX_LOG_LEVEL=info) shows whether UCP's tag offload reached the
// engine's matching. One line per iface that saw tagged traffic, greppable by scripts.
void print_tag_stats(const Iface &f) {
    const Iface::TagStats &s = f.stats;
    // Adoption of this process's pages for peers' direct access (issue 58): a copy per range.
    ptlx_wire_usage_t u{};
    const bool adopted = PtlXWireUsage(f.ni, &u) == PTL_OK && (u.pages_adopted || u.adoptions_reused);
    if (!s.posted && !s.expected && !s.unexpected && !adopted) return;
    char line[704];
    snprintf(
        line, sizeof line,
        "portals stats: pid %d iface %s: tag receives posted %lu cancelled %lu; messages matched in "
        "the engine %lu (rendezvous %lu), unexpected %lu (rendezvous %lu), fetched %lu; pages adopted %lu "
        "(%lu bytes copied), reused %lu; peer files mapped %lu; kernel copies %lu (%lu bytes; the ring "
        "carries unmappable data up to %lu)",
        int(getpid()), f.dev_name.c_str(), (unsigned long)s.posted, (unsigned long)s.cancelled,
        (unsigned long)s.expected, (unsigned long)s.expected_rndv, (unsigned long)s.unexpected,
        (unsigned long)s.unexpected_rndv, (unsigned long)s.fetched, (unsigned long)u.pages_adopted,
        (unsigned long)u.adopted_bytes, (unsigned long)u.adoptions_reused, (unsigned long)u.peer_maps,
        (unsigned long)u.kernel_copies, (unsigned long)u.kernel_copy_bytes, (unsigned long)u.shm_copy_max);
    if (f.print_stats)
        fprintf(stderr, "%s\n", line);
    else
        ucs_info("%s", line);
}

// Every ME goes before its portal can be freed (PTL_PT_IN_USE otherwise, and the portal
// table has room for only about 60 ifaces).
void release_objects(Iface &f) {
    f.am_rx.cleanup();
    f.tag_rx.cleanup();
    for (const Iface::PostedRecv &r : f.posted) PtlMEUnlink(tag_recv(r.ctx)->me);
    f.posted.clear();
    f.for_each_op([](Op &op) {
        for (ptl_handle_me_t h : {op.src_me, op.announce_me})
            if (op.type == OpType::Rndv && h != PTL_INVALID_HANDLE) PtlMEUnlink(h);
    });
    if (f.tx_pool_me != PTL_INVALID_HANDLE) PtlMEUnlink(f.tx_pool_me);
    if (f.probe_me != PTL_INVALID_HANDLE) PtlMEUnlink(f.probe_me);
    if (f.grant_me != PTL_INVALID_HANDLE) PtlMEUnlink(f.grant_me);
    for (ptl_pt_index_t *pt : {&f.am_pt, &f.tag_pt, &f.ctl_pt}) {
        if (*pt != PTL_PT_ANY) {
            const int rc = PtlPTFree(f.ni, *pt);
            if (rc != PTL_OK) ucs_warn("portals: portal %u not freed: %d", *pt, rc);
        }
        *pt = PTL_PT_ANY;
    }
    if (f.md != PTL_INVALID_HANDLE) PtlMDRelease(f.md);
    if (f.md_volatile != PTL_INVALID_HANDLE) PtlMDRelease(f.md_volatile);
    if (f.eq != PTL_INVALID_HANDLE) PtlEQFree(f.eq);
    if (f.event_fd >= 0) close(f.event_fd);
    std::free(f.tx_buf);
}

}  // namespace

extern "C" ucs_status_t uct_portals_iface_init(uct_portals_iface_t *uct, uct_md_h tl_md,
                                               const uct_iface_params_t *params,
                                               const uct_portals_iface_config_t *cfg) {
    const uct_portals_md_t *pmd = ucs_derived_of(tl_md, uct_portals_md_t);
    const size_t seg_size = std::max<size_t>(cfg->seg_size, 64);
    size_t align, align_offset;
    ucs_status_t st = uct_iface_param_am_alignment(params, seg_size, 0, 0, &align, &align_offset);
    if (st != UCS_OK) return st;
    if (align == 0 || (align & (align - 1)) != 0 || align > 65536) {
        ucs_error("portals: invalid active message alignment %zu (a power of two up to 64k)", align);
        return UCS_ERR_INVALID_PARAM;
    }
    BufLayout rx_layout;
    rx_layout.init((params->field_mask & UCT_IFACE_PARAM_FIELD_RX_HEADROOM) ? params->rx_headroom : 0, align,
                   align_offset);

    auto *f = new (std::nothrow) uct_portals_iface_impl();
    if (!f) return UCS_ERR_NO_MEMORY;
    uct->impl = f;
    f->uct = uct;
    f->ni = pmd->ni;
    f->seg_size = seg_size;
    f->eager_max = std::max(seg_size, cfg->eager_max);
    // Tag offload unless configured off or the opener lists its features without
    // UCT_IFACE_FEATURE_TAG (UCP without UCP_FEATURE_TAG).
    f->tag_offload = cfg->tm_enable && (!(params->field_mask & UCT_IFACE_PARAM_FIELD_FEATURES) ||
                                        (params->features & UCT_IFACE_FEATURE_TAG));
    f->rndv_max_hdr =
        std::min({cfg->rndv_max_hdr, f->seg_size - std::min(f->seg_size, sizeof(RndvInfo)), kMaxRndvHeader});
    f->tm_list_size = cfg->tm_list_size;
    f->tm_min_recv = std::min(cfg->tm_min_recv, seg_size + 1);
    f->rndv_queue_len = std::max(cfg->rndv_queue_len, 1u);
    f->tx_window = std::max(cfg->tx_window, 1u);
    f->latency = cfg->latency_ns;
    f->bandwidth = cfg->bandwidth_mbs;
    f->print_stats = cfg->stats != 0;
    f->progress_clock = ucs_get_time();
    if (params->open_mode & UCT_IFACE_OPEN_MODE_DEVICE) f->dev_name = params->mode.device.dev_name;
    if (params->field_mask & UCT_IFACE_PARAM_FIELD_HW_TM_EAGER_CB) f->eager_cb = params->eager_cb;
    if (params->field_mask & UCT_IFACE_PARAM_FIELD_HW_TM_EAGER_ARG) f->eager_arg = params->eager_arg;
    if (params->field_mask & UCT_IFACE_PARAM_FIELD_HW_TM_RNDV_CB) f->rndv_cb = params->rndv_cb;
    if (params->field_mask & UCT_IFACE_PARAM_FIELD_HW_TM_RNDV_ARG) f->rndv_arg = params->rndv_arg;

    const unsigned tx_queue_len = std::max(cfg->tx_queue_len, 1u);
    const unsigned tx_descs = f->tx_descs = std::max(cfg->tx_descs, 1u);
    const unsigned rx_descs = std::max(cfg->rx_descs, 1u);
    // Every event has a bounded source: a descriptor, a posted receive, an operation in
    // flight (one ACK or REPLY, one GET of its source), a message fetched from its sender or
    // a grant (each returns at least one held send buffer).
    const ptl_size_t eq_size =
        2 * ptl_size_t(rx_descs) + 2 * tx_queue_len + tx_descs + f->tm_list_size + 4096;

    int rc = PtlGetPhysId(f->ni, &f->self);
    ptl_ni_limits_t lim{};
    if (rc == PTL_OK) {
        ptl_handle_ni_t again;
        // A second reference returns the NI's limits (§3.6.2); dropped again below.
        rc = PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, nullptr, &lim,
                       &again);
        if (rc == PTL_OK) PtlNIFini(again);
        f->max_volatile = lim.max_volatile_size;
    }
    if (rc == PTL_OK) rc = PtlEQAlloc(f->ni, eq_size, &f->eq);
    f->eq_base_size = f->eq_size = eq_size;
    if (rc == PTL_OK) {
        ptl_md_t d = whole_memory_md(f->eq, 0);
        rc = PtlMDBind(f->ni, &d, &f->md);
    }
    if (rc == PTL_OK) {
        ptl_md_t d = whole_memory_md(f->eq, PTL_MD_VOLATILE);
        rc = PtlMDBind(f->ni, &d, &f->md_volatile);
    }
    for (ptl_pt_index_t *pt : {&f->am_pt, &f->tag_pt, &f->ctl_pt})
        if (rc == PTL_OK) rc = PtlPTAlloc(f->ni, 0, f->eq, PTL_PT_ANY, pt);
    if (rc == PTL_OK) rc = f->am_rx.init(f->ni, f->am_pt, rx_descs, f->seg_size, rx_layout, "active message");
    if (rc == PTL_OK) rc = f->tag_rx.init(f->ni, f->tag_pt, rx_descs, f->seg_size, rx_layout, "tagged");
    if (rc == PTL_OK) {
        f->tx_stride = (f->eager_max + 63) & ~size_t(63);
        if (f->tx_stride * tx_descs > kMaxTxPoolBytes) {
            ucs_error("portals: TX_DESCS x EAGER_MAX (%u x %zu) exceeds %llu bytes", tx_descs, f->tx_stride,
                      (unsigned long long)kMaxTxPoolBytes);
            rc = PTL_ARG_INVALID;
        } else if (posix_memalign(reinterpret_cast<void **>(&f->tx_buf), 64, f->tx_stride * tx_descs)) {
            f->tx_buf = nullptr;
            rc = PTL_NO_SPACE;
        }
    }
    if (rc == PTL_OK) {
        for (unsigned i = tx_descs; i-- > 0;) f->tx_free.push_back(int(i));
        // Zero bytes from anywhere: the send-buffer pool is a valid address in the MD.
        f->windows.setup({f->md, reinterpret_cast<uintptr_t>(f->tx_buf), f->ctl_pt,
                          std::max(cfg->grant_batch, 1u),
                          ucs_time_from_usec(PeerWindows::kIdleGrantDelayUs)});
        rc = append_ctl_mes(*f);
    }
    if (rc == PTL_OK) {
        f->ops.resize(tx_queue_len);
        for (unsigned i = 0; i < tx_queue_len; ++i)
            f->ops[i].next_free = i + 1 < tx_queue_len ? &f->ops[i + 1] : nullptr;
        f->free_ops = &f->ops[0];
        f->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (f->event_fd < 0) rc = PTL_FAIL;
        // PTL_PROGRESS=manual: nothing would deliver while a caller sleeps. (An arm that
        // works costs at most one spurious write to the event fd, which arming drains.)
        if (rc == PTL_OK) f->can_wake = PtlXEQArm(f->eq, f->event_fd) != PTL_FAIL;
    }
    if (rc != PTL_OK) {
        ucs_error(
            "portals: opening an interface failed (Portals error %d); portal table has "
            "room for about 60 interfaces per process",
            rc);
        release_objects(*f);
        delete f;
        uct->impl = nullptr;
        return status_of(rc);
    }
    ucs_debug("portals: iface %p nid 0x%x pid %u portals am %u tag %u ctl %u", uct, f->self.phys.nid,
              f->self.phys.pid, f->am_pt, f->tag_pt, f->ctl_pt);
    return UCS_OK;
}

extern "C" void uct_portals_iface_cleanup(uct_portals_iface_t *uct) {
    auto *f = static_cast<uct_portals_iface_impl *>(uct->impl);
    if (!f) return;
    for (RxEvent &r : f->rx_fifo) RxPool::release_buf(r.buf);
    // Senders waiting to hear that their messages were processed (a flush) hear it now.
    f->windows.send_owed_grants(f->progress_clock, true);
    release_objects(*f);
    print_tag_stats(*f);
    delete f;
}

extern "C" ucs_status_t uct_portals_iface_query(uct_iface_h tl_iface, uct_iface_attr_t *attr) {
    Iface *f = iface_of(tl_iface);
    uct_base_iface_query(&f->uct->super, attr);
    const size_t seg = f->seg_size;
    attr->iface_addr_len = sizeof(uct_portals_iface_addr_t);
    attr->device_addr_len = sizeof(uct_portals_device_addr_t);
    attr->ep_addr_len = 0;
    attr->max_conn_priv = 0;
    attr->cap.flags = UCT_IFACE_FLAG_CONNECT_TO_IFACE | UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_AM_BCOPY |
                      UCT_IFACE_FLAG_AM_ZCOPY | UCT_IFACE_FLAG_PUT_SHORT | UCT_IFACE_FLAG_PUT_BCOPY |
                      UCT_IFACE_FLAG_PUT_ZCOPY | UCT_IFACE_FLAG_GET_BCOPY | UCT_IFACE_FLAG_GET_ZCOPY |
                      UCT_IFACE_FLAG_ATOMIC_DEVICE | UCT_IFACE_FLAG_PENDING | UCT_IFACE_FLAG_CB_SYNC |
                      UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE |
                      (f->tag_offload ? UCT_IFACE_FLAG_TAG_EAGER_SHORT | UCT_IFACE_FLAG_TAG_EAGER_BCOPY |
                                            UCT_IFACE_FLAG_TAG_EAGER_ZCOPY | UCT_IFACE_FLAG_TAG_RNDV_ZCOPY
                                      : 0);
    attr->cap.event_flags =
        f->can_wake ? UCT_IFACE_FLAG_EVENT_SEND_COMP | UCT_IFACE_FLAG_EVENT_RECV | UCT_IFACE_FLAG_EVENT_FD
                    : 0;

    attr->cap.put.max_short = f->max_put_short();
    attr->cap.put.max_bcopy = f->max_put_short();
    attr->cap.put.min_zcopy = 0;
    attr->cap.put.max_zcopy = SIZE_MAX >> 24;
    attr->cap.put.opt_zcopy_align = 1;
    attr->cap.put.align_mtu = 1;
    attr->cap.put.max_iov = 1;

    attr->cap.get.max_short = 0;
    attr->cap.get.max_bcopy = seg;
    attr->cap.get.min_zcopy = 0;
    attr->cap.get.max_zcopy = SIZE_MAX >> 24;
    attr->cap.get.opt_zcopy_align = 1;
    attr->cap.get.align_mtu = 1;
    attr->cap.get.max_iov = 1;

    attr->cap.am.max_short = seg;
    attr->cap.am.max_bcopy = seg;
    attr->cap.am.min_zcopy = 0;
    attr->cap.am.max_zcopy = seg;
    attr->cap.am.opt_zcopy_align = 1;
    attr->cap.am.align_mtu = 1;
    attr->cap.am.max_hdr = f->max_am_hdr();
    attr->cap.am.max_iov = kMaxIov;

    attr->cap.tag.recv.min_recv = f->tm_min_recv;
    attr->cap.tag.recv.max_zcopy = SIZE_MAX >> 24;
    attr->cap.tag.recv.max_iov = 1;
    attr->cap.tag.recv.max_outstanding = f->tm_list_size;
    attr->cap.tag.eager.max_short = f->eager_max;
    attr->cap.tag.eager.max_bcopy = f->eager_max;
    attr->cap.tag.eager.max_zcopy = f->eager_max;
    attr->cap.tag.eager.max_iov = kMaxIov;
    attr->cap.tag.rndv.max_zcopy = size_t(1) << 30;  // like IB; UCP reads larger ones in software
    attr->cap.tag.rndv.max_hdr = f->rndv_max_hdr;
    attr->cap.tag.rndv.max_iov = 1;

    const uint64_t ops = UCS_BIT(UCT_ATOMIC_OP_ADD) | UCS_BIT(UCT_ATOMIC_OP_AND) | UCS_BIT(UCT_ATOMIC_OP_OR) |
                         UCS_BIT(UCT_ATOMIC_OP_XOR);
    attr->cap.atomic32.op_flags = attr->cap.atomic64.op_flags = ops;
    attr->cap.atomic32.fop_flags = attr->cap.atomic64.fop_flags =
        ops | UCS_BIT(UCT_ATOMIC_OP_SWAP) | UCS_BIT(UCT_ATOMIC_OP_CSWAP);

    attr->latency = ucs_linear_func_make(f->latency, 0);
    attr->bandwidth.dedicated = 0;
    attr->bandwidth.shared = f->bandwidth;
    attr->overhead = 40e-9;
    attr->priority = 0;
    return UCS_OK;
}

extern "C" ucs_status_t uct_portals_iface_get_device_address(uct_iface_h tl_iface, uct_device_addr_t *addr) {
    auto *a = reinterpret_cast<uct_portals_device_addr_t *>(addr);
    a->nid = iface_of(tl_iface)->self.phys.nid;
    return UCS_OK;
}

extern "C" ucs_status_t uct_portals_iface_get_address(uct_iface_h tl_iface, uct_iface_addr_t *addr) {
    const Iface *f = iface_of(tl_iface);
    auto *a = reinterpret_cast<uct_portals_iface_addr_t *>(addr);
    a->pid = f->self.phys.pid;
    a->am_pt = uint8_t(f->am_pt);
    a->tag_pt = uint8_t(f->tag_pt);
    a->ctl_pt = uint8_t(f->ctl_pt);
    a->reserved = 0;
    return UCS_OK;
}

// Why the iface at these addresses cannot be reached, or nullptr if it can. An address a
// peer packed names a process id below PTL_PID_MAX and three portals of its own, and its
// nid (an IPv4 address in host order) is ours or reachable over the tcp wire; anything
// else did not come from a portals iface.
extern "C" const char *uct_portals_iface_unreachable_reason(const uct_iface_h tl_iface,
                                                            const uct_device_addr_t *dev_addr,
                                                            const uct_iface_addr_t *iface_addr) {
    if (!dev_addr || !iface_addr) return "no device or iface address";
    const Iface *f = iface_of(tl_iface);
    const uint32_t nid = reinterpret_cast<const uct_portals_device_addr_t *>(dev_addr)->nid;
    const auto *a = reinterpret_cast<const uct_portals_iface_addr_t *>(iface_addr);
    if (a->pid >= PTL_PID_MAX || a->reserved != 0 || a->am_pt == a->tag_pt || a->am_pt == a->ctl_pt ||
        a->tag_pt == a->ctl_pt)
        return "not a portals iface address";
    const bool unicast = nid != 0 && nid != 0xffffffffu && (nid >> 28) != 0xe;
    if (!unicast) return "device address is not a unicast IPv4 address";
    if ((nid >> 24) == 127 && nid != f->self.phys.nid) return "loopback address of another host";
    if (PtlXNidReachable(f->ni, nid) != 1) return "another host, and no tcp wire (PTL_WIRE=shm)";
    return nullptr;
}

extern "C" int uct_portals_iface_is_reachable(const uct_iface_h tl_iface, const uct_device_addr_t *dev_addr,
                                              const uct_iface_addr_t *iface_addr) {
    return uct_portals_iface_unreachable_reason(tl_iface, dev_addr, iface_addr) == nullptr;
}

extern "C" ucs_status_t uct_portals_iface_flush(uct_iface_h tl_iface, unsigned, uct_completion_t *comp) {
    if (comp) return UCS_ERR_UNSUPPORTED;
    Iface *f = iface_of(tl_iface);
    const auto done = [f] {
        if (f->ops_in_flight || !f->zcopy_sends.empty()) return false;
        for (const Ep *ep : f->eps)
            if (!f->messages_arrived(ep)) return false;
        return true;
    };
    if (done()) return UCS_OK;
    for (Ep *ep : f->eps)
        if (!f->messages_arrived(ep)) f->windows.ensure_probe(*ep->window);
    f->progress();
    return done() ? UCS_OK : UCS_INPROGRESS;
}

// The engine delivers and executes operations to a peer in issue order (the wires are
// ordered and the target applies each message before the next), so there is nothing to fence.
extern "C" ucs_status_t uct_portals_iface_fence(uct_iface_h, unsigned) {
    return UCS_OK;
}

extern "C" ucs_status_t uct_portals_iface_event_fd_get(uct_iface_h tl_iface, int *fd_p) {
    *fd_p = iface_of(tl_iface)->event_fd;
    return UCS_OK;
}

extern "C" ucs_status_t uct_portals_iface_event_arm(uct_iface_h tl_iface, unsigned events) {
    Iface *f = iface_of(tl_iface);
    // A send's completion event is its arrival at the peer, as on UCX's rc: messages carry
    // no acknowledgement, so a sleeper waiting for them gets a probe's.
    if (events & UCT_EVENT_SEND_COMP)
        for (Ep *ep : f->eps)
            if (!ep->failed() && !ep->window->arrived(ep->window->sent)) f->windows.ensure_probe(*ep->window);
    uint64_t v;
    while (read(f->event_fd, &v, sizeof v) == ssize_t(sizeof v)) {
    }
    // Arming reports, it does not progress: events still in the EQ (PtlXEQArm answers
    // PTL_IN_USE), undelivered messages (even one still being fetched), completions or
    // pending requests that can run all mean the caller must progress first. Draining the
    // EQ here once completed a request inside the arm, and its waiter slept on.
    // A sleeping receiver must not hold its senders' buffers.
    f->windows.send_owed_grants(f->progress_clock, true);
    // zcopy sends known to have arrived complete from progress, without an event to wake it.
    if (!f->rx_fifo.empty() || !f->deferred.empty() || !f->cancelled.empty() || f->zcopy_check_due ||
        !f->flush_checks.empty() || (!f->pending_eps.empty() && f->has_tx_resources()))
        return UCS_ERR_BUSY;
    const int rc = PtlXEQArm(f->eq, f->event_fd);
    if (rc == PTL_IN_USE) return UCS_ERR_BUSY;
    if (rc == PTL_FAIL) {
        ucs_error("portals: wake-up needs the engine's progress thread (unset PTL_PROGRESS=manual)");
        return UCS_ERR_UNSUPPORTED;
    }
    return status_of(rc);
}

extern "C" void uct_portals_iface_progress_enable(uct_iface_h tl_iface, unsigned flags) {
    uct_base_iface_progress_enable(tl_iface, flags);
}

extern "C" void uct_portals_iface_progress_disable(uct_iface_h tl_iface, unsigned flags) {
    uct_base_iface_progress_disable(tl_iface, flags);
}

// ---------------------------------------------------------------------------------------
// Operations in flight

namespace {

Op *start_op(Op *op, Ep *ep, OpType t, uct_completion_t *comp) {
    // Not the engine's words: take_op follows the call, and the REPLY may be written by then
    // (an operation on ourselves, or the progress thread). Copying them out and back lost
    // one written in between: a fetch returned the previous fetch's value.
    static_cast<OpState &>(*op) = OpState{};
    op->type = t;
    op->ep = ep;
    op->comp = comp;
    if (ep) {
        op->seq = ep->in_flight.start();
    }
    return op;
}

}  // namespace

Op *Iface::take_op(Op *op, Ep *ep, OpType t, uct_completion_t *comp) {
    free_ops = op->next_free;
    ++ops_in_flight;
    return start_op(op, ep, t, comp);
}

Op *Iface::get_rndv_op(Ep *ep, uct_completion_t *comp) {
    if (ep->blocked_by_pending() || (!free_rndv_ops && rndv_slots.size() >= rndv_queue_len)) return nullptr;
    if (!free_rndv_ops) {
        // A rendezvous has up to three events (ACK, the GET of its data, a failed GET of its
        // announcement); the EQ grows with the slots, in steps.
        constexpr ptl_size_t kEventsPerRndv = 3, kStep = 1024;
        const ptl_size_t need = eq_base_size + kEventsPerRndv * (rndv_slots.size() + 1);
        if (need > eq_size) {
            const int rc = PtlXEQGrow(eq, need + kEventsPerRndv * kStep);
            if (rc != PTL_OK) {
                ucs_error("portals: cannot grow the event queue to %lu events for %zu rendezvous sends: %d",
                          (unsigned long)need, rndv_slots.size() + 1, rc);
                return nullptr;
            }
            eq_size = need + kEventsPerRndv * kStep;
        }
        RndvSlot &slot = rndv_slots.emplace_back();
        slot.announcement = std::make_unique<char[]>(sizeof(RndvInfo) + rndv_max_hdr);
        slot.op.announcement = slot.announcement.get();
        free_rndv_ops = &slot.op;
    }
    Op *op = free_rndv_ops;
    free_rndv_ops = op->next_free;
    ++ops_in_flight;
    char *const announcement = op->announcement;  // the slot's, for good
    start_op(op, ep, OpType::Rndv, comp);
    op->announcement = announcement;
    return op;
}

void Iface::put_op(Op *op) {
    if (Ep *ep = op->ep) {
        ep->in_flight.finish(op->seq);
        complete_flushes(ep);
    }
    if (op->announce_me != PTL_INVALID_HANDLE)
        PtlMEUnlink(std::exchange(op->announce_me, PTL_INVALID_HANDLE));
    op->ep = nullptr;
    op->comp = nullptr;
    Op *&free_list = op->type == OpType::Rndv ? free_rndv_ops : free_ops;
    op->next_free = free_list;
    free_list = op;
    --ops_in_flight;
}

void Iface::complete_flushes(Ep *ep) {
    auto &fl = ep->flushes;
    if (fl.empty()) return;
    const uint64_t oldest = ep->in_flight.oldest();
    size_t kept = 0;
    std::vector<uct_completion_t *> done;
    for (const Ep::FlushWait &w : fl) {
        if (w.seq <= oldest && (ep->failed() || ep->window->arrived(w.sent_mark)))
            done.push_back(w.comp);
        else
            fl[kept++] = w;
    }
    fl.resize(kept);
    for (uct_completion_t *c : done) uct_invoke_completion(c, UCS_OK);
}

void Iface::cancel_ops(Ep *ep) {
    for_each_op([ep](Op &op) {
        if (op.ep != ep) return;
        ep->in_flight.finish(op.seq);
        op.ep = nullptr;
        if (uct_completion_t *comp = std::exchange(op.comp, nullptr))
            uct_invoke_completion(comp, UCS_ERR_CANCELED);
    });
}

// The handler (UCP's peer-failure mode) runs from progress, outside the event loop, so it
// may purge, flush and destroy the ep.
void Iface::report_failed_eps() {
    while (!failed_eps.empty()) {
        const auto [ep, status] = failed_eps.front();
        failed_eps.pop_front();
        ucs_debug("portals: ep %p to nid 0x%x pid %u failed: %s", ep->uct, ep->peer.phys.nid,
                  ep->peer.phys.pid, ucs_status_string(status));
        uct_iface_handle_ep_err(&uct->super.super, ep->uct, status);
    }
}

void Iface::mark_failed(Ep *ep, ucs_status_t status) {
    if (ep->failed()) return;
    ep->failure = status;
    if (!zcopy_sends.empty()) zcopy_check_due = true;
    failed_eps.emplace_back(ep, status);
}

void Iface::complete_op(Op *op, ucs_status_t status) {
    if (op->ep && status != UCS_OK && status != UCS_ERR_CANCELED) mark_failed(op->ep, status);
    // Results of an op whose ep was destroyed are unwanted: its completion was reported
    // (cancelled) then.
    if (status == UCS_OK && op->ep) {
        switch (op->type) {
            case OpType::GetBcopy: op->unpack_cb(op->unpack_arg, op->bounce, op->length); break;
            case OpType::AtomicFetch: std::memcpy(op->result, &op->fetched, op->result_size); break;
            default: break;
        }
    }
    give_bounce(std::exchange(op->bounce, nullptr));
    uct_completion_t *comp = op->comp;
    put_op(op);
    if (comp) uct_invoke_completion(comp, status);
}

// A request answering UCS_INPROGRESS made progress but stays first in its ep's queue; its ep
// goes to the back, and each ep gets at most one such turn per call.
void Iface::dispatch_pending() {
    size_t in_progress_turns = pending_eps.size();
    while (has_tx_resources() && !pending_eps.empty()) {
        Ep *ep = pending_eps.front();
        pending_eps.pop_front();
        ep->in_pending_list = false;
        ucs_queue_elem_t *elem = ucs_queue_pull(&ep->pending);
        uct_pending_req_t *req = ucs_container_of(elem, uct_pending_req_t, priv);
        ep->dispatching = true;
        const ucs_status_t s = req->func(req);
        ep->dispatching = false;
        if (s == UCS_ERR_NO_RESOURCE) {
            ucs_queue_push_head(&ep->pending, elem);
            pending_eps.push_front(ep);
            ep->in_pending_list = true;
            return;
        }
        if (s == UCS_INPROGRESS) {
            ucs_queue_push_head(&ep->pending, elem);
            pending_eps.push_back(ep);
            ep->in_pending_list = true;
            if (--in_progress_turns == 0) return;
            continue;
        }
        if (!ucs_queue_is_empty(&ep->pending) && !ep->in_pending_list) {
            pending_eps.push_back(ep);  // round robin
            ep->in_pending_list = true;
        }
    }
}
