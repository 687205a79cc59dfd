/* A PMI-1 client as the reference implementation's users write one (GASNet's portals4-conduit,
 * SOS): #include <portals4/pmi.h>, linked with -lportals_runtime. Every rank publishes keys in
 * two rounds (one value longer than a gather slot), reads every other rank's after PMI_Barrier,
 * and checks the errors PMI-1 defines. Usage: pmi_client [EXPECTED_SIZE [EXPECTED_LAUNCHER]].
 * The launcher is checked through portals4_rt.h, which names the one the runtime detected. */
#include <portals4/pmi.h>
#include <portals4_rt.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank = -1;

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "pmi_client rank %d: %s:%d: %s\n", rank, __FILE__, __LINE__, #cond); \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

static void value_for(int r, int round, int len, char *out) {
    int n = snprintf(out, (size_t)len + 1, "r%d-round%d-", r, round);
    for (int i = n; i < len; ++i) out[i] = (char)('a' + (i * 7 + r + round) % 26);
    out[len] = 0;
}

int main(int argc, char **argv) {
    int initialized = -1, spawned = -1, size = 0;
    CHECK(PMI_Initialized(&initialized) == PMI_SUCCESS && initialized == PMI_FALSE);
    CHECK(PMI_Get_rank(&rank) == PMI_ERR_INIT);
    CHECK(PMI_Init(&spawned) == PMI_SUCCESS && spawned == PMI_FALSE);
    CHECK(PMI_Initialized(&initialized) == PMI_SUCCESS && initialized == PMI_TRUE);
    CHECK(PMI_Get_rank(&rank) == PMI_SUCCESS && PMI_Get_size(&size) == PMI_SUCCESS);
    CHECK(rank >= 0 && rank < size);
    if (argc > 1) CHECK(size == atoi(argv[1]));
    if (argc > 2) CHECK(strcmp(ptlrt_launcher(), argv[2]) == 0);
    int universe = 0, appnum = -1;
    CHECK(PMI_Get_universe_size(&universe) == PMI_SUCCESS && universe >= size);
    CHECK(PMI_Get_appnum(&appnum) == PMI_SUCCESS && appnum == 0);

    int name_max = 0, key_max = 0, val_max = 0;
    CHECK(PMI_KVS_Get_name_length_max(&name_max) == PMI_SUCCESS && name_max > 0);
    CHECK(PMI_KVS_Get_key_length_max(&key_max) == PMI_SUCCESS && key_max >= 32);
    CHECK(PMI_KVS_Get_value_length_max(&val_max) == PMI_SUCCESS && val_max >= 256);
    char *kvs = malloc((size_t)name_max);
    char *key = malloc((size_t)key_max + 2);
    char *got = malloc((size_t)val_max);
    char *want = malloc((size_t)val_max);
    CHECK(kvs && key && got && want);
    CHECK(PMI_KVS_Get_my_name(kvs, name_max) == PMI_SUCCESS && kvs[0]);
    CHECK(PMI_KVS_Get_my_name(kvs, 1) == PMI_ERR_INVALID_LENGTH);
    CHECK(PMI_KVS_Get_my_name(kvs, name_max) == PMI_SUCCESS);

    /* Longer than the 256-byte rounds that carry the keys under ptlrun; Hydra's limit is 1024. */
    const int long_len = val_max - 1 < 900 ? val_max - 1 : 900;
    for (int round = 0; round < 2; ++round) {
        snprintf(key, (size_t)key_max, "long-%d-%d", round, rank);
        value_for(rank, round, long_len, want);
        CHECK(PMI_KVS_Put(kvs, key, want) == PMI_SUCCESS);
        snprintf(key, (size_t)key_max, "short-%d-%d", round, rank);
        CHECK(PMI_KVS_Put(kvs, key, "x") == PMI_SUCCESS);
        CHECK(PMI_KVS_Commit(kvs) == PMI_SUCCESS);
        CHECK(PMI_Barrier() == PMI_SUCCESS);
        for (int peer = 0; peer < size; ++peer) {
            int p = (rank + peer) % size;
            snprintf(key, (size_t)key_max, "long-%d-%d", round, p);
            value_for(p, round, long_len, want);
            CHECK(PMI_KVS_Get(kvs, key, got, val_max) == PMI_SUCCESS);
            CHECK(strcmp(got, want) == 0);
            CHECK(PMI_KVS_Get(kvs, key, got, 8) == PMI_ERR_INVALID_VAL_LENGTH);
            snprintf(key, (size_t)key_max, "short-%d-%d", round, p);
            CHECK(PMI_KVS_Get(kvs, key, got, val_max) == PMI_SUCCESS && strcmp(got, "x") == 0);
        }
    }

    CHECK(PMI_KVS_Get(kvs, "no-rank-put-this", got, val_max) != PMI_SUCCESS);
    CHECK(PMI_KVS_Put("not-my-kvs", "k", "v") == PMI_ERR_INVALID_ARG);
    memset(key, 'k', (size_t)key_max + 1);
    key[key_max + 1] = 0;
    CHECK(PMI_KVS_Put(kvs, key, "v") == PMI_ERR_INVALID_KEY_LENGTH);
    CHECK(PMI_KVS_Put(kvs, "", "v") == PMI_ERR_INVALID_KEY);
    CHECK(PMI_Publish_name("service", "port") == PMI_FAIL);

    CHECK(PMI_Barrier() == PMI_SUCCESS);
    printf("pmi_client: rank %d of %d ok (%s, kvs %s)\n", rank, size, ptlrt_launcher(), kvs);
    CHECK(PMI_Finalize() == PMI_SUCCESS);
    CHECK(PMI_Initialized(&initialized) == PMI_SUCCESS && initialized == PMI_FALSE);
    free(kvs);
    free(key);
    free(got);
    free(want);
    return 0;
}
