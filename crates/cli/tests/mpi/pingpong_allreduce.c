/* An MPI job as users run them, for crates/cli/tests/mpi.rs: a ping-pong between ranks 0 and 1
 * (small and large messages, every byte checked) and an MPI_Allreduce over 64 MiB whose sum
 * every rank checks element by element. Prints "pingpong_allreduce: OK" from rank 0 and exits
 * 0 only if everything matched; any mismatch aborts the job with status 1. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *what, long at) {
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "pingpong_allreduce: rank %d: %s (at %ld)\n", rank, what, at);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void pingpong(int rank, size_t len, int iters) {
    unsigned char *buf = malloc(len);
    if (!buf) fail("out of memory", 0);
    for (int it = 0; it < iters; it++) {
        unsigned char seed = (unsigned char)(it * 31 + len);
        if (rank == 0) {
            for (size_t i = 0; i < len; i++) buf[i] = (unsigned char)(seed + i);
            MPI_Send(buf, (int)len, MPI_BYTE, 1, it, MPI_COMM_WORLD);
            memset(buf, 0, len);
            MPI_Recv(buf, (int)len, MPI_BYTE, 1, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (size_t i = 0; i < len; i++)
                if (buf[i] != (unsigned char)(seed + i + 1)) fail("pong data", (long)i);
        } else if (rank == 1) {
            MPI_Recv(buf, (int)len, MPI_BYTE, 0, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (size_t i = 0; i < len; i++) {
                if (buf[i] != (unsigned char)(seed + i)) fail("ping data", (long)i);
                buf[i]++;
            }
            MPI_Send(buf, (int)len, MPI_BYTE, 0, it, MPI_COMM_WORLD);
        }
    }
    free(buf);
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) fail("needs at least 2 ranks", size);

    pingpong(rank, 8, 1000);
    pingpong(rank, 1 << 20, 20);
    MPI_Barrier(MPI_COMM_WORLD);

    const long n = (64L << 20) / sizeof(int64_t);
    int64_t *in = malloc(n * sizeof *in), *out = malloc(n * sizeof *out);
    if (!in || !out) fail("out of memory", 0);
    for (long i = 0; i < n; i++) in[i] = (int64_t)rank * 1000003 + i % 9973;
    MPI_Allreduce(in, out, (int)n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    const int64_t ranks = (int64_t)size * (size - 1) / 2 * 1000003;
    for (long i = 0; i < n; i++)
        if (out[i] != ranks + (int64_t)size * (i % 9973)) fail("allreduce sum", i);
    free(in);
    free(out);

    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("pingpong_allreduce: OK (%d ranks, 64 MiB allreduce)\n", size);
    MPI_Finalize();
    return 0;
}
