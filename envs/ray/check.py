#!/usr/bin/env python3
"""Ray, run for real (scripts/checks.d/50-ray.sh): a local Ray instance with
two CPUs, two embedded-simulator workers as Ray actors (launch.py's
SimWorker), a short `wmrl train` whose pool connects through the endpoints
the actors publish, one actor killed mid-run with `ray.kill` and restarted
by Ray on its endpoint, and the run finishing with every rollout of every
step counted once. Then, when envs/libero/.venv exists, one real LIBERO
worker as a Ray actor serving a short `wmrl eval --backend bridge`.

Loopback only: Ray, its actors and the simulator workers listen on
127.0.0.1, and the check fails if any TCP listener of a process it started
(found through /proc) is bound to another address.

    envs/ray/.venv/bin/python envs/ray/check.py --wmrl target/debug/wmrl
"""

import argparse
import ipaddress
import json
import os
import subprocess
import sys
import tempfile
import time

# Tests talk over loopback only. On Linux Ray binds its services to the
# machine's network address even when given `_node_ip_address="127.0.0.1"`
# (it swaps loopback for a "remotely reachable" address) unless clusters
# are off, its default on Windows and macOS; this switch, read when `ray` is
# imported, turns them off here too, and then the GCS, raylet, workers and
# agents all listen on 127.0.0.1.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
import ray  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import launch  # noqa: E402


def wait_for(pred, limit, what):
    t0 = time.time()
    while time.time() - t0 < limit:
        if pred():
            return
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


def _children():
    """ppid -> child pids, from /proc/*/stat."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:  # exited meanwhile
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out.setdefault(ppid, []).append(int(d))
    return out


def descendants(pid):
    kids, todo, seen = _children(), [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += kids.get(p, [])
    return seen


def tcp_listeners():
    """socket inode -> (address, port) of every listening TCP socket in this
    network namespace (/proc/net/tcp, tcp6; state 0A is LISTEN)."""
    out = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            col = row.split()
            if col[3] != "0A":
                continue
            addr, port = col[1].split(":")
            raw = bytes.fromhex(addr)
            if sys.byteorder == "little":  # the kernel prints each 32-bit word in host order
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            out[int(col[9])] = (ipaddress.ip_address(raw), int(port, 16))
    return out


def is_loopback(ip):
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def assert_loopback_only(stage, endpoints):
    """Every TCP listener of this process and its descendants (Ray's GCS,
    raylet, workers and agents, the simulator workers) is on loopback. The
    GCS, the raylet and the workers behind `endpoints` must be among them,
    so the check cannot pass by seeing nothing."""
    listening = tcp_listeners()
    found = []
    for pid in descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/comm") as f:
                name = f.read().strip()
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and int(link[8:-1]) in listening:
                ip, port = listening[int(link[8:-1])]
                found.append((name, pid, str(ip), port))
    bad = [x for x in found if not is_loopback(ipaddress.ip_address(x[2]))]
    assert not bad, f"{stage}: listeners off loopback (name, pid, address, port): {bad}"
    names = {x[0] for x in found}
    ports = {x[3] for x in found}
    missing = [n for n in ("gcs_server", "raylet") if n not in names]
    missing += [e for e in endpoints if int(e.rsplit(":", 1)[1]) not in ports]
    assert not missing, f"{stage}: no listener seen for {missing}; saw {sorted(found)}"
    print(f"ray: {stage}: {len(found)} listeners of {len(names)} kinds of process, all on loopback",
          flush=True)


def lines(path):
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.strip()]
    except FileNotFoundError:
        return []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wmrl", default=os.path.join(REPO, "target/debug/wmrl"))
    a = ap.parse_args()
    wmrl = os.path.abspath(a.wmrl)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    tmp = tempfile.mkdtemp(prefix="wmrl-ray-")

    # 1. Embedded simulators as actors, a training run through them, one
    #    actor killed mid-run.
    cmd = launch.worker_command("sim", envs=4, image=128, wmrl=wmrl, python=None)
    actors, infos = launch.start_workers(cmd, 2, cpus_per_worker=0.5)
    endpoints = [i["endpoint"] for i in infos]
    print("ray: sim actors at", endpoints, flush=True)
    assert all(e.startswith("tcp://127.0.0.1:") for e in endpoints), endpoints
    assert_loopback_only("sim actors up", endpoints)
    steps, per_step = 3, 2 * 4
    out = os.path.join(tmp, "train")
    train = subprocess.Popen([
        wmrl, "train", "--quiet", "--config", os.path.join(REPO, "configs/grpo_sim.toml"),
        "--arm", "sparse", "--steps", str(steps), "--out", out,
        "--set", 'env.backend="bridge"', "--set", f"env.endpoints={json.dumps(endpoints)}",
        "--set", "env.pool.request_timeout_ms=5000", "--set", "env.pool.reconnect_interval_ms=200",
        "--set", "env.pool.give_up_after_ms=60000",
        "--set", "rollout.n_groups=2", "--set", "rollout.group_size=4", "--set", "rollout.max_steps=60",
        "--set", "eval.every=0", "--set", "eval.at_start=false", "--set", "eval.tasks=[0]",
        "--set", "eval.init_states=[16,17]", "--set", "eval.in_domain=false",
    ], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    metrics = os.path.join(out, "metrics.jsonl")
    wait_for(lambda: len(lines(metrics)) >= 1 or train.poll() is not None, 600, "the first training step")
    time.sleep(1.0)  # into the second step
    before = ray.get(actors[0].endpoint_info.remote())
    ray.kill(actors[0], no_restart=False)
    print("ray: killed actor 0 (pid", before["actor_pid"], ") during step", len(lines(metrics)), flush=True)
    err = train.communicate(timeout=900)[1]
    assert train.returncode == 0, f"training failed after the kill:\n{err[-3000:]}"
    after = ray.get(actors[0].endpoint_info.remote(), timeout=60)
    assert after["actor_pid"] != before["actor_pid"], "Ray did not restart the actor"
    assert after["endpoint"] == before["endpoint"], (before, after)
    assert_loopback_only("after the actor restart", endpoints)
    ms = lines(metrics)
    assert len(ms) == steps, ms
    execs = [m["ledger"]["real_executions"] for m in ms]
    assert execs == [per_step * (k + 1) for k in range(steps)], f"rollouts lost or counted twice: {execs}"
    restarts = sum(m["restarts"] for m in ms)
    print(f"ray: training finished, {steps} steps, rollouts per step {per_step} each counted once, "
          f"{restarts} episodes restarted after the kill; actor restarted by Ray on {after['endpoint']}",
          flush=True)
    for x in actors:
        ray.kill(x, no_restart=True)

    # 2. Real LIBERO as a Ray actor, if its venv is there.
    py = os.path.join(REPO, "envs/libero/.venv/bin/python")
    if os.path.exists(py):
        cmd = launch.worker_command("libero", envs=1, image=128, wmrl=None, python=py)
        lib, linfo = launch.start_workers(cmd, 1, cpus_per_worker=1.0)
        assert_loopback_only("LIBERO actor up", [linfo[0]["endpoint"]])
        ev = os.path.join(tmp, "eval")
        env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"))
        r = subprocess.run([wmrl, "eval", "--policy", os.path.join(REPO, "models/policy-tiny"),
                            "--backend", "bridge", "--endpoints", linfo[0]["endpoint"], "--num-envs", "1",
                            "--tasks", "0", "--init-states", "0", "--max-steps", "10", "--gifs", "0",
                            "--out", ev], cwd=REPO, capture_output=True, text=True, env=env, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        rep = json.load(open(os.path.join(ev, "eval.json")))
        assert len(rep["episodes"]) == 1 and rep["episodes"][0]["steps"] == 10, rep["episodes"]
        print("ray: real LIBERO actor served a 10-step evaluation at", linfo[0]["endpoint"], flush=True)
        ray.kill(lib[0], no_restart=True)
    else:
        print("ray: skipped the LIBERO actor (no envs/libero/.venv)", flush=True)
    print("ray check: passed")


if __name__ == "__main__":
    main()
