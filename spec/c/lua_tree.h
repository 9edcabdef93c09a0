/*
 * lua_tree.h — a temporary directory tree for the C tests that load Lua
 * handlers (luart.c reads handlers/ and lib/ below a root): made under
 * $TMPDIR (or /tmp), filled one file at a time, removed whole at the end.
 */
#ifndef SGW_SPEC_LUA_TREE_H
#define SGW_SPEC_LUA_TREE_H

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Makes a new empty directory named prefix plus six random characters and
 * puts its path in root (cap bytes). 0 ok; on failure root is "". */
static inline int lua_tree_make(char *root, size_t cap, const char *prefix)
{
    const char *tmp = getenv("TMPDIR");
    int n = snprintf(root, cap, "%s/%sXXXXXX", tmp && *tmp ? tmp : "/tmp", prefix);
    if (n < 0 || (size_t)n >= cap || !mkdtemp(root)) {
        if (cap) root[0] = 0;
        return -1;
    }
    return 0;
}

/* One file of a tree: its path below the root and its text. */
typedef struct lua_tree_file {
    const char *file, *text;
} lua_tree_file;

/* Writes text to root/rel, replacing the file if it is there and making
 * the directories on its way that are not. 0 ok. */
static inline int lua_tree_write(const char *root, const char *rel, const char *text)
{
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/%s", root, rel);
    if (n < 0 || (size_t)n >= sizeof path) return -1;
    for (char *slash = path + strlen(root) + 1; (slash = strchr(slash, '/')); slash++) {
        *slash = 0;
        int made = mkdir(path, 0700) == 0 || errno == EEXIST;
        *slash = '/';
        if (!made) return -1;
    }
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* lua_tree_make, then the n files written into it. 0 ok. */
static inline int lua_tree_make_with(char *root, size_t cap, const char *prefix, const lua_tree_file *files,
                                     size_t n)
{
    if (lua_tree_make(root, cap, prefix)) return -1;
    for (size_t i = 0; i < n; i++)
        if (lua_tree_write(root, files[i].file, files[i].text)) return -1;
    return 0;
}

static inline int lua_tree_remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    return remove(path);
}

/* Removes root and everything below it; nothing when root is "" (never
 * made). Depth first, and without following symbolic links out of the
 * tree. 0 ok. */
static inline int lua_tree_remove(const char *root)
{
    if (!root[0]) return 0;
    return nftw(root, lua_tree_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
