// The tcp wire's byte stream. The connecting side opens a connection with a Hello naming
// itself, then sends frames (FrameHead, engine header, payload). From version 2 on the
// accepting side may send frames back on it (no Hello: the connector knows whom it called),
// so a reply carries the TCP acknowledgement of the request instead of costing a segment of
// its own. A version 1 connector never reads its connection; nothing is sent back to it.
// FrameReader is the receiving side's parser: it never trusts a length from the peer
// (bounded header, bounded payload, memory grown only as bytes really arrive) and reports a
// malformed stream instead of guessing, since a byte stream cannot resynchronise.
// A side that is done with a connection (another wire carries the pair's messages) ends its
// stream with a Bye frame before closing its half: the end that follows is not the peer's death.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace ptl::tcp {

constexpr uint32_t kHelloMagic = 0x344c5450;  // "PTL4" on the wire (little endian)
constexpr uint16_t kVersion = 2;
constexpr uint16_t kFirstDuplexVersion = 2;
constexpr uint16_t kMaxHeader = 512;

struct Hello {
    uint32_t magic;
    uint16_t version;
    uint16_t reserved;
    uint32_t nid;
    uint32_t pid;
};
static_assert(sizeof(Hello) == 16);

struct FrameHead {
    uint16_t header_len;
    uint16_t reserved;  // kByeMark in a Bye (header_len 0), else 0
    uint32_t reserved2;
    uint64_t payload_len;
};
static_assert(sizeof(FrameHead) == 16);

constexpr uint16_t kByeMark = 0x4542;  // "BE"
constexpr FrameHead kBye{0, kByeMark, 0, 0};

class FrameReader {
public:
    using Deliver =
        std::function<void(const void *header, size_t header_len, const void *payload, size_t payload_len)>;

    explicit FrameReader(uint64_t max_payload, size_t stage_bytes = 64 * 1024);

    // Where the next read from the socket should go; `len` gets how much fits (0 once failed).
    char *space(size_t *len);

    // `n` bytes were stored at space(). Delivers every complete frame (the pointers stay valid
    // during the callback only). Returns false once the stream is malformed; the reader then
    // accepts nothing more.
    bool commit(size_t n, const Deliver &deliver);

    // The stream comes from a peer we connected to: it has no Hello; frames are that peer's.
    void assume_peer(uint32_t nid, uint32_t pid);

    bool has_hello() const { return hello_done_; }
    // The connector reads what we send back on its connection.
    bool peer_reads_replies() const { return hello_done_ && hello_.version >= kFirstDuplexVersion; }
    uint32_t peer_nid() const { return hello_.nid; }
    uint32_t peer_pid() const { return hello_.pid; }
    bool failed() const { return failed_; }
    // The peer ended its stream with a Bye (nothing may follow it).
    bool saw_bye() const { return bye_; }
    // Bytes of a frame received but not yet complete (0 between frames).
    bool mid_frame() const { return used_ != 0 || big_fill_ != 0; }

private:
    bool parse_staged(const Deliver &deliver);
    void start_big(const FrameHead &fh, const char *have, size_t have_len);

    uint64_t max_payload_;
    std::vector<char> stage_;  // small frames: parsed in place
    size_t used_ = 0;          // bytes in stage_ not yet consumed
    // A frame larger than the stage is assembled here, grown as its bytes arrive.
    std::vector<char> big_;
    uint64_t big_total_ = 0;  // header + payload bytes expected
    uint64_t big_fill_ = 0;
    uint16_t big_header_len_ = 0;
    Hello hello_{};
    bool hello_done_ = false;
    bool failed_ = false;
    bool bye_ = false;
};

}  // namespace ptl::tcp
