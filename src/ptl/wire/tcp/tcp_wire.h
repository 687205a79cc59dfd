// The tcp wire: processes on other hosts (or any peer with PTL_WIRE=tcp). Every process
// listens on its nid at port PTL_TCP_PORT_BASE + pid, so a peer's address follows from its
// (nid, pid) alone. Connections are opened lazily by the first send. A process sends to a peer
// on one connection for as long as it lives, which keeps per-peer order without any
// connection-race resolution: the one the peer opened to us if there is one when we first
// send (replies then carry the TCP acknowledgements of requests: half the segments of a
// ping-pong), else one we open. Both ends read every connection. One epoll set serves all
// sockets; a watcher thread turns socket readiness into a wake-up only while the progress
// thread sleeps.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "../wire.h"
#include "tcp_frame.h"

namespace ptl::tcp {

struct TcpConfig {
    uint32_t port_base = 17000;                // PTL_TCP_PORT_BASE: listen port = base + pid
    long timeout_ms = 10000;                   // PTL_TCP_TIMEOUT_MS: connect, unacked data, keepalive
    uint64_t max_message = uint64_t(1) << 40;  // largest frame accepted from a peer
    // A small frame sent within this long of the previous one to the same peer waits (corked)
    // for company: the next progress, enough corked bytes, or the cork's deadline, this long
    // after it began (PTL_TCP_CORK_US; 0: every frame leaves at once).
    uint64_t cork_ns = 0;
};

class TcpWire final : public Wire {
public:
    // `wake` is called (from the watcher thread) when a socket becomes ready while armed.
    static std::unique_ptr<TcpWire> create(PeerId self, const TcpConfig &cfg, std::function<void()> wake,
                                           std::string *err);
    ~TcpWire() override;

    bool send(PeerId to, const void *header, size_t header_len, const struct iovec *payload,
              int payload_count) override;
    // Queued without a system call: the next send to the peer or the next progress writes it.
    bool send_deferrable(PeerId to, const void *header, size_t header_len, const struct iovec *payload,
                         int payload_count) override;
    size_t max_inline(PeerId) override { return size_t(cfg_.max_message); }
    int progress(const MessageHandler &handler) override;
    // As progress, with the caller's reading of monotonic_ns (idle polls are rationed by it).
    int progress(const MessageHandler &handler, uint64_t now_ns);
    bool peer_dead(PeerId) override;
    // Ends our connections to `peer` with a Bye (tcp_frame.h), each closed once the peer ends
    // its side too; a peer that answers a Bye, dies or resets one of these connections is not
    // taken for dead. The next send to it opens a new connection.
    void release_peer(PeerId peer) override;
    // Connects to `peer`'s listening port and hangs up at once: refused (the process is gone,
    // its host answers for it) or no answer within timeout_ms makes it dead.
    void probe_peer(PeerId peer) override;

    // The next readiness of any socket calls `wake` once. Call after deciding to sleep.
    void arm_wakeup();
    // Another wire carries the data (verbs): this one sets up its connections and reaches the
    // peers without it, so a poll that finds nothing is not repeated for `idle_poll_ns`
    // (kIdlePollNs by default; the other wire says how long it can wait for setup news).
    void set_setup_only(bool on) { setup_only_ = on; }
    // For a sleeper that polls the wire's sockets itself (Engine::sleep_for_traffic): the
    // epoll descriptor, and the news that it was readable (the next progress looks at once,
    // not at its rationed pace).
    int epoll_fd() const { return epfd_; }
    void note_readable() { last_poll_idle_ = false; }
    static constexpr uint64_t kIdlePollNs = 20000;  // with no connections, look for new ones this often
    void set_idle_poll_ns(uint64_t ns) { idle_poll_ns_ = ns; }
    // `hook(due_ns)` is called when a cork begins: its frames must leave by `due_ns` even if
    // nobody calls progress (the engine's progress thread sees to it).
    void set_cork_hook(std::function<void(uint64_t)> hook) { cork_hook_ = std::move(hook); }
    // Frames dropped as malformed since the last call (a bad stream also loses its connection).
    uint64_t take_malformed();
    // No connection, nothing corked: a progress would only look for new connections.
    bool idle() const { return conns_.empty() && corked_.empty() && connecting_ == 0; }
    // Open connections, both directions (diagnostics and tests).
    size_t connections() const { return conns_.size(); }

private:
    struct Conn {
        int fd = -1;
        uint32_t serial = 0;    // tells a reused fd number from the closed connection it had
        bool outgoing = false;  // we opened it
        bool connecting = false;
        PeerId peer{};  // outgoing: the target; incoming: known after the Hello
        uint64_t started_ns = 0;
        // what we send on it (out_ names it): bytes not yet taken by the socket, in order
        std::deque<std::vector<char>> queue;
        size_t front_off = 0;
        bool want_out = false;
        bool corked = false;  // the queue holds deferred messages only, in corked_
        size_t corked_bytes = 0;
        uint64_t last_send_ns = 0;  // with cork_ns: when the last frame was sent or corked
        // what arrives; made by the first byte on a connection we opened
        std::unique_ptr<FrameReader> reader;
        bool probe = false;     // probe_peer's: closed as soon as it connects
        bool bye_sent = false;  // our Bye is queued: no new frames, write side shut after it
        bool shut = false;      // our write side is shut (the Bye left)
        bool peer_eof = false;  // the peer ended its side after its Bye
    };

    TcpWire(PeerId self, const TcpConfig &cfg) : self_(self), cfg_(cfg) {}
    bool listen_on(std::string *err);
    // The connection our messages to `to` take from now on (opened if need be); null if none.
    Conn *send_conn(PeerId to);
    Conn *start_connect(PeerId to, bool probe);
    void accept_all();
    int on_event(Conn &c, uint32_t events, const MessageHandler &handler);
    int read_frames(Conn &c, const MessageHandler &handler);
    // Writes what the socket takes of the queue; the rest waits for EPOLLOUT. False if the
    // connection failed.
    bool flush(Conn &c);
    // The queue's unwritten pieces as iovecs (at most max); how many.
    static int gather_queue(const Conn &c, struct iovec *iov, int max);
    // Drops `written` bytes from the queue's front; returns how many went beyond it.
    static size_t consume_queue(Conn &c, size_t written);
    bool send_frame(PeerId to, const void *header, size_t header_len, const struct iovec *payload,
                    int payload_count, bool deferrable);
    bool write_after_queue(Conn &c, const struct iovec *iov, int n);
    void flush_deferred();
    void uncork(Conn &c);  // out of corked_ (its queue stays)
    void queue_copy(Conn &c, const struct iovec *iov, int n, size_t skip);
    void set_want_out(Conn &c, bool on);
    bool watch_fd(Conn &c, uint32_t events, int op);
    void close_conn(Conn &c, bool peer_gone);
    // Queues our Bye and flushes; false if the connection failed.
    bool say_bye(Conn &c);
    void unmap(Conn &c);  // no longer where we send to its peer
    void check_connect_timeouts();
    void watch();

    PeerId self_;
    TcpConfig cfg_;
    int listen_fd_ = -1;
    int epfd_ = -1;
    std::unordered_map<int, std::unique_ptr<Conn>> conns_;  // by fd
    std::unordered_map<PeerId, Conn *, PeerIdHash> out_;    // where we send, by peer
    // Connections peers opened to us that they also read, by peer, while we send them nothing.
    std::unordered_map<PeerId, Conn *, PeerIdHash> replyable_;
    std::unordered_set<PeerId, PeerIdHash> dead_;
    std::unordered_set<PeerId, PeerIdHash> probing_;
    std::vector<Conn *> corked_;  // the connections with corked set
    uint64_t cork_due_ns_ = 0;    // by when the application's corked frames leave; 0: none corked
    std::function<void(uint64_t)> cork_hook_;
    int connecting_ = 0;
    uint32_t next_serial_ = 1;
    uint64_t malformed_ = 0;
    uint64_t last_idle_poll_ns_ = 0;
    bool setup_only_ = false;
    uint64_t idle_poll_ns_ = kIdlePollNs;
    bool last_poll_idle_ = false;

    std::function<void()> wake_;
    int watch_epfd_ = -1;
    int stop_fd_ = -1;
    std::atomic<uint32_t> armed_{0};
    std::atomic<bool> stop_{false};
    std::thread watcher_;
};

}  // namespace ptl::tcp
