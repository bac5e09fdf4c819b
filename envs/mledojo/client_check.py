#!/usr/bin/env python3
"""Drive server.py through every MLE-Dojo action once and check the replies
(scripts/checks.d/40-autoresearch.sh runs it). Loopback only."""

import subprocess
import sys
import os

import msgpack
import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
endpoint = "ipc:///tmp/wmrl-mledojo-check.sock"
server = subprocess.Popen([sys.executable, os.path.join(HERE, "server.py"), "--competition", "iris",
                           "--endpoint", endpoint, "--max-requests", "9"] + sys.argv[1:])
sock = zmq.Context.instance().socket(zmq.REQ)
sock.setsockopt(zmq.RCVTIMEO, 120_000)
sock.connect(endpoint)
n = 0


def call(op, **kw):
    global n
    n += 1
    sock.send(msgpack.packb({"v": 1, "id": n, "op": op, **kw}))
    r = msgpack.unpackb(sock.recv(), raw=False)
    assert r["id"] == n, r
    return r


GOOD = """import pandas as pd
from sklearn.linear_model import LogisticRegression
t = pd.read_csv('public/train.csv'); te = pd.read_csv('public/test.csv')
X = t.drop(columns=['id', 'target'])
m = LogisticRegression(max_iter=500).fit(X, t.target)
pd.DataFrame({'id': te.id, 'target': m.predict(te[X.columns])}).to_csv('submission.csv', index=False)
"""
try:
    assert call("hello")["result"]["competition"] == "iris"
    assert "iris" in call("request_info", info_type="overview")["result"]["info"]
    assert call("request_info", info_type="nope")["ok"] is False
    v = call("validate_code", code="def f(:\n")["result"]
    assert v["rung"] == "syntax_error" and v["status"] == "FAILED", v
    e = call("execute_code", code=GOOD)["result"]
    assert e["rung"] == "valid" and 0.5 <= e["reward"] <= 1.0 and e["score"] > 0.8, e
    h = call("get_history")["result"]
    assert len(h["history"]) == 2 and h["best"]["reward"] == e["reward"], h
    assert call("reset", competition="wine")["result"]["competition"] == "wine"
    assert call("get_history")["result"]["history"] == []
    assert call("bogus")["ok"] is False
    print("mledojo server: 9 passed, 0 failed")
finally:
    server.wait(timeout=30)
