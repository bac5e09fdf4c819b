#!/usr/bin/env python3
"""The datasets check (scripts/checks.d/55-datasets.sh): fixtures written
here in the published layouts, every conversion through the real CLI, and
LeRobot's own LeRobotDataset class reading an export back.

  1. LIBERO HDF5 fixtures (h5py, the layout of LIBERO's create_dataset.py)
     -> import -> field by field against what the LIBERO server would send;
     `wmrl episodes` reads them; `wmrl sft` trains a few steps on them.
  2. A LeRobot v3 fixture in the layout of LeRobot's LIBERO datasets
     (pyarrow: 8-D states, PNG frames rotated 180 degrees, two data files)
     and one written by LeRobot's own writer (MP4) -> import -> compared.
  3. Native `wmrl demos` -> export (video and images) -> LeRobotDataset reads
     frames, actions and states -> re-import -> compared with the originals.
  4. Truncated inputs, a taken output and video encoder failures fail with
     one `error:` line (no stray encoder lines) and leave the file tree as it
     was: no output directory, parent or hidden staging directory they made.

Usage: envs/datasets/.venv/bin/python envs/datasets/check.py --wmrl target/debug/wmrl
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from wmrl_episodes import Episode, encode_png, list_episodes, read_episode, write_episode  # noqa: E402

CLI = [sys.executable, str(HERE / "wmrl_datasets.py")]
RNG = np.random.default_rng(0)
# Video is lossy: mean absolute error per frame, in 8-bit levels, that
# LeRobot's default encoding (AV1, yuv420p, crf 30) stays under on the
# simulator's frames (measured about 3).
VIDEO_MAE_MAX = 8.0


def run(args: list[str], ok: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(args, capture_output=True, text=True)
    if ok and p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(args)}\n{p.stdout}\n{p.stderr}")
    return p


def quat2axisangle(q: np.ndarray) -> np.ndarray:
    """robosuite transform_utils.quat2axisangle, (x y z w) -> axis-angle:
    what LIBERO's create_dataset.py stores as `ee_ori`."""
    q = q.copy()
    q[3] = min(max(q[3], -1.0), 1.0)
    den = math.sqrt(1.0 - q[3] * q[3])
    if math.isclose(den, 0.0):
        return np.zeros(3)
    return (q[:3] * 2.0 * math.acos(q[3])) / den


def upright_frames(t: int, h: int, w: int, seed: int) -> np.ndarray:
    """Distinct, orientation-revealing frames: a gradient, a bright block in
    the top-left corner, per-step noise."""
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // w, y * 255 // h, np.full_like(x, (seed * 37) % 256)], -1)
    f = np.repeat(base[None], t, 0).astype(np.int64)
    f += RNG.integers(0, 24, size=f.shape)
    f[:, : h // 8, : w // 8] = [255, 255, 0]
    return np.clip(f, 0, 255).astype(np.uint8)


def random_quats(t: int) -> np.ndarray:
    q = RNG.normal(size=(t, 4))
    return q / np.linalg.norm(q, axis=1, keepdims=True)


# -- 1. LIBERO HDF5 -------------------------------------------------------


LIBERO_FILES = {  # file stem (LIBERO names files after the task) -> (task, instruction, demo lengths)
    "KITCHEN_SCENE3_turn_on_the_stove_and_put_the_moka_pot_on_it_demo":
        (2, "turn on the stove and put the moka pot on it", [9, 7]),
    "LIVING_ROOM_SCENE2_put_both_the_alphabet_soup_and_the_tomato_sauce_in_the_basket_demo":
        (0, "put both the alphabet soup and the tomato sauce in the basket", [6]),
}


def write_libero_hdf5(path: Path, instruction: str, lengths: list[int]) -> list[dict]:
    """One file exactly as LIBERO's scripts/create_dataset.py writes it;
    returns per demo the upright frames and source values."""
    truth = []
    with h5py.File(path, "w") as f:
        grp = f.create_group("data")
        grp.attrs["env_name"] = "Libero_Kitchen_Tabletop_Manipulation"
        grp.attrs["problem_info"] = json.dumps({
            "problem_name": "libero_kitchen_tabletop_manipulation", "domain_name": "robosuite",
            "language_instruction": instruction})
        grp.attrs["macros_image_convention"] = "opengl"
        grp.attrs["bddl_file_name"] = f"libero/bddl_files/libero_10/{path.stem[:-5]}.bddl"
        grp.attrs["bddl_file_content"] = "(define (problem LIBERO_Kitchen_Tabletop_Manipulation))"
        grp.attrs["env_args"] = json.dumps({"type": 1, "env_name": "Libero_Kitchen_Tabletop_Manipulation",
                                            "env_kwargs": {"camera_heights": 128, "camera_widths": 128,
                                                           "control_freq": 20}})
        total = 0
        for i, t in enumerate(lengths):
            agent, wrist = upright_frames(t, 128, 128, 2 * i), upright_frames(t, 128, 128, 2 * i + 1)
            pos = RNG.normal(size=(t, 3)) * 0.2
            quat = random_quats(t)
            grip = RNG.uniform(-0.04, 0.04, size=(t, 2))
            actions = RNG.uniform(-1, 1, size=(t, 7))
            ee_states = np.hstack([pos, np.stack([quat2axisangle(q) for q in quat])])
            ep = grp.create_group(f"demo_{i}")
            obs = ep.create_group("obs")
            obs.create_dataset("gripper_states", data=grip)
            obs.create_dataset("joint_states", data=RNG.normal(size=(t, 7)))
            obs.create_dataset("ee_states", data=ee_states)
            obs.create_dataset("ee_pos", data=ee_states[:, :3])
            obs.create_dataset("ee_ori", data=ee_states[:, 3:])
            # MuJoCo renders upside down under the "opengl" convention.
            obs.create_dataset("agentview_rgb", data=agent[:, ::-1])
            obs.create_dataset("eye_in_hand_rgb", data=wrist[:, ::-1])
            states = RNG.normal(size=(t, 47))
            ep.create_dataset("actions", data=actions)
            ep.create_dataset("states", data=states)
            ep.create_dataset("robot_states", data=RNG.normal(size=(t, 9)))
            rewards = np.zeros(t, np.uint8)
            rewards[-1] = 1
            ep.create_dataset("rewards", data=rewards)
            ep.create_dataset("dones", data=rewards.copy())
            ep.attrs["num_samples"] = t
            ep.attrs["model_file"] = "<mujoco model='fixture'/>"
            ep.attrs["init_state"] = states[0]
            total += t
            truth.append({"agent": agent, "wrist": wrist, "pos": pos, "quat": quat, "grip": grip,
                          "actions": actions})
        grp.attrs["num_demos"] = len(lengths)
        grp.attrs["total"] = total
    return truth


def check_libero(tmp: Path, wmrl: str) -> Path:
    files, truths = [], []
    for stem, (task, instruction, lengths) in LIBERO_FILES.items():
        path = tmp / "libero" / f"{stem}.hdf5"
        path.parent.mkdir(parents=True, exist_ok=True)
        truths.append((task, instruction, write_libero_hdf5(path, instruction, lengths)))
        files.append(str(path))
    out = tmp / "libero_eps"
    run(CLI + ["import-libero-hdf5", *files, "--out", str(out)])
    eps = [read_episode(p) for p in list_episodes(out)]
    want = [(task, ins, d) for task, ins, demos in truths for d in demos]
    assert len(eps) == len(want) == 3, len(eps)
    for k, (ep, (task, ins, d)) in enumerate(zip(eps, want)):
        t = len(d["actions"]) - 1  # --pairing next: obs[k] with actions[k+1]
        assert (ep.suite, ep.task, ep.instruction, ep.success) == ("libero_10", task, ins, True), k
        assert ep.camera_names == ["agentview", "wrist"] and len(ep) == t, (ep.camera_names, len(ep))
        # Frames: exactly the LIBERO server's (rows flipped back upright).
        assert np.array_equal(ep.frames[0], d["agent"][:t]) and np.array_equal(ep.frames[1], d["wrist"][:t])
        # Proprio: eef pos, eef quaternion xyzw, gripper qpos, as float32.
        assert np.array_equal(ep.proprio[:, :3], d["pos"][:t].astype(np.float32))
        assert np.array_equal(ep.proprio[:, 7:], d["grip"][:t].astype(np.float32))
        err = np.abs(ep.proprio[:, 3:7] - d["quat"][:t]).max()
        assert err < 1e-6, f"quaternion off by {err}"
        assert np.array_equal(ep.actions, d["actions"][1:].astype(np.float32))
        assert ep.progress == [None] * t and ep.final_progress is None
    same = tmp / "libero_same"
    same.mkdir()  # an existing directory: files moved in, not the directory renamed
    run(CLI + ["import-libero-hdf5", files[1], "--out", str(same), "--pairing", "same", "--task", "0"])
    assert sorted(p.name for p in same.iterdir()) == ["ep_000000.msgpack"], list(same.iterdir())
    assert sorted(p.name for p in out.iterdir()) == [f"ep_{i:06d}.msgpack" for i in range(3)]
    left = [p.name for p in tmp.iterdir() if p.name.startswith(".")]
    assert not left, f"staging directories left after imports: {left}"
    ep = read_episode(list_episodes(same)[0])
    d = truths[1][2][0]
    assert len(ep) == 6 and np.array_equal(ep.actions, d["actions"].astype(np.float32))
    assert np.array_equal(ep.frames[0], d["agent"])
    listed = [json.loads(line) for line in run([wmrl, "episodes", "--json", str(out)]).stdout.splitlines()]
    got = [(e["task"], e["steps"], e["success"]) for e in listed]
    assert got == [(2, 8, True), (2, 6, True), (0, 5, True)], listed
    print(f"libero hdf5: {len(files)} files -> {len(eps)} episodes, fields equal "
          f"(frames flipped upright, quaternion within {err:.1e}), wmrl episodes reads them")
    return out


def check_sft(tmp: Path, wmrl: str, demos: Path) -> None:
    out = tmp / "sft"
    # The same command as for native demos, capped at 3 steps.
    run([wmrl, "sft", "--demos", str(demos), "--config", "configs/policy_tiny.toml",
         "--steps", "3", "--batch-size", "4", "--out", str(out)])
    rep = json.loads((out / "sft_report.json").read_text())
    assert rep["episodes"] == 3 and rep["samples"] == 8 + 6 + 5 and rep["steps"] == 3, rep
    assert math.isfinite(rep["final_loss"]), rep
    assert (out / "model.safetensors").is_file()
    print(f"sft on imported LIBERO demos: {rep['steps']} steps on {rep['samples']} samples, "
          f"loss {rep['final_loss']:.3f}")


# -- 2. LeRobot v3 in -----------------------------------------------------


def write_lerobot_libero(root: Path, episodes: list[dict], fps: int) -> None:
    """A LeRobot v3 dataset in the layout of LeRobot's LIBERO datasets
    (HuggingFaceVLA/libero: PNG frames in the parquet, 8-D state), written
    with pyarrow; episodes 0-1 in data file-000, the rest in file-001."""
    feats = {
        "observation.images.image": {"dtype": "image", "shape": [128, 128, 3],
                                     "names": ["height", "width", "channel"]},
        "observation.images.wrist_image": {"dtype": "image", "shape": [128, 128, 3],
                                           "names": ["height", "width", "channel"]},
        "observation.state": {"dtype": "float32", "shape": [8], "names": {"motors": [
            "x", "y", "z", "axis_angle1", "axis_angle2", "axis_angle3", "gripper", "gripper"]}},
        "action": {"dtype": "float32", "shape": [7], "names": {"motors": [
            "x", "y", "z", "roll", "pitch", "yaw", "gripper"]}},
        "timestamp": {"dtype": "float32", "shape": [1], "names": None},
        "frame_index": {"dtype": "int64", "shape": [1], "names": None},
        "episode_index": {"dtype": "int64", "shape": [1], "names": None},
        "index": {"dtype": "int64", "shape": [1], "names": None},
        "task_index": {"dtype": "int64", "shape": [1], "names": None},
    }
    img = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    schema = pa.schema([("observation.images.image", img), ("observation.images.wrist_image", img),
                        ("observation.state", pa.list_(pa.float32(), 8)),
                        ("action", pa.list_(pa.float32(), 7)), ("timestamp", pa.float32()),
                        ("frame_index", pa.int64()), ("episode_index", pa.int64()),
                        ("index", pa.int64()), ("task_index", pa.int64())])
    tasks = sorted({e["instruction"] for e in episodes})
    meta, start = [], 0
    tables: dict[int, list[pa.Table]] = {0: [], 1: []}
    for i, e in enumerate(episodes):
        t = len(e["actions"])
        file = 0 if i < 2 else 1
        cols = {
            "observation.images.image": [{"bytes": encode_png(f), "path": None} for f in e["image"]],
            "observation.images.wrist_image": [{"bytes": encode_png(f), "path": None}
                                               for f in e["wrist_image"]],
            "observation.state": list(e["state"].astype(np.float32)),
            "action": list(e["actions"].astype(np.float32)),
            "timestamp": (np.arange(t) / fps).astype(np.float32), "frame_index": np.arange(t),
            "episode_index": np.full(t, i), "index": start + np.arange(t),
            "task_index": np.full(t, tasks.index(e["instruction"])),
        }
        tables[file].append(pa.table(cols, schema=schema))
        meta.append({"episode_index": i, "tasks": [e["instruction"]], "length": t,
                     "data/chunk_index": 0, "data/file_index": file, "dataset_from_index": start,
                     "dataset_to_index": start + t, "meta/episodes/chunk_index": 0,
                     "meta/episodes/file_index": 0,
                     "stats/action/min": e["actions"].min(0).tolist(),
                     "stats/action/max": e["actions"].max(0).tolist()})
        start += t
    for file, parts in tables.items():
        path = root / f"data/chunk-000/file-{file:03d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.concat_tables(parts), path)
    (root / "meta/episodes/chunk-000").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(meta), root / "meta/episodes/chunk-000/file-000.parquet")
    pd.DataFrame({"task_index": range(len(tasks))}, index=pd.Index(tasks, name="task")).to_parquet(
        root / "meta/tasks.parquet")
    info = {"codebase_version": "v3.0", "robot_type": "panda", "total_episodes": len(episodes),
            "total_frames": start, "total_tasks": len(tasks), "chunks_size": 1000,
            "data_files_size_in_mb": 100, "video_files_size_in_mb": 200, "fps": fps,
            "splits": {"train": f"0:{len(episodes)}"},
            "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
            "video_path": None, "features": feats}
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))
    (root / "meta/stats.json").write_text("{}")


def lerobot_truth(n_steps: list[int]) -> list[dict]:
    out = []
    for i, t in enumerate(n_steps):
        up_a, up_w = upright_frames(t, 128, 128, 10 + i), upright_frames(t, 128, 128, 20 + i)
        quat = random_quats(t)
        pos, grip = RNG.normal(size=(t, 3)) * 0.2, RNG.uniform(-0.04, 0.04, size=(t, 2))
        state = np.hstack([pos, np.stack([quat2axisangle(q) for q in quat]), grip])
        out.append({
            "instruction": ["put both moka pots on the stove",
                            "pick up the book and place it in the back compartment of the caddy"][i % 2],
            # LeRobot's LIBERO datasets hold the simulator's frames rotated 180 degrees:
            # upright (the server's) = stored mirrored left-right.
            "image": up_a[:, :, ::-1], "wrist_image": up_w[:, :, ::-1], "up_a": up_a, "up_w": up_w,
            "state": state, "pos": pos, "quat": quat, "grip": grip,
            "actions": RNG.uniform(-1, 1, size=(t, 7)),
        })
    return out


def check_lerobot_in(tmp: Path) -> None:
    truth = lerobot_truth([5, 4, 6])
    root = tmp / "lerobot_libero"
    write_lerobot_libero(root, truth, fps=10)
    out = tmp / "lerobot_libero_eps"
    run(CLI + ["import-lerobot", str(root), "--out", str(out), "--flip", "horizontal",
               "--suite", "libero_10"])
    eps = [read_episode(p) for p in list_episodes(out)]
    assert len(eps) == 3
    for i, (ep, d) in enumerate(zip(eps, truth)):
        assert (ep.suite, ep.task, ep.instruction) == ("libero_10", [8, 5][i % 2], d["instruction"]), i
        assert (ep.init_state, ep.success, ep.source) == (i, True, "lerobot:lerobot_libero")
        assert np.array_equal(ep.frames[0], d["up_a"]) and np.array_equal(ep.frames[1], d["up_w"])
        assert np.array_equal(ep.proprio[:, :3], d["pos"].astype(np.float32))
        assert np.array_equal(ep.proprio[:, 7:], d["grip"].astype(np.float32))
        # float32 axis-angle in the file: the quaternion comes back within float32 rounding.
        assert np.abs(ep.proprio[:, 3:7] - d["quat"]).max() < 2e-6
        assert np.array_equal(ep.actions, d["actions"].astype(np.float32))
    print("lerobot v3 (LIBERO layout, pyarrow, 2 data files): 3 episodes, fields equal "
          "(8-D axis-angle state -> 9-D quaternion, frames re-oriented, tasks matched)")


def check_lerobot_writer_in(tmp: Path) -> None:
    """A dataset written by LeRobot's own writer (MP4 frames) imports."""
    import av
    from ledataset.datasets.lerobot_dataset import LeRobotDataset

    root = tmp / "lerobot_written"
    feats = {"observation.images.front": {"dtype": "video", "shape": (64, 64, 3),
                                          "names": ["height", "width", "channels"]},
             "observation.state": {"dtype": "float32", "shape": (9,), "names": None},
             "action": {"dtype": "float32", "shape": (7,), "names": None}}
    av.logging.set_level(av.logging.ERROR)  # LeRobot's concatenation logs at info level
    ds = LeRobotDataset.create("wmrl/written", fps=20, features=feats, root=root, use_videos=True)
    truth = []
    for e, t in enumerate([6, 5]):
        frames = upright_frames(t, 64, 64, 30 + e)
        state = RNG.normal(size=(t, 9)).astype(np.float32)
        act = RNG.uniform(-1, 1, size=(t, 7)).astype(np.float32)
        for i in range(t):
            ds.add_frame({"observation.images.front": frames[i], "observation.state": state[i],
                          "action": act[i], "task": "put both moka pots on the stove"})
        ds.save_episode(parallel_encoding=False)
        truth.append((frames, state, act))
    ds.finalize()
    out = tmp / "lerobot_written_eps"
    run(CLI + ["import-lerobot", str(root), "--out", str(out),
               "--camera", "agentview=observation.images.front"])
    eps = [read_episode(p) for p in list_episodes(out)]
    assert len(eps) == 2
    for ep, (frames, state, act) in zip(eps, truth):
        assert np.array_equal(ep.proprio, state) and np.array_equal(ep.actions, act)
        assert ep.instruction == "put both moka pots on the stove" and ep.task == 0
        mae = np.abs(ep.frames[0].astype(np.int64) - frames).mean()
        assert mae < VIDEO_MAE_MAX, mae
    print(f"lerobot v3 written by LeRobot's LeRobotDataset (AV1 video): 2 episodes, state and "
          f"action equal, frames within {mae:.2f} levels")


# -- 3. export, LeRobot reads it, re-import --------------------------------


def fields_equal(a, b, frames: bool) -> float:
    for f in ("suite", "task", "init_state", "seed", "instruction", "success", "final_progress",
              "source", "camera_names", "progress"):
        assert getattr(a, f) == getattr(b, f), (f, getattr(a, f), getattr(b, f))
    assert np.array_equal(a.proprio, b.proprio) and np.array_equal(a.actions, b.actions)
    mae = max(float(np.abs(x.astype(np.int64) - y).mean()) for x, y in zip(a.frames, b.frames))
    assert (mae == 0) if frames else mae < VIDEO_MAE_MAX, mae
    return mae


def check_export(tmp: Path, wmrl: str) -> None:
    from ledataset.datasets.lerobot_dataset import LeRobotDataset

    demos = tmp / "demos"
    run([wmrl, "demos", "--tasks", "0", "--per-task", "2", "--threads", "1", "--out", str(demos)])
    native = [read_episode(p) for p in list_episodes(demos)]
    for mode in ("video", "images"):
        root = tmp / f"export_{mode}"
        run(CLI + ["export-lerobot", str(demos), "--out", str(root), f"--{mode}"])
        info = json.loads((root / "meta/info.json").read_text())
        assert info["codebase_version"] == "v3.0" and info["total_episodes"] == 2
        # LeRobot's own reader, local root only; PyAV decodes the MP4s
        # (torchcodec needs FFmpeg's shared libraries, not installed here).
        ds = LeRobotDataset("wmrl/export", root=root, video_backend="pyav")
        assert len(ds) == sum(len(e) for e in native) and ds.num_episodes == 2
        k, worst = 0, 0.0
        for e, ep in enumerate(native):
            for i in range(len(ep)):
                every = mode == "video" or i % 4 == 0 or i == len(ep) - 1
                item = ds[k] if every else None
                k += 1
                if item is None:
                    continue
                assert (item["episode_index"].item(), item["frame_index"].item()) == (e, i)
                assert np.array_equal(item["action"].numpy(), ep.actions[i])
                assert np.array_equal(item["observation.state"].numpy(), ep.proprio[i])
                assert item["task"] == ep.instruction
                assert abs(item["wmrl.progress"].item() - ep.progress[i]) < 1e-7
                for c, name in enumerate(ep.camera_names):
                    img = np.round(item[f"observation.images.{name}"].numpy().transpose(1, 2, 0) * 255)
                    err = float(np.abs(img - ep.frames[c][i]).mean())
                    worst = max(worst, err)
        assert (worst == 0) if mode == "images" else worst < VIDEO_MAE_MAX, (mode, worst)
        back = tmp / f"reimport_{mode}"
        run(CLI + ["import-lerobot", str(root), "--out", str(back)])
        again = [read_episode(p) for p in list_episodes(back)]
        assert len(again) == len(native)
        mae = max(fields_equal(a, b, frames=mode == "images") for a, b in zip(native, again))
        print(f"export {mode}: LeRobotDataset reads {len(ds)} frames (actions, states exact; frames "
              f"{'exact' if worst == 0 else f'within {worst:.2f} levels'}); re-import equals the "
              f"originals{'' if mae == 0 else f' (frames within {mae:.2f} levels)'}")


# -- 4. malformed inputs ---------------------------------------------------


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def expect_error(tmp: Path, args: list[str], what: str, encoder: bool = False) -> str:
    """The command fails with exactly one `error:` line on stderr (the video
    encoder's own lines inside it only when `encoder`), nothing on stdout, and
    leaves every path under `tmp` as it was: no output directory, parent or
    hidden staging directory it made, no file added to an existing one."""
    before = tree(tmp)
    p = run(CLI + args, ok=False)
    assert p.returncode == 1, (what, p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    clean = len(lines) == 1 and lines[0].startswith("error: ") and not p.stdout
    assert clean, (what, p.stdout, p.stderr)
    assert ("encoder: Svt[error]" in lines[0]) == encoder, (what, lines[0])
    after = tree(tmp)
    assert after == before, (what, "made", sorted(after - before), "removed", sorted(before - after))
    return lines[0]


def write_flat_episode(d: Path, width: int, height: int) -> None:
    """One valid 3-step episode with frames of the given size."""
    d.mkdir(parents=True)
    t = 3
    write_episode(d, 0, Episode(
        suite="fixture", task=0, init_state=0, seed=0, instruction="put both moka pots on the stove",
        success=True, final_progress=None, source="check", camera_names=["agentview"],
        frames=[np.full((t, height, width, 3), 128, np.uint8)],
        proprio=np.zeros((t, 9), np.float32), actions=np.zeros((t, 7), np.float32),
        progress=[None] * t))


def check_export_failures(tmp: Path) -> None:
    """A failed export prints its one error line only: nothing the video
    encoder prints reaches the terminal unless the encoder caused the
    failure, and then inside that line."""
    bad_ep = tmp / "bad" / "eps"
    # After the good demos, so the encoders are mid-stream when it fails
    # (SVT-AV1 complains "deinit called without sending EOS!" if freed so).
    line = expect_error(tmp, ["export-lerobot", str(tmp / "demos"), str(bad_ep), "--out",
                              str(tmp / "new_parent" / "bad_export")], "truncated episode after good ones")
    assert "not a whole episode file" in line, line
    flat = tmp / "bad" / "flat"
    write_flat_episode(flat, 64, 2)  # SVT-AV1 refuses frames under 4 pixels high
    line = expect_error(tmp, ["export-lerobot", str(flat), "--out", str(tmp / "bad_export")],
                        "encoder refuses the frame size", encoder=True)
    assert "libsvtav1 video encoding failed" in line, line
    narrow = tmp / "bad" / "narrow"
    write_flat_episode(narrow, 8, 64)  # SVT-AV1 3.0.0 dies of SIGFPE on these
    line = expect_error(tmp, ["export-lerobot", str(narrow), "--out", str(tmp / "bad_export")],
                        "frames too narrow for SVT-AV1")
    assert "at least 26 pixels wide" in line, line
    run(CLI + ["export-lerobot", str(narrow), "--out", str(tmp / "narrow_h264"), "--vcodec", "h264"])
    print("failed exports: truncated episode after encoding began, encoder refusal, frames too narrow: "
          "one error line each (encoder lines only inside the encoder's), nothing left behind")


def check_malformed(tmp: Path) -> None:
    src = tmp / "libero" / (next(iter(LIBERO_FILES)) + ".hdf5")
    cut = tmp / "bad" / "truncated_demo.hdf5"
    cut.parent.mkdir()
    cut.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    good = tmp / "libero" / (list(LIBERO_FILES)[1] + ".hdf5")
    # A good file first: its demos must not be written either.
    # Into a missing directory under a missing parent: neither may stay.
    expect_error(tmp, ["import-libero-hdf5", str(good), str(cut), "--out",
                       str(tmp / "bad_parent" / "bad_out1")], "truncated hdf5")
    # Into an existing directory: its entries stay exactly as they were.
    (tmp / "bad_out_existing").mkdir()
    (tmp / "bad_out_existing" / "notes.txt").write_text("kept")
    expect_error(tmp, ["import-libero-hdf5", str(good), str(cut), "--out",
                       str(tmp / "bad_out_existing")], "truncated hdf5 into an existing directory")
    root = tmp / "bad" / "lerobot"
    shutil.copytree(tmp / "lerobot_libero", root)
    data = root / "data/chunk-000/file-001.parquet"
    data.write_bytes(data.read_bytes()[:-100])
    expect_error(tmp, ["import-lerobot", str(root), "--out", str(tmp / "bad_out2")],
                 "truncated parquet")
    vroot = tmp / "bad" / "video"
    shutil.copytree(tmp / "export_video", vroot)
    mp4 = vroot / "videos/observation.images.wrist/chunk-000/file-000.mp4"
    mp4.write_bytes(mp4.read_bytes()[: mp4.stat().st_size // 3])
    expect_error(tmp, ["import-lerobot", str(vroot), "--out", str(tmp / "bad_out3")],
                 "truncated mp4")
    expect_error(tmp, ["export-lerobot", str(tmp / "demos"), "--out", str(tmp / "export_video")],
                 "export onto an existing dataset")
    bad_ep = tmp / "bad" / "eps"
    bad_ep.mkdir()
    ep_bytes = list_episodes(tmp / "demos")[0].read_bytes()
    (bad_ep / "ep_000000.msgpack").write_bytes(ep_bytes[: len(ep_bytes) // 2])
    expect_error(tmp, ["export-lerobot", str(bad_ep), "--out", str(tmp / "bad_export")],
                 "truncated episode")
    expect_error(tmp, ["import-libero-hdf5", str(good), "--out", str(tmp / "libero_eps")],
                 "import over existing episodes")
    print("malformed: truncated HDF5, parquet, MP4 and episode file, a taken output: one error "
          "line each, nothing created (no output directory, parent or staging left)")
    check_export_failures(tmp)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wmrl", default="target/debug/wmrl")
    a = ap.parse_args()
    wmrl = str(Path(a.wmrl).resolve())
    os.environ["HF_HUB_OFFLINE"] = "1"  # never a hub: every dataset here is local
    # Quiet LeRobot's writer and reader: SVT-AV1's banner, datasets' progress
    # bars, torchvision's deprecation notice for the PyAV path.
    os.environ["SVT_LOG"] = "1"
    os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
    warnings.filterwarnings("ignore", message="The video decoding and encoding capabilities")
    warnings.filterwarnings("ignore", message="Cannot enable progress bars")
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="wmrl-datasets-") as d:
        tmp = Path(d)
        libero = check_libero(tmp, wmrl)
        check_sft(tmp, wmrl, libero)
        check_lerobot_in(tmp)
        check_lerobot_writer_in(tmp)
        check_export(tmp, wmrl)
        check_malformed(tmp)
    print(f"datasets check passed in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
