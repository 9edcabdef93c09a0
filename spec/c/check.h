/*
 * check.h — the tally the C tests keep: check() counts a result and prints
 * what failed; main ends with printf("%d passed, %d failed\n", ...).
 */
#ifndef SGW_SPEC_CHECK_H
#define SGW_SPEC_CHECK_H

#include <stdio.h>

static int passed, failed;

static void check(int ok, const char *name, const char *detail)
{
    if (ok) {
        passed++;
    } else {
        failed++;
        printf("FAIL %s%s%s\n", name, detail ? ": " : "", detail ? detail : "");
    }
}

#endif
