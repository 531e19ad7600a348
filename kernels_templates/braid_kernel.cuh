// Braid's kernel: an interpreter of plan step programs. One compiled kernel per (element
// type, reduction, wire protocol, FIFO placement) serves every plan; a plan is data, laid
// out per rank in device memory once (runtime/cuda/src/program.rs writes the same
// layout), and a call is one launch whose arguments say where the caller's buffers are.
//
// One launch runs the calls of one or more ranks that share a GPU (a fused group): grid
// block `blockIdx.x` belongs to the rank whose range [first[s], first[s+1]) holds it, and
// is that rank's grid block `g = replica * nblocks + block`. All blocks of a launch are
// resident at once (the runtime bounds the grid), so blocks may wait on one another.
//
// A block runs its plan block's steps over its replica's share of every chunk, round by
// round (plans with scratch run large calls in rounds sized to the scratch memory), once
// per round when streaming or once per tile of the share when tiled (MSCCL's model).
// Cross-block dependencies count steps done in this call: block b's counter holds
// `tiles_done * nsteps(b) + steps_done_in_tile`. The last block to finish zeroes the
// counters, so the next call (stream-ordered after this one) starts from zero.

namespace braid {

// Layouts shared with program.rs: every field little-endian, offsets as written.
struct End {          // one lane of one connection end: 32 bytes
  u64 slots;          // address of slot 0 (0: no connection)
  u64 head;           // address of the head counter (Simple lane)
  u64 tail;           // address of the tail counter
  u32 counter;        // index of this end's counter in the rank's counter array
  u32 nslots;         // slots; bit 31 (GPU_SCOPE): both ends on this GPU in one process;
                      // bit 30 (NET): a proxy carries the lane over the network
};

// `End.nslots`'s flag: the peer's blocks run on this GPU in this process and the FIFO
// lies in this GPU's memory, so GPU-scope fences order the protocol.
constexpr u32 GPU_SCOPE = 1u << 31;
// `End.nslots`'s flag: the lane is carried by a proxy thread (the network transport,
// runtime/cuda/src/net/). Its sender also writes each slice's byte count at
// `head[1 + slot]` before publishing `head`, and publishes `head` on the LL lane too,
// so the proxy knows what to forward and when; the receiver's side is unchanged.
constexpr u32 NET = 1u << 30;
// `End.nslots`'s flag: every step of the block that uses this end is DIRECT, so a call
// whose peer is in the launch (`direct_pair`) never touches the end.
constexpr u32 DIRECT_ONLY = 1u << 29;

struct BlockDesc {    // one grid block: 160 bytes
  u32 block;          // plan block id
  u32 replica;
  u32 first_step;     // into the step array
  u32 nsteps;
  End send[BRAID_LANES];  // [lane]: 0 Simple, 1 LL, 2 LL128
  End recv[BRAID_LANES];
  u32 first_dep;      // the block's dependencies: [first_dep, first_dep + ndeps)
  u32 ndeps;
  u32 send_rank;      // the rank the block sends to (NO_RANK: none)
  u32 recv_rank;      // the rank it receives from
};
constexpr u32 NO_RANK = 0xffffffffu;

enum Kind { NOP = 0, S = 1, R = 2, RCS = 3, RRS = 4, RRC = 5, RRCS = 6, CPY = 7, RE = 8 };
// `StepDesc.kind`'s flag: another block waits for this step (or it is the block's last),
// so its end is published in the block's progress counter. Other steps skip the fence
// and the store; a later published step covers them (counters only grow).
constexpr u32 PUBLISH = 1u << 8;
// `StepDesc.kind`'s flag: the step may bypass the FIFO when the peer's call is in this
// launch (`direct_pair`). On a send (whose source is `in`, never written by the sender):
// skipped, since the receiver reads the sender's `in` itself. On its matching receive
// (R or RRC): the received operand is the sender's `in` at chunk `poff` onwards.
constexpr u32 DIRECT = 1u << 9;
// `StepDesc.kind`'s flags: the first step of a chain of reductions into one destination,
// and each later one (program.rs's `CHAIN_HEAD`). When every peer operand of the chain
// can be read directly in this launch (`chain_ready`), the chain runs as one pass
// (`fused`): by the head alone, or, where it may split and its range is large enough
// (`chain_parts`), by the blocks of all its steps, each its part; the later steps wait
// for nothing. Else every step runs as it stands. `StepDesc.chain` (program.rs's
// `chain_word`): `first << 13 | splits << 12 | steps << 8 | position << 4 | n`.
constexpr u32 CHAIN_HEAD = 1u << 10;
constexpr u32 CHAIN_LINK = 1u << 11;
constexpr u32 KIND_MASK = 0xff;
// The most operands a chain run as one pass has (program.rs's `CHAIN_MAX`).
constexpr u32 FUSE_MAX = BRAID_MAX_LOCAL;

struct StepDesc {     // 32 bytes
  u32 kind;           // Kind | PUBLISH | DIRECT | CHAIN_HEAD | CHAIN_LINK
  int sbuf;           // 0 in, 1 out, 2 scratch, -1 none
  int dbuf;
  u32 soff;           // first chunk
  u32 doff;
  u32 count;          // chunks
  u32 poff;           // DIRECT receive: first chunk of the sender's `in`
  u32 chain;          // CHAIN_*: first operand << 8 | operands
};

struct ChainOp {      // 16 bytes: one operand of a chain, in the order they combine
  u32 rank;           // the peer whose `in` it is (NO_RANK: this rank's own buffer)
  int buf;            // own buffer: 0 in, 1 out, 2 scratch
  u32 off;            // first chunk
  u32 pad;
};

struct StepDeps {     // 8 bytes, parallel to the steps
  u32 first;          // into the dependency array
  u32 n;
};

struct DepDesc {      // 12 bytes
  u32 block;          // plan block of this rank (same replica)
  u32 step;           // steps of it that must be done in the current tile, 1-based
  u32 nsteps;         // steps of that block
};

struct Table {        // one rank's prepared plan: 128 bytes
  u64 progress;       // u64 per grid block; then one u64: blocks finished this call
  u64 counters;       // u64 per connection-end lane: slices sent / received so far
  u64 fail;           // u32 device word: nonzero once this rank's call failed
  u64 report;         // u32 host-mapped copy of it
  u64 abort;          // u32 host-mapped: nonzero to abort
  u64 scratch;        // the rank's scratch memory
  u64 timeout_ns;
  u64 blocks;         // BlockDesc[grid]
  u64 steps;          // StepDesc[]
  u64 step_deps;      // StepDeps[], parallel to steps
  u64 deps;           // DepDesc[]
  u32 nblocks;        // plan blocks of this rank
  u32 grid;           // nblocks * replicas
  u32 replicas;
  u32 tiled;          // 1: replay per tile (MSCCL's model)
  u32 out_chunks;     // chunks of `out` (avg divides them)
  u32 sync;           // 1: a step waits for another block's (progress is published)
  u64 trace;          // 0, or u64 pairs per step of replica 0: start and end (ns)
  u64 chains;         // ChainOp[]
};

struct CallArgs {     // 64 bytes
  u64 in;             // the caller's `in` (0: none on this rank)
  u64 out;
  u64 count;          // NCCL's count: elements of one segment
  u64 chunk_elems;
  u64 round_elems;
  u64 plan;           // the prepared plan's digest (with its replicas)
  u32 per_segment;
  u32 avg_n;          // avg: divide by this at the end (0: not avg)
  u32 rank;           // the call's rank
  u32 flags;          // IN_UNTOUCHED
};
// `CallArgs.flags`: the call leaves `in` as it was (out of place: `in` and `out` do not
// overlap), so the ranks of its launch may read it while it runs.
constexpr u32 IN_UNTOUCHED = 1;

// Whether the send of `s`'s rank and the receive of `r`'s rank of one launch go without
// the FIFO: both ends compute it from the same launch arguments, so they agree. The
// sender's `in` is ready when the launch starts and untouched until it ends, and both
// calls have the same plan and geometry, so the chunks the receiver reads lie where the
// sender's program (checked against its buffers) would have read them.
__device__ __forceinline__ bool direct_pair(const CallArgs& s, const CallArgs& r) {
  return (s.flags & IN_UNTOUCHED) != 0 && s.in != 0 && s.plan == r.plan && s.count == r.count &&
         s.chunk_elems == r.chunk_elems && s.round_elems == r.round_elems &&
         s.per_segment == r.per_segment;
}

struct Launch {
  u32 n;                          // ranks in this launch
  u32 first[BRAID_MAX_LOCAL + 1]; // first grid block of each, and the total
  u64 table[BRAID_MAX_LOCAL];     // const Table*
  CallArgs call[BRAID_MAX_LOCAL];
};

// A block's step program, copied to shared memory when it is this small (one parallel
// load at the block's start instead of dependent global loads at every step).
constexpr u32 PROG_MAX = 64;
// Plan blocks per replica whose progress a block remembers (`Ctx::known`).
constexpr u32 KNOWN_MAX = 64;

// One connection end as a block uses it.
struct Port {
  char* slots;
  volatile u64* head;
  volatile u64* tail;
  u64 seen;               // the peer's counter as last read (a lower bound of it): the
                          // receiver's tail at a send end, the sender's head at a receive end
  u32 nslots;
  bool sys;               // system-scope fences on this end (see GPU_SCOPE)
  bool net;               // a proxy forwards this end's slices (see NET)
};

// A block's view of its call.
struct Ctx {
  Watch w;
  const StepDesc* steps;  // the block's steps (shared or global memory)
  const StepDeps* sdeps;
  const DepDesc* deps;    // index with StepDeps.first - dep0
  u32 dep0;
  u64* known;             // shared: progress of this replica's blocks seen so far (or null)
  char* buf[3];
  u64 count, chunk_elems, round_elems;
  u32 per_segment;
  u64 w0;                 // start of the current round's window
  u64 lo, hi;             // element range of every chunk for this replica and tile
  volatile u64* progress; // this replica's counters
  Port snd;               // the send end
  u64 sent;
  Port rcv;               // the receive end
  u64 received;
  char* peer_in;          // the receive peer's `in` when DIRECT receives read it (else null)
  bool skip_send;         // the send peer reads this rank's `in` itself: DIRECT sends skip
};

// The launch's calls as chains look them up (`chain_ready`), in shared memory (not in
// `Ctx`: registers are few where the interpreter's copies run): each call's rank, and its
// `in` where this block's call may read it directly, else null; and the chains' operands.
__shared__ u32 launch_n;
__shared__ u32 launch_rank[BRAID_MAX_LOCAL];
__shared__ char* launch_in[BRAID_MAX_LOCAL];
__shared__ const ChainOp* chain_ops;

__device__ __forceinline__ void set_port(Port& p, const End& e) {
  p.slots = reinterpret_cast<char*>(e.slots);
  p.head = reinterpret_cast<volatile u64*>(e.head);
  p.tail = reinterpret_cast<volatile u64*>(e.tail);
  p.nslots = e.nslots & ~(GPU_SCOPE | NET | DIRECT_ONLY);
  p.sys = (e.nslots & GPU_SCOPE) == 0;
  p.net = (e.nslots & NET) != 0;
  p.seen = 0;
}

// Where chunk `chunk` of buffer `b` is for the current range: its element `lo`, and how
// many of [lo, hi) exist (a caller's buffer has padding after a short chunk; scratch is
// all there, holding the round's window).
struct Span {
  T* ptr;
  u64 valid;
};

// Chunk `chunk` of a caller's buffer at `base` with this call's geometry (also a peer's
// `in`, for a DIRECT receive: same plan, same geometry).
__device__ __forceinline__ Span span_at(const Ctx& c, char* base, u32 chunk) {
  const u64 seg = chunk / c.per_segment, pos = chunk % c.per_segment;
  const u64 first = pos * c.chunk_elems;
  const u64 len = c.count > first ? min64(c.chunk_elems, c.count - first) : 0;
  Span s;
  s.ptr = reinterpret_cast<T*>(base) + (seg * c.count + first + c.lo);
  s.valid = valid_in(len, c.lo, c.hi - c.lo);
  return s;
}

__device__ __forceinline__ Span span(const Ctx& c, int b, u32 chunk) {
  if (b < 0) {
    Span s;
    s.ptr = nullptr;
    s.valid = 0;
    return s;
  }
  if (b == 2) {
    Span s;
    s.ptr = reinterpret_cast<T*>(c.buf[2]) + ((u64)chunk * c.round_elems + (c.lo - c.w0));
    s.valid = c.hi - c.lo;
    return s;
  }
  // (A select, not an index: an array indexed at run time would live in local memory.)
  return span_at(c, b == 0 ? c.buf[0] : c.buf[1], chunk);
}

// Counters only grow, so a value read earlier is a lower bound: a wait that an earlier
// read already satisfies needs no new read (nor fence: the acquire after that read
// covers everything it observed), as NCCL's primitives cache the peer's step.
__device__ __forceinline__ bool wait_recv(Ctx& c) {
  if (c.rcv.seen > c.received) return true;
  const u64 want = c.received;
  return wait_counter(c.w, c.rcv.head, [=](u64 h) { return h > want; }, WAIT_RECV,
                      c.rcv.sys, c.rcv.seen, nullptr);
}
__device__ __forceinline__ bool wait_send(Ctx& c) {
  if (c.sent - c.snd.seen < (u64)c.snd.nslots) return true;
  const u64 sent = c.sent, n = c.snd.nslots;
  return wait_counter(c.w, c.snd.tail, [=](u64 t) { return sent - t < n; }, WAIT_SEND,
                      c.snd.sys, c.snd.seen, nullptr);
}
__device__ __forceinline__ void recv_done(Ctx& c) {
  __syncthreads();
  c.received++;
  if (threadIdx.x == 0) *c.rcv.tail = c.received;
}
// The barrier orders every thread's slot writes before thread 0's system-scope release
// fence (fences are cumulative in the PTX memory model), which orders them before `head`.
// A proxied end (NET) also states the slice's `bytes` for its proxy.
__device__ __forceinline__ void send_done(Ctx& c, u64 bytes) {
  __syncthreads();
  c.sent++;
  if (threadIdx.x == 0) {
    if (c.snd.net) c.snd.head[1 + (c.sent - 1) % c.snd.nslots] = bytes;
    fence_acq_rel(c.snd.sys);
    *c.snd.head = c.sent;
  }
}
// An LL slice of `lines` lines was just sent (after the barrier that ends `ll_move`): a
// proxied end publishes it as Simple does, since the proxy cannot tell a slice's end
// from its flags alone.
__device__ __forceinline__ void ll_sent(Ctx& c, u64 lines) {
  c.sent++;
  if (c.snd.net && threadIdx.x == 0) {
    c.snd.head[1 + (c.sent - 1) % c.snd.nslots] = 16 * lines;
    fence_acq_rel_sys();
    *c.snd.head = c.sent;
  }
}

// One slice of `n` elements over LL: `s` local source (sv existing), `d` local
// destination (dv existing), `in` / `out` the receive / send slots with the flags
// expected / written. Block-wide; false on failure.
template <int KIND>
__device__ bool ll_move(Ctx& c, T* d, u64 dv, const T* s, u64 sv, u64 n, const char* in,
                        u32 in_flag, char* out, u32 out_flag) {
  const u64 lines = (n + LINE - 1) / LINE;
  const bool recv = KIND == R || KIND == RCS || KIND == RRS || KIND == RRC || KIND == RRCS;
  const bool send = KIND == S || KIND == RCS || KIND == RRS || KIND == RRCS;
  const bool local = KIND == S || KIND == RRS || KIND == RRC || KIND == RRCS;
  const bool store = KIND == R || KIND == RCS || KIND == RRC || KIND == RRCS;
  bool ok = true;
  for (u64 l = threadIdx.x; l < lines; l += blockDim.x) {
    const u64 first = l * LINE;
    Word x, y;
    y.u = 0;
    if (recv && !ll_load(c.w, in, l, in_flag, y.u)) {
      ok = false;
      break;
    }
    if (local) {
      x = load_word(s + first, (u32)valid_in(sv, first, LINE));
      if (recv) {
#pragma unroll
        for (u32 k = 0; k < LINE; k++) x.t[k] = apply<T, OP>(x.t[k], y.t[k]);
      }
    } else {
      x = y;
    }
    if (send) ll_store(out, l, x.u, out_flag);
    if (store) {
      const u32 m = (u32)valid_in(dv, first, LINE);
      if (m > 0) store_word(d + first, x, m);
    }
  }
  return __syncthreads_and(ok) != 0;
}

// One slice of `n` elements over LL128, as `ll_move`: each warp takes four lines at a
// time, eight threads a line, 16 bytes a thread (the eighth's second half the flag).
// Block-wide; false on failure.
template <int KIND>
__device__ bool ll128_move(Ctx& c, T* d, u64 dv, const T* s, u64 sv, u64 n, const char* in,
                           u64 in_flag, char* out, u64 out_flag) {
  const u64 lines = (n * sizeof(T) + LL128_DATA - 1) / LL128_DATA;
  const bool recv = KIND == R || KIND == RCS || KIND == RRS || KIND == RRC || KIND == RRCS;
  const bool send = KIND == S || KIND == RCS || KIND == RRS || KIND == RRCS;
  const bool local = KIND == S || KIND == RRS || KIND == RRC || KIND == RRCS;
  const bool store = KIND == R || KIND == RCS || KIND == RRC || KIND == RRCS;
  const u32 lane = threadIdx.x % 32, sub = lane % 8;
  const u64 warps = blockDim.x / 32;
  bool ok = true;
  for (u64 base = (threadIdx.x / 32) * 4; base < lines; base += warps * 4) {
    const u64 l = base + lane / 8;
    const bool active = l < lines;
    // This thread's elements: one word (8 bytes) at `first`, a second after it (the
    // eighth thread's second word is the flag).
    const u64 first = (l * LL128_DATA + 16 * sub) / sizeof(T);
    const bool two = sub < 7;
    Word ya, yb, xa, xb;
    ya.u = 0;
    yb.u = 0;
    if (recv && !ll128_load(c.w, in + 128 * l, sub, active, in_flag, ya.u, yb.u)) {
      ok = false;
      break;
    }
    if (active) {
      if (local) {
        xa = load_word(s + first, (u32)valid_in(sv, first, LINE));
        xb.u = 0;
        if (two) xb = load_word(s + first + LINE, (u32)valid_in(sv, first + LINE, LINE));
        if (recv) {
#pragma unroll
          for (u32 k = 0; k < LINE; k++) {
            xa.t[k] = apply<T, OP>(xa.t[k], ya.t[k]);
            xb.t[k] = apply<T, OP>(xb.t[k], yb.t[k]);
          }
        }
      } else {
        xa = ya;
        xb = yb;
      }
    }
    // The line's eight stores leave as one instruction of the warp.
    __syncwarp();
    if (send && active) ll128_store(out + 128 * l, sub, xa.u, two ? xb.u : out_flag);
    if (store && active) {
      const u32 ma = (u32)valid_in(dv, first, LINE);
      if (ma > 0) store_word(d + first, xa, ma);
      if (two) {
        const u32 mb = (u32)valid_in(dv, first + LINE, LINE);
        if (mb > 0) store_word(d + first + LINE, xb, mb);
      }
    }
  }
  return __syncthreads_and(ok) != 0;
}

// One plan step: `count` chunks from `sb`/`so` and/or to `db`/`doff`, each chunk's
// [lo, hi) cut into pieces of one FIFO slot, exactly as the host executor slices
// messages. Returns false when the rank failed (the caller stops the block).
template <int KIND>
__device__ bool step(Ctx& c, int sb, u32 so, int db, u32 doff, u32 count, bool direct, u32 poff) {
  const bool recv = KIND == R || KIND == RCS || KIND == RRS || KIND == RRC || KIND == RRCS;
  const bool send = KIND == S || KIND == RCS || KIND == RRS || KIND == RRCS;
  const u64 piece = BRAID_PIECE_BYTES / sizeof(T);
  const u64 len = c.hi - c.lo;
  if (direct) {
    // Without the FIFO (see DIRECT): the receiver reads the sender's `in` where the
    // sender's step would have read it, in the same operand order as through the FIFO
    // (so the bits are the same); the sender has nothing to do.
    if (KIND == S && c.skip_send) return true;
    if ((KIND == R || KIND == RRC) && c.peer_in != nullptr) {
      for (u32 i = 0; i < count; i++) {
        const Span p = span_at(c, c.peer_in, poff + i);
        const Span d = span(c, db, doff + i);
        if (KIND == R) {
          move(d.ptr, d.valid, nullptr, 0, p.ptr, p.valid, nullptr, 0, len);
        } else {
          const Span l = span(c, sb, so + i);
          move(d.ptr, d.valid, nullptr, 0, l.ptr, l.valid, p.ptr, p.valid, len);
        }
      }
      return true;
    }
  }
  for (u32 i = 0; i < count; i++) {
    const Span s = span(c, sb, so + i);
    const Span d = span(c, db, doff + i);
    for (u64 off = 0; off < len; off += piece) {
      const u64 n = min64(len - off, piece);
      const u64 sv = valid_in(s.valid, off, n), dv = valid_in(d.valid, off, n);
      T* sp = s.ptr == nullptr ? nullptr : s.ptr + off;
      T* dp = d.ptr == nullptr ? nullptr : d.ptr + off;
      char* in = nullptr;
      char* out = nullptr;
      if (recv) {
        if (!BRAID_LL && !BRAID_LL128 && !wait_recv(c)) return false;
        in = c.rcv.slots + (c.received % c.rcv.nslots) * BRAID_SLOT_BYTES;
      }
      if (send) {
        if (!wait_send(c)) return false;
        out = c.snd.slots + (c.sent % c.snd.nslots) * BRAID_SLOT_BYTES;
      }
      if ((BRAID_LL || BRAID_LL128) && (recv || send)) {
        if (BRAID_LL128) {
          if (!ll128_move<KIND>(c, dp, dv, sp, sv, n, in, c.received + 1, out, c.sent + 1))
            return false;
        } else if (!ll_move<KIND>(c, dp, dv, sp, sv, n, in, (u32)(c.received + 1), out,
                                  (u32)(c.sent + 1))) {
          return false;
        }
        if (recv) {
          c.received++;
          if (threadIdx.x == 0) *c.rcv.tail = c.received;
        }
        // (The byte count a proxy would forward, in 16-byte lines; LL128 never runs on
        // proxied ends.)
        if (send)
          ll_sent(c, BRAID_LL128 ? 8 * ((n * sizeof(T) + LL128_DATA - 1) / LL128_DATA)
                                 : (n + LINE - 1) / LINE);
        continue;
      }
      T* tin = reinterpret_cast<T*>(in);
      T* tout = reinterpret_cast<T*>(out);
      switch (KIND) {
        case S: move(tout, n, nullptr, 0, sp, sv, nullptr, 0, n); break;
        case R: move(dp, dv, nullptr, 0, tin, n, nullptr, 0, n); break;
        case RCS: move(tout, n, dp, dv, tin, n, nullptr, 0, n); break;
        case RRS: move(tout, n, nullptr, 0, sp, sv, tin, n, n); break;
        case RRC: move(dp, dv, nullptr, 0, sp, sv, tin, n, n); break;
        case RRCS: move(tout, n, dp, dv, sp, sv, tin, n, n); break;
        case CPY: if (sp != dp) move(dp, dv, nullptr, 0, sp, sv, nullptr, 0, n); break;
        case RE: move(dp, dv, nullptr, 0, dp, dv, sp, sv, n); break;
      }
      if (recv) recv_done(c);
      if (send) send_done(c, n * sizeof(T));
    }
  }
  return true;
}

__device__ bool dispatch(Ctx& c, const StepDesc& st) {
  const bool d = (st.kind & DIRECT) != 0;
  switch (st.kind & KIND_MASK) {
    case S: return step<S>(c, st.sbuf, st.soff, st.dbuf, st.doff, st.count, d, st.poff);
    case R: return step<R>(c, st.sbuf, st.soff, st.dbuf, st.doff, st.count, d, st.poff);
    case RCS: return step<RCS>(c, st.sbuf, st.soff, st.dbuf, st.doff, st.count, false, 0);
    case RRS: return step<RRS>(c, st.sbuf, st.soff, st.dbuf, st.doff, st.count, false, 0);
    case RRC: return step<RRC>(c, st.sbuf, st.soff, st.dbuf, st.doff, st.count, d, st.poff);
    case RRCS: return step<RRCS>(c, st.sbuf, st.soff, st.dbuf, st.doff, st.count, false, 0);
    case CPY: return step<CPY>(c, st.sbuf, st.soff, st.dbuf, st.doff, st.count, false, 0);
    case RE: return step<RE>(c, st.sbuf, st.soff, st.dbuf, st.doff, st.count, false, 0);
    default: return true;
  }
}

// Whether the chain whose operands `word` names runs as one pass in this call: every
// peer operand's call is in this launch and may be read directly (as its DIRECT receive
// would). Thread k looks up operand k (the operands load at once, not one after
// another) and leaves its buffer in `fbase[k]`; block-wide.
__shared__ char* fbase[FUSE_MAX];
__shared__ int fbuf[FUSE_MAX];
__shared__ u32 foff[FUSE_MAX];
__device__ bool chain_ready(const Ctx& c, u32 word) {
  const u32 first = word >> 13, n = word & 0xf;
  const bool fits = n >= 2 && n <= FUSE_MAX;
  bool found = true;
  if (fits && threadIdx.x < n) {
    const u32 k = threadIdx.x;
    const ChainOp op = chain_ops[first + k];
    char* base = nullptr;
    if (op.rank == NO_RANK) {
      base = op.buf == 0 ? c.buf[0] : op.buf == 1 ? c.buf[1] : c.buf[2];
    } else {
      for (u32 j = 0; j < launch_n; j++)
        if (launch_rank[j] == op.rank) base = launch_in[j];
    }
    found = base != nullptr;
    fbase[k] = base;
    fbuf[k] = op.rank == NO_RANK ? op.buf : -1;
    foff[k] = op.off;
  }
  return __syncthreads_and(found) != 0 && fits;
}

// A chain as one pass (after `chain_ready`): chunk by chunk, `dst = op0 (+) op1 (+) ...`
// element by element in the chain's order (so the bits are those of its steps one after
// another). An operand's padding reads as zero, as in `move`. The operands' spans come
// through shared memory.
__shared__ const T* fp[FUSE_MAX];
__shared__ u64 fv[FUSE_MAX];

// Element `e` of `fp[0] (+) ... (+) fp[n - 1]` (an operand's padding reads as zero), every
// operand's element loaded before the first is combined: one load latency.
__device__ __forceinline__ T combined(u64 e, u32 n) {
  T x[FUSE_MAX];
#pragma unroll
  for (u32 k = 0; k < FUSE_MAX; k++)
    x[k] = k < n && e < fv[k] ? ldcg(fp[k] + e) : Num<T>::zero();
  T acc = x[0];
#pragma unroll
  for (u32 k = 1; k < FUSE_MAX; k++)
    if (k < n) acc = apply<T, OP>(acc, x[k]);
  return acc;
}
__device__ __forceinline__ void fused_pass(T* d, u64 dv, u32 n) {
  u64 full = dv;
  bool vec = aligned16(d);
  for (u32 k = 0; k < n; k++) {
    full = min64(full, fv[k]);
    vec = vec && aligned16(fp[k]);
  }
  u64 done = 0;
  if (vec) {
    const u64 m = full / UNIT;
    done = m * UNIT;
    // One operand's vector in flight at a time per thread (the block's other threads
    // keep the memory busy): measured faster than 2 or 4 at once, whose registers made the
    // whole interpreter spill. Written as groups of one operand, with the first combined
    // like the rest: this form ran a one-block 8-operand pass twice as fast as the same
    // loop with the first load peeled out (docs/perf.md).
    for (u64 v = threadIdx.x; v < m; v += blockDim.x) {
      uint4 acc;
      for (u32 k = 0; k < n; k++) {
        const uint4 x = BRAID_LD(reinterpret_cast<const uint4*>(fp[k]) + v);
        acc = k == 0 ? x : apply_pack<T, OP>(acc, x);
      }
      reinterpret_cast<uint4*>(d)[v] = acc;
    }
  }
  for (u64 e = done + threadIdx.x; e < dv; e += blockDim.x) d[e] = combined(e, n);
}

// Bytes each block of a chain's one pass takes at least before the pass is shared among
// them: smaller calls leave it to the head (its links then start and end at once).
constexpr u64 SPLIT_MIN_BYTES = 4096;

// How many blocks run the one pass of the chain whose word is `word` over `count` chunks
// of the current range: all its steps' where it may split and each part would be large
// enough, else 1 (the head). The same for every block of the chain (same range).
__device__ __forceinline__ u32 chain_parts(const Ctx& c, u32 word, u32 count) {
  const u32 steps = (word >> 8) & 0xf;
  const bool splits = (word >> 12) & 1;
  const u64 bytes = (u64)count * (c.hi - c.lo) * sizeof(T);
  return splits && steps > 1 && bytes >= steps * SPLIT_MIN_BYTES ? steps : 1;
}

// Part `part` of `parts` of a chain's one pass: of each chunk, this block's share of
// whole vectors (the last part the rest).
__device__ __forceinline__ void fused(Ctx& c, int db, u32 doff, u32 count, u32 n, u32 part,
                                      u32 parts) {
  for (u32 i = 0; i < count; i++) {
    const Span d = span(c, db, doff + i);
    const u64 per = ((d.valid + parts - 1) / parts + UNIT - 1) / UNIT * UNIT;
    const u64 from = min64(d.valid, per * part);
    const u64 to = min64(d.valid, from + per);
    if (threadIdx.x < n) {
      const u32 k = threadIdx.x;
      const Span o = fbuf[k] == 2 ? span(c, 2, foff[k] + i) : span_at(c, fbase[k], foff[k] + i);
      fp[k] = o.ptr + from;
      fv[k] = o.valid > from ? min64(o.valid, to) - from : 0;
    }
    __syncthreads();
    fused_pass(d.ptr + from, to - from, n);
    __syncthreads();
  }
}

// Waits until plan block `b` of this replica has published `target` steps; what it
// reads is remembered in `c.known` (when the replica has few enough blocks) so later
// waits that it already satisfies read nothing.
__device__ __forceinline__ bool wait_dep(Ctx& c, u32 b, u64 target) {
  u64* keep = c.known != nullptr ? c.known + b : nullptr;
  if (keep != nullptr && *keep >= target) return true;
  u64 seen;
  // Blocks of one rank run on one GPU: GPU scope orders their data.
  return wait_counter(c.w, c.progress + b, [=](u64 v) { return v >= target; }, WAIT_DEP,
                      false, seen, keep);
}

// Runs the block's steps once over [c.lo, c.hi) as tile number `tile` of this call.
// `publish_last`: the block's last step is published too (a barrier over the replica
// waits for every block's last step), else only the steps another block waits for.
__device__ bool run_steps(Ctx& c, const Table& t, const BlockDesc& bd, u64 tile,
                          bool publish_last) {
  const StepDesc* steps = c.steps;
  const StepDeps* sdeps = c.sdeps;
  const DepDesc* deps = c.deps;
  // BRAID_TRACE: replica 0's steps record when they start (first tile, before their
  // waits) and end (last tile), from the GPU's global timer.
  u64* trace = t.trace != 0 && bd.replica == 0 && threadIdx.x == 0
                   ? reinterpret_cast<u64*>(t.trace) + 2 * (u64)bd.first_step
                   : nullptr;
  for (u32 i = 0; i < bd.nsteps; i++) {
    const StepDesc st = steps[i];
    const StepDeps sd = sdeps[i];
    if (trace != nullptr && tile == 0) trace[2 * i] = now_ns();
    // A chain run as one pass: by its head, or shared by its steps' blocks; its later
    // links wait for nothing (a chain that splits waits for nothing at all).
    const bool fuse = (st.kind & (CHAIN_HEAD | CHAIN_LINK)) != 0 && chain_ready(c, st.chain);
    const bool link = fuse && (st.kind & CHAIN_LINK) != 0;
    const u32 parts = fuse ? chain_parts(c, st.chain, st.count) : 1;
    const bool idle = link && parts == 1;
    if (!link) {
      for (u32 j = 0; j < sd.n; j++) {
        const DepDesc dep = deps[sd.first - c.dep0 + j];
        if (!wait_dep(c, dep.block, tile * dep.nsteps + dep.step)) return false;
      }
    }
    if (fuse) {
      if (!idle) fused(c, st.dbuf, st.doff, st.count, st.chain & 0xf, (st.chain >> 4) & 0xf, parts);
    } else if (!dispatch(c, st)) {
      return false;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      // (A link its chain's head ran did nothing: it ends as it started.)
      if (trace != nullptr) trace[2 * i + 1] = idle ? trace[2 * i] : now_ns();
      if ((st.kind & PUBLISH) || (publish_last && i + 1 == bd.nsteps)) {
        // Release at GPU scope: the block's writes before its progress (cumulative
        // after the barrier).
        fence_acq_rel_gpu();
        c.progress[bd.block] = tile * bd.nsteps + i + 1;
      }
    }
  }
  return true;
}

// Waits until every block of this replica finished the round (`tiles` tiles so far).
__device__ bool replica_barrier(Ctx& c, const Table& t, const BlockDesc& bd, u64 tiles) {
  const BlockDesc* all = reinterpret_cast<const BlockDesc*>(t.blocks) + bd.replica * t.nblocks;
  for (u32 b = 0; b < t.nblocks; b++) {
    if (!wait_dep(c, b, tiles * all[b].nsteps)) return false;
  }
  return true;
}

// avg: once every block of this replica finished the round, divides this block's share
// of the output chunks' range [lo, hi).
__device__ bool finish_avg(Ctx& c, const Table& t, const BlockDesc& bd, u64 tiles, u32 n,
                           u64 lo, u64 hi) {
  if (!replica_barrier(c, t, bd, tiles)) return false;
  c.lo = lo;
  c.hi = hi;
  for (u32 chunk = bd.block; chunk < t.out_chunks; chunk += t.nblocks) {
    const Span o = span(c, 1, chunk);
    for (u64 i = threadIdx.x; i < o.valid; i += blockDim.x) o.ptr[i] = Num<T>::avg(o.ptr[i], n);
  }
  __syncthreads();
  return true;
}

// Part `k` of `parts` of [lo, hi), cut at whole vectors from lo (geometry.rs's `share`).
__device__ __forceinline__ void share(u64 lo, u64 hi, u64 k, u64 parts, u64& a, u64& b) {
  const u64 len = hi - lo, units = (len + UNIT - 1) / UNIT;
  a = lo + min64(len, k * units / parts * UNIT);
  b = lo + min64(len, (k + 1) * units / parts * UNIT);
}

__device__ void run(const Table* tp, const Launch& L, u32 s, u32 g) {
  const CallArgs& a = L.call[s];
  // The table and the block's descriptor (which follows it at a fixed offset, so both
  // load at once), copied to shared memory: read there, they cost no global round trip
  // after the fences and barriers below, which would otherwise make the compiler read
  // them again.
  __shared__ Table t;
  __shared__ BlockDesc bd;
  {
    constexpr u32 NT = sizeof(Table) / 8, NB = sizeof(BlockDesc) / 8;
    const u64* st = reinterpret_cast<const u64*>(tp);
    const u64* sb =
        reinterpret_cast<const u64*>(reinterpret_cast<const char*>(tp) + BRAID_BLOCKS_AT) + g * NB;
    if (threadIdx.x < NT) {
      reinterpret_cast<u64*>(&t)[threadIdx.x] = __ldg(st + threadIdx.x);
    } else if (threadIdx.x < NT + NB) {
      reinterpret_cast<u64*>(&bd)[threadIdx.x - NT] = __ldg(sb + (threadIdx.x - NT));
    }
  }
  // DIRECT steps: whether this block's peers run in this launch with the same call
  // (from the launch arguments alone, while the descriptors load).
  // (Every index constant: a launch argument indexed at run time, or its address taken,
  // would be copied to local memory by every thread.)
  char* peer_in = nullptr;
  bool skip_send = false;
  if (threadIdx.x == 0) {
    launch_n = L.n;
    chain_ops = reinterpret_cast<const ChainOp*>(t.chains);
  }
  __syncthreads();
#pragma unroll
  for (u32 j = 0; j < BRAID_MAX_LOCAL; j++) {
    if (j < L.n) {
      const bool reads = direct_pair(L.call[j], a);
      if (L.call[j].rank == bd.recv_rank && reads) peer_in = reinterpret_cast<char*>(L.call[j].in);
      if (L.call[j].rank == bd.send_rank && direct_pair(a, L.call[j])) skip_send = true;
      if (threadIdx.x == 0) {
        launch_rank[j] = L.call[j].rank;
        launch_in[j] = reads ? reinterpret_cast<char*>(L.call[j].in) : nullptr;
      }
    }
  }
  Ctx c;
  c.w.fail = reinterpret_cast<volatile u32*>(t.fail);
  c.w.report = reinterpret_cast<volatile u32*>(t.report);
  c.w.abort = reinterpret_cast<volatile u32*>(t.abort);
  c.w.timeout_ns = t.timeout_ns;
  c.w.block = bd.block;
  c.buf[0] = reinterpret_cast<char*>(a.in);
  c.buf[1] = reinterpret_cast<char*>(a.out);
  c.buf[2] = reinterpret_cast<char*>(t.scratch);
  c.count = a.count;
  c.chunk_elems = a.chunk_elems;
  c.round_elems = a.round_elems;
  c.per_segment = a.per_segment;
  c.progress = reinterpret_cast<volatile u64*>(t.progress) + (u64)bd.replica * t.nblocks;
  c.peer_in = peer_in;
  c.skip_send = skip_send;
  u64* counters = reinterpret_cast<u64*>(t.counters);
  const End& se = bd.send[BRAID_LANE];
  const End& re = bd.recv[BRAID_LANE];
  set_port(c.snd, se);
  set_port(c.rcv, re);
  // An end whose every step reads (or is read) directly is not touched by this call
  // when its peer is in the launch: neither its counter nor the peer's is read.
  const bool use_snd = se.slots != 0 && !((se.nslots & DIRECT_ONLY) != 0 && skip_send);
  const bool use_rcv = re.slots != 0 && !((re.nslots & DIRECT_ONLY) != 0 && peer_in != nullptr);
  // The step program: into shared memory with one load per thread when it is small,
  // else read where it lies, step by step.
  __shared__ StepDesc prog_steps[PROG_MAX];
  __shared__ StepDeps prog_sdeps[PROG_MAX];
  __shared__ DepDesc prog_deps[PROG_MAX];
  __shared__ u64 known[KNOWN_MAX];
  __shared__ int failed;
  const StepDesc* gsteps = reinterpret_cast<const StepDesc*>(t.steps) + bd.first_step;
  const StepDeps* gsdeps = reinterpret_cast<const StepDeps*>(t.step_deps) + bd.first_step;
  const DepDesc* gdeps = reinterpret_cast<const DepDesc*>(t.deps);
  const bool small = bd.nsteps <= PROG_MAX && bd.ndeps <= PROG_MAX;
  if (small) {
    for (u32 i = threadIdx.x; i < bd.nsteps; i += blockDim.x) {
      prog_steps[i] = gsteps[i];
      prog_sdeps[i] = gsdeps[i];
    }
    for (u32 i = threadIdx.x; i < bd.ndeps; i += blockDim.x) prog_deps[i] = gdeps[bd.first_dep + i];
  }
  for (u32 i = threadIdx.x; i < KNOWN_MAX; i += blockDim.x) known[i] = 0;
  // A rank that failed stays failed (the host refuses its later calls); the abort word
  // lives in host memory, so it is read in waits only, not on every block's start.
  // The connection counters, and the peers' (with acquire: the first wait of the call
  // then usually finds its answer in hand, both ends of the previous call being done
  // and the FIFO drained, instead of starting its own round trip), load meanwhile.
  __shared__ u64 seen0[4];
  // Each by a thread of its own warp: an acquiring load holds back its thread's later
  // loads, so one thread would take them one after another.
  static_assert(BRAID_THREADS > 64, "the prologue's loads take threads of three warps");
  if (threadIdx.x == 0) {
    failed = *c.w.fail != 0;
    seen0[2] = use_snd ? counters[se.counter] : 0;
    seen0[3] = use_rcv ? counters[re.counter] : 0;
  } else if (threadIdx.x == 32) {
    seen0[0] = use_snd ? load_acquire(c.snd.tail, c.snd.sys) : 0;
  } else if (threadIdx.x == 64) {
    seen0[1] = use_rcv && !BRAID_LL && !BRAID_LL128 ? load_acquire(c.rcv.head, c.rcv.sys) : 0;
  }
  __syncthreads();
  if (failed) return;
  c.snd.seen = seen0[0];
  c.rcv.seen = seen0[1];
  c.sent = seen0[2];
  c.received = seen0[3];
  c.steps = small ? prog_steps : gsteps;
  c.sdeps = small ? prog_sdeps : gsdeps;
  c.deps = small ? prog_deps : gdeps;
  c.dep0 = small ? bd.first_dep : 0;
  c.known = t.nblocks <= KNOWN_MAX ? known : nullptr;
  const u64 piece = BRAID_PIECE_BYTES / sizeof(T);
  // The last steps are published only for the barriers over the replica below: between
  // rounds that reuse scratch, and before avg's division.
  const bool avg = OP == AVG && a.avg_n > 1 && a.out != 0;
  const bool rounds = t.scratch != 0 && a.round_elems < a.chunk_elems;
  const bool publish_last = avg || rounds;
  u64 tiles = 0;
  for (u64 w0 = 0; w0 < a.chunk_elems; w0 += a.round_elems) {
    const u64 w1 = min64(w0 + a.round_elems, a.chunk_elems);
    // This replica's share of a whole round, cut to the window: the same place in every
    // window (and in scratch), so replicas running ahead through the rounds never touch
    // scratch another replica still uses (geometry.rs's `replica_range`).
    u64 lo, hi;
    share(w0, w0 + a.round_elems, bd.replica, t.replicas, lo, hi);
    lo = min64(lo, w1);
    hi = min64(hi, w1);
    c.w0 = w0;
    // Streaming: the steps run once over [lo, hi). Tiled: once per tile of a piece (none
    // when the share is empty). One call site, so the interpreter is compiled once.
    for (u64 t0 = lo; !t.tiled || t0 < hi;) {
      const u64 t1 = t.tiled ? min64(t0 + piece, hi) : hi;
      c.lo = t0;
      c.hi = t1;
      if (!run_steps(c, t, bd, tiles, publish_last)) return;
      tiles++;
      if (!t.tiled) break;
      t0 = t1;
    }
    if (avg) {
      if (!finish_avg(c, t, bd, tiles, a.avg_n, lo, hi)) return;
    } else if (rounds && w1 < a.chunk_elems) {
      // The next round reuses this round's scratch window: every block of the replica
      // must be done with it first (blocks of one replica are not otherwise ordered
      // across rounds; the replicas' windows are disjoint).
      if (!replica_barrier(c, t, bd, tiles)) return;
    }
  }
  // Keep the connection counters for the next call; the last block out resets the
  // dependency counters for it (when this call used them: a plan whose blocks never
  // wait for one another, run in one round, publishes nothing).
  __shared__ int last;
  __syncthreads();
  if (threadIdx.x == 0) {
    if (use_snd) counters[se.counter] = c.sent;
    if (use_rcv) counters[re.counter] = c.received;
  }
  if (!t.sync && !publish_last) return;
  if (threadIdx.x == 0) {
    // Release (after the barrier: every thread's waits on the counters are done) and,
    // for the last block, acquire: the others are past their last read of them.
    const u64 before = atomic_add_acq_rel_gpu(reinterpret_cast<u64*>(t.progress) + t.grid, 1ull);
    last = before + 1 == t.grid;
  }
  __syncthreads();
  if (last) {
    // The kernel's end makes these visible to the next call on the stream.
    volatile u64* progress = reinterpret_cast<volatile u64*>(t.progress);
    for (u32 i = threadIdx.x; i <= t.grid; i += blockDim.x) progress[i] = 0;
  }
}

// ---- Point to point: the sends and receives of one group (ncclSend / ncclRecv) ----
//
// Each grid block serves one lane of one connection end of a rank of the launch (its
// `P2pLane`) and moves, in order, every task of that lane: the sender's bytes through
// the lane's FIFO into the receiver's buffer, slice by slice, with the lane's protocol.
// The tasks are bytes (the kernel is the `unsigned char` variant's). Both ends cut a
// message into the same slices on the same lanes (runtime/cuda/src/p2p.rs decides from
// the byte count alone), so the i-th send to a peer meets its i-th receive, as NCCL
// matches them.

struct P2pRank {      // 32 bytes: what every wait of a rank's blocks watches
  u64 fail;
  u64 report;
  u64 abort;
  u64 timeout_ns;
};

struct P2pLane {      // 48 bytes: one lane of one connection end
  u64 slots;          // address of slot 0
  u64 head;
  u64 tail;
  u64 counter;        // address of this end's counter (slices sent / received so far)
  u32 nslots;
  u32 ll;             // 1: the LL lane, 0: Simple
  u32 rank;           // index into P2pLaunch.rank
  u32 send;           // 1: this rank sends on the lane, 0: receives
};

struct P2pTask {      // 24 bytes: a message (or its part) on one lane
  u64 buf;            // the caller's buffer
  u64 bytes;
  u32 lane;
  u32 pad;
};

struct P2pLaunch {
  u32 nlanes;         // = grid blocks
  u32 ntasks;
  P2pRank rank[BRAID_MAX_LOCAL];
  P2pLane lane[BRAID_P2P_LANES];
  P2pTask task[BRAID_P2P_TASKS];
};

__device__ void p2p_run(const P2pLaunch& L, u32 b) {
  const P2pLane ln = L.lane[b];
  const P2pRank rk = L.rank[ln.rank];
  Ctx c;
  c.w.fail = reinterpret_cast<volatile u32*>(rk.fail);
  c.w.report = reinterpret_cast<volatile u32*>(rk.report);
  c.w.abort = reinterpret_cast<volatile u32*>(rk.abort);
  c.w.timeout_ns = rk.timeout_ns;
  c.w.block = b;
  if (*c.w.fail != 0) return;
  u64* counter = reinterpret_cast<u64*>(ln.counter);
  const u64 slot = ln.ll ? BRAID_LL_SLOT_BYTES : BRAID_SIMPLE_SLOT_BYTES;
  const u64 piece = (ln.ll ? slot / 2 : slot) / sizeof(T);
  End e;
  e.slots = ln.slots;
  e.head = ln.head;
  e.tail = ln.tail;
  e.counter = 0;
  e.nslots = ln.nslots;
  set_port(c.snd, e);
  set_port(c.rcv, e);
  c.sent = c.received = *counter;
  for (u32 i = 0; i < L.ntasks; i++) {
    const P2pTask tk = L.task[i];
    if (tk.lane != b) continue;
    T* p = reinterpret_cast<T*>(tk.buf);
    const u64 total = tk.bytes / sizeof(T);
    for (u64 off = 0; off < total; off += piece) {
      const u64 n = min64(total - off, piece);
      if (ln.send) {
        if (!wait_send(c)) return;
        char* out = c.snd.slots + (c.sent % c.snd.nslots) * slot;
        if (ln.ll) {
          if (!ll_move<S>(c, nullptr, 0, p + off, n, n, nullptr, 0, out, (u32)(c.sent + 1)))
            return;
          ll_sent(c, (n + LINE - 1) / LINE);
        } else {
          move(reinterpret_cast<T*>(out), n, nullptr, 0, p + off, n, nullptr, 0, n);
          send_done(c, n * sizeof(T));
        }
      } else {
        const char* in = c.rcv.slots + (c.received % c.rcv.nslots) * slot;
        if (ln.ll) {
          if (!ll_move<R>(c, p + off, n, nullptr, 0, n, in, (u32)(c.received + 1), nullptr,
                          0))
            return;
          c.received++;
          if (threadIdx.x == 0) *c.rcv.tail = c.received;
        } else {
          if (!wait_recv(c)) return;
          move(p + off, n, nullptr, 0, reinterpret_cast<const T*>(in), n, nullptr, 0, n);
          recv_done(c);
        }
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) *counter = ln.send ? c.sent : c.received;
}

// ---- Flat launches: a call done entirely by reading the launch's inputs ----
//
// runtime/cuda/src/flat.rs resolves such a call's steps to addresses on the host: a list
// of passes (`dst = op0 (+) op1 (+) ...` over one chunk, operands in the steps' order),
// grouped into sequences that run in order. It comes in the launch's arguments, so a
// block's first load is data: no table, descriptor, counter or wait. Grid block `b` runs
// part `b % parts` (whole vectors) of every chunk of sequence `b / parts`.
//
// The argument is packed: after its head, `w` holds the sequences' first tasks (16-bit),
// then at byte `task_at` the tasks, then at byte `op_at` the operands, as many of each as
// the launch has. The host launches the entry whose `w` is the smallest that holds them
// (`braid_flat_s`, `braid_flat_m`, `braid_flat`): a launch's parameters are copied to
// the GPU with every launch, so a small call does not pay for room it does not use.
struct FlatTask {     // 16 bytes: one pass over one chunk
  u64 dst;
  u32 valid;          // elements of the chunk that exist at dst (the rest is not written)
  unsigned short op0; // its operands: op[op0 .. op0 + nops)
  unsigned char nops;
  unsigned char ndst; // destinations: dst, then op[op0 + nops .. op0 + nops + ndst - 1)
};

struct FlatOp {       // 16 bytes
  u64 ptr;
  u64 valid;          // elements of the chunk that exist there (the rest reads as zero)
};

struct FlatHead {
  u32 nseq;
  u32 parts;
  u64 chunk_elems;
  u32 task_at;        // byte offsets in `w`
  u32 op_at;
};

template <u32 W>
struct FlatArgs {
  FlatHead h;
  u64 w[W];
};

constexpr u32 FLAT_WORDS_S = 64;
constexpr u32 FLAT_WORDS_M = 272;
constexpr u32 FLAT_WORDS_L = 465;

// A pass with several destinations (ranks of the launch that compute the same chunk, the
// result written to each): `fd[0 .. nd)` get `fp[0] (+) ... (+) fp[n - 1]`, element by
// element. BRAID_UNROLL vectors per thread in flight, as `move`.
__shared__ T* fd[FUSE_MAX];
__device__ __forceinline__ void flat_pass(u64 dv, u32 n, u32 nd) {
  u64 full = dv;
  bool vec = true;
  for (u32 k = 0; k < n; k++) {
    full = min64(full, fv[k]);
    vec = vec && aligned16(fp[k]);
  }
  for (u32 j = 0; j < nd; j++) vec = vec && aligned16(fd[j]);
  u64 done = 0;
  if (vec) {
    const u64 m = full / UNIT;
    done = m * UNIT;
    const u64 bd = blockDim.x;
    u64 v = threadIdx.x;
    for (; v + (BRAID_UNROLL - 1) * bd < m; v += BRAID_UNROLL * bd) {
      uint4 acc[BRAID_UNROLL];
      for (u32 k = 0; k < n; k++) {
        const uint4* a = reinterpret_cast<const uint4*>(fp[k]) + v;
        uint4 x[BRAID_UNROLL];
#pragma unroll
        for (int u = 0; u < BRAID_UNROLL; u++) x[u] = BRAID_LD(a + u * bd);
#pragma unroll
        for (int u = 0; u < BRAID_UNROLL; u++) acc[u] = k == 0 ? x[u] : apply_pack<T, OP>(acc[u], x[u]);
      }
      for (u32 j = 0; j < nd; j++) {
        uint4* w = reinterpret_cast<uint4*>(fd[j]) + v;
#pragma unroll
        for (int u = 0; u < BRAID_UNROLL; u++) w[u * bd] = acc[u];
      }
    }
    for (; v < m; v += bd) {
      uint4 acc;
      for (u32 k = 0; k < n; k++) {
        const uint4 x = BRAID_LD(reinterpret_cast<const uint4*>(fp[k]) + v);
        acc = k == 0 ? x : apply_pack<T, OP>(acc, x);
      }
      for (u32 j = 0; j < nd; j++) reinterpret_cast<uint4*>(fd[j])[v] = acc;
    }
  }
  for (u64 e = done + threadIdx.x; e < dv; e += blockDim.x) {
    const T acc = combined(e, n);
    for (u32 j = 0; j < nd; j++) fd[j][e] = acc;
  }
}

template <u32 W>
__device__ void flat_run(const FlatArgs<W>& A) {
  const FlatHead& L = A.h;
  const char* base = reinterpret_cast<const char*>(A.w);
  const unsigned short* first = reinterpret_cast<const unsigned short*>(base);
  const FlatTask* task = reinterpret_cast<const FlatTask*>(base + L.task_at);
  const FlatOp* op = reinterpret_cast<const FlatOp*>(base + L.op_at);
  const u32 s = blockIdx.x / L.parts, p = blockIdx.x % L.parts;
  const u64 per = ((L.chunk_elems + L.parts - 1) / L.parts + UNIT - 1) / UNIT * UNIT;
  const u64 from = min64(L.chunk_elems, per * p);
  const u64 to = min64(L.chunk_elems, from + per);
  for (u32 i = first[s]; i < first[s + 1]; i++) {
    const FlatTask tk = task[i];
    const u32 n = tk.nops, nd = tk.ndst;
    if (threadIdx.x < n) {
      const FlatOp o = op[tk.op0 + threadIdx.x];
      fp[threadIdx.x] = reinterpret_cast<const T*>(o.ptr) + from;
      fv[threadIdx.x] = o.valid > from ? min64(o.valid, to) - from : 0;
    } else if (threadIdx.x < n + nd - 1) {
      fd[threadIdx.x - n + 1] = reinterpret_cast<T*>(op[tk.op0 + threadIdx.x].ptr) + from;
    }
    if (threadIdx.x == 0) fd[0] = reinterpret_cast<T*>(tk.dst) + from;
    __syncthreads();
    const u64 dv = tk.valid > from ? min64(tk.valid, to) - from : 0;
    if (nd == 1 && n <= 2) {
      // A copy or one reduction: `move` keeps BRAID_UNROLL vectors per thread in flight
      // (the one pass keeps one operand's, which starves a copy of memory parallelism).
      move(fd[0], dv, nullptr, 0, fp[0], fv[0], n == 2 ? fp[1] : nullptr, fv[1], dv);
    } else if (nd == 1) {
      fused_pass(fd[0], dv, n);
    } else {
      flat_pass(dv, n, nd);
    }
    __syncthreads();
  }
}

}  // namespace braid

#if BRAID_SCALE
// PreMulSum's first half (ncclRedOpCreatePreMulSum): dst = src * scalar element by
// element, rounded as the reductions round (`Num<T>::mul`). The scalar is the element's
// bytes, little-endian, in the low bytes of `bits`.
extern "C" __global__ void __launch_bounds__(BRAID_THREADS)
    braid_scale(braid::T* dst, const braid::T* src, unsigned long long n, unsigned long long bits) {
  const braid::T s = *reinterpret_cast<const braid::T*>(&bits);
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride)
    dst[i] = braid::Num<braid::T>::mul(src[i], s);
}
#endif

#if BRAID_P2P
extern "C" __global__ void __launch_bounds__(BRAID_THREADS) braid_p2p(const braid::P2pLaunch L) {
  braid::p2p_run(L, blockIdx.x);
}
#endif

// (`__grid_constant__`: the argument is read where it lies, indexed at run time, never
// copied per thread.)
extern "C" __global__ void __launch_bounds__(BRAID_THREADS)
    braid_flat_s(const __grid_constant__ braid::FlatArgs<braid::FLAT_WORDS_S> A) {
  braid::flat_run(A);
}
extern "C" __global__ void __launch_bounds__(BRAID_THREADS)
    braid_flat_m(const __grid_constant__ braid::FlatArgs<braid::FLAT_WORDS_M> A) {
  braid::flat_run(A);
}
extern "C" __global__ void __launch_bounds__(BRAID_THREADS)
    braid_flat(const __grid_constant__ braid::FlatArgs<braid::FLAT_WORDS_L> A) {
  braid::flat_run(A);
}

extern "C" __global__ void __launch_bounds__(BRAID_THREADS) braid_kernel(const braid::Launch L) {
  unsigned s = 0;
  while (s + 1 < L.n && blockIdx.x >= L.first[s + 1]) s++;
  braid::run(reinterpret_cast<const braid::Table*>(L.table[s]), L, s, blockIdx.x - L.first[s]);
}
