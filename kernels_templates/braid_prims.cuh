// Braid's device primitives: element types and reductions, loads that see other GPUs'
// writes, block-wide copy/reduce with padding, the Simple and LL wire protocols, and
// waits that give up (timeout, abort, a failed block) instead of hanging.
//
// Pasted (after a few #defines) in front of braid_kernel.cuh by runtime/cuda/src/kernel.rs,
// so NVRTC needs no include path and no CUDA headers: built-in types, intrinsics and PTX
// only. The generated prologue defines BRAID_T (element type), BRAID_OP (reduction),
// BRAID_LL, BRAID_HOST_FIFO, BRAID_SLOT_BYTES, BRAID_PIECE_BYTES, BRAID_UNROLL,
// BRAID_THREADS, BRAID_MAX_LOCAL, BRAID_BLOCKS_AT.
//
// Protocol of one connection lane (sender S -> receiver R): the FIFO lives in R's
// memory (or in host memory when staged): `nslots` slots of BRAID_SLOT_BYTES, a `head`
// counter (slices written, bumped by S) and a `tail` counter (slices consumed, bumped by
// R, read by S). S waits until `sent - tail < nslots`, writes a slice with all threads,
// fences (system scope: the reader is another GPU or process), then bumps `head`. R waits
// until `head > received`, consumes the slot, then bumps `tail`.
//
// LL (BRAID_LL = 1): each 16-byte line of a slot carries 8 data bytes and the slice's
// sequence number twice ({d0, flag, d1, flag}), written with one volatile vector store.
// R's threads poll their own lines until both flags equal the slice they expect; `tail`
// still tells S which slots are free. A connection has one lane per protocol, each with
// its own FIFO and counters, so calls with different protocols never see each other's
// flags. Counters only grow, across calls and across plans.
//
// LL128 (BRAID_LL128 = 1): each 128-byte line carries 120 data bytes and, in its last 8,
// the slice's sequence number. Eight threads of a warp own a line, 16 bytes each, and a
// warp stores (and loads) its four lines with one vector instruction: the protocol relies
// on such a line arriving whole, which holds only on links where a stress test showed it
// (runtime/cuda/src/ll128.rs); the runtime uses LL128 nowhere else.

#ifndef BRAID_UNROLL
#define BRAID_UNROLL 8
#endif

namespace braid {

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned char u8;

enum Op { SUM = 0, PROD = 1, MIN = 2, MAX = 3, AVG = 4 };

// 16-bit floats are stored as raw bits; arithmetic is done in f32 and rounded to nearest
// even once, as the host reference does.
struct half_t { unsigned short bits; };
struct bf16_t { unsigned short bits; };

__device__ __forceinline__ float to_f32(half_t h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
}
__device__ __forceinline__ float to_f32(bf16_t h) {
  return __uint_as_float(((u32)h.bits) << 16);
}
__device__ __forceinline__ half_t to_half(float f) {
  half_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}
__device__ __forceinline__ bf16_t to_bf16(float f) {
  bf16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}

// Binary operators per element type, and avg's final division. Integer sum and product
// wrap (computed unsigned, so signed overflow is defined), matching the host's wrapping
// arithmetic; integer avg divides the wrapped sum, truncating toward zero (NCCL's
// SumPostDiv); float avg multiplies by 1/n rounded to the element type.
template <typename T> struct Num;

#define BRAID_INT(TY, UTY, WIDE)                                                  \
  template <> struct Num<TY> {                                                    \
    __device__ static TY zero() { return (TY)0; }                                 \
    __device__ static TY add(TY a, TY b) { return (TY)((UTY)a + (UTY)b); }        \
    __device__ static TY mul(TY a, TY b) { return (TY)((UTY)a * (UTY)b); }        \
    __device__ static TY min(TY a, TY b) { return b < a ? b : a; }                \
    __device__ static TY max(TY a, TY b) { return b > a ? b : a; }                \
    __device__ static TY avg(TY a, u32 n) { return (TY)((WIDE)a / (WIDE)n); }     \
  };
BRAID_INT(signed char, unsigned char, long long)
BRAID_INT(unsigned char, unsigned char, unsigned long long)
BRAID_INT(int, unsigned int, long long)
BRAID_INT(unsigned int, unsigned int, unsigned long long)
BRAID_INT(long long, unsigned long long, long long)
BRAID_INT(unsigned long long, unsigned long long, unsigned long long)
#undef BRAID_INT

template <> struct Num<float> {
  __device__ static float zero() { return 0.0f; }
  __device__ static float add(float a, float b) { return a + b; }
  __device__ static float mul(float a, float b) { return a * b; }
  __device__ static float min(float a, float b) { return b < a ? b : a; }
  __device__ static float max(float a, float b) { return b > a ? b : a; }
  __device__ static float avg(float a, u32 n) { return a * (float)(1.0 / (double)n); }
};
template <> struct Num<double> {
  __device__ static double zero() { return 0.0; }
  __device__ static double add(double a, double b) { return a + b; }
  __device__ static double mul(double a, double b) { return a * b; }
  __device__ static double min(double a, double b) { return b < a ? b : a; }
  __device__ static double max(double a, double b) { return b > a ? b : a; }
  __device__ static double avg(double a, u32 n) { return a * (1.0 / (double)n); }
};

#define BRAID_HALF(TY, CONV)                                                      \
  template <> struct Num<TY> {                                                    \
    __device__ static TY zero() { TY z; z.bits = 0; return z; }                   \
    __device__ static TY add(TY a, TY b) { return CONV(to_f32(a) + to_f32(b)); }  \
    __device__ static TY mul(TY a, TY b) { return CONV(to_f32(a) * to_f32(b)); }  \
    __device__ static TY min(TY a, TY b) { return to_f32(b) < to_f32(a) ? b : a; }\
    __device__ static TY max(TY a, TY b) { return to_f32(b) > to_f32(a) ? b : a; }\
    __device__ static TY avg(TY a, u32 n) {                                       \
      return CONV(to_f32(a) * to_f32(CONV((float)(1.0 / (double)n))));           \
    }                                                                             \
  };
BRAID_HALF(half_t, to_half)
BRAID_HALF(bf16_t, to_bf16)
#undef BRAID_HALF

// The call's element type and reduction, from the generated prologue.
typedef BRAID_T T;
constexpr int OP = BRAID_OP;

// AVG reduces as SUM; the sum is divided once at the end.
template <typename T, int O> __device__ __forceinline__ T apply(T a, T b) {
  if (O == SUM || O == AVG) return Num<T>::add(a, b);
  if (O == PROD) return Num<T>::mul(a, b);
  if (O == MIN) return Num<T>::min(a, b);
  return Num<T>::max(a, b);
}

#if BRAID_HOST_FIFO
#define BRAID_LD __ldcv
#else
#define BRAID_LD __ldcg
#endif

// Loads through L2 (or uncached for host-staged FIFOs) of any element type, by size:
// L1 is not coherent, and a block may read memory another block or GPU wrote since.
template <typename E> __device__ __forceinline__ E ldcg(const E* p) {
  E v;
  if (sizeof(E) == 1) {
    unsigned char x = BRAID_LD(reinterpret_cast<const unsigned char*>(p));
    v = *reinterpret_cast<E*>(&x);
  } else if (sizeof(E) == 2) {
    unsigned short x = BRAID_LD(reinterpret_cast<const unsigned short*>(p));
    v = *reinterpret_cast<E*>(&x);
  } else if (sizeof(E) == 4) {
    unsigned int x = BRAID_LD(reinterpret_cast<const unsigned int*>(p));
    v = *reinterpret_cast<E*>(&x);
  } else {
    unsigned long long x = BRAID_LD(reinterpret_cast<const unsigned long long*>(p));
    v = *reinterpret_cast<E*>(&x);
  }
  return v;
}

template <typename E, int O> __device__ __forceinline__ uint4 apply_pack(uint4 a, uint4 b) {
  E* pa = reinterpret_cast<E*>(&a);
  const E* pb = reinterpret_cast<const E*>(&b);
#pragma unroll
  for (int k = 0; k < (int)(16 / sizeof(E)); k++) pa[k] = apply<E, O>(pa[k], pb[k]);
  return a;
}

__device__ __forceinline__ bool aligned16(const void* p) {
  return ((u64)p & 15) == 0;
}

// Elements of one 16-byte vector.
constexpr u64 UNIT = sizeof(T) >= 16 ? 1 : 16 / sizeof(T);

__device__ __forceinline__ u64 min64(u64 a, u64 b) { return a < b ? a : b; }

// The first `n` elements of a run are `v` of them that exist, then padding: how many
// of elements [off, off + n) of a run with `valid` existing elements exist.
__device__ __forceinline__ u64 valid_in(u64 valid, u64 off, u64 n) {
  return valid > off ? min64(valid - off, n) : 0;
}

// Block-wide: x = a (+) b over n elements, written to d1 (its first v1 elements) and d2
// (its first v2, when not null). a has va existing elements, b vb (when not null); their
// padding reads as zero. Outputs that are FIFO slots take all n (v = n); a caller's
// buffer takes only what exists. 16-byte vectors where every pointer is aligned and
// everything exists, elements for the rest.
__device__ void move(T* d1, u64 v1, T* d2, u64 v2, const T* a, u64 va, const T* b, u64 vb,
                     u64 n) {
  u64 full = min64(v1, va);
  if (d2 != nullptr) full = min64(full, v2);
  if (b != nullptr) full = min64(full, vb);
  bool vec = aligned16(d1) && aligned16(a) && (d2 == nullptr || aligned16(d2)) &&
             (b == nullptr || aligned16(b));
  u64 done = 0;
  if (vec) {
    const u64 m = full / UNIT;
    done = m * UNIT;
    const uint4* vva = reinterpret_cast<const uint4*>(a);
    const uint4* vvb = reinterpret_cast<const uint4*>(b);
    uint4* w1 = reinterpret_cast<uint4*>(d1);
    uint4* w2 = reinterpret_cast<uint4*>(d2);
    // BRAID_UNROLL vectors per thread in flight before the first store: a thread that
    // waited for each load before the next would leave the SM latency-bound.
    const u64 bd = blockDim.x;
    u64 i = threadIdx.x;
    for (; i + (BRAID_UNROLL - 1) * bd < m; i += BRAID_UNROLL * bd) {
      uint4 x[BRAID_UNROLL];
#pragma unroll
      for (int k = 0; k < BRAID_UNROLL; k++) x[k] = BRAID_LD(vva + i + k * bd);
      if (b != nullptr) {
        uint4 y[BRAID_UNROLL];
#pragma unroll
        for (int k = 0; k < BRAID_UNROLL; k++) y[k] = BRAID_LD(vvb + i + k * bd);
#pragma unroll
        for (int k = 0; k < BRAID_UNROLL; k++) x[k] = apply_pack<T, OP>(x[k], y[k]);
      }
#pragma unroll
      for (int k = 0; k < BRAID_UNROLL; k++) w1[i + k * bd] = x[k];
      if (d2 != nullptr) {
#pragma unroll
        for (int k = 0; k < BRAID_UNROLL; k++) w2[i + k * bd] = x[k];
      }
    }
    for (; i < m; i += bd) {
      uint4 x = BRAID_LD(vva + i);
      if (b != nullptr) x = apply_pack<T, OP>(x, BRAID_LD(vvb + i));
      w1[i] = x;
      if (d2 != nullptr) w2[i] = x;
    }
  }
  u64 end = v1;
  if (d2 != nullptr && v2 > end) end = v2;
  for (u64 i = done + threadIdx.x; i < end; i += blockDim.x) {
    T x = i < va ? ldcg(a + i) : Num<T>::zero();
    if (b != nullptr) x = apply<T, OP>(x, i < vb ? ldcg(b + i) : Num<T>::zero());
    if (i < v1) d1[i] = x;
    if (d2 != nullptr && i < v2) d2[i] = x;
  }
}

__device__ __forceinline__ u64 now_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// Why a rank's call failed: the code's top byte (the block is in the low 24 bits).
enum Why { WAIT_RECV = 1, WAIT_SEND = 2, WAIT_DEP = 3, ABORTED = 4 };

// What every wait of a block checks besides its condition.
struct Watch {
  volatile u32* fail;    // device word of the rank: nonzero once any block failed
  volatile u32* report;  // host-mapped word the host reads without synchronising
  volatile u32* abort;   // host-mapped word the host sets to abort
  u64 timeout_ns;
  u32 block;
};

// Records why this rank failed (first writer wins on the device word).
__device__ __forceinline__ void fail(const Watch& w, u32 why) {
  const u32 code = (why << 24) | (w.block & 0xffffff);
  if (atomicCAS((u32*)w.fail, 0u, code) == 0u) {
    *w.report = code;
    __threadfence_system();
  }
}

// Checked every 1024 spins: abort from the host, and the deadline.
__device__ __forceinline__ bool slow_checks(const Watch& w, u64& deadline, u32 why) {
  if (*w.abort != 0) {
    fail(w, ABORTED);
    return false;
  }
  const u64 t = now_ns();
  if (deadline == 0) {
    deadline = t + w.timeout_ns;
  } else if (t > deadline) {
    fail(w, why);
    return false;
  }
  return true;
}

// Release / acquire at system scope (the other side may be another GPU or process):
// with a barrier, orders the block's data accesses on one side of a counter's store or
// load. Weaker, and cheaper, than __threadfence_system (a sequentially consistent
// fence), which the counter protocol does not need: a release fence before the store
// that publishes, an acquire fence after the load that observes (PTX's fence-fence
// synchronisation).
__device__ __forceinline__ void fence_acq_rel_sys() {
  asm volatile("fence.acq_rel.sys;" ::: "memory");
}
// The same at GPU scope: enough where every party runs on this GPU (blocks of one rank,
// and ranks of one process sharing the GPU with their FIFOs in its memory), and cheaper.
__device__ __forceinline__ void fence_acq_rel_gpu() {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}
// One atomic add that releases what the thread (and, after a barrier, its block) did
// before it and acquires what the adders before it released.
__device__ __forceinline__ u64 atomic_add_acq_rel_gpu(u64* p, u64 v) {
  u64 old;
  asm volatile("atom.add.acq_rel.gpu.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
  return old;
}
// An acquiring load of a counter: what the writer released before the value is visible
// to this thread's later accesses (and, after a barrier, to its block's), without the
// full fence a relaxed load followed by `fence_acq_rel` costs.
__device__ __forceinline__ u64 load_acquire(const volatile u64* p, bool sys) {
  u64 v;
  if (sys) {
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  } else {
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  }
  return v;
}

__device__ __forceinline__ void fence_acq_rel(bool sys) {
  if (sys) {
    fence_acq_rel_sys();
  } else {
    fence_acq_rel_gpu();
  }
}

// Thread 0 reads the counter `p`, acquiring at system scope (`sys`) or GPU scope, until
// `ready(value)` or failure. Every thread gets the verdict and the value last
// read (`seen`), and, when `keep` is not null, thread 0 stores that value there between
// the two barriers: every thread decided whether to wait before the first, and reads
// `keep` again only after the second, so all threads of the block decide alike.
template <typename F>
__device__ bool wait_counter(const Watch& w, volatile u64* p, F ready, u32 why, bool sys,
                             u64& seen, u64* keep) {
  __shared__ int ok;
  __shared__ u64 val;
  if (threadIdx.x == 0) {
    ok = 1;
    u64 deadline = 0;
    u32 spins = 0;
    u64 v;
    while (!ready(v = load_acquire(p, sys))) {
      if (*w.fail != 0) {
        ok = 0;
        break;
      }
      if ((++spins & 1023) == 0 && !slow_checks(w, deadline, why)) {
        ok = 0;
        break;
      }
    }
    // (Each read acquires: what we waited for may have been written by another GPU or
    // process, and the barrier below hands it to the block.)
    val = v;
  }
  __syncthreads();
  const bool r = ok != 0;
  seen = val;
  if (keep != nullptr && threadIdx.x == 0) *keep = val;
  __syncthreads();
  return r;
}

// ---- LL: 8 data bytes and two copies of the slice's flag per 16-byte line ----

__device__ __forceinline__ void ll_store(char* slot, u64 line, u64 word, u32 flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(slot + 16 * line),
               "r"((u32)word), "r"(flag), "r"((u32)(word >> 32)), "r"(flag)
               : "memory");
}

__device__ __forceinline__ bool ll_try_load(const char* slot, u64 line, u32 flag, u64& word) {
  u32 a, f0, b, f1;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(a), "=r"(f0), "=r"(b), "=r"(f1)
               : "l"(slot + 16 * line)
               : "memory");
  word = (u64)a | ((u64)b << 32);
  return f0 == flag && f1 == flag;
}

// Every thread polls its own line; failure, abort and the deadline are checked now and
// then, as in `wait_counter`.
__device__ bool ll_load(const Watch& w, const char* slot, u64 line, u32 flag, u64& word) {
  u32 spins = 0;
  u64 deadline = 0;
  while (!ll_try_load(slot, line, flag, word)) {
    if ((++spins & 1023) == 0) {
      if (*w.fail != 0) return false;
      if (!slow_checks(w, deadline, WAIT_RECV)) return false;
    }
  }
  return true;
}

// A line's worth of elements (8 bytes).
union Word {
  u64 u;
  T t[8 / sizeof(T) > 0 ? 8 / sizeof(T) : 1];
};
constexpr u32 LINE = sizeof(T) >= 8 ? 1 : 8 / sizeof(T);

// The `m` existing elements from `p` (the rest of the line zero).
__device__ __forceinline__ Word load_word(const T* p, u32 m) {
  Word x;
  x.u = 0;
  if (m == LINE && ((u64)p & 7) == 0) {
    x.u = BRAID_LD(reinterpret_cast<const u64*>(p));
  } else {
    for (u32 k = 0; k < m; k++) x.t[k] = ldcg(p + k);
  }
  return x;
}

__device__ __forceinline__ void store_word(T* p, Word x, u32 m) {
  if (m == LINE && ((u64)p & 7) == 0) {
    *reinterpret_cast<u64*>(p) = x.u;
  } else {
    for (u32 k = 0; k < m; k++) p[k] = x.t[k];
  }
}

// ---- LL128: 120 data bytes and the slice's flag per 128-byte line ----

constexpr u32 LL128_DATA = 120;

__device__ __forceinline__ void ll128_store(char* line, u32 sub, u64 a, u64 b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(line + 16 * sub), "l"(a), "l"(b)
               : "memory");
}

__device__ __forceinline__ void ll128_try(const char* line, u32 sub, u64& a, u64& b) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];"
               : "=l"(a), "=l"(b)
               : "l"(line + 16 * sub)
               : "memory");
}

// The warp's threads load their 16 bytes of their lines until every line of the warp
// that `active` threads own carries `flag` (thread 7 of each eight holds it); all 32
// threads call it. Failure, abort and the deadline are checked now and then.
__device__ bool ll128_load(const Watch& w, const char* line, u32 sub, bool active, u64 flag,
                           u64& a, u64& b) {
  u32 spins = 0;
  u64 deadline = 0;
  while (true) {
    if (active) ll128_try(line, sub, a, b);
    const bool waiting = active && sub == 7 && b != flag;
    if (!__any_sync(0xffffffffu, waiting)) return true;
    if ((++spins & 1023) == 0) {
      // The whole warp gives up together (its lines' loads are warp-wide).
      const bool stop = *w.fail != 0 || !slow_checks(w, deadline, WAIT_RECV);
      if (__any_sync(0xffffffffu, stop)) return false;
    }
  }
}

}  // namespace braid
