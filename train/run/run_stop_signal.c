/* Stop requests by signal: the handler records the signal, nothing more. */
#include "run_stop_signal.h"

#include <signal.h>
#include <stddef.h>

/* The one piece of global mutable state in the program, by necessity: a
 * signal handler has no other place to write. 0 until a stop signal comes,
 * then its number. */
static volatile sig_atomic_t requested;

static const int STOP_SIGNALS[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};

/* Async-signal-safe: a store, or signal() and raise(). The second signal
 * restores the default action and raises itself again; it is blocked while
 * this handler runs, so it is delivered, and kills, on return. */
static void on_stop_signal(int sig) {
    if (requested) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    requested = sig;
}

void stop_signal_install(void) {
    /* a closed stdout (a pipe whose reader died) must not kill the run: the
     * write fails with EPIPE instead, and the loop stops with a state */
    signal(SIGPIPE, SIG_IGN);
    for (size_t i = 0; i < sizeof STOP_SIGNALS / sizeof STOP_SIGNALS[0]; i++) {
        struct sigaction old;
        if (sigaction(STOP_SIGNALS[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        struct sigaction sa = {.sa_handler = on_stop_signal, .sa_flags = SA_RESTART};
        sigemptyset(&sa.sa_mask);
        sigaction(STOP_SIGNALS[i], &sa, NULL);
    }
}

int stop_signal_pending(void) { return requested; }

void stop_signal_clear(void) { requested = 0; }

const char *stop_signal_name(int sig) {
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGUSR1: return "SIGUSR1";
    case SIGPIPE: return "a broken stdout (EPIPE: its reader is gone)";
    case TRAINER_STOP_LOG: return "a failed write to log_json";
    default: return "a signal";
    }
}
