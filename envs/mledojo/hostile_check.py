#!/usr/bin/env python3
"""Hostile solutions through every host-side route that grades them
(scripts/checks.d/42-hostile.sh runs it): `wmrl autoresearch run`, the
MLE-Dojo server (which calls `run`) and `serve-rewards`. A solution finds the
checkout from inside the sandbox (its interpreter's prefix lies in it) and
leaves `submission.csv` as a symbolic link to the competition's answer key,
or to the grader's environment; another writes a submission at the size
limit. None may score above a runtime error, no reason may quote a host
file, and the grader's memory stays within a few times the limit.
Loopback only.

    python envs/mledojo/hostile_check.py --wmrl target/debug/wmrl
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import urllib.request

import msgpack
import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
SUITE = os.path.join(HERE, "competitions")

# The attack of issue 28: five lines, the answer key behind a link.
STEAL = """import os, sys
repo = os.path.dirname(sys.prefix)  # the interpreter is <repo>/.venv/bin/python
key = os.path.join(repo, "envs/mledojo/competitions/%s/data/private/test_answer.csv")
os.symlink(key, "submission.csv")
"""
ENVIRON = "import os\nos.symlink('/proc/self/environ', 'submission.csv')\n"
# Just under the sandbox's 64 MiB file-size limit, in the shape that costs a
# naive parser the most (many tiny rows).
BIG = "with open('submission.csv', 'w') as f:\n    f.write('id,target\\n' + '1,2\\n' * 15_500_000)\n"
GOOD = """import pandas as pd
from sklearn.linear_model import LogisticRegression
t = pd.read_csv('public/train.csv'); te = pd.read_csv('public/test.csv')
X = t.drop(columns=['id', 'target'])
m = LogisticRegression(max_iter=500).fit(X, t.target)
pd.DataFrame({'id': te.id, 'target': m.predict(te[X.columns])}).to_csv('submission.csv', index=False)
"""
LEAKS = ("PATH=", "HOME=", "id,target")


def check_reason(what, grade):
    reason = grade.get("reason") or ""
    assert len(reason) <= 160, (what, reason)
    for leak in LEAKS:
        assert leak not in reason, (what, reason)


def run(wmrl, comp, code, work):
    path = os.path.join(work, "solution.py")
    with open(path, "w") as f:
        f.write(code)
    p = subprocess.run([wmrl, "autoresearch", "run", "--competition", comp, "--solution", path],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wmrl", required=True)
    a = ap.parse_args()
    wmrl = os.path.abspath(a.wmrl)
    work = tempfile.mkdtemp(prefix="wmrl-hostile-")
    comps = sorted(d for d in os.listdir(SUITE) if os.path.isfile(os.path.join(SUITE, d, "meta.json")))
    assert len(comps) >= 12, comps

    # 1. `wmrl autoresearch run` on every competition.
    for c in comps:
        o = run(wmrl, c, STEAL % c, work)
        g = o["grade"]
        assert g["reward"] <= 0.2 and g["rung"] != "valid", (c, g)
        check_reason(c, g)
    o = run(wmrl, "iris", ENVIRON, work)
    assert o["grade"]["reward"] <= 0.2, o
    check_reason("environ", o["grade"])
    print(f"run: the answer-key link scores at most 0.2 on {len(comps)} of {len(comps)} competitions")

    # The grader's memory with a submission at the size limit: the largest
    # child (wmrl or the sandboxed Python) stays within a few times 64 MiB.
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    o = run(wmrl, "iris", BIG, work)
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    assert o["grade"]["rung"] == "malformed", o["grade"]
    check_reason("big", o["grade"])
    assert peak_mb < 4 * 64, f"peak {peak_mb:.0f} MB (before: {before / 1024:.0f} MB)"
    print(f"run: a 62 MB submission is malformed, peak child memory {peak_mb:.0f} MB")

    # 2. The MLE-Dojo server (it calls `wmrl autoresearch run`).
    endpoint = f"ipc://{work}/dojo.sock"
    server = subprocess.Popen([sys.executable, os.path.join(HERE, "server.py"), "--competition", "iris",
                               "--endpoint", endpoint, "--max-requests", "2", "--wmrl", wmrl,
                               "--output-dir", os.path.join(work, "dojo")])
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.RCVTIMEO, 120_000)
    sock.connect(endpoint)
    try:
        for n, code in enumerate([STEAL % "iris", ENVIRON], start=1):
            sock.send(msgpack.packb({"v": 1, "id": n, "op": "execute_code", "code": code}))
            r = msgpack.unpackb(sock.recv(), raw=False)
            assert r["ok"], r
            res = r["result"]
            assert res["reward"] == 0.0 and res["wmrl"]["reward"] <= 0.2, res
            text = json.dumps(res)
            for leak in LEAKS:
                assert leak not in text, (leak, text[:2000])
    finally:
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    print("mledojo server: the links score 0 and no feedback quotes a host file")

    # 3. serve-rewards, executing every group (arm real).
    p = subprocess.Popen([wmrl, "autoresearch", "serve-rewards", "--bind", "127.0.0.1:0", "--arm", "real",
                          "--state", os.path.join(work, "state.json"), "--no-cache", "--max-requests", "1"],
                         stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("listening on http://"), line
        url = line.split()[-1]
        body = json.dumps({"protocol": 1, "competition": "iris",
                           "groups": [[STEAL % "iris", GOOD, ENVIRON, GOOD]]}).encode()
        req = urllib.request.Request(url + "/v1/rewards", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as resp:
            r = json.loads(resp.read())
        s = r["scores"][0]
        assert s[0] <= 0.2 and s[2] <= 0.2 and min(s[1], s[3]) >= 0.5, r
        rw = r["rewards"][0]
        assert max(rw[0], rw[2]) < min(rw[1], rw[3]), r
        for leak in LEAKS[:2]:
            assert leak not in json.dumps(r), r
    finally:
        p.terminate()
        p.wait(timeout=30)
    print("serve-rewards: the links score at most 0.2 and rank below a real model")


if __name__ == "__main__":
    main()
