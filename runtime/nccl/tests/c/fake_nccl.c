/* A stand-in for the real NCCL, for testing Braid's forwarding on machines without a
 * GPU: the functions Braid's forwarding calls, with NCCL's names and signatures, on host
 * memory, for ranks that are threads of one process. It exports the same names as
 * Braid's library, so a forwarded call that landed back in Braid instead of here would
 * show (Braid cannot gather; this library can).
 *
 * ncclCommInitRankConfig honours blocking = 0 as NCCL does: it returns ncclInProgress
 * and ncclCommGetAsyncError says ncclInProgress until every rank has joined. Calls
 * inside a group are kept and run at ncclGroupEnd, each communicator's on a thread of
 * its own. Every call it serves appends a line to the file FAKE_NCCL_LOG names. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int ncclResult_t;
typedef struct { char internal[128]; } ncclUniqueId;

enum { ok = 0, invalid_argument = 4, invalid_usage = 5, in_progress = 7 };
enum { max_worlds = 64, max_ranks = 16, max_ops = 64 };

typedef struct {
  char id[128];
  int n, joined;
  int waiting, generation;
  const char* send[max_ranks];
  char* recv[max_ranks];
  pthread_mutex_t mu;
  pthread_cond_t cv;
} world_t;

struct comm {
  world_t* w;
  int rank;
};
typedef struct comm* comm_t;

static world_t worlds[max_worlds];
static int n_worlds = 0;
static pthread_mutex_t worlds_mu = PTHREAD_MUTEX_INITIALIZER;
static int next_id = 1;

static void log_line(const char* fmt, int a, int b) {
  const char* path = getenv("FAKE_NCCL_LOG");
  FILE* f;
  if (path == NULL) return;
  f = fopen(path, "a");
  if (f == NULL) return;
  fprintf(f, fmt, a, b);
  fputc('\n', f);
  fclose(f);
}

static world_t* world_of(const char* id, int n) {
  world_t* w = NULL;
  int i;
  pthread_mutex_lock(&worlds_mu);
  for (i = 0; i < n_worlds; i++)
    if (memcmp(worlds[i].id, id, 128) == 0) w = &worlds[i];
  if (w == NULL && n_worlds < max_worlds) {
    w = &worlds[n_worlds++];
    memcpy(w->id, id, 128);
    w->n = n;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
  }
  pthread_mutex_unlock(&worlds_mu);
  return w;
}

static void barrier(world_t* w) {
  int gen;
  pthread_mutex_lock(&w->mu);
  gen = w->generation;
  if (++w->waiting == w->n) {
    w->waiting = 0;
    w->generation++;
    pthread_cond_broadcast(&w->cv);
  } else {
    while (gen == w->generation) pthread_cond_wait(&w->cv, &w->mu);
  }
  pthread_mutex_unlock(&w->mu);
}

static size_t elem_size(int dtype) {
  static const size_t sizes[12] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return dtype >= 0 && dtype < 12 ? sizes[dtype] : 0;
}

ncclResult_t ncclGetVersion(int* v) {
  *v = 29999;
  return ok;
}

const char* ncclGetLastError(comm_t c) {
  (void)c;
  return "the fake NCCL's last error";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  memset(id, 0, sizeof *id);
  pthread_mutex_lock(&worlds_mu);
  snprintf(id->internal, sizeof id->internal, "fake-nccl-%d", next_id++);
  pthread_mutex_unlock(&worlds_mu);
  return ok;
}

/* The config's blocking field sits at byte 16 of ncclConfig_t. */
ncclResult_t ncclCommInitRankConfig(comm_t* out, int n, ncclUniqueId id, int rank, void* config) {
  int blocking = 1;
  comm_t c;
  if (n < 1 || n > max_ranks || rank < 0 || rank >= n) return invalid_argument;
  if (config != NULL) memcpy(&blocking, (char*)config + 16, sizeof blocking);
  c = calloc(1, sizeof *c);
  c->w = world_of(id.internal, n);
  c->rank = rank;
  pthread_mutex_lock(&c->w->mu);
  c->w->joined++;
  pthread_cond_broadcast(&c->w->cv);
  if (blocking)
    while (c->w->joined < n) pthread_cond_wait(&c->w->cv, &c->w->mu);
  pthread_mutex_unlock(&c->w->mu);
  *out = c;
  log_line("init rank %d of %d", rank, n);
  return blocking ? ok : in_progress;
}

ncclResult_t ncclCommInitAll(comm_t* comms, int n, const int* devs) {
  ncclUniqueId id;
  int i;
  (void)devs;
  ncclGetUniqueId(&id);
  for (i = 0; i < n; i++) {
    comms[i] = calloc(1, sizeof(struct comm));
    comms[i]->w = world_of(id.internal, n);
    comms[i]->rank = i;
  }
  comms[0]->w->joined = n;
  log_line("init all %d ranks, first %d", n, 0);
  return ok;
}

ncclResult_t ncclCommGetAsyncError(comm_t c, ncclResult_t* state) {
  pthread_mutex_lock(&c->w->mu);
  *state = c->w->joined < c->w->n ? in_progress : ok;
  pthread_mutex_unlock(&c->w->mu);
  return ok;
}

ncclResult_t ncclCommDestroy(comm_t c) {
  free(c);
  return ok;
}

ncclResult_t ncclCommAbort(comm_t c) {
  log_line("abort rank %d of %d", c->rank, c->w->n);
  free(c);
  return ok;
}

/* Calls kept inside a group. */
typedef struct {
  int gather;
  const char* send;
  char* recv;
  size_t bytes;
  int root;
  comm_t comm;
} op_t;

static __thread int depth = 0;
static __thread op_t ops[max_ops];
static __thread int n_ops = 0;

static void run_op(const op_t* op) {
  world_t* w = op->comm->w;
  int r = op->comm->rank, i;
  w->send[r] = op->send;
  w->recv[r] = op->recv;
  barrier(w);
  if (op->gather && r == op->root)
    for (i = 0; i < w->n; i++) memcpy(op->recv + i * op->bytes, w->send[i], op->bytes);
  if (!op->gather) memcpy(op->recv, w->send[op->root] + r * op->bytes, op->bytes);
  barrier(w);
  log_line(op->gather ? "gather rank %d root %d" : "scatter rank %d root %d", r, op->root);
}

static void* run_on_thread(void* arg) {
  run_op(arg);
  return NULL;
}

static ncclResult_t submit(int gather, const void* send, void* recv, size_t count, int dtype, int root,
                           comm_t c) {
  op_t op;
  if (elem_size(dtype) == 0 || c == NULL || root < 0 || root >= c->w->n) return invalid_argument;
  op.gather = gather;
  op.send = send;
  op.recv = recv;
  op.bytes = count * elem_size(dtype);
  op.root = root;
  op.comm = c;
  if (depth > 0) {
    if (n_ops == max_ops) return invalid_usage;
    ops[n_ops++] = op;
  } else {
    run_op(&op);
  }
  return ok;
}

ncclResult_t ncclGather(const void* send, void* recv, size_t count, int dtype, int root, comm_t c, void* s) {
  (void)s;
  return submit(1, send, recv, count, dtype, root, c);
}

ncclResult_t ncclScatter(const void* send, void* recv, size_t count, int dtype, int root, comm_t c, void* s) {
  (void)s;
  return submit(0, send, recv, count, dtype, root, c);
}

ncclResult_t ncclGroupStart(void) {
  depth++;
  return ok;
}

/* Runs the group's calls: each on a thread of its own, one call per communicator at a
 * time (calls of one communicator run in order, in rounds). */
ncclResult_t ncclGroupEnd(void) {
  pthread_t threads[max_ops];
  int done[max_ops] = {0};
  int remaining, i, j, k;
  if (depth == 0) return invalid_usage;
  if (--depth > 0) return ok;
  remaining = n_ops;
  while (remaining > 0) {
    int batch[max_ops], nb = 0;
    for (i = 0; i < n_ops; i++) {
      int taken = 0;
      if (done[i]) continue;
      for (j = 0; j < nb; j++)
        if (ops[batch[j]].comm == ops[i].comm) taken = 1;
      if (!taken) batch[nb++] = i;
    }
    for (k = 0; k < nb; k++) pthread_create(&threads[k], NULL, run_on_thread, &ops[batch[k]]);
    for (k = 0; k < nb; k++) {
      pthread_join(threads[k], NULL);
      done[batch[k]] = 1;
      remaining--;
    }
  }
  n_ops = 0;
  return ok;
}
