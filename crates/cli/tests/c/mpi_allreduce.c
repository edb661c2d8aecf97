/* An MPI program for Open MPI over UCX on softrdma (tests/ucx.rs): a ping-pong of 8-byte
 * messages between ranks 0 and 1 that checks every message, then an MPI_Allreduce (sum) of
 * 64 MiB of doubles over all ranks that checks every element. Rank 0 prints
 * "mpi: all checks passed" and every rank exits 0 only if every rank's checks passed. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PINGS 1000
#define WORDS ((64u << 20) / sizeof(double))

int main(int argc, char **argv)
{
	int rank, size, ok = 1;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);

	/* Ping-pong: rank 0 sends i, rank 1 answers i + 1. */
	for (uint64_t i = 0; i < PINGS && size > 1; i++) {
		uint64_t m = i;
		if (rank == 0) {
			MPI_Send(&m, 1, MPI_UINT64_T, 1, 0, MPI_COMM_WORLD);
			MPI_Recv(&m, 1, MPI_UINT64_T, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			ok &= m == i + 1;
		} else if (rank == 1) {
			MPI_Recv(&m, 1, MPI_UINT64_T, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			ok &= m == i;
			m++;
			MPI_Send(&m, 1, MPI_UINT64_T, 0, 0, MPI_COMM_WORLD);
		}
	}
	if (!ok)
		printf("rank %d: ping-pong data wrong\n", rank);

	/* Allreduce: element i of rank r is r + i, so the sum is size * i + size(size-1)/2
	   (exact in a double for these magnitudes). */
	double *in = malloc(WORDS * sizeof(double)), *out = malloc(WORDS * sizeof(double));
	if (!in || !out) {
		printf("rank %d: out of memory\n", rank);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	for (size_t i = 0; i < WORDS; i++)
		in[i] = (double)rank + (double)i;
	memset(out, 0, WORDS * sizeof(double));
	MPI_Allreduce(in, out, (int)WORDS, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	size_t wrong = 0;
	for (size_t i = 0; i < WORDS; i++)
		wrong += out[i] != (double)size * (double)i + (double)size * (size - 1) / 2.0;
	if (wrong) {
		printf("rank %d: %zu of %zu sums wrong\n", rank, wrong, (size_t)WORDS);
		ok = 0;
	}

	int all = 0;
	MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
	if (rank == 0 && all)
		printf("mpi: all checks passed (%d ranks)\n", size);
	free(in);
	free(out);
	MPI_Finalize();
	return all ? 0 : 1;
}
