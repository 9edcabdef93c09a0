/*
 * redis_pipe.c — Redis calls of requests on socket threads, sent ahead in
 * pipelined batches by one thread with its own connection.
 *
 * A request's rate-limit call (redis.eval_deferred) would otherwise move the
 * request to a worker thread that waits on Redis alone: two thread hand-offs
 * and a Redis round trip of its own per request. Here the socket thread
 * drops the run (nothing has changed yet), suspends the connection and
 * queues the call; this thread writes every queued call at once, reads the
 * replies and resumes each request, which runs again on a socket thread and
 * finds its reply. Many requests share one write, one read and one wake-up
 * of Redis.
 */
#include "sgw.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#define BATCH_MAX   256
#define MAX_SCRIPTS 16

struct sgw_deferred {
    int           argc;
    char        **argv;           /* argv, lens and the bytes: one allocation */
    size_t       *lens;
    redisReply   *reply;          /* NULL after an I/O failure */
    char          err[160];
    sgw_request  *req;
    sgw_deferred *next;
};

typedef struct script {
    char   sha[41];
    char  *text;
    size_t len;
} script;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  cond = PTHREAD_COND_INITIALIZER;
static sgw_deferred   *head, *tail;
static atomic_int      running;           /* read without the lock on every call */
static int             stopping;
static pthread_t       thread;
static sgw_redis      *conn;
static script          scripts[MAX_SCRIPTS];
static int             nscripts;

int redis_pipe_running(void) { return atomic_load(&running); }

int redis_pipe_script(const char sha[41], const char *text, size_t len) {
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nscripts; i++) {
        if (memcmp(scripts[i].sha, sha, 40) == 0) {
            pthread_mutex_unlock(&mu);
            return 0;
        }
    }
    int rc = -1;
    if (nscripts < MAX_SCRIPTS) {
        char *copy = malloc(len + 1);
        if (copy) {
            memcpy(copy, text, len);
            copy[len] = 0;
            memcpy(scripts[nscripts].sha, sha, 40);
            scripts[nscripts].sha[40] = 0;
            scripts[nscripts].text = copy;
            scripts[nscripts].len = len;
            nscripts++;
            rc = 0;
        }
    }
    pthread_mutex_unlock(&mu);
    return rc;                        /* full: the caller calls Redis itself */
}

sgw_deferred *redis_pipe_call(int argc, const char *const *argv, const size_t *lens) {
    size_t bytes = 0;
    for (int i = 0; i < argc; i++) bytes += lens[i] + 1;
    sgw_deferred *d = malloc(sizeof *d + (size_t)argc * (sizeof(char *) + sizeof(size_t)) + bytes);
    if (!d) return NULL;
    memset(d, 0, sizeof *d);
    d->argc = argc;
    d->argv = (char **)(d + 1);
    d->lens = (size_t *)(d->argv + argc);
    char *p = (char *)(d->lens + argc);
    for (int i = 0; i < argc; i++) {
        memcpy(p, argv[i], lens[i]);
        p[lens[i]] = 0;
        d->argv[i] = p;
        d->lens[i] = lens[i];
        p += lens[i] + 1;
    }
    return d;
}

int redis_pipe_matches(const sgw_deferred *d, int argc, const char *const *argv, const size_t *lens) {
    if (d->argc != argc) return 0;
    for (int i = 0; i < argc; i++)
        if (d->lens[i] != lens[i] || memcmp(d->argv[i], argv[i], lens[i]) != 0) return 0;
    return 1;
}

redisReply *redis_pipe_take(sgw_deferred *d, const char **err) {
    redisReply *r = d->reply;
    d->reply = NULL;
    if (!r) *err = d->err;
    return r;
}

void redis_pipe_free(sgw_deferred *d) {
    if (!d) return;
    if (d->reply) freeReplyObject(d->reply);
    free(d);
}

void redis_pipe_submit(sgw_request *req) {
    sgw_deferred *d = req->deferred;
    d->req = req;
    d->next = NULL;
    pthread_mutex_lock(&mu);
    if (tail) tail->next = d;
    else head = d;
    tail = d;
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&mu);
}

/* The text of a script this thread was told about, or NULL. */
static const script *script_by_sha(const char *sha, size_t len) {
    if (len != 40) return NULL;
    pthread_mutex_lock(&mu);
    const script *found = NULL;
    for (int i = 0; i < nscripts && !found; i++)
        if (memcmp(scripts[i].sha, sha, 40) == 0) found = &scripts[i];
    pthread_mutex_unlock(&mu);
    return found;                     /* entries are never removed while running */
}

static int is_noscript(const redisReply *r) {
    return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* Sends the batch and stores a reply (or the failure) in each call. */
static void run_batch(sgw_deferred **batch, int n) {
    int argc[BATCH_MAX];
    const char *const *argv[BATCH_MAX];
    const size_t *lens[BATCH_MAX];
    redisReply *replies[BATCH_MAX];
    for (int i = 0; i < n; i++) {
        argc[i] = batch[i]->argc;
        argv[i] = (const char *const *)batch[i]->argv;
        lens[i] = batch[i]->lens;
    }
    const char *err = NULL;
    if (redis_pipeline(conn, n, argc, argv, lens, replies, &err) != 0) {
        for (int i = 0; i < n; i++) snprintf(batch[i]->err, sizeof batch[i]->err, "%s", err ? err : "redis unavailable");
        return;
    }
    for (int i = 0; i < n; i++) batch[i]->reply = replies[i];

    /* A server that has not seen a script (restarted, flushed): load it and
     * send those calls once more. */
    for (int i = 0; i < n; i++) {
        sgw_deferred *d = batch[i];
        if (!is_noscript(d->reply) || d->argc < 2 || strcmp(d->argv[0], "EVALSHA") != 0) continue;
        const script *s = script_by_sha(d->argv[1], d->lens[1]);
        if (!s) continue;
        /* EVAL sends the script along; on a cluster it reaches the node of
         * the keys, which SCRIPT LOAD (no keys) would not. */
        const char **eval_argv = malloc((size_t)d->argc * sizeof *eval_argv);
        size_t *eval_lens = malloc((size_t)d->argc * sizeof *eval_lens);
        if (!eval_argv || !eval_lens) {
            free(eval_argv);
            free(eval_lens);
            continue;
        }
        for (int k = 0; k < d->argc; k++) {
            eval_argv[k] = d->argv[k];
            eval_lens[k] = d->lens[k];
        }
        eval_argv[0] = "EVAL";
        eval_lens[0] = 4;
        eval_argv[1] = s->text;
        eval_lens[1] = s->len;
        const char *const *one_argv[1] = { eval_argv };
        const size_t *one_lens[1] = { eval_lens };
        int one_argc[1] = { d->argc };
        redisReply *again[1];
        int rc = redis_pipeline(conn, 1, one_argc, one_argv, one_lens, again, &err);
        free(eval_argv);
        free(eval_lens);
        if (rc != 0 || !again[0]) continue;
        freeReplyObject(d->reply);
        d->reply = again[0];
    }
}

static void *pipe_main(void *arg) {
    (void)arg;
    sgw_deferred *batch[BATCH_MAX];
    pthread_mutex_lock(&mu);
    for (;;) {
        while (!head && !stopping) pthread_cond_wait(&cond, &mu);
        if (!head) break;              /* stopping, and nothing left */
        int n = 0;
        while (head && n < BATCH_MAX) {
            batch[n++] = head;
            head = head->next;
        }
        if (!head) tail = NULL;
        pthread_mutex_unlock(&mu);
        run_batch(batch, n);
        metrics_count("sgw_redis_pipelined_calls_total", NULL, n);
        for (int i = 0; i < n; i++) http_rerun(batch[i]->req);
        pthread_mutex_lock(&mu);
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

int redis_pipe_start(void) {
    if (!redis_configured()) return 0;
    conn = redis_open(config_str("redis.url"));
    pthread_mutex_lock(&mu);
    stopping = 0;
    pthread_mutex_unlock(&mu);
    if (pthread_create(&thread, NULL, pipe_main, NULL)) {
        redis_close(conn);
        conn = NULL;
        log_msg(LOG_ERROR, "redis_pipe", "cannot start the Redis pipeline thread");
        return -1;
    }
    atomic_store(&running, 1);
    return 0;
}

void redis_pipe_stop(void) {
    if (!atomic_load(&running)) return;
    /* Requests still running may defer no more; queued ones are sent. */
    atomic_store(&running, 0);
    pthread_mutex_lock(&mu);
    stopping = 1;
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&mu);
    pthread_join(thread, NULL);
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nscripts; i++) free(scripts[i].text);
    nscripts = 0;
    pthread_mutex_unlock(&mu);
    redis_close(conn);
    conn = NULL;
}
