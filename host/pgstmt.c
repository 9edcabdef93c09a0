/*
 * pgstmt.c — the statements one PostgreSQL connection has prepared.
 *
 * A statement sent by name is parsed and analysed once per connection
 * instead of at every call (a listing's statement cost PostgreSQL a quarter
 * less CPU prepared than unnamed). Its name is a hash of its text, so a name
 * always means the same text, whichever connection a pooler gives the next
 * transaction; the text is kept too and compared, so a collision of hashes
 * falls back to an unnamed statement instead of running another text.
 *
 * The set is bounded (PGSTMT_MAX texts): SQL a handler builds with varying
 * parts (lists of placeholders of any length) would otherwise grow every
 * backend's memory without end. A text met once the set is full goes
 * unnamed. Forgetting everything (pgstmt_clear) is for a new connection,
 * whose server session has none of them.
 */
#include "sgw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS (PGSTMT_MAX * 2)           /* open addressing, half full at most */

struct sgw_pgstmt {
    uint64_t hash[SLOTS];
    char    *text[SLOTS];                /* NULL: free slot */
    int      count;
};

/* FNV-1a, 64 bits: statements are a few hundred bytes. */
static uint64_t text_hash(const char *sql) {
    uint64_t h = 14695981039346656037ULL;
    for (const unsigned char *p = (const unsigned char *)sql; *p; p++) {
        h ^= *p;
        h *= 1099511628211ULL;
    }
    return h;
}

sgw_pgstmt *pgstmt_new(void) { return calloc(1, sizeof(sgw_pgstmt)); }

void pgstmt_clear(sgw_pgstmt *s) {
    if (!s) return;
    for (int i = 0; i < SLOTS; i++) {
        free(s->text[i]);
        s->text[i] = NULL;
    }
    s->count = 0;
}

void pgstmt_free(sgw_pgstmt *s) {
    pgstmt_clear(s);
    free(s);
}

int pgstmt_count(const sgw_pgstmt *s) { return s ? s->count : 0; }

/* The slot holding sql, or the free slot where it would go; -1 when the
 * probe met another text of the same hash (a collision: go unnamed). */
static int slot_of(const sgw_pgstmt *s, const char *sql, uint64_t h) {
    for (int i = (int)(h % SLOTS), n = 0; n < SLOTS; i = (i + 1) % SLOTS, n++) {
        if (!s->text[i]) return i;
        if (s->hash[i] == h) return strcmp(s->text[i], sql) == 0 ? i : -1;
    }
    return -1;
}

void pgstmt_name_for(const char *sql, char name[PGSTMT_NAME_LEN]) {
    snprintf(name, PGSTMT_NAME_LEN, "sgw_%016llx", (unsigned long long)text_hash(sql));
}

int pgstmt_lookup(const sgw_pgstmt *s, const char *sql, char name[PGSTMT_NAME_LEN]) {
    if (!s) return PGSTMT_UNNAMED;
    uint64_t h = text_hash(sql);
    int i = slot_of(s, sql, h);
    if (i < 0) return PGSTMT_UNNAMED;
    if (s->text[i]) {
        pgstmt_name_for(sql, name);
        return PGSTMT_PREPARED;
    }
    if (s->count >= PGSTMT_MAX) return PGSTMT_UNNAMED;
    pgstmt_name_for(sql, name);
    return PGSTMT_TO_PREPARE;
}

int pgstmt_add(sgw_pgstmt *s, const char *sql) {
    if (!s || s->count >= PGSTMT_MAX) return -1;
    uint64_t h = text_hash(sql);
    int i = slot_of(s, sql, h);
    if (i < 0) return -1;
    if (s->text[i]) return 0;
    if (!(s->text[i] = strdup(sql))) return -1;
    s->hash[i] = h;
    s->count++;
    return 0;
}
