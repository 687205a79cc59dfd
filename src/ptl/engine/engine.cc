// The engine's life: made once per process, counted by PtlInit/PtlFini, aborted by PtlAbort.
// Each object's rules are in its own file: ni.cc, pt.cc, md.cc, eq.cc, ct.cc, lists.cc;
// operations in common_put.cc, initiator.cc and target.cc; wires.cc, progress.cc.
#include "engine.h"

#include "../util/futex.h"
#include "../wire/loopback/loopback_wire.h"
#include "../wire/shm/shm_wire.h"
#include "../wire/tcp/tcp_wire.h"
#include "../wire/verbs/verbs_control.h"
#ifdef PTL_HAVE_VERBS
#include "../wire/verbs/verbs_wire.h"
#endif
#include "progress_thread.h"

namespace ptl {

std::atomic<Engine *> the_engine{nullptr};

Engine &make_engine() {
    static Engine *e = new Engine();
    the_engine.store(e, std::memory_order_release);
    return *e;
}

Engine::Engine()
    : cfg_(Config::from_env()),
      deliver_([this](const InMessage &m) { handle_message(m); }),
      tcp_deliver_([this](const InMessage &m) {
          if (verbs::is_control(m))
              on_verbs_control(m);
          else
              handle_message(m);
      }) {}

Engine::~Engine() = default;

int Engine::init() {
    Lock lk(mu_);
    if (init_refs_.load() == 0) {
        // A fresh initialization after the final PtlFini starts un-aborted (I-list 20).
        cfg_ = Config::from_env();
        backoff_.set_mode(cfg_.wait_yield);
        aborted_.store(false);
    }
    init_refs_.fetch_add(1, std::memory_order_release);
    return PTL_OK;
}

void Engine::fini() {
    Lock lk(mu_);
    if (init_refs_.load() == 0) return;
    if (init_refs_.fetch_sub(1) != 1) return;
    changed_cts_.clear();
    held_ = HeldMessages();  // they name wires that close_physical destroys
    for (auto &n : nis_) {
        delete n;
        n = nullptr;
    }
    lk.unlock();
    close_physical();
}

void Engine::abort() {
    // Async-signal-safe: an atomic store and a futex wake.
    aborted_.store(true, std::memory_order_release);
    event_seq_.fetch_add(1, std::memory_order_release);
    futex_wake_all(&event_seq_);
    if (shm_) shm_->wake();
}

void Engine::wake_sleepers() {
    if (!sleepers_armed_.exchange(false)) return;
    futex_wake_all(&event_seq_);
    if (shm_ && (!cfg_.progress_thread || wire_waiters_.load(std::memory_order_seq_cst))) shm_->wake();
}

// ---------------------------------------------------------------------------------------
// Handle lookups

Ni *Engine::ni_of(ptl_handle_ni_t h) const {
    const HandleParts p = split_handle(h);
    if (p.type != ObjType::Ni) return nullptr;
    Ni *n = nis_[p.ni];
    return (n && n->handle == h) ? n : nullptr;
}

int Engine::atomic_sync() {
    // Atomics are applied by the engine under its lock before their events are posted, so
    // host memory is already up to date (§3.15.8).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return PTL_OK;
}

}  // namespace ptl
