/* The MPI programs' side of check.h: init, and the verdict all ranks agree on. */
#ifndef MPI_CHECK_H
#define MPI_CHECK_H

#include <mpi.h>

#include "../check.h"

static inline void check_init(int *argc, char ***argv, int *rank, int *nranks) {
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, nranks);
    check_rank = *rank;
}

/* Finalizes MPI; the exit status is 0 only when no rank saw a failure. */
static inline int check_finish(const char *program) {
    int total = 0, nranks;
    MPI_Allreduce(&check_errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    check_report(program, nranks, total);
    MPI_Finalize();
    return total ? 1 : 0;
}

#endif
