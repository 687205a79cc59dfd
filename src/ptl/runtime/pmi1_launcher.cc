// The launcher for jobs started by Hydra (MPICH's mpiexec): the PMI-1 wire protocol, one
// "cmd=... key=value ..." line per request and reply, on the descriptor Hydra passes in PMI_FD.
// Gathered bytes travel hex-encoded (PMI values cannot hold spaces, '=' or newlines).
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include "launcher.h"

namespace ptl::rt {
namespace {

using Reply = std::map<std::string, std::string>;

class Pmi1Launcher final : public Launcher {
public:
    explicit Pmi1Launcher(int fd) : fd_(fd) {}
    ~Pmi1Launcher() override {
        if (initialized_) {
            Reply r;
            request("cmd=finalize", "finalize_ack", r);
        }
    }

    bool start(std::string &why) {
        Reply r;
        if (!request("cmd=init pmi_version=1 pmi_subversion=1", "response_to_init", r) || r["rc"] != "0") {
            why = "the PMI-1 server did not accept init (" + describe(r) + ")";
            return false;
        }
        initialized_ = true;
        if (!request("cmd=get_maxes", "maxes", r)) {
            why = "PMI-1 get_maxes failed (" + describe(r) + ")";
            return false;
        }
        vallen_max_ = std::strtoul(r["vallen_max"].c_str(), nullptr, 10);
        keylen_max_ = std::strtoul(r["keylen_max"].c_str(), nullptr, 10);
        if (!request("cmd=get_my_kvsname", "my_kvsname", r) || r["kvsname"].empty()) {
            why = "PMI-1 get_my_kvsname failed (" + describe(r) + ")";
            return false;
        }
        kvs_ = r["kvsname"];
        rank_ = std::atoi(std::getenv("PMI_RANK") ? std::getenv("PMI_RANK") : "-1");
        size_ = std::atoi(std::getenv("PMI_SIZE") ? std::getenv("PMI_SIZE") : "0");
        if (size_ <= 0 || rank_ < 0 || rank_ >= size_) {
            why = "PMI_RANK/PMI_SIZE missing or out of range";
            return false;
        }
        return true;
    }

    const char *name() const override { return "pmi1"; }
    int rank() const override { return rank_; }
    int size() const override { return size_; }

    bool barrier() override {
        Reply r;
        return request("cmd=barrier_in", "barrier_out", r);
    }

    // The server's own key-value space: what PMI-1 clients of Hydra expect.
    std::string kvs_name() const override { return kvs_; }
    size_t kvs_key_max() const override { return keylen_max_; }
    size_t kvs_value_max() const override { return vallen_max_; }
    bool kvs_put(const std::string &key, const std::string &value) override {
        // The wire separates fields by spaces and requests by newlines.
        if (key.find_first_of(" \n=") != std::string::npos || value.find_first_of(" \n") != std::string::npos)
            return false;
        Reply r;
        return request("cmd=put kvsname=" + kvs_ + " key=" + key + " value=" + value, "put_result", r) &&
               r["rc"] == "0";
    }
    bool kvs_fence() override { return barrier(); }
    bool kvs_get(const std::string &key, std::string &value) override {
        Reply r;
        if (key.find_first_of(" \n=") != std::string::npos ||
            !request("cmd=get kvsname=" + kvs_ + " key=" + key, "get_result", r) || r["rc"] != "0")
            return false;
        value = r["value"];
        return true;
    }

    bool allgather(const void *in, void *out, size_t len) override {
        if (2 * len + 1 > vallen_max_) return false;
        const std::string prefix = "ptlrt-" + std::to_string(round_++) + "-";
        Reply r;
        const std::string put =
            "cmd=put kvsname=" + kvs_ + " key=" + prefix + std::to_string(rank_) + " value=" + hex(in, len);
        if (!request(put, "put_result", r) || r["rc"] != "0" || !barrier()) return false;
        for (int peer = 0; peer < size_; ++peer) {
            if (!request("cmd=get kvsname=" + kvs_ + " key=" + prefix + std::to_string(peer), "get_result",
                         r) ||
                r["rc"] != "0" || !unhex(r["value"], static_cast<char *>(out) + size_t(peer) * len, len))
                return false;
        }
        return true;
    }

private:
    static std::string describe(Reply &r) {
        if (r.empty()) return "no reply";
        std::string s;
        for (auto &[k, v] : r) s += (s.empty() ? "" : " ") + k + "=" + v;
        return s;
    }

    static std::string hex(const void *p, size_t len) {
        static const char digits[] = "0123456789abcdef";
        std::string s;
        for (size_t i = 0; i < len; ++i) {
            const auto b = static_cast<const unsigned char *>(p)[i];
            s += digits[b >> 4];
            s += digits[b & 15];
        }
        return s;
    }

    static bool unhex(const std::string &s, char *out, size_t len) {
        if (s.size() != 2 * len) return false;
        for (size_t i = 0; i < len; ++i) {
            char byte[3] = {s[2 * i], s[2 * i + 1], 0};
            char *end;
            out[i] = char(std::strtoul(byte, &end, 16));
            if (*end) return false;
        }
        return true;
    }

    // Sends one request line and reads reply lines until one whose cmd is `want`.
    bool request(const std::string &line, const char *want, Reply &reply) {
        reply.clear();
        const std::string msg = line + "\n";
        for (size_t off = 0; off < msg.size();) {
            const ssize_t n = write(fd_, msg.data() + off, msg.size() - off);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return false;
            off += size_t(n);
        }
        const double deadline = monotonic_seconds() + timeout_seconds();
        for (;;) {
            std::string got;
            if (!read_line(got, deadline)) return false;
            reply = parse(got);
            if (reply["cmd"] == want) return true;
        }
    }

    bool read_line(std::string &line, double deadline) {
        for (;;) {
            const size_t nl = pending_.find('\n');
            if (nl != std::string::npos) {
                line = pending_.substr(0, nl);
                pending_.erase(0, nl + 1);
                return true;
            }
            const double left = deadline - monotonic_seconds();
            if (left <= 0) return false;
            struct pollfd p {
                fd_, POLLIN, 0
            };
            const int rc = poll(&p, 1, int(left * 1000) + 1);
            if (rc < 0 && errno == EINTR) continue;
            if (rc <= 0) return false;
            char buf[4096];
            const ssize_t n = read(fd_, buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return false;  // the server is gone
            pending_.append(buf, size_t(n));
        }
    }

    static Reply parse(const std::string &line) {
        Reply r;
        size_t i = 0;
        while (i < line.size()) {
            while (i < line.size() && line[i] == ' ') ++i;
            const size_t end = std::min(line.find(' ', i), line.size());
            const std::string tok = line.substr(i, end - i);
            const size_t eq = tok.find('=');
            if (eq != std::string::npos) r[tok.substr(0, eq)] = tok.substr(eq + 1);
            i = end;
        }
        return r;
    }

    int fd_;
    bool initialized_ = false;
    size_t vallen_max_ = 0;
    size_t keylen_max_ = 0;
    std::string kvs_;
    std::string pending_;
    int rank_ = -1;
    int size_ = 0;
    unsigned round_ = 0;
};

}  // namespace

std::unique_ptr<Launcher> open_pmi1_launcher(std::string &why) {
    const char *fd_s = std::getenv("PMI_FD");
    if (!fd_s) {
        why = std::getenv("PMI_PORT") ? "PMI_PORT (PMI-1 over a port) is not supported; PMI_FD is"
                                      : "PMI_FD is not set";
        return nullptr;
    }
    char *end;
    const long fd = std::strtol(fd_s, &end, 10);
    if (*end || fd < 0) {
        why = std::string("PMI_FD='") + fd_s + "' is not a descriptor";
        return nullptr;
    }
    auto l = std::make_unique<Pmi1Launcher>(int(fd));
    if (!l->start(why)) return nullptr;
    return l;
}

}  // namespace ptl::rt
