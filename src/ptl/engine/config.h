// Run-time settings from the environment (documented in the README).
#pragma once

#include <cstdint>
#include <string>

namespace ptl {

enum class WireChoice : uint8_t { Auto, Shm, Tcp, Verbs, Invalid };

// PTL_WAKE: how a sleeping thread is woken (auto: Socket with a verbs wire, else Futex).
enum class WakeChoice : uint8_t { Auto, Futex, Socket, Invalid };

// PTL_WAIT_YIELD: whether idle polling gives the CPU away (idle_backoff.h).
enum class YieldMode { Auto, Always, Never };

// The receive ring's cells (2 MiB of 256-byte cells): its largest message, a quarter of it,
// holds PTL_SHM_COPY_MAX's 256 KiB of unmappable data, which two copies through it move in
// 7.6-8.6 us one-way where cross-memory attach takes 18-20 (docs/adoption.md).
constexpr uint32_t kDefaultShmCells = 8192;

struct Config {
    bool progress_thread = true;             // PTL_PROGRESS=thread|manual
    int progress_cpu = -1;                   // PTL_PROGRESS_CPU (-1: a core the caller is not on)
    long wait_spin_us = 500;                 // PTL_WAIT_SPIN_US: callers poll this long before sleeping
    long busy_poll_gap_us = 20;  // PTL_BUSY_POLL_GAP_US: an app away shorter between polls serves its peers
    long park_max_ms = 40;       // PTL_PROGRESS_PARK_MAX_MS: longest park beside an app that polls on
    YieldMode wait_yield = YieldMode::Auto;  // PTL_WAIT_YIELD=auto|always|never
    WakeChoice wake = WakeChoice::Auto;      // PTL_WAKE=auto|futex|socket
    uint64_t rndv_threshold = 16384;         // PTL_RNDV_THRESH: larger payloads move by bulk copy
    size_t bulk_hold_max = 64;  // PTL_BULK_HOLD_MAX: an initiator's requests queued behind its transfers
    uint32_t shm_cells = kDefaultShmCells;   // PTL_SHM_CELLS
    uint32_t shm_cell_size = 256;            // PTL_SHM_CELL_SIZE
    uint64_t shm_copy_max = 262144;  // PTL_SHM_COPY_MAX: unmappable data up to this size goes through the ring
    // PTL_SHM_COPY_MAX=auto (the default): shm_copy_max is chosen at start-up by timing
    // cross-memory attach against memcpy (Engine::choose_shm_copy_max); false once a size is given.
    bool shm_copy_max_auto = true;
    bool shm_copy_max_invalid = false;  // neither auto nor a number: PtlNIInit reports it
    bool notify_drops = false;               // PTL_NOTIFY_DROPS: ACK/REPLY with PTL_NI_DROPPED (X3)
    bool direct = true;                      // PTL_DIRECT: one-sided access without the target's CPU
    long direct_revoke_ms = 2000;  // PTL_DIRECT_REVOKE_MS: bound on a revocation's wait for RDMA holders
    long eq_grow_max = 1 << 18;              // PTL_EQ_GROW_MAX: events a full EQ may grow to (eq.h)
    long flowctrl_grace_ms = 1000;           // PTL_FLOWCTRL_GRACE_MS: held_messages.h (0: disable at once)
    long liveness_ms = 200;                  // PTL_LIVENESS_MS: how often peers are checked for exit
    std::string iface;                       // PTL_IFACE
    // PTL_WIRE=auto|shm|tcp|verbs: auto = shm on this host, verbs beyond where an RDMA device
    // is active (and the peer has one), else tcp; verbs = verbs for every other process.
    WireChoice wire = WireChoice::Auto;
    std::string wire_name = "auto";
    uint32_t tcp_port_base = 17000;  // PTL_TCP_PORT_BASE: a process listens on base + pid
    long tcp_timeout_ms = 10000;     // PTL_TCP_TIMEOUT_MS: connect / silent-peer bound
    long tcp_cork_us = 8;            // PTL_TCP_CORK_US: tcp_wire.h's TcpConfig::cork_ns (0: off)
    std::string verbs_device;        // PTL_VERBS_DEVICE: name[:port]
    int verbs_gid_index = -1;        // PTL_VERBS_GID_INDEX
    uint32_t verbs_srq_depth = 2048;     // PTL_VERBS_SRQ_DEPTH: receive buffers shared by all peers
    uint32_t verbs_tx_bufs = 256;        // PTL_VERBS_TX_BUFS: send buffers shared by all peers
    uint32_t verbs_credits = 32;         // PTL_VERBS_CREDITS: a peer's unhandled messages at most
    uint32_t verbs_send_queue = 4096;    // PTL_VERBS_SEND_QUEUE: sends in flight, all peers together
    long verbs_bulk_timeout_ms = 10000;  // PTL_VERBS_BULK_TIMEOUT_MS: deadline of one RDMA transfer
    long verbs_probe_ms = 1000;          // PTL_VERBS_PROBE_MS: silence before a waited-on peer is probed
    uint32_t verbs_max_qps = 0;          // PTL_VERBS_MAX_QPS: idle QPs closed beyond it; 0: no limit
    uint32_t verbs_buf_size = 8192;  // PTL_VERBS_BUF_SIZE
    int verbs_ack_timeout = 18;      // PTL_VERBS_ACK_TIMEOUT: 4.096 us << 18 = 1.07 s, 7 retries
    bool verbs_reg_cache = true;                      // PTL_VERBS_REG_CACHE
    uint64_t verbs_reg_cache_max = uint64_t(1) << 30;  // PTL_VERBS_REG_CACHE_MAX: bytes kept registered unused
    bool verbs_stats = false;                         // PTL_VERBS_STATS: counters on stderr at close
    bool debug = false;                               // PTL_DEBUG: a line on stderr per page adoption
    std::string trace_dir;                            // PTL_TRACE: trace.h (empty: no trace)
    long trace_mb = 16;                               // PTL_TRACE_MB

    static Config from_env();
};

}  // namespace ptl
