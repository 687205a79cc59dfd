// Two real processes on this host, each with its own UCT md/worker/iface of the "portals"
// transport, through the public UCT API only. The component is loaded like stock UCX users
// load it (env.sh preloads it): dlopen before the first UCT call registers it.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

extern "C" {
#include <ucs/async/async_fwd.h>
#include <ucs/debug/log_def.h>
#include <uct/api/uct.h>
}

#include <cstdarg>
#include <cstdio>

namespace uct_test {

// Closing must be clean, as UCX's own gtest demands: a warning while closing (an ME left on a
// portal, a portal not freed) fails the test.
inline ucs_log_func_rc_t fail_on_warning(const char *file, unsigned line, const char *, ucs_log_level_t level,
                                         const ucs_log_component_config_t *, const char *fmt, va_list ap) {
    if (level <= UCS_LOG_LEVEL_WARN) {
        char msg[512];
        va_list copy;
        va_copy(copy, ap);
        vsnprintf(msg, sizeof msg, fmt, copy);
        va_end(copy);
        ADD_FAILURE() << "while closing: " << file << ":" << line << ": " << msg;
    }
    return UCS_LOG_FUNC_RC_CONTINUE;
}

inline void load_component() {
    static bool loaded = false;
    if (loaded) return;
    const char *top = getenv("abs_top_builddir");
    const std::string path = std::string(top ? top : ".") + "/.libs/libuct_portals.so";
    ASSERT_NE(dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL), nullptr) << dlerror();
    loaded = true;
}

// A byte stream between the two processes for addresses, keys and "go" signals. Every read
// has a timeout: a peer that died fails the test instead of hanging it.
struct Channel {
    int fd = -1;
    void send(const void *p, size_t n) const {
        uint32_t len = uint32_t(n);
        ASSERT_EQ(::write(fd, &len, sizeof len), ssize_t(sizeof len));
        if (n) {
            ASSERT_EQ(::write(fd, p, n), ssize_t(n));
        }
    }
    std::vector<char> recv(int timeout_ms = 30000) const {
        std::vector<char> out;
        uint32_t len = 0;
        read_all(&len, sizeof len, timeout_ms);
        out.resize(len);
        if (len) read_all(out.data(), len, timeout_ms);
        return out;
    }
    void signal(const std::string &s) const { send(s.data(), s.size()); }
    void expect(const std::string &s) const {
        std::vector<char> v = recv();
        EXPECT_EQ(std::string(v.begin(), v.end()), s);
    }
    template <typename T>
    void send_pod(const T &v) const {
        send(&v, sizeof v);
    }
    template <typename T>
    T recv_pod() const {
        std::vector<char> v = recv();
        T t{};
        EXPECT_EQ(v.size(), sizeof t);
        if (v.size() == sizeof t) std::memcpy(&t, v.data(), sizeof t);
        return t;
    }

private:
    void read_all(void *p, size_t n, int timeout_ms) const {
        char *c = static_cast<char *>(p);
        while (n) {
            struct pollfd pfd {
                fd, POLLIN, 0
            };
            if (poll(&pfd, 1, timeout_ms) <= 0) {
                ADD_FAILURE() << "peer process did not answer within " << timeout_ms << " ms";
                std::memset(c, 0, n);
                return;
            }
            const ssize_t r = ::read(fd, c, n);
            if (r <= 0) {
                ADD_FAILURE() << "peer process closed the channel";
                std::memset(c, 0, n);
                return;
            }
            c += r;
            n -= size_t(r);
        }
    }
};

// Runs `parent` here and `child` in a forked process; the child's failures fail the test.
inline void run_pair(const std::function<void(Channel &)> &parent,
                     const std::function<void(Channel &)> &child) {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fflush(nullptr);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        close(sv[0]);
        Channel c{sv[1]};
        child(c);
        _exit(::testing::Test::HasFailure() ? 1 : 0);
    }
    close(sv[1]);
    Channel c{sv[0]};
    parent(c);
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            ADD_FAILURE() << "child process timed out";
            break;
        }
        struct timespec ts {
            0, 1000000
        };
        nanosleep(&ts, nullptr);
    }
    close(sv[0]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "child process failed (status " << status << ")";
}

// One side: md, worker and an iface on device "lo" of the portals transport.
// Every Side asks for this much headroom before received data; a kept descriptor is
// released as data - kRxHeadroom (what uct_iface_release_desc expects).
constexpr size_t kRxHeadroom = 32;

struct Side {
    uct_component_h component = nullptr;
    uct_md_h md = nullptr;
    ucs_async_context_t *async = nullptr;
    uct_worker_h worker = nullptr;
    uct_iface_h iface = nullptr;
    uct_iface_attr_t attr{};
    size_t dev_len = 0, iface_len = 0;

    // `config` overrides UCX_PORTALS_* iface variables (without the prefix).
    void open(const std::map<std::string, std::string> &config = {},
              const std::function<void(uct_iface_params_t &)> &tune = {}) {
        load_component();
        uct_component_h *comps;
        unsigned n;
        ASSERT_EQ(uct_query_components(&comps, &n), UCS_OK);
        for (unsigned i = 0; i < n; ++i) {
            uct_component_attr_t ca{};
            ca.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
            ASSERT_EQ(uct_component_query(comps[i], &ca), UCS_OK);
            if (std::string(ca.name) == "portals") component = comps[i];
        }
        uct_release_component_list(comps);
        ASSERT_NE(component, nullptr) << "the portals component is not registered";
        uct_md_config_t *mdc;
        ASSERT_EQ(uct_md_config_read(component, nullptr, nullptr, &mdc), UCS_OK);
        ASSERT_EQ(uct_md_open(component, "portals", mdc, &md), UCS_OK);
        uct_config_release(mdc);
        ASSERT_EQ(ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async), UCS_OK);
        ASSERT_EQ(uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &worker), UCS_OK);
        uct_iface_config_t *ic;
        ASSERT_EQ(uct_md_iface_config_read(md, "portals", nullptr, nullptr, &ic), UCS_OK);
        // UCX 1.13 takes the variable's name within the table, later versions its full name.
        for (const auto &kv : config) {
            ucs_status_t s = uct_config_modify(ic, kv.first.c_str(), kv.second.c_str());
            if (s == UCS_ERR_NO_ELEM)
                s = uct_config_modify(ic, ("PORTALS_" + kv.first).c_str(), kv.second.c_str());
            ASSERT_EQ(s, UCS_OK) << kv.first;
        }
        uct_iface_params_t p{};
        p.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE |
                       UCT_IFACE_PARAM_FIELD_RX_HEADROOM;
        p.open_mode = UCT_IFACE_OPEN_MODE_DEVICE;
        p.mode.device.tl_name = "portals";
        p.mode.device.dev_name = "lo";
        p.rx_headroom = kRxHeadroom;
        if (tune) tune(p);
        ASSERT_EQ(uct_iface_open(md, worker, &p, ic, &iface), UCS_OK);
        uct_config_release(ic);
        ASSERT_EQ(uct_iface_query(iface, &attr), UCS_OK);
        dev_len = attr.device_addr_len;
        iface_len = attr.iface_addr_len;
        uct_iface_progress_enable(iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    }

    // A failed ASSERT returns early: closing here keeps the engine from leaking into the next
    // test's forked child.
    ~Side() { close(); }

    void close() {
        ucs_log_push_handler(fail_on_warning);
        if (iface) uct_iface_close(iface);
        if (worker) uct_worker_destroy(worker);
        if (async) ucs_async_context_destroy(async);
        if (md) uct_md_close(md);
        ucs_log_pop_handler();
        iface = nullptr;
        worker = nullptr;
        async = nullptr;
        md = nullptr;
    }

    std::vector<char> address() const {
        std::vector<char> a(dev_len + iface_len);
        EXPECT_EQ(uct_iface_get_device_address(iface, reinterpret_cast<uct_device_addr_t *>(a.data())),
                  UCS_OK);
        EXPECT_EQ(uct_iface_get_address(iface, reinterpret_cast<uct_iface_addr_t *>(a.data() + dev_len)),
                  UCS_OK);
        return a;
    }

    uct_ep_h connect(const std::vector<char> &addr) const {
        uct_ep_params_t p{};
        p.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR | UCT_EP_PARAM_FIELD_IFACE_ADDR;
        p.iface = iface;
        p.dev_addr = reinterpret_cast<const uct_device_addr_t *>(addr.data());
        p.iface_addr = reinterpret_cast<const uct_iface_addr_t *>(addr.data() + dev_len);
        EXPECT_TRUE(uct_iface_is_reachable(iface, p.dev_addr, p.iface_addr));
        uct_ep_h ep = nullptr;
        EXPECT_EQ(uct_ep_create(&p, &ep), UCS_OK);
        return ep;
    }

    void progress() const { uct_worker_progress(worker); }

    // Progresses until `done` holds; false after `timeout_ms`.
    bool wait(const std::function<bool()> &done, int timeout_ms = 20000) const {
        const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
        while (!done()) {
            if (std::chrono::steady_clock::now() > end) return false;
            progress();
        }
        return true;
    }

    void flush(uct_ep_h ep) const {
        EXPECT_TRUE(wait([&] {
            const ucs_status_t s = uct_ep_flush(ep, 0, nullptr);
            EXPECT_TRUE(s == UCS_OK || s == UCS_INPROGRESS || s == UCS_ERR_NO_RESOURCE)
                << ucs_status_string(s);
            return s == UCS_OK;
        })) << "flush did not complete";
    }
};

// Waits, without progressing UCT, until the engine's progress thread has written `want` at
// `p` (the read is atomic: that thread writes concurrently).
inline bool landed(char *p, char want, int timeout_ms = 20000) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::atomic_ref<char>(*p).load(std::memory_order_acquire) != want) {
        if (std::chrono::steady_clock::now() > end) return false;
        sched_yield();
    }
    return true;
}

// A completion that counts.
struct Counted {
    uct_completion_t comp{};
    int done = 0;
    ucs_status_t status = UCS_OK;
    explicit Counted(int count = 1) {
        comp.func = [](uct_completion_t *c) {
            auto *self = reinterpret_cast<Counted *>(c);
            ++self->done;
            if (c->status != UCS_OK) self->status = c->status;
        };
        comp.count = count;
        comp.status = UCS_OK;
    }
    void rearm(int count = 1) { comp.count = count; }
    // What an operation given this completion returned: UCS_OK means done in the call (the
    // direct path; UCT then calls no completion), which counts as one of `count` here too.
    // False for an error.
    bool started(ucs_status_t st) {
        if (st == UCS_INPROGRESS) return true;
        if (st != UCS_OK) return false;
        if (--comp.count == 0) comp.func(&comp);
        return true;
    }
};

// The byte a test writes at offset i of a buffer with seed s.
inline uint8_t pattern(size_t i, unsigned s) {
    return uint8_t((i * 131 + s * 17 + (i >> 8)) & 0xff);
}
inline void fill(void *p, size_t n, unsigned s) {
    for (size_t i = 0; i < n; ++i) static_cast<uint8_t *>(p)[i] = pattern(i, s);
}
inline size_t first_mismatch(const void *p, size_t n, unsigned s) {
    for (size_t i = 0; i < n; ++i)
        if (static_cast<const uint8_t *>(p)[i] != pattern(i, s)) return i;
    return n;
}

}  // namespace uct_test
