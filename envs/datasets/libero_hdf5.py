"""LIBERO's published HDF5 demonstrations -> wmrl episodes (docs/datasets.md).

The layout is the one LIBERO's `scripts/create_dataset.py` writes (and its
`libero/lifelong/datasets.py` reads): `data` with attrs `problem_info` (JSON,
`language_instruction`), `env_args`, `bddl_file_name`,
`macros_image_convention`; per demo `data/demo_N` with `actions` (T, 7),
`dones`, `rewards`, and `obs/agentview_rgb`, `obs/eye_in_hand_rgb` (T, H, W, 3
uint8, MuJoCo's upside-down frames under the "opengl" convention),
`obs/ee_pos` (T, 3), `obs/ee_ori` (T, 3: `quat2axisangle(robot0_eef_quat)`),
`obs/gripper_states` (T, 2: `robot0_gripper_qpos`), `obs/joint_states`.

Observations and proprio come out exactly as envs/libero/server.py builds
them from the live simulator: frames flipped vertically (and mirrored too
with `rotate180`, as the server's `--rotate180`), proprio = eef position,
eef quaternion (x y z w), the two gripper joint positions. This module must
never guess a task index it cannot tie to the file.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from collections.abc import Iterator

import numpy as np

from wmrl_episodes import DatasetError, Episode

# LIBERO-10 in benchmark order (libero/libero/benchmark/libero_suite_task_map.py)
# with each task's language as LIBERO derives it from the BDDL file name
# (benchmark.grab_language_from_filename): what the real LIBERO server sends
# as the instruction, so imported demos condition the policy identically.
LIBERO_10 = [
    "LIVING_ROOM_SCENE2_put_both_the_alphabet_soup_and_the_tomato_sauce_in_the_basket",
    "LIVING_ROOM_SCENE2_put_both_the_cream_cheese_box_and_the_butter_in_the_basket",
    "KITCHEN_SCENE3_turn_on_the_stove_and_put_the_moka_pot_on_it",
    "KITCHEN_SCENE4_put_the_black_bowl_in_the_bottom_drawer_of_the_cabinet_and_close_it",
    "LIVING_ROOM_SCENE5_put_the_white_mug_on_the_left_plate_and_put_the_yellow_and_white_mug_on_the_right_plate",
    "STUDY_SCENE1_pick_up_the_book_and_place_it_in_the_back_compartment_of_the_caddy",
    "LIVING_ROOM_SCENE6_put_the_white_mug_on_the_plate_and_put_the_chocolate_pudding_to_the_right_of_the_plate",
    "LIVING_ROOM_SCENE1_put_both_the_alphabet_soup_and_the_cream_cheese_box_in_the_basket",
    "KITCHEN_SCENE8_put_both_moka_pots_on_the_stove",
    "KITCHEN_SCENE6_put_the_yellow_and_white_mug_in_the_microwave_and_close_it",
]
SUITE_TASKS = {"libero_10": LIBERO_10}


def task_language(task_name: str) -> str:
    """LIBERO's benchmark.grab_language_from_filename, without the `.bddl`."""
    x = task_name
    if x[0].isupper():
        if "SCENE10" in x:
            return " ".join(x[x.find("SCENE") + 8:].split("_"))
        return " ".join(x[x.find("SCENE") + 7:].split("_"))
    return " ".join(x.split("_"))


def _norm(s: str) -> str:
    return " ".join(s.strip().strip('"').lower().split())


def axisangle2quat(vec: np.ndarray) -> np.ndarray:
    """robosuite.utils.transform_utils.axisangle2quat: axis-angle -> (x, y, z, w).
    The exact inverse of the quat2axisangle that wrote `ee_ori`."""
    angle = float(np.linalg.norm(vec))
    if math.isclose(angle, 0.0):
        return np.array([0.0, 0.0, 0.0, 1.0])
    axis = vec / angle
    q = np.zeros(4)
    q[3] = np.cos(angle / 2.0)
    q[:3] = axis * np.sin(angle / 2.0)
    return q


def libero_proprio(ee_pos: np.ndarray, ee_axisangle: np.ndarray, gripper: np.ndarray) -> np.ndarray:
    """(T, 3), (T, 3), (T, 2) -> (T, 9) float32 as envs/libero/server.py sends:
    robot0_eef_pos, robot0_eef_quat (x y z w), robot0_gripper_qpos."""
    quat = np.stack([axisangle2quat(np.asarray(v, dtype=np.float64)) for v in ee_axisangle])
    return np.concatenate([np.asarray(ee_pos, np.float64), quat, np.asarray(gripper, np.float64)],
                          axis=1).astype(np.float32)


def upright(frames: np.ndarray, convention: str, rotate180: bool) -> np.ndarray:
    """Stored frames -> what the LIBERO server sends: MuJoCo's offscreen frames
    are upside down ("opengl"), the server flips rows; `rotate180` mirrors
    columns as well (the server's --rotate180)."""
    out = frames[:, ::-1] if convention == "opengl" else frames
    if rotate180:
        out = out[:, :, ::-1]
    return np.ascontiguousarray(out)


def _attr_str(attrs, key: str) -> str | None:
    if key not in attrs:
        return None
    v = attrs[key]
    if isinstance(v, bytes):
        v = v.decode("utf-8")
    if isinstance(v, np.ndarray) and v.shape == ():
        v = v.item()
        v = v.decode("utf-8") if isinstance(v, bytes) else v
    return str(v)


def file_instruction(data) -> str:
    raw = _attr_str(data.attrs, "problem_info")
    if raw is None:
        raise DatasetError("data has no `problem_info` attribute (the language instruction)")
    try:
        info = json.loads(raw)
        lang = info["language_instruction"]
    except (ValueError, KeyError, TypeError) as e:
        raise DatasetError(f"`problem_info` is not LIBERO's JSON with language_instruction: {e}") from None
    # get_dataset_info.py: "".join(...) then strip the quotes.
    return "".join(lang).strip().strip('"').strip()


def resolve_task(path: Path, suite: str, task: int | None, instruction: str) -> tuple[int, str]:
    """(task index, instruction to record). The suite's own language wins
    where the suite is known, so it matches what the LIBERO server sends."""
    names = SUITE_TASKS.get(suite)
    if task is not None:
        if task < 0 or (names is not None and task >= len(names)):
            raise DatasetError(f"--task {task} is not a task of {suite}")
        if names is not None:
            lang = task_language(names[task])
            if _norm(lang) != _norm(instruction):
                raise DatasetError(f"the file's instruction {instruction!r} is not task {task} of "
                                   f"{suite} ({lang!r})")
            return task, lang
        return task, instruction
    if names is None:
        raise DatasetError(f"suite {suite!r} has no built-in task list: pass --task N")
    stem = re.sub(r"_demo$", "", path.stem)
    for i, n in enumerate(names):
        if n == stem or _norm(task_language(n)) == _norm(instruction):
            return i, task_language(n)
    raise DatasetError(f"instruction {instruction!r} matches no task of {suite}: pass --task N")


def _demo_keys(data) -> list[str]:
    keys = [k for k in data.keys() if re.fullmatch(r"demo_\d+", k)]
    if not keys:
        raise DatasetError("no `data/demo_N` groups")
    return sorted(keys, key=lambda k: int(k[5:]))


def _array(group, key: str, ndim: int, what: str) -> np.ndarray:
    if key not in group:
        raise DatasetError(f"{what}: missing `{key}`")
    a = group[key][()]
    if not isinstance(a, np.ndarray) or a.ndim != ndim:
        raise DatasetError(f"{what}/{key}: expected {ndim} dimensions, got shape {np.shape(a)}")
    return a


def read_demo(demo, name: str, convention: str, rotate180: bool, pairing: str):
    """One demo group -> (frames [agentview, wrist], proprio, actions, success)."""
    if "obs" not in demo:
        raise DatasetError(f"{name}: no `obs` group (a raw states-only demo file: regenerate it "
                           "with LIBERO's scripts/create_dataset.py --use-camera-obs)")
    obs = demo["obs"]
    agent = _array(obs, "agentview_rgb", 4, name + "/obs")
    wrist = _array(obs, "eye_in_hand_rgb", 4, name + "/obs")
    if "ee_pos" in obs and "ee_ori" in obs:
        pos, ori = _array(obs, "ee_pos", 2, name + "/obs"), _array(obs, "ee_ori", 2, name + "/obs")
    else:
        ee = _array(obs, "ee_states", 2, name + "/obs")
        pos, ori = ee[:, :3], ee[:, 3:]
    grip = _array(obs, "gripper_states", 2, name + "/obs")
    actions = _array(demo, "actions", 2, name)
    t = actions.shape[0]
    shapes = {"agentview_rgb": agent.shape, "eye_in_hand_rgb": wrist.shape, "ee_pos": pos.shape,
              "ee_ori": ori.shape, "gripper_states": grip.shape}
    want = {"agentview_rgb": (t, None, None, 3), "eye_in_hand_rgb": (t, None, None, 3),
            "ee_pos": (t, 3), "ee_ori": (t, 3), "gripper_states": (t, 2)}
    for k, s in shapes.items():
        if len(s) != len(want[k]) or any(w is not None and w != v for w, v in zip(want[k], s)):
            raise DatasetError(f"{name}/obs/{k}: shape {s}, expected {want[k]} for {t} actions")
    if actions.shape[1] != 7:
        raise DatasetError(f"{name}/actions: {actions.shape[1]} dimensions, LIBERO's are 7")
    for k, a in (("agentview_rgb", agent), ("eye_in_hand_rgb", wrist)):
        if a.dtype != np.uint8:
            raise DatasetError(f"{name}/obs/{k}: dtype {a.dtype}, expected uint8")
    success = True
    if "dones" in demo:
        success = bool(np.asarray(demo["dones"][()]).reshape(-1)[-1])
    elif "rewards" in demo:
        success = float(np.asarray(demo["rewards"][()]).reshape(-1)[-1]) > 0
    frames = [upright(agent, convention, rotate180), upright(wrist, convention, rotate180)]
    proprio = libero_proprio(pos, ori, grip)
    acts = actions.astype(np.float32)
    if pairing == "next":
        # create_dataset.py records the observation *after* action j next to
        # action j; the observation before action j+1 is that same one.
        if t < 2:
            raise DatasetError(f"{name}: {t} step(s), --pairing next needs at least 2")
        frames = [f[:-1] for f in frames]
        proprio, acts = proprio[:-1], acts[1:]
    return frames, proprio, acts, success


def read_file(path: Path, suite: str, task: int | None, pairing: str,
              rotate180: bool) -> Iterator[Episode]:
    """Every demo of one LIBERO HDF5 file, in demo order."""
    import h5py

    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise DatasetError(f"{path}: not a readable HDF5 file ({e})") from None
    with f:
        try:
            if "data" not in f:
                raise DatasetError("no `data` group (not LIBERO's layout)")
            data = f["data"]
            instruction = file_instruction(data)
            task_idx, instruction = resolve_task(path, suite, task, instruction)
            convention = (_attr_str(data.attrs, "macros_image_convention") or "opengl").lower()
            if convention not in ("opengl", "opencv"):
                raise DatasetError(f"unknown macros_image_convention {convention!r}")
            for key in _demo_keys(data):
                frames, proprio, actions, success = read_demo(data[key], key, convention,
                                                              rotate180, pairing)
                yield Episode(
                    suite=suite, task=task_idx, init_state=int(key[5:]), seed=0,
                    instruction=instruction, success=success, final_progress=None,
                    source=f"libero_hdf5:{key}", camera_names=["agentview", "wrist"],
                    frames=frames, proprio=proprio, actions=actions,
                    progress=[None] * len(actions),
                )
        except DatasetError as e:
            raise DatasetError(f"{path}: {e}") from None
        except Exception as e:  # h5py/numpy on a damaged file: the input's fault
            raise DatasetError(f"{path}: unreadable LIBERO HDF5 ({type(e).__name__}: {e})") from None
