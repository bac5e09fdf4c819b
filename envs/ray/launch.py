#!/usr/bin/env python3
"""Start K wmrl-bridge simulator workers as Ray actors and print their endpoints.

Each actor runs one worker process on its node, bound on that node's IP:
  --kind sim     `wmrl serve-sim --envs N` (the embedded simulator; the `wmrl`
                 binary must be on PATH on every node, or pass --wmrl PATH)
  --kind libero  `envs/libero/server.py --envs N` (the real LIBERO; needs the
                 venv from scripts/setup.d/30-libero.sh on every node, or
                 pass --python PATH)
The endpoints go to stdout, one per line (and as JSON with --json), for
`BridgePool::connect`, e.g. `wmrl train --workers $(cat endpoints.txt)`.

Fault tolerance: each actor watches its worker process and restarts it on
the same port when it dies (up to --max-worker-restarts), so the pool's
reconnect finds it again; Ray restarts a dead actor (--max-restarts), which
may land on another node: its endpoint then changes and the pool reports the
old one as gone after give_up_after_ms. The launcher keeps running (and the
actors alive) until interrupted.

  python envs/ray/launch.py --address auto --workers 8 --envs 8 --kind sim
"""

import argparse
import json
import os
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


@ray.remote
class SimWorker:
    """One simulator worker process, supervised."""

    def __init__(self, cmd, max_restarts):
        self.ip = ray.util.get_node_ip_address()
        self.port = free_port()
        self.endpoint = f"tcp://{self.ip}:{self.port}"
        self.cmd = [c.replace("{BIND}", f"tcp://0.0.0.0:{self.port}") for c in cmd]
        self.max_restarts = max_restarts
        self.restarts = 0
        self.proc = None
        self._start()
        threading.Thread(target=self._watch, daemon=True).start()

    def _start(self):
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, text=True)
        for line in self.proc.stdout:  # wait until bound
            if line.startswith("ENDPOINT "):
                break
        threading.Thread(target=lambda p=self.proc: [None for _ in p.stdout], daemon=True).start()

    def _watch(self):
        while True:
            if self.proc.poll() is not None and self.restarts < self.max_restarts:
                self.restarts += 1
                self._start()
            time.sleep(1.0)

    def endpoint_info(self):
        return {"endpoint": self.endpoint, "pid": self.proc.pid, "restarts": self.restarts,
                "alive": self.proc.poll() is None}


def main():
    ap = argparse.ArgumentParser(description="Start wmrl simulator workers on a Ray cluster.")
    ap.add_argument("--address", default=None, help="Ray address (`auto` for a running cluster; default: start a local one)")
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

    if args.kind == "sim":
        cmd = [args.wmrl, "serve-sim", "--bind", "{BIND}", "--envs", str(args.envs),
               "--image-size", str(args.image)]
    else:
        cmd = [args.python, os.path.join(REPO, "envs/libero/server.py"), "--bind", "{BIND}",
               "--envs", str(args.envs), "--image", str(args.image)]

    ray.init(address=args.address)
    actors = [
        SimWorker.options(num_cpus=args.cpus_per_worker, max_restarts=args.max_restarts,
                          max_task_retries=-1).remote(cmd, args.max_worker_restarts)
        for _ in range(args.workers)
    ]
    infos = ray.get([a.endpoint_info.remote() for a in actors])
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
