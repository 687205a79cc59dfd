// Counting events (§3.14).
#include <algorithm>

#include "engine.h"
#include "small_vec.h"
#include "wait_until.h"

namespace ptl {

int Engine::ct_alloc(ptl_handle_ni_t h, ptl_handle_ct_t *out) {
    Lock lk(mu_);
    Ni *n = ni_of(h);
    if (!n || !out) return PTL_ARG_INVALID;
    auto ct = std::make_unique<Ct>();
    ct->ni = n;
    const uint32_t slot = n->cts.insert(std::move(ct));
    if (slot == UINT32_MAX) return PTL_NO_SPACE;
    Ct *c = n->cts.get(slot, n->cts.gen(slot));
    c->handle = make_handle(ObjType::Ct, n->index, slot, n->cts.gen(slot));
    *out = c->handle;
    return PTL_OK;
}

int Engine::ct_free(ptl_handle_ct_t h) {
    Lock lk(mu_);
    Ct *c = ct_of(h);
    if (!c) return PTL_ARG_INVALID;
    while (c->refs) {
        lk.unlock();
        sched_yield();
        lk.lock();
        if (!(c = ct_of(h))) return PTL_ARG_INVALID;
    }
    Ni *n = c->ni;
    release_remote_counter(c);  // revokes the exported entries that count here
    n->triggered -= uint32_t(c->triggered.size());
    // Objects still pointing at it stop counting instead of touching freed memory (§3.14.3).
    n->mds.for_each([c](Md &m) {
        if (m.ct == c) m.ct = nullptr;
    });
    n->entries.for_each([c](Entry &en) {
        if (en.ct == c) en.ct = nullptr;
    });
    changed_cts_.erase(std::remove(changed_cts_.begin(), changed_cts_.end(), c), changed_cts_.end());
    n->cts.remove(split_handle(h).slot);
    return PTL_OK;
}

int Engine::ct_cancel_triggered(ptl_handle_ct_t h) {
    Lock lk(mu_);
    Ct *c = ct_of(h);
    if (!c) return PTL_ARG_INVALID;
    c->ni->triggered -= uint32_t(c->triggered.size());
    c->triggered.clear();
    return PTL_OK;
}

int Engine::ct_get(ptl_handle_ct_t h, ptl_ct_event_t *ev) {
    Lock lk(mu_);
    if (!ev || !ct_of(h)) return PTL_ARG_INVALID;
    // Without a progress thread, a PtlCTGet polling loop is what moves data.
    if (!cfg_.progress_thread) progress_locked();
    Ct *c = ct_of(h);
    if (!c) return PTL_ARG_INVALID;
    *ev = c->value();
    lk.unlock();
    // A PtlCTGet loop waits for a value this call cannot know: reading the same counter
    // unchanged is its empty turn.
    static thread_local ptl_handle_ct_t last_h = PTL_INVALID_HANDLE;
    static thread_local ptl_ct_event_t last_v{};
    if (h == last_h && ev->success == last_v.success && ev->failure == last_v.failure) {
        backoff_.empty_poll();
    } else {
        backoff_.reset();
        last_h = h;
        last_v = *ev;
    }
    return PTL_OK;
}

int Engine::ct_poll(const ptl_handle_ct_t *hs, const ptl_size_t *tests, unsigned size, ptl_time_t timeout,
                    ptl_ct_event_t *ev, unsigned *which) {
    if (aborted()) return PTL_ABORTED;  // T5, as in eq_poll
    Lock lk(mu_);
    if (!hs || !tests || size == 0 || !ev) return PTL_ARG_INVALID;
    SmallVec<Ct *, 4> cts(size);
    for (unsigned i = 0; i < size; ++i)
        if (!(cts[i] = ct_of(hs[i]))) return PTL_ARG_INVALID;
    for (Ct *c : cts) ++c->refs;
    auto reached = [&](unsigned i) {
        const ptl_ct_event_t v = cts[i]->value();
        return v.success >= tests[i] || v.failure != 0;
    };
    const int rc = wait_until(
        lk, timeout,
        [&]() -> int {
            for (unsigned i = 0; i < size; ++i) {
                if (reached(i)) {
                    *ev = cts[i]->value();
                    if (which) *which = i;
                    return PTL_OK;
                }
            }
            return -1;
        },
        [&] {
            for (unsigned i = 0; i < size; ++i)
                if (cts[i]->remote.load(std::memory_order_relaxed) && reached(i)) return true;
            return false;
        });
    for (Ct *c : cts) --c->refs;
    lk.unlock();
    if (rc == -2) {
        if (timeout == 0) backoff_.empty_poll();
        return PTL_CT_NONE_REACHED;
    }
    backoff_.reset();
    return rc;
}

int Engine::ct_set(ptl_handle_ct_t h, ptl_ct_event_t v) {
    Lock lk(mu_);
    Ct *c = ct_of(h);
    if (!c) return PTL_ARG_INVALID;
    c->set(v);
    ct_changed(c);
    finish_call();
    return PTL_OK;
}

int Engine::ct_inc(ptl_handle_ct_t h, ptl_ct_event_t v) {
    Lock lk(mu_);
    Ct *c = ct_of(h);
    if (!c || (v.success && v.failure)) return PTL_ARG_INVALID;
    if (v.failure)
        ct_add(c, false, v.failure);
    else
        ct_add(c, true, v.success);
    finish_call();
    return PTL_OK;
}

}  // namespace ptl
