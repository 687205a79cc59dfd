#include "trace.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace ptl {

namespace {

std::string host_name() {
    char h[256] = {};
    if (gethostname(h, sizeof h - 1) != 0 || !h[0]) return "localhost";
    // A line's fields are separated by spaces; a domain adds nothing on one machine's lines.
    h[std::strcspn(h, ". ")] = '\0';
    return h;
}

}  // namespace

std::unique_ptr<Trace> Trace::open(const std::string &dir, long mb, std::string *err) {
    if (mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) {
        *err = "cannot make " + dir + ": " + std::strerror(errno);
        return nullptr;
    }
    std::unique_ptr<Trace> t(new Trace);
    const std::string host = host_name();
    const std::string path = dir + "/ptl-trace." + host + "." + std::to_string(getpid());
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        *err = "cannot create " + path + ": " + std::strerror(errno);
        return nullptr;
    }
    const size_t slots = size_t(std::max(mb, 1L)) * (1u << 20) / kLineBytes;
    t->bytes_ = slots * kLineBytes;
    void *m = ftruncate(fd, off_t(t->bytes_)) == 0
                  ? mmap(nullptr, t->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
    const int saved = errno;
    close(fd);  // the mapping keeps the file
    if (m == MAP_FAILED) {
        *err = "cannot map " + path + ": " + std::strerror(saved);
        unlink(path.c_str());
        return nullptr;
    }
    t->map_ = static_cast<char *>(m);
    t->notable_.slots = slots / 8;
    t->notable_.base = t->map_;
    t->ordinary_.slots = slots - t->notable_.slots;
    t->ordinary_.base = t->map_ + t->notable_.slots * kLineBytes;
    // Empty lines where nothing was written yet, so the file reads as text from the start.
    std::memset(t->map_, '\n', t->bytes_);
    std::snprintf(t->who_, sizeof t->who_, "%s:%d -", host.c_str(), int(getpid()));
    return t;
}

RankNote::RankNote(bool logical, uint32_t rank) {
    if (logical) std::snprintf(text, sizeof text, " rank %u", rank);
}

Trace::~Trace() {
    if (map_) munmap(map_, bytes_);
}

void Trace::set_identity(uint32_t nid, uint32_t pid) {
    std::snprintf(who_, sizeof who_, "%s:%d 0x%x:%u", host_name().c_str(), int(getpid()), nid, pid);
}

void Trace::line(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    write(ordinary_, fmt, ap);
    va_end(ap);
}

void Trace::notable(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    write(notable_, fmt, ap);
    va_end(ap);
}

void Trace::line_or_notable(bool is_notable, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    write(is_notable ? notable_ : ordinary_, fmt, ap);
    va_end(ap);
}

void Trace::write(Ring &r, const char *fmt, va_list ap) {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    char buf[kLineBytes + 1];
    int n =
        std::snprintf(buf, sizeof buf, "%lld.%09ld %s ", static_cast<long long>(ts.tv_sec), ts.tv_nsec, who_);
    if (n < 0) return;
    n = std::min<int>(n, kLineBytes);
    const int body = std::vsnprintf(buf + n, sizeof buf - size_t(n), fmt, ap);
    size_t len = size_t(n) + size_t(std::max(body, 0));
    len = std::min(len, kLineBytes - 1);  // room for the newline
    // Slots are claimed atomically, so concurrent writers never share one.
    const uint64_t slot = r.next.fetch_add(1, std::memory_order_relaxed) % r.slots;
    char *p = r.base + slot * kLineBytes;
    std::memcpy(p, buf, len);
    std::memset(p + len, '\n', kLineBytes - len);
}

}  // namespace ptl
