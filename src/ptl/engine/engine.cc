#include "engine.h"

#include <sched.h>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "../runtime/identity.h"
#include "../util/clock.h"
#include "../wire/loopback/loopback_wire.h"
#include "../wire/shm/shm_wire.h"
#include "../wire/tcp/tcp_wire.h"
#include "../wire/verbs/verbs_control.h"
#ifdef PTL_HAVE_VERBS
#include "../wire/verbs/verbs_wire.h"
#endif
#include "progress_thread.h"
#include "small_vec.h"

namespace ptl {

namespace {

void futex_wait(std::atomic<uint32_t> *w, uint32_t v, long timeout_us) {
    struct timespec ts {
        timeout_us / 1000000, (timeout_us % 1000000) * 1000
    };
    syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, v, timeout_us >= 0 ? &ts : nullptr, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t> *w) {
    syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

inline void cpu_relax() {
    __builtin_ia32_pause();
}

// NI creation is where configuration meets the system; say why it failed, once, on stderr.
void report(const std::string &what) {
    std::fprintf(stderr, "portals: %s\n", what.c_str());
}

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

void Engine::on_verbs_control(const InMessage &m) {
#ifdef PTL_HAVE_VERBS
    if (verbs_) {
        verbs_->on_control(m);
        return;
    }
#endif
    const verbs::ControlMsg c = verbs::control_of(m);
    if (c.kind == uint8_t(verbs::ControlKind::Connect) && tcp_) verbs::send_reject(*tcp_, m.from, c.epoch);
}
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
    if (!cfg_.progress_thread && shm_) shm_->wake();
}

// ---------------------------------------------------------------------------------------
// Physical NI and wires

int Engine::open_physical(ptl_pid_t pid) {
    if (cfg_.wire == WireChoice::Invalid) {
        report("PTL_WIRE=" + cfg_.wire_name + " is not one of auto, shm, tcp, verbs");
        return PTL_ARG_INVALID;
    }
    std::string err;
    const uint32_t nid = identity::select_nid(cfg_.iface, &iface_name_, &err);
    if (!nid) {
        report("PTL_IFACE: " + err);
        return PTL_ARG_INVALID;
    }
    int fd = -1;
    const int64_t got = identity::acquire_pid(nid, pid, &fd, &err);
    if (got < 0) {
        if (err == "in use") return PTL_PID_IN_USE;  // an answer the caller handles, not a fault
        report("no pid: " + err);
        return PTL_NO_SPACE;
    }
    self_ = {nid, uint32_t(got)};
    uid_ = getuid();
    shm::ShmConfig sc;
    sc.ncells = cfg_.shm_cells;
    sc.cell_size = cfg_.shm_cell_size;
    sc.export_bytes = cfg_.direct ? kExportAreaBytes : 0;
    shm_ = shm::ShmWire::create(self_, sc, &err);
    if (!shm_) {
        report("shared-memory wire: " + err);
        identity::release_pid(nid, uint32_t(got), fd);
        return PTL_NO_SPACE;
    }
    open_exports();
    if (cfg_.wire != WireChoice::Shm) {
        tcp::TcpConfig tc;
        tc.port_base = cfg_.tcp_port_base;
        tc.timeout_ms = cfg_.tcp_timeout_ms;
        // Without a progress thread a corked frame would wait for the application's next call.
        tc.cork_ns = cfg_.progress_thread ? uint64_t(cfg_.tcp_cork_us) * 1000 : 0;
        tcp_ = tcp::TcpWire::create(
            self_, tc, [this] { shm_->wake(); }, &err);
        if (!tcp_) {
            // Without it this process still reaches its own host; only an explicit request
            // for tcp makes that fatal.
            report("tcp wire: " + err +
                   (cfg_.wire == WireChoice::Tcp ? "" : "; other hosts are unreachable"));
            if (cfg_.wire == WireChoice::Tcp) {
                shm_.reset();
                identity::release_pid(nid, uint32_t(got), fd);
                return PTL_NO_SPACE;
            }
        }
    }
#ifdef PTL_HAVE_VERBS
    if (tcp_ && (cfg_.wire == WireChoice::Auto || cfg_.wire == WireChoice::Verbs)) {
        verbs::VerbsConfig vc;
        vc.device = cfg_.verbs_device;
        vc.gid_index = cfg_.verbs_gid_index;
        vc.rx_depth = cfg_.verbs_rx_depth;
        vc.buf_size = cfg_.verbs_buf_size;
        vc.ack_timeout = uint8_t(cfg_.verbs_ack_timeout);
        vc.reg_cache = cfg_.verbs_reg_cache;
        vc.reg_cache_max = cfg_.verbs_reg_cache_max;
        vc.stats = cfg_.verbs_stats;
        vc.timeout_ms = cfg_.tcp_timeout_ms;
        verbs_ = verbs::VerbsWire::create(
            self_, vc, tcp_.get(), [this] { shm_->wake(); }, &err);
        // Auto without a device is an ordinary host without RDMA; a named device or
        // PTL_WIRE=verbs that cannot be had is the user's mistake to hear about.
        if (!verbs_ && (cfg_.wire == WireChoice::Verbs || !cfg_.verbs_device.empty()))
            report("verbs wire: " + err + (cfg_.wire == WireChoice::Verbs ? "" : "; other hosts use tcp"));
        if (!verbs_ && cfg_.wire == WireChoice::Verbs) {
            tcp_.reset();
            shm_.reset();
            identity::release_pid(nid, uint32_t(got), fd);
            return PTL_NO_SPACE;
        }
    }
#else
    if (cfg_.wire == WireChoice::Verbs) {
        report("PTL_WIRE=verbs: this libportals4 was built without verbs (libibverbs-dev)");
        tcp_.reset();
        shm_.reset();
        identity::release_pid(nid, uint32_t(got), fd);
        return PTL_NO_SPACE;
    }
#endif
    pid_lock_fd_ = fd;
    open_remote();
#ifdef PTL_HAVE_VERBS
    // A system call per poll for the few messages tcp still carries would cost RDMA polls
    // their latency (an emulated guest: 10-20 us each).
    if (verbs_ && tcp_) tcp_->set_setup_only(true);
#endif
    if (!trace_ && !cfg_.trace_dir.empty()) {
        trace_ = Trace::open(cfg_.trace_dir, cfg_.trace_mb, &err);
        if (!trace_) report("PTL_TRACE: " + err + "; not tracing");
    }
    if (trace_) {
        trace_->set_identity(nid, uint32_t(got));
        trace_->notable("open: pid %u on %s, PTL_WIRE=%s, tcp %s", uint32_t(got),
                        iface_name_.empty() ? "-" : iface_name_.c_str(), cfg_.wire_name.c_str(),
                        tcp_ ? "on" : "off");
    }
    identity::remove_stale_rings();  // left by processes of this user that were killed
    loop_ = std::make_unique<LoopbackWire>(self_, [this] {
        if (shm_ && !completing_own_) shm_->wake();
    });
    phys_open_ = true;
    if (cfg_.progress_thread) progress_thread_ = std::make_unique<ProgressThread>(*this, cfg_.progress_cpu);
    if (tcp_)  // corked frames (TcpConfig::cork_ns) leave by their deadline
        tcp_->set_cork_hook([this](uint64_t due_ns) {
            if (progress_thread_) progress_thread_->flush_by(due_ns);
        });
    return PTL_OK;
}

void Engine::close_physical() {
    progress_thread_.reset();  // joins; must not hold mu_
    Lock lk(mu_);
    if (!phys_open_) return;
    quiet_.store(false, std::memory_order_release);  // lock-free polls must not touch the wires
    loop_.reset();
    peer_tables_.clear();  // they point into peers' segments, which shm_ maps
    last_table_ = nullptr;
    forget_put_route();
    exports_ = nullptr;
    holding_published_ = false;
    close_remote();
#ifdef PTL_HAVE_VERBS
    verbs_.reset();  // sends through tcp_, wakes through shm_
#endif
    tcp_.reset();  // its watcher wakes through shm_
    shm_.reset();
    identity::release_pid(self_.nid, self_.pid, pid_lock_fd_);
    pid_lock_fd_ = -1;
    phys_open_ = false;
    PTL_TRACE_NOTABLE(trace_.get(), "close");
}

Wire *Engine::wire_for(PeerId p) {
    if (p == self_) return loop_.get();
#ifdef PTL_HAVE_VERBS
    if (verbs_ && (p.nid != self_.nid || cfg_.wire == WireChoice::Verbs)) return verbs_.get();
#endif
    if (p.nid == self_.nid && cfg_.wire != WireChoice::Tcp) return shm_.get();
    return tcp_.get();
}

bool Engine::peer_gone(PeerId p) {
    Wire *w = wire_for(p);
    return !w || w->peer_dead(p);
}

void Engine::inject(const InMessage &m) {
    Lock lk(mu_);
    if (phys_open_) handle_message(m);
}

int Engine::nid_reachable(ptl_handle_ni_t h, ptl_nid_t nid) {
    Lock lk(mu_);
    if (!ni_of(h)) return PTL_ARG_INVALID;
    return nid == self_.nid || tcp_ != nullptr;  // our node: loopback/shm (or tcp, which then exists)
}

int Engine::set_notify_drops(ptl_handle_ni_t h, bool enable) {
    Lock lk(mu_);
    Ni *n = ni_of(h);
    if (!n) return PTL_ARG_INVALID;
    n->notify_drops = enable;
    return PTL_OK;
}

int Engine::peer_alive(ptl_handle_ni_t h, ptl_process_t peer) {
    Lock lk(mu_);
    if (!ni_of(h)) return PTL_ARG_INVALID;
    progress_locked();  // a closed connection is news only once a wire reads it
    return !peer_gone({peer.phys.nid, peer.phys.pid});
}

void Engine::sleep_for_traffic(long timeout_us, const std::function<bool()> &also_due) {
    // Peers' direct counts ring only a sleeping engine: one that counted just before we went
    // to sleep left the flag up instead.
    const std::function<bool()> counted = [this, &also_due] {
        return (exports_ && exports_->header.counted.load(std::memory_order_seq_cst)) ||
               (also_due && also_due());
    };
    if (tcp_)
        shm_->wait_for_traffic(
            timeout_us,
            [this] {
                tcp_->arm_wakeup();
#ifdef PTL_HAVE_VERBS
                // Arming looks at the completion queue once more, which progress owns.
                if (verbs_) {
                    Lock lk(mu_);
                    if (verbs_) verbs_->arm_wakeup();
                }
#endif
            },
            counted);
    else
        shm_->wait_for_traffic(timeout_us, {}, counted);
}

bool Engine::send(PeerId to, const proto::Header &h, const struct iovec *payload, int n, bool deferrable) {
    Wire *w = wire_for(to);
    if (!w) return false;
    return deferrable ? w->send_deferrable(to, &h, sizeof h, payload, n)
                      : w->send(to, &h, sizeof h, payload, n);
}

// ---------------------------------------------------------------------------------------
// Handle lookups

Ni *Engine::ni_of(ptl_handle_ni_t h) const {
    const HandleParts p = split_handle(h);
    if (p.type != ObjType::Ni) return nullptr;
    Ni *n = nis_[p.ni];
    return (n && n->handle == h) ? n : nullptr;
}

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
    event_seq_.fetch_add(1, std::memory_order_release);  // its EQs are gone (app_progress_take)
    revoke_exports(n, 0, true);
    n->cts.for_each([this](Ct &c) { release_remote_counter(&c); });
    nis_[n->index] = nullptr;
    if (route_.md && route_.md->ni == n) forget_put_route();
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
    forget_put_route();
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

// ---------------------------------------------------------------------------------------
// Memory descriptors (§3.10)

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
    if (m->pending) return PTL_IN_USE;  // a SEND or REPLY is still due (I-list 19)
    m->ni->mds.remove(split_handle(h).slot);
    if (route_.md == m) forget_put_route();
    return PTL_OK;
}

// ---------------------------------------------------------------------------------------
// Event queues (§3.13)

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

// ---------------------------------------------------------------------------------------
// Counting events (§3.14)

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

// An operation whose target is this process needs no other thread (issue 32): a caller that
// sleeps or spins on its own memory right after the call must find it done, also when every
// CPU is busy and the progress thread is not scheduled for milliseconds. The loopback queue
// is delivered in order, so what the process queued to itself before (a progress had not run
// yet) lands first; responses and the triggers deliveries reach are completed in the same
// call. Bounded: a chain of triggered operations that keeps feeding itself is left to progress.
void Engine::complete_own_operations() {
    constexpr int kMaxRounds = 64;
    // A message held here starts its grace period now, not at the coarse clock's last reading
    // (an API call is not a poll that refreshes it).
    coarse_now_ns_ = std::max(coarse_now_ns_, monotonic_ns());
    coarse_calls_ = 0;
    completing_own_ = true;
    for (int round = 0; round < kMaxRounds && loop_->pending(); ++round) {
        loop_->progress(deliver_);
        run_triggers();
    }
    completing_own_ = false;
    if (loop_->pending()) shm_->wake();
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

int Engine::atomic_sync() {
    // Atomics are applied by the engine under its lock before their events are posted, so
    // host memory is already up to date (§3.15.8).
    std::atomic_thread_fence(std::memory_order_seq_cst);
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

// ---------------------------------------------------------------------------------------
// Progress and waiting

int Engine::progress() {
    Lock lk(mu_);
    return progress_locked();
}

int Engine::app_progress() {
    Lock lk(mu_);
    return app_progress_locked();
}

namespace {

// app_progress_locked samples the clock on one call in kAppSampleCalls; the call before notes
// when it returned.
constexpr uint32_t kAppSampleCalls = 16;

}  // namespace

// One lock for a poll and the events it produced: a UCT progress call made two round trips
// through the engine lock (and two handle checks) for what is one step to its caller.
// A poll that can find nothing takes no lock at all: its EQ was empty when this thread last
// looked, no event was posted since, the shm ring holds no message, and nothing else waits for
// a progress (quiet_). Idle polls are most of a sender's calls and all of a waiting receiver's;
// the lock, the handle lookup and the walk over the wires were ~500 instructions each. The
// sampled calls still take the lock, so the clock samples, liveness checks and rationed tcp
// accepts keep their pace.
int Engine::app_progress_take(ptl_handle_eq_t h, ptl_event_t *evs, unsigned max, unsigned *taken) {
    const uint32_t calls = app_calls_.load(std::memory_order_relaxed) + 1;
    const uint32_t turn = calls % kAppSampleCalls;
    if (turn != 0 && turn != kAppSampleCalls - 1 && evs && max && quiet_.load(std::memory_order_acquire) &&
        empty_eqs_.still_empty(h, event_seq_.load(std::memory_order_acquire)) && !shm_->may_have_incoming()) {
        app_calls_.store(calls, std::memory_order_relaxed);
        if (taken) *taken = 0;
        return PTL_EQ_EMPTY;
    }
    Lock lk(mu_);
    Eq *e = eq_of(h);
    if (!e || !evs || max == 0) return PTL_ARG_INVALID;
    app_progress_locked();
    const int rc = take_events(e, evs, max, taken);
    empty_eqs_.note(h, e->count == 0, event_seq_.load(std::memory_order_relaxed));
    return rc;
}

int Engine::app_progress_locked() {
    // The progress thread stays out of the way only of an application that polls
    // continuously; one that calls in now and then (a server checking its socket every
    // millisecond) must not hold up the peers it serves. What tells them apart is the time
    // the application spends away between calls, not the time between calls: a poll of a
    // slow machine's wires (an emulated guest's system calls) is long itself, and counting it
    // had the progress thread compete for the CPU with an application that never stopped
    // polling. Sampled every kAppSampleCalls calls (the clock costs as much as a poll): the
    // call before a sampled one notes when it returned.
    const uint32_t calls = app_calls_.load(std::memory_order_relaxed) + 1;
    app_calls_.store(calls, std::memory_order_relaxed);
    const uint32_t turn = calls % kAppSampleCalls;
    if (turn == 0) {
        const uint64_t t = monotonic_ns();
        const uint64_t away = t > app_returned_ns_ ? t - app_returned_ns_ : 0;
        last_poll_ns_.store(t, std::memory_order_relaxed);
        const uint64_t avg = app_poll_gap_ns_.load(std::memory_order_relaxed);
        app_poll_gap_ns_.store(avg - avg / 8 + std::min<uint64_t>(away, 1000000000ull) / 8,
                               std::memory_order_relaxed);
        return progress_locked(t);
    }
    const int work = progress_locked();
    if (turn == kAppSampleCalls - 1) app_returned_ns_ = monotonic_ns();
    return work;
}

int Engine::eq_grow(ptl_handle_eq_t h, ptl_size_t count) {
    Lock lk(mu_);
    Eq *e = eq_of(h);
    if (!e) return PTL_ARG_INVALID;
    if (count > kMaxEqEvents) return PTL_NO_SPACE;
    e->grow(count);
    return PTL_OK;
}

int Engine::eq_take(ptl_handle_eq_t h, ptl_event_t *evs, unsigned max, unsigned *taken) {
    Lock lk(mu_);
    Eq *e = eq_of(h);
    if (!e || !evs || max == 0) return PTL_ARG_INVALID;
    return take_events(e, evs, max, taken);
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

uint64_t Engine::read_coarse_clock() {
    coarse_calls_ = 0;
    return coarse_now_ns_ = monotonic_ns();
}

int Engine::progress_locked(uint64_t now_ns) {
    if (!phys_open_) return 0;
    uint64_t t;
    if (now_ns) {
        // A fresh reading restarts the coarse clock's count: an application's polls, sampled
        // every kAppSampleCalls, then need no reading of their own in between (a third of
        // the clock reads of a busy poller, perf: clock_gettime 2-4% of its time).
        t = coarse_now_ns_ = std::max(coarse_now_ns_, now_ns);
        coarse_calls_ = 0;
    } else {
        t = coarse_now();
    }
    int work = 0;
    if (!held_.empty()) work += replay_held(t);
    if (exports_ && exports_->header.counted.load(std::memory_order_relaxed)) [[unlikely]]
        take_remote_counts();
    if (!nic_cts_.empty()) [[unlikely]]
        take_nic_counts();
    if (holding_published_ && held_.empty()) {
        holding_published_ = false;
        set_holding(false);
    }
    if (loop_->pending()) work += loop_->progress(deliver_);
    work += shm_->progress_with([this](const InMessage &m) { handle_message(m); });
    if (const uint64_t bad = shm_->take_malformed()) count_malformed(bad);
    if (tcp_) {
        work += tcp_->progress(tcp_deliver_, t);
        if (const uint64_t bad = tcp_->take_malformed()) count_malformed(bad);
    }
#ifdef PTL_HAVE_VERBS
    if (verbs_) {
        work += verbs_->progress(deliver_);
        if (const uint64_t bad = verbs_->take_malformed()) count_malformed(bad);
    }
#endif
    run_triggers();
    if (t - last_liveness_check_ns_ > uint64_t(cfg_.liveness_ms) * 1000000ull) {
        last_liveness_check_ns_ = t;
        check_dead_peers();
        backoff_.set_local_processes(uint32_t(shm_->peer_count() + 1));
    }
    note_quiet();
    return work;
}

void Engine::note_send_left_work() {
    // A message to ourselves, one the shm ring had no room for, a tcp connection or corked
    // data (triggers the operation fired have run already).
    if (loop_->pending() || shm_->has_backlog() || (tcp_ && !tcp_->idle()))
        quiet_.store(false, std::memory_order_release);
}

void Engine::note_quiet() {
    bool quiet = phys_open_ && held_.empty() && !loop_->pending() && !shm_->has_backlog() &&
                 changed_cts_.empty() && (!tcp_ || tcp_->idle());
#ifdef PTL_HAVE_VERBS
    quiet = quiet && !verbs_;
#endif
    quiet_.store(quiet, std::memory_order_release);
}

// Runs `ready` (under the lock) until it returns >= 0, the timeout passes (-2) or PtlAbort
// (PTL_ABORTED). Callers poll for a short while first, then sleep.
template <typename Ready, typename Peek>
int Engine::wait_until(Lock &lk, ptl_time_t timeout_ms, Ready &&ready, Peek &&peek) {
    const bool forever = timeout_ms == PTL_TIME_FOREVER;
    const uint64_t start = monotonic_ns();
    const uint64_t deadline = forever ? UINT64_MAX : start + uint64_t(timeout_ms) * 1000000ull;
    const uint64_t spin_end = start + uint64_t(cfg_.wait_spin_us) * 1000ull;
    bool polling = false;
    // A caller that returns is likely to poll again soon (a ping-pong loop): the progress
    // thread stays parked and notices the polling has stopped by itself. Only a caller about
    // to sleep needs it awake now.
    auto stop_polling = [&](bool going_to_sleep = false) {
        if (polling) {
            polling = false;
            // A caller about to sleep hands progress back at once.
            last_poll_ns_.store(going_to_sleep ? 0 : monotonic_ns(), std::memory_order_relaxed);
            if (!going_to_sleep) app_poll_gap_ns_.store(0, std::memory_order_relaxed);  // it spun
            if (active_pollers_.fetch_sub(1) == 1 && going_to_sleep && progress_thread_)
                progress_thread_->poke();
        }
    };
    for (;;) {
        if (aborted()) {
            stop_polling();
            return PTL_ABORTED;
        }
        const uint64_t t = monotonic_ns();
        progress_locked(t);
        const int r = ready();
        if (r >= 0) {
            stop_polling();
            return r;
        }
        if (t >= deadline) {
            stop_polling();
            return -2;
        }
        if (t < spin_end) {
            if (!polling) {
                polling = true;
                active_pollers_.fetch_add(1);
            }
            lk.unlock();
            if (backoff_.should_yield()) {
                sched_yield();
            } else if constexpr (std::is_same_v<std::decay_t<Peek>, NothingToPeek>) {
                cpu_relax();
            } else {
                // A count peers make directly needs no progress to be seen: watch it (and the
                // ring, for what does) instead of polling the wires, which is what would
                // delay noticing it.
                for (int k = 0; k < 256 && !peek() && !shm_->may_have_incoming(); ++k) cpu_relax();
            }
            lk.lock();
            continue;
        }
        stop_polling(true);
        const uint32_t seq = event_seq_.load(std::memory_order_seq_cst);
        sleepers_armed_.store(true, std::memory_order_seq_cst);
        lk.unlock();
        long us = forever ? 100000 : long(std::min<uint64_t>((deadline - t) / 1000, 100000));
        // Counts peers add by RDMA wake nobody: a waiter looks again every millisecond.
        if (!nic_cts_.empty()) us = std::min(us, 1000L);
        if (us < 1) us = 1;
        if (cfg_.progress_thread) {
            futex_wait(&event_seq_, seq, us);
        } else {
            sleep_for_traffic(std::min(us, 1000L));
        }
        lk.lock();
    }
}

}  // namespace ptl
