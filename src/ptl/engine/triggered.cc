// Triggered operations (§3.16): kept per CT in threshold order and released, in that order
// and in posting order for equal thresholds, when the success count reaches them (TR1-TR7).
// Firing can raise other CTs, so release runs as a work list rather than by recursion.
#include <algorithm>

#include "engine.h"

namespace ptl {

int Engine::triggered(const TrigOp &op, ptl_handle_ct_t trig_ct, ptl_size_t threshold) {
    Lock lk(mu_);
    Ct *t = ct_of(trig_ct);
    if (!t) return PTL_ARG_INVALID;
    Ni *n = t->ni;
    switch (op.kind) {
        case TrigKind::CtInc:
        case TrigKind::CtSet: {
            if (!ct_of(op.ct)) return PTL_ARG_INVALID;
            if (op.kind == TrigKind::CtInc && op.value.success && op.value.failure) return PTL_ARG_INVALID;
            break;
        }
        default: {
            CheckedOp c;
            if (int rc = check_op(op.kind, op.args, c); rc != PTL_OK) return rc;
            break;
        }
    }
    if (n->triggered >= uint32_t(n->limits.max_triggered_ops)) return PTL_NO_SPACE;
    t->triggered.emplace(threshold, op);
    ++n->triggered;
    PTL_TRACE(trace_.get(), "ni%u triggered %s armed on ct 0x%x at %llu (now %llu)", n->index,
              trig_kind_name(op.kind), trig_ct, (unsigned long long)threshold,
              (unsigned long long)t->successes());
    ct_changed(t);  // fires at once if the threshold is already reached (TR7)
    finish_call();
    return PTL_OK;
}

void Engine::fire_triggers() {
    in_triggers_ = true;
    while (!changed_cts_.empty()) {
        Ct *c = changed_cts_.back();
        changed_cts_.pop_back();
        while (!c->triggered.empty() && c->triggered.begin()->first <= c->successes()) {
            TrigOp op = c->triggered.begin()->second;
            PTL_TRACE(trace_.get(), "ni%u triggered %s fires: threshold %llu reached", c->ni->index,
                      trig_kind_name(op.kind), (unsigned long long)c->triggered.begin()->first);
            c->triggered.erase(c->triggered.begin());
            --c->ni->triggered;
            switch (op.kind) {
                case TrigKind::CtInc:
                    if (Ct *d = ct_of(op.ct))
                        ct_add(d, op.value.failure == 0, op.value.failure ? op.value.failure : op.value.success);
                    break;
                case TrigKind::CtSet:
                    if (Ct *d = ct_of(op.ct)) {
                        d->set(op.value);
                        ct_changed(d);
                    }
                    break;
                default:
                    start_op(op.kind, op.args);
                    break;
            }
            // The CT we are draining may have been re-queued by its own chain; keep going.
        }
        changed_cts_.erase(std::remove(changed_cts_.begin(), changed_cts_.end(), c), changed_cts_.end());
    }
    in_triggers_ = false;
}

}  // namespace ptl
