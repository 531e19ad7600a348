#!/usr/bin/env python3
"""PyTorch on Braid's libnccl.so.2: torch.distributed with backend "nccl" and Braid's
library preloaded, against backend "gloo" (and the closed-form answer), two ranks.

    torch_check.py ops  BRAID_LIBNCCL OUT_DIR   every op, a CUDA graph, compared with gloo
    torch_check.py ddp  BRAID_LIBNCCL OUT_DIR   DDP losses on Braid against gloo
    torch_check.py kill BRAID_LIBNCCL OUT_DIR   rank 1 SIGKILLs itself mid-run: rank 0 must
                                                fail with an error within 15 s, not hang

Ranks are processes on GPU rank % (GPUs present): both share GPU 0 on a one-GPU machine
(where NCCL itself refuses two ranks). Exit status 0 when everything matched; the
comparison is printed, the raw results are left in OUT_DIR.
"""
import json
import os
import socket
import subprocess
import sys

WORLD = 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(mode, backend, lib, out):
    """Runs WORLD rank processes of this script (`rank` subcommand); Braid preloaded for nccl."""
    port = str(free_port())
    procs = []
    for rank in range(WORLD):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(WORLD), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        if backend == "nccl":
            env["LD_PRELOAD"] = lib
            env.setdefault("BRAID_DEBUG", "INFO")
            env["BRAID_DEBUG_FILE"] = os.path.join(out, f"braid.{mode}.%p.log")
        procs.append(subprocess.Popen([sys.executable, __file__, "rank", mode, backend, out], env=env))
    codes = [p.wait(timeout=600) for p in procs]
    if any(codes):
        sys.exit(f"{mode} on {backend}: rank exit codes {codes}")


def kill(lib, out):
    """Both ranks all-reduce 64 MiB in a loop on Braid; rank 1 SIGKILLs itself after 20
    calls. Rank 0 must end with a non-zero status and an error within 15 s of the kill."""
    import time

    port = str(free_port())
    procs = []
    for rank in range(WORLD):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(WORLD), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port, LD_PRELOAD=lib)
        err = open(os.path.join(out, f"kill.{rank}.err"), "w")
        procs.append(subprocess.Popen([sys.executable, __file__, "rank", "kill", "nccl", out], env=env,
                                      stderr=err, stdout=err))
    killed = os.path.join(out, "kill.at")
    start = time.time()
    while not os.path.exists(killed) and time.time() - start < 120 and procs[0].poll() is None:
        time.sleep(0.05)
    if not os.path.exists(killed):
        for p in procs:
            p.kill()
        sys.exit("kill: rank 1 never reached the kill")
    try:
        code = procs[0].wait(timeout=60)
    except subprocess.TimeoutExpired:
        procs[0].kill()
        sys.exit("kill: rank 0 still running 60 s after rank 1 was killed")
    took = time.time() - float(open(killed).read())
    procs[1].wait()
    err = open(os.path.join(out, "kill.0.err")).read()
    lines = [l for l in err.splitlines() if "rror" in l]
    print(f"rank 0 exit {code} {took:.1f} s after the kill; first error line: {lines[0] if lines else '(none)'}")
    ok = code != 0 and took < 15 and lines
    print(json.dumps({"mode": "kill", "exit": code, "seconds": round(took, 2), "ok": bool(ok)}))
    sys.exit(0 if ok else 1)


def run_kill(torch, dist, rank, dev, out):
    import signal
    import time

    x = torch.ones(16 << 20, device=dev)
    for i in range(1000000):
        dist.all_reduce(x)
        torch.cuda.synchronize()
        if rank == 1 and i == 20:
            with open(os.path.join(out, "kill.at.tmp"), "w") as f:
                f.write(repr(time.time()))
            os.rename(os.path.join(out, "kill.at.tmp"), os.path.join(out, "kill.at"))
            os.kill(os.getpid(), signal.SIGKILL)


def rank_main(mode, backend, out):
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    ngpu = torch.cuda.device_count()
    dev = torch.device("cuda", rank % ngpu) if ngpu else torch.device("cpu")
    if ngpu:
        torch.cuda.set_device(dev)
    dist.init_process_group(backend, rank=rank, world_size=world, device_id=dev if backend == "nccl" else None)
    # gloo runs on CPU tensors (its CUDA support is partial); nccl on the GPU.
    on = dev if backend == "nccl" else torch.device("cpu")
    if mode == "kill":
        run_kill(torch, dist, rank, dev, out)
        return
    results = run_ops(torch, dist, rank, world, on, backend) if mode == "ops" else run_ddp(torch, dist, rank, world, dev, backend)
    torch.save(results, os.path.join(out, f"{mode}.{backend}.{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


def inputs(torch, rank, n, dtype, on):
    # Small integers: exact in every type, so sums and products compare exactly.
    return (torch.arange(n, dtype=torch.float64) % 7 + 1 + rank).to(dtype).to(on)


def run_ops(torch, dist, rank, world, on, backend):
    R = dist.ReduceOp
    res = {}
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8):
        for name, op in (("sum", R.SUM), ("product", R.PRODUCT), ("min", R.MIN), ("max", R.MAX)):
            x = inputs(torch, rank, 1001, dtype, on)
            if name == "product":
                x = (x % 3 + 1).to(dtype)
            dist.all_reduce(x, op=op)
            res[f"all_reduce/{name}/{dtype}"] = x.cpu()
    # AVG and PREMUL_SUM are NCCL's; gloo lacks them: gloo's side computes them from SUM.
    x = inputs(torch, rank, 1001, torch.float32, on)
    if backend == "nccl":
        dist.all_reduce(x, op=R.AVG)
    else:
        dist.all_reduce(x, op=R.SUM)
        x /= world
    res["all_reduce/avg"] = x.cpu()
    x = inputs(torch, rank, 1001, torch.float32, on)
    if backend == "nccl":
        # Where Braid cannot serve it (no real NCCL to forward to), the key stays missing
        # and the comparison counts it as a difference; the other ops still run.
        try:
            dist.all_reduce(x, op=dist._make_nccl_premul_sum(0.5))
            res["all_reduce/premul_sum"] = x.cpu()
        except Exception as e:  # noqa: BLE001 - the backend's error, reported
            print(f"rank {rank}: premul_sum: {str(e).splitlines()[-1]}", file=sys.stderr)
    else:
        x *= 0.5
        dist.all_reduce(x, op=R.SUM)
        res["all_reduce/premul_sum"] = x.cpu()
    x = inputs(torch, rank, 777, torch.float32, on)
    dist.broadcast(x, src=1)
    res["broadcast"] = x.cpu()
    x = inputs(torch, rank, 777, torch.float32, on)
    dist.reduce(x, dst=0, op=R.SUM)
    if rank == 0:
        res["reduce"] = x.cpu()
    x = inputs(torch, rank, 333, torch.float32, on)
    if backend == "nccl":
        y = torch.empty(333 * world, dtype=x.dtype, device=on)
        dist.all_gather_into_tensor(y, x)
    else:
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x)
        y = torch.cat(parts)
    res["all_gather_into_tensor"] = y.cpu()
    x = inputs(torch, rank, 333 * world, torch.float32, on)
    if backend == "nccl":
        y = torch.empty(333, dtype=x.dtype, device=on)
        dist.reduce_scatter_tensor(y, x)
    else:
        dist.all_reduce(x)
        y = x[rank * 333:(rank + 1) * 333]
    res["reduce_scatter_tensor"] = y.cpu()
    # Uneven splits: rank r sends (r + 1) * (q + 1) elements to rank q.
    in_splits = [(rank + 1) * (q + 1) for q in range(world)]
    out_splits = [(q + 1) * (rank + 1) for q in range(world)]
    x = torch.cat([torch.full((n,), float(rank * 10 + q), device=on) for q, n in enumerate(in_splits)])
    y = torch.empty(sum(out_splits), device=on)
    dist.all_to_all_single(y, x, out_splits, in_splits)
    res["all_to_all_single/uneven"] = y.cpu()
    send = inputs(torch, rank, 4097, torch.float32, on)
    recv = torch.empty_like(send)
    ops = [dist.P2POp(dist.isend, send, (rank + 1) % world), dist.P2POp(dist.irecv, recv, (rank - 1) % world)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    res["batch_isend_irecv"] = recv.cpu()
    dist.barrier()
    if backend == "nccl":
        # An all-reduce captured in a CUDA graph, replayed: the same as eager.
        x = inputs(torch, rank, 2049, torch.float32, on)
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            dist.all_reduce(x)  # warm up outside the capture
            torch.cuda.synchronize()
            x.copy_(inputs(torch, rank, 2049, torch.float32, on))
            with torch.cuda.graph(g, stream=s):
                dist.all_reduce(x)
        torch.cuda.current_stream().wait_stream(s)
        for _ in range(3):
            x.copy_(inputs(torch, rank, 2049, torch.float32, on))
            g.replay()
        torch.cuda.synchronize()
        res["cuda_graph/all_reduce"] = x.cpu()
    else:
        x = inputs(torch, rank, 2049, torch.float32, on)
        dist.all_reduce(x)
        res["cuda_graph/all_reduce"] = x.cpu()
    return res


def run_ddp(torch, dist, rank, world, dev, backend):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(dev)
    ddp = DDP(model, device_ids=[dev.index])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1234 + rank)
    losses = []
    for step in range(300):
        x = torch.randn(16, 32, generator=gen).to(dev)
        y = x.sum(dim=1, keepdim=True).sin()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {"losses": losses}


def compare(mode, out):
    import torch

    bad = 0
    for rank in range(WORLD):
        a = torch.load(os.path.join(out, f"{mode}.nccl.{rank}.pt"))
        b = torch.load(os.path.join(out, f"{mode}.gloo.{rank}.pt"))
        if mode == "ddp":
            la, lb = a["losses"], b["losses"]
            exact = la == lb
            worst = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(la, lb))
            ok = exact or worst <= 1e-5
            print(f"rank {rank}: {len(la)} steps, final loss {la[-1]:.6f} (braid) {lb[-1]:.6f} (gloo), "
                  f"{'bitwise equal' if exact else f'worst relative difference {worst:.2e}'}")
            bad += not ok
            continue
        for key in sorted(set(a) | set(b)):
            same = key in a and key in b and torch.equal(a[key], b[key].to(a[key].dtype))
            if not same and key in a and key in b and a[key].dtype in (torch.float16, torch.bfloat16):
                same = torch.allclose(a[key].float(), b[key].float(), rtol=1e-2)
            print(f"{'same' if same else 'DIFFERENT'} rank {rank} {key}")
            bad += not same
    if mode == "ddp":
        logs = "".join(open(os.path.join(out, f)).read() for f in os.listdir(out) if f.startswith("braid.ddp."))
        served = sum(1 for l in logs.splitlines() if "allreduce of" in l and "plan=" in l)
        print(f"Braid's log: {served} all-reduce calls served by Braid's plans")
        bad += served == 0
    return bad


def main():
    if sys.argv[1] == "rank":
        rank_main(*sys.argv[2:5])
        return
    mode, lib, out = sys.argv[1], os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
    os.makedirs(out, exist_ok=True)
    if mode == "kill":
        kill(lib, out)
        return
    launch(mode, "nccl", lib, out)
    launch(mode, "gloo", lib, out)
    bad = compare(mode, out)
    print(json.dumps({"mode": mode, "mismatches": bad}))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
