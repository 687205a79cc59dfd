#include "config.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace ptl {

namespace {
long env_long(const char *name, long def) {
    const char *v = std::getenv(name);
    if (!v || !*v) return def;
    char *end = nullptr;
    const long r = std::strtol(v, &end, 0);
    return (end && *end == '\0') ? r : def;
}
bool env_bool(const char *name, bool def) {
    const char *v = std::getenv(name);
    if (!v || !*v) return def;
    return !(std::strcmp(v, "0") == 0 || std::strcmp(v, "n") == 0 || std::strcmp(v, "no") == 0 ||
             std::strcmp(v, "false") == 0);
}
}  // namespace

Config Config::from_env() {
    Config c;
    if (const char *p = std::getenv("PTL_PROGRESS")) c.progress_thread = std::strcmp(p, "manual") != 0;
    c.progress_cpu = int(env_long("PTL_PROGRESS_CPU", -1));
    c.wait_spin_us = env_long("PTL_WAIT_SPIN_US", c.wait_spin_us);
    c.busy_poll_gap_us = std::clamp(env_long("PTL_BUSY_POLL_GAP_US", c.busy_poll_gap_us), 0L, 1000000L);
    c.park_max_ms = std::clamp(env_long("PTL_PROGRESS_PARK_MAX_MS", c.park_max_ms), 5L, 999L);
    c.direct = env_bool("PTL_DIRECT", c.direct);
    c.direct_revoke_ms = std::max(0L, env_long("PTL_DIRECT_REVOKE_MS", c.direct_revoke_ms));
    if (const char *y = std::getenv("PTL_WAIT_YIELD"); y && *y)
        c.wait_yield = std::strcmp(y, "always") == 0  ? YieldMode::Always
                       : std::strcmp(y, "never") == 0 ? YieldMode::Never
                                                      : YieldMode::Auto;
    if (const char *w = std::getenv("PTL_WAKE"); w && *w)
        c.wake = std::strcmp(w, "auto") == 0     ? WakeChoice::Auto
                 : std::strcmp(w, "futex") == 0  ? WakeChoice::Futex
                 : std::strcmp(w, "socket") == 0 ? WakeChoice::Socket
                                                 : WakeChoice::Invalid;
    c.rndv_threshold = uint64_t(env_long("PTL_RNDV_THRESH", long(c.rndv_threshold)));
    c.bulk_hold_max = size_t(std::clamp(env_long("PTL_BULK_HOLD_MAX", long(c.bulk_hold_max)), 1L, 1L << 20));
    c.shm_cells = uint32_t(env_long("PTL_SHM_CELLS", c.shm_cells));
    if (c.shm_cells < 64 || (c.shm_cells & (c.shm_cells - 1))) c.shm_cells = kDefaultShmCells;
    c.shm_cell_size = uint32_t(env_long("PTL_SHM_CELL_SIZE", c.shm_cell_size));
    if (c.shm_cell_size < 128 || c.shm_cell_size % 64) c.shm_cell_size = 256;
    if (const char *m = std::getenv("PTL_SHM_COPY_MAX"); m && *m && std::strcmp(m, "auto") != 0) {
        char *end = nullptr;
        const long v = std::strtol(m, &end, 0);
        c.shm_copy_max_auto = false;
        c.shm_copy_max_invalid = !end || *end != '\0' || v < 0;
        if (!c.shm_copy_max_invalid) c.shm_copy_max = uint64_t(v);
    }
    c.notify_drops = env_bool("PTL_NOTIFY_DROPS", false);
    c.liveness_ms = env_long("PTL_LIVENESS_MS", c.liveness_ms);
    c.flowctrl_grace_ms = env_long("PTL_FLOWCTRL_GRACE_MS", c.flowctrl_grace_ms);
    c.eq_grow_max = env_long("PTL_EQ_GROW_MAX", c.eq_grow_max);
    if (c.eq_grow_max < 0) c.eq_grow_max = 0;
    if (c.flowctrl_grace_ms < 0) c.flowctrl_grace_ms = 0;
    if (const char *i = std::getenv("PTL_IFACE")) c.iface = i;
    if (const char *w = std::getenv("PTL_WIRE"); w && *w) {
        c.wire_name = w;
        c.wire = c.wire_name == "auto"    ? WireChoice::Auto
                 : c.wire_name == "shm"   ? WireChoice::Shm
                 : c.wire_name == "tcp"   ? WireChoice::Tcp
                 : c.wire_name == "verbs" ? WireChoice::Verbs
                                          : WireChoice::Invalid;
    }
    c.tcp_port_base = uint32_t(env_long("PTL_TCP_PORT_BASE", c.tcp_port_base));
    c.tcp_timeout_ms = env_long("PTL_TCP_TIMEOUT_MS", c.tcp_timeout_ms);
    if (c.tcp_timeout_ms < 1000) c.tcp_timeout_ms = 1000;
    c.tcp_cork_us = std::clamp(env_long("PTL_TCP_CORK_US", c.tcp_cork_us), 0L, 1000L);
    if (const char *d = std::getenv("PTL_VERBS_DEVICE")) c.verbs_device = d;
    c.verbs_gid_index = int(env_long("PTL_VERBS_GID_INDEX", c.verbs_gid_index));
    c.verbs_srq_depth =
        uint32_t(std::clamp(env_long("PTL_VERBS_SRQ_DEPTH", c.verbs_srq_depth), 16L, 1L << 16));
    c.verbs_tx_bufs = uint32_t(std::clamp(env_long("PTL_VERBS_TX_BUFS", c.verbs_tx_bufs), 8L, 1L << 16));
    c.verbs_credits = uint32_t(std::clamp(env_long("PTL_VERBS_CREDITS", c.verbs_credits), 2L, 1024L));
    c.verbs_send_queue =
        uint32_t(std::clamp(env_long("PTL_VERBS_SEND_QUEUE", c.verbs_send_queue), 64L, 1L << 16));
    c.verbs_bulk_timeout_ms =
        std::clamp(env_long("PTL_VERBS_BULK_TIMEOUT_MS", c.verbs_bulk_timeout_ms), 10L, 3600L * 1000);
    c.verbs_probe_ms = std::clamp(env_long("PTL_VERBS_PROBE_MS", c.verbs_probe_ms), 10L, 3600L * 1000);
    c.verbs_max_qps = uint32_t(std::clamp(env_long("PTL_VERBS_MAX_QPS", c.verbs_max_qps), 0L, 1L << 24));
    c.verbs_ack_timeout = int(std::clamp(env_long("PTL_VERBS_ACK_TIMEOUT", c.verbs_ack_timeout), 1L, 31L));
    c.verbs_buf_size = uint32_t(std::clamp(env_long("PTL_VERBS_BUF_SIZE", c.verbs_buf_size), 256L, 1L << 20));
    c.verbs_reg_cache = env_bool("PTL_VERBS_REG_CACHE", c.verbs_reg_cache);
    c.verbs_reg_cache_max =
        uint64_t(std::max(0L, env_long("PTL_VERBS_REG_CACHE_MAX", long(c.verbs_reg_cache_max))));
    c.verbs_stats = env_bool("PTL_VERBS_STATS", c.verbs_stats);
    c.debug = env_bool("PTL_DEBUG", c.debug);
    if (const char *t = std::getenv("PTL_TRACE")) c.trace_dir = t;
    c.trace_mb = std::clamp(env_long("PTL_TRACE_MB", c.trace_mb), 1L, 4096L);
    return c;
}

}  // namespace ptl
