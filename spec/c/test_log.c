/*
 * test_log.c — the log's output as a reader of stderr sees it: the time
 * prefix, JSON strings escaped, request lines gathered by the writer thread
 * yet never lost, torn or reordered against the lines written at once, from
 * many threads.
 */
#include "sgw.h"
#include "check.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char out_path[] = "/tmp/sgw-test-log-XXXXXX";

/* Everything written to stderr so far (caller frees). */
static char *written(void) {
    FILE *f = fopen(out_path, "rb");
    if (!f) return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    buf[got] = 0;
    fclose(f);
    return buf;
}

static void truncate_output(void) {
    if (ftruncate(STDERR_FILENO, 0) != 0) perror("ftruncate");
}

static int contains(const char *line) {
    char *text = written();
    int found = strstr(text, line) != NULL;
    free(text);
    return found;
}

static void emit(void (*fn)(const char *, size_t), const char *line) { fn(line, strlen(line)); }

static void test_time_prefix(void) {
    char buf[64];
    size_t n = log_begin(buf, sizeof buf);
    int ok = n == 34 && strncmp(buf, "{\"time\":\"", 9) == 0 && buf[13] == '-' && buf[16] == '-' && buf[19] == 'T' &&
             buf[22] == ':' && buf[25] == ':' && buf[28] == '.' && buf[32] == 'Z' && buf[33] == '"';
    check(ok, "log_begin writes {\"time\":\"YYYY-MM-DDTHH:MM:SS.mmmZ\"", buf);
    char small[8];
    check(log_begin(small, sizeof small) == 0, "log_begin writes nothing into a buffer too small", NULL);
}

static void escaped(const char *in, size_t in_len, const char *want, size_t cap) {
    char buf[128];
    size_t n = json_escape(buf, 0, cap, in, in_len);
    int ok = want ? n < cap && n == strlen(want) && memcmp(buf, want, n) == 0 : n == cap;
    char detail[300];
    snprintf(detail, sizeof detail, "got %.*s", (int)(n < sizeof buf ? n : 0), buf);
    check(ok, want ? want : "a value that does not fit reports the capacity", detail);
}

static void test_escape(void) {
    escaped("cli_3Xh9aQ", 10, "\"cli_3Xh9aQ\"", 128);
    escaped("/api/v1/posts/{postId}", 22, "\"/api/v1/posts/{postId}\"", 128);
    escaped("a\"b\\c", 5, "\"a\\\"b\\\\c\"", 128);
    escaped("l1\nl2\tx", 7, "\"l1\\nl2\\tx\"", 128);
    escaped("\x01\x7f", 2, "\"\\u0001\\u007f\"", 128);
    escaped("", 0, "\"\"", 128);
    escaped("0123456789", 10, NULL, 8);   /* plain, too long */
    escaped("01234\"6789", 10, NULL, 8); /* escaped, too long */
}

static void test_without_writer(void) {
    truncate_output();
    emit(log_line_batched, "{\"n\":\"no-writer\"}");
    check(contains("{\"n\":\"no-writer\"}\n"), "without the writer a request line is written at once", NULL);
}

static void test_order(void) {
    truncate_output();
    check(log_start_writer() == 0, "the writer starts", NULL);
    emit(log_line_batched, "{\"n\":\"first\"}");
    emit(log_line_batched, "{\"n\":\"second\"}");
    emit(log_line, "{\"n\":\"third\"}");
    char *text = written();
    check(strcmp(text, "{\"n\":\"first\"}\n{\"n\":\"second\"}\n{\"n\":\"third\"}\n") == 0,
          "a line written at once follows the gathered ones", text);
    free(text);

    emit(log_line_batched, "{\"n\":\"later\"}");
    int seen = 0;
    for (int i = 0; i < 200 && !seen; i++) {
        struct timespec ts = { 0, 5 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        seen = contains("{\"n\":\"later\"}\n");
    }
    check(seen, "a gathered line reaches the output within a second", NULL);
    log_stop_writer();
}

/* Lua fields come in a fixed order, requestId first, slashes as they are. */
static void test_lua_fields(void) {
    lua_State *L = luaL_newstate();
    lapi_log_open(L);
    truncate_output();
    int rc = luaL_dostring(L, "log.info('ordered', { zeta = 1, route = '/api/v1/posts/{postId}', "
                              "requestId = 'req_1', alpha = true, level = 'x', status = 200 })");
    check(rc == LUA_OK, "log.info runs", rc == LUA_OK ? NULL : lua_tostring(L, -1));
    check(contains(",\"level\":\"info\",\"event\":\"ordered\",\"requestId\":\"req_1\",\"alpha\":true,"
                   "\"route\":\"/api/v1/posts/{postId}\",\"status\":200,\"zeta\":1}\n"),
          "Lua log fields: requestId first, then sorted, no escaped slash", NULL);
    lua_close(L);
}

#define THREADS 4
#define LINES   20000

static void *produce(void *arg) {
    int t = (int)(long)arg;
    char line[128];
    for (int i = 0; i < LINES; i++) {
        snprintf(line, sizeof line, "{\"t\":%d,\"i\":%d,\"pad\":\"%060d\"}", t, i, i);
        if (i % 1000 == 999) emit(log_line, line);
        else emit(log_line_batched, line);
    }
    return NULL;
}

static void test_many_threads(void) {
    truncate_output();
    check(log_start_writer() == 0, "the writer starts again", NULL);
    pthread_t th[THREADS];
    for (long t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, produce, (void *)t);
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    log_stop_writer();

    char *text = written();
    int next[THREADS] = { 0 }, lines = 0, bad = 0;
    for (char *p = text; *p;) {
        char *eol = strchr(p, '\n');
        if (!eol) { bad++; break; }
        *eol = 0;
        int t, i;
        char pad[80];
        if (sscanf(p, "{\"t\":%d,\"i\":%d,\"pad\":\"%79[0-9]\"}", &t, &i, pad) != 3 || t < 0 || t >= THREADS ||
            strlen(pad) != 60 || atoi(pad) != i) {
            bad++;
        } else {
            if (i != next[t]) bad++;         /* each thread's lines in its own order */
            next[t] = i + 1;
        }
        lines++;
        p = eol + 1;
    }
    free(text);
    char detail[128];
    snprintf(detail, sizeof detail, "%d lines, %d torn or out of order", lines, bad);
    check(lines == THREADS * LINES && bad == 0, "every line of every thread arrives whole and in order", detail);
}

int main(void) {
    int fd = mkstemp(out_path);
    if (fd < 0) {
        perror("mkstemp");
        return 1;
    }
    /* Appending, so that writes after a truncation start at the new end. */
    fcntl(fd, F_SETFL, O_APPEND);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);

    test_time_prefix();
    test_escape();
    test_without_writer();
    test_lua_fields();
    test_order();
    test_many_threads();

    dup2(saved, STDERR_FILENO);
    close(saved);
    unlink(out_path);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
