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
                           "--endpoint", endpoint, "--max-requests", "11"] + sys.argv[1:])
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
# MLE-Dojo style: data from data_path, submission into output_path (absolute).
DOJO = """import os, pandas as pd
s = pd.read_csv(os.path.join(%r, 'sample_submission.csv'))
s.to_csv(os.path.join(%r, 'submission.csv'), index=False)
print('wrote', len(s))
"""
OBS_KEYS = {"action_status", "feedback", "reward", "current_raw_score", "current_position_score",
            "best_raw_score", "best_position_score", "history_summary"}
try:
    assert call("hello")["result"]["competition"] == "iris"
    info = call("request_info", info_type="all")["result"]
    assert OBS_KEYS <= set(info), info.keys()
    d = info["data"]
    assert set(d) == {"overview", "sample_submission", "data_structure", "data_path", "output_path", "name",
                      "metadata"}, d.keys()
    assert "iris" in d["overview"] and d["name"] == "iris"
    assert os.path.isdir(d["data_path"]) and os.path.isfile(os.path.join(d["data_path"], "train.csv"))
    assert os.path.isdir(d["output_path"])
    assert "Competition Info" in info["feedback"]["base"]["feedback"] and info["action_status"] == "SUCCESS"
    assert call("request_info", info_type="nope")["ok"] is False
    v = call("validate_code", code="def f(:\n")["result"]
    assert v["action_status"] == "FAILED" and v["syntax"]["status"] == "FAILED" and v["reward"] == 0.0, v
    assert call("execute_code", code="")["error"]["kind"] == "bad_request"
    e = call("execute_code", code=GOOD)["result"]
    assert e["action_status"] == "SUCCESS" and e["submission"]["raw_score"] > 0.8, e
    assert 0.0 < e["reward"] <= 1.0 and e["reward"] == e["submission"]["position_score"]["avg_score"], e
    assert e["wmrl"]["rung"] == "valid" and e["best_raw_score"] == e["submission"]["raw_score"], e
    dj = call("execute_code", code=DOJO % (d["data_path"], d["output_path"]))["result"]
    assert dj["action_status"] == "SUCCESS" and "wrote" in dj["execution"]["output"], dj
    h = call("get_history")["result"]
    assert h["data"]["step_count"] >= 4 and h["data"]["best_raw_score"] == e["submission"]["raw_score"], h
    assert [a["action"] for a in h["data"]["actions"]] == ["request_info", "validate_code", "execute_code",
                                                          "execute_code"], h["data"]["actions"]
    assert call("reset", competition="wine")["result"]["competition"] == "wine"
    assert [a["action"] for a in call("get_history")["result"]["data"]["actions"]] == ["reset"]
    assert call("bogus")["ok"] is False
    print("mledojo server: 11 requests passed, 0 failed")
finally:
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:  # a failed check must not leave the server behind
        server.kill()
