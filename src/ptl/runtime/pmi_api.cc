// libportals_runtime: PMI-1 (portals4/pmi.h) over libportals4's launcher runtime (portals4_rt.h).
// A library of its own, as in the reference implementation, so that PMI_* symbols never sit in
// libportals4 where they would collide with an MPI library's own PMI client.
#include <portals4/pmi.h>
#include <portals4_rt.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define PMI_API extern "C" __attribute__((visibility("default")))

namespace {

bool g_initialized = false;

bool fits(const char *s, size_t max) {
    return std::strlen(s) < max;
}

// PMI-1 names one key-value space per job; a client passes back the name it was given.
bool is_my_kvs(const char *kvsname) {
    return kvsname && std::strcmp(kvsname, ptlrt_kvs_name()) == 0;
}

}  // namespace

PMI_API int PMI_Init(int *spawned) {
    if (!spawned) return PMI_ERR_INVALID_ARG;
    if (!g_initialized && ptlrt_init() != 0) return PMI_FAIL;
    g_initialized = true;
    *spawned = PMI_FALSE;
    return PMI_SUCCESS;
}

PMI_API int PMI_Initialized(int *initialized) {
    if (!initialized) return PMI_ERR_INVALID_ARG;
    *initialized = g_initialized ? PMI_TRUE : PMI_FALSE;
    return PMI_SUCCESS;
}

PMI_API int PMI_Finalize(void) {
    if (!g_initialized) return PMI_ERR_INIT;
    ptlrt_fini();
    g_initialized = false;
    return PMI_SUCCESS;
}

PMI_API int PMI_Get_size(int *size) {
    if (!g_initialized) return PMI_ERR_INIT;
    if (!size) return PMI_ERR_INVALID_ARG;
    *size = ptlrt_size();
    return PMI_SUCCESS;
}

PMI_API int PMI_Get_rank(int *rank) {
    if (!g_initialized) return PMI_ERR_INIT;
    if (!rank) return PMI_ERR_INVALID_ARG;
    *rank = ptlrt_rank();
    return PMI_SUCCESS;
}

PMI_API int PMI_Get_universe_size(int *size) {
    return PMI_Get_size(size);
}

PMI_API int PMI_Get_appnum(int *appnum) {
    if (!g_initialized) return PMI_ERR_INIT;
    if (!appnum) return PMI_ERR_INVALID_ARG;
    *appnum = 0;
    return PMI_SUCCESS;
}

PMI_API int PMI_Barrier(void) {
    if (!g_initialized) return PMI_ERR_INIT;
    return ptlrt_kvs_fence() == 0 ? PMI_SUCCESS : PMI_FAIL;
}

PMI_API int PMI_Abort(int exit_code, const char error_msg[]) {
    std::fprintf(stderr, "PMI_Abort(%d) by rank %d: %s\n", exit_code, ptlrt_rank(),
                 error_msg ? error_msg : "");
    std::fflush(stderr);
    // Every launcher ends the job when a rank exits without finalizing; a zero code would
    // read as success to some of them.
    std::_Exit(exit_code ? exit_code : 1);
}

PMI_API int PMI_KVS_Get_my_name(char kvsname[], int length) {
    if (!g_initialized) return PMI_ERR_INIT;
    if (!kvsname || length <= 0) return PMI_ERR_INVALID_ARG;
    const char *name = ptlrt_kvs_name();
    if (!fits(name, size_t(length))) return PMI_ERR_INVALID_LENGTH;
    std::strcpy(kvsname, name);
    return PMI_SUCCESS;
}

PMI_API int PMI_KVS_Get_name_length_max(int *length) {
    if (!g_initialized) return PMI_ERR_INIT;
    if (!length) return PMI_ERR_INVALID_ARG;
    *length = int(std::max<size_t>(256, std::strlen(ptlrt_kvs_name()) + 1));
    return PMI_SUCCESS;
}

PMI_API int PMI_KVS_Get_key_length_max(int *length) {
    if (!g_initialized) return PMI_ERR_INIT;
    if (!length) return PMI_ERR_INVALID_ARG;
    *length = int(ptlrt_kvs_key_max());
    return PMI_SUCCESS;
}

PMI_API int PMI_KVS_Get_value_length_max(int *length) {
    if (!g_initialized) return PMI_ERR_INIT;
    if (!length) return PMI_ERR_INVALID_ARG;
    *length = int(ptlrt_kvs_value_max());
    return PMI_SUCCESS;
}

PMI_API int PMI_KVS_Put(const char kvsname[], const char key[], const char value[]) {
    if (!g_initialized) return PMI_ERR_INIT;
    if (!is_my_kvs(kvsname)) return PMI_ERR_INVALID_ARG;
    if (!key || !*key) return PMI_ERR_INVALID_KEY;
    if (!value) return PMI_ERR_INVALID_VAL;
    if (!fits(key, ptlrt_kvs_key_max())) return PMI_ERR_INVALID_KEY_LENGTH;
    if (!fits(value, ptlrt_kvs_value_max())) return PMI_ERR_INVALID_VAL_LENGTH;
    return ptlrt_kvs_put(key, value) == 0 ? PMI_SUCCESS : PMI_FAIL;
}

PMI_API int PMI_KVS_Commit(const char kvsname[]) {
    if (!g_initialized) return PMI_ERR_INIT;
    if (!is_my_kvs(kvsname)) return PMI_ERR_INVALID_ARG;
    return ptlrt_kvs_commit() == 0 ? PMI_SUCCESS : PMI_FAIL;
}

PMI_API int PMI_KVS_Get(const char kvsname[], const char key[], char value[], int length) {
    if (!g_initialized) return PMI_ERR_INIT;
    if (!is_my_kvs(kvsname)) return PMI_ERR_INVALID_ARG;
    if (!key || !*key) return PMI_ERR_INVALID_KEY;
    if (!value || length <= 0) return PMI_ERR_INVALID_VAL;
    const long n = ptlrt_kvs_get(key, value, size_t(length));
    if (n < 0) return PMI_FAIL;
    return n < length ? PMI_SUCCESS : PMI_ERR_INVALID_VAL_LENGTH;
}

PMI_API int PMI_Publish_name(const char[], const char[]) {
    return PMI_FAIL;
}
PMI_API int PMI_Unpublish_name(const char[]) {
    return PMI_FAIL;
}
PMI_API int PMI_Lookup_name(const char[], char[]) {
    return PMI_FAIL;
}
PMI_API int PMI_Spawn_multiple(int, const char *[], const char **[], const int[], const int[],
                               const PMI_keyval_t *[], int, const PMI_keyval_t[], int[]) {
    return PMI_FAIL;
}
