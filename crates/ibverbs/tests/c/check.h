/* CHECK(cond, fmt, ...): the C test programs' assertion. On failure it prints the line, the
 * condition, the message and errno, and exits 1. */
#ifndef SOFTRDMA_TEST_CHECK_H
#define SOFTRDMA_TEST_CHECK_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			printf("FAIL line %d: %s: ", __LINE__, #cond);         \
			printf(__VA_ARGS__);                                   \
			printf(" (errno %d %s)\n", errno, strerror(errno));    \
			exit(1);                                               \
		}                                                              \
	} while (0)

#endif
