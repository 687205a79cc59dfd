#include "tcp_wire.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "../../util/clock.h"

namespace ptl::tcp {

namespace {

constexpr int kMaxIov = 64;
constexpr size_t kReadBudget = 1u << 20;  // per connection per progress call
constexpr size_t kMaxCorkedBytes = 16384;  // deferred messages held per connection
constexpr size_t kCorkFrameBytes = 1024;   // larger frames are worth a system call of their own

// Latency first (no Nagle); a silent peer (host gone, cable pulled) is noticed within about
// timeout_ms through keepalive probes and the limit on unacknowledged data.
void tune(int fd, long timeout_ms) {
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    const int secs = int(std::max(3L, timeout_ms / 1000));
    const int idle = std::max(1, secs / 2), intvl = std::max(1, secs / 6), cnt = 3;
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    const unsigned ut = unsigned(std::max(1000L, timeout_ms));
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof ut);
}

void acknowledge_now(int fd) {
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
}

sockaddr_in address_of(PeerId p, uint32_t port_base) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(p.nid);
    a.sin_port = htons(uint16_t(port_base + p.pid));
    return a;
}

bool port_ok(uint32_t port_base, uint32_t pid) {
    return port_base + pid <= 65535 && port_base > 0;
}

}  // namespace

std::unique_ptr<TcpWire> TcpWire::create(PeerId self, const TcpConfig &cfg, std::function<void()> wake,
                                         std::string *err) {
    std::unique_ptr<TcpWire> w(new TcpWire(self, cfg));
    w->wake_ = std::move(wake);
    w->epfd_ = epoll_create1(EPOLL_CLOEXEC);
    w->watch_epfd_ = epoll_create1(EPOLL_CLOEXEC);
    w->stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (w->epfd_ < 0 || w->watch_epfd_ < 0 || w->stop_fd_ < 0) {
        *err = std::string("epoll/eventfd: ") + std::strerror(errno);
        return nullptr;
    }
    if (!w->listen_on(err)) return nullptr;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = w->epfd_;
    epoll_ctl(w->watch_epfd_, EPOLL_CTL_ADD, w->epfd_, &ev);
    ev.data.fd = w->stop_fd_;
    epoll_ctl(w->watch_epfd_, EPOLL_CTL_ADD, w->stop_fd_, &ev);
    w->watcher_ = std::thread([raw = w.get()] { raw->watch(); });
    return w;
}

TcpWire::~TcpWire() {
    if (watcher_.joinable()) {
        stop_.store(true);
        armed_.store(1);
        syscall(SYS_futex, &armed_, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof one);
        watcher_.join();
    }
    // Queued bytes are given one last non-blocking chance: a process that sends and then
    // finalizes (a reply, an ack) expects them to leave.
    for (auto &[fd, c] : conns_) {
        if (!c->connecting) flush(*c);
        close(fd);
    }
    if (listen_fd_ >= 0) close(listen_fd_);
    for (int fd : {epfd_, watch_epfd_, stop_fd_})
        if (fd >= 0) close(fd);
}

bool TcpWire::listen_on(std::string *err) {
    if (!port_ok(cfg_.port_base, self_.pid)) {
        *err = "PTL_TCP_PORT_BASE " + std::to_string(cfg_.port_base) + " + pid " + std::to_string(self_.pid) +
               " is not a port";
        return false;
    }
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) {
        *err = std::string("socket: ") + std::strerror(errno);
        return false;
    }
    const int one = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const sockaddr_in a = address_of(self_, cfg_.port_base);
    if (bind(listen_fd_, reinterpret_cast<const sockaddr *>(&a), sizeof a) != 0 ||
        listen(listen_fd_, 512) != 0) {
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
        *err = std::string("cannot listen on ") + ip + ":" + std::to_string(ntohs(a.sin_port)) + ": " +
               std::strerror(errno) + " (the port is PTL_TCP_PORT_BASE + pid)";
        return false;
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = uint32_t(listen_fd_);  // serial 0
    epoll_ctl(epfd_, EPOLL_CTL_ADD, listen_fd_, &ev);
    return true;
}

TcpWire::Conn *TcpWire::send_conn(PeerId to) {
    auto in = replyable_.find(to);
    if (in == replyable_.end()) return start_connect(to, false);
    Conn *c = in->second;
    replyable_.erase(in);
    out_.emplace(to, c);
    return c;
}

// A non-blocking connect to `to`'s port, watched until it completes. A connection for sending
// starts with our Hello; a probe only wants to know that the port answers.
TcpWire::Conn *TcpWire::start_connect(PeerId to, bool probe) {
    if (!port_ok(cfg_.port_base, to.pid)) return nullptr;
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return nullptr;  // out of descriptors: our shortage, no verdict on the peer
    tune(fd, cfg_.timeout_ms);
    const sockaddr_in a = address_of(to, cfg_.port_base);
    if (connect(fd, reinterpret_cast<const sockaddr *>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
        const int e = errno;
        close(fd);
        // Nobody listens there, or the host cannot be reached. Other errors (EADDRNOTAVAIL,
        // ENOBUFS) are this host's shortage: the send fails, the peer is not dead.
        if (e == ECONNREFUSED || e == ENETUNREACH || e == EHOSTUNREACH) dead_.insert(to);
        return nullptr;
    }
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->outgoing = c->connecting = true;
    c->probe = probe;
    c->peer = to;
    c->started_ns = monotonic_ns();
    if (!probe) {
        const Hello h{kHelloMagic, kVersion, 0, self_.nid, self_.pid};
        c->queue.emplace_back(reinterpret_cast<const char *>(&h),
                              reinterpret_cast<const char *>(&h) + sizeof h);
        c->want_out = true;
    }
    if (!watch_fd(*c, probe ? uint32_t(EPOLLOUT) : uint32_t(EPOLLOUT | EPOLLIN | EPOLLRDHUP),
                  EPOLL_CTL_ADD)) {
        close(fd);
        return nullptr;
    }
    ++connecting_;
    Conn *raw = c.get();
    conns_.emplace(fd, std::move(c));
    if (probe)
        probing_.insert(to);
    else
        out_.emplace(to, raw);
    return raw;
}

bool TcpWire::send(PeerId to, const void *header, size_t header_len, const struct iovec *payload,
                   int payload_count) {
    return send_frame(to, header, header_len, payload, payload_count, false);
}

bool TcpWire::send_deferrable(PeerId to, const void *header, size_t header_len, const struct iovec *payload,
                              int payload_count) {
    return send_frame(to, header, header_len, payload, payload_count, true);
}

bool TcpWire::send_frame(PeerId to, const void *header, size_t header_len, const struct iovec *payload,
                         int payload_count, bool deferrable) {
    if (header_len == 0 || header_len > kMaxHeader || dead_.count(to)) return false;
    auto it = out_.find(to);
    Conn *c = it != out_.end() ? it->second : send_conn(to);
    if (!c) return false;
    FrameHead fh{uint16_t(header_len), 0, 0, 0};
    for (int i = 0; i < payload_count; ++i) fh.payload_len += payload[i].iov_len;
    if (fh.payload_len > cfg_.max_message) return false;

    const int n = payload_count + 2;
    iovec local[16];
    std::vector<iovec> heap;
    iovec *iov = local;
    if (n > 16) {
        heap.resize(size_t(n));
        iov = heap.data();
    }
    iov[0] = {&fh, sizeof fh};
    iov[1] = {const_cast<void *>(header), header_len};
    std::copy_n(payload, payload_count, iov + 2);
    bool corking = false;  // a small frame right after another: corked, though not deferrable
    if (cfg_.cork_ns && !deferrable) {
        const uint64_t now = monotonic_ns();
        corking = sizeof fh + header_len + fh.payload_len <= kCorkFrameBytes &&
                  now - c->last_send_ns < cfg_.cork_ns;
        c->last_send_ns = now;
    }
    if (deferrable || corking) {
        queue_copy(*c, iov, n, 0);
        if (c->connecting || c->want_out) return true;  // the queue drains by itself
        if (!c->corked) {
            c->corked = true;
            c->corked_bytes = 0;
            corked_.push_back(c);
        }
        // A deferred ACK leaves with the next progress, which follows the one that made it; a
        // corked send of the application's needs a deadline.
        if (corking && cork_due_ns_ == 0) {
            cork_due_ns_ = c->last_send_ns + cfg_.cork_ns;
            if (cork_hook_) cork_hook_(cork_due_ns_);
        }
        c->corked_bytes += c->queue.back().size();
        if (c->corked_bytes < kMaxCorkedBytes) return true;
        uncork(*c);  // enough to be worth a system call of their own
        if (flush(*c)) return true;
        close_conn(*c, true);
        return false;
    }
    if (c->corked) {
        if (write_after_queue(*c, iov, n)) return true;
        close_conn(*c, true);
        return false;
    }
    size_t sent = 0;
    if (!c->connecting && c->queue.empty() && n <= IOV_MAX) {
        // The common case: straight from the caller's memory into the socket, no copy.
        msghdr mh{};
        mh.msg_iov = iov;
        mh.msg_iovlen = size_t(n);
        const ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            close_conn(*c, true);
            return false;
        }
        sent = w > 0 ? size_t(w) : 0;
        if (sent == sizeof fh + header_len + fh.payload_len) return true;
    }
    // The rest waits in order behind what is already queued; the caller may reuse its buffer.
    queue_copy(*c, iov, n, sent);
    if (!c->connecting) set_want_out(*c, true);
    return true;
}

// A corked connection's deferred messages, then the new frame, in one system call; what the
// socket does not take is queued. False if the connection failed.
bool TcpWire::write_after_queue(Conn &c, const struct iovec *iov, int n) {
    uncork(c);
    struct iovec all[kMaxIov];
    int k = gather_queue(c, all, kMaxIov);
    if (k < int(c.queue.size()) || k + n > kMaxIov) {
        // Too many pieces for one call: everything goes through the queue.
        queue_copy(c, iov, n, 0);
        return flush(c);
    }
    std::copy_n(iov, n, all + k);
    k += n;
    msghdr mh{};
    mh.msg_iov = all;
    mh.msg_iovlen = size_t(k);
    ssize_t w = sendmsg(c.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
        w = 0;
    }
    const size_t written = consume_queue(c, size_t(w));  // of the new frame
    size_t frame_len = 0;
    for (int i = 0; i < n; ++i) frame_len += iov[i].iov_len;
    if (!c.queue.empty() || written < frame_len) queue_copy(c, iov, n, c.queue.empty() ? written : 0);
    if (!c.queue.empty()) set_want_out(c, true);
    return true;
}

void TcpWire::uncork(Conn &c) {
    if (!std::exchange(c.corked, false)) return;
    std::erase(corked_, &c);
    if (corked_.empty()) cork_due_ns_ = 0;
}

// Deferred and corked messages leave at the latest with the next progress.
void TcpWire::flush_deferred() {
    cork_due_ns_ = 0;
    while (!corked_.empty()) {
        Conn *c = corked_.back();
        corked_.pop_back();
        c->corked = false;
        if (!flush(*c)) close_conn(*c, true);
    }
}

void TcpWire::queue_copy(Conn &c, const struct iovec *iov, int n, size_t skip) {
    size_t total = 0;
    for (int i = 0; i < n; ++i) total += iov[i].iov_len;
    std::vector<char> chunk(total - skip);
    char *d = chunk.data();
    for (int i = 0; i < n; ++i) {
        size_t len = iov[i].iov_len;
        const char *s = static_cast<const char *>(iov[i].iov_base);
        if (skip >= len) {
            skip -= len;
            continue;
        }
        s += skip;
        len -= skip;
        skip = 0;
        std::memcpy(d, s, len);
        d += len;
    }
    c.queue.push_back(std::move(chunk));
}

void TcpWire::set_want_out(Conn &c, bool on) {
    if (c.want_out == on) return;
    c.want_out = on;
    watch_fd(c, (c.peer_eof ? 0u : uint32_t(EPOLLIN | EPOLLRDHUP)) | (on ? uint32_t(EPOLLOUT) : 0u),
             EPOLL_CTL_MOD);
}

bool TcpWire::watch_fd(Conn &c, uint32_t events, int op) {
    if (op == EPOLL_CTL_ADD) {
        c.serial = next_serial_++;
        if (next_serial_ == 0) next_serial_ = 1;  // 0 is the listening socket
    }
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = uint64_t(c.serial) << 32 | uint32_t(c.fd);
    return epoll_ctl(epfd_, op, c.fd, &ev) == 0;
}

int TcpWire::gather_queue(const Conn &c, struct iovec *iov, int max) {
    int n = 0;
    size_t off = c.front_off;
    for (auto it = c.queue.begin(); it != c.queue.end() && n < max; ++it, off = 0)
        iov[n++] = {const_cast<char *>(it->data()) + off, it->size() - off};
    return n;
}

size_t TcpWire::consume_queue(Conn &c, size_t written) {
    while (written > 0 && !c.queue.empty()) {
        const size_t left = c.queue.front().size() - c.front_off;
        if (written < left) {
            c.front_off += written;
            return 0;
        }
        written -= left;
        c.queue.pop_front();
        c.front_off = 0;
    }
    return written;
}

bool TcpWire::flush(Conn &c) {
    while (!c.queue.empty()) {
        struct iovec iov[kMaxIov];
        msghdr mh{};
        mh.msg_iov = iov;
        mh.msg_iovlen = size_t(gather_queue(c, iov, kMaxIov));
        ssize_t w = sendmsg(c.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
            set_want_out(c, true);  // the rest leaves when the socket has room
            return true;
        }
        consume_queue(c, size_t(w));
    }
    set_want_out(c, false);
    if (c.bye_sent && !c.shut) {
        shutdown(c.fd, SHUT_WR);
        c.shut = true;
    }
    return true;
}

void TcpWire::close_conn(Conn &c, bool peer_gone) {
    uncork(c);
    const int fd = c.fd;
    const PeerId peer = c.peer;
    const bool known = c.outgoing || (c.reader && c.reader->has_hello());
    // Whatever ends a connection either side said Bye on, it is not the peer's death.
    if (c.bye_sent || (c.reader && c.reader->saw_bye())) peer_gone = false;
    epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
    close(fd);
    if (c.connecting) --connecting_;
    if (c.probe) probing_.erase(peer);
    if (known) unmap(c);
    if (peer_gone && known) {
        dead_.insert(peer);
        // The peer will not read what we still had queued for it either.
        auto it = out_.find(peer);
        if (it != out_.end() && it->second != &c) close_conn(*it->second, false);
    }
    conns_.erase(fd);
}

void TcpWire::unmap(Conn &c) {
    for (auto *by_peer : {&out_, &replyable_}) {
        auto it = by_peer->find(c.peer);
        if (it != by_peer->end() && it->second == &c) by_peer->erase(it);
    }
}

bool TcpWire::say_bye(Conn &c) {
    if (c.bye_sent) return true;
    c.bye_sent = true;
    uncork(c);
    c.queue.emplace_back(reinterpret_cast<const char *>(&kBye),
                         reinterpret_cast<const char *>(&kBye) + sizeof kBye);
    return c.connecting || flush(c);  // a connection still opening sends it once open
}

void TcpWire::release_peer(PeerId peer) {
    for (auto *by_peer : {&out_, &replyable_}) {
        auto it = by_peer->find(peer);
        if (it == by_peer->end()) continue;
        Conn *c = it->second;
        by_peer->erase(it);
        if (!say_bye(*c)) close_conn(*c, false);
    }
}

void TcpWire::probe_peer(PeerId to) {
    if (!dead_.count(to) && !probing_.count(to)) start_connect(to, true);
}

void TcpWire::accept_all() {
    for (;;) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return;  // EAGAIN, or out of descriptors: the connection waits in the backlog
        }
        tune(fd, cfg_.timeout_ms);
        auto c = std::make_unique<Conn>();
        c->fd = fd;
        c->reader = std::make_unique<FrameReader>(cfg_.max_message);
        if (!watch_fd(*c, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD)) {
            close(fd);
            continue;
        }
        conns_.emplace(fd, std::move(c));
    }
}

int TcpWire::on_event(Conn &c, uint32_t events, const MessageHandler &handler) {
    if (c.connecting) {
        if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return 0;
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
            close_conn(c, true);
            return 0;
        }
        c.connecting = false;
        --connecting_;
        if (c.probe) {  // the process is there: that was all we wanted to know
            close_conn(c, false);
            return 0;
        }
    }
    if ((events & EPOLLOUT) && !flush(c)) {
        close_conn(c, true);
        return 0;
    }
    if (c.peer_eof && c.shut) {  // both sides said Bye and ended their streams
        close_conn(c, false);
        return 0;
    }
    // Frames, or the end of the connection (read tells which).
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) return read_frames(c, handler);
    return 0;
}

int TcpWire::read_frames(Conn &c, const MessageHandler &handler) {
    int work = 0;
    size_t budget = kReadBudget;
    if (!c.reader) {
        c.reader = std::make_unique<FrameReader>(cfg_.max_message);
        c.reader->assume_peer(c.peer.nid, c.peer.pid);
    }
    FrameReader &rd = *c.reader;
    const auto deliver = [&](const void *h, size_t hl, const void *p, size_t pl) {
        // The Hello may have arrived in the same read as these frames.
        InMessage m{{rd.peer_nid(), rd.peer_pid()}, h, hl, p, pl, this};
        handler(m);
        ++work;
    };
    for (;;) {
        size_t room;
        char *p = rd.space(&room);
        const ssize_t r = read(c.fd, p, room);
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return work;
            close_conn(c, true);
            return work;
        }
        if (r == 0) {
            if (rd.mid_frame()) ++malformed_;  // a truncated frame
            if (rd.saw_bye() && !rd.mid_frame() && !c.shut) {
                // Our own frames and Bye still have to leave; then the connection closes.
                c.peer_eof = true;
                watch_fd(c, EPOLLOUT, EPOLL_CTL_MOD);
                return work;
            }
            close_conn(c, true);
            return work;
        }
        const bool had_hello = rd.has_hello();
        if (!rd.commit(size_t(r), deliver)) {
            ++malformed_;
            close_conn(c, false);
            return work;
        }
        if (!had_hello && rd.has_hello()) {
            c.peer = {rd.peer_nid(), rd.peer_pid()};
            dead_.erase(c.peer);  // a new incarnation of a (nid, pid) we saw die
            if (rd.peer_reads_replies() && !out_.count(c.peer)) replyable_[c.peer] = &c;
        }
        if (rd.saw_bye() && !c.bye_sent) {
            // The peer is done with this connection: our sends take another, and our Bye
            // ends our side.
            unmap(c);
            if (!say_bye(c)) {
                close_conn(c, false);
                return work;
            }
        }
        if (size_t(r) < room) {
            // Drained in the middle of a frame: the peer is streaming one larger than its
            // window and waits for our acknowledgement. On a connection that carries our own
            // messages too, the kernel would hold it back for the next of those.
            if (rd.mid_frame()) acknowledge_now(c.fd);
            return work;
        }
        if ((budget -= std::min(budget, size_t(r))) == 0) return work;
    }
}

void TcpWire::check_connect_timeouts() {
    const uint64_t limit = uint64_t(cfg_.timeout_ms) * 1000000ull, now = monotonic_ns();
    std::vector<Conn *> late;
    for (auto &[fd, c] : conns_)
        if (c->connecting && now > c->started_ns + limit) late.push_back(c.get());
    for (Conn *c : late) close_conn(*c, true);
}

int TcpWire::progress(const MessageHandler &handler) {
    return progress(handler, monotonic_ns());
}

int TcpWire::progress(const MessageHandler &handler, uint64_t now_ns) {
    if (!corked_.empty()) flush_deferred();
    const bool listening_only = conns_.empty();
    if (listening_only || (setup_only_ && last_poll_idle_)) {  // only idle polls are rationed
        // With no connection only a new peer's connect can come, and the watcher thread, armed,
        // sees it: a poll then makes no system call. An epoll_wait every kIdlePollNs was ~0.4
        // system calls per message of a one-host MPI ping-pong (UCX's shared memory makes none).
        if (listening_only && armed_.load(std::memory_order_acquire)) return 0;
        // Callers' clocks differ (the engine's coarse one lags a fresh reading): one behind the
        // last look is not due either, where the unsigned difference made it due at every poll.
        if (now_ns < last_idle_poll_ns_ + (setup_only_ ? idle_poll_ns_ : TcpWire::kIdlePollNs)) return 0;
        last_idle_poll_ns_ = now_ns;
    }
    epoll_event evs[64];
    const int n = epoll_wait(epfd_, evs, 64, 0);
    last_poll_idle_ = n <= 0;
    // Armed after the look: a connect that came in between leaves the listening socket
    // readable, and the watcher fires at once (level-triggered).
    if (listening_only && n <= 0) arm_wakeup();
    int work = 0;
    for (int i = 0; i < n; ++i) {
        const int fd = int(uint32_t(evs[i].data.u64));
        const uint32_t serial = uint32_t(evs[i].data.u64 >> 32);
        if (serial == 0) {
            accept_all();
            continue;
        }
        auto it = conns_.find(fd);
        if (it == conns_.end() || it->second->serial != serial) continue;  // closed in this batch
        work += on_event(*it->second, evs[i].events, handler);
    }
    if (connecting_) check_connect_timeouts();
    return work;
}

bool TcpWire::peer_dead(PeerId p) {
    return dead_.count(p) != 0;
}

uint64_t TcpWire::take_malformed() {
    return std::exchange(malformed_, 0);
}

void TcpWire::arm_wakeup() {
    if (armed_.exchange(1, std::memory_order_acq_rel) == 0)
        syscall(SYS_futex, &armed_, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

void TcpWire::watch() {
    pthread_setname_np(pthread_self(), "ptl-tcp-watch");
    while (!stop_.load(std::memory_order_acquire)) {
        if (armed_.load(std::memory_order_acquire) == 0) {
            syscall(SYS_futex, &armed_, FUTEX_WAIT_PRIVATE, 0, nullptr, nullptr, 0);
            continue;
        }
        epoll_event ev;
        const int n = epoll_wait(watch_epfd_, &ev, 1, -1);
        if (n < 0 && errno == EINTR) continue;
        if (stop_.load(std::memory_order_acquire)) break;
        armed_.store(0, std::memory_order_release);
        wake_();
    }
}

}  // namespace ptl::tcp
