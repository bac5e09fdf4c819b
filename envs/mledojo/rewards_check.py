#!/usr/bin/env python3
"""End-to-end check of the reward service (scripts/checks.d/45-rewards.sh):
wmrl trains a code predictor on its own sandbox results, serves rewards over
HTTP, and the Python client (wmrl_rewards.py, the TRL reward-function
signature) gets them. Also what the service owes besides rewards: a body
announcing 20 GB refused at its header, health answered while a request is
scored, one service per state file, and a kill -9 during an execution whose
sandbox directories the restarted service removes. Loopback only; no TRL or
GPU needed.

    python envs/mledojo/rewards_check.py --wmrl target/debug/wmrl
"""

import argparse
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from wmrl_rewards import RewardServiceError, WmrlRewards, extract_code  # noqa: E402

GOOD = """import pandas as pd
from sklearn.linear_model import LogisticRegression
t = pd.read_csv('public/train.csv'); te = pd.read_csv('public/test.csv')
X = t.drop(columns=['id', 'target'])
m = LogisticRegression(max_iter=%d).fit(X, t.target)
pd.DataFrame({'id': te.id, 'target': m.predict(te[X.columns])}).to_csv('submission.csv', index=False)
"""
BROKEN = "import pandas as pd\nt = pd.read_csv('public/train.csv'\n"
NO_SUBMISSION = "import pandas as pd\nt = pd.read_csv('public/train.csv')\nprint(len(t))\n"
CANDIDATES = [GOOD % 500, BROKEN, GOOD % 50, NO_SUBMISSION]
# Runs a few seconds in the sandbox; the tag keeps it out of the replay cache.
SLOW = "import time\ntime.sleep(%d)  # %s\n"


def run(*args):
    print("+", " ".join(args), flush=True)
    subprocess.run(args, check=True)


def post(url, body: bytes):
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def serve_args(wmrl, work, fraction="0.5"):
    return [wmrl, "autoresearch", "serve-rewards", "--bind", "127.0.0.1:0",
            "--predictor", f"{work}/code.onnx", "--state", f"{work}/state.json",
            "--cache", f"{work}/cache.jsonl", "--work-root", f"{work}/sbx", "--anchor-fraction", fraction]


def start(wmrl, work):
    p = subprocess.Popen(serve_args(wmrl, work), stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("listening on http://"), line
    return p, line.split()[-1]


def get_health(url, timeout):
    with urllib.request.urlopen(url + "/v1/health", timeout=timeout) as r:
        return json.loads(r.read())


def wait_busy(url):
    """Poll health (1 s timeout each) until a request is being scored;
    returns the last reply and how long it took to come."""
    deadline = time.monotonic() + 60
    while True:
        t = time.monotonic()
        h = get_health(url, timeout=1)
        took = time.monotonic() - t
        if h["busy"]:
            return h, took
        assert time.monotonic() < deadline, h
        time.sleep(0.05)


def oversized(url):
    """Announce 20 GB, send 2 bytes: (status, seconds to the reply)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    c = socket.create_connection((host, int(port)), timeout=10)
    t = time.monotonic()
    c.sendall(b"POST /v1/rewards HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 20000000000\r\n\r\n{}")
    reply = b""
    while chunk := c.recv(4096):
        reply += chunk
    c.close()
    return int(reply.split(b" ", 2)[1]), time.monotonic() - t


def post_quietly(url, groups, out):
    """POST in a thread; the service may be killed under it."""
    try:
        out.append(post(url + "/v1/rewards", json.dumps(
            {"protocol": 1, "competition": "iris", "groups": groups}).encode()))
    except (OSError, urllib.error.URLError) as e:
        out.append(e)


def check_run_cache(wmrl, work):
    """`wmrl autoresearch run --cache` replays; without --cache it runs afresh."""
    path = f"{work}/solution.py"
    with open(path, "w") as f:
        f.write(GOOD % 200)
    cmd = [wmrl, "autoresearch", "run", "--competition", "iris", "--solution", path]
    outs = [json.loads(subprocess.run(cmd + extra, check=True, capture_output=True, text=True).stdout)
            for extra in (["--cache", f"{work}/run_cache.jsonl"], ["--cache", f"{work}/run_cache.jsonl"], [])]
    assert [o["cached"] for o in outs] == [False, True, False], [o["cached"] for o in outs]
    assert outs[0]["grade"] == outs[1]["grade"], outs
    p = subprocess.run(cmd + ["--cache", f"{work}/run_cache.jsonl", "--data-path", "/data"],
                       capture_output=True, text=True)
    assert p.returncode != 0 and "--cache" in p.stderr, p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wmrl", required=True)
    ap.add_argument("--per-competition", default="3")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="wmrl-rewards-")
    # The sandbox's per-run uids traverse it to reach their working dirs.
    os.chmod(work, 0o755)
    check_run_cache(a.wmrl, work)
    # The code world model, trained by wmrl on its own sandbox results.
    run(a.wmrl, "autoresearch", "collect", "--split", "train", "--per-competition",
        a.per_competition, "--seed", "0", "--out", f"{work}/train.jsonl",
        "--cache", f"{work}/cache.jsonl")
    run(a.wmrl, "autoresearch", "fit-predictor", "--code", "--data", f"{work}/train.jsonl",
        "--out", f"{work}/code.onnx", "--cache", f"{work}/cache.jsonl")

    server, url = start(a.wmrl, work)
    try:
        client = WmrlRewards(url, competition="iris")
        assert client.health()["requests"] == 0

        # Two groups at anchor fraction 0.5: one executed, one scored.
        r = client.score_groups("iris", [CANDIDATES, CANDIDATES[::-1]])
        assert len(r["anchors"]) == 1, r
        assert [len(g) for g in r["rewards"]] == [4, 4], r
        assert r["labels_used"] == 4 and r["sandbox_cpu_secs"] > 0, r
        g = r["anchors"][0]
        real = r["scores"][g]
        good = [0, 2] if g == 0 else [1, 3]
        bad = [1, 3] if g == 0 else [0, 2]
        # Real grades: working solutions beat a syntax error and a missing
        # submission, and so do their rewards.
        assert min(real[i] for i in good) > max(real[i] for i in bad), real
        assert min(r["rewards"][g][i] for i in good) > max(r["rewards"][g][i] for i in bad), r
        for grp in r["rewards"]:
            assert abs(sum(grp)) < 1e-6, "rewards are group-standardised advantages"
        other = 1 - g
        assert all(s is not None for s in r["scores"][other]), "world-model group scored"

        # Bad requests: a clear error, nothing counted.
        code, e = post(url + "/v1/rewards", b"{not json")
        assert code == 400 and "not a reward request" in e["error"], (code, e)
        code, e = post(url + "/v1/rewards", json.dumps(
            {"protocol": 99, "competition": "iris", "groups": [CANDIDATES]}).encode())
        assert code == 422 and "protocol 99" in e["error"], (code, e)
        code, e = post(url + "/v1/rewards", json.dumps(
            {"protocol": 1, "competition": "nope", "groups": [CANDIDATES]}).encode())
        assert code == 422 and "no competition" in e["error"], (code, e)
        code, e = post(url + "/v1/rewards", json.dumps(
            {"protocol": 1, "competition": "iris", "groups": [[GOOD % 500]]}).encode())
        assert code == 422 and "at least two" in e["error"], (code, e)
        try:
            WmrlRewards(url).score_groups("nope", [CANDIDATES])
            raise AssertionError("an unknown competition must raise")
        except RewardServiceError as err:
            assert "no competition" in str(err)
        assert client.health()["requests"] == 1

        # The TRL reward-function call: conversational completions, code in
        # fences, groups by prompt (TRL's num_generations per prompt); the
        # two groups hold different candidates, so a grouping error shows.
        other_set = [GOOD % 300, NO_SUBMISSION, NO_SUBMISSION, BROKEN]
        fenced = [[{"role": "assistant", "content": f"Here:\n```python\n{c}```\n"}]
                  for c in CANDIDATES + other_set]
        assert extract_code(fenced[0][0]["content"]) == CANDIDATES[0]
        rewards = client(prompts=["p1"] * 4 + ["p2"] * 4, completions=fenced,
                         completion_ids=None, trainer_state=None)
        assert len(rewards) == 8 and all(isinstance(x, float) for x in rewards), rewards
        assert abs(sum(rewards[:4])) < 1e-6 and abs(sum(rewards[4:])) < 1e-6, rewards
        assert [len(g) for g in client.last_reply["rewards"]] == [4, 4], client.last_reply
        health = client.health()
        assert health["requests"] == 2 and health["labels_total"] == 8, health

        # One group per request (TRL on one device with a batch of one
        # prompt): at fraction 0.5 every second one is executed, and an
        # executed group is rewarded by its real grades (the ladder: 0.1 a
        # syntax error, 0.2 no submission), not by the world model.
        one = WmrlRewards(url, competition="iris", num_generations=4)
        one(completions=CANDIDATES)
        assert one.last_reply["anchors"] == [], one.last_reply
        one(completions=CANDIDATES)
        r = one.last_reply
        assert r["anchors"] == [0] and r["labels_used"] == 4, r
        assert r["scores"][0][1] == 0.1 and r["scores"][0][3] == 0.2, r
        assert min(r["scores"][0][0], r["scores"][0][2]) >= 0.5, r
        health = client.health()
        assert health["requests"] == 4 and health["labels_total"] == 12, health

        # A body announced at 20 GB is refused from its header, at once.
        status, took = oversized(url)
        assert status == 413 and took < 2.0, (status, took)

        # A second service on the same state file is refused while this one runs.
        p = subprocess.run(serve_args(a.wmrl, work), capture_output=True, text=True, timeout=120)
        assert p.returncode != 0 and "another reward service" in p.stderr, (p.returncode, p.stderr)

        # Health answers within a 1 s timeout while a request is scored (one
        # of its two groups is executed: 4 s of sleep in the sandbox).
        out = []
        t = threading.Thread(target=post_quietly, args=(url, [[SLOW % (4, "a1"), SLOW % (4, "a2")]] * 2, out))
        t.start()
        h, took = wait_busy(url)
        assert h["requests"] == 4 and took < 1.0, (h, took)
        t.join()
        code, r = out[0]
        assert code == 200 and len(r["anchors"]) == 1 and r["labels_used"] == 2, (code, r)
        assert get_health(url, timeout=1)["requests"] == 5

        # kill -9 during an execution leaves the run's sandbox directory.
        out = []
        t = threading.Thread(target=post_quietly, args=(url, [[SLOW % (20, "b1"), SLOW % (20, "b2")]] * 2, out))
        t.start()
        wait_busy(url)
        mine = f"{work}/sbx/serve-rewards-{server.pid}-*"
        deadline = time.monotonic() + 30
        while not glob.glob(f"{mine}/wmrl-sbx-*"):
            assert time.monotonic() < deadline, "no sandbox directory appeared"
            time.sleep(0.05)
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=30)
        t.join()
        assert isinstance(out[0], Exception), out
        left = glob.glob(mine)
        assert left and glob.glob(f"{mine}/wmrl-sbx-*"), "the kill left nothing to clean: nothing checked"
    finally:
        if server.poll() is None:
            server.terminate()
        server.wait(timeout=30)

    # Restarted: the dead service's sandbox directories are gone, and the
    # state is where the last answered request left it (the killed one
    # counted nothing).
    server, url = start(a.wmrl, work)
    try:
        assert not any(os.path.exists(d) for d in left), left
        h = WmrlRewards(url).health()
        assert h["requests"] == 5 and h["labels_total"] == 14 and not h["busy"], h
    finally:
        server.terminate()
        server.wait(timeout=30)
    # Other settings on the same state fail.
    p = subprocess.run(serve_args(a.wmrl, work, fraction="0.25"), capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "other settings" in p.stderr, (p.returncode, p.stderr)
    print("reward service check: passed")


if __name__ == "__main__":
    main()
