// Braid's device primitives for the CUDA backend.
//
// This header is pasted in front of every generated kernel (runtime/cuda/src/codegen.rs),
// so NVRTC needs no include path and no CUDA headers: it uses only built-in types,
// intrinsics and PTX. A generated kernel defines `T` (element type) and `OP` (reduction)
// and calls `braid::step<T, OP, KIND>` once per plan step with constant chunk indices.
//
// Protocol of one connection (sender rank S -> receiver rank R, one channel): the FIFO
// lives in R's memory: `slots` slots of BRAID_SLICE_BYTES, a `head` counter (slices
// written, bumped by S over NVLink) and a `tail` counter (slices consumed, bumped by R,
// read by S over NVLink). S waits until `sent - tail < slots`, writes a slice with all
// threads, fences (system scope, the reader is another GPU), then bumps `head`. R waits
// until `head > received`, consumes the slot, then bumps `tail`. Counters only grow, so
// no flag ever needs resetting. Cross-block dependencies on one rank use one progress
// counter per (replica, block): the number of steps that block has completed.
//
// Every load of shared data goes through L2 (ld.global.cg): L1 is not coherent, and a
// block may read memory that another block or the peer GPU wrote since.

namespace braid {

typedef unsigned long long u64;
typedef unsigned int u32;

enum Kind { S, R, RCS, RRS, RRC, RRCS, CPY, RE };
enum Op { SUM = 0, PROD = 1, MIN = 2, MAX = 3 };

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

// Binary operators per element type. Integer sum and product wrap (computed unsigned, so
// signed overflow is defined), matching the host's wrapping arithmetic.
template <typename T> struct Num;

#define BRAID_INT(TY, UTY)                                                        \
  template <> struct Num<TY> {                                                    \
    __device__ static TY add(TY a, TY b) { return (TY)((UTY)a + (UTY)b); }        \
    __device__ static TY mul(TY a, TY b) { return (TY)((UTY)a * (UTY)b); }        \
    __device__ static TY min(TY a, TY b) { return b < a ? b : a; }                \
    __device__ static TY max(TY a, TY b) { return b > a ? b : a; }                \
  };
BRAID_INT(signed char, unsigned char)
BRAID_INT(unsigned char, unsigned char)
BRAID_INT(int, unsigned int)
BRAID_INT(unsigned int, unsigned int)
BRAID_INT(long long, unsigned long long)
BRAID_INT(unsigned long long, unsigned long long)
#undef BRAID_INT

#define BRAID_FLOAT(TY)                                                           \
  template <> struct Num<TY> {                                                    \
    __device__ static TY add(TY a, TY b) { return a + b; }                        \
    __device__ static TY mul(TY a, TY b) { return a * b; }                        \
    __device__ static TY min(TY a, TY b) { return b < a ? b : a; }                \
    __device__ static TY max(TY a, TY b) { return b > a ? b : a; }                \
  };
BRAID_FLOAT(float)
BRAID_FLOAT(double)
#undef BRAID_FLOAT

#define BRAID_HALF(TY, CONV)                                                      \
  template <> struct Num<TY> {                                                    \
    __device__ static TY add(TY a, TY b) { return CONV(to_f32(a) + to_f32(b)); }  \
    __device__ static TY mul(TY a, TY b) { return CONV(to_f32(a) * to_f32(b)); }  \
    __device__ static TY min(TY a, TY b) { return to_f32(b) < to_f32(a) ? b : a; }\
    __device__ static TY max(TY a, TY b) { return to_f32(b) > to_f32(a) ? b : a; }\
  };
BRAID_HALF(half_t, to_half)
BRAID_HALF(bf16_t, to_bf16)
#undef BRAID_HALF

template <typename T, int OP> __device__ __forceinline__ T apply(T a, T b) {
  if (OP == SUM) return Num<T>::add(a, b);
  if (OP == PROD) return Num<T>::mul(a, b);
  if (OP == MIN) return Num<T>::min(a, b);
  return Num<T>::max(a, b);
}

// Loads through L2 of any element type, by size.
template <typename T> __device__ __forceinline__ T ldcg(const T* p) {
  T v;
  if (sizeof(T) == 1) {
    unsigned char x = __ldcg(reinterpret_cast<const unsigned char*>(p));
    v = *reinterpret_cast<T*>(&x);
  } else if (sizeof(T) == 2) {
    unsigned short x = __ldcg(reinterpret_cast<const unsigned short*>(p));
    v = *reinterpret_cast<T*>(&x);
  } else if (sizeof(T) == 4) {
    unsigned int x = __ldcg(reinterpret_cast<const unsigned int*>(p));
    v = *reinterpret_cast<T*>(&x);
  } else {
    unsigned long long x = __ldcg(reinterpret_cast<const unsigned long long*>(p));
    v = *reinterpret_cast<T*>(&x);
  }
  return v;
}

template <typename T, int OP> __device__ __forceinline__ uint4 apply_pack(uint4 a, uint4 b) {
  T* pa = reinterpret_cast<T*>(&a);
  const T* pb = reinterpret_cast<const T*>(&b);
#pragma unroll
  for (int k = 0; k < (int)(16 / sizeof(T)); k++) pa[k] = apply<T, OP>(pa[k], pb[k]);
  return a;
}

__device__ __forceinline__ bool aligned16(const void* p) {
  return ((u64)p & 15) == 0;
}

// d1 (and d2 when not null) = a, or a (op) b when b is not null; n elements, block-wide.
// 16-byte vectors when every pointer and the length allow it, elements otherwise.
template <typename T, int OP>
__device__ void move(T* d1, T* d2, const T* a, const T* b, u64 n) {
  bool vec = aligned16(d1) && aligned16(a) && (d2 == nullptr || aligned16(d2)) &&
             (b == nullptr || aligned16(b)) && ((n * sizeof(T)) % 16 == 0);
  if (vec) {
    const u64 m = n * sizeof(T) / 16;
    const uint4* va = reinterpret_cast<const uint4*>(a);
    const uint4* vb = reinterpret_cast<const uint4*>(b);
    uint4* v1 = reinterpret_cast<uint4*>(d1);
    uint4* v2 = reinterpret_cast<uint4*>(d2);
    for (u64 i = threadIdx.x; i < m; i += blockDim.x) {
      uint4 x = __ldcg(va + i);
      if (b != nullptr) x = apply_pack<T, OP>(x, __ldcg(vb + i));
      v1[i] = x;
      if (d2 != nullptr) v2[i] = x;
    }
  } else {
    for (u64 i = threadIdx.x; i < n; i += blockDim.x) {
      T x = ldcg(a + i);
      if (b != nullptr) x = apply<T, OP>(x, ldcg(b + i));
      d1[i] = x;
      if (d2 != nullptr) d2[i] = x;
    }
  }
}

// What one thread block of one rank needs: its buffers, the element range of every chunk
// it handles now (replica share, then tile), its two connection ends and its counters.
struct Ctx {
  char* buf[3];           // in, out, scratch (executor layout, staged if padded)
  u64 chunk_elems;        // elements of every chunk
  u64 lo, hi;             // element range of each chunk for this replica and tile
  u32 tile;               // tile index (0 when streaming)
  volatile u32* progress; // this replica's per-block completed-step counters
  u32 block;              // plan block id
  volatile u32* status;   // nonzero once this rank failed
  char* send_slots;       // the peer's FIFO slots (peer memory)
  volatile u64* send_head;
  volatile u64* send_tail;
  u64 sent;
  char* recv_slots;       // this rank's FIFO slots for the receive peer
  volatile u64* recv_head;
  volatile u64* recv_tail;
  u64 received;
  u32 slots;
};

__device__ __forceinline__ u64 now_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// Thread 0 spins until `ready()` or the timeout; the verdict is shared with the block.
// On timeout the rank's status records (what << 24 | block) and every block stops.
template <typename F> __device__ bool wait_until(Ctx& c, F ready, u32 what) {
  __shared__ int ok;
  if (threadIdx.x == 0) {
    ok = 1;
    u64 deadline = 0;
    u32 spins = 0;
    while (!ready()) {
      if (*c.status != 0) { ok = 0; break; }
      if ((++spins & 1023) == 0) {
        u64 t = now_ns();
        if (deadline == 0) deadline = t + BRAID_TIMEOUT_NS;
        else if (t > deadline) {
          atomicCAS((u32*)c.status, 0u, (what << 24) | c.block);
          ok = 0;
          break;
        }
      }
    }
    __threadfence();
  }
  __syncthreads();
  bool r = ok != 0;
  __syncthreads();
  return r;
}

__device__ __forceinline__ bool wait_dep(Ctx& c, u32 block, u32 target) {
  volatile u32* p = c.progress + block;
  return wait_until(c, [&] { return *p >= target; }, 3);
}

__device__ __forceinline__ void step_done(Ctx& c, u32 value) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    c.progress[c.block] = value;
  }
}

__device__ __forceinline__ bool wait_recv(Ctx& c) {
  return wait_until(c, [&] { return *c.recv_head > c.received; }, 1);
}
__device__ __forceinline__ bool wait_send(Ctx& c) {
  return wait_until(c, [&] { return c.sent - *c.send_tail < (u64)c.slots; }, 2);
}
__device__ __forceinline__ void recv_done(Ctx& c) {
  __syncthreads();
  c.received++;
  if (threadIdx.x == 0) *c.recv_tail = c.received;
}
__device__ __forceinline__ void send_done(Ctx& c) {
  __threadfence_system();
  __syncthreads();
  c.sent++;
  if (threadIdx.x == 0) *c.send_head = c.sent;
}

// One plan step: `count` chunks from `src` (buffer, chunk offset) and/or `dst`, each
// chunk's [lo, hi) cut into pieces of one FIFO slot, exactly as the host executor slices
// messages. Returns false when the rank failed (the caller stops the block).
template <typename T, int OP, int KIND>
__device__ bool step(Ctx& c, int sb, u32 so, int db, u32 doff, u32 count) {
  const bool recv = KIND == R || KIND == RCS || KIND == RRS || KIND == RRC || KIND == RRCS;
  const bool send = KIND == S || KIND == RCS || KIND == RRS || KIND == RRCS;
  const u64 piece = BRAID_SLICE_BYTES / sizeof(T);
  const u64 len = c.hi - c.lo;
  for (u32 i = 0; i < count; i++) {
    T* s = sb < 0 ? nullptr : reinterpret_cast<T*>(c.buf[sb]) + (u64)(so + i) * c.chunk_elems + c.lo;
    T* d = db < 0 ? nullptr : reinterpret_cast<T*>(c.buf[db]) + (u64)(doff + i) * c.chunk_elems + c.lo;
    for (u64 off = 0; off < len; off += piece) {
      const u64 n = len - off < piece ? len - off : piece;
      T* in = nullptr;
      T* out = nullptr;
      if (recv) {
        if (!wait_recv(c)) return false;
        in = reinterpret_cast<T*>(c.recv_slots + (c.received % c.slots) * BRAID_SLICE_BYTES);
      }
      if (send) {
        if (!wait_send(c)) return false;
        out = reinterpret_cast<T*>(c.send_slots + (c.sent % c.slots) * BRAID_SLICE_BYTES);
      }
      switch (KIND) {
        case S: move<T, OP>(out, nullptr, s + off, nullptr, n); break;
        case R: move<T, OP>(d + off, nullptr, in, nullptr, n); break;
        case RCS: move<T, OP>(d + off, out, in, nullptr, n); break;
        case RRS: move<T, OP>(out, nullptr, s + off, in, n); break;
        case RRC: move<T, OP>(d + off, nullptr, s + off, in, n); break;
        case RRCS: move<T, OP>(d + off, out, s + off, in, n); break;
        case CPY: if (s != d) move<T, OP>(d + off, nullptr, s + off, nullptr, n); break;
        case RE: move<T, OP>(d + off, nullptr, d + off, s + off, n); break;
      }
      if (recv) recv_done(c);
      if (send) send_done(c);
    }
  }
  return true;
}

// Fills a block's context from the launch table (layout: runtime/cuda/src/table.rs).
__device__ void init(Ctx& c, const u64* table, u64 chunk_elems, u32 nblocks, u32 slots) {
  const u32 g = blockIdx.x;
  c.buf[0] = (char*)table[0];
  c.buf[1] = (char*)table[1];
  c.buf[2] = (char*)table[2];
  c.chunk_elems = chunk_elems;
  c.status = (volatile u32*)table[4];
  c.block = g % nblocks;
  c.progress = (volatile u32*)table[3] + (g / nblocks) * nblocks;
  const u64* e = table + 5 + 6 * (u64)g;
  c.send_slots = (char*)e[0];
  c.send_head = (volatile u64*)e[1];
  c.send_tail = (volatile u64*)e[2];
  c.recv_slots = (char*)e[3];
  c.recv_head = (volatile u64*)e[4];
  c.recv_tail = (volatile u64*)e[5];
  c.sent = 0;
  c.received = 0;
  c.slots = slots;
  c.tile = 0;
}

}  // namespace braid
