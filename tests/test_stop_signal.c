/* The stop-signal handler: the first signal is recorded and the process
 * goes on; a second one ends it at once, by that signal; a signal ignored
 * at start-up (nohup's SIGHUP) stays ignored. Each case runs in a child
 * process, since what it checks is how a process ends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../train/run/run_stop_signal.h"

/* Exit codes of the children: which check failed. */
enum { CHILD_OK = 0, CHILD_NOT_RECORDED = 10, CHILD_SURVIVED_SECOND = 11, CHILD_RECORDED_IGNORED = 12 };

/* Runs child() in a fork and returns its wait status. */
static int in_child(int (*child)(void)) {
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(child());
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

/* The dispositions a plainly started process has: the test may itself run
 * under nohup (SIGHUP ignored) or as a background job (SIGINT ignored),
 * which the handler rightly leaves alone (test_ignored_signal_stays_ignored). */
static void default_dispositions(void) {
    const int sigs[] = {SIGHUP, SIGINT, SIGTERM, SIGUSR1};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], SIG_DFL);
}

static int first_then_second(void) {
    default_dispositions();
    stop_signal_install();
    raise(SIGTERM);
    if (stop_signal_pending() != SIGTERM) return CHILD_NOT_RECORDED;
    raise(SIGINT); /* any second stop signal */
    return CHILD_SURVIVED_SECOND;
}

static void test_second_signal_ends_at_once(void **state) {
    (void)state;
    int status = in_child(first_then_second);
    if (WIFEXITED(status)) fail_msg("the child exited with %d instead of dying by SIGINT", WEXITSTATUS(status));
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGINT);
}

static int first_only(void) {
    default_dispositions();
    stop_signal_install();
    raise(SIGHUP);
    if (stop_signal_pending() != SIGHUP || strcmp(stop_signal_name(SIGHUP), "SIGHUP") != 0) return CHILD_NOT_RECORDED;
    stop_signal_clear();
    raise(SIGUSR1); /* after a clear, a signal is a first one again */
    return stop_signal_pending() == SIGUSR1 ? CHILD_OK : CHILD_NOT_RECORDED;
}

static void test_first_signal_is_recorded(void **state) {
    (void)state;
    int status = in_child(first_only);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), CHILD_OK);
}

static int ignored_stays_ignored(void) {
    signal(SIGHUP, SIG_IGN); /* as nohup leaves it */
    stop_signal_install();
    raise(SIGHUP);
    return stop_signal_pending() == 0 ? CHILD_OK : CHILD_RECORDED_IGNORED;
}

static void test_ignored_signal_stays_ignored(void **state) {
    (void)state;
    int status = in_child(ignored_stays_ignored);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), CHILD_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_signal_is_recorded),
        cmocka_unit_test(test_second_signal_ends_at_once),
        cmocka_unit_test(test_ignored_signal_stays_ignored),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
