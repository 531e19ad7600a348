/* NCCL 2.28's enum values and struct layouts, as the header of Braid's library spells
 * them: every line is a compile-time check (the values are NCCL 2.28.9's nccl.h). */
#include <stddef.h>
#include <stdio.h>

#include "nccl.h"

_Static_assert(NCCL_VERSION_CODE == 22809, "NCCL_VERSION_CODE");
_Static_assert(NCCL_UNIQUE_ID_BYTES == 128 && sizeof(ncclUniqueId) == 128, "ncclUniqueId");

_Static_assert(ncclSuccess == 0 && ncclUnhandledCudaError == 1 && ncclSystemError == 2 &&
                   ncclInternalError == 3 && ncclInvalidArgument == 4 && ncclInvalidUsage == 5 &&
                   ncclRemoteError == 6 && ncclInProgress == 7 && ncclNumResults == 8,
               "ncclResult_t");

_Static_assert(ncclInt8 == 0 && ncclChar == 0 && ncclUint8 == 1 && ncclInt32 == 2 && ncclInt == 2 &&
                   ncclUint32 == 3 && ncclInt64 == 4 && ncclUint64 == 5 && ncclFloat16 == 6 &&
                   ncclHalf == 6 && ncclFloat32 == 7 && ncclFloat == 7 && ncclFloat64 == 8 &&
                   ncclDouble == 8 && ncclBfloat16 == 9 && ncclFloat8e4m3 == 10 &&
                   ncclFloat8e5m2 == 11 && ncclNumTypes == 12,
               "ncclDataType_t");

_Static_assert(ncclSum == 0 && ncclProd == 1 && ncclMax == 2 && ncclMin == 3 && ncclAvg == 4 &&
                   ncclNumOps == 5 && ncclMaxRedOp == 0x7fffffff && sizeof(ncclRedOp_t) == 4,
               "ncclRedOp_t");

_Static_assert(ncclScalarDevice == 0 && ncclScalarHostImmediate == 1, "ncclScalarResidence_t");

_Static_assert(sizeof(ncclConfig_t) == 80, "ncclConfig_t size");
_Static_assert(offsetof(ncclConfig_t, size) == 0 && offsetof(ncclConfig_t, magic) == 8 &&
                   offsetof(ncclConfig_t, version) == 12 && offsetof(ncclConfig_t, blocking) == 16 &&
                   offsetof(ncclConfig_t, cgaClusterSize) == 20 && offsetof(ncclConfig_t, minCTAs) == 24 &&
                   offsetof(ncclConfig_t, maxCTAs) == 28 && offsetof(ncclConfig_t, netName) == 32 &&
                   offsetof(ncclConfig_t, splitShare) == 40 && offsetof(ncclConfig_t, trafficClass) == 44 &&
                   offsetof(ncclConfig_t, commName) == 48 && offsetof(ncclConfig_t, collnetEnable) == 56 &&
                   offsetof(ncclConfig_t, CTAPolicy) == 60 && offsetof(ncclConfig_t, shrinkShare) == 64 &&
                   offsetof(ncclConfig_t, nvlsCTAs) == 68 &&
                   offsetof(ncclConfig_t, nChannelsPerNetPeer) == 72 &&
                   offsetof(ncclConfig_t, nvlinkCentricSched) == 76,
               "ncclConfig_t fields");
_Static_assert(sizeof(ncclSimInfo_t) == 24 && offsetof(ncclSimInfo_t, estimatedTime) == 16, "ncclSimInfo_t");
_Static_assert(NCCL_SPLIT_NOCOLOR == -1 && NCCL_CONFIG_UNDEF_INT == (-2147483647 - 1), "constants");

int main(void) {
  /* The initializers fill the header NCCL checks. */
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  int version = 0;
  if (config.size != sizeof(ncclConfig_t) || config.magic != 0xcafebeef || config.version != 22809 ||
      config.blocking != NCCL_CONFIG_UNDEF_INT) {
    printf("NCCL_CONFIG_INITIALIZER is wrong\n");
    return 1;
  }
  if (sim.size != sizeof(ncclSimInfo_t) || sim.magic != 0x74685283 || sim.estimatedTime != -1.0f) {
    printf("NCCL_SIM_INFO_INITIALIZER is wrong\n");
    return 1;
  }
  if (ncclGetVersion(&version) != ncclSuccess) return 1;
  printf("ncclGetVersion %d\n", version);
  return 0;
}
