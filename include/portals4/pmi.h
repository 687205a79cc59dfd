/*
 * portals4/pmi.h — the PMI-1 process management interface, as the Portals 4 reference
 * implementation's runtime provides it, so clients that bootstrap through it (GASNet's
 * portals4-conduit, Sandia OpenSHMEM, the reference tests) build against this prefix
 * unchanged: #include <portals4/pmi.h>, link with -lportals_runtime -lportals4.
 *
 * libportals_runtime implements it over the launchers libportals4 supports (portals4_rt.h):
 * ptlrun, a PMIx server (Open MPI's mpirun, prterun, srun --mpi=pmix) and a PMI-1 server
 * (Hydra's mpiexec). Without a launcher a program is rank 0 of 1. The key-value space is the
 * launcher's own where it has one (Hydra, PMIx); under ptlrun PMI_Barrier carries it.
 * Dynamic processes and name publishing (PMI_Spawn_multiple, PMI_Publish_name, ...) are not
 * offered: they return PMI_FAIL.
 */
#ifndef PORTALS4_PMI_H
#define PORTALS4_PMI_H

#ifdef __cplusplus
extern "C" {
#endif

#define PMI_SUCCESS 0
#define PMI_FAIL -1
#define PMI_ERR_INIT 1
#define PMI_ERR_NOMEM 2
#define PMI_ERR_INVALID_ARG 3
#define PMI_ERR_INVALID_KEY 4
#define PMI_ERR_INVALID_KEY_LENGTH 5
#define PMI_ERR_INVALID_VAL 6
#define PMI_ERR_INVALID_VAL_LENGTH 7
#define PMI_ERR_INVALID_LENGTH 8
#define PMI_ERR_INVALID_NUM_ARGS 9
#define PMI_ERR_INVALID_ARGS 10
#define PMI_ERR_INVALID_NUM_PARSED 11
#define PMI_ERR_INVALID_KEYVALP 12
#define PMI_ERR_INVALID_SIZE 13

typedef int PMI_BOOL;
#define PMI_TRUE 1
#define PMI_FALSE 0

typedef struct PMI_keyval_t {
    const char *key;
    char *val;
} PMI_keyval_t;

/* Joins the job; *spawned is PMI_FALSE (no dynamic processes). */
int PMI_Init(int *spawned);
int PMI_Initialized(int *initialized);
int PMI_Finalize(void);
int PMI_Get_size(int *size);
int PMI_Get_rank(int *rank);
int PMI_Get_universe_size(int *size);
int PMI_Get_appnum(int *appnum);
/* A barrier of all ranks; every rank's committed puts are visible to all after it. */
int PMI_Barrier(void);
/* Prints error_msg and ends the job with exit_code. Does not return. */
int PMI_Abort(int exit_code, const char error_msg[]);

int PMI_KVS_Get_my_name(char kvsname[], int length);
int PMI_KVS_Get_name_length_max(int *length);
int PMI_KVS_Get_key_length_max(int *length);
int PMI_KVS_Get_value_length_max(int *length);
int PMI_KVS_Put(const char kvsname[], const char key[], const char value[]);
int PMI_KVS_Commit(const char kvsname[]);
int PMI_KVS_Get(const char kvsname[], const char key[], char value[], int length);

/* Not offered by these launchers: PMI_FAIL. */
int PMI_Publish_name(const char service_name[], const char port[]);
int PMI_Unpublish_name(const char service_name[]);
int PMI_Lookup_name(const char service_name[], char port[]);
int PMI_Spawn_multiple(int count, const char *cmds[], const char **argvs[], const int maxprocs[],
                       const int info_keyval_sizesp[], const PMI_keyval_t *info_keyval_vectors[],
                       int preput_keyval_size, const PMI_keyval_t preput_keyval_vector[], int errors[]);

#ifdef __cplusplus
}
#endif

#endif
