/*
 * test_redis_cluster.c — the key slots of a Redis Cluster (CRC16 with hash
 * tags, the values Redis's own CLUSTER KEYSLOT gives) and which keys a
 * command names: one slot, none, or keys spread over slots (refused).
 */
#include "sgw.h"
#include "check.h"

#include <stdio.h>
#include <string.h>

static unsigned slot(const char *key)
{
    return redis_key_slot(key, strlen(key));
}

static void check_slot(const char *key, unsigned want)
{
    char detail[96];
    unsigned got = slot(key);
    snprintf(detail, sizeof detail, "%s: got %u, want %u", key, got, want);
    check(got == want, "key slot", detail);
}

static int command_slot(int argc, const char **argv)
{
    return redis_command_slot(argc, argv, NULL);
}

int main(void)
{
    /* Reference values from redis-server 7 (CLUSTER KEYSLOT). */
    check_slot("123456789", 12739);          /* the CRC16/XMODEM check value */
    check_slot("", 0);
    check_slot("foo", 12182);
    check_slot("bar", 5061);
    check_slot("user1000", 3443);
    /* The tag alone counts... */
    check(slot("{user1000}.following") == slot("user1000"), "hash tag", NULL);
    check(slot("{user1000}.followers") == slot("{user1000}.following"), "same tag, same slot", NULL);
    check(slot("sgw:{rl3}:client:a") == slot("rl3"), "rate-limit tag", NULL);
    /* ...only the first {...}, and only when not empty. */
    check(slot("foo{}{bar}") != slot("bar"), "empty tag: the whole key", NULL);
    check(slot("foo{{bar}}zap") == slot("{bar"), "tag from the first '{' to the next '}'", NULL);
    check(slot("foo{bar}{zap}") == slot("bar"), "first tag only", NULL);
    check(slot("{unclosed") != slot("unclosed"), "unclosed tag: the whole key", NULL);
    /* Binary keys: the length counts, not a NUL. */
    check(redis_key_slot("a\0b", 3) != redis_key_slot("a", 1), "binary key", NULL);

    /* Which keys a command names. */
    const char *get[] = {"GET", "foo"};
    check(command_slot(2, get) == 12182, "GET's key", NULL);
    const char *ping[] = {"PING"};
    check(command_slot(1, ping) == -1, "PING has no key", NULL);
    const char *publish[] = {"PUBLISH", "sgw:invalidate", "1"};
    check(command_slot(3, publish) == -1, "PUBLISH has no key", NULL);
    const char *info[] = {"info", "server"};
    check(command_slot(2, info) == -1, "INFO (any case) has no key", NULL);
    const char *eval_one[] = {"EVALSHA", "abc", "2", "x{t}1", "y{t}2", "arg"};
    check(command_slot(6, eval_one) == (int)slot("t"), "EVALSHA keys in one slot", NULL);
    const char *eval_spread[] = {"EVAL", "return 1", "2", "foo", "bar", "arg"};
    check(command_slot(6, eval_spread) == -2, "EVAL keys spanning slots", NULL);
    const char *eval_args_only[] = {"EVAL", "return 1", "0", "foo", "bar"};
    check(command_slot(5, eval_args_only) == -1, "EVAL without keys: arguments are not keys", NULL);
    const char *del_spread[] = {"DEL", "foo", "bar"};
    check(command_slot(3, del_spread) == -2, "DEL spanning slots", NULL);
    const char *del_one[] = {"DEL", "{x}a", "{x}b"};
    check(command_slot(3, del_one) == (int)slot("x"), "DEL in one slot", NULL);
    const char *mset[] = {"MSET", "{x}a", "foo", "{x}b", "bar"};
    check(command_slot(5, mset) == (int)slot("x"), "MSET: values are not keys", NULL);
    const char *set[] = {"SET", "foo", "bar", "PX", "100"};
    check(command_slot(5, set) == 12182, "SET: its first argument only", NULL);

    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
