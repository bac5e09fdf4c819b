#!/usr/bin/env python3
"""Start K wmrl-bridge simulator workers as Ray actors and print their endpoints.

Each actor runs one worker process on its node, bound on the node's IP as
Ray knows it (127.0.0.1 on a loopback-only instance, see README.md), the
address it reports:
  --kind sim     `wmrl serve-sim --envs N` (the embedded simulator; the `wmrl`
                 binary must be on PATH on every node, or pass --wmrl PATH)
  --kind libero  `envs/libero/server.py --envs N` (the real LIBERO; needs the
                 venv from scripts/setup.d/30-libero.sh on every node, or
                 pass --python PATH)
The endpoints go to stdout, one per line (and as JSON with --json), for
`BridgePool::connect`, e.g. `wmrl train --workers $(cat endpoints.txt)`.

Fault tolerance: each actor watches its worker process and restarts it on
the same port when it dies (up to --max-worker-restarts), so the pool's
reconnect finds it again; the worker process dies with its actor, and Ray
restarts a dead actor (--max-restarts) with the same port (the launcher
picks it), so on the same node its endpoint is unchanged and the pool
reconnects; on another node the endpoint changes and the pool reports the
old one as gone after give_up_after_ms. The launcher keeps running (and the
actors alive) until interrupted. envs/ray/check.py runs all of this on a
local Ray instance (scripts/checks.d/50-ray.sh).

  python envs/ray/launch.py --address auto --workers 8 --envs 8 --kind sim
"""

import argparse
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import ray

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _die_with_parent():
    """The worker process gets SIGKILL when its actor dies (Linux), so a
    restarted actor finds its port free."""
    try:
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@ray.remote
class SimWorker:
    """One simulator worker process on a fixed port, supervised.

    The port is given by the launcher, so when Ray restarts a dead actor on
    the same node it binds the same endpoint again and the pool reconnects.
    """

    def __init__(self, cmd, port, max_restarts):
        self.ip = ray.util.get_node_ip_address()
        self.port = port or free_port()
        self.endpoint = f"tcp://{self.ip}:{self.port}"
        # The reported address, not 0.0.0.0: a loopback-only instance stays so.
        self.cmd = [c.replace("{BIND}", f"tcp://{self.ip}:{self.port}") for c in cmd]
        self.max_restarts = max_restarts
        self.restarts = 0
        self.proc = None
        self._start()
        threading.Thread(target=self._watch, daemon=True).start()

    def _start(self, attempts=20):
        for _ in range(attempts):
            self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, text=True,
                                         preexec_fn=_die_with_parent)
            for line in self.proc.stdout:  # wait until bound
                if line.startswith("ENDPOINT "):
                    threading.Thread(target=lambda p=self.proc: [None for _ in p.stdout], daemon=True).start()
                    return
            self.proc.wait()  # exited before binding (e.g. the port not yet free): retry
            time.sleep(0.5)
        raise RuntimeError(f"worker {self.cmd[0]} did not start on port {self.port}")

    def _watch(self):
        while True:
            if self.proc.poll() is not None and self.restarts < self.max_restarts:
                self.restarts += 1
                self._start()
            time.sleep(1.0)

    def endpoint_info(self):
        return {"endpoint": self.endpoint, "pid": self.proc.pid, "actor_pid": os.getpid(),
                "restarts": self.restarts, "alive": self.proc.poll() is None}


def worker_command(kind, envs, image, wmrl, python):
    if kind == "sim":
        return [wmrl, "serve-sim", "--bind", "{BIND}", "--envs", str(envs), "--image-size", str(image)]
    return [python, os.path.join(REPO, "envs/libero/server.py"), "--bind", "{BIND}",
            "--envs", str(envs), "--image", str(image)]


def start_workers(cmd, n, cpus_per_worker=1.0, max_restarts=3, max_worker_restarts=3):
    """Start `n` actors, each on its own free port; returns (actors, infos)."""
    actors = [
        SimWorker.options(num_cpus=cpus_per_worker, max_restarts=max_restarts,
                          max_task_retries=-1).remote(cmd, free_port(), max_worker_restarts)
        for _ in range(n)
    ]
    return actors, ray.get([a.endpoint_info.remote() for a in actors])


def main():
    ap = argparse.ArgumentParser(description="Start wmrl simulator workers on a Ray cluster.")
    ap.add_argument("--address", default=None, help="Ray address (`auto` for a running cluster; default: start a local one)")
    ap.add_argument("--num-cpus", type=int, default=None, help="CPUs of a local Ray instance (no --address)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--envs", type=int, default=8, help="environments per worker")
    ap.add_argument("--kind", choices=["sim", "libero"], default="sim")
    ap.add_argument("--image", type=int, default=128)
    ap.add_argument("--cpus-per-worker", type=float, default=1.0)
    ap.add_argument("--max-restarts", type=int, default=3, help="Ray actor restarts")
    ap.add_argument("--max-worker-restarts", type=int, default=3, help="worker process restarts per actor")
    ap.add_argument("--wmrl", default="wmrl")
    ap.add_argument("--python", default=os.path.join(REPO, "envs/libero/.venv/bin/python"))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--once", action="store_true", help="print the endpoints and exit (stops the actors)")
    args = ap.parse_args()

    cmd = worker_command(args.kind, args.envs, args.image, args.wmrl, args.python)
    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(num_cpus=args.num_cpus, include_dashboard=False)
    actors, infos = start_workers(cmd, args.workers, args.cpus_per_worker, args.max_restarts,
                                  args.max_worker_restarts)
    if args.json:
        print(json.dumps(infos))
    else:
        for i in infos:
            print(i["endpoint"])
    sys.stdout.flush()
    if args.once:
        return
    try:
        while True:
            time.sleep(30)
            for a, old in zip(actors, infos):
                try:
                    now = ray.get(a.endpoint_info.remote(), timeout=10)
                    if now["endpoint"] != old["endpoint"]:
                        print(f"# worker moved: {old['endpoint']} -> {now['endpoint']}",
                              file=sys.stderr, flush=True)
                except Exception as e:  # report, keep the others running
                    print(f"# worker {old['endpoint']} unreachable: {e}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
