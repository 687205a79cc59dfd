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

// In a child: a matching physical NI that puts `puts` messages to itself with match bits
// 0, 1, ...; an ME takes bits 7 and nothing else does. Reports on `done` when every message
// was processed, then waits to be killed.
[[noreturn]] void traced_process(const std::string &dir, const char *mb, int puts, int done) {
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
    const ptl_me_t me =
        me_desc(rbuf, sizeof rbuf, PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM | PTL_ME_MANAGE_LOCAL, 7, 0, ct);
    ptl_handle_me_t meh;
    ptl_handle_md_t md;
    const ptl_md_t d = md_desc(sbuf, sizeof sbuf);
    if (PtlMEAppend(ni, pt, &me, PTL_PRIORITY_LIST, nullptr, &meh) != PTL_OK ||
        PtlMDBind(ni, &d, &md) != PTL_OK)
        _exit(3);
    for (int i = 0; i < puts; ++i)
        if (PtlPut(md, 0, sizeof sbuf, PTL_NO_ACK_REQ, self, kPt, ptl_match_bits_t(i), 0, nullptr, 0) !=
            PTL_OK)
            _exit(4);
    // One message matched, the others dropped and counted.
    ptl_ct_event_t got{};
    unsigned which;
    const ptl_size_t one = puts > 7 ? 1 : 0;
    if (one && PtlCTPoll(&ct, &one, 1, kTimeoutMs, &got, &which) != PTL_OK) _exit(5);
    for (ptl_time_t ms = 0;; ++ms) {
        ptl_sr_value_t drops = 0;
        if (PtlNIStatus(ni, PTL_SR_DROP_COUNT, &drops) != PTL_OK) _exit(6);
        if (drops == ptl_sr_value_t(puts - one)) break;
        if (ms > kTimeoutMs) _exit(7);
        usleep(1000);
    }
    if (write(done, "d", 1) != 1) _exit(8);
    pause();  // killed here: no PtlFini, no exit handlers
    _exit(9);
}

// Runs traced_process in a child, kills it once it reported, and returns its pid.
pid_t run_and_kill(const std::string &dir, const char *mb, int puts) {
    int p[2];
    EXPECT_EQ(pipe(p), 0);
    const pid_t child = fork();
    EXPECT_GE(child, 0);
    if (child == 0) {
        close(p[0]);
        traced_process(dir, mb, puts, p[1]);
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

}  // namespace

TEST(Trace, SaysWhatBecameOfEachMessageEvenOfAKilledProcess) {
    const std::string dir = make_temp_dir() + "/made-by-ptl";  // PTL_TRACE makes the directory
    const pid_t pid = run_and_kill(dir, nullptr, 10);
    const std::string file = trace_file(dir, pid);
    ASSERT_NE(file, "") << "no trace file of pid " << pid << " in " << dir;
    const std::vector<std::string> lines = non_empty_lines(file);
    EXPECT_EQ(count_containing(lines, "open: pid "), 1u);
    EXPECT_EQ(count_containing(lines, "ni2 init: matching, physical"), 1u);
    EXPECT_EQ(count_containing(lines, " pt 4 append me 0x", "(priority list) bits 0x7 ignore 0x0"), 1u);
    EXPECT_EQ(count_containing(lines, " put -> ", " pt 4 bits 0x"), 10u);
    EXPECT_EQ(count_containing(lines, " put <- ",
                               "bits 0x7 len 8 op 0: delivered 8 bytes at offset 0, matched me 0x"),
              1u);
    EXPECT_EQ(count_containing(lines, " put <- ", ": dropped: no entry matched"), 9u);
    EXPECT_EQ(count_containing(lines, "bits 0x3 len 8 op 0: dropped: no entry matched"), 1u);
    // Every line starts with the wall-clock time and who wrote it.
    const std::string who = ":" + std::to_string(pid) + " 0x";
    for (const auto &l : lines) {
        EXPECT_TRUE(l.size() > 21 && l[10] == '.' && l[20] == ' ') << l;
        EXPECT_NE(l.find(who), std::string::npos) << l;
    }
    remove_dir(dir);
    rmdir(dir.substr(0, dir.rfind('/')).c_str());
}

TEST(Trace, KeepsTheNewestLinesWithinItsSize) {
    const std::string dir = make_temp_dir();
    constexpr int kPuts = 4000;  // 8000 message lines, more than the 5461 of 1 MB
    const pid_t pid = run_and_kill(dir, "1", kPuts);
    const std::string file = trace_file(dir, pid);
    ASSERT_NE(file, "") << "no trace file of pid " << pid << " in " << dir;
    const std::vector<std::string> lines = non_empty_lines(file);
    EXPECT_EQ(lines.size(), (1u << 20) / 192);
    struct stat st {};
    ASSERT_EQ(stat(file.c_str(), &st), 0);
    EXPECT_LE(st.st_size, 1 << 20);
    char last[64];
    std::snprintf(last, sizeof last, " bits 0x%x len 8 op 0: dropped", kPuts - 1);
    EXPECT_EQ(count_containing(lines, last), 1u) << "the newest message is missing";
    EXPECT_EQ(count_containing(lines, "open: pid "), 0u) << "the oldest line survived";
    EXPECT_EQ(count_containing(lines, " put -> ", " bits 0x0 len 8 "), 0u) << "the first send survived";
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
