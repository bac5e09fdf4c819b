#!/usr/bin/env python3
"""Serve wmrl AutoResearch competitions through MLE-Dojo's action vocabulary.

An agent written against MLE-Dojo's interface (request_info, validate_code,
execute_code, get_history, reset) talks to this server over ZeroMQ with the
framing of wmrl's bridge protocol (docs/autoresearch.md): a REQ/REP exchange
whose part 0 is a msgpack map

    request: {"v": 1, "id": <int>, "op": <str>, ...arguments}
    reply:   {"v": 1, "id": <same>, "ok": <bool>, "error": null | {"kind", "message"},
              "result": <op-specific map>}

ops: hello, ping, request_info {info_type}, validate_code {code},
execute_code {code}, get_history, reset {competition?}, close.

Code runs in wmrl's own sandbox and is graded by wmrl's own grader: the server
calls `wmrl autoresearch run` (the Rust CLI), so limits, isolation and the
reward ladder are exactly those of training. The competition folder may be
one of wmrl's (envs/mledojo/competitions/<name>) or an MLE-Dojo competition
with a meta.json added (see docs/autoresearch.md).

Usage: server.py --competition iris [--suite DIR] [--endpoint tcp://127.0.0.1:5599] [--wmrl PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import msgpack
import zmq

PROTOCOL_VERSION = 1
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
INFO_TYPES = ("overview", "sample_submission", "data_structure", "data_path", "output_path", "metric", "leaderboard_size")


class DojoError(Exception):
    def __init__(self, kind, message):
        super().__init__(message)
        self.kind, self.message = kind, message


def find_wmrl(explicit):
    for p in [explicit, os.environ.get("WMRL_BIN"),
              os.path.join(REPO, "target/release/wmrl"), os.path.join(REPO, "target/debug/wmrl")]:
        if p and os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    raise SystemExit("no wmrl binary: build it (cargo build -p wmrl-cli) or pass --wmrl")


class Session:
    """One competition, its action history, and the best score so far."""

    def __init__(self, suite, competition, wmrl):
        self.suite, self.wmrl = suite, wmrl
        self.load(competition)

    def load(self, competition):
        d = os.path.join(self.suite, competition)
        if not os.path.isfile(os.path.join(d, "meta.json")):
            raise DojoError("bad_request", f"no competition {competition!r} in {self.suite}")
        with open(os.path.join(d, "meta.json")) as f:
            self.meta = json.load(f)
        self.competition, self.dir = competition, d
        self.history, self.best = [], None

    def request_info(self, info_type):
        pub = os.path.join(self.dir, "public")
        if info_type == "overview":
            with open(os.path.join(pub, "description.txt")) as f:
                out = f.read()
        elif info_type == "sample_submission":
            with open(os.path.join(pub, "sample_submission.csv")) as f:
                out = "".join(f.readlines()[:6])
        elif info_type == "data_structure":
            out = {name: os.path.getsize(os.path.join(pub, name)) for name in sorted(os.listdir(pub))}
        elif info_type == "data_path":
            out = "./public/ (a private copy in the sandbox's working directory)"
        elif info_type == "output_path":
            out = "./submission.csv"
        elif info_type == "metric":
            out = {"metric": self.meta["metric"], "higher_is_better": self.meta.get("higher_is_better")}
        elif info_type == "leaderboard_size":
            with open(os.path.join(self.dir, "private", "public_leaderboard.csv")) as f:
                out = sum(1 for _ in f) - 1
        else:
            raise DojoError("bad_request", f"info_type must be one of {INFO_TYPES}")
        return {"info_type": info_type, "info": out}

    def _run(self, code):
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(code)
            path = f.name
        try:
            p = subprocess.run([self.wmrl, "autoresearch", "run", "--suite", self.suite,
                                "--competition", self.competition, "--solution", path],
                               capture_output=True, text=True, timeout=600)
        finally:
            os.unlink(path)
        if p.returncode != 0:
            raise DojoError("internal", p.stderr[-2000:])
        return json.loads(p.stdout)

    def validate_code(self, code):
        o = self._run(code)
        g = o["grade"]
        res = {"status": "SUCCESS" if g["rung"] == "valid" else "FAILED", "rung": g["rung"],
               "reason": g["reason"], "stderr_tail": o["stderr_tail"], "cpu_secs": o["cpu_secs"]}
        self.history.append({"action": "validate_code", "time": time.time(), "result": res})
        return res

    def execute_code(self, code):
        o = self._run(code)
        g = o["grade"]
        res = {"status": "SUCCESS" if g["rung"] == "valid" else "FAILED", "rung": g["rung"], "reason": g["reason"],
               "score": g["metric"], "position_score": g["position_score"], "reward": g["reward"],
               "stderr_tail": o["stderr_tail"], "cpu_secs": o["cpu_secs"], "wall_secs": o["wall_secs"]}
        if g["position_score"] is not None and (self.best is None or g["reward"] > self.best["reward"]):
            self.best = res
        self.history.append({"action": "execute_code", "time": time.time(), "result": res})
        return res

    def get_history(self):
        return {"competition": self.competition, "history": self.history, "best": self.best}


def handle(session, head):
    op = head.get("op")
    if head.get("v") != PROTOCOL_VERSION:
        raise DojoError("version", f"protocol version {head.get('v')}, server speaks {PROTOCOL_VERSION}")
    if op == "hello":
        return {"server": "wmrl-mledojo", "competition": session.competition, "ops": [
            "request_info", "validate_code", "execute_code", "get_history", "reset", "ping", "close"],
                "info_types": list(INFO_TYPES)}
    if op == "ping":
        return {}
    if op == "request_info":
        return session.request_info(head.get("info_type", "overview"))
    if op in ("validate_code", "execute_code"):
        code = head.get("code")
        if not isinstance(code, str):
            raise DojoError("bad_request", "code must be a string")
        return getattr(session, op)(code)
    if op == "get_history":
        return session.get_history()
    if op == "reset":
        session.load(head.get("competition") or session.competition)
        return {"competition": session.competition}
    if op == "close":
        return {}
    raise DojoError("bad_request", f"unknown op {op!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--competition", default="iris")
    ap.add_argument("--suite", default=os.path.join(HERE, "competitions"))
    ap.add_argument("--endpoint", default="tcp://127.0.0.1:5599")
    ap.add_argument("--wmrl", default=None)
    ap.add_argument("--max-requests", type=int, default=0, help="exit after this many requests (0: never)")
    a = ap.parse_args()
    session = Session(os.path.abspath(a.suite), a.competition, find_wmrl(a.wmrl))
    sock = zmq.Context.instance().socket(zmq.REP)
    sock.bind(a.endpoint)
    print(f"wmrl-mledojo: {a.competition} on {a.endpoint}", file=sys.stderr, flush=True)
    served = 0
    while a.max_requests == 0 or served < a.max_requests:
        parts = sock.recv_multipart()
        req_id, reply = None, None
        try:
            head = msgpack.unpackb(parts[0], raw=False, strict_map_key=False)
            if not isinstance(head, dict):
                raise DojoError("bad_request", "header must be a map")
            req_id = head.get("id")
            result = handle(session, head)
            reply = {"v": PROTOCOL_VERSION, "id": req_id, "ok": True, "error": None, "result": result}
        except DojoError as e:
            reply = {"v": PROTOCOL_VERSION, "id": req_id, "ok": False, "error": {"kind": e.kind, "message": e.message}, "result": None}
        except Exception as e:  # a malformed request never kills the server
            reply = {"v": PROTOCOL_VERSION, "id": req_id, "ok": False, "error": {"kind": "bad_request", "message": repr(e)}, "result": None}
        sock.send(msgpack.packb(reply, use_bin_type=True))
        served += 1


if __name__ == "__main__":
    main()
