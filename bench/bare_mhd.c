/*
 * bare_mhd.c — the HTTP ceiling for bench/run-http.
 *
 * A libmicrohttpd server in the same mode sgw's public listener uses
 * (internal polling thread, epoll, turbo, a thread pool of one thread per
 * core) that answers every request with one fixed small JSON body. POST
 * bodies are read and thrown away. No Lua, no workers, no allocation per
 * request: whatever sgw does on top of this costs the difference.
 *
 * Usage: bare_mhd PORT   (listens on 127.0.0.1:PORT until SIGINT/SIGTERM)
 */
#define _POSIX_C_SOURCE 200809L

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

static const char BODY[] = "{\"message\":\"hello\",\"n\":42,\"echo\":true}";

static struct MHD_Response *response;   /* shared by every request */
static int marker;                      /* con_cls of a request being read */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)cls; (void)url; (void)method; (void)version; (void)upload_data;

    if (*con_cls == NULL) {              /* headers only: ask for the body */
        *con_cls = &marker;
        return MHD_YES;
    }
    if (*upload_data_size != 0) {        /* a piece of the body: discard it */
        *upload_data_size = 0;
        return MHD_YES;
    }
    return MHD_queue_response(conn, MHD_HTTP_OK, response);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PORT\n", argv[0]);
        return 2;
    }
    char *end;
    long port = strtol(argv[1], &end, 10);
    if (*end != '\0' || port <= 0 || port > 65535) {
        fprintf(stderr, "bare_mhd: bad port '%s'\n", argv[1]);
        return 2;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1)
        cores = 1;

    /* Block the stop signals before MHD starts its threads so that they
     * inherit the mask and only sigwait() below sees them. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);

    response = MHD_create_response_from_buffer(sizeof BODY - 1, (void *)BODY,
                                               MHD_RESPMEM_PERSISTENT);
    if (response == NULL ||
        MHD_add_response_header(response, "Content-Type", "application/json") != MHD_YES) {
        fprintf(stderr, "bare_mhd: cannot build the response\n");
        return 1;
    }

    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_TURBO,
        (uint16_t)port, NULL, NULL, on_request, NULL,
        MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)&addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)cores,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)30,
        MHD_OPTION_END);
    if (d == NULL) {
        fprintf(stderr, "bare_mhd: cannot listen on 127.0.0.1:%ld\n", port);
        return 1;
    }
    fprintf(stderr, "bare_mhd: listening on 127.0.0.1:%ld with %ld threads\n", port, cores);

    int sig;
    sigwait(&stop, &sig);

    MHD_stop_daemon(d);
    MHD_destroy_response(response);
    return 0;
}
