// PTL_TRACE=DIR: what the engine did, a line per message sent or received (with the entry it
// matched or why it was dropped or held), per entry appended or unlinked, per portal disabled
// or enabled, per triggered operation armed or fired. The lines go into
// DIR/ptl-trace.HOST.OSPID, a file mapped shared: what a hung or killed process did is on disk
// without its help, which is what a distributed hang needs. PTL_TRACE_MB (default 16) bounds
// the file; the oldest lines are overwritten. Notable lines (a message dropped, held, refused
// or failed; NIs and portals opened and closed) have an eighth of the file to themselves, so
// the flood of ordinary ones that follows a lost message does not wipe out its trace. A line
// starts with the wall-clock time, so
//   grep -ah . DIR/ptl-trace.* | sort
// interleaves the processes of a job (on one host, or hosts with synchronised clocks).
#pragma once

#include <atomic>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ptl {

class Trace {
public:
    // Lines are this long at most, newline included; longer ones are cut.
    static constexpr size_t kLineBytes = 192;

    // A file for this process in `dir` (made if missing), `mb` megabytes (at least 1); nullptr,
    // with the reason in *err, if it cannot be made.
    static std::unique_ptr<Trace> open(const std::string &dir, long mb, std::string *err);
    ~Trace();
    Trace(const Trace &) = delete;
    Trace &operator=(const Trace &) = delete;

    // Sets who this process is in the Portals sense, for the lines that follow.
    void set_identity(uint32_t nid, uint32_t pid);
    [[gnu::cold]] void line(const char *fmt, ...) __attribute__((format(printf, 2, 3)));
    [[gnu::cold]] void notable(const char *fmt, ...) __attribute__((format(printf, 2, 3)));
    [[gnu::cold]] void line_or_notable(bool is_notable, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

private:
    // Lines written in turn into `slots` slots from `base`, the oldest overwritten.
    struct Ring {
        char *base = nullptr;
        size_t slots = 0;
        std::atomic<uint64_t> next{0};
    };
    Trace() = default;
    void write(Ring &r, const char *fmt, va_list ap);
    char *map_ = nullptr;
    size_t bytes_ = 0;
    Ring ordinary_, notable_;
    char who_[80] = {};  // "host:ospid nid:pid"
};

// " rank R" naming a logical NI's peer, empty for a physical NI's.
struct RankNote {
    char text[24] = "";
    RankNote(bool logical, uint32_t rank);
};

}  // namespace ptl

// Arguments are evaluated only while tracing: the cost otherwise is a test of a pointer.
#define PTL_TRACE(trace, ...)                \
    do {                                     \
        if ((trace) != nullptr) [[unlikely]] \
            (trace)->line(__VA_ARGS__);      \
    } while (0)
#define PTL_TRACE_NOTABLE(trace, ...)        \
    do {                                     \
        if ((trace) != nullptr) [[unlikely]] \
            (trace)->notable(__VA_ARGS__);   \
    } while (0)
