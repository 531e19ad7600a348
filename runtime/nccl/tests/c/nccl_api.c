/* NCCL's semantics through Braid's libnccl.so.2, on the host backend (BRAID_BACKEND=host:
 * "device" buffers are host memory; CI runs it so, without a GPU) or, compiled with
 * -DBRAID_CUDA against NCCL's own nccl.h and CUDA's runtime, on GPUs (rank r on GPU
 * r % BRAID_TEST_GPUS, default 1: several ranks share one GPU):
 *
 *   every collective x data type x op x in and out of place x odd counts, ncclCommInitAll
 *   over 2, 3 and 4 ranks driven from one thread through groups; grouped send/recv rings;
 *   PreMulSum and Avg; ranks as threads (ncclCommInitRank, a non-blocking config, several
 *   ranks of one thread inside a group); ranks as processes; ncclCommSplit; a peer that
 *   aborts (ncclRemoteError through the call and ncclCommGetAsyncError); forwarding what
 *   Braid does not serve to a real NCCL (a fake one, FAKE_NCCL names it), and the
 *   error without one (host only: the stand-in works on host memory); on GPUs,
 *   forwarding to the real NCCL (section forward-real).
 *
 * Usage: nccl_api [section]   (all sections without an argument). Exits 1 at the first
 * wrong result, printing it. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nccl.h"

/* ---- memory and streams of the backend ------------------------------------------- */

#ifdef BRAID_CUDA
#include <cuda_runtime.h>
#define CUDACHECK(call)                                                                            \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));           \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)
static const int on_gpu = 1;
static int device_of(int rank) {
  const char* v = getenv("BRAID_TEST_GPUS");
  int n = v != NULL ? atoi(v) : 1;
  return rank % (n > 0 ? n : 1);
}
static void use_device(int rank) { CUDACHECK(cudaSetDevice(device_of(rank))); }
static cudaStream_t new_stream(int rank) {
  cudaStream_t s;
  use_device(rank);
  CUDACHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}
static void free_stream(cudaStream_t s) { CUDACHECK(cudaStreamDestroy(s)); }
static void sync_stream(cudaStream_t s) { CUDACHECK(cudaStreamSynchronize(s)); }
static void* dev_alloc(int rank, size_t bytes) {
  void* p;
  use_device(rank);
  CUDACHECK(cudaMalloc(&p, bytes));
  return p;
}
static void dev_free(void* p) { CUDACHECK(cudaFree(p)); }
static void to_dev(void* d, const void* h, size_t bytes) { CUDACHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice)); }
static void to_host(void* h, const void* d, size_t bytes) { CUDACHECK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost)); }
#else
static const int on_gpu = 0;
static int device_of(int rank) { (void)rank; return -1; }
static void use_device(int rank) { (void)rank; }
static cudaStream_t new_stream(int rank) { (void)rank; return NULL; }
static void free_stream(cudaStream_t s) { (void)s; }
static void sync_stream(cudaStream_t s) { (void)s; }
static void* dev_alloc(int rank, size_t bytes) { (void)rank; return calloc(bytes, 1); }
static void dev_free(void* p) { free(p); }
static void to_dev(void* d, const void* h, size_t bytes) { memcpy(d, h, bytes); }
static void to_host(void* h, const void* d, size_t bytes) { memcpy(h, d, bytes); }
#endif

/* A buffer of rank `rank`: `d` for the library, `h` its host image. */
typedef struct {
  void* h;
  void* d;
  size_t bytes;
} buf_t;

static buf_t buf_new(int rank, size_t bytes) {
  buf_t b;
  b.bytes = bytes > 0 ? bytes : 1;
  b.h = calloc(b.bytes, 1);
  b.d = dev_alloc(rank, b.bytes);
  to_dev(b.d, b.h, b.bytes);
  return b;
}
static void push(buf_t* b) { to_dev(b->d, b->h, b->bytes); }
static void pull(buf_t* b) { to_host(b->h, b->d, b->bytes); }
static void buf_free(buf_t* b) {
  free(b->h);
  dev_free(b->d);
}
/* The devices of ranks 0..n-1 (ncclCommInitAll's list). */
static void devices(int* list, int n) {
  int r;
  for (r = 0; r < n; r++) list[r] = on_gpu ? device_of(r) : 0;
}

#define CHECK(call)                                                                          \
  do {                                                                                       \
    ncclResult_t r_ = (call);                                                                \
    if (r_ != ncclSuccess) {                                                                 \
      printf("FAIL %s:%d: %s returned %d: %s\n", __FILE__, __LINE__, #call, (int)r_,          \
             ncclGetLastError(NULL));                                                        \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

#define EXPECT(cond, ...)                                \
  do {                                                   \
    if (!(cond)) {                                       \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);        \
      printf(__VA_ARGS__);                               \
      printf("\n");                                      \
      exit(1);                                           \
    }                                                    \
  } while (0)

/* ---- element access for every data type ------------------------------------------ */

static size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

static uint16_t to_half(float f) {
  uint32_t x;
  uint32_t sign, mant;
  int exp;
  memcpy(&x, &f, 4);
  sign = (x >> 16) & 0x8000;
  exp = (int)((x >> 23) & 0xff) - 127 + 15;
  mant = x & 0x7fffff;
  if (f == 0.0f) return (uint16_t)sign;
  if (exp <= 0) return (uint16_t)sign; /* the tests use no subnormals */
  {
    uint32_t h = sign | ((uint32_t)exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return (uint16_t)h;
  }
}

static float from_half(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, x;
  float f;
  if (exp == 0 && mant == 0) x = sign;
  else if (exp == 0) return (sign ? -1.0f : 1.0f) * ldexpf((float)mant, -24);
  else x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  memcpy(&f, &x, 4);
  return f;
}

static uint16_t to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

static float from_bf16(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static void put(void* buf, ncclDataType_t t, size_t i, double v) {
  char* p = (char*)buf + i * type_size(t);
  switch (t) {
    case ncclInt8: { int8_t x = (int8_t)v; memcpy(p, &x, 1); break; }
    case ncclUint8: { uint8_t x = (uint8_t)v; memcpy(p, &x, 1); break; }
    case ncclInt32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    case ncclUint32: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); break; }
    case ncclInt64: { int64_t x = (int64_t)v; memcpy(p, &x, 8); break; }
    case ncclUint64: { uint64_t x = (uint64_t)v; memcpy(p, &x, 8); break; }
    case ncclFloat16: { uint16_t x = to_half((float)v); memcpy(p, &x, 2); break; }
    case ncclBfloat16: { uint16_t x = to_bf16((float)v); memcpy(p, &x, 2); break; }
    case ncclFloat32: { float x = (float)v; memcpy(p, &x, 4); break; }
    case ncclFloat64: { memcpy(p, &v, 8); break; }
    default: { uint8_t x = (uint8_t)v; memcpy(p, &x, 1); break; }
  }
}

static double get(const void* buf, ncclDataType_t t, size_t i) {
  const char* p = (const char*)buf + i * type_size(t);
  switch (t) {
    case ncclInt8: { int8_t x; memcpy(&x, p, 1); return x; }
    case ncclUint8: { uint8_t x; memcpy(&x, p, 1); return x; }
    case ncclInt32: { int32_t x; memcpy(&x, p, 4); return x; }
    case ncclUint32: { uint32_t x; memcpy(&x, p, 4); return x; }
    case ncclInt64: { int64_t x; memcpy(&x, p, 8); return (double)x; }
    case ncclUint64: { uint64_t x; memcpy(&x, p, 8); return (double)x; }
    case ncclFloat16: { uint16_t x; memcpy(&x, p, 2); return from_half(x); }
    case ncclBfloat16: { uint16_t x; memcpy(&x, p, 2); return from_bf16(x); }
    case ncclFloat32: { float x; memcpy(&x, p, 4); return x; }
    case ncclFloat64: { double x; memcpy(&x, p, 8); return x; }
    default: { uint8_t x; memcpy(&x, p, 1); return x; }
  }
}

static int is_float(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclBfloat16 || t == ncclFloat32 || t == ncclFloat64;
}

/* Rank r's element i: small integers, exact in every type, whose sums over 4 ranks and
 * products (values 1..3) stay exact too. */
static double value(int r, size_t i, ncclRedOp_t op) {
  if (op == ncclProd) return (double)((r + i) % 3 + 1);
  return (double)((r * 7 + i * 3) % 11 + 1);
}

static double combine(double a, double b, ncclRedOp_t op) {
  switch (op) {
    case ncclProd: return a * b;
    case ncclMax: return a > b ? a : b;
    case ncclMin: return a < b ? a : b;
    default: return a + b;
  }
}

static double expected_reduction(int n, size_t i, ncclDataType_t t, ncclRedOp_t op) {
  double acc = value(0, i, op);
  int r;
  for (r = 1; r < n; r++) acc = combine(acc, value(r, i, op), op);
  if (op == ncclAvg) acc = is_float(t) ? acc / n : (double)((long long)acc / n);
  return acc;
}

static void expect_close(double got, double want, ncclDataType_t t, const char* what, size_t i) {
  /* Integers are exact; floats are exact but for Avg (the sum times 1/n, as NCCL). */
  double tol = t == ncclFloat16 || t == ncclBfloat16 ? 1e-2 * fabs(want)
               : t == ncclFloat32                    ? 1e-6 * fabs(want)
               : t == ncclFloat64                    ? 1e-14 * fabs(want)
                                                     : 0;
  EXPECT(fabs(got - want) <= tol, "%s: element %zu is %g, expected %g (dtype %d)", what, i, got, want, (int)t);
}

/* ---- one collective on every rank of a one-thread communicator set ---------------- */

enum { n_types = 10 };
static const ncclDataType_t types[n_types] = {ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64,
                                              ncclUint64, ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16};
static const ncclRedOp_t ops[5] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};

typedef enum { ALLREDUCE, REDUCE, BROADCAST, BCAST, ALLGATHER, REDUCESCATTER, ALLTOALL, N_COLLS } coll_t;
static const char* coll_names[N_COLLS] = {"allreduce", "reduce", "broadcast", "bcast",
                                          "allgather", "reducescatter", "alltoall"};

/* Runs collective `c` of `count` (per NCCL's meaning) on all `n` communicators; checks
 * every rank's result. */
static void run_one(ncclComm_t* comms, cudaStream_t* streams, int n, coll_t c, ncclDataType_t t, ncclRedOp_t op,
                    size_t count, int in_place, int root) {
  buf_t send[8], recv[8];
  size_t send_elems, recv_elems, i, ts = type_size(t);
  int r;
  char what[160];
  snprintf(what, sizeof what, "%s n=%d dtype=%d op=%d count=%zu %s root=%d", coll_names[c], n, (int)t,
           (int)op, count, in_place ? "in place" : "out of place", root);
  switch (c) {
    case ALLGATHER: send_elems = count; recv_elems = count * n; break;
    case REDUCESCATTER: send_elems = count * n; recv_elems = count; break;
    case ALLTOALL: send_elems = count * n; recv_elems = count * n; break;
    default: send_elems = count; recv_elems = count; break;
  }
  for (r = 0; r < n; r++) {
    size_t big = send_elems > recv_elems ? send_elems : recv_elems;
    send[r] = buf_new(r, (big + 1) * ts);
    if (!in_place) recv[r] = buf_new(r, (recv_elems + 1) * ts);
    for (i = 0; i < send_elems; i++) {
      size_t at = (c == ALLGATHER && in_place) ? r * count + i : i;
      put(send[r].h, t, at, value(r, i, op));
    }
    push(&send[r]);
    if (!in_place) {
      put(recv[r].h, t, recv_elems, 99); /* a guard past the end */
      push(&recv[r]);
    }
  }
  CHECK(ncclGroupStart());
  for (r = 0; r < n; r++) {
    char* base = send[r].d;
    void* s = (c == ALLGATHER && in_place) ? base + r * count * ts : base;
    void* d = in_place ? ((c == REDUCESCATTER) ? base + r * count * ts : base) : recv[r].d;
    cudaStream_t st = streams[r];
    switch (c) {
      case ALLREDUCE: CHECK(ncclAllReduce(s, d, count, t, op, comms[r], st)); break;
      case REDUCE: CHECK(ncclReduce(s, d, count, t, op, root, comms[r], st)); break;
      case BROADCAST: CHECK(ncclBroadcast(s, d, count, t, root, comms[r], st)); break;
      case BCAST: CHECK(ncclBcast(d, count, t, root, comms[r], st)); break;
      case ALLGATHER: CHECK(ncclAllGather(s, d, count, t, comms[r], st)); break;
      case REDUCESCATTER: CHECK(ncclReduceScatter(s, d, count, t, op, comms[r], st)); break;
      case ALLTOALL: CHECK(ncclAlltoAll(s, d, count, t, comms[r], st)); break;
      default: break;
    }
  }
  CHECK(ncclGroupEnd());
  for (r = 0; r < n; r++) {
    const char* out;
    sync_stream(streams[r]);
    pull(&send[r]);
    if (!in_place) pull(&recv[r]);
    out = in_place ? (const char*)send[r].h + (c == REDUCESCATTER ? r * count * ts : 0) : recv[r].h;
    for (i = 0; i < recv_elems; i++) {
      double want;
      switch (c) {
        case ALLREDUCE: want = expected_reduction(n, i, t, op); break;
        case REDUCE:
          if (r != root) continue;
          want = expected_reduction(n, i, t, op);
          break;
        case BROADCAST: case BCAST: want = value(root, i, op); break;
        case ALLGATHER: want = value((int)(i / count), i % count, op); break;
        case REDUCESCATTER: want = expected_reduction(n, r * count + i, t, op); break;
        case ALLTOALL: want = value((int)(i / count), r * count + i % count, op); break;
        default: want = 0;
      }
      /* value() is exact in every type, so only reductions need a tolerance. */
      expect_close(get(out, t, i), want, t, what, i);
    }
    if (!in_place) EXPECT(get(recv[r].h, t, recv_elems) == 99, "%s: rank %d wrote past its buffer", what, r);
  }
  for (r = 0; r < n; r++) {
    if (!in_place) buf_free(&recv[r]);
    buf_free(&send[r]);
  }
}

static void matrix(int n) {
  ncclComm_t comms[8];
  cudaStream_t streams[8];
  const size_t counts[3] = {1, 7, 1001};
  int c, ti, oi, ci, ip, calls = 0, rank, count, devs[8] = {0};
  devices(devs, n);
  CHECK(ncclCommInitAll(comms, n, devs));
  for (rank = 0; rank < n; rank++) streams[rank] = new_stream(rank);
  for (rank = 0; rank < n; rank++) {
    int dev;
    CHECK(ncclCommUserRank(comms[rank], &dev));
    EXPECT(dev == rank, "ncclCommUserRank of comms[%d] is %d", rank, dev);
    CHECK(ncclCommCount(comms[rank], &count));
    EXPECT(count == n, "ncclCommCount is %d, not %d", count, n);
    CHECK(ncclCommCuDevice(comms[rank], &dev));
    EXPECT(dev == device_of(rank), "ncclCommCuDevice of comms[%d] is %d", rank, dev);
  }
  for (c = 0; c < N_COLLS; c++)
    for (ti = 0; ti < n_types; ti++)
      for (oi = 0; oi < 5; oi++) {
        int reduces = c == ALLREDUCE || c == REDUCE || c == REDUCESCATTER;
        if (!reduces && oi > 0) continue;
        for (ci = 0; ci < 3; ci++)
          for (ip = 0; ip < 2; ip++) {
            int root = (c == REDUCE || c == BROADCAST || c == BCAST) ? (int)((ci + 1) % n) : 0;
            if (c == BCAST && ip == 0) continue;    /* ncclBcast is in place only */
            if (c == ALLTOALL && ip == 1) continue; /* NCCL defines no in-place all-to-all */
            run_one(comms, streams, n, (coll_t)c, types[ti], ops[oi], counts[ci], ip, root);
            calls++;
          }
      }
  for (rank = 0; rank < n; rank++) {
    CHECK(ncclCommDestroy(comms[rank]));
    free_stream(streams[rank]);
  }
  printf("ok   matrix over %d ranks: %d collectives\n", n, calls);
}

/* ---- groups: a send/recv ring, PreMulSum, simulation ------------------------------ */

static void ring_and_premul(int n) {
  ncclComm_t comms[8];
  cudaStream_t streams[8];
  buf_t buf[8], got[8];
  ncclRedOp_t premul[8];
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  const size_t count = 333;
  size_t i;
  int r, devs[8] = {0};
  devices(devs, n);
  CHECK(ncclCommInitAll(comms, n, devs));
  for (r = 0; r < n; r++) {
    streams[r] = new_stream(r);
    buf[r] = buf_new(r, count * sizeof(float));
    got[r] = buf_new(r, count * sizeof(float));
    for (i = 0; i < count; i++) ((float*)buf[r].h)[i] = (float)(r * 1000 + i);
    push(&buf[r]);
  }
  /* Every rank sends to the next and receives from the previous, all in one group. */
  CHECK(ncclGroupStart());
  for (r = 0; r < n; r++) {
    CHECK(ncclSend(buf[r].d, count, ncclFloat, (r + 1) % n, comms[r], streams[r]));
    CHECK(ncclRecv(got[r].d, count, ncclFloat, (r + n - 1) % n, comms[r], streams[r]));
  }
  CHECK(ncclGroupEnd());
  for (r = 0; r < n; r++) {
    sync_stream(streams[r]);
    pull(&got[r]);
    for (i = 0; i < count; i++) {
      float g = ((float*)got[r].h)[i];
      EXPECT(g == (float)(((r + n - 1) % n) * 1000 + i), "ring: rank %d element %zu is %g", r, i, g);
    }
  }
  /* Each rank to itself (a copy, NCCL's send/recv to self), beside a ring step. */
  CHECK(ncclGroupStart());
  for (r = 0; r < n; r++) {
    CHECK(ncclSend(buf[r].d, count, ncclFloat, r, comms[r], streams[r]));
    CHECK(ncclRecv(got[r].d, count, ncclFloat, r, comms[r], streams[r]));
  }
  CHECK(ncclGroupEnd());
  for (r = 0; r < n; r++) {
    sync_stream(streams[r]);
    pull(&got[r]);
    for (i = 0; i < count; i++) {
      float g = ((float*)got[r].h)[i];
      EXPECT(g == (float)(r * 1000 + i), "send to self: rank %d element %zu is %g", r, i, g);
    }
  }
  /* PreMulSum: each input times the rank's scalar (2), then summed. */
  for (r = 0; r < n; r++) {
    float two = 2.0f;
    CHECK(ncclRedOpCreatePreMulSum(&premul[r], &two, ncclFloat, ncclScalarHostImmediate, comms[r]));
    EXPECT(premul[r] >= ncclNumOps, "a PreMulSum op is %d, a built-in op's value", (int)premul[r]);
  }
  CHECK(ncclGroupStart());
  for (r = 0; r < n; r++)
    CHECK(ncclAllReduce(buf[r].d, got[r].d, count, ncclFloat, premul[r], comms[r], streams[r]));
  CHECK(ncclGroupEnd());
  for (r = 0; r < n; r++) {
    sync_stream(streams[r]);
    pull(&got[r]);
    for (i = 0; i < count; i++) {
      float want = 0, g = ((float*)got[r].h)[i];
      int q;
      for (q = 0; q < n; q++) want += 2.0f * (float)(q * 1000 + i);
      EXPECT(g == want, "premulsum: rank %d element %zu is %g, expected %g", r, i, g, want);
    }
  }
  for (r = 0; r < n; r++) CHECK(ncclRedOpDestroy(premul[r], comms[r]));
  /* A simulated group runs nothing. */
  for (r = 0; r < n; r++) {
    ((float*)got[r].h)[0] = -1;
    push(&got[r]);
  }
  CHECK(ncclGroupStart());
  for (r = 0; r < n; r++)
    CHECK(ncclAllReduce(buf[r].d, got[r].d, count, ncclFloat, ncclSum, comms[r], streams[r]));
  CHECK(ncclGroupSimulateEnd(&sim));
  for (r = 0; r < n; r++) {
    sync_stream(streams[r]);
    pull(&got[r]);
    EXPECT(((float*)got[r].h)[0] == -1, "ncclGroupSimulateEnd ran the group");
  }
  for (r = 0; r < n; r++) {
    CHECK(ncclCommFinalize(comms[r]));
    CHECK(ncclCommDestroy(comms[r]));
    buf_free(&buf[r]);
    buf_free(&got[r]);
    free_stream(streams[r]);
  }
  printf("ok   send/recv ring, PreMulSum and a simulated group over %d ranks\n", n);
}

/* ---- ranks as threads ------------------------------------------------------------- */

typedef struct {
  ncclUniqueId id;
  int rank, n, nonblocking;
  pthread_barrier_t* barrier;
} rank_arg_t;

static ncclComm_t init_rank(const rank_arg_t* a) {
  ncclComm_t comm = NULL;
  use_device(a->rank);
  if (a->nonblocking) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclResult_t rc, state = ncclInProgress;
    config.blocking = 0;
    rc = ncclCommInitRankConfig(&comm, a->n, a->id, a->rank, &config);
    EXPECT(rc == ncclInProgress || rc == ncclSuccess, "non-blocking init returned %d", (int)rc);
    while (state == ncclInProgress) CHECK(ncclCommGetAsyncError(comm, &state));
    EXPECT(state == ncclSuccess, "non-blocking init ended in %d: %s", (int)state, ncclGetLastError(comm));
  } else {
    CHECK(ncclCommInitRank(&comm, a->n, a->id, a->rank));
  }
  return comm;
}

/* An all-reduce of 5 doubles (x[i] = rank + i) on `comm`; the result's host image. */
static void allreduce5(ncclComm_t comm, int rank, ncclRedOp_t op, double* out) {
  buf_t x = buf_new(rank, 5 * sizeof(double)), y = buf_new(rank, 5 * sizeof(double));
  cudaStream_t st = new_stream(rank);
  int i;
  for (i = 0; i < 5; i++) ((double*)x.h)[i] = rank + i;
  push(&x);
  CHECK(ncclAllReduce(x.d, y.d, 5, ncclDouble, op, comm, st));
  sync_stream(st);
  pull(&y);
  memcpy(out, y.h, 5 * sizeof(double));
  buf_free(&x);
  buf_free(&y);
  free_stream(st);
}

static void* thread_rank(void* p) {
  const rank_arg_t* a = p;
  ncclComm_t comm = init_rank(a), sub = NULL, solo = NULL;
  double y[5];
  int i, r, n, q;
  allreduce5(comm, a->rank, ncclMax, y);
  for (i = 0; i < 5; i++) EXPECT(y[i] == a->n - 1 + i, "thread allreduce: %g", y[i]);
  /* Split: all in one color ranked by descending key; then each alone. */
  CHECK(ncclCommSplit(comm, 7, a->n - a->rank, &sub, NULL));
  CHECK(ncclCommUserRank(sub, &r));
  CHECK(ncclCommCount(sub, &n));
  EXPECT(r == a->n - 1 - a->rank && n == a->n, "split: rank %d of %d is rank %d of %d", a->rank, a->n, r, n);
  CHECK(ncclCommCuDevice(sub, &q));
  EXPECT(q == device_of(a->rank), "a split communicator is on device %d", q);
  allreduce5(sub, a->rank, ncclSum, y);
  for (i = 0; i < 5; i++) EXPECT(y[i] == a->n * (a->n - 1) / 2 + a->n * i, "split allreduce: %g", y[i]);
  CHECK(ncclCommSplit(comm, a->rank, 0, &solo, NULL));
  CHECK(ncclCommCount(solo, &n));
  EXPECT(n == 1, "a split of one color per rank has %d ranks", n);
  CHECK(ncclCommDestroy(sub));
  /* Rank 0 opts out: it gets no communicator, the others one without it. */
  CHECK(ncclCommSplit(comm, a->rank == 0 ? NCCL_SPLIT_NOCOLOR : 1, 0, &sub, NULL));
  if (a->rank == 0) {
    EXPECT(sub == NULL, "NCCL_SPLIT_NOCOLOR got a communicator");
  } else {
    CHECK(ncclCommCount(sub, &n));
    CHECK(ncclCommUserRank(sub, &r));
    EXPECT(n == a->n - 1 && r == a->rank - 1, "split without rank 0: rank %d of %d", r, n);
    CHECK(ncclCommDestroy(sub));
  }
  CHECK(ncclCommDestroy(solo));
  CHECK(ncclCommDestroy(comm));
  return NULL;
}

static void ranks_as_threads(int n) {
  pthread_t t[8];
  rank_arg_t a[8];
  ncclUniqueId id;
  int r;
  CHECK(ncclGetUniqueId(&id));
  for (r = 0; r < n; r++) {
    a[r].id = id;
    a[r].rank = r;
    a[r].n = n;
    a[r].nonblocking = r % 2;
    pthread_create(&t[r], NULL, thread_rank, &a[r]);
  }
  for (r = 0; r < n; r++) pthread_join(t[r], NULL);
  printf("ok   %d ranks as threads (ncclCommInitRank, a non-blocking config, ncclCommSplit)\n", n);
}

/* Several ranks made by one thread: blocking inits inside a group join at its end. */
static void ranks_of_one_thread(int n) {
  ncclComm_t comms[8];
  cudaStream_t streams[8];
  buf_t v[8], out[8];
  ncclUniqueId id;
  int r;
  CHECK(ncclGetUniqueId(&id));
  CHECK(ncclGroupStart());
  for (r = 0; r < n; r++) {
    use_device(r);
    CHECK(ncclCommInitRank(&comms[r], n, id, r));
  }
  CHECK(ncclGroupEnd());
  for (r = 0; r < n; r++) {
    streams[r] = new_stream(r);
    v[r] = buf_new(r, sizeof(int));
    out[r] = buf_new(r, sizeof(int));
    *(int*)v[r].h = r + 1;
    push(&v[r]);
  }
  CHECK(ncclGroupStart());
  for (r = 0; r < n; r++) CHECK(ncclAllReduce(v[r].d, out[r].d, 1, ncclInt, ncclSum, comms[r], streams[r]));
  CHECK(ncclGroupEnd());
  for (r = 0; r < n; r++) {
    sync_stream(streams[r]);
    pull(&out[r]);
    EXPECT(*(int*)out[r].h == n * (n + 1) / 2, "one-thread ranks: %d", *(int*)out[r].h);
    CHECK(ncclCommDestroy(comms[r]));
    buf_free(&v[r]);
    buf_free(&out[r]);
    free_stream(streams[r]);
  }
  printf("ok   %d ranks made by one thread inside a group\n", n);
}

/* ---- ranks as processes ----------------------------------------------------------- */

static void rank_process(ncclUniqueId id, int r, int n) {
  ncclComm_t comm;
  cudaStream_t st;
  buf_t x, y;
  int i, q;
  use_device(r);
  CHECK(ncclCommInitRank(&comm, n, id, r));
  st = new_stream(r);
  x = buf_new(r, 100 * sizeof(float));
  y = buf_new(r, 100 * n * sizeof(float));
  for (i = 0; i < 100; i++) ((float*)x.h)[i] = (float)(r * 100 + i);
  push(&x);
  CHECK(ncclAllGather(x.d, y.d, 100, ncclFloat, comm, st));
  sync_stream(st);
  pull(&y);
  for (q = 0; q < n; q++)
    for (i = 0; i < 100; i++) EXPECT(((float*)y.h)[q * 100 + i] == (float)(q * 100 + i), "process allgather");
  CHECK(ncclGroupStart());
  CHECK(ncclSend(x.d, 100, ncclFloat, (r + 1) % n, comm, st));
  CHECK(ncclRecv(y.d, 100, ncclFloat, (r + n - 1) % n, comm, st));
  CHECK(ncclGroupEnd());
  sync_stream(st);
  pull(&y);
  for (i = 0; i < 100; i++) EXPECT(((float*)y.h)[i] == (float)(((r + n - 1) % n) * 100 + i), "process ring");
  CHECK(ncclCommDestroy(comm));
  buf_free(&x);
  buf_free(&y);
  free_stream(st);
}

static void ranks_as_processes(int n) {
  ncclUniqueId id;
  pid_t pids[8];
  int r, status, failed = 0;
  CHECK(ncclGetUniqueId(&id));
  fflush(stdout);
  for (r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      rank_process(id, r, n);
      _exit(0);
    }
  }
  for (r = 0; r < n; r++) {
    waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  EXPECT(!failed, "a rank process failed");
  printf("ok   %d ranks as processes\n", n);
}

/* ---- a peer that aborts ----------------------------------------------------------- */

static void* aborting_rank(void* p) {
  const rank_arg_t* a = p;
  ncclComm_t comm = init_rank(a);
  if (a->rank == 1) {
    usleep(300 * 1000);
    CHECK(ncclCommAbort(comm));
  } else {
    buf_t x = buf_new(0, 1024 * sizeof(float));
    cudaStream_t st = new_stream(0);
    ncclResult_t rc = ncclAllReduce(x.d, x.d, 1024, ncclFloat, ncclSum, comm, st), state = ncclSuccess;
    if (on_gpu && rc == ncclSuccess) {
      /* Enqueued: the failure shows in ncclCommGetAsyncError once the kernel gives up. */
      int waited;
      for (waited = 0; waited < 120000 && state == ncclSuccess; waited += 10) {
        CHECK(ncclCommGetAsyncError(comm, &state));
        usleep(10 * 1000);
      }
    } else {
      EXPECT(rc == ncclRemoteError, "an allreduce whose peer aborted returned %d, not ncclRemoteError", (int)rc);
      EXPECT(strlen(ncclGetLastError(comm)) > 0, "no message after a peer's abort");
      CHECK(ncclCommGetAsyncError(comm, &state));
    }
    EXPECT(state == ncclRemoteError, "ncclCommGetAsyncError says %d after a peer's abort", (int)state);
    rc = ncclAllReduce(x.d, x.d, 1024, ncclFloat, ncclSum, comm, st);
    EXPECT(rc == ncclRemoteError, "a failed communicator accepted another call (%d)", (int)rc);
    printf("     rank 0 saw: %s\n", ncclGetLastError(comm));
    CHECK(ncclCommAbort(comm));
    if (!on_gpu) {
      buf_free(&x);
      free_stream(st);
    }
  }
  return NULL;
}

static void peer_abort(void) {
  pthread_t t[2];
  rank_arg_t a[2];
  ncclUniqueId id;
  int r;
  CHECK(ncclGetUniqueId(&id));
  for (r = 0; r < 2; r++) {
    a[r].id = id;
    a[r].rank = r;
    a[r].n = 2;
    a[r].nonblocking = 0;
    pthread_create(&t[r], NULL, aborting_rank, &a[r]);
  }
  for (r = 0; r < 2; r++) pthread_join(t[r], NULL);
  printf("ok   a peer's abort is ncclRemoteError, through the call and ncclCommGetAsyncError\n");
}

/* ---- forwarding ------------------------------------------------------------------- */

/* An int all-reduce over one-thread communicators (rank r gives r + 1): checks the sum. */
static void int_allreduce(ncclComm_t* comms, int n, const char* what) {
  buf_t v[8];
  cudaStream_t st[8];
  int r;
  for (r = 0; r < n; r++) {
    st[r] = new_stream(r);
    v[r] = buf_new(r, sizeof(int));
    *(int*)v[r].h = r + 1;
    push(&v[r]);
  }
  CHECK(ncclGroupStart());
  for (r = 0; r < n; r++) CHECK(ncclAllReduce(v[r].d, v[r].d, 1, ncclInt, ncclSum, comms[r], st[r]));
  CHECK(ncclGroupEnd());
  for (r = 0; r < n; r++) {
    sync_stream(st[r]);
    pull(&v[r]);
    EXPECT(*(int*)v[r].h == n * (n + 1) / 2, "%s: rank %d has %d", what, r, *(int*)v[r].h);
    buf_free(&v[r]);
    free_stream(st[r]);
  }
}

static void forward_without_nccl(void) {
  ncclComm_t comms[2];
  int r, devs[2] = {0};
  buf_t x = buf_new(0, 64);
  ncclResult_t rc;
  devices(devs, 2);
  CHECK(ncclCommInitAll(comms, 2, devs));
  rc = ncclGather(x.d, x.d, 1, ncclInt, 0, comms[0], NULL);
  EXPECT(rc == ncclInvalidUsage, "ncclGather without a real NCCL returned %d", (int)rc);
  EXPECT(strstr(ncclGetLastError(comms[0]), "BRAID_NCCL_LIB") != NULL, "the message does not say how: %s",
         ncclGetLastError(comms[0]));
  rc = ncclAllReduce(x.d, x.d, 1, ncclFloat8e4m3, ncclSum, comms[0], NULL);
  EXPECT(rc == ncclInvalidUsage, "an fp8 sum without a real NCCL returned %d", (int)rc);
  /* Braid's own calls are unaffected. */
  int_allreduce(comms, 2, "allreduce after a refused forward");
  for (r = 0; r < 2; r++) CHECK(ncclCommDestroy(comms[r]));
  buf_free(&x);
  printf("ok   without a real NCCL, a forwarded call is ncclInvalidUsage with a message\n");
}

/* On GPUs, with BRAID_NCCL_LIB naming NCCL: a gather of one rank is served by it; over
 * two ranks it is served where NCCL accepts the GPUs (one each) and otherwise fails
 * (NCCL refuses two ranks on one GPU) with Braid's communicator unaffected. */
static void forward_real(void) {
  ncclComm_t comms[2];
  int r, devs[2] = {0}, two_gpus = device_of(1) != device_of(0);
  buf_t x[2], all[2];
  cudaStream_t st[2];
  ncclResult_t rc = ncclSuccess;
  devices(devs, 2);
  CHECK(ncclCommInitAll(comms, 1, devs));
  x[0] = buf_new(0, sizeof(int));
  all[0] = buf_new(0, sizeof(int));
  st[0] = new_stream(0);
  *(int*)x[0].h = 42;
  push(&x[0]);
  CHECK(ncclGather(x[0].d, all[0].d, 1, ncclInt, 0, comms[0], st[0]));
  sync_stream(st[0]);
  pull(&all[0]);
  EXPECT(*(int*)all[0].h == 42, "a forwarded gather of one rank gave %d", *(int*)all[0].h);
  CHECK(ncclCommDestroy(comms[0]));
  CHECK(ncclCommInitAll(comms, 2, devs));
  for (r = 1; r < 2; r++) {
    x[r] = buf_new(r, sizeof(int));
    all[r] = buf_new(r, 2 * sizeof(int));
    st[r] = new_stream(r);
    *(int*)x[r].h = 42 + r;
    push(&x[r]);
  }
  buf_free(&all[0]);
  all[0] = buf_new(0, 2 * sizeof(int));
  CHECK(ncclGroupStart());
  for (r = 0; r < 2; r++) ncclGather(x[r].d, all[r].d, 1, ncclInt, 0, comms[r], st[r]);
  rc = ncclGroupEnd();
  if (two_gpus) {
    EXPECT(rc == ncclSuccess, "a forwarded gather over two GPUs returned %d: %s", (int)rc, ncclGetLastError(NULL));
    sync_stream(st[0]);
    pull(&all[0]);
    EXPECT(((int*)all[0].h)[0] == 42 && ((int*)all[0].h)[1] == 43, "forwarded gather over two GPUs");
  } else {
    EXPECT(rc != ncclSuccess, "NCCL accepted two ranks on one GPU");
    printf("     two ranks on one GPU: %s\n", ncclGetLastError(NULL));
  }
  int_allreduce(comms, 2, "allreduce beside a forwarded gather");
  for (r = 0; r < 2; r++) {
    CHECK(ncclCommDestroy(comms[r]));
    buf_free(&x[r]);
    buf_free(&all[r]);
    free_stream(st[r]);
  }
  printf("ok   forwarding to the real NCCL on GPUs (%s)\n", two_gpus ? "two GPUs" : "one GPU");
}

/* BRAID_NCCL_LIB names Braid's own library: refused with a message. */
static void forward_to_self(void) {
  ncclComm_t comms[2];
  int v[2] = {1, 2}, out[2];
  ncclResult_t rc;
  CHECK(ncclCommInitAll(comms, 2, NULL));
  rc = ncclScatter(v, out, 1, ncclInt, 0, comms[0], NULL);
  EXPECT(rc == ncclInvalidUsage && strstr(ncclGetLastError(comms[0]), "Braid's own") != NULL,
         "BRAID_NCCL_LIB naming Braid: %d %s", (int)rc, ncclGetLastError(comms[0]));
  CHECK(ncclCommDestroy(comms[0]));
  CHECK(ncclCommDestroy(comms[1]));
  printf("ok   BRAID_NCCL_LIB naming Braid's own library is refused\n");
}

static void forward_init_all(int n) {
  ncclComm_t comms[8];
  int send[8][8], gathered[8 * 3], scattered[8][3], sum[8], r, i;
  CHECK(ncclCommInitAll(comms, n, NULL));
  for (r = 0; r < n; r++)
    for (i = 0; i < 8; i++) send[r][i] = r * 10 + i;
  /* Braid's allreduce and the forwarded gather and scatter in one group. */
  CHECK(ncclGroupStart());
  for (r = 0; r < n; r++) {
    CHECK(ncclGather(send[r], gathered, 3, ncclInt, 1, comms[r], NULL));
    CHECK(ncclScatter(send[r], scattered[r], 1, ncclInt32, 0, comms[r], NULL));
    CHECK(ncclAllReduce(&send[r][0], &sum[r], 1, ncclInt, ncclSum, comms[r], NULL));
  }
  CHECK(ncclGroupEnd());
  for (r = 0; r < n; r++) {
    for (i = 0; i < 3; i++) EXPECT(gathered[r * 3 + i] == r * 10 + i, "forwarded gather: %d", gathered[r * 3 + i]);
    EXPECT(scattered[r][0] == send[0][r], "forwarded scatter: rank %d got %d", r, scattered[r][0]);
    EXPECT(sum[r] == 10 * n * (n - 1) / 2, "allreduce beside forwarded calls: %d", sum[r]);
  }
  for (r = 0; r < n; r++) CHECK(ncclCommDestroy(comms[r]));
  printf("ok   gather and scatter forwarded to the real NCCL, %d ranks of one thread\n", n);
}

static pthread_barrier_t forward_barrier;
static ncclUniqueId second_id;

static void* forwarding_rank(void* p) {
  const rank_arg_t* a = p;
  ncclComm_t comm = init_rank(a), late;
  int x = a->rank + 1, all[8], sum = 0;
  ncclResult_t rc;
  /* Every rank reaches the gather: the real communicator is made then. */
  CHECK(ncclGather(&x, all, 1, ncclInt, 0, comm, NULL));
  if (a->rank == 0) EXPECT(all[0] == 1 && all[1] == 2, "forwarded gather of threads: %d %d", all[0], all[1]);
  CHECK(ncclCommDestroy(comm));
  /* Only rank 0 reaches a forwarded call: an error after BRAID_TIMEOUT, no hang, and
   * Braid's own communicator still works. */
  {
    rank_arg_t b = *a;
    b.id = second_id;
    late = init_rank(&b);
  }
  if (a->rank == 0) {
    rc = ncclGather(&x, all, 1, ncclInt, 0, late, NULL);
    EXPECT(rc == ncclRemoteError, "a forwarded call no peer reached returned %d", (int)rc);
    printf("     rank 0 saw: %s\n", ncclGetLastError(late));
    rc = ncclGather(&x, all, 1, ncclInt, 0, late, NULL);
    EXPECT(rc == ncclRemoteError, "the second forwarded call returned %d", (int)rc);
  }
  pthread_barrier_wait(&forward_barrier);
  CHECK(ncclAllReduce(&x, &sum, 1, ncclInt, ncclSum, late, NULL));
  EXPECT(sum == 3, "allreduce after a failed forward: %d", sum);
  CHECK(ncclCommDestroy(late));
  return NULL;
}

static void forward_threads(void) {
  pthread_t t[2];
  rank_arg_t a[2];
  ncclUniqueId id;
  int r;
  CHECK(ncclGetUniqueId(&id));
  /* Each thread makes two communicators; the second's id is made up front. */
  CHECK(ncclGetUniqueId(&second_id));
  pthread_barrier_init(&forward_barrier, NULL, 2);
  for (r = 0; r < 2; r++) {
    a[r].id = id;
    a[r].rank = r;
    a[r].n = 2;
    a[r].nonblocking = r;
  }
  for (r = 0; r < 2; r++) pthread_create(&t[r], NULL, forwarding_rank, &a[r]);
  for (r = 0; r < 2; r++) pthread_join(t[r], NULL);
  printf("ok   forwarding from ranks as threads; a forwarded call no peer reaches fails after BRAID_TIMEOUT\n");
}

int main(int argc, char** argv) {
  const char* section = argc > 1 ? argv[1] : "all";
#define SECTION(name) (strcmp(section, "all") == 0 || strcmp(section, name) == 0)
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (SECTION("processes")) ranks_as_processes(2), ranks_as_processes(3);
  if (SECTION("matrix")) matrix(2), matrix(3), matrix(4);
  if (SECTION("groups")) ring_and_premul(2), ring_and_premul(4);
  if (SECTION("threads")) ranks_as_threads(2), ranks_as_threads(3), ranks_of_one_thread(3);
  if (SECTION("abort")) peer_abort();
  if (SECTION("no-forward")) forward_without_nccl();
  if (on_gpu && strcmp(section, "forward-real") == 0) forward_real();
  if (strcmp(section, "forward-self") == 0) forward_to_self();
  if (!on_gpu && strcmp(section, "forward") == 0) forward_init_all(3), forward_threads();
  printf("done\n");
  return 0;
}
