/*
 * admin.c — the operator listener: /healthz, /readyz, /metrics, /reload.
 *
 * It runs apart from the public listener (its own address, its own thread
 * and its own connections) so that probes and scrapes work while the API is
 * saturated, and so that reloading is never reachable from the public side.
 */
#include "sgw.h"

#include <microhttpd.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

/* Set by main.c; read for /readyz. */
atomic_int sgw_shutting_down;
atomic_int sgw_schema_current;

static struct MHD_Daemon *admin_daemon;
static sgw_pg            *admin_pg;     /* used by the admin thread only */
static sgw_redis         *admin_redis;

static enum MHD_Result answer(struct MHD_Connection *conn, unsigned int status, const char *type, char *body, size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    enum MHD_Result rc = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result answer_json(struct MHD_Connection *conn, unsigned int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static enum MHD_Result answer_json(struct MHD_Connection *conn, unsigned int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *body = NULL;
    int n = vasprintf(&body, fmt, ap);
    va_end(ap);
    if (n < 0) return MHD_NO;
    return answer(conn, status, "application/json", body, (size_t)n);
}

static enum MHD_Result readyz(struct MHD_Connection *conn) {
    int db_ok = admin_pg && pg_ping(admin_pg) == 0;
    int redis_ok = admin_redis && redis_ping(admin_redis) == 0;
    char err[1024], esc[2100];
    luart_last_error_copy(err, sizeof err);
    size_t el = json_escape(esc, 0, sizeof esc - 1, err, strlen(err));
    esc[el] = 0;
    int migrated = atomic_load(&sgw_schema_current);
    int ready = db_ok && redis_ok && migrated && luart_generation_id() > 0 && !sgw_shutting_down;
    const char *status = ready ? "ready" : (db_ok && !sgw_shutting_down ? "degraded" : "unavailable");
    return answer_json(conn, ready ? 200 : 503,
                       "{\"status\":\"%s\",\"checks\":{\"database\":\"%s\",\"migrations\":\"%s\",\"redis\":\"%s\","
                       "\"handlers\":{\"generation\":%llu,\"reloadFailures\":%llu,\"lastReloadError\":%s}}}",
                       status, db_ok ? "ok" : "unreachable", migrated ? "ok" : "pending",
                       admin_redis ? (redis_ok ? "ok" : "unreachable") : "not_configured",
                       (unsigned long long)luart_generation_id(), (unsigned long long)luart_reload_failures(),
                       err[0] ? esc : "null");
}

static enum MHD_Result metrics(struct MHD_Connection *conn) {
    metrics_gauge("sgw_handlers_generation", NULL, (double)luart_generation_id());
    metrics_gauge("sgw_handlers_reload_failures", NULL, (double)luart_reload_failures());
    char err[8];
    luart_last_error_copy(err, sizeof err);
    metrics_gauge("sgw_handlers_last_reload_failed", NULL, err[0] ? 1.0 : 0.0);
    metrics_gauge("sgw_http_inflight_requests", NULL, (double)http_inflight());
    metrics_gauge("sgw_http_inflight_body_bytes", NULL, (double)http_inflight_body_bytes());
    metrics_gauge("sgw_http_worker_queue_depth", NULL, (double)workers_queue_depth());
    long long pending = 0, dead = 0;
    if (admin_pg && jobs_queue_depth(admin_pg, &pending, &dead) == 0) {
        metrics_gauge("sgw_jobs_queue_depth", "status=\"pending\"", (double)pending);
        metrics_gauge("sgw_jobs_queue_depth", "status=\"dead\"", (double)dead);
    }
    metrics_gauge("sgw_redis_up", NULL, admin_redis && redis_ping(admin_redis) == 0 ? 1.0 : 0.0);
    size_t len;
    char *text = metrics_render(&len);
    if (!text) return MHD_NO;
    return answer(conn, 200, "text/plain; version=0.0.4", text, len);
}

static enum MHD_Result reload(struct MHD_Connection *conn) {
    char err[2048], esc[4200];
    if (luart_reload(err, sizeof err) == 0)
        return answer_json(conn, 200, "{\"status\":\"reloaded\",\"generation\":%llu}",
                           (unsigned long long)luart_generation_id());
    size_t el = json_escape(esc, 0, sizeof esc - 1, err, strlen(err));
    esc[el] = 0;
    return answer_json(conn, 422, "{\"status\":\"refused\",\"generation\":%llu,\"error\":%s}",
                       (unsigned long long)luart_generation_id(), esc);
}

static enum MHD_Result advance_clock(struct MHD_Connection *conn) {
    if (!config_bool("clock.allow_control")) return answer_json(conn, 404, "{\"error\":\"not_found\"}");
    const char *s = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "seconds");
    char *end = NULL;
    double secs = s ? strtod(s, &end) : 0;
    if (!s || *end || secs < 0) return answer_json(conn, 400, "{\"error\":\"seconds must be a non-negative number\"}");
    clock_advance(secs);
    return answer_json(conn, 200, "{\"offsetSeconds\":%.3f}", clock_offset());
}

/* admin.token, when set: every admin request carries it as a Bearer token,
 * compared in constant time (CRYPTO_memcmp over equal lengths; the length
 * of the token is not a secret worth hiding). */
static int authorized(struct MHD_Connection *conn) {
    const char *token = config_str("admin.token");
    size_t tl = strlen(token);
    if (!tl) return 1;
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return 0;
    h += 7;
    while (*h == ' ') h++;
    size_t hl = strlen(h);
    while (hl && h[hl - 1] == ' ') hl--;
    return hl == tl && CRYPTO_memcmp(h, token, tl) == 0;
}

static enum MHD_Result unauthorized(struct MHD_Connection *conn) {
    static const char body[] = "{\"error\":\"unauthorized\",\"detail\":\"Send Authorization: Bearer <admin.token>.\"}";
    char *copy = strdup(body);
    if (!copy) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(sizeof body - 1, copy, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(copy);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"sgw-admin\"");
    enum MHD_Result rc = MHD_queue_response(conn, MHD_HTTP_UNAUTHORIZED, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result on_admin(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                const char *version, const char *upload_data, size_t *upload_data_size,
                                void **con_cls) {
    (void)cls;
    (void)version;
    (void)upload_data;
    /* Bodies are not used here: answer on the first call. */
    if (*con_cls == NULL) {
        *con_cls = (void *)1;
    }
    *upload_data_size = 0;
    if (!authorized(conn)) return unauthorized(conn);
    int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    int post = strcmp(method, "POST") == 0;
    if (strcmp(url, "/healthz") == 0 && get) return answer_json(conn, 200, "{\"status\":\"ok\"}");
    if (strcmp(url, "/readyz") == 0 && get) return readyz(conn);
    if (strcmp(url, "/metrics") == 0 && get) return metrics(conn);
    if (strcmp(url, "/reload") == 0 && post) return reload(conn);
    if (strcmp(url, "/clock/advance") == 0 && post) return advance_clock(conn);
    return answer_json(conn, 404, "{\"error\":\"not_found\",\"paths\":[\"/healthz\",\"/readyz\",\"/metrics\",\"POST /reload\"]}");
}

int admin_start(void) {
    struct sockaddr_storage addr;
    unsigned int alen;
    const char *listen = config_str("admin.listen");
    if (http_parse_listen(listen, &addr, &alen)) {
        log_msg(LOG_ERROR, "config", "admin.listen '%s' is not host:port", listen);
        return -1;
    }
    if (*config_str("database.url")) admin_pg = pg_open(config_str("database.url"));
    if (redis_configured()) admin_redis = redis_open(config_str("redis.url"));
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (addr.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
    admin_daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_admin, NULL,
                                    MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                    MHD_OPTION_CONNECTION_TIMEOUT, 10u,
                                    MHD_OPTION_CONNECTION_LIMIT, 64u,
                                    MHD_OPTION_END);
    if (!admin_daemon) {
        log_msg(LOG_ERROR, "admin_start", "cannot listen on %s (in use, or not an address of this machine?)", listen);
        return -1;
    }
    return 0;
}

void admin_stop(void) {
    if (admin_daemon) MHD_stop_daemon(admin_daemon);
    admin_daemon = NULL;
    if (admin_pg) pg_close(admin_pg);
    if (admin_redis) redis_close(admin_redis);
    admin_pg = NULL;
    admin_redis = NULL;
}
