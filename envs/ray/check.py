#!/usr/bin/env python3
"""Ray, run for real (scripts/checks.d/50-ray.sh): a local Ray instance with
two CPUs, two embedded-simulator workers as Ray actors (launch.py's
SimWorker), a short `wmrl train` whose pool connects through the endpoints
the actors publish, one actor killed mid-run with `ray.kill` and restarted
by Ray on its endpoint, and the run finishing with every rollout of every
step counted once. Then, when envs/libero/.venv exists, one real LIBERO
worker as a Ray actor serving a short `wmrl eval --backend bridge`.

    envs/ray/.venv/bin/python envs/ray/check.py --wmrl target/debug/wmrl
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import ray

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
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    tmp = tempfile.mkdtemp(prefix="wmrl-ray-")

    # 1. Embedded simulators as actors, a training run through them, one
    #    actor killed mid-run.
    cmd = launch.worker_command("sim", envs=4, image=128, wmrl=wmrl, python=None)
    actors, infos = launch.start_workers(cmd, 2, cpus_per_worker=0.5)
    endpoints = [i["endpoint"] for i in infos]
    print("ray: sim actors at", endpoints, flush=True)
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
