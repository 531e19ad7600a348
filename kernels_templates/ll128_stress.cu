// The LL128 stress test (runtime/cuda/src/ll128.rs): does a warp's 128-byte line, stored
// with one vector instruction of eight threads, reach a reader on another SM (or GPU)
// whole? Writers store round after round into every line, each line's 120 data bytes a
// function of the round and the line and its last 8 bytes the round (LL128's flag), with
// the very instructions of the protocol (braid_prims.cuh: ll128_store, ll128_try). Readers
// load each line with the protocol's load until it shows the last round, and every time
// they see a new flag they check that the data belong to that round: a line seen with a
// new flag and old (or other) data is torn, and LL128 must not run on that link.
//
// `role` 0: blocks [0, wblocks) write and the rest read (one launch, one GPU); 1: every
// block writes (the writer's GPU); 2: every block reads (the reader's GPU, which holds
// `lines`). Plus 4: the control, whose writers store each line's flag first and its data
// with a second instruction, so that readers must see torn lines (the check works).
// Each reader warp polls all its lines in turn, every line once per pass, so that every
// line is watched while the writers write. `ctl` (in the reader's memory): [0] readers
// that started, [1] line observations with a new flag, [2] torn observations, [3] lines
// that never showed the last round within `timeout_ns`, [4] writers that gave up waiting
// for the readers within it, [5] (role 1) the readers to wait for.

typedef unsigned long long u64;
typedef unsigned int u32;

// Line groups (4 lines each) one reader warp watches at most: the host keeps `nlines`
// within reader warps x 4 x this.
#define BRAID_LL128_MAX_GROUPS 64

__device__ __forceinline__ u64 now_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ u64 word_of(u64 round, u64 line, u32 k) {
  u64 x = round * 0x9E3779B97F4A7C15ull ^ (line << 24) ^ (u64)k;
  x ^= x >> 29;
  return x * 0xBF58476D1CE4E5B9ull;
}

extern "C" __global__ void braid_ll128_stress(char* lines, u64 nlines, u64 rounds,
                                              u32 wblocks, u32 role, u64 timeout_ns,
                                              volatile u64* ctl) {
  const u64 start = now_ns();
  const bool split = (role & 4) != 0;
  role &= 3;
  const u32 lane = threadIdx.x % 32, sub = lane % 8;
  const bool writer = role == 1 || (role == 0 && blockIdx.x < wblocks);
  const u32 wfirst = role == 0 && !writer ? wblocks : 0;
  const u32 nblocks = role == 0 ? (writer ? wblocks : gridDim.x - wblocks) : gridDim.x;
  const u64 warps = (u64)nblocks * (blockDim.x / 32);
  const u64 warp = (u64)(blockIdx.x - wfirst) * (blockDim.x / 32) + threadIdx.x / 32;
  if (writer) {
    // Start with the readers, so that the two overlap (across GPUs the launches are
    // separate).
    const u32 readers = role == 0 ? gridDim.x - wblocks : 0;
    if (role == 1 || readers > 0) {
      const u64 want = role == 1 ? ctl[5] : readers;
      while (ctl[0] < want) {
        if (now_ns() - start > timeout_ns) {
          if (threadIdx.x == 0) atomicAdd((u64*)&ctl[4], 1ull);
          return;
        }
      }
    }
    for (u64 r = 1; r <= rounds; r++) {
      for (u64 base = warp * 4; base < nlines; base += warps * 4) {
        const u64 l = base + lane / 8;
        const bool active = l < nlines;
        const u64 a = word_of(r, l, 2 * sub);
        const u64 b = sub == 7 ? r : word_of(r, l, 2 * sub + 1);
        char* at = lines + 128 * l + 16 * sub;
        if (split) {
          if (active && sub == 7)
            asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(at), "l"(a), "l"(b)
                         : "memory");
          __syncwarp();
          __threadfence();
          if (active && sub != 7)
            asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(at), "l"(a), "l"(b)
                         : "memory");
        } else if (active) {
          asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(at), "l"(a), "l"(b)
                       : "memory");
        }
      }
    }
    return;
  }
  if (threadIdx.x == 0) {
    __threadfence_system();
    atomicAdd((u64*)&ctl[0], 1ull);
  }
  u64 reads = 0, torn = 0, stalled = 0;
  // This warp's groups: group g is lines [4 (warp + g warps), +4), this thread's line in
  // it the (lane / 8)-th. Per group: the last flag seen, and whether the line is done.
  const u64 groups = (nlines + warps * 4 - 1) / (warps * 4);
  u64 seen[BRAID_LL128_MAX_GROUPS];
  bool done[BRAID_LL128_MAX_GROUPS];
  for (u64 g = 0; g < BRAID_LL128_MAX_GROUPS; g++) {
    seen[g] = 0;
    done[g] = g >= groups || (warp + g * warps) * 4 + lane / 8 >= nlines;
  }
  bool all = false;
  while (!__all_sync(0xffffffffu, all)) {
    const bool late = now_ns() - start > timeout_ns;
    all = true;
    for (u64 g = 0; g < groups && g < BRAID_LL128_MAX_GROUPS; g++) {
      const u64 l = (warp + g * warps) * 4 + lane / 8;
      u64 a = 0, b = 0;
      if (!done[g])
        asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];"
                     : "=l"(a), "=l"(b)
                     : "l"(lines + 128 * l + 16 * sub)
                     : "memory");
      // The line's flag, from its eighth thread.
      const u64 flag = __shfl_sync(0xffffffffu, b, (lane & ~7u) + 7);
      if (!done[g] && flag != seen[g] && flag != 0) {
        const bool ok = a == word_of(flag, l, 2 * sub) &&
                        (sub == 7 || b == word_of(flag, l, 2 * sub + 1));
        const u32 bad = __ballot_sync(__activemask(), !ok);
        if (sub == 0) {
          reads++;
          if ((bad >> (lane & ~7u)) & 0xffu) torn++;
        }
        seen[g] = flag;
      }
      if (!done[g] && flag == rounds) done[g] = true;
      if (!done[g] && late) {
        done[g] = true;
        if (sub == 0) stalled++;
      }
      all = all && done[g];
    }
  }
  if (sub == 0) {
    if (reads) atomicAdd((u64*)&ctl[1], reads);
    if (torn) atomicAdd((u64*)&ctl[2], torn);
    if (stalled) atomicAdd((u64*)&ctl[3], stalled);
  }
}
