/*
 * offload.c — CPU-heavy calls (Argon2id: tens of milliseconds by design) on
 * a small pool of threads, so that a loop goes on with its other coroutines
 * while one of them waits for a hash.
 *
 * A binding of the coroutine its loop is resuming (offload_usable) fills a
 * job, submits it and yields (lightuserdata: the loop's inbox); a pool thread
 * runs it, puts it in the inbox of the loop it came from and wakes that loop
 * (an eventfd), which resumes the coroutine; its continuation reads the
 * result and disposes of the job. Elsewhere (a socket thread, the CLI, code
 * that cannot yield) the binding runs the job where it is.
 *
 * A job outlives its coroutine when that ends some other way (the loop
 * stops): the inbox then disposes of it when it comes back, and an inbox
 * freed with jobs still out is freed by the last of them.
 */
#include "sgw.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define THREADS_MAX 64

struct sgw_inbox {
    pthread_mutex_t mu;
    int             efd;
    sgw_job        *done;           /* finished, not yet resumed (LIFO) */
    sgw_job        *out;            /* submitted, not yet resumed or disposed of */
    int             closed;         /* its loop is gone: the last job frees it */
};

static pthread_mutex_t qmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  qcond = PTHREAD_COND_INITIALIZER;
static sgw_job        *qhead, *qtail;
static int             stopping;
static pthread_t       threads[THREADS_MAX];
static int             nthreads;

/* The coroutine its loop is resuming on this thread, and that loop's inbox. */
static _Thread_local lua_State *current_co;
static _Thread_local sgw_inbox *current_inbox;

/* Under in->mu. */
static void take_out(sgw_inbox *in, sgw_job *j) {
    if (j->out_prev) j->out_prev->out_next = j->out_next;
    else in->out = j->out_next;
    if (j->out_next) j->out_next->out_prev = j->out_prev;
}

static void inbox_destroy(sgw_inbox *in) {
    close(in->efd);
    pthread_mutex_destroy(&in->mu);
    free(in);
}

static void *pool_main(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&qmu);
        while (!qhead && !stopping) pthread_cond_wait(&qcond, &qmu);
        sgw_job *j = qhead;
        if (j) {
            qhead = j->next;
            if (!qhead) qtail = NULL;
        }
        pthread_mutex_unlock(&qmu);
        if (!j) return NULL;                 /* stopping and nothing left */
        j->run(j);
        sgw_inbox *in = j->inbox;
        pthread_mutex_lock(&in->mu);
        if (in->closed) {
            take_out(in, j);
            int last = in->out == NULL;
            pthread_mutex_unlock(&in->mu);
            j->dispose(j);
            if (last) inbox_destroy(in);
            continue;
        }
        j->next = in->done;
        in->done = j;
        /* Woken under the lock: once it is released the loop may free the
         * inbox, eventfd and all. */
        uint64_t one = 1;
        int failed = 0;
        if (write(in->efd, &one, sizeof one) < 0 && errno != EAGAIN) failed = errno;
        pthread_mutex_unlock(&in->mu);
        if (failed)
            log_msg(LOG_WARN, "offload", "cannot wake a loop: %s", strerror(failed));
    }
}

int offload_start(int n) {
    if (n < 1) n = 1;
    if (n > THREADS_MAX) n = THREADS_MAX;
    stopping = 0;
    for (int i = 0; i < n; i++) {
        if (pthread_create(&threads[i], NULL, pool_main, NULL)) {
            offload_stop();
            return -1;
        }
        nthreads++;
    }
    return 0;
}

void offload_stop(void) {
    pthread_mutex_lock(&qmu);
    stopping = 1;
    pthread_cond_broadcast(&qcond);
    pthread_mutex_unlock(&qmu);
    for (int i = 0; i < nthreads; i++) pthread_join(threads[i], NULL);
    nthreads = 0;
}

sgw_inbox *offload_inbox_new(void) {
    sgw_inbox *in = calloc(1, sizeof *in);
    if (!in) return NULL;
    in->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (in->efd < 0 || pthread_mutex_init(&in->mu, NULL)) {
        if (in->efd >= 0) close(in->efd);
        free(in);
        return NULL;
    }
    return in;
}

void offload_inbox_free(sgw_inbox *in) {
    if (!in) return;
    pthread_mutex_lock(&in->mu);
    sgw_job *done = in->done;
    in->done = NULL;
    for (sgw_job *j = done; j; j = j->next) take_out(in, j);
    in->closed = 1;
    int last = in->out == NULL;
    pthread_mutex_unlock(&in->mu);
    while (done) {
        sgw_job *next = done->next;
        done->dispose(done);
        done = next;
    }
    if (last) inbox_destroy(in);
}

void offload_set_current(sgw_inbox *in, lua_State *co) {
    current_inbox = co ? in : NULL;
    current_co = co;
}

sgw_inbox *offload_usable(lua_State *L) {
    return current_inbox && nthreads > 0 && current_co == L && lua_isyieldable(L) ? current_inbox : NULL;
}

void offload_submit(sgw_inbox *in, sgw_job *j, lua_State *co) {
    j->inbox = in;
    j->co = co;
    j->next = NULL;
    pthread_mutex_lock(&in->mu);
    j->out_prev = NULL;
    j->out_next = in->out;
    if (in->out) in->out->out_prev = j;
    in->out = j;
    pthread_mutex_unlock(&in->mu);
    pthread_mutex_lock(&qmu);
    if (qtail) qtail->next = j;
    else qhead = j;
    qtail = j;
    pthread_cond_signal(&qcond);
    pthread_mutex_unlock(&qmu);
}

void offload_forget(sgw_inbox *in, lua_State *co) {
    if (!in) return;
    /* Its job, queued, running or back: disposed of when delivered. */
    pthread_mutex_lock(&in->mu);
    for (sgw_job *j = in->out; j; j = j->out_next)
        if (j->co == co) j->co = NULL;
    pthread_mutex_unlock(&in->mu);
}

int offload_pollfd(sgw_inbox *in, struct pollfd *pfd) {
    if (!in) return 0;
    pthread_mutex_lock(&in->mu);
    int out = in->out != NULL;
    pthread_mutex_unlock(&in->mu);
    if (!out) return 0;
    *pfd = (struct pollfd){ .fd = in->efd, .events = POLLIN };
    return 1;
}

void offload_drive(sgw_inbox *in, void (*on_ready)(lua_State *co, int nres, void *ud), void *ud) {
    if (!in) return;
    uint64_t v;
    if (read(in->efd, &v, sizeof v) < 0 && errno != EAGAIN)
        log_msg(LOG_WARN, "offload", "reading a wake-up failed: %s", strerror(errno));
    pthread_mutex_lock(&in->mu);
    sgw_job *done = in->done;
    in->done = NULL;
    pthread_mutex_unlock(&in->mu);
    while (done) {
        sgw_job *j = done;
        done = j->next;
        pthread_mutex_lock(&in->mu);
        take_out(in, j);
        pthread_mutex_unlock(&in->mu);
        /* The continuation disposes of it; a coroutine that went cannot. */
        if (j->co) on_ready(j->co, 0, ud);
        else j->dispose(j);
    }
}
