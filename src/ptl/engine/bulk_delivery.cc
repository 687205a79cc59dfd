// Bulk deliveries (bulk_delivery.h): their completion, and the initiators they hold back.
#include "bulk_delivery.h"

#include <utility>

#include "engine.h"
#include "match.h"

namespace ptl {

void Engine::on_bulk_done(uint64_t cookie, bool ok) {
    auto it = bulk_deliveries_.find(cookie);
    if (it == bulk_deliveries_.end()) return;
    const std::unique_ptr<BulkDelivery> d = std::move(it->second);
    bulk_deliveries_.erase(it);
    finish_bulk_delivery(*d, ok);
    end_bulk_hold(d->from);
}

void Engine::finish_bulk_delivery(const BulkDelivery &delivery, bool ok) {
    const BulkDelivery *d = &delivery;
    Ni *n = d->ni;
    Entry *e = d->entry;
    Pt &pt = n->pts[e->pt];
    const proto::Header &h = d->header;
    const InMessage m{d->from, &d->header, sizeof d->header, nullptr, 0, d->via};
    const bool put = h.op == proto::kPut;
    if (d->eq) --d->eq->promised;
    const ptl_ni_fail_t fail = ok ? PTL_NI_OK : PTL_NI_SEGV;  // B6: the memory could not be reached
    const ptl_list_t list = d->list;
    post_comm_event(n, pt, e, m, h, put ? PTL_EVENT_PUT : PTL_EVENT_GET, e->region.address_at(d->offset),
                    d->mlength, fail, list);
    if (d->uh) {
        d->uh->pending_bulk = false;
        --pending_overflow_;
    }
    if (trace_) [[unlikely]]
        trace_delivery(n, m, h, e, list, fail, d->mlength, d->offset, d->uh != nullptr);
    --e->transfers;
    if (d->exhausted) announce_unlink(n, pt, e);
    respond_to(m, h, fail, d->mlength, d->offset, list, nullptr, 0, put ? 0 : proto::kDataWritten);
}

void Engine::begin_bulk_hold(PeerId from) {
    ++bulk_holds_[from].inflight;
    if (!holding_published_) {
        // Peers that go direct must not overtake the transfer either.
        holding_published_ = true;
        set_holding(true);
    }
}

bool Engine::hold_for_bulk(const InMessage &m) {
    auto it = bulk_holds_.find(m.from);
    if (it == bulk_holds_.end()) return false;
    BulkHold &hold = it->second;
    hold.queue.push(m, 0);
    if (hold.queue.size() >= cfg_.bulk_hold_max && !hold.withheld && m.via) {
        hold.withheld = m.via;
        m.via->withhold_credits(m.from, true);
    }
    return true;
}

void Engine::release_bulk_hold_credits(PeerId from, BulkHold &hold, bool ending) {
    if (hold.withheld && (ending || hold.queue.size() <= cfg_.bulk_hold_max / 2))
        std::exchange(hold.withheld, nullptr)->withhold_credits(from, false);
}

void Engine::wait_for_overflow_data(Ni &n, Pt &pt, const Entry &e) {
    while (pending_overflow_) {
        const UnexpectedHeader *moving = nullptr;
        for_each_matching_header(n, pt, e, [&](UnexpectedHeader *u) {
            if (u->pending_bulk) moving = u;
            return !moving;
        });
        if (!moving) return;
        wait_for_bulk([moving](const BulkDelivery &d) { return d.uh == moving; });
    }
}

void Engine::wait_for_bulk(const std::function<bool(const BulkDelivery &)> &matches) {
    auto any = [&] {
        for (const auto &[cookie, d] : bulk_deliveries_)
            if (matches(*d)) return true;
        return false;
    };
    while (any()) progress_locked();
}

}  // namespace ptl
