// Event queues (§3.13): allocation, posting, taking and waiting.
#include <unistd.h>

#include <algorithm>

#include "engine.h"
#include "progress_thread.h"
#include "small_vec.h"
#include "wait_until.h"

namespace ptl {

int Engine::eq_alloc(ptl_handle_ni_t h, ptl_size_t count, ptl_handle_eq_t *out) {
    Lock lk(mu_);
    Ni *n = ni_of(h);
    if (!n || !out || count == 0) return PTL_ARG_INVALID;
    if (count > kMaxEqEvents) return PTL_NO_SPACE;
    // Each flow-controlled PT attached later adds its own slot for PT_DISABLED (EQ4).
    auto eq = std::make_unique<Eq>(count);
    eq->ni = n;
    eq->grow_limit = std::max<uint64_t>(count, std::min<uint64_t>(uint64_t(cfg_.eq_grow_max), kMaxEqEvents));
    const uint32_t slot = n->eqs.insert(std::move(eq));
    if (slot == UINT32_MAX) return PTL_NO_SPACE;
    Eq *e = n->eqs.get(slot, n->eqs.gen(slot));
    e->handle = make_handle(ObjType::Eq, n->index, slot, n->eqs.gen(slot));
    *out = e->handle;
    return PTL_OK;
}

int Engine::eq_free(ptl_handle_eq_t h) {
    Lock lk(mu_);
    Eq *e = eq_of(h);
    if (!e) return PTL_ARG_INVALID;
    // After PtlAbort, blocked callers are leaving; wait for them (§3.13.6).
    while (e->refs) {
        lk.unlock();
        sched_yield();
        lk.lock();
        if (!(e = eq_of(h))) return PTL_ARG_INVALID;
    }
    event_seq_.fetch_add(1, std::memory_order_release);  // lock-free polls of it must look again
    // The user should have detached it (§3.13.6); if not, events for it are dropped rather
    // than written into freed memory.
    for (Pt &pt : e->ni->pts)
        if (pt.eq == e) pt.eq = nullptr;
    e->ni->mds.for_each([e](Md &m) {
        if (m.eq == e) m.eq = nullptr;
    });
    for (auto &[cookie, d] : bulk_deliveries_)
        if (d->eq == e) d->eq = nullptr;
    e->ni->eqs.remove(split_handle(h).slot);
    return PTL_OK;
}

int Engine::eq_get(ptl_handle_eq_t h, ptl_event_t *ev) {
    Lock lk(mu_);
    Eq *e = eq_of(h);
    if (!e || !ev) return PTL_ARG_INVALID;
    if (e->waiters) return PTL_EQ_EMPTY;  // a blocked PtlEQWait has priority (§3.13.7)
    // Events already queued are returned as they are: a caller draining the EQ drives the
    // wires once, when it finds it empty, not once per event.
    if (e->count) {
        backoff_.reset();
        return pop_event(e, ev);
    }
    progress_locked();
    if (!(e = eq_of(h))) return PTL_ARG_INVALID;
    if (e->waiters) return PTL_EQ_EMPTY;
    const int rc = pop_event(e, ev);
    if (rc == PTL_EQ_EMPTY) {
        lk.unlock();
        backoff_.empty_poll();
    } else {
        backoff_.reset();
    }
    return rc;
}

int Engine::eq_poll(const ptl_handle_eq_t *hs, unsigned size, ptl_time_t timeout, ptl_event_t *ev,
                    unsigned *which) {
    // After PtlAbort every wait returns at once (T5), whatever it is given: clients free their
    // EQs and CTs while leaving and may still wait on a freed handle.
    if (aborted()) return PTL_ABORTED;
    Lock lk(mu_);
    if (!hs || size == 0 || !ev) return PTL_ARG_INVALID;
    SmallVec<Eq *, 4> eqs(size);
    for (unsigned i = 0; i < size; ++i)
        if (!(eqs[i] = eq_of(hs[i]))) return PTL_ARG_INVALID;
    for (Eq *e : eqs) ++e->refs, ++e->waiters;
    const int rc = wait_until(lk, timeout, [&]() -> int {
        for (unsigned i = 0; i < size; ++i) {
            if (eqs[i]->count) {
                if (which) *which = i;
                return pop_event(eqs[i], ev);
            }
        }
        return -1;
    });
    for (Eq *e : eqs) --e->refs, --e->waiters;
    lk.unlock();
    if (rc == -2) {
        if (timeout == 0) backoff_.empty_poll();  // a polling loop's empty turn
        return PTL_EQ_EMPTY;
    }
    backoff_.reset();
    return rc;
}

void Engine::post_event(Eq *eq, const ptl_event_t &ev) {
    if (!eq) return;
    eq->push(ev);
    event_posted(eq);
}

void Engine::event_posted(Eq *eq) {
    if (eq->notify_fd >= 0) {
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t n = ::write(eq->notify_fd, &one, sizeof(one));
        eq->notify_fd = -1;
    }
    notify_waiters();
}

int Engine::eq_grow(ptl_handle_eq_t h, ptl_size_t count) {
    Lock lk(mu_);
    Eq *e = eq_of(h);
    if (!e) return PTL_ARG_INVALID;
    if (count > kMaxEqEvents) return PTL_NO_SPACE;
    e->grow(count);
    return PTL_OK;
}

// A take that can find nothing takes no lock (as app_progress_take's idle polls): the UCT
// face takes from its EQ before and after every receive it posts, where the EQ is almost
// always still empty (two lock round trips, ~300 instructions per offloaded receive).
int Engine::eq_take(ptl_handle_eq_t h, ptl_event_t *evs, unsigned max, unsigned *taken) {
    if (evs && max && empty_eqs_.still_empty(h, event_seq_.load(std::memory_order_acquire))) {
        if (taken) *taken = 0;
        return PTL_EQ_EMPTY;
    }
    Lock lk(mu_);
    Eq *e = eq_of(h);
    if (!e || !evs || max == 0) return PTL_ARG_INVALID;
    const int rc = take_events(e, evs, max, taken);
    empty_eqs_.note(h, e->count == 0, event_seq_.load(std::memory_order_relaxed));
    return rc;
}

int Engine::pop_event(Eq *e, ptl_event_t *ev) {
    const int rc = e->pop(ev);
    if (rc != PTL_EQ_EMPTY && ev->type == PTL_EVENT_AUTO_UNLINK) [[unlikely]]
        note_unlink_read(e, *ev);
    return rc;
}

// The application may now be replacing the entry: held_messages.h.
void Engine::note_unlink_read(Eq *e, const ptl_event_t &ev) {
    if (e->ni && ev.pt_index < e->ni->pts.size()) e->ni->pts[ev.pt_index].unlink_read_ns = monotonic_ns();
}

int Engine::take_events(Eq *e, ptl_event_t *evs, unsigned max, unsigned *taken) {
    unsigned n = 0;
    int rc = PTL_EQ_EMPTY;
    // A blocked PtlEQWait has priority, as in eq_get. Only the first event taken can follow
    // an overflow: no event is posted while the lock is held.
    if (!e->waiters) {
        bool dropped = false;
        n = e->pop_many(evs, max, &dropped);
        if (n) rc = dropped ? PTL_EQ_DROPPED : PTL_OK;
        for (unsigned i = 0; i < n; ++i)
            if (evs[i].type == PTL_EVENT_AUTO_UNLINK) [[unlikely]]
                note_unlink_read(e, evs[i]);
    }
    if (taken) *taken = n;
    return rc;
}

int Engine::eq_arm(ptl_handle_eq_t h, int fd) {
    Lock lk(mu_);
    Eq *e = eq_of(h);
    if (!e || fd < 0) return PTL_ARG_INVALID;
    if (!progress_thread_) return PTL_FAIL;  // nobody would deliver while the caller sleeps
    progress_locked();
    if (e->count) return PTL_IN_USE;
    e->notify_fd = fd;
    // The caller is about to sleep: the progress thread must deliver from now on.
    last_poll_ns_.store(0, std::memory_order_relaxed);
    progress_thread_->poke();
    return PTL_OK;
}

}  // namespace ptl
