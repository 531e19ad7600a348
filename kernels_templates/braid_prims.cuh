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
// until `head > received`, consumes the slot, then bumps `tail`.
//
// LL (BRAID_LL = 1): each 16-byte line of a slot carries 8 data bytes and the slice's
// sequence number twice ({d0, flag, d1, flag}), written with one volatile vector store.
// R's threads poll their own lines until both flags equal the slice they expect, so no
// fence and no `head` is needed; `tail` still tells S which slots are free. A slot then
// holds half a Simple slot's data (BRAID_PIECE_BYTES).
//
// Counters only grow, across calls too: every grid block keeps `sent`, `received` and
// the number of calls it completed in a state record in its rank's memory, reads it at
// start and writes it back at the end. So nothing is reset between calls, a rank may
// start its next call while a peer still finishes the last one (the FIFO counters order
// them), and an LL flag is never reused. Cross-block dependencies on one rank use one
// progress counter per (replica, block): the number of steps that block has completed
// over all calls; each call adds `tiles x steps` to every block's count.
//
// Every load of shared data goes through L2 (ld.global.cg): L1 is not coherent, and a
// block may read memory that another block or the peer GPU wrote since. When the FIFOs
// live in host memory (host-staged connections, BRAID_HOST_FIFO = 1), loads bypass the
// caches entirely (ld.global.cv).

#ifndef BRAID_UNROLL
#define BRAID_UNROLL 4
#endif

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

#if BRAID_HOST_FIFO
#define BRAID_LD __ldcv
#else
#define BRAID_LD __ldcg
#endif

// Loads through L2 (or uncached, see above) of any element type, by size.
template <typename T> __device__ __forceinline__ T ldcg(const T* p) {
  T v;
  if (sizeof(T) == 1) {
    unsigned char x = BRAID_LD(reinterpret_cast<const unsigned char*>(p));
    v = *reinterpret_cast<T*>(&x);
  } else if (sizeof(T) == 2) {
    unsigned short x = BRAID_LD(reinterpret_cast<const unsigned short*>(p));
    v = *reinterpret_cast<T*>(&x);
  } else if (sizeof(T) == 4) {
    unsigned int x = BRAID_LD(reinterpret_cast<const unsigned int*>(p));
    v = *reinterpret_cast<T*>(&x);
  } else {
    unsigned long long x = BRAID_LD(reinterpret_cast<const unsigned long long*>(p));
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
    // BRAID_UNROLL vectors per thread in flight before the first store: a thread that
    // waited for each load before the next would leave the SM latency-bound (a few
    // GB/s), far below what one SM can push over NVLink.
    const u64 bd = blockDim.x;
    u64 i = threadIdx.x;
    for (; i + (BRAID_UNROLL - 1) * bd < m; i += BRAID_UNROLL * bd) {
      uint4 x[BRAID_UNROLL];
#pragma unroll
      for (int k = 0; k < BRAID_UNROLL; k++) x[k] = BRAID_LD(va + i + k * bd);
      if (b != nullptr) {
        uint4 y[BRAID_UNROLL];
#pragma unroll
        for (int k = 0; k < BRAID_UNROLL; k++) y[k] = BRAID_LD(vb + i + k * bd);
#pragma unroll
        for (int k = 0; k < BRAID_UNROLL; k++) x[k] = apply_pack<T, OP>(x[k], y[k]);
      }
#pragma unroll
      for (int k = 0; k < BRAID_UNROLL; k++) v1[i + k * bd] = x[k];
      if (d2 != nullptr) {
#pragma unroll
        for (int k = 0; k < BRAID_UNROLL; k++) v2[i + k * bd] = x[k];
      }
    }
    for (; i < m; i += bd) {
      uint4 x = BRAID_LD(va + i);
      if (b != nullptr) x = apply_pack<T, OP>(x, BRAID_LD(vb + i));
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
  u64 tiles;              // tiles per call (1 when streaming, 0 for an empty replica)
  u64 calls;              // calls this block completed before this one
  volatile u64* progress; // this replica's per-block completed-step counters
  u64* state;             // this block's record: sent, received, calls
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
    // System scope: what we waited for may have been written by another GPU.
    __threadfence_system();
  }
  __syncthreads();
  bool r = ok != 0;
  __syncthreads();
  return r;
}

// Progress counts every step a block completed over all calls: in this call, step `s`
// (counted from 1) of tile `t` of a block with `n` steps is number
// calls * tiles * n + t * n + s.
__device__ __forceinline__ u64 progress_base(const Ctx& c, u32 steps) {
  return c.calls * c.tiles * (u64)steps;
}

__device__ __forceinline__ bool wait_dep(Ctx& c, u32 block, u32 steps, u32 step) {
  volatile u64* p = c.progress + block;
  const u64 target = progress_base(c, steps) + (u64)c.tile * steps + step;
  return wait_until(c, [&] { return *p >= target; }, 3);
}

__device__ __forceinline__ void step_done(Ctx& c, u32 steps, u32 step) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    c.progress[c.block] = progress_base(c, steps) + (u64)c.tile * steps + step;
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
// The barrier orders every thread's slot writes before thread 0's system-scope fence
// (fences are cumulative in the PTX memory model), which orders them before `head`.
__device__ __forceinline__ void send_done(Ctx& c) {
  __syncthreads();
  c.sent++;
  if (threadIdx.x == 0) {
    __threadfence_system();
    *c.send_head = c.sent;
  }
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

// Every thread polls its own line; the timeout and a failed rank are checked now and
// then, as in `wait_until`.
__device__ bool ll_load(Ctx& c, const char* slot, u64 line, u32 flag, u64& word) {
  u32 spins = 0;
  u64 deadline = 0;
  while (!ll_try_load(slot, line, flag, word)) {
    if ((++spins & 1023) == 0) {
      if (*c.status != 0) return false;
      const u64 t = now_ns();
      if (deadline == 0) deadline = t + BRAID_TIMEOUT_NS;
      else if (t > deadline) {
        atomicCAS((u32*)c.status, 0u, (1u << 24) | c.block);
        return false;
      }
    }
  }
  return true;
}

// A line's worth of elements (8 bytes) of a local buffer: `m` of them from `p`.
template <typename T> union Word {
  u64 u;
  T t[8 / sizeof(T)];
};

template <typename T> __device__ __forceinline__ Word<T> load_word(const T* p, u32 m) {
  Word<T> w;
  w.u = 0;
  if (m == 8 / sizeof(T) && ((u64)p & 7) == 0) {
    w.u = BRAID_LD(reinterpret_cast<const u64*>(p));
  } else {
    for (u32 k = 0; k < m; k++) w.t[k] = ldcg(p + k);
  }
  return w;
}

template <typename T> __device__ __forceinline__ void store_word(T* p, Word<T> w, u32 m) {
  if (m == 8 / sizeof(T) && ((u64)p & 7) == 0) {
    *reinterpret_cast<u64*>(p) = w.u;
  } else {
    for (u32 k = 0; k < m; k++) p[k] = w.t[k];
  }
}

// One slice of `n` elements over LL: `s` local source, `d` local destination, `in`/`out`
// the receive/send slots with the flags expected/written. Block-wide; false on failure.
template <typename T, int OP, int KIND>
__device__ bool ll_move(Ctx& c, T* d, const T* s, u64 n, const char* in, u32 in_flag,
                        char* out, u32 out_flag) {
  constexpr u32 E = 8 / sizeof(T);
  const u64 lines = (n + E - 1) / E;
  const bool recv = KIND == R || KIND == RCS || KIND == RRS || KIND == RRC || KIND == RRCS;
  const bool send = KIND == S || KIND == RCS || KIND == RRS || KIND == RRCS;
  const bool local = KIND == S || KIND == RRS || KIND == RRC || KIND == RRCS;
  bool ok = true;
  for (u64 l = threadIdx.x; l < lines; l += blockDim.x) {
    const u64 first = l * E;
    const u32 m = n - first < E ? (u32)(n - first) : E;
    Word<T> x, y;
    if (recv && !ll_load(c, in, l, in_flag, y.u)) {
      ok = false;
      break;
    }
    if (local) {
      x = load_word(s + first, m);
      if (recv) {
#pragma unroll
        for (u32 k = 0; k < E; k++) x.t[k] = apply<T, OP>(x.t[k], y.t[k]);
      }
    } else {
      x = y;
    }
    if (send) ll_store(out, l, x.u, out_flag);
    if (KIND == R || KIND == RCS || KIND == RRC || KIND == RRCS) store_word(d + first, x, m);
  }
  return __syncthreads_and(ok) != 0;
}

// One plan step: `count` chunks from `src` (buffer, chunk offset) and/or `dst`, each
// chunk's [lo, hi) cut into pieces of one FIFO slot, exactly as the host executor slices
// messages. Returns false when the rank failed (the caller stops the block).
template <typename T, int OP, int KIND>
__device__ bool step(Ctx& c, int sb, u32 so, int db, u32 doff, u32 count) {
  const bool recv = KIND == R || KIND == RCS || KIND == RRS || KIND == RRC || KIND == RRCS;
  const bool send = KIND == S || KIND == RCS || KIND == RRS || KIND == RRCS;
  const u64 piece = BRAID_PIECE_BYTES / sizeof(T);
  const u64 len = c.hi - c.lo;
  for (u32 i = 0; i < count; i++) {
    T* s = sb < 0 ? nullptr : reinterpret_cast<T*>(c.buf[sb]) + (u64)(so + i) * c.chunk_elems + c.lo;
    T* d = db < 0 ? nullptr : reinterpret_cast<T*>(c.buf[db]) + (u64)(doff + i) * c.chunk_elems + c.lo;
    for (u64 off = 0; off < len; off += piece) {
      const u64 n = len - off < piece ? len - off : piece;
      char* in = nullptr;
      char* out = nullptr;
      if (recv) {
        if (!BRAID_LL && !wait_recv(c)) return false;
        in = c.recv_slots + (c.received % c.slots) * BRAID_SLICE_BYTES;
      }
      if (send) {
        if (!wait_send(c)) return false;
        out = c.send_slots + (c.sent % c.slots) * BRAID_SLICE_BYTES;
      }
      if (BRAID_LL && (recv || send)) {
        if (!ll_move<T, OP, KIND>(c, d + off, s + off, n, in, (u32)(c.received + 1), out,
                                  (u32)(c.sent + 1)))
          return false;
        if (recv) {
          c.received++;
          if (threadIdx.x == 0) *c.recv_tail = c.received;
        }
        if (send) c.sent++;
        continue;
      }
      T* tin = reinterpret_cast<T*>(in);
      T* tout = reinterpret_cast<T*>(out);
      switch (KIND) {
        case S: move<T, OP>(tout, nullptr, s + off, nullptr, n); break;
        case R: move<T, OP>(d + off, nullptr, tin, nullptr, n); break;
        case RCS: move<T, OP>(d + off, tout, tin, nullptr, n); break;
        case RRS: move<T, OP>(tout, nullptr, s + off, tin, n); break;
        case RRC: move<T, OP>(d + off, nullptr, s + off, tin, n); break;
        case RRCS: move<T, OP>(d + off, tout, s + off, tin, n); break;
        case CPY: if (s != d) move<T, OP>(d + off, nullptr, s + off, nullptr, n); break;
        case RE: move<T, OP>(d + off, nullptr, d + off, s + off, n); break;
      }
      if (recv) recv_done(c);
      if (send) send_done(c);
    }
  }
  return true;
}

// Fills a block's context from the launch table (layout: runtime/cuda/src/table.rs) and
// the block's state record (what earlier calls left).
__device__ void init(Ctx& c, const u64* table, u64 chunk_elems, u32 nblocks, u32 slots) {
  const u32 g = blockIdx.x;
  c.buf[0] = (char*)table[0];
  c.buf[1] = (char*)table[1];
  c.buf[2] = (char*)table[2];
  c.chunk_elems = chunk_elems;
  c.status = (volatile u32*)table[4];
  c.block = g % nblocks;
  c.progress = (volatile u64*)table[3] + (g / nblocks) * nblocks;
  c.state = (u64*)table[5] + 4 * (u64)g;
  const u64* e = table + 6 + 6 * (u64)g;
  c.send_slots = (char*)e[0];
  c.send_head = (volatile u64*)e[1];
  c.send_tail = (volatile u64*)e[2];
  c.recv_slots = (char*)e[3];
  c.recv_head = (volatile u64*)e[4];
  c.recv_tail = (volatile u64*)e[5];
  c.sent = c.state[0];
  c.received = c.state[1];
  c.calls = c.state[2];
  c.slots = slots;
  c.tile = 0;
  c.tiles = 1;
}

// Records what this call added, for the next call (only after a successful call: a
// failed rank is reset by the host before it runs again).
__device__ void finish(Ctx& c) {
  __syncthreads();
  if (threadIdx.x == 0) {
    c.state[0] = c.sent;
    c.state[1] = c.received;
    c.state[2] = c.calls + 1;
  }
}

}  // namespace braid
