/*
 * cluster_fixture.h — a private Redis Cluster for the C tests, as
 * spec/support/redis_cluster.lua starts one for the specs: masters on free
 * ports (redis-server), joined by redis-cli --cluster create, ready once
 * every node says cluster_state:ok. The tests drive the nodes directly
 * (cluster_at: one blocking connection per node) to migrate slots, flush
 * scripts, pause or kill a node.
 */
#ifndef SGW_SPEC_CLUSTER_FIXTURE_H
#define SGW_SPEC_CLUSTER_FIXTURE_H

#include "free_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#define CLUSTER_NODES 3

typedef struct cluster_node {
    int           port;
    pid_t         pid;              /* 0: not running */
    char          id[48];
    redisContext *ctx;              /* the test's own connection */
} cluster_node;

typedef struct test_cluster {
    cluster_node node[CLUSTER_NODES];
    char         urls[256];         /* redis.cluster_urls */
    char         dir[512];
} test_cluster;

extern char **environ;


/* Waits (up to 20 s) for cond(c, arg) to hold, asking again every 20 ms. */
static int cluster_eventually(test_cluster *c, int (*cond)(test_cluster *, int), int arg)
{
    uint64_t deadline = clock_mono_ms() + 20000;
    while (!cond(c, arg)) {
        if (clock_mono_ms() > deadline)
            return -1;
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* A command on node i (printf-style, as hiredis's redisCommand); the reply
 * (free it) or NULL. */
static redisReply *cluster_vat(test_cluster *c, int i, const char *fmt, va_list ap)
{
    cluster_node *n = &c->node[i];
    if (!n->ctx) {
        struct timeval tv = {2, 0};
        n->ctx = redisConnectWithTimeout("127.0.0.1", n->port, tv);
        if (!n->ctx || n->ctx->err) {
            if (n->ctx)
                redisFree(n->ctx);
            n->ctx = NULL;
            return NULL;
        }
        redisSetTimeout(n->ctx, tv);
    }
    redisReply *rep = redisvCommand(n->ctx, fmt, ap);
    if (!rep) {
        redisFree(n->ctx);
        n->ctx = NULL;
    }
    return rep;
}

static redisReply *cluster_at(test_cluster *c, int i, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = cluster_vat(c, i, fmt, ap);
    va_end(ap);
    return rep;
}

/* 1 when node i's reply to fmt contains want. */
static int cluster_at_says(test_cluster *c, int i, const char *want, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = cluster_vat(c, i, fmt, ap);
    va_end(ap);
    int ok = rep && rep->str && strstr(rep->str, want) != NULL;
    if (rep)
        freeReplyObject(rep);
    return ok;
}

static int node_answers(test_cluster *c, int i)
{
    return cluster_at_says(c, i, "PONG", "PING");
}

static int cluster_all_ok(test_cluster *c, int unused)
{
    (void)unused;
    for (int i = 0; i < CLUSTER_NODES; i++)
        if (c->node[i].pid && !cluster_at_says(c, i, "cluster_state:ok", "CLUSTER INFO"))
            return 0;
    return 1;
}

/* The index of the node serving slot as node `asked` sees it, or -1. */
static int cluster_owner(test_cluster *c, int asked, int slot)
{
    redisReply *rep = cluster_at(c, asked, "CLUSTER SLOTS");
    int owner = -1;
    for (size_t k = 0; rep && rep->type == REDIS_REPLY_ARRAY && k < rep->elements; k++) {
        redisReply *r = rep->element[k];
        if (r->elements < 3 || slot < r->element[0]->integer || slot > r->element[1]->integer)
            continue;
        for (int i = 0; i < CLUSTER_NODES; i++)
            if (c->node[i].port == r->element[2]->element[1]->integer)
                owner = i;
    }
    if (rep)
        freeReplyObject(rep);
    return owner;
}

static void cluster_kill(test_cluster *c, int i)
{
    if (c->node[i].ctx)
        redisFree(c->node[i].ctx);
    c->node[i].ctx = NULL;
    if (c->node[i].pid) {
        kill(c->node[i].pid, SIGKILL);
        waitpid(c->node[i].pid, NULL, 0);
    }
    c->node[i].pid = 0;
}

static void cluster_stop(test_cluster *c)
{
    for (int i = 0; i < CLUSTER_NODES; i++)
        cluster_kill(c, i);
    if (c->dir[0]) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->dir);
        if (system(cmd) != 0)
            printf("could not remove %s\n", c->dir);
    }
}

/* 0 with the cluster up; -1 (and whatever started stopped) when it cannot be. */
static int cluster_start(test_cluster *c)
{
    memset(c, 0, sizeof *c);
    const char *base = getenv("SGW_BUILD_DIR");
    if (!base || !*base)
        base = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(c->dir, sizeof c->dir, "%s/test-logs", base);
    mkdir(c->dir, 0700);
    snprintf(c->dir, sizeof c->dir, "%s/test-logs/c-redis-cluster-XXXXXX", base);
    if (!mkdtemp(c->dir)) {
        c->dir[0] = '\0';
        return -1;
    }
    char create[1024];
    int at = snprintf(create, sizeof create, "redis-cli --cluster create");
    for (int i = 0; i < CLUSTER_NODES; i++) {
        cluster_node *n = &c->node[i];
        n->port = test_free_port();
        char port[16], bus[16], conf[600], log[600];
        snprintf(port, sizeof port, "%d", n->port);
        snprintf(bus, sizeof bus, "%d", test_free_port());
        snprintf(conf, sizeof conf, "%s/nodes-%d.conf", c->dir, n->port);
        snprintf(log, sizeof log, "%s/redis-%d.log", c->dir, n->port);
        char *argv[] = {"redis-server", "--port", port, "--cluster-port", bus, "--bind", "127.0.0.1",
                        "--cluster-enabled", "yes", "--cluster-node-timeout", "1000",
                        "--cluster-config-file", conf, "--logfile", log, "--dir", c->dir,
                        "--save", "", "--appendonly", "no", NULL};
        if (posix_spawnp(&n->pid, "redis-server", NULL, NULL, argv, environ) != 0) {
            n->pid = 0;
            cluster_stop(c);
            return -1;
        }
        at += snprintf(create + at, sizeof create - (size_t)at, " 127.0.0.1:%d", n->port);
        snprintf(c->urls + strlen(c->urls), sizeof c->urls - strlen(c->urls), "%sredis://127.0.0.1:%d",
                 i ? "," : "", n->port);
    }
    for (int i = 0; i < CLUSTER_NODES; i++)
        if (cluster_eventually(c, node_answers, i) != 0) {
            printf("cluster: node on port %d does not answer (see %s)\n", c->node[i].port, c->dir);
            cluster_stop(c);
            return -1;
        }
    snprintf(create + at, sizeof create - (size_t)at, " --cluster-replicas 0 --cluster-yes >/dev/null 2>&1");
    if (system(create) != 0 || cluster_eventually(c, cluster_all_ok, 0) != 0) {
        printf("cluster: not formed (%s)\n", create);
        cluster_stop(c);
        return -1;
    }
    for (int i = 0; i < CLUSTER_NODES; i++) {
        redisReply *rep = cluster_at(c, i, "CLUSTER MYID");
        if (rep && rep->str)
            snprintf(c->node[i].id, sizeof c->node[i].id, "%s", rep->str);
        if (rep)
            freeReplyObject(rep);
    }
    return 0;
}

#endif
