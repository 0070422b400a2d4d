/* inspect_store.h - fg-inspect's view of a store directory (tools/inspect_store.c). */
#ifndef FG_INSPECT_STORE_H
#define FG_INSPECT_STORE_H

/* Print the store at dir (table, or JSON when json); verify: run fg_store_verify first.
 * Returns the exit status: 0 ok, 1 not a store / verify failed (one line on stderr). */
int inspect_store(const char *dir, int json, int verify, int chunks);

#endif
