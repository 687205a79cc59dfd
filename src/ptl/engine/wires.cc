// The physical NI: the process's identity and the wires that reach its peers (loopback, shm,
// tcp, verbs), opened with the first NI and closed with the last PtlFini.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "../runtime/identity.h"
#include "../wire/cma.h"
#include "../wire/loopback/loopback_wire.h"
#include "../wire/shm/shm_wire.h"
#include "../wire/tcp/tcp_wire.h"
#include "../wire/verbs/verbs_control.h"
#ifdef PTL_HAVE_VERBS
#include "../wire/verbs/verbs_wire.h"
#endif
#include "engine.h"
#include "progress_thread.h"

namespace ptl {

namespace {

// NI creation is where configuration meets the system; say why it failed, once, on stderr.
void report(const std::string &what) {
    std::fprintf(stderr, "portals: %s\n", what.c_str());
}

}  // namespace

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

namespace {

// Yama's ptrace_scope 2 and 3 refuse cross-memory attach to other processes (our own memory
// stays open); 1 lets peers in once we consent (the shm wire does).
bool peers_may_attach() {
    int ptrace_scope = 0;
    if (FILE *f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r")) {
        if (std::fscanf(f, "%d", &ptrace_scope) != 1) ptrace_scope = 0;
        std::fclose(f);
    }
    return ptrace_scope < 2;
}

}  // namespace

// PTL_SHM_COPY_MAX=auto. Memory a peer cannot map moves through the ring (two copies, as
// UCX's sm) or by one cross-memory attach, whichever this machine makes faster: measured on
// two VMs of the project (issue 58), 64 KiB by process_vm_readv took 10.5 memcpys on an AMD
// EPYC guest, where the ring won up to 256 KiB (MPI one-way 7.6-8.6 us at 256 KiB against
// 18-20), and 2.1 on an Intel Xeon guest, where cross-memory attach won from 32 KiB (Open MPI
// 256 KiB 14.5 us against the ring's 26.5; UCX's sm 12.3). The ring copies twice and its
// lines cross cores: cross-memory attach wins once it costs less than ~4 copies.
void Engine::choose_shm_copy_max() {
    constexpr size_t kProbeBytes = 65536;
    constexpr double kCmaWinsBelow = 4.0;
    constexpr uint64_t kRingMax = 262144;
    double cma_ns = 0, copy_ns = 0;
    // The probe reads our own memory, which Yama leaves open: where peers may not attach,
    // the ring carries what it can.
    const double ratio = cma_cost_ratio(kProbeBytes, &cma_ns, &copy_ns);
    cfg_.shm_copy_max = ratio < kCmaWinsBelow && peers_may_attach() ? 0 : kRingMax;
    if (cfg_.debug)
        std::fprintf(
            stderr,
            "portals debug: pid %d: 64 KiB by cross-memory attach %.2f us, by memcpy %.2f us (%.1fx): "
            "memory peers cannot map moves %s (PTL_SHM_COPY_MAX=%llu)\n",
            int(getpid()), cma_ns / 1000, copy_ns / 1000, ratio,
            cfg_.shm_copy_max ? "through the ring up to 256 KiB"
                              : "by cross-memory attach above PTL_RNDV_THRESH",
            (unsigned long long)cfg_.shm_copy_max);
}

int Engine::open_physical(ptl_pid_t pid) {
    if (cfg_.wire == WireChoice::Invalid) {
        report("PTL_WIRE=" + cfg_.wire_name + " is not one of auto, shm, tcp, verbs");
        return PTL_ARG_INVALID;
    }
    if (cfg_.wake == WakeChoice::Invalid) {
        report(std::string("PTL_WAKE=") + std::getenv("PTL_WAKE") + " is not one of auto, futex, socket");
        return PTL_ARG_INVALID;
    }
    if (cfg_.shm_copy_max_invalid) {
        report(std::string("PTL_SHM_COPY_MAX=") + std::getenv("PTL_SHM_COPY_MAX") +
               " is not auto or a number of bytes");
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
    cma_exports_ = exports_ && peers_may_attach();
    if (cfg_.shm_copy_max_auto) choose_shm_copy_max();
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
        vc.srq_depth = cfg_.verbs_srq_depth;
        vc.tx_bufs = cfg_.verbs_tx_bufs;
        vc.credits = cfg_.verbs_credits;
        vc.send_queue = cfg_.verbs_send_queue;
        vc.bulk_timeout_ms = cfg_.verbs_bulk_timeout_ms;
        vc.probe_ms = cfg_.verbs_probe_ms;
        vc.max_qps = cfg_.verbs_max_qps;
        vc.buf_size = cfg_.verbs_buf_size;
        vc.ack_timeout = uint8_t(cfg_.verbs_ack_timeout);
        vc.reg_cache = cfg_.verbs_reg_cache;
        vc.reg_cache_max = cfg_.verbs_reg_cache_max;
        vc.stats = cfg_.verbs_stats;
        vc.timeout_ms = cfg_.tcp_timeout_ms;
        vc.defer_returns = cfg_.progress_thread;
        verbs_ = verbs::VerbsWire::create(
            self_, vc, tcp_.get(), [this] { on_verbs_completion(); }, &err);
        if (verbs_) verbs_->set_bulk_done([this](uint64_t cookie, bool ok) { on_bulk_done(cookie, ok); });
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
    // Sleepers then poll the wires' descriptors themselves: a completion or a tcp message wakes
    // the thread that sleeps for it, not a wire's watcher, which would have to wake that thread
    // in turn (sleep_for_traffic). Processes on this host wake them through a socket then.
    bool wake_by_socket = cfg_.wake == WakeChoice::Socket;
#ifdef PTL_HAVE_VERBS
    wake_by_socket |= cfg_.wake == WakeChoice::Auto && verbs_;
#endif
    if (std::string why_not; wake_by_socket && !shm_->sleep_on_descriptors(&why_not))
        report("PTL_WAKE: " + why_not + "; sleeping threads are woken by the wires' watchers");
#ifdef PTL_HAVE_VERBS
    if (verbs_ && shm_->sleeps_on_descriptors()) verbs_->leave_channel_to_sleepers();
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
    forget_put_targets();
    exports_ = nullptr;
    holding_published_ = false;
    bulk_holds_.clear();  // their NIs are gone (ni_fini waited for their transfers)
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

int Engine::wire_usage(ptl_handle_ni_t h, ptlx_wire_usage_t *usage) {
    Lock lk(mu_);
    if (!ni_of(h) || !usage) return PTL_ARG_INVALID;
    *usage = ptlx_wire_usage_t{};
#ifdef PTL_HAVE_VERBS
    if (verbs_) {
        const verbs::VerbsUsage u = verbs_->usage();
        usage->pinned_bytes = u.pinned_bytes;
        usage->registered_bytes = u.registered_bytes;
        usage->rdma_peers = u.peers;
        usage->rdma_qps_closed = u.qps_closed;
    }
#endif
    if (tcp_) usage->tcp_connections = tcp_->connections();
    if (shm_) {
        const shm::AdoptionStats &a = shm_->adoption_stats();
        usage->pages_adopted = a.adoptions;
        usage->adopted_bytes = a.bytes_copied;
        usage->adoptions_reused = a.reused;
        usage->peer_maps = shm_->peer_maps_made();
        usage->kernel_copies = shm_->kernel_copies();
        usage->kernel_copy_bytes = shm_->kernel_copy_bytes();
        usage->shm_copy_max = cfg_.shm_copy_max;
    }
    return PTL_OK;
}

void Engine::sleep_for_traffic(long timeout_us, const std::function<bool()> &also_due) {
    // Peers' direct counts ring only a sleeping engine: one that counted just before we went
    // to sleep left the flag up instead.
    const std::function<bool()> counted = [this, &also_due] {
        return (exports_ && exports_->header.counted.load(std::memory_order_seq_cst)) ||
               (also_due && also_due());
    };
    struct Sleeping {
        std::atomic<uint32_t> &n;
        explicit Sleeping(std::atomic<uint32_t> &c) : n(c) { n.fetch_add(1, std::memory_order_relaxed); }
        ~Sleeping() { n.fetch_sub(1, std::memory_order_relaxed); }
    } sleeping(traffic_sleepers_);
    // Arming looks at the completion queue once more, which progress owns.
    const auto arm_verbs = [this] {
#ifdef PTL_HAVE_VERBS
        if (!verbs_) return;
        Lock lk(mu_);
        verbs_->arm_wakeup();
#endif
    };
    if (shm_->sleeps_on_descriptors()) {
        // One poll() on every wire's descriptors: no watcher thread in between.
        pollfd also[2] = {{-1, POLLIN, 0}, {tcp_ ? tcp_->epoll_fd() : -1, POLLIN, 0}};
#ifdef PTL_HAVE_VERBS
        if (verbs_) also[0].fd = verbs_->channel_fd();
#endif
        shm_->wait_for_traffic(timeout_us, arm_verbs, counted, also, 2);
        if (also[0].revents || also[1].revents) {
            Lock lk(mu_);
#ifdef PTL_HAVE_VERBS
            if (verbs_ && also[0].revents) verbs_->take_channel_events();
#endif
            if (tcp_ && also[1].revents) tcp_->note_readable();
        }
        return;
    }
    if (tcp_)
        shm_->wait_for_traffic(
            timeout_us,
            [this, &arm_verbs] {
                tcp_->arm_wakeup();
                arm_verbs();
            },
            counted);
    else
        shm_->wait_for_traffic(timeout_us, {}, counted);
}

// A completion that a sleeper armed the verbs wire for (or news it found while arming), seen by
// its watcher thread. Handing it to the progress thread cost a second thread's wake-up before
// the application's: the watcher handles it itself when the lock is free, arms the wire again
// for the next one (the progress thread sleeps on) and wakes whoever the events are for.
// Otherwise - the lock held, as when arming calls this, or no progress thread (PTL_PROGRESS=
// manual, where only the application's calls make progress) - it wakes the sleeper. Only while
// the progress thread sleeps on traffic: an application polling by itself meanwhile must not
// find the wire armed again behind its back (a wake-up per completion, competing with it).
void Engine::on_verbs_completion() {
#ifdef PTL_HAVE_VERBS
    if (cfg_.progress_thread && traffic_sleepers_.load(std::memory_order_relaxed) && mu_.try_lock()) {
        bool more = false;
        if (verbs_ && phys_open_) {
            progress_locked();
            verbs_->arm_wakeup();  // its news, if any, wakes the progress thread (the lock is ours)
            // What only the progress thread's loop retries: held requests, queued sends.
            more = !held_.empty() || loop_->pending() || shm_->has_backlog();
        }
        mu_.unlock();
        if (more) shm_->wake();
        return;
    }
#endif
    if (shm_) shm_->wake();
}

bool Engine::send(PeerId to, const proto::Header &h, const struct iovec *payload, int n, bool deferrable) {
    Wire *w = wire_for(to);
    if (!w) return false;
    return deferrable ? w->send_deferrable(to, &h, sizeof h, payload, n)
                      : w->send(to, &h, sizeof h, payload, n);
}

}  // namespace ptl
