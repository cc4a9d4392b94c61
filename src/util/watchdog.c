/* The bound on waits inside libraries (see util/watchdog.h). */
#define _DEFAULT_SOURCE
#include "util/watchdog.h"
#include "util/clock.h"
#include "osdp/error.h"

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define POLL_NS (50 * 1000 * 1000)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t started = PTHREAD_ONCE_INIT;
static int armed;
static double timeout_s, deadline;   /* deadline 0: none */
static char label[1024], failure[1024], remove_path[4200];
static int failure_soft;             /* the failure came from osdp_watchdog_suspect: the next phase clears it */
static atomic_int signals;           /* SIGTERMs received (osdp_watchdog_signal) */
static int signals_before;           /* of them, those received before the phase */
static int phase_signals;            /* those received during the phase, as counted so far */

static double grace(void) { return timeout_s > 0 && timeout_s < OSDP_WATCHDOG_GRACE_S ? timeout_s : OSDP_WATCHDOG_GRACE_S; }

/* the expired phase's message (lock held) */
static void expiry_message(char *msg, size_t n)
{
    if (failure[0])
        snprintf(msg, n, "%s: %s; the ranks did not agree on it within %g s (the others may wait in a collective "
                 "MPI-IO call this rank left): ending the job", label, failure, grace());
    else if (phase_signals > 1)
        snprintf(msg, n, "received SIGTERM twice during %s: ending the job", label);
    else if (phase_signals)
        snprintf(msg, n, "received SIGTERM during %s, which did not finish within %g s: ending the job", label,
                 grace());
    else
        snprintf(msg, n, "%s did not complete within %g s (OSDP_COMM_TIMEOUT_S): a rank stopped, hangs, or failed "
                 "alone inside HDF5's collective MPI-IO: ending the job", label, timeout_s);
}

static void *watch(void *unused)
{
    (void)unused;
    for (;;) {
        nanosleep(&(struct timespec){0, POLL_NS}, NULL);
        pthread_mutex_lock(&lock);
        const double now = osdp_now_seconds();
        const int sig = atomic_load(&signals) - signals_before;
        if (armed && sig > phase_signals) {   /* SIGTERM: the grace to finish, none for a second one */
            const double until = now + (sig > 1 ? 0 : grace());
            if (!deadline || until < deadline) deadline = until;
            if (sig == 1)
                fprintf(stderr, "osdp_gpt: received SIGTERM during %s: waiting up to %g s for it to finish\n", label,
                        grace());
            phase_signals = sig;
        }
        if (!armed || !deadline || now < deadline) {
            pthread_mutex_unlock(&lock);
            continue;
        }
        char msg[2600];
        expiry_message(msg, sizeof msg);
        if (remove_path[0]) unlink(remove_path);   /* a partial save: the last good one stays `latest` */
        armed = 0;
        pthread_mutex_unlock(&lock);
        osdp_error_unrecoverable(failure[0] ? OSDP_ERR_IO : OSDP_ERR_COMM, "%s", msg);   /* osdp_gpt: ends the job */
    }
    return NULL;
}

static void start(void)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);   /* signals stay the main thread's */
    pthread_t t;
    if (pthread_create(&t, NULL, watch, NULL) == 0) pthread_detach(t);
    else fprintf(stderr, "osdp_gpt: warning: cannot start the checkpoint watchdog thread: waits inside HDF5 are unbounded\n");
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void set_label(const char *fmt, va_list args) { vsnprintf(label, sizeof label, fmt, args); }

void osdp_watchdog_arm(double timeout, const char *fmt, ...)
{
    pthread_once(&started, start);
    pthread_mutex_lock(&lock);
    va_list args;
    va_start(args, fmt);
    set_label(fmt, args);
    va_end(args);
    armed = 1;
    timeout_s = timeout;
    deadline = timeout > 0 ? osdp_now_seconds() + timeout : 0;
    failure[0] = 0;
    signals_before = atomic_load(&signals);
    phase_signals = 0;
    pthread_mutex_unlock(&lock);
}

void osdp_watchdog_phase(const char *fmt, ...)
{
    pthread_mutex_lock(&lock);
    if (armed && failure[0] && failure_soft) failure[0] = 0;   /* the call it came from returned after all */
    if (armed && !failure[0] && !phase_signals) {   /* a failed or signalled phase keeps its grace */
        va_list args;
        va_start(args, fmt);
        set_label(fmt, args);
        va_end(args);
        deadline = timeout_s > 0 ? osdp_now_seconds() + timeout_s : 0;
    }
    pthread_mutex_unlock(&lock);
}

static void note_failure(const char *message, int soft)
{
    pthread_mutex_lock(&lock);
    if (armed && (!failure[0] || (failure_soft && !soft))) {
        if (!failure[0]) snprintf(failure, sizeof failure, "%s", message);   /* a suspicion confirmed keeps its words */
        failure_soft = soft;
        const double until = osdp_now_seconds() + grace();
        if (!deadline || until < deadline) deadline = until;
    }
    pthread_mutex_unlock(&lock);
}

void osdp_watchdog_failed(const char *message) { note_failure(message, 0); }

void osdp_watchdog_suspect(const char *message) { note_failure(message, 1); }

void osdp_watchdog_remove_on_expiry(const char *path)
{
    pthread_mutex_lock(&lock);
    snprintf(remove_path, sizeof remove_path, "%s", path ? path : "");
    pthread_mutex_unlock(&lock);
}

void osdp_watchdog_disarm(void)
{
    pthread_mutex_lock(&lock);
    armed = 0;
    deadline = 0;
    pthread_mutex_unlock(&lock);
}

void osdp_watchdog_signal(int sig)
{
    if (sig == SIGTERM) atomic_fetch_add(&signals, 1);
}
