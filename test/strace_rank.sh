#!/bin/sh
# Runs one MPI rank under `strace -c`, the count of its main thread's system calls (the one
# that sends, receives and polls) in $SYSCALL_COUNT_DIR/rank.<pid>: not the launcher's
# (MPICH's mpiexec calls wait4 in a loop while the job runs), nor the helper threads' (UCX's
# async thread, MPI's, the engine's), which are paced by time and grow with a run slowed by
# other load (+1,450 in a CI run beside a busy CPU). See check_no_syscalls_per_message.
exec strace -c -U calls,name -o "$SYSCALL_COUNT_DIR/rank.$$" "$@"
