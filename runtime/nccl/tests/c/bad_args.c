/* Every function of the library, called with bad arguments (null pointers, a handle that
 * is not a communicator, a destroyed communicator, counts that overflow, an unknown data
 * type, a bad root or peer, unbalanced groups), on a machine that may have no GPU: each
 * call must return an error code and leave a message for ncclGetLastError; none may
 * crash or hang. Prints one line per call; exits 1 if any call succeeded or left no
 * message. */
#define _POSIX_C_SOURCE 200112L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"

static int failures = 0;
static int calls = 0;

static void expect_fail(const char* what, ncclResult_t rc, ncclComm_t comm) {
  const char* msg = ncclGetLastError(comm);
  calls++;
  if (rc == ncclSuccess) {
    printf("FAIL %s: succeeded\n", what);
    failures++;
  } else if (msg == NULL || msg[0] == 0) {
    printf("FAIL %s: code %d but no message\n", what, (int)rc);
    failures++;
  } else {
    printf("ok   %s -> %d (%s): %s\n", what, (int)rc, ncclGetErrorString(rc), msg);
  }
}

/* The team struct of NCCL's device API. */
typedef struct { int nRanks, rank, stride; } team_t;
extern team_t ncclTeamWorld(ncclComm_t);
extern team_t ncclTeamLsa(ncclComm_t);
extern team_t ncclTeamRail(ncclComm_t);
extern int ncclTeamRankToWorld(ncclComm_t, team_t, int);
extern int ncclTeamRankToLsa(ncclComm_t, team_t, int);
extern void ncclResetDebugInit(void);
extern void ncclResetDebugInitInternal(void);
extern int ncclLLA2ACalcSlots(int, int);
extern ncclResult_t ncclLsaBarrierCreateRequirement(team_t, int, void*, void*);
extern ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t, team_t, int, void*, void*);
extern ncclResult_t ncclLLA2ACreateRequirement(int, int, void*, void*);
extern ncclResult_t ncclDevCommCreate(ncclComm_t, const void*, void*);
extern ncclResult_t ncclDevCommDestroy(ncclComm_t, const void*);

static void every_call(const char* label, ncclComm_t c) {
  char what[160];
  int i;
  void* p = NULL;
  ncclWindow_t w;
  ncclRedOp_t op;
  float scalar = 2.0f, buf[4];
  ncclComm_t newcomm;
  ncclResult_t async;
#define TRY(name, call)                                 \
  do {                                                  \
    snprintf(what, sizeof what, "%s (%s)", name, label); \
    expect_fail(what, call, c);                         \
  } while (0)
  TRY("ncclCommFinalize", ncclCommFinalize(c));
  TRY("ncclCommRevoke", ncclCommRevoke(c, 0));
  TRY("ncclCommGetAsyncError", ncclCommGetAsyncError(c, &async));
  TRY("ncclCommCount", ncclCommCount(c, &i));
  TRY("ncclCommCuDevice", ncclCommCuDevice(c, &i));
  TRY("ncclCommUserRank", ncclCommUserRank(c, &i));
  TRY("ncclCommSplit", ncclCommSplit(c, 0, 0, &newcomm, NULL));
  TRY("ncclCommShrink", ncclCommShrink(c, NULL, 0, &newcomm, NULL, 0));
  TRY("ncclCommRegister", ncclCommRegister(c, buf, sizeof buf, &p));
  TRY("ncclCommDeregister", ncclCommDeregister(c, (void*)0x10));
  TRY("ncclCommWindowRegister", ncclCommWindowRegister(c, buf, sizeof buf, &w, 0));
  TRY("ncclCommWindowDeregister", ncclCommWindowDeregister(c, (ncclWindow_t)0x10));
  TRY("ncclRedOpCreatePreMulSum", ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, c));
  TRY("ncclRedOpDestroy", ncclRedOpDestroy((ncclRedOp_t)5, c));
  TRY("ncclAllReduce", ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, c, NULL));
  TRY("ncclReduce", ncclReduce(buf, buf, 4, ncclFloat, ncclSum, 0, c, NULL));
  TRY("ncclBroadcast", ncclBroadcast(buf, buf, 4, ncclFloat, 0, c, NULL));
  TRY("ncclBcast", ncclBcast(buf, 4, ncclFloat, 0, c, NULL));
  TRY("ncclAllGather", ncclAllGather(buf, buf, 1, ncclFloat, c, NULL));
  TRY("ncclReduceScatter", ncclReduceScatter(buf, buf, 1, ncclFloat, ncclSum, c, NULL));
  TRY("ncclAlltoAll", ncclAlltoAll(buf, buf, 1, ncclFloat, c, NULL));
  TRY("ncclGather", ncclGather(buf, buf, 1, ncclFloat, 0, c, NULL));
  TRY("ncclScatter", ncclScatter(buf, buf, 1, ncclFloat, 0, c, NULL));
  TRY("ncclSend", ncclSend(buf, 1, ncclFloat, 1, c, NULL));
  TRY("ncclRecv", ncclRecv(buf, 1, ncclFloat, 1, c, NULL));
  TRY("ncclDevCommCreate", ncclDevCommCreate(c, NULL, NULL));
  TRY("ncclDevCommDestroy", ncclDevCommDestroy(c, NULL));
  TRY("ncclGinBarrierCreateRequirement", ncclGinBarrierCreateRequirement(c, ncclTeamWorld(c), 1, NULL, NULL));
#undef TRY
}

int main(void) {
  ncclComm_t comm = NULL, comms[2];
  ncclUniqueId id;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  float buf[16];
  void* p = NULL;
  team_t team;

  /* Versions, ids, errors. */
  expect_fail("ncclGetVersion(NULL)", ncclGetVersion(NULL), NULL);
  expect_fail("ncclGetUniqueId(NULL)", ncclGetUniqueId(NULL), NULL);
  if (ncclGetErrorString((ncclResult_t)99) == NULL) {
    printf("FAIL ncclGetErrorString(99) is NULL\n");
    failures++;
  }

  /* Communicators that cannot be made. */
  memset(&id, 0, sizeof id);
  expect_fail("ncclCommInitRank(NULL comm)", ncclCommInitRank(NULL, 2, id, 0), NULL);
  expect_fail("ncclCommInitRank(garbage id)", ncclCommInitRank(&comm, 2, id, 0), NULL);
  expect_fail("ncclCommInitRank(rank 5 of 2)", ncclCommInitRank(&comm, 2, id, 5), NULL);
  expect_fail("ncclCommInitRank(0 ranks)", ncclCommInitRank(&comm, 0, id, 0), NULL);
  config.magic = 0;
  expect_fail("ncclCommInitRankConfig(uninitialised config)", ncclCommInitRankConfig(&comm, 2, id, 0, &config), NULL);
  expect_fail("ncclCommInitRankScalable(no ids)", ncclCommInitRankScalable(&comm, 2, 0, 0, NULL, NULL), NULL);
  expect_fail("ncclCommInitAll(NULL comms)", ncclCommInitAll(NULL, 2, NULL), NULL);
  expect_fail("ncclCommInitAll(0 devices)", ncclCommInitAll(comms, 0, NULL), NULL);
  {
    int bad[2] = {0, -3};
    expect_fail("ncclCommInitAll(negative device)", ncclCommInitAll(comms, 2, bad), NULL);
  }

  /* Memory. */
  expect_fail("ncclMemAlloc(NULL)", ncclMemAlloc(NULL, 8), NULL);
  expect_fail("ncclMemAlloc(0 bytes)", ncclMemAlloc(&p, 0), NULL);
  expect_fail("ncclMemFree(NULL)", ncclMemFree(NULL), NULL);
  expect_fail("ncclMemFree(not allocated)", ncclMemFree(buf), NULL);

  /* Groups. */
  expect_fail("ncclGroupEnd without start", ncclGroupEnd(), NULL);
  sim.magic = 1;
  if (ncclGroupStart() != ncclSuccess) {
    printf("FAIL ncclGroupStart\n");
    failures++;
  }
  expect_fail("ncclGroupSimulateEnd(uninitialised)", ncclGroupSimulateEnd(&sim), NULL);
  ncclGroupEnd();

  /* The device API. */
  team.nRanks = 1;
  team.rank = 0;
  team.stride = 1;
  expect_fail("ncclLsaBarrierCreateRequirement", ncclLsaBarrierCreateRequirement(team, 1, NULL, NULL), NULL);
  expect_fail("ncclLLA2ACreateRequirement", ncclLLA2ACreateRequirement(1, 1, NULL, NULL), NULL);
  if (ncclLLA2ACalcSlots(16, 4) != -1 || ncclTeamRankToWorld((ncclComm_t)0x1234, team, 0) != -1) {
    printf("FAIL the device API's int functions must say -1\n");
    failures++;
  }
  if (ncclTeamRankToLsa((ncclComm_t)0x1234, team, 0) != -1) {
    printf("FAIL ncclTeamRankToLsa of a bogus handle is not -1\n");
    failures++;
  }
  team = ncclTeamWorld((ncclComm_t)0x1234);
  if (team.nRanks != 0 || ncclTeamLsa(NULL).nRanks != 0 || ncclTeamRail(NULL).nRanks != 0) {
    printf("FAIL a team of a bogus handle has ranks\n");
    failures++;
  }
  /* Void functions: they must simply return. */
  ncclResetDebugInit();
  ncclResetDebugInitInternal();

  /* Every communicator call on handles that are not communicators. */
  every_call("NULL comm", NULL);
  every_call("bogus comm", (ncclComm_t)0x1234);

  /* A real communicator on the host backend, then destroyed. */
  setenv("BRAID_BACKEND", "host", 1);
  if (ncclCommInitAll(comms, 1, NULL) != ncclSuccess) {
    printf("FAIL ncclCommInitAll(1) on the host backend: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  comm = comms[0];
  expect_fail("ncclAllReduce(SIZE_MAX elements)", ncclAllReduce(buf, buf, SIZE_MAX, ncclFloat, ncclSum, comm, NULL), comm);
  expect_fail("ncclAllReduce(unknown dtype)", ncclAllReduce(buf, buf, 4, (ncclDataType_t)99, ncclSum, comm, NULL), comm);
  expect_fail("ncclAllReduce(fp8 sum)", ncclAllReduce(buf, buf, 4, ncclFloat8e4m3, ncclSum, comm, NULL), comm);
  expect_fail("ncclAllReduce(unknown op)", ncclAllReduce(buf, buf, 4, ncclFloat, (ncclRedOp_t)77, comm, NULL), comm);
  expect_fail("ncclAllReduce(NULL sendbuff)", ncclAllReduce(NULL, buf, 4, ncclFloat, ncclSum, comm, NULL), comm);
  expect_fail("ncclBroadcast(root 3 of 1)", ncclBroadcast(buf, buf, 4, ncclFloat, 3, comm, NULL), comm);
  expect_fail("ncclSend(to itself, no receive)", ncclSend(buf, 4, ncclFloat, 0, comm, NULL), comm);
  expect_fail("ncclCommDeregister(never registered)", ncclCommDeregister(comm, (void*)0x40), comm);
  expect_fail("ncclRedOpDestroy(never made)", ncclRedOpDestroy((ncclRedOp_t)9, comm), comm);
  expect_fail("ncclCommCount(NULL out)", ncclCommCount(comm, NULL), comm);
  if (ncclCommDestroy(comm) != ncclSuccess) {
    printf("FAIL ncclCommDestroy of a live communicator\n");
    failures++;
  }
  expect_fail("ncclCommDestroy(destroyed)", ncclCommDestroy(comm), NULL);
  expect_fail("ncclCommAbort(destroyed)", ncclCommAbort(comm), NULL);
  every_call("destroyed comm", comm);

  printf("%d calls, %d failures\n", calls, failures);
  return failures == 0 ? 0 : 1;
}
