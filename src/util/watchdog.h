/* A bound on waits that cannot be bounded from inside: the collective calls
 * HDF5 makes through MPI-IO during a checkpoint (H5Fcreate, H5Fclose, the
 * metadata flush, MPI_File_set_view, collective H5Dwrite).  MPI-IO has no
 * non-blocking form of them that HDF5 uses, and a rank that is stopped, or
 * that failed alone and left the collective sequence, leaves the others
 * blocked in MPICH for ever (they spin; SIGTERM does not reach them).
 *
 * Why a thread: the blocked thread is inside MPI, so nothing on it can time
 * out; a second thread that only sleeps and looks at a deadline can.  When
 * a phase outlives its deadline the thread removes the phase's file (a
 * partial save: `latest` still names the last good one), and ends the job
 * through osdp_error_unrecoverable (osdp_gpt's handler prints the message,
 * "rank R: error: ...", and MPI_Aborts: the launcher then ends every rank,
 * the stopped one included).  That is the only MPI call the thread makes,
 * and only once the process is ending; while a phase goes well it costs a
 * wake-up every 50 ms and nothing else.  A program without a handler keeps
 * waiting (the library never exits), with the error pending.
 *
 * A phase ends early in two cases:
 *   - this rank failed alone inside it (osdp_watchdog_failed): the others
 *     may be waiting in a collective it left, so the ranks must agree on
 *     the failure within a grace (min(timeout, 10 s)) or the job ends with
 *     this rank's message, which names the cause (No space left on device);
 *   - SIGTERM arrived (osdp_watchdog_signal, from a signal handler): the
 *     phase gets the same grace to finish, then the job ends saying so; a
 *     second SIGTERM ends it at once.
 * One phase at a time per process (the checkpoint code is not re-entered). */
#ifndef OSDP_WATCHDOG_H
#define OSDP_WATCHDOG_H

/* the grace of a failed or signalled phase, seconds (at most the timeout) */
#define OSDP_WATCHDOG_GRACE_S 10.0

/* Start (or restart) a phase: it must end (osdp_watchdog_disarm, or the
 * next arm) within timeout_s seconds (0: no limit, only the failure and the
 * signal graces).  The label says what is waited for, for the message:
 * "checkpoint save ck/step_00000004.h5.tmp: writing dataset /model/attn.0/qkv.weight". */
void osdp_watchdog_arm(double timeout_s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A new label for the phase in progress, and its timeout restarted (the
 * next dataset of a save); nothing when no phase is armed. */
void osdp_watchdog_phase(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* This rank failed alone in the phase (message: the cause): the deadline
 * becomes at most the grace from now.  Nothing when no phase is armed. */
void osdp_watchdog_failed(const char *message);
/* As osdp_watchdog_failed, for a failure seen inside a library call that
 * may yet recover from it (an MPI-IO error handler): the next
 * osdp_watchdog_phase forgets it, since the call returned; a call that
 * never returns keeps the grace. */
void osdp_watchdog_suspect(const char *message);
/* The file removed when a phase ends the job (NULL: none); kept across phases. */
void osdp_watchdog_remove_on_expiry(const char *path);
void osdp_watchdog_disarm(void);
/* Async-signal-safe: sig (SIGTERM) arrived; counts only while a phase is armed. */
void osdp_watchdog_signal(int sig);

#endif
