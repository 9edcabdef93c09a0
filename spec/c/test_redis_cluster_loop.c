/*
 * test_redis_cluster_loop.c — redis.* calls of coroutines that wait on a
 * loop's connections to the nodes of a Redis Cluster (redis_loop.c over
 * redis_cluster.c's map), on a private cluster of three masters
 * (cluster_fixture.h): many calls in flight over all nodes at once; a call
 * that waits long (BLPOP) while the loop runs other coroutines; MOVED after
 * a slot moved; ASK while a slot migrates; NOSCRIPT on each node; the map
 * read again while calls go on; a map naming a node that is gone, or one
 * that never answers the connection; a node
 * killed while calls wait on it. Skipped when redis-server cannot be run.
 */
#include "sgw.h"
#include "check.h"
#include "redis_fixture.h"
#include "loop_runner.h"
#include "cluster_fixture.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static test_cluster cl;

/* push(key, value): RPUSH on the key's node, past the loop's connections
 * (the loop's own may be held by the BLPOP it is to end). */
static int l_push(lua_State *L)
{
    size_t len;
    const char *key = luaL_checklstring(L, 1, &len);
    int owner = cluster_owner(&cl, 0, (int)redis_key_slot(key, len));
    redisReply *rep = owner >= 0 ? cluster_at(&cl, owner, "RPUSH %s %s", key, luaL_checkstring(L, 2)) : NULL;
    lua_pushboolean(L, rep && rep->type == REDIS_REPLY_INTEGER);
    if (rep)
        freeReplyObject(rep);
    return 1;
}

/* kill_node(i): node i (0-based) dies at once (SIGKILL). */
static int l_kill_node(lua_State *L)
{
    cluster_kill(&cl, (int)luaL_checkinteger(L, 1));
    return 0;
}

/* A listener that never accepts, its one place in the queue taken: a
 * connection to it waits unanswered, as to a host that is down. */
static int hung_fd = -1, hung_filler = -1;

static int hung_listener(void)
{
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    hung_fd = socket(AF_INET, SOCK_STREAM, 0);
    if (hung_fd < 0 || bind(hung_fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(hung_fd, 0) != 0 ||
        getsockname(hung_fd, (struct sockaddr *)&a, &alen) != 0)
        return -1;
    hung_filler = socket(AF_INET, SOCK_STREAM, 0);
    if (hung_filler < 0 || connect(hung_filler, (struct sockaddr *)&a, alen) != 0)
        return -1;
    return ntohs(a.sin_port);
}

/* close_listener(): the hung listener goes; the connection waiting on it is
 * refused when its SYN is sent again (about a second later). */
static int l_close_listener(lua_State *L)
{
    (void)L;
    if (hung_filler >= 0) close(hung_filler);
    if (hung_fd >= 0) close(hung_fd);
    hung_fd = hung_filler = -1;
    return 0;
}

/* Gives the map one node for every slot, 127.0.0.1:port, as a worker's
 * map that was read before a failover would name the dead master. */
static int map_all_slots_to(sgw_cluster *map, int port)
{
    char resp[160];
    snprintf(resp, sizeof resp, "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n", port);
    redisReader *reader = redisReaderCreate();
    void *rep = NULL;
    int ok = reader && redisReaderFeed(reader, resp, strlen(resp)) == REDIS_OK &&
             redisReaderGetReply(reader, &rep) == REDIS_OK && rep &&
             redis_cluster_apply_map(map, rep, redis_cluster_nth_node(map, 0)) == 0;
    if (rep) freeReplyObject(rep);
    if (reader) redisReaderFree(reader);
    check(ok, "a map naming one node for every slot", NULL);
    return ok ? 0 : -1;
}

static void open_worker(sgw_worker *w)
{
    memset(w, 0, sizeof *w);
    w->redis = redis_open("");
    w->redis_loop = redis_loop_new_cluster(redis_cluster_of(w->redis), NCO);
    w->L = luaL_newstate();
    luaL_openlibs(w->L);
    lua_register(w->L, "check", l_check);
    lua_register(w->L, "push", l_push);
    lua_register(w->L, "kill_node", l_kill_node);
    lua_register(w->L, "close_listener", l_close_listener);
    lapi_redis_open(w->L, w);
    char setup[128];
    snprintf(setup, sizeof setup, "K = 'sgw_cluster_loop:%ld:'; started, ended = 0, 0", (long)getpid());
    (void)luaL_dostring(w->L, setup);
}

static void close_worker(sgw_worker *w)
{
    lua_close(w->L);
    redis_loop_free(w->redis_loop);
    redis_close(w->redis);
}

/* A hash tag starting with prefix whose slot node i serves ("" if none). */
static void find_tag(const char *prefix, int node, char tag[16])
{
    tag[0] = '\0';
    for (int j = 0; j < 1000; j++) {
        char t[16];
        snprintf(t, sizeof t, "%s%d", prefix, j);
        if (cluster_owner(&cl, 0, (int)redis_key_slot(t, strlen(t))) == node) {
            snprintf(tag, 16, "%s", t);
            return;
        }
    }
    check(0, "a tag on the node", prefix);
}

/* TAG[i + 1]: a tag of node i's; MOVED_TAG (node 0's) and ASK_TAG (node
 * 2's): the slots the tests move. */
static void find_tags(sgw_worker *w, char tags[CLUSTER_NODES][16], char moved[16], char ask[16])
{
    lua_createtable(w->L, CLUSTER_NODES, 0);
    for (int i = 0; i < CLUSTER_NODES; i++) {
        find_tag("t", i, tags[i]);
        lua_pushstring(w->L, tags[i]);
        lua_rawseti(w->L, -2, i + 1);
    }
    lua_setglobal(w->L, "TAG");
    find_tag("m", 0, moved);
    lua_pushstring(w->L, moved);
    lua_setglobal(w->L, "MOVED_TAG");
    find_tag("a", 2, ask);
    lua_pushstring(w->L, ask);
    lua_setglobal(w->L, "ASK_TAG");
}

static int says(redisReply *rep, const char *want)
{
    int ok = rep && rep->str && strcmp(rep->str, want) == 0;
    if (rep)
        freeReplyObject(rep);
    return ok;
}

/* Starts moving slot from node `from` to node `to` and moves key there. */
static void begin_migration(int slot, int from, int to, const char *key)
{
    check(says(cluster_at(&cl, to, "CLUSTER SETSLOT %d IMPORTING %s", slot, cl.node[from].id), "OK"),
          "importing", NULL);
    check(says(cluster_at(&cl, from, "CLUSTER SETSLOT %d MIGRATING %s", slot, cl.node[to].id), "OK"),
          "migrating", NULL);
    check(says(cluster_at(&cl, from, "MIGRATE 127.0.0.1 %d %s 0 5000", cl.node[to].port, key), "OK"),
          "key migrated", NULL);
}

static void end_migration(int slot, int to)
{
    for (int i = 0; i < CLUSTER_NODES; i++)
        check(says(cluster_at(&cl, i, "CLUSTER SETSLOT %d NODE %s", slot, cl.node[to].id), "OK"),
              "slot assigned", NULL);
}

static void test_cluster_loop(void)
{
    sgw_worker w;
    open_worker(&w);
    char tags[CLUSTER_NODES][16], moved_tag[16], ask_tag[16];
    find_tags(&w, tags, moved_tag, ask_tag);

    /* Fifty coroutines over the three nodes: every one has sent before the
     * first reply is read, and each gets its own reply. */
    run_many(&w, "fifty calls in flight over the nodes",
             "started = started + 1\n"
             "local key = K .. '{' .. TAG[I % 3 + 1] .. '}n'\n"
             "local v, e = redis.call('INCR', key)\n"
             "check(started == 50, 'all sent before any reply came back', tostring(started))\n"
             "check(math.type(v) == 'integer' and v >= 1, 'its own reply', tostring(v or e))\n"
             "check(redis.call('GET', K .. '{' .. TAG[I % 3 + 1] .. '}none') == redis.null, 'nil reply')\n"
             "ended = ended + 1\n", 50);
    (void)luaL_dostring(w.L, "check(ended == 50, 'fifty replies')");
    run_many(&w, "counts",
             "local n = redis.call('GET', K .. '{' .. TAG[I] .. '}n')\n"
             "check(n == tostring(I == 1 and 16 or 17), 'every INCR counted on its node', tostring(n))\n", 3);

    /* A BLPOP waits on node 1 until coroutine 2..10 are done with nodes 0
     * and 2 and the last of them pushes: were the call to hold the thread,
     * none of them could run and the BLPOP would time out. */
    (void)luaL_dostring(w.L, "others = 0");
    run_many(&w, "a long wait while others run",
             "if I == 1 then\n"
             "  local t, e, class = redis.call('BLPOP', K .. '{' .. TAG[2] .. '}list', 0)\n"
             "  check(type(t) == 'table' and t[2] == 'go', 'BLPOP ended by the push', tostring(e))\n"
             "  check(others == 9, 'the others ran while it waited', tostring(others))\n"
             "else\n"
             "  local tag = TAG[I % 2 == 0 and 1 or 3]\n"
             "  check(redis.call('SET', K .. '{' .. tag .. '}' .. I, I) == 'OK', 'SET elsewhere')\n"
             "  check(redis.call('GET', K .. '{' .. tag .. '}' .. I) == tostring(I), 'GET elsewhere')\n"
             "  others = others + 1\n"
             "  if others == 9 then check(push(K .. '{' .. TAG[2] .. '}list', 'go'), 'pushed') end\n"
             "end\n", 10);

    /* MOVED: a slot moves from node 0 to node 1 after the loop learnt the
     * map; the calls are sent on to node 1 while their coroutines wait. */
    char moved_key[64];
    snprintf(moved_key, sizeof moved_key, "sgw_cluster_loop:%ld:{%s}moved", (long)getpid(), moved_tag);
    int slot = (int)redis_key_slot(moved_key, strlen(moved_key));
    run_many(&w, "before the move",
             "check(redis.call('SET', K .. '{' .. MOVED_TAG .. '}moved', 'here') == 'OK', 'set on node 0')\n", 1);
    begin_migration(slot, 0, 1, moved_key);
    end_migration(slot, 1);
    run_many(&w, "MOVED",
             "local v, e = redis.call('GET', K .. '{' .. MOVED_TAG .. '}moved')\n"
             "check(v == 'here', 'found on the node it moved to', tostring(v or e))\n", 5);
    check(cluster_owner(&cl, 1, slot) == 1, "the slot is node 1's", NULL);

    /* ASK: ASK_TAG's slot migrates from node 2 to node 0; one of its keys
     * has gone already, so node 2 answers ASK for it, and the call goes to
     * node 0 after ASKING (without it node 0 would answer MOVED back). */
    char ask_key[64];
    snprintf(ask_key, sizeof ask_key, "sgw_cluster_loop:%ld:{%s}ask", (long)getpid(), ask_tag);
    slot = (int)redis_key_slot(ask_key, strlen(ask_key));
    run_many(&w, "before the migration",
             "check(redis.call('SET', K .. '{' .. ASK_TAG .. '}ask', 'moving') == 'OK', 'set on node 2')\n"
             "check(redis.call('SET', K .. '{' .. ASK_TAG .. '}stays', 'still') == 'OK', 'set on node 2')\n", 1);
    begin_migration(slot, 2, 0, ask_key);
    run_many(&w, "ASK",
             "local v, e = redis.call('GET', K .. '{' .. ASK_TAG .. '}ask')\n"
             "check(v == 'moving', 'asked on the importing node', tostring(v or e))\n"
             "check(redis.call('GET', K .. '{' .. ASK_TAG .. '}stays') == 'still', 'a key not migrated yet: node 2')\n",
             5);

    /* NOSCRIPT on every node (each has its own script cache), then on one. */
    for (int i = 0; i < CLUSTER_NODES; i++)
        check(says(cluster_at(&cl, i, "SCRIPT FLUSH"), "OK"), "flushed", NULL);
    const char *evals =
        "local key = K .. '{' .. TAG[I % 3 + 1] .. '}s'\n"
        "local t, e = redis.eval_cached('return {KEYS[1], ARGV[1] * 2}', 1, key, I)\n"
        "check(type(t) == 'table' and t[1] == key and t[2] == I * 2, 'sent again with the script', tostring(e))\n";
    run_many(&w, "NOSCRIPT on each node", evals, 9);
    check(says(cluster_at(&cl, 1, "SCRIPT FLUSH"), "OK"), "node 1 flushed", NULL);
    run_many(&w, "NOSCRIPT on one node", evals, 9);

    /* The map read again without holding the thread: the node that will be
     * asked for it is paused, the map marked stale, and ten coroutines call
     * another node meanwhile (by the map as it is). All are answered while
     * CLUSTER SLOTS still waits in the paused node's line; read on the
     * thread, it would have held every coroutine until the node answered. */
    sgw_cluster *map = redis_cluster_of(w.redis);
    redis_cluster_lost(map);
    poll(NULL, 0, 150);              /* the map is read at most every 100 ms */
    int asked = -1;
    for (int i = 0; i < CLUSTER_NODES; i++)
        if (redis_node_is(redis_cluster_nth_node(map, 0), "127.0.0.1", 9, cl.node[i].port))
            asked = i;
    check(asked >= 0, "the node to be asked for the map is one of the three", NULL);
    if (asked >= 0) {
        /* 3 s: far longer than ten calls take, shorter than redis.timeout_ms. */
        check(says(cluster_at(&cl, asked, "CLIENT PAUSE 3000 ALL"), "OK"), "that node paused", NULL);
        char other[64];
        snprintf(other, sizeof other, "OTHER = TAG[%d]", (asked + 1) % CLUSTER_NODES + 1);
        (void)luaL_dostring(w.L, other);
        run_many(&w, "calls while the map is read",
                 "local v, e = redis.call('INCR', K .. '{' .. OTHER .. '}map')\n"
                 "check(math.type(v) == 'integer', 'answered by the other node', tostring(v or e))\n", 10);
        check(redis_loop_in_flight(w.redis_loop), "CLUSTER SLOTS still waits on the paused node", NULL);
        char drain[160];
        snprintf(drain, sizeof drain, "check(redis.call('INCR', K .. '{' .. TAG[%d] .. '}map') >= 1, "
                 "'the paused node answers once its pause is over')\n", asked + 1);
        run_many(&w, "after the pause", drain, 1);
        check(!redis_loop_in_flight(w.redis_loop), "and the map's reply came before it", NULL);
        /* The next ask goes to the node after it: a node that takes asks
         * and fails them (a dead master) is not asked every time. */
        check(!redis_node_is(redis_cluster_nth_node(map, 0), "127.0.0.1", 9, cl.node[asked].port),
              "the next map is asked of another node", NULL);
    }

    /* A worker that slept through a failover: its map names, for every
     * slot, a node that is gone (a free port). Each call finds the node
     * refusing, waits for the map being read and goes by it: answered, none
     * failed. Before, every call failed until the map had come. */
    int gone = test_free_port();
    const char *slept =
        "local v, e, class = redis.call('INCR', K .. '{' .. TAG[I % 3 + 1] .. '}slept')\n"
        "check(math.type(v) == 'integer', 'answered by the node the new map names', tostring(e))\n";
    if (map_all_slots_to(map, gone) == 0) {
        poll(NULL, 0, 150);              /* the map may be read again */
        run_many(&w, "a map naming a gone node", slept, 6);
        check(!redis_loop_in_flight(w.redis_loop), "nothing left waiting", NULL);
    }
    /* Again, with the gone node in its quiet period after that failure
     * (redis.retry_interval_ms): the calls fail to connect at once. */
    if (map_all_slots_to(map, gone) == 0) {
        poll(NULL, 0, 150);
        run_many(&w, "a map naming a gone node in its quiet period", slept, 6);
        check(!redis_loop_in_flight(w.redis_loop), "nothing left waiting", NULL);
    }

    /* The same with a node that never answers the connection (a host that
     * is down): the call waits on it until the connection fails, nothing
     * sent, then goes by the map read meanwhile. */
    int hung = hung_listener();
    check(hung > 0, "a listener that never accepts", NULL);
    if (hung > 0 && map_all_slots_to(map, hung) == 0) {
        run_many(&w, "a map naming a node that never answers",
                 "if I == 1 then\n"
                 "  local v, e = redis.call('INCR', K .. '{' .. TAG[1] .. '}slept')\n"
                 "  check(math.type(v) == 'integer', 'answered once the connection failed', tostring(e))\n"
                 "else\n"
                 "  close_listener()\n"
                 "end\n", 2);
        check(!redis_loop_in_flight(w.redis_loop), "nothing left waiting", NULL);
    }
    l_close_listener(NULL);

    /* A node killed while calls wait on it: node 0 is paused, so calls for
     * its slots wait; coroutine 6 works on node 2 meanwhile, then kills
     * node 0. The waiting calls fail as a lost single server's would. */
    check(says(cluster_at(&cl, 0, "CLIENT PAUSE 20000 ALL"), "OK"), "node 0 paused", NULL);
    (void)luaL_dostring(w.L, "answered = 0");
    run_many(&w, "a node killed while calls wait",
             "if I <= 5 then\n"
             "  local v, e, class = redis.call('GET', K .. '{' .. TAG[1] .. '}n')\n"
             "  answered = answered + 1\n"
             "  check(v == nil and class == 'unavailable', 'unavailable once the node died', tostring(e))\n"
             "else\n"
             "  for i = 1, 3 do check(redis.call('INCR', K .. '{' .. TAG[3] .. '}k') == i, 'node 2 answers') end\n"
             "  check(answered == 0, 'the calls on node 0 still wait', tostring(answered))\n"
             "  kill_node(0)\n"
             "end\n", 6);
    run_many(&w, "after the node died",
             "local v, e, class = redis.call('GET', K .. '{' .. TAG[1] .. '}n')\n"
             "check(v == nil and class == 'unavailable', 'its slots are unavailable', tostring(e))\n", 3);
    close_worker(&w);
}

int main(void)
{
    if (redis_fixture_config() != 0)
        return 1;
    if (system("redis-server --version >/dev/null 2>&1 && redis-cli --version >/dev/null 2>&1") != 0) {
        printf("SKIP: redis-server and redis-cli needed\n");
        config_free();
        return 0;
    }
    if (cluster_start(&cl) != 0) {
        printf("no Redis Cluster\n");
        config_free();
        return 1;
    }
    char err[256];
    /* Long enough that only a push ends the BLPOP and only the kill the
     * paused node's calls. */
    if (config_set("redis.cluster_urls", cl.urls, err, sizeof err) != 0 ||
        config_set("redis.timeout_ms", "5000", err, sizeof err) != 0) {
        printf("config: %s\n", err);
        cluster_stop(&cl);
        return 1;
    }
    test_cluster_loop();
    cluster_stop(&cl);
    config_free();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
