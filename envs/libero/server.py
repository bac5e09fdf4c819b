#!/usr/bin/env python3
"""The real LIBERO simulator behind the wmrl-bridge protocol (docs/protocol.md).

Serves N LIBERO environments (one per slot) on a ZeroMQ ROUTER socket with
pyzmq + msgpack: the same handshake, reset, step, close and ping as the Rust
server in crates/wmrl-bridge, so a `BridgePool` cannot tell them apart.

LIBERO specifics (kept from upstream):
  * `from libero.libero import benchmark`; `OffScreenRenderEnv` from
    `libero.libero.envs`; the suite (default `libero_10`, 10 tasks) with its
    50 fixed initial states per task from `get_task_init_states`.
  * reset = `env.reset()` (with `hard_reset=False`: a hard reset costs ~5 s),
    then `env.set_init_state(init_states[i])`.
  * 7-D OSC_POSE actions, clipped to [-1, 1]; wrong dimension or non-finite
    values get a `bad_action` error reply.
  * MuJoCo renders images upside down: frames are flipped vertically
    (`--rotate180` also mirrors them, as OpenVLA's LIBERO preprocessing does).
  * `done` only on success (`env.check_success()`); `truncated` at the
    task's step limit (520 for LIBERO-10, as in the LIBERO-Long evaluations).

proprio (9 values, like the embedded simulator): robot0_eef_pos (3),
robot0_eef_quat (4, x y z w), robot0_gripper_qpos (2).

Usage:
  MUJOCO_GL=egl envs/libero/.venv/bin/python envs/libero/server.py \
      --bind tcp://127.0.0.1:5555 --envs 2 --image 128
Prints `ENDPOINT <endpoint>` on stdout once bound. Never exits on bad input.
"""

import argparse
import math
import os
import random
import sys
import time
import traceback

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

import msgpack  # noqa: E402
import numpy as np  # noqa: E402
import zmq  # noqa: E402

PROTOCOL_VERSION = 1
ACTION_DIM = 7
PROPRIO_DIM = 9
MAX_STEPS = {"libero_10": 520, "libero_90": 400, "libero_spatial": 220,
             "libero_object": 280, "libero_goal": 300}


def _uint(v, bits):
    """An unsigned integer of the protocol's width (msgpack ints; not bool)."""
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2 ** bits


def _field(m, key, bits, what):
    """A required unsigned field; missing or mistyped is bad_message, as the
    Rust server's decoder has it (docs/protocol.md: integer widths)."""
    if key not in m:
        raise WireError("bad_message", f"{what}: missing field {key!r}")
    v = m[key]
    if not _uint(v, bits):
        raise WireError("bad_message", f"{what}: {key} must be an unsigned {bits}-bit integer, got {v!r}")
    return v


class WireError(Exception):
    """A typed error reply: kind is one of docs/protocol.md's error kinds."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind
        self.message = message


def log(*args):
    print("[libero-server]", *args, file=sys.stderr, flush=True)


class LiberoSlots:
    """N slots, each holding one OffScreenRenderEnv for its current task."""

    def __init__(self, suite, n_envs, image, rotate180):
        from libero.libero import benchmark, get_libero_path

        self.suite_name = suite
        self.suite = benchmark.get_benchmark_dict()[suite]()
        self.bddl_root = get_libero_path("bddl_files")
        self.n_envs = n_envs
        self.image = image
        self.rotate180 = rotate180
        self.max_steps = MAX_STEPS.get(suite, 500)
        self.init_states = [self.suite.get_task_init_states(i)
                            for i in range(self.suite.n_tasks)]
        # Per slot: [task index or None, env or None, steps, running]
        self.slots = [[None, None, 0, False] for _ in range(n_envs)]

    def spec(self):
        tasks = []
        for i in range(self.suite.n_tasks):
            t = self.suite.get_task(i)
            tasks.append({
                "index": i,
                "name": t.name,
                "instruction": t.language,
                "n_init_states": int(len(self.init_states[i])),
                "max_steps": self.max_steps,
            })
        cams = [{"name": n, "width": self.image, "height": self.image}
                for n in ("agentview", "wrist")]
        return {
            "suite": self.suite_name,
            "action_dim": ACTION_DIM,
            "action_low": -1.0,
            "action_high": 1.0,
            "control_hz": 20.0,
            "cameras": cams,
            "proprio_dim": PROPRIO_DIM,
            "tasks": tasks,
        }

    def _make_env(self, task):
        from libero.libero.envs import OffScreenRenderEnv

        t = self.suite.get_task(task)
        bddl = os.path.join(self.bddl_root, t.problem_folder, t.bddl_file)
        return OffScreenRenderEnv(
            bddl_file_name=bddl,
            camera_heights=self.image,
            camera_widths=self.image,
            hard_reset=False,
        )

    def _observe(self, obs):
        frames = []
        for key in ("agentview_image", "robot0_eye_in_hand_image"):
            img = obs[key]
            img = img[::-1, ::-1] if self.rotate180 else img[::-1]
            frames.append(np.ascontiguousarray(img, dtype=np.uint8).tobytes())
        proprio = np.concatenate([
            obs["robot0_eef_pos"], obs["robot0_eef_quat"], obs["robot0_gripper_qpos"],
        ]).astype(np.float64).tolist()
        return proprio, frames

    def check_slots(self, slots):
        seen = set()
        for s in slots:
            if s >= self.n_envs:
                raise WireError("bad_slot", f"slot {s!r} out of range: {self.n_envs} slots")
            if s in seen:
                raise WireError("bad_slot", f"slot {s} named twice")
            seen.add(s)

    def check_reset(self, r):
        task, init = r["task"], r["init_state"]
        if not task < self.suite.n_tasks:
            raise WireError("unknown_task",
                            f"unknown task index {task!r}: {self.suite.n_tasks} tasks")
        n = len(self.init_states[task])
        if not init < n:
            raise WireError("unknown_init_state",
                            f"unknown initial state {init!r} for task {task}: it has {n}")

    def reset(self, resets):
        # Types first (a malformed message), then ranges, as the Rust server.
        for r in resets:
            for key, bits in (("slot", 32), ("task", 32), ("init_state", 32), ("seed", 64)):
                _field(r, key, bits, "reset")
        self.check_slots([r["slot"] for r in resets])
        for r in resets:
            self.check_reset(r)
        results, frames = [], []
        for r in resets:
            slot = self.slots[r["slot"]]
            task = r["task"]
            if slot[0] != task or slot[1] is None:
                if slot[1] is not None:
                    slot[1].close()
                slot[1] = None
                slot[1] = self._make_env(task)
                slot[0] = task
            env = slot[1]
            env.seed(int(r["seed"]) % (2**31))
            env.reset()
            obs = env.set_init_state(self.init_states[task][r["init_state"]])
            slot[2], slot[3] = 0, True
            proprio, f = self._observe(obs)
            results.append({"slot": r["slot"], "reward": 0.0, "success": False,
                            "done": False, "truncated": False, "proprio": proprio,
                            "progress": None})
            frames.extend(f)
        return results, frames

    def step(self, actions):
        for a in actions:
            _field(a, "slot", 32, "step")
            act = a.get("action")
            if not isinstance(act, (list, tuple)) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in act):
                raise WireError("bad_message", "step: action must be a list of numbers")
        self.check_slots([a["slot"] for a in actions])
        clean = []
        for a in actions:
            slot = self.slots[a["slot"]]
            if not slot[3]:
                raise WireError("not_reset", f"slot {a['slot']} must be reset before it is stepped")
            act = a.get("action")
            if not isinstance(act, (list, tuple)) or len(act) != ACTION_DIM:
                n = len(act) if isinstance(act, (list, tuple)) else "no"
                raise WireError("bad_action", f"expected {ACTION_DIM} dimensions, got {n}")
            if not all(math.isfinite(v) for v in act):
                raise WireError("bad_action", "actions must be finite numbers")
            clean.append((a["slot"], np.clip(np.asarray(act, dtype=np.float64), -1.0, 1.0)))
        results, frames = [], []
        for s, act in clean:
            slot = self.slots[s]
            obs, _reward, _done, _info = slot[1].step(act.tolist())
            slot[2] += 1
            success = bool(slot[1].check_success())
            truncated = (not success) and slot[2] >= self.max_steps
            if success or truncated:
                slot[3] = False
            proprio, f = self._observe(obs)
            results.append({"slot": s, "reward": 1.0 if success else 0.0, "success": success,
                            "done": success, "truncated": truncated, "proprio": proprio,
                            "progress": None})
            frames.extend(f)
        return results, frames

    def close_session(self):
        for slot in self.slots:
            slot[3] = False


def reply(req_id, ok=True, error=None, hello=None, results=()):
    return msgpack.packb({
        "v": PROTOCOL_VERSION, "id": req_id, "ok": ok, "error": error,
        "hello": hello, "results": list(results),
    }, use_bin_type=True)


def handle(slots, server_id, body):
    """One request (parts without envelope) -> reply parts. Never raises."""
    req_id = 0
    try:
        if not body:
            raise WireError("bad_message", "empty message")
        try:
            head = msgpack.unpackb(body[0], raw=False, strict_map_key=False)
        except Exception as e:  # any decoding failure is the client's
            raise WireError("bad_message", f"undecodable header: {e}") from None
        if not isinstance(head, dict):
            raise WireError("bad_message", "the header must be a map")
        rid = head.get("id")
        req_id = rid if _uint(rid, 64) else 0
        if head.get("v") != PROTOCOL_VERSION:
            raise WireError("version", f"protocol version {head.get('v')!r} not supported: "
                            f"this server speaks {PROTOCOL_VERSION}")
        _field(head, "id", 64, "header")
        if len(body) != 1:
            raise WireError("bad_message", f"a request has exactly one part, got {len(body)}")
        op = head.get("op")
        if op == "hello":
            return [reply(req_id, hello={"server": "libero-server", "server_id": server_id,
                                         "num_envs": slots.n_envs, "spec": slots.spec()})]
        if op == "ping":
            return [reply(req_id)]
        if op == "close":
            slots.close_session()
            return [reply(req_id)]
        if op in ("reset", "step"):
            # nil equals absent (docs/protocol.md): an empty list.
            items = head.get("resets" if op == "reset" else "actions")
            items = [] if items is None else items
            if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
                raise WireError("bad_message", f"{op} needs a list of maps")
            results, frames = slots.reset(items) if op == "reset" else slots.step(items)
            return [reply(req_id, results=results)] + frames
        raise WireError("bad_message", f"unknown op {op!r}")
    except WireError as e:
        return [reply(req_id, ok=False, error={"kind": e.kind, "message": e.message})]
    except Exception as e:  # the simulator failed: typed, and keep serving
        log("simulator error:", traceback.format_exc())
        return [reply(req_id, ok=False, error={"kind": "sim", "message": repr(e)})]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bind", default="tcp://127.0.0.1:5555")
    ap.add_argument("--envs", type=int, default=1)
    ap.add_argument("--suite", default="libero_10")
    ap.add_argument("--image", type=int, default=128)
    ap.add_argument("--rotate180", action="store_true")
    args = ap.parse_args()

    slots = LiberoSlots(args.suite, args.envs, args.image, args.rotate180)
    server_id = random.SystemRandom().getrandbits(63)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, 16 << 20)
    sock.bind(args.bind)
    endpoint = sock.getsockopt(zmq.LAST_ENDPOINT).decode()
    print(f"ENDPOINT {endpoint}", flush=True)
    log(f"serving {args.suite} ({slots.suite.n_tasks} tasks) on {endpoint}, "
        f"{args.envs} envs, MUJOCO_GL={os.environ['MUJOCO_GL']}")
    while True:
        parts = sock.recv_multipart()
        if not parts:
            continue
        identity, rest = parts[0], parts[1:]
        delimited = bool(rest) and len(rest[0]) == 0
        body = rest[1:] if delimited else rest
        t0 = time.perf_counter()
        out = handle(slots, server_id, body)
        envelope = [identity] + ([b""] if delimited else []) + out
        try:
            sock.send_multipart(envelope, copy=False)
        except zmq.ZMQError as e:
            log("reply not sent:", e)
        if os.environ.get("LIBERO_SERVER_TRACE"):
            log(f"request served in {time.perf_counter() - t0:.3f} s")


if __name__ == "__main__":
    main()
