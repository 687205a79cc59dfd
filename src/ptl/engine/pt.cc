// Portal table entries (§3.7) and their match lists.
#include "pt.h"

#include "engine.h"

namespace ptl {

void MatchList::add(Entry *e) {
    if (e->exact) {
        bucket_of(exact, spare, e->desc.match_bits).push_back(e);
        ++exact_size;
    } else {
        wildcard.push_back(e);
    }
    ++size;
}

void MatchList::remove(Entry *e) {
    EntryList::erase(e);
    if (e->exact) drop_empty_buckets_if_many(exact, spare, --exact_size);
    --size;
}

void UnexpectedList::add(UnexpectedHeader *u) {
    all.push_back(u);
    bucket_of(by_bits, spare, u->match_bits).push_back(u);
    ++size;
}

void UnexpectedList::remove(UnexpectedHeader *u) {
    UhList::erase(u);
    UhBucket::erase(u);
    drop_empty_buckets_if_many(by_bits, spare, --size);
}

// ---------------------------------------------------------------------------------------
// Portal table (§3.7)

int Engine::pt_alloc(ptl_handle_ni_t h, unsigned options, ptl_handle_eq_t eqh, ptl_pt_index_t req,
                     ptl_pt_index_t *out) {
    Lock lk(mu_);
    Ni *n = ni_of(h);
    if (!n || !out) return PTL_ARG_INVALID;
    if (options & ~unsigned(PTL_PT_ONLY_USE_ONCE | PTL_PT_FLOWCTRL | PTL_PT_ONLY_TRUNCATE |
                            PTL_PT_ALLOC_DISABLED | 8 /* reference's MATCH_UNORDERED hint */))
        return PTL_ARG_INVALID;
    Eq *eq = nullptr;
    if (eqh != PTL_EQ_NONE) {
        eq = n->eq(eqh);
        if (!eq) return PTL_ARG_INVALID;
    }
    if ((options & PTL_PT_FLOWCTRL) && !eq) return PTL_PT_EQ_NEEDED;
    ptl_pt_index_t idx;
    if (req == PTL_PT_ANY) {
        auto it = std::find_if(n->pts.begin(), n->pts.end(), [](const Pt &p) { return !p.allocated; });
        if (it == n->pts.end()) return PTL_PT_FULL;
        idx = ptl_pt_index_t(it - n->pts.begin());
    } else {
        if (req >= n->pts.size()) return PTL_ARG_INVALID;
        if (n->pts[req].allocated) return PTL_PT_IN_USE;
        idx = req;
    }
    Pt &pt = n->pts[idx];
    pt = Pt();
    pt.allocated = true;
    pt.enabled = !(options & PTL_PT_ALLOC_DISABLED);
    pt.options = options;
    pt.eq = eq;
    if (eq && (options & PTL_PT_FLOWCTRL)) {
        ++eq->reserved;
        eq->fit_reserved();
    }
    *out = idx;
    PTL_TRACE_NOTABLE(trace_.get(), "ni%u pt %u alloc: options 0x%x%s", n->index, idx, options,
                      eq ? ", eq" : "");
    return PTL_OK;
}

int Engine::pt_free(ptl_handle_ni_t h, ptl_pt_index_t idx) {
    Lock lk(mu_);
    Ni *n = ni_of(h);
    if (!n || idx >= n->pts.size() || !n->pts[idx].allocated) return PTL_ARG_INVALID;
    Pt &pt = n->pts[idx];
    wait_for_bulk([n, idx](const BulkDelivery &d) { return d.ni == n && d.entry->pt == idx; });
    if (pt.entries() || pt.unexpected.size) return PTL_PT_IN_USE;
    if (pt.eq && (pt.options & PTL_PT_FLOWCTRL) && pt.eq->reserved) --pt.eq->reserved;
    pt = Pt();
    PTL_TRACE_NOTABLE(trace_.get(), "ni%u pt %u free", n->index, idx);
    return PTL_OK;
}

int Engine::pt_disable(ptl_handle_ni_t h, ptl_pt_index_t idx) {
    // Blocking in the spec's sense: deliveries run entirely under mu_, so once we hold it no
    // message is half processed and its events are already posted.
    Lock lk(mu_);
    Ni *n = ni_of(h);
    if (!n || idx >= n->pts.size() || !n->pts[idx].allocated) return PTL_ARG_INVALID;
    n->pts[idx].enabled = false;
    // And the deliveries whose data a wire still moves (bulk_delivery.h) have ended.
    wait_for_bulk([n, idx](const BulkDelivery &d) { return d.ni == n && d.entry->pt == idx; });
    revoke_exports(n, idx, false);
    PTL_TRACE_NOTABLE(trace_.get(), "ni%u pt %u disabled by the application", n->index, idx);
    return PTL_OK;
}

int Engine::pt_enable(ptl_handle_ni_t h, ptl_pt_index_t idx) {
    Lock lk(mu_);
    Ni *n = ni_of(h);
    if (!n || idx >= n->pts.size() || !n->pts[idx].allocated) return PTL_ARG_INVALID;
    n->pts[idx].enabled = true;
    export_front(n, n->pts[idx], nullptr);
    PTL_TRACE_NOTABLE(trace_.get(), "ni%u pt %u enabled", n->index, idx);
    return PTL_OK;
}

}  // namespace ptl
