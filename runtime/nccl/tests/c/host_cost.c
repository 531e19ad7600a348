/* The host cost of one ncclAllReduce through Braid's libnccl.so.2: the time from the call
 * to its return, median of 10,000 calls, in each of two rank processes (ranks on GPU
 * rank % BRAID_TEST_GPUS, so both share GPU 0 by default). Calls go back to back on the
 * rank's stream; every 100 calls the stream is drained outside the timed region, so
 * that a full launch queue never stalls a timed call. Compile with -DBRAID_CUDA against
 * NCCL's nccl.h and CUDA's runtime (runtime/nccl/tests/gpu/host_cost.sh does).
 *
 * Prints one JSON object per rank: {"rank":r,"calls":N,"bytes":B,"median_us":..,
 * "p10_us":..,"p90_us":..,"p99_us":..}. */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"

#define CHECK(call)                                                                          \
  do {                                                                                       \
    int r_ = (int)(call);                                                                    \
    if (r_ != 0) {                                                                           \
      fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #call, r_);             \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

enum { calls = 10000, warmup = 500, drain_every = 100 };

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static void rank_main(ncclUniqueId id, int rank, int n, size_t count) {
  const char* g = getenv("BRAID_TEST_GPUS");
  int gpus = g != NULL && atoi(g) > 0 ? atoi(g) : 1, i;
  ncclComm_t comm;
  cudaStream_t st;
  float* buf;
  double* t = malloc(calls * sizeof(double));
  CHECK(cudaSetDevice(rank % gpus));
  CHECK(ncclCommInitRank(&comm, n, id, rank));
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  CHECK(cudaMalloc((void**)&buf, count * sizeof(float)));
  CHECK(cudaMemset(buf, 0, count * sizeof(float)));
  for (i = 0; i < warmup; i++) CHECK(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, st));
  CHECK(cudaStreamSynchronize(st));
  for (i = 0; i < calls; i++) {
    double t0 = now_us();
    CHECK(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, st));
    t[i] = now_us() - t0;
    if ((i + 1) % drain_every == 0) CHECK(cudaStreamSynchronize(st));
  }
  CHECK(cudaStreamSynchronize(st));
  qsort(t, calls, sizeof(double), cmp);
  printf("{\"rank\":%d,\"ranks\":%d,\"calls\":%d,\"bytes\":%zu,\"median_us\":%.3f,\"p10_us\":%.3f,"
         "\"p90_us\":%.3f,\"p99_us\":%.3f}\n",
         rank, n, calls, count * sizeof(float), t[calls / 2], t[calls / 10], t[calls * 9 / 10],
         t[calls * 99 / 100]);
  fflush(stdout);
  CHECK(ncclCommDestroy(comm));
  CHECK(cudaFree(buf));
  CHECK(cudaStreamDestroy(st));
  free(t);
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2, r, status, failed = 0;
  size_t count = argc > 2 ? (size_t)atol(argv[2]) : 2;
  ncclUniqueId id;
  pid_t pids[16];
  if (n < 1 || n > 16) return 2;
  CHECK(ncclGetUniqueId(&id));
  fflush(stdout);
  for (r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      rank_main(id, r, n, count);
      _exit(0);
    }
  }
  for (r = 0; r < n; r++) {
    waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  return failed;
}
