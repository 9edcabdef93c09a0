/*
 * test_pgstmt.c — host/pgstmt.c, the statements a connection has prepared:
 * a text is to prepare until added, then prepared under the same name; the
 * name depends on the text alone; the set stops at PGSTMT_MAX and clears.
 */
#include "sgw.h"
#include "check.h"

#include <stdio.h>
#include <string.h>

int main(void) {
    sgw_pgstmt *s = pgstmt_new();
    check(s != NULL, "a set", NULL);
    char name[PGSTMT_NAME_LEN], again[PGSTMT_NAME_LEN], other[PGSTMT_NAME_LEN];
    const char *a = "SELECT $1::int", *b = "SELECT $1::text";

    check(pgstmt_lookup(s, a, name) == PGSTMT_TO_PREPARE, "a new text is to prepare", NULL);
    check(strncmp(name, "sgw_", 4) == 0 && strlen(name) == 20, "named sgw_ and 16 hex digits", name);
    check(pgstmt_lookup(s, a, again) == PGSTMT_TO_PREPARE, "still to prepare until the server has it", NULL);
    check(pgstmt_add(s, a) == 0 && pgstmt_count(s) == 1, "added", NULL);
    check(pgstmt_add(s, a) == 0 && pgstmt_count(s) == 1, "adding it again changes nothing", NULL);
    check(pgstmt_lookup(s, a, again) == PGSTMT_PREPARED && strcmp(name, again) == 0,
          "then prepared, under the same name", again);
    check(pgstmt_lookup(s, b, other) == PGSTMT_TO_PREPARE && strcmp(name, other) != 0,
          "another text has another name", other);
    pgstmt_name_for(a, again);
    check(strcmp(name, again) == 0, "the name is the text's alone (any connection, any process)", again);

    /* Bounded: past PGSTMT_MAX texts, new ones go unnamed; known ones stay. */
    char sql[64];
    for (int i = 0; pgstmt_count(s) < PGSTMT_MAX && i < 10 * PGSTMT_MAX; i++) {
        snprintf(sql, sizeof sql, "SELECT %d", i);
        pgstmt_add(s, sql);
    }
    check(pgstmt_count(s) == PGSTMT_MAX, "filled to the bound", NULL);
    check(pgstmt_lookup(s, b, other) == PGSTMT_UNNAMED, "a new text goes unnamed once full", NULL);
    check(pgstmt_add(s, b) == -1 && pgstmt_count(s) == PGSTMT_MAX, "and cannot be added", NULL);
    check(pgstmt_lookup(s, a, again) == PGSTMT_PREPARED, "a known one is still prepared", NULL);

    pgstmt_clear(s);
    check(pgstmt_count(s) == 0 && pgstmt_lookup(s, a, again) == PGSTMT_TO_PREPARE,
          "a new session: everything is to prepare again", NULL);
    check(pgstmt_lookup(NULL, a, again) == PGSTMT_UNNAMED, "no set: unnamed", NULL);
    pgstmt_free(s);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
