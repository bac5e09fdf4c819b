#!/usr/bin/env python3
"""Serve wmrl AutoResearch competitions through MLE-Dojo's action vocabulary.

An agent written against MLE-Dojo's interface (request_info, validate_code,
execute_code, get_history, reset) talks to this server over ZeroMQ with the
framing of wmrl's bridge protocol (docs/autoresearch.md): a REQ/REP exchange
whose part 0 is a msgpack map

    request: {"v": 1, "id": <int>, "op": <str>, ...arguments}
    reply:   {"v": 1, "id": <same>, "ok": <bool>, "error": null | {"kind", "message"},
              "result": <MLE-Dojo observation>}

ops: hello, ping, request_info {info_type}, validate_code {code},
execute_code {code}, get_history, reset {competition?}, close.

Actions run one at a time, in arrival order; hello and ping are answered at
once, even while an action runs (a liveness probe with a short timeout does
not fail during an execution). close answers, then ends the server. reset
clears the history and is not recorded in it (MLE-Dojo's env.reset()). A
message over 16 MiB is refused at its frame header: the sender's connection
is dropped before its body is read.

Every action's result is MLE-Dojo's observation (mledojo/gym/env.py) with the
reward and the action's own result merged in: action_status, feedback
(feedback.base.feedback is the text an agent reads), reward,
current_raw_score, current_position_score, best_raw_score,
best_position_score, history_summary, and per action: request_info `data`
(info_type "all" or one of overview, sample_submission, data_structure,
data_path, output_path, name, metadata); validate_code `syntax`, `runtime`;
execute_code `execution`, `submission` ({raw_score, position_score:
{avg_score}} or null); get_history `data` (MLE-Dojo's history map). Rewards
are MLE-Dojo's (the position score of a valid submission, else 0); wmrl's
reward ladder, rung and CPU-seconds are under `wmrl`. Empty or missing code is
rejected with a typed error, as MLE-Dojo raises one. data_path and
output_path are real absolute directories: code may read the data there and
write submission.csv there (the sandbox shows its own copy of the public
files and its working directory at those paths).

The raw score is reported exactly, as MLE-Dojo does, which lets a solution
learn hidden test labels one row per execution (submit a variant that
changes one prediction, watch the score move). --report-digits N rounds
every raw score the agent sees to N decimals (docs/autoresearch.md says
when that hides a one-row change).

Code runs in wmrl's own sandbox and is graded by wmrl's own grader: the server
calls `wmrl autoresearch run` (the Rust CLI), so limits, isolation and the
reward ladder are exactly those of training. The competition folder may be
one of wmrl's (envs/mledojo/competitions/<name>) or an MLE-Dojo competition
with a meta.json added (see docs/autoresearch.md).

Usage: server.py --competition iris [--suite DIR] [--endpoint tcp://127.0.0.1:5599] [--wmrl PATH]
                 [--output-dir DIR] [--report-digits N]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time

import msgpack
import zmq

PROTOCOL_VERSION = 1
# Largest request message; a larger one is refused at its frame header.
MAX_MESSAGE_BYTES = 16 << 20
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
# MLE-Dojo's info providers (mledojo/gym/interface.py); "all" returns every one.
INFO_TYPES = ("overview", "sample_submission", "data_structure", "data_path", "output_path", "name", "metadata")


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


def tree(root, prefix=""):
    lines = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if os.path.isdir(path):
            lines.append(f"{prefix}{name}/")
            lines.extend(tree(path, prefix + "    "))
        else:
            lines.append(f"{prefix}{name} ({os.path.getsize(path)} bytes)")
    return lines


def feedback(text, ok=True):
    """MLE-Dojo's feedback map: the text an agent reads is feedback.base.feedback."""
    return {"base": {"feedback_status": "SUCCESS" if ok else "FAILED", "feedback": text}}


class Session:
    """One competition, its MLE-Dojo-shaped history, and the current and best scores."""

    def __init__(self, suite, competition, wmrl, output_root, report_digits=None):
        self.suite, self.wmrl, self.output_root = suite, wmrl, output_root
        self.report_digits = report_digits
        self.load(competition)

    def reported(self, raw):
        """A raw score as the agent sees it: exact, or rounded to --report-digits."""
        return raw if self.report_digits is None else round(raw, self.report_digits)

    def load(self, competition):
        d = os.path.join(self.suite, competition)
        if not os.path.isfile(os.path.join(d, "meta.json")):
            raise DojoError("bad_request", f"no competition {competition!r} in {self.suite}")
        with open(os.path.join(d, "meta.json")) as f:
            self.meta = json.load(f)
        self.competition, self.dir = competition, d
        self.public = os.path.realpath(os.path.join(d, "data", "public"))
        self.output = os.path.realpath(os.path.join(self.output_root, competition))
        os.makedirs(self.output, exist_ok=True)
        self.current_raw = self.current_pos = self.best_raw = self.best_pos = None
        self.history = {"competition": competition, "actions": [], "total_reward": 0.0, "best_code": None,
                        "best_raw_score": None, "best_position_score": None, "step_count": 0,
                        "created_at": time.time()}
        self.n_exec = self.n_valid = 0

    # -- request_info -------------------------------------------------------
    def info(self, kind):
        if kind == "overview":
            with open(os.path.join(self.public, "description.txt")) as f:
                return f.read()
        if kind == "sample_submission":
            # pandas' head(3).to_dict(): {column: {row: value}}, row keys as
            # strings (msgpack clients reject integer map keys by default).
            with open(os.path.join(self.public, "sample_submission.csv")) as f:
                rows = [line.rstrip("\n").split(",") for line in f.readlines()[:4]]
            head, body = rows[0], rows[1:]
            return {c: {str(i): r[j] for i, r in enumerate(body)} for j, c in enumerate(head)}
        if kind == "data_structure":
            return "\n".join(tree(self.public))
        if kind == "data_path":
            return self.public
        if kind == "output_path":
            return self.output
        if kind == "name":
            return self.competition
        if kind == "metadata":
            return {"category": "tabular", "level": self.meta.get("split"), "output_type": "submission.csv",
                    "higher_is_better": self.meta.get("higher_is_better"), "metric": self.meta["metric"],
                    "task": self.meta["task"]}
        raise DojoError("bad_request", f"unknown info_type {kind!r}: one of all, {', '.join(INFO_TYPES)}")

    def request_info(self, info_type):
        kinds = INFO_TYPES if info_type == "all" else (info_type,)
        data = {k: self.info(k) for k in kinds}
        return {"status": "SUCCESS", "data": data}, f"=== Competition Info ===\n Your requested information: {data}", 0.0

    # -- code -----------------------------------------------------------------
    def _run(self, code, archive):
        if not isinstance(code, str) or not code.strip():
            raise DojoError("bad_request", f"Code parameter is required for '{archive}' action")
        n = self.n_exec = self.n_exec + 1
        with open(os.path.join(self.output, f"{archive}_{n}.py"), "w") as f:
            f.write(code)
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(code)
            path = f.name
        try:
            p = subprocess.run([self.wmrl, "autoresearch", "run", "--suite", self.suite,
                                "--competition", self.competition, "--solution", path,
                                "--data-path", self.public, "--output-path", self.output],
                               capture_output=True, text=True, timeout=600)
        finally:
            os.unlink(path)
        if p.returncode != 0:
            raise DojoError("internal", p.stderr[-2000:])
        return json.loads(p.stdout)

    @staticmethod
    def _runtime(o):
        g = o["grade"]
        failed = g["rung"] in ("syntax_error", "runtime_error")
        return {"status": "FAILED" if failed else "SUCCESS", "output": o.get("stdout_tail", ""),
                "error": (g["reason"] or "") + ("\n" + o["stderr_tail"] if o["stderr_tail"] else "") if failed else "",
                "execution_time": f"{o['wall_secs']:.2f}s"}

    @staticmethod
    def _wmrl(o):
        g = o["grade"]
        return {"rung": g["rung"], "reason": g["reason"], "reward": g["reward"], "cpu_secs": o["cpu_secs"],
                "wall_secs": o["wall_secs"]}

    def validate_code(self, code):
        o = self._run(code, "validation")
        g = o["grade"]
        syntax = {"status": "FAILED" if g["rung"] == "syntax_error" else "SUCCESS",
                  "error": g["reason"] if g["rung"] == "syntax_error" else ""}
        runtime = self._runtime(o)
        status = "SUCCESS" if syntax["status"] == "SUCCESS" and runtime["status"] == "SUCCESS" else "FAILED"
        res = {"status": status, "syntax": syntax, "runtime": runtime, "wmrl": self._wmrl(o)}
        text = f"Validation {status.lower()}: syntax {syntax['status']}, runtime {runtime['status']}" + (
            f"\n{runtime['error']}" if runtime["error"] else "")
        return res, text, 0.0

    def execute_code(self, code):
        o = self._run(code, "execution")
        g = o["grade"]
        execution = self._runtime(o)
        if g["rung"] == "valid":
            # Only the reported value is kept, so that not even "a new
            # best" tells more than the rounded score does.
            raw = self.reported(g["metric"])
            submission = {"status": "SUCCESS", "raw_score": raw,
                          "position_score": {"avg_score": g["position_score"]}}
            reward = g["position_score"]
            self.current_raw, self.current_pos = raw, g["position_score"]
            hib = self.meta.get("higher_is_better", True)
            better = self.best_raw is None or (raw > self.best_raw if hib else raw < self.best_raw)
            if better:
                self.best_raw, self.best_pos = raw, g["position_score"]
                self.history.update(best_code=code, best_raw_score=self.best_raw, best_position_score=self.best_pos)
            shown = f"{raw:.6g}" if self.report_digits is None else f"{raw:.{self.report_digits}f}"
            text = (f"Submission scored {shown} ({self.meta['metric']}), "
                    f"position score {g['position_score']:.4f}")
        else:
            submission = None if execution["status"] == "FAILED" else {
                "status": "FAILED", "error_type": "InvalidSubmission", "error": g["reason"]}
            reward = 0.0
            text = f"Execution failed: {g['reason']}" + (f"\n{execution['error']}" if execution["error"] else "")
        status = "SUCCESS" if submission and submission["status"] == "SUCCESS" else "FAILED"
        return {"status": status, "execution": execution, "submission": submission, "wmrl": self._wmrl(o)}, text, reward

    def get_history(self):
        return {"status": "SUCCESS", "data": self.history}, "History of this session", 0.0

    # -- one MLE-Dojo step ------------------------------------------------------
    def step(self, action, result, text, reward):
        self.history["step_count"] += 1
        self.history["total_reward"] += reward
        fb = feedback(text, ok=result.get("status") == "SUCCESS")
        if action not in ("get_history",):
            self.history["actions"].append({"step": self.history["step_count"], "action": action,
                                            "timestamp": time.time(), "result": result, "feedback": fb})
        return self.observation(result, fb, reward)

    def reset(self, competition):
        """MLE-Dojo's env.reset(): a fresh history, not an entry in it."""
        self.load(competition or self.competition)
        result = {"status": "SUCCESS", "competition": self.competition}
        return self.observation(result, feedback(f"Environment reset successfully: {self.competition}"), 0.0)

    def observation(self, result, fb, reward):
        acts = self.history["actions"]
        return {"action_status": result.get("status"), "feedback": fb, "reward": reward,
                "current_raw_score": self.current_raw, "current_position_score": self.current_pos,
                "best_raw_score": self.best_raw, "best_position_score": self.best_pos,
                "history_summary": f"Total Actions: {len(acts)}, Last Action: {acts[-1]['action']}" if acts
                else "No actions taken yet.",
                **{k: v for k, v in result.items() if k != "status"}}


# Answered at once by the receiving thread, even while an action runs.
IMMEDIATE = ("hello", "ping")


def handle(session, head):
    if not isinstance(head, dict):
        raise DojoError("bad_request", "header must be a map")
    if head.get("v") != PROTOCOL_VERSION:
        raise DojoError("version", f"protocol version {head.get('v')}, server speaks {PROTOCOL_VERSION}")
    op = head.get("op")
    if op == "hello":
        return {"server": "wmrl-mledojo", "competition": session.competition, "ops": [
            "request_info", "validate_code", "execute_code", "get_history", "reset", "ping", "close"],
                "info_types": ["all", *INFO_TYPES]}
    if op in ("ping", "close"):
        return {}
    if op == "request_info":
        return session.step(op, *session.request_info(head.get("info_type", "all")))
    if op in ("validate_code", "execute_code"):
        return session.step(op, *getattr(session, op)(head.get("code")))
    if op == "get_history":
        return session.step(op, *session.get_history())
    if op == "reset":
        return session.reset(head.get("competition"))
    raise DojoError("bad_request", f"unknown op {op!r}")


def parse(frames):
    """Split a ROUTER message into its envelope (the peer's identity and the
    REQ delimiter) and the request head, or an error reply for a head that
    is not msgpack."""
    cut = frames.index(b"") + 1 if b"" in frames else 1
    envelope, body = frames[:cut], frames[cut:]
    try:
        return envelope, msgpack.unpackb(body[0], raw=False, strict_map_key=False) if body else None
    except Exception as e:  # a malformed request never kills the server
        return envelope, e


def answer(session, head):
    """The reply map to one request, errors included."""
    req_id = head.get("id") if isinstance(head, dict) else None
    try:
        if isinstance(head, Exception):
            raise head
        result = handle(session, head)
        return {"v": PROTOCOL_VERSION, "id": req_id, "ok": True, "error": None, "result": result}
    except DojoError as e:
        return {"v": PROTOCOL_VERSION, "id": req_id, "ok": False, "error": {"kind": e.kind, "message": e.message},
                "result": None}
    except Exception as e:  # a malformed request never kills the server
        return {"v": PROTOCOL_VERSION, "id": req_id, "ok": False, "error": {"kind": "bad_request", "message": repr(e)},
                "result": None}


def actions(session, ctx, work):
    """The action thread: one action at a time, replies sent back to the
    receiving thread over inproc (ZeroMQ sockets stay in their thread).
    Ends after close, or at None."""
    done = ctx.socket(zmq.PAIR)
    done.setsockopt(zmq.LINGER, 0)
    done.connect("inproc://wmrl-mledojo-done")
    try:
        while (item := work.get()) is not None:
            envelope, head = item
            reply = answer(session, head)
            closing = head.get("op") == "close"
            done.send_multipart([b"close" if closing else b"", *envelope, msgpack.packb(reply, use_bin_type=True)])
            if closing:
                return
    finally:
        done.close()


def lock_output(output_dir):
    """One server per output directory: archives (execution_N.py) of two
    would overwrite each other. The lock goes with the process, however it
    ends."""
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, ".wmrl-mledojo.lock")
    f = open(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        raise SystemExit(f"{output_dir} is in use by another server (pid {f.read().strip() or '?'}); "
                         "stop it or pass another --output-dir")
    f.truncate(0)
    f.write(str(os.getpid()))
    f.flush()
    return f


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--competition", default="iris")
    ap.add_argument("--suite", default=os.path.join(HERE, "competitions"))
    ap.add_argument("--endpoint", default="tcp://127.0.0.1:5599")
    ap.add_argument("--wmrl", default=None)
    ap.add_argument("--output-dir", default=os.path.join(tempfile.gettempdir(), "wmrl-mledojo"),
                    help="output_path root: <dir>/<competition>/ holds archived code (execution_N.py)")
    ap.add_argument("--max-requests", type=int, default=0, help="exit after this many replies (0: never)")
    ap.add_argument("--report-digits", type=int, default=None,
                    help="round every raw score the agent sees to N decimals (default: exact, as MLE-Dojo)")
    a = ap.parse_args()
    if a.report_digits is not None and a.report_digits < 0:
        raise SystemExit("--report-digits must be >= 0")
    output_lock = lock_output(os.path.abspath(a.output_dir))
    session = Session(os.path.abspath(a.suite), a.competition, find_wmrl(a.wmrl), os.path.abspath(a.output_dir),
                      a.report_digits)
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
    sock.bind(a.endpoint)
    done = ctx.socket(zmq.PAIR)
    done.bind("inproc://wmrl-mledojo-done")
    work = queue.Queue()
    worker = threading.Thread(target=actions, args=(session, ctx, work), daemon=True)
    worker.start()
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    poller.register(done, zmq.POLLIN)
    print(f"wmrl-mledojo: {a.competition} on {a.endpoint}", file=sys.stderr, flush=True)
    served, closing = 0, False
    while not closing and (a.max_requests == 0 or served < a.max_requests):
        events = dict(poller.poll())
        if done in events:
            flag, *reply = done.recv_multipart()
            sock.send_multipart(reply)
            served += 1
            closing = flag == b"close"
            continue
        envelope, head = parse(sock.recv_multipart())
        # Malformed heads and hello/ping are answered here and now.
        if not isinstance(head, dict) or head.get("v") != PROTOCOL_VERSION or head.get("op") in IMMEDIATE:
            sock.send_multipart([*envelope, msgpack.packb(answer(session, head), use_bin_type=True)])
            served += 1
        else:
            work.put((envelope, head))
    # Drop what nobody will be answered for, let the action thread finish
    # the action it runs, then deliver every reply sent.
    while not work.empty():
        work.get_nowait()
    work.put(None)
    worker.join()
    done.close(linger=0)
    sock.close(linger=5000)
    ctx.term()
    output_lock.close()


if __name__ == "__main__":
    main()
