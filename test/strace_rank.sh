#!/bin/sh
# Runs one MPI rank under `strace -f -c`, its count of system calls (threads included) in
# $SYSCALL_COUNT_DIR/rank.<pid>: the ranks' own calls, not the launcher's (MPICH's mpiexec
# calls wait4 in a loop while the job runs). See check_no_syscalls_per_message.
exec strace -f -c -U calls,name -o "$SYSCALL_COUNT_DIR/rank.$$" "$@"
