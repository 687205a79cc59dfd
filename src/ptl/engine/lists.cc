// Appending, unlinking and searching list entries (§3.11, §3.12): the unexpected-list
// search on append (L4-L6), use-once and locally managed entries, and the AUTO_UNLINK /
// AUTO_FREE life cycle of overflow buffers (L11, U1-U5).
#include <algorithm>

#include "engine.h"
#include "events.h"
#include "match.h"

namespace ptl {

namespace {

constexpr unsigned kLeOptions =
    PTL_IOVEC | PTL_LE_OP_PUT | PTL_LE_OP_GET | PTL_LE_USE_ONCE | PTL_LE_UNEXPECTED_HDR_DISABLE |
    PTL_LE_IS_ACCESSIBLE | PTL_LE_EVENT_LINK_DISABLE | PTL_LE_EVENT_COMM_DISABLE |
    PTL_LE_EVENT_FLOWCTRL_DISABLE | PTL_LE_EVENT_SUCCESS_DISABLE | PTL_LE_EVENT_OVER_DISABLE |
    PTL_LE_EVENT_UNLINK_DISABLE | PTL_LE_EVENT_CT_COMM | PTL_LE_EVENT_CT_OVERFLOW | PTL_LE_EVENT_CT_BYTES |
    (1u << 19) /* pre-4.3 ACK_DISABLE, accepted and ignored */;
constexpr unsigned kMeOptions = kLeOptions | PTL_ME_MANAGE_LOCAL | PTL_ME_NO_TRUNCATE | PTL_ME_MAY_ALIGN |
                                PTL_ME_LOCAL_INC_UH_RLENGTH | PTLX_ME_SLOTS | PTLX_ME_SLOT_POOL;

// Validates an LE/ME description and fills a detached Entry (not yet in any table or list).
int prepare_entry(Ni &n, ptl_pt_index_t pti, const ptl_me_t &d, bool is_me, Entry &e) {
    if (is_me != n.matching()) return PTL_ARG_INVALID;  // I-list 22
    if (pti >= n.pts.size() || !n.pts[pti].allocated) return PTL_ARG_INVALID;
    if (d.options & ~(is_me ? kMeOptions : kLeOptions)) return PTL_ARG_INVALID;
    e.ni = &n;
    e.is_me = is_me;
    e.desc = d;
    if (!is_me) {
        e.desc.match_bits = 0;
        e.desc.ignore_bits = ~ptl_match_bits_t(0);
        e.desc.min_free = 0;
        if (n.logical())
            e.desc.match_id.rank = PTL_RANK_ANY;
        else
            e.desc.match_id.phys = {PTL_NID_ANY, PTL_PID_ANY};
    }
    if (d.ct_handle != PTL_CT_NONE && !(e.ct = n.ct(d.ct_handle))) return PTL_ARG_INVALID;
    if (d.options & PTL_IOVEC) {
        if ((!d.start && d.length) || d.length > uint64_t(n.limits.max_iovecs)) return PTL_ARG_INVALID;
        e.region = Region::iovec(static_cast<const ptl_iovec_t *>(d.start), d.length);
    } else {
        e.region = Region::contiguous(d.start, d.length);
    }
    e.pt = pti;
    e.exact = is_me && e.desc.ignore_bits == 0;
    if (d.options & PTLX_ME_SLOT_POOL) {
        constexpr unsigned kExcluded =
            PTL_IOVEC | PTL_ME_USE_ONCE | PTL_ME_LOCAL_INC_UH_RLENGTH | PTLX_ME_SLOTS;
        if (!(d.options & PTL_ME_MANAGE_LOCAL) || (d.options & kExcluded) || d.min_free == 0)
            return PTL_ARG_INVALID;
        const uint64_t capacity = d.length / d.min_free;
        if (capacity == 0 || capacity > (1u << 24)) return PTL_ARG_INVALID;
        e.pooled = true;
        e.slots = SlotFifo{};
        e.slots.ring.assign(capacity, 0);
    }
    const unsigned o = d.options;
    e.plain_put = e.desc.uid == PTL_UID_ANY && (o & PTL_ME_OP_PUT) && (o & PTL_ME_IS_ACCESSIBLE) &&
                  !(o & (PTL_IOVEC | PTL_ME_USE_ONCE)) && (!(o & PTL_ME_MANAGE_LOCAL) || e.pooled);
    return PTL_OK;
}

}  // namespace

// LINK, AUTO_UNLINK and AUTO_FREE: only type, PT, user_ptr and ni_fail_type (C.5).
void Engine::entry_event(Pt &pt, const Entry &e, ptl_event_kind_t type) {
    if (!pt.eq || !entry_allows_full(e, type, true)) return;
    ptl_event_t ev{};
    ev.type = type;
    ev.pt_index = e.pt;
    ev.user_ptr = e.user_ptr;
    ev.ni_fail_type = PTL_NI_OK;
    post_event(pt.eq, ev);
}

void Engine::maybe_auto_free(Ni *n, Entry *e) {
    if (!e->auto_unlinked || e->uh_count || e->list != PTL_OVERFLOW_LIST) return;
    if (e->opts() & PTL_ME_UNEXPECTED_HDR_DISABLE) return;
    entry_event(n->pts[e->pt], *e, PTL_EVENT_AUTO_FREE);
}

void Engine::auto_unlink(Ni *n, Pt &pt, Entry *e) {
    detach_entry(n, pt, e);
    announce_unlink(n, pt, e);
}

void Engine::detach_entry(Ni *n, Pt &pt, Entry *e) {
    PTL_TRACE(trace_.get(), "ni%u pt %u auto-unlink %s 0x%x", n->index, e->pt, e->is_me ? "me" : "le",
              e->handle);
    pt.lists[e->list].remove(e);
    e->auto_unlinked = true;
    n->zombies.push_back(e);
}

void Engine::announce_unlink(Ni *n, Pt &pt, Entry *e) {
    entry_event(pt, *e, PTL_EVENT_AUTO_UNLINK);
    maybe_auto_free(n, e);
}

void Engine::free_zombies(Ni *n) {
    auto keep = std::remove_if(n->zombies.begin(), n->zombies.end(), [n](Entry *e) {
        if (e->uh_count || e->transfers) return false;
        n->entries.recycle(split_handle(e->handle).slot);
        return true;
    });
    n->zombies.erase(keep, n->zombies.end());
}

// Removes a claimed unexpected header; its overflow buffer may now be free (L11).
void Engine::consume_header(Ni *n, Pt &pt, UnexpectedHeader *u) {
    pt.unexpected.remove(u);
    --n->unexpected;
    --u->entry->uh_count;
    maybe_auto_free(n, u->entry);
    delete u;
}

int Engine::append(ptl_handle_ni_t nh, ptl_pt_index_t pti, const ptl_me_t *d, bool is_me, ptl_list_t list,
                   void *user_ptr, uint32_t *out) {
    Lock lk(mu_);
    Ni *n = ni_of(nh);
    if (!n || !d || !out || (list != PTL_PRIORITY_LIST && list != PTL_OVERFLOW_LIST)) return PTL_ARG_INVALID;
    if (n->logical() && !n->map_set) return PTL_ARG_INVALID;  // LA1
    auto e = n->entries.make();
    if (int rc = prepare_entry(*n, pti, *d, is_me, *e); rc != PTL_OK) return rc;
    Pt &pt = n->pts[pti];
    // PTL_PT_ONLY_USE_ONCE and PTL_PT_ONLY_TRUNCATE promise what the priority list will hold so
    // that hardware may take shortcuts. This engine takes none, so an entry that breaks the
    // promise is matched exactly as the spec says for its own options, and it is accepted, as
    // the reference implementation does: Open MPI's mtl allocates its receive portal with both
    // options and then appends persistent entries to it.
    if (pt.lists[list].size >= uint32_t(n->limits.max_list_size)) return PTL_LIST_TOO_LONG;
    free_zombies(n);
    e->user_ptr = user_ptr;
    e->list = list;
    e->seq = n->next_seq++;
    const uint32_t slot = n->entries.insert(std::move(e));
    if (slot == UINT32_MAX) return PTL_NO_SPACE;
    Entry *en = n->entries.get(slot, n->entries.gen(slot));
    en->handle = make_handle(is_me ? ObjType::Me : ObjType::Le, n->index, slot, n->entries.gen(slot));
    *out = en->handle;

    const unsigned o = en->opts();
    PTL_TRACE(trace_.get(),
              "ni%u pt %u append %s 0x%x (%s list) bits 0x%llx ignore 0x%llx options 0x%x length %llu",
              n->index, pti, is_me ? "me" : "le", en->handle,
              list == PTL_PRIORITY_LIST ? "priority" : "overflow", (unsigned long long)en->desc.match_bits,
              (unsigned long long)en->desc.ignore_bits, o, (unsigned long long)en->desc.length);
    if (list == PTL_PRIORITY_LIST && pt.unexpected.size) {
        // L4-L6: claim matching unexpected headers, oldest first, before linking.
        const bool inc_rlength =
            is_me && (o & PTL_ME_MANAGE_LOCAL) && (o & PTL_ME_LOCAL_INC_UH_RLENGTH) && !(o & PTL_ME_USE_ONCE);
        bool consumed_once = false;
        bool unlinked = false;
        wait_for_overflow_data(*n, pt, *en);
        for_each_matching_header(*n, pt, *en, [&](UnexpectedHeader *u) {
            const ptl_event_kind_t type = overflow_kind(u->kind);
            if (pt.eq && entry_allows_full(*en, type, true))
                post_event(pt.eq, event_from_header(*u, type, pti, user_ptr, PTL_NI_OK));
            if (uint64_t amt = entry_count_amount(*en, type, true, u->mlength)) ct_add(en->ct, true, amt);
            const uint64_t rlength = u->rlength;
            PTL_TRACE(trace_.get(),
                      "ni%u pt %u %s 0x%x claims an unexpected header: bits 0x%llx from 0x%x:%u len %llu",
                      n->index, pti, is_me ? "me" : "le", en->handle, (unsigned long long)u->match_bits,
                      u->src_nid, u->src_pid, (unsigned long long)u->rlength);
            consume_header(n, pt, u);
            if (o & PTL_ME_USE_ONCE) {
                consumed_once = true;
                return false;
            }
            if (inc_rlength) {
                en->local_offset += rlength;
                if (en->desc.min_free &&
                    en->region.length - std::min(en->local_offset, en->region.length) < en->desc.min_free) {
                    unlinked = true;
                    return false;
                }
            }
            return true;
        });
        if (consumed_once || unlinked) {
            // Not linked; still reports AUTO_UNLINK (L5, I-list 21: no LINK).
            en->auto_unlinked = true;
            entry_event(pt, *en, PTL_EVENT_AUTO_UNLINK);
            n->zombies.push_back(en);
            finish_call();
            return PTL_OK;
        }
    }
    pt.lists[list].add(en);
    // Use-once and locally managed entries are never exported (exportable): the UCT face's
    // posted receives, one per offloaded message, skip the call.
    if (list == PTL_PRIORITY_LIST && !(o & (PTL_ME_USE_ONCE | PTL_ME_MANAGE_LOCAL))) export_entry(n, pt, en);
    entry_event(pt, *en, PTL_EVENT_LINK);
    finish_call();
    return PTL_OK;
}

int Engine::give_slots(uint32_t h, const ptl_size_t *offsets, unsigned count) {
    Lock lk(mu_);
    Ni *n = ni_for_object(h);
    Entry *e = n ? n->entry(h, true) : nullptr;
    if (!e || !e->pooled || (count && !offsets) || count > e->slots.room()) return PTL_ARG_INVALID;
    // Every slot starts at or before the last one that fits (validated before any is given).
    const uint64_t last = e->region.length - e->desc.min_free;
    for (unsigned i = 0; i < count; ++i)
        if (offsets[i] > last) return PTL_ARG_INVALID;
    e->slots.push(offsets, count);
    return PTL_OK;
}

int Engine::unlink(uint32_t h, bool is_me) {
    Lock lk(mu_);
    Ni *n = ni_for_object(h);
    Entry *e = n ? n->entry(h, is_me) : nullptr;
    if (!e) return PTL_ARG_INVALID;
    if (e->auto_unlinked || e->uh_count || e->transfers) return PTL_IN_USE;  // U4, L12
    PTL_TRACE(trace_.get(), "ni%u pt %u unlink %s 0x%x", n->index, e->pt, is_me ? "me" : "le", h);
    Pt &pt = n->pts[e->pt];
    const bool was_exported = e->exported();
    revoke_export(pt, e);  // no peer's access lands once we return (issue 32)
    pt.lists[e->list].remove(e);
    if (was_exported) export_front(n, pt, e);
    n->entries.recycle(split_handle(h).slot);
    return PTL_OK;
}

int Engine::search(ptl_handle_ni_t nh, ptl_pt_index_t pti, const ptl_me_t *d, bool is_me, ptl_search_op_t op,
                   void *user_ptr) {
    Lock lk(mu_);
    Ni *n = ni_of(nh);
    if (!n || !d || (op != PTL_SEARCH_ONLY && op != PTL_SEARCH_DELETE)) return PTL_ARG_INVALID;
    if (n->logical() && !n->map_set) return PTL_ARG_INVALID;
    Entry e;
    if (int rc = prepare_entry(*n, pti, *d, is_me, e); rc != PTL_OK) return rc;
    e.user_ptr = user_ptr;
    Pt &pt = n->pts[pti];
    const bool once = d->options & PTL_ME_USE_ONCE;
    unsigned found = 0;
    wait_for_overflow_data(*n, pt, e);
    for_each_matching_header(*n, pt, e, [&](UnexpectedHeader *u) {
        ++found;
        const ptl_event_kind_t type = op == PTL_SEARCH_ONLY ? PTL_EVENT_SEARCH : overflow_kind(u->kind);
        if (pt.eq && entry_allows_full(e, type, true))
            post_event(pt.eq, event_from_header(*u, type, pti, user_ptr, PTL_NI_OK));
        ct_add(e.ct, true, 1);  // S7: one per match
        if (op == PTL_SEARCH_DELETE) consume_header(n, pt, u);
        return !once;
    });
    PTL_TRACE(trace_.get(), "ni%u pt %u search%s bits 0x%llx ignore 0x%llx: %u unexpected header(s)",
              n->index, pti, op == PTL_SEARCH_DELETE ? "-delete" : "", (unsigned long long)e.desc.match_bits,
              (unsigned long long)e.desc.ignore_bits, found);
    if (!(once && found)) {
        // S5/S6: the terminator, also when a persistent search found matches.
        if (pt.eq && entry_allows_full(e, PTL_EVENT_SEARCH, false)) {
            ptl_event_t ev{};
            ev.type = PTL_EVENT_SEARCH;
            ev.pt_index = pti;
            ev.user_ptr = user_ptr;
            ev.ni_fail_type = PTL_NI_NO_MATCH;
            post_event(pt.eq, ev);
        }
        ct_add(e.ct, false, 1);
    }
    finish_call();
    return PTL_OK;
}

}  // namespace ptl
