// PTL_TRACE (src/ptl/engine/trace.h): a traced process's lines say what became of each
// message, are on disk although the process was killed without calling anything more, and
// stay within PTL_TRACE_MB by overwriting the oldest. A directory that cannot be made leaves
// the process untraced, not broken.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ptl_test_util.h"

using namespace ptltest;

namespace {

constexpr ptl_pt_index_t kPt = 4;

std::string make_temp_dir() {
    char tmpl[] = "/tmp/ptl-trace-test.XXXXXX";
    const char *d = mkdtemp(tmpl);
    return d ? d : "";
}

void remove_dir(const std::string &dir) {
    if (DIR *d = opendir(dir.c_str())) {
        while (const dirent *e = readdir(d))
            if (e->d_name[0] != '.') unlink((dir + "/" + e->d_name).c_str());
        closedir(d);
    }
    rmdir(dir.c_str());
}

// The trace file of process `pid` in `dir` ("" if there is none).
std::string trace_file(const std::string &dir, pid_t pid) {
    const std::string suffix = "." + std::to_string(pid);
    std::string found;
    if (DIR *d = opendir(dir.c_str())) {
        while (const dirent *e = readdir(d)) {
            const std::string name = e->d_name;
            if (name.rfind("ptl-trace.", 0) == 0 && name.size() > suffix.size() &&
                name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
                found = dir + "/" + name;
        }
        closedir(d);
    }
    return found;
}

std::vector<std::string> non_empty_lines(const std::string &file) {
    std::vector<std::string> lines;
    std::ifstream in(file);
    for (std::string l; std::getline(in, l);)
        if (!l.empty()) lines.push_back(l);
    return lines;
}

size_t count_containing(const std::vector<std::string> &lines, const std::string &a,
                        const std::string &b = "") {
    size_t n = 0;
    for (const auto &l : lines)
        if (l.find(a) != std::string::npos && (b.empty() || l.find(b) != std::string::npos)) ++n;
    return n;
}

// In a child: a matching physical NI that puts to itself `drops` messages with match bits
// 8, 9, ..., which nothing takes, then `deliveries` with bits 7, which an ME takes. Reports on
// `done` when every message was processed, then waits to be killed.
[[noreturn]] void traced_process(const std::string &dir, const char *mb, int drops, int deliveries,
                                 int done) {
    setenv("PTL_TRACE", dir.c_str(), 1);
    if (mb) setenv("PTL_TRACE_MB", mb, 1);
    ptl_handle_ni_t ni;
    if (PtlInit() != PTL_OK || PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY,
                                         nullptr, nullptr, &ni) != PTL_OK)
        _exit(1);
    ptl_process_t self;
    ptl_pt_index_t pt;
    ptl_handle_ct_t ct;
    if (PtlGetPhysId(ni, &self) != PTL_OK || PtlPTAlloc(ni, 0, PTL_EQ_NONE, kPt, &pt) != PTL_OK ||
        PtlCTAlloc(ni, &ct) != PTL_OK)
        _exit(2);
    static char rbuf[64], sbuf[8];
    // Locally managed: once full, it takes further messages as zero-length ones.
    const ptl_me_t me =
        me_desc(rbuf, sizeof rbuf, PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM | PTL_ME_MANAGE_LOCAL, 7, 0, ct);
    ptl_handle_me_t meh;
    ptl_handle_md_t md;
    const ptl_md_t d = md_desc(sbuf, sizeof sbuf);
    if (PtlMEAppend(ni, pt, &me, PTL_PRIORITY_LIST, nullptr, &meh) != PTL_OK ||
        PtlMDBind(ni, &d, &md) != PTL_OK)
        _exit(3);
    for (int i = 0; i < drops + deliveries; ++i) {
        const ptl_match_bits_t bits = i < drops ? ptl_match_bits_t(i + 8) : 7;
        if (PtlPut(md, 0, sizeof sbuf, PTL_NO_ACK_REQ, self, kPt, bits, 0, nullptr, 0) != PTL_OK) _exit(4);
    }
    ptl_ct_event_t got{};
    unsigned which;
    const ptl_size_t want = ptl_size_t(deliveries);
    if (want && PtlCTPoll(&ct, &want, 1, kTimeoutMs, &got, &which) != PTL_OK) _exit(5);
    for (ptl_time_t ms = 0;; ++ms) {
        ptl_sr_value_t dropped = 0;
        if (PtlNIStatus(ni, PTL_SR_DROP_COUNT, &dropped) != PTL_OK) _exit(6);
        if (dropped == ptl_sr_value_t(drops)) break;
        if (ms > kTimeoutMs) _exit(7);
        usleep(1000);
    }
    if (write(done, "d", 1) != 1) _exit(8);
    pause();  // killed here: no PtlFini, no exit handlers
    _exit(9);
}

// Runs traced_process in a child, kills it once it reported, and returns its pid.
pid_t run_and_kill(const std::string &dir, const char *mb, int drops, int deliveries) {
    int p[2];
    EXPECT_EQ(pipe(p), 0);
    const pid_t child = fork();
    EXPECT_GE(child, 0);
    if (child == 0) {
        close(p[0]);
        traced_process(dir, mb, drops, deliveries, p[1]);
    }
    close(p[1]);
    char c = 0;
    const ssize_t got = read(p[0], &c, 1);  // EOF if it failed
    close(p[0]);
    kill(child, SIGKILL);
    int status = 0;
    EXPECT_EQ(waitpid(child, &status, 0), child);
    EXPECT_EQ(got, 1) << "the traced process failed: status "
                      << (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return child;
}

// The lines of the trace of a traced_process run.
std::vector<std::string> traced_run(const std::string &dir, const char *mb, int drops, int deliveries) {
    const pid_t pid = run_and_kill(dir, mb, drops, deliveries);
    const std::string file = trace_file(dir, pid);
    EXPECT_NE(file, "") << "no trace file of pid " << pid << " in " << dir;
    struct stat st {};
    EXPECT_EQ(stat(file.c_str(), &st), 0);
    EXPECT_LE(st.st_size, (mb ? std::atol(mb) : 16) << 20);
    std::vector<std::string> lines = non_empty_lines(file);
    // Every line starts with the wall-clock time and who wrote it.
    const std::string who = ":" + std::to_string(pid) + " 0x";
    for (const auto &l : lines) {
        EXPECT_TRUE(l.size() > 21 && l[10] == '.' && l[20] == ' ') << l;
        EXPECT_NE(l.find(who), std::string::npos) << l;
    }
    return lines;
}

}  // namespace

TEST(Trace, SaysWhatBecameOfEachMessageEvenOfAKilledProcess) {
    const std::string dir = make_temp_dir() + "/made-by-ptl";  // PTL_TRACE makes the directory
    const std::vector<std::string> lines = traced_run(dir, nullptr, 9, 1);
    EXPECT_EQ(count_containing(lines, "open: pid "), 1u);
    EXPECT_EQ(count_containing(lines, "ni2 init: matching, physical"), 1u);
    EXPECT_EQ(count_containing(lines, " pt 4 alloc: options 0x0"), 1u);
    EXPECT_EQ(count_containing(lines, " pt 4 append me 0x", "(priority list) bits 0x7 ignore 0x0"), 1u);
    EXPECT_EQ(count_containing(lines, " put -> ", " pt 4 bits 0x"), 10u);
    EXPECT_EQ(count_containing(lines, " put <- ",
                               "bits 0x7 len 8 op 0: delivered 8 bytes at offset 0, matched me 0x"),
              1u);
    EXPECT_EQ(count_containing(lines, " put <- ", ": dropped: no entry matched"), 9u);
    EXPECT_EQ(count_containing(lines, "bits 0xb len 8 op 0: dropped: no entry matched"), 1u);
    remove_dir(dir);
    rmdir(dir.substr(0, dir.rfind('/')).c_str());
}

// 1 MB: 5461 lines, 682 of them for notable lines (here the drops), the rest for ordinary ones
// (here the sends and the delivery).
constexpr size_t kLinesPerMb = (1u << 20) / 192, kNotablePerMb = kLinesPerMb / 8;

TEST(Trace, KeepsTheNewestLinesWithinItsSize) {
    const std::string dir = make_temp_dir();
    constexpr int kDrops = 6000;
    const std::vector<std::string> lines = traced_run(dir, "1", kDrops, 1);
    EXPECT_EQ(lines.size(), kLinesPerMb);
    char last_drop[32];
    std::snprintf(last_drop, sizeof last_drop, " bits 0x%x len 8 ", kDrops - 1 + 8);
    EXPECT_EQ(count_containing(lines, " put -> ", last_drop), 1u) << "the newest drop's send is missing";
    EXPECT_EQ(count_containing(lines, " put <- ", std::string(last_drop) + "op 0: dropped"), 1u)
        << "the newest drop is missing";
    EXPECT_EQ(count_containing(lines, " put -> ", " bits 0x8 len 8 "), 0u) << "the first send survived";
    EXPECT_EQ(count_containing(lines, " put <- ", " bits 0x8 len 8 "), 0u) << "the first drop survived";
    EXPECT_EQ(count_containing(lines, ": dropped: no entry matched"), kNotablePerMb);
    EXPECT_EQ(count_containing(lines, "bits 0x7 len 8 op 0: delivered 8 bytes"), 1u)
        << "the newest delivery is missing";
    remove_dir(dir);
}

// A lost message is often followed by a flood of ordinary traffic: its line must outlive it.
TEST(Trace, KeepsNotableLinesThroughAFloodOfOrdinaryOnes) {
    const std::string dir = make_temp_dir();
    const std::vector<std::string> lines = traced_run(dir, "1", 1, 6000);  // 12000 ordinary lines
    EXPECT_EQ(count_containing(lines, " put <- ", " bits 0x8 len 8 op 0: dropped: no entry matched"), 1u);
    EXPECT_EQ(count_containing(lines, "open: pid "), 1u);
    EXPECT_EQ(count_containing(lines, " pt 4 alloc: "), 1u);
    EXPECT_EQ(count_containing(lines, " put -> ", " bits 0x8 len 8 "), 0u)
        << "an ordinary line survived the flood";
    // The four notable lines (open, init, alloc, the drop) and a full share of ordinary ones.
    EXPECT_EQ(lines.size(), 4 + kLinesPerMb - kNotablePerMb);
    remove_dir(dir);
}

// A process that closes its NI and opens one again (UCX does, per iface) keeps one file.
TEST(Trace, OneFileAcrossAClosedAndReopenedNI) {
    const std::string dir = make_temp_dir();
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        setenv("PTL_TRACE", dir.c_str(), 1);
        if (PtlInit() != PTL_OK) _exit(1);
        for (int i = 0; i < 2; ++i) {
            ptl_handle_ni_t ni;
            ptl_pt_index_t pt;
            if (PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, nullptr, nullptr,
                          &ni) != PTL_OK ||
                PtlPTAlloc(ni, 0, PTL_EQ_NONE, kPt, &pt) != PTL_OK || PtlPTFree(ni, pt) != PTL_OK ||
                PtlNIFini(ni) != PTL_OK)
                _exit(2);
        }
        PtlFini();
        _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
    const std::vector<std::string> lines = non_empty_lines(trace_file(dir, child));
    EXPECT_EQ(count_containing(lines, "open: pid "), 2u);
    EXPECT_EQ(count_containing(lines, " pt 4 alloc: "), 2u);
    EXPECT_EQ(count_containing(lines, " close"), 2u);
    remove_dir(dir);
}

TEST(Trace, ADirectoryThatCannotBeMadeLeavesTheProcessUntraced) {
    setenv("PTL_TRACE", "/proc/no-such-dir/trace", 1);
    ASSERT_EQ(PtlInit(), PTL_OK);
    unsetenv("PTL_TRACE");
    ptl_handle_ni_t ni;
    EXPECT_EQ(
        PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, nullptr, nullptr, &ni),
        PTL_OK);
    EXPECT_EQ(PtlNIFini(ni), PTL_OK);
    PtlFini();
}
