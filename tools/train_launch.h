/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-train --gpus N: the supervisor. Multi-GPU training is one process
 * a GPU (torchrun's model): train_launch starts N ranks of a program on
 * this host, waits for them all and gives one exit status.
 *
 * Each rank gets the launcher's environment with RANK=i, WORLD_SIZE=N,
 * LOCAL_RANK=i, MASTER_ADDR, MASTER_PORT and NCCL_NVLS_ENABLE=0 set over
 * whatever was there (NVLink multicast stays off on shared hosts, whatever
 * the caller's environment says), and the launcher's stdin, stdout and
 * stderr. Nothing else is opened or bound: with master_port 0 the port is
 * one the kernel hands out for port 0 on master_addr, found by binding and
 * closing a socket (another process may take it before rank 0 binds it;
 * a run that fails so is run again).
 *
 * Signals. Each rank leads a process group of its own, so that the
 * terminal's Ctrl-C (SIGINT to the foreground process group) reaches the
 * launcher alone; the launcher passes SIGINT, SIGTERM and SIGHUP on, once,
 * to each running rank's group. A rank thus sees a signal exactly once
 * whoever sent it (the terminal, kill on the launcher's pid, a batch
 * scheduler), and the trainer, whose second signal means "exit now, no
 * checkpoint", saves its checkpoint. Had the ranks stayed in the
 * launcher's group, Ctrl-C would reach them twice, directly and forwarded;
 * not forwarding instead would leave them running on a kill of the
 * launcher's pid. The price: the ranks are background groups of the
 * terminal (one that reads the terminal is stopped by SIGTTIN), and
 * Ctrl-Z stops the launcher only. On Linux each rank also gets SIGKILL
 * when the launcher dies (PR_SET_PDEATHSIG), so that a launcher killed
 * by SIGKILL or a crash leaves no rank running.
 *
 * Stopping. The first rank that exits non-zero or dies by a signal is one
 * line on stderr ("ptxgen-train: rank 2 exited with status 1; stopping the
 * other 3 ranks"); the other ranks get SIGUSR1 (a rank failed: no stop
 * can be agreed, so a rank exits at once, after a checkpoint it is
 * writing), and SIGKILL when they are still running grace_s later. After a
 * forwarded signal the same grace applies. SIGCONT follows SIGUSR1 and a
 * forwarded signal, so that a stopped rank acts on them. One of SIGINT, SIGTERM or SIGHUP while the ranks are being
 * stopped (a second Ctrl-C) sends SIGKILL at once. When a rank exits, what
 * is left of its process group (its own children) is killed with it.
 * Every rank is waited for before train_launch returns.
 *
 * Exit status: 0 when every rank exited 0; else the status of the first
 * rank that did not (exit status, or 128 + the signal that killed it).
 * A run stopped by Ctrl-C whose ranks saved and exited 130 thus gives 130,
 * as ptxgen-train does alone. A rank whose program cannot be run prints
 * why and exits 127. Bad options: one line, 2; a failure of the launcher
 * (no free port, fork): one line, 1, and ranks already started are
 * stopped as above.
 *
 * The call blocks SIGINT, SIGTERM, SIGHUP and SIGCHLD in the calling
 * thread and takes them with sigtimedwait; SIGCHLD's action is the
 * default for the call (an ignored SIGCHLD would reap the ranks). Call it
 * from the main thread before other threads start (or with those signals
 * blocked in every thread); the mask and SIGCHLD's action are restored
 * on return. Not thread-safe; one call at a time in a process.
 */
#ifndef PTXGEN_TRAIN_LAUNCH_H
#define PTXGEN_TRAIN_LAUNCH_H

/* The most ranks one call starts. */
#define TRAIN_LAUNCH_MAX_GPUS 4096

typedef struct train_launch_opts {
    int gpus;                /* 2 to TRAIN_LAUNCH_MAX_GPUS */
    const char *exe;         /* the program's path (no PATH search); NULL: this program
                              * (/proc/self/exe) */
    char *const *argv;       /* each rank's argv, argv[0] included, NULL-terminated (the
                              * caller removes --gpus) */
    double grace_s;          /* SIGUSR1 or a forwarded signal to SIGKILL, seconds; 0: 10 */
    const char *master_addr; /* NULL: 127.0.0.1; a host name or a numeric address */
    int master_port;         /* 1 to 65535; 0: a free one on master_addr */
} train_launch_opts;

/* Runs o->gpus ranks and waits for them all; returns the status the
 * launcher exits with (above). o and what it points to need only live for
 * the call. */
int train_launch(const train_launch_opts *o);

#endif
