#!/usr/bin/env python3
"""Drive server.py through every MLE-Dojo action once and check the replies
(scripts/checks.d/40-autoresearch.sh runs it), then what the server owes a
client besides: ping answered while an execution runs, a message announcing
20 GB refused at its frame header, one server per output directory, reported
scores rounded with --report-digits, reset not recorded, close ending the
server. Loopback only (ipc)."""

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import msgpack
import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
work = tempfile.mkdtemp(prefix="wmrl-mledojo-check-")
endpoint = f"ipc://{work}/dojo.sock"
output_dir = os.path.join(work, "out")
DIGITS = 3
server = subprocess.Popen([sys.executable, os.path.join(HERE, "server.py"), "--competition", "iris",
                           "--endpoint", endpoint, "--output-dir", output_dir,
                           "--report-digits", str(DIGITS)] + sys.argv[1:])
ctx = zmq.Context.instance()
sock = ctx.socket(zmq.REQ)
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


def probe(timeout_ms):
    """A second client, as a liveness probe with a short timeout would be."""
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.RCVTIMEO, timeout_ms)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    return s


def ping(s):
    t = time.monotonic()
    s.send(msgpack.packb({"v": 1, "id": 0, "op": "ping"}))
    r = msgpack.unpackb(s.recv(), raw=False)
    assert r["ok"], r
    return time.monotonic() - t


def oversized_frame_is_dropped():
    """Speak ZMTP 3.0 by hand over the ipc socket: greeting, READY as a
    DEALER, then a frame header announcing 20 GB followed by 2 bytes. The
    server must close the connection at the header, not wait for the rest."""
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(5)
    c.connect(endpoint[len("ipc://"):])
    greeting = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL" + b"\x00" * 16 + b"\x00" + b"\x00" * 31
    prop = bytes([11]) + b"Socket-Type" + (6).to_bytes(4, "big") + b"DEALER"
    ready = b"\x05READY" + prop
    c.sendall(greeting + bytes([0x04, len(ready)]) + ready)
    c.sendall(b"\x02" + (20_000_000_000).to_bytes(8, "big") + b"{}")
    t = time.monotonic()
    try:
        while c.recv(4096):
            pass
    except socket.timeout:
        raise AssertionError("the server waits for a 20 GB message instead of refusing it")
    finally:
        c.close()
    return time.monotonic() - t


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
SLOW = "import time\ntime.sleep(4)\n"
OBS_KEYS = {"action_status", "feedback", "reward", "current_raw_score", "current_position_score",
            "best_raw_score", "best_position_score", "history_summary"}


def rounded(x):
    return x == round(x, DIGITS)


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
    # --report-digits: every raw score the agent sees is rounded (the
    # sample submission's accuracy is a fraction like 1/3 exactly).
    raw = dj["submission"]["raw_score"]
    assert rounded(raw) and rounded(dj["current_raw_score"]) and rounded(dj["best_raw_score"]), dj
    assert f"{raw:.{DIGITS}f}" in dj["feedback"]["base"]["feedback"], dj["feedback"]
    h = call("get_history")["result"]
    assert h["data"]["step_count"] >= 4 and h["data"]["best_raw_score"] == e["submission"]["raw_score"], h
    assert [a["action"] for a in h["data"]["actions"]] == ["request_info", "validate_code", "execute_code",
                                                          "execute_code"], h["data"]["actions"]

    # A liveness probe with a 2 s timeout is answered during an execution.
    p = probe(2000)
    slow = threading.Thread(target=lambda: call("execute_code", code=SLOW))
    slow.start()
    time.sleep(1.0)
    waited = ping(p)
    assert slow.is_alive(), "the execution ended before the probe: nothing was checked"
    slow.join()
    print(f"ping answered in {waited * 1000:.0f} ms during an execution")

    # 20 GB announced, 2 bytes sent: the connection is dropped at the header
    # and the server keeps answering.
    dropped = oversized_frame_is_dropped()
    assert ping(p) < 2.0
    p.close()
    print(f"a 20 GB frame header: connection dropped in {dropped * 1000:.0f} ms")

    # A second server on the same output directory is refused.
    other = subprocess.run([sys.executable, os.path.join(HERE, "server.py"), "--competition", "iris",
                            "--endpoint", f"ipc://{work}/other.sock", "--output-dir", output_dir] + sys.argv[1:],
                           capture_output=True, text=True, timeout=60)
    assert other.returncode != 0 and "in use by another server" in other.stderr, (other.returncode, other.stderr)

    # reset starts a fresh history (MLE-Dojo's env.reset()): not an entry in it.
    r = call("reset", competition="wine")["result"]
    assert r["competition"] == "wine" and r["history_summary"] == "No actions taken yet.", r
    h = call("get_history")["result"]["data"]
    assert h["actions"] == [] and h["total_reward"] == 0.0 and h["competition"] == "wine", h
    assert call("bogus")["ok"] is False
    # close answers, then ends the server.
    assert call("close")["ok"] is True
    assert server.wait(timeout=30) == 0
    print(f"mledojo server: {n} requests passed, 0 failed; close ended it")
finally:
    if server.poll() is None:  # a failed check must not leave the server behind
        server.kill()
        server.wait()
