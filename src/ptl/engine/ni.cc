// Network interfaces (§3.6), their identification (§3.8, §3.9) and bundles.
#include "ni.h"

#include <algorithm>

#include "engine.h"

namespace ptl {

Ni::Ni(Engine *e, uint32_t idx, unsigned opts, const ptl_ni_limits_t &lim)
    : engine(e),
      index(idx),
      options(opts),
      handle(0),
      limits(lim),
      pts(size_t(lim.max_pt_index) + 1),
      mds(uint32_t(lim.max_mds)),
      entries(uint32_t(lim.max_entries)),
      eqs(uint32_t(lim.max_eqs)),
      cts(uint32_t(lim.max_cts)) {}

Ni::~Ni() {
    // Unexpected headers are owned by their PT's list.
    for (Pt &pt : pts)
        while (UnexpectedHeader *u = pt.unexpected.all.front()) {
            pt.unexpected.remove(u);
            delete u;
        }
}

ptl_rank_t Ni::rank_of(PeerId p) const {
    for (size_t r = 0; r < map.size(); ++r)
        if (map[r].phys.nid == p.nid && map[r].phys.pid == p.pid) return ptl_rank_t(r);
    return PTL_RANK_ANY;
}

namespace {

ptl_ni_limits_t default_limits(const Config &cfg) {
    ptl_ni_limits_t l{};
    l.max_entries = 1 << 18;
    l.max_unexpected_headers = 1 << 18;
    l.max_mds = 1 << 16;
    l.max_cts = 1 << 16;
    l.max_eqs = 1 << 12;
    l.max_pt_index = 255;
    l.max_iovecs = 1024;
    l.max_list_size = 1 << 18;
    l.max_triggered_ops = 1 << 20;
    l.max_msg_size = ptl_size_t(1) << 40;
    l.max_atomic_size = 4096;
    l.max_fetch_atomic_size = 4096;
    l.max_waw_ordered_size = ptl_size_t(1) << 40;
    l.max_war_ordered_size = ptl_size_t(1) << 40;
    l.max_volatile_size = cfg.rndv_threshold;
    l.features = PTL_TARGET_BIND_INACCESSIBLE | PTL_TOTAL_DATA_ORDERING;
    return l;
}

// Desired limits are honoured where they ask for less than we offer (so they are enforced),
// never below the spec's minimums.
ptl_ni_limits_t negotiate(const ptl_ni_limits_t &ours, const ptl_ni_limits_t *d) {
    ptl_ni_limits_t l = ours;
    if (!d) return l;
    auto clamp = [](int &mine, int want, int floor) {
        if (want > 0 && want < mine) mine = std::max(want, floor);
    };
    clamp(l.max_entries, d->max_entries, 1);
    clamp(l.max_unexpected_headers, d->max_unexpected_headers, 1);
    clamp(l.max_mds, d->max_mds, 1);
    clamp(l.max_cts, d->max_cts, 1);
    clamp(l.max_eqs, d->max_eqs, 1);
    clamp(l.max_pt_index, d->max_pt_index, 249);
    clamp(l.max_iovecs, d->max_iovecs, 1);
    clamp(l.max_list_size, d->max_list_size, 1);
    clamp(l.max_triggered_ops, d->max_triggered_ops, 1);
    if (d->max_msg_size && d->max_msg_size < l.max_msg_size) l.max_msg_size = d->max_msg_size;
    return l;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Network interfaces (§3.6)

int Engine::ni_init(ptl_interface_t iface, unsigned options, ptl_pid_t pid, const ptl_ni_limits_t *desired,
                    ptl_ni_limits_t *actual, ptl_handle_ni_t *out) {
    if (!out) return PTL_ARG_INVALID;
    if (iface != PTL_IFACE_DEFAULT && iface != 0) return PTL_ARG_INVALID;
    const unsigned m = options & (PTL_NI_MATCHING | PTL_NI_NO_MATCHING);
    const unsigned a = options & (PTL_NI_LOGICAL | PTL_NI_PHYSICAL);
    if ((m != PTL_NI_MATCHING && m != PTL_NI_NO_MATCHING) || (a != PTL_NI_LOGICAL && a != PTL_NI_PHYSICAL) ||
        (options & ~unsigned(PTL_NI_MATCHING | PTL_NI_NO_MATCHING | PTL_NI_LOGICAL | PTL_NI_PHYSICAL)))
        return PTL_ARG_INVALID;
    if (pid != PTL_PID_ANY && pid >= PTL_PID_MAX) return PTL_ARG_INVALID;
    const uint32_t idx = ((options & PTL_NI_NO_MATCHING) ? 1 : 0) | ((options & PTL_NI_PHYSICAL) ? 2 : 0);

    Lock lk(mu_);
    if (Ni *n = nis_[idx]) {  // §3.6.2: later calls get the first caller's values
        ++n->refs;
        if (actual) *actual = n->limits;
        *out = n->handle;
        return PTL_OK;
    }
    if (!phys_open_) {
        const int rc = open_physical(pid);
        if (rc != PTL_OK) return rc;
    }
    const ptl_ni_limits_t lim = negotiate(default_limits(cfg_), desired);
    Ni *n = new Ni(this, idx, options, lim);
    ni_gen_ = (ni_gen_ + 1) % 255;
    n->handle = make_handle(ObjType::Ni, idx, 0, ni_gen_);
    nis_[idx] = n;
    PTL_TRACE_NOTABLE(trace_.get(), "ni%u init: %s, %s", idx,
                      (options & PTL_NI_MATCHING) ? "matching" : "non-matching",
                      (options & PTL_NI_LOGICAL) ? "logical" : "physical");
    if (actual) *actual = lim;
    *out = n->handle;
    return PTL_OK;
}

int Engine::ni_fini(ptl_handle_ni_t h) {
    Lock lk(mu_);
    Ni *n = ni_of(h);
    if (!n) return PTL_ARG_INVALID;
    if (--n->refs > 0) return PTL_OK;
    PTL_TRACE_NOTABLE(trace_.get(), "ni%u fini", n->index);
    wait_for_bulk([n](const BulkDelivery &d) { return d.ni == n; });  // they reach its memory
    event_seq_.fetch_add(1, std::memory_order_release);  // its EQs are gone (app_progress_take)
    revoke_exports(n, 0, true);
    n->cts.for_each([this](Ct &c) { release_remote_counter(&c); });
    nis_[n->index] = nullptr;
    forget_put_targets();  // a later NI of this index may map ranks differently
    std::erase_if(changed_cts_, [n](Ct *c) { return c->ni == n; });
    delete n;
    bool none = std::all_of(std::begin(nis_), std::end(nis_), [](Ni *x) { return !x; });
    if (none) held_ = HeldMessages();  // they name wires that close_physical destroys
    lk.unlock();
    if (none) close_physical();
    return PTL_OK;
}

int Engine::ni_status(ptl_handle_ni_t h, ptl_sr_index_t r, ptl_sr_value_t *v) {
    Lock lk(mu_);
    Ni *n = ni_of(h);
    if (!n || !v || unsigned(r) >= PTL_SR_LAST) return PTL_ARG_INVALID;
    *v = n->sr[r].load();
    return PTL_OK;
}

int Engine::ni_handle(ptl_handle_any_t h, ptl_handle_ni_t *out) {
    Lock lk(mu_);
    if (!out) return PTL_ARG_INVALID;
    const HandleParts p = split_handle(h);
    Ni *n = nullptr;
    switch (p.type) {
        case ObjType::Ni: n = ni_of(h); break;
        case ObjType::Eq:
            if (Eq *e = eq_of(h)) n = e->ni;
            break;
        case ObjType::Ct:
            if (Ct *c = ct_of(h)) n = c->ni;
            break;
        case ObjType::Md:
            if (Md *m = md_of(h)) n = m->ni;
            break;
        case ObjType::Le:
        case ObjType::Me:
            if (Ni *x = ni_for_object(h))
                if (x->entry(h, p.type == ObjType::Me)) n = x;
            break;
        default: break;
    }
    if (!n) return PTL_ARG_INVALID;
    *out = n->handle;
    return PTL_OK;
}

int Engine::set_map(ptl_handle_ni_t h, ptl_size_t size, const ptl_process_t *mapping) {
    Lock lk(mu_);
    Ni *n = ni_of(h);
    if (!n || !n->logical() || !mapping || size == 0 || size > (1u << 24)) return PTL_ARG_INVALID;
    n->map.assign(mapping, mapping + size);
    n->map_set = true;
    n->self_rank = n->rank_of(self_);
    forget_put_targets();
    return PTL_OK;
}

int Engine::get_map(ptl_handle_ni_t h, ptl_size_t size, ptl_process_t *mapping, ptl_size_t *actual) {
    Lock lk(mu_);
    Ni *n = ni_of(h);
    if (!n || !n->logical() || !actual || (size && !mapping)) return PTL_ARG_INVALID;
    if (!n->map_set) return PTL_IGNORED;
    const size_t k = std::min<size_t>(size, n->map.size());
    std::copy_n(n->map.begin(), k, mapping);
    *actual = n->map.size();
    return PTL_OK;
}

// ---------------------------------------------------------------------------------------
// Identification (§3.8, §3.9)

int Engine::get_uid(ptl_handle_ni_t h, ptl_uid_t *uid) {
    Lock lk(mu_);
    if (!ni_of(h) || !uid) return PTL_ARG_INVALID;
    *uid = uid_;
    return PTL_OK;
}

int Engine::get_id(ptl_handle_ni_t h, ptl_process_t *id) {
    Lock lk(mu_);
    Ni *n = ni_of(h);
    if (!n || !id) return PTL_ARG_INVALID;
    if (n->logical()) {
        const ptl_rank_t r = n->self_rank;
        if (r == PTL_RANK_ANY) return PTL_ARG_INVALID;  // the map does not name us (yet)
        id->rank = r;
    } else {
        id->phys.nid = self_.nid;
        id->phys.pid = self_.pid;
    }
    return PTL_OK;
}

int Engine::get_phys_id(ptl_handle_ni_t h, ptl_process_t *id) {
    Lock lk(mu_);
    if (!ni_of(h) || !id) return PTL_ARG_INVALID;
    id->phys.nid = self_.nid;
    id->phys.pid = self_.pid;
    return PTL_OK;
}

int Engine::start_bundle(ptl_handle_ni_t h) {
    Lock lk(mu_);
    Ni *n = ni_of(h);
    if (!n) return PTL_ARG_INVALID;
    ++n->bundle_depth;
    return PTL_OK;
}

int Engine::end_bundle(ptl_handle_ni_t h) {
    Lock lk(mu_);
    Ni *n = ni_of(h);
    if (!n || n->bundle_depth == 0) return PTL_ARG_INVALID;
    --n->bundle_depth;  // operations are never deferred, so nothing is left to initiate
    return PTL_OK;
}

}  // namespace ptl
