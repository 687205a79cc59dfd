// portals4_rt.h: picks the launcher the program was started by and forwards to it.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <portals4_rt.h>

#include "launcher.h"

#define RT_API extern "C" __attribute__((visibility("default")))

namespace ptl::rt {

double timeout_seconds() {
    const char *t = std::getenv("PTLRT_TIMEOUT");
    const double v = t ? std::atof(t) : 0;
    return v > 0 ? v : 120.0;
}

}  // namespace ptl::rt

namespace {

std::unique_ptr<ptl::rt::Launcher> g_launcher;
bool g_initialized = false;

// PTLRT_LAUNCHER forces one; otherwise the first whose environment is present.
std::string choose_launcher() {
    const char *forced = std::getenv("PTLRT_LAUNCHER");
    if (forced && *forced && std::strcmp(forced, "auto") != 0) return forced;
    if (std::getenv("PTLRT_SHM")) return "ptlrun";
    if (std::getenv("PMIX_RANK") && std::getenv("PMIX_NAMESPACE")) return "pmix";
    if (std::getenv("PMI_FD") || std::getenv("PMI_PORT")) return "pmi1";
    return "none";
}

}  // namespace

RT_API int ptlrt_init(void) {
    if (g_initialized) return 0;
    const std::string which = choose_launcher();
    std::string why;
    if (which == "ptlrun") {
        g_launcher = ptl::rt::open_ptlrun_launcher(why);
    } else if (which == "pmix") {
        g_launcher = ptl::rt::open_pmix_launcher(why);
    } else if (which == "pmi1") {
        g_launcher = ptl::rt::open_pmi1_launcher(why);
    } else if (which == "none") {
        g_launcher = ptl::rt::open_singleton_launcher();
    } else {
        why = "PTLRT_LAUNCHER='" + which + "' is not one of auto, ptlrun, pmix, pmi1, none";
    }
    if (!g_launcher) {
        std::fprintf(stderr, "portals4 runtime (%s): %s\n", which.c_str(), why.c_str());
        return -1;
    }
    g_initialized = true;
    // A PMIx or PMI server treats a client that exits without finalizing as a failed job.
    static bool registered = false;
    if (!registered) registered = std::atexit(ptlrt_fini) == 0;
    return 0;
}

RT_API const char *ptlrt_launcher(void) {
    return g_launcher ? g_launcher->name() : "none";
}
RT_API int ptlrt_rank(void) {
    return g_launcher ? g_launcher->rank() : 0;
}
RT_API int ptlrt_size(void) {
    return g_launcher ? g_launcher->size() : 1;
}

RT_API int ptlrt_barrier(void) {
    return !g_launcher || g_launcher->barrier() ? 0 : -1;
}

RT_API int ptlrt_allgather(const void *in, void *out, size_t len) {
    if (len > PTLRT_MAX_GATHER) return -1;
    if (len == 0) return ptlrt_barrier();  // nothing to move, but still a meeting point
    if (!g_launcher) {
        std::memcpy(out, in, len);
        return 0;
    }
    return g_launcher->allgather(in, out, len) ? 0 : -1;
}

RT_API int ptlrt_exchange_ids(ptl_handle_ni_t ni, ptl_process_t *map_out) {
    ptl_process_t me;
    int rc = PtlGetPhysId(ni, &me);
    if (rc != PTL_OK) return rc;
    std::vector<ptl_process_t> map(static_cast<size_t>(ptlrt_size()));
    if (ptlrt_allgather(&me, map.data(), sizeof me) != 0) return PTL_FAIL;
    if (map_out) std::memcpy(map_out, map.data(), map.size() * sizeof me);
    ptl_process_t probe;
    // Only logical NIs take a map; PtlGetMap on a physical NI is an invalid argument.
    ptl_size_t n = 0;
    rc = PtlGetMap(ni, 0, &probe, &n);
    if (rc == PTL_ARG_INVALID) return PTL_OK;
    return PtlSetMap(ni, map.size(), map.data());
}

RT_API const char *ptlrt_kvs_name(void) {
    static std::string name;
    name = g_launcher ? g_launcher->kvs_name() : "";
    return name.c_str();
}
RT_API size_t ptlrt_kvs_key_max(void) {
    return g_launcher ? g_launcher->kvs_key_max() : 0;
}
RT_API size_t ptlrt_kvs_value_max(void) {
    return g_launcher ? g_launcher->kvs_value_max() : 0;
}

RT_API int ptlrt_kvs_put(const char *key, const char *value) {
    if (!g_launcher || !key || !value || !*key) return -1;
    if (std::strlen(key) >= g_launcher->kvs_key_max() || std::strlen(value) >= g_launcher->kvs_value_max())
        return -1;
    return g_launcher->kvs_put(key, value) ? 0 : -1;
}
RT_API int ptlrt_kvs_commit(void) {
    return g_launcher && g_launcher->kvs_commit() ? 0 : -1;
}
RT_API int ptlrt_kvs_fence(void) {
    return g_launcher && g_launcher->kvs_fence() ? 0 : -1;
}
RT_API long ptlrt_kvs_get(const char *key, char *value, size_t len) {
    std::string v;
    if (!g_launcher || !key || !g_launcher->kvs_get(key, v)) return -1;
    if (value && len) {
        const size_t n = std::min(v.size(), len - 1);
        std::memcpy(value, v.data(), n);
        value[n] = 0;
    }
    return long(v.size());
}

RT_API void ptlrt_fini(void) {
    g_launcher.reset();
    g_initialized = false;
}
