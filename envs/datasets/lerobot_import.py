"""LeRobotDataset v3.0 (parquet plus MP4 or images) -> wmrl episodes
(docs/datasets.md).

Reads the layout from meta/info.json (features, fps, path templates),
meta/tasks.parquet (task strings by task_index), meta/episodes/*/*.parquet
(per-episode length, data file, video file and from/to timestamps) and the
data and video files they point to. Cameras, state and orientation are
mapped by options with defaults that fit wmrl's own exports and LeRobot's
LIBERO datasets. Never writes anything itself (wmrl_episodes.EpisodeSink does).
"""

from __future__ import annotations

import math
from pathlib import Path
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import lerobot_layout as L
from libero_hdf5 import SUITE_TASKS, _norm, libero_proprio, task_language
from wmrl_episodes import DatasetError, Episode, decode_image

# Default camera keys, first present wins: wmrl's own names, then LeRobot's
# LIBERO datasets (`image` = agentview, `wrist_image` / `image2` = wrist).
CAMERA_DEFAULTS = {
    "agentview": ["observation.images.agentview", "observation.images.image"],
    "wrist": ["observation.images.wrist", "observation.images.wrist_image",
              "observation.images.image2"],
}
FLIPS = {"none": (False, False), "vertical": (True, False), "horizontal": (False, True),
         "rot180": (True, True)}


def _read_table(path: Path, columns: list[str] | None = None) -> pa.Table:
    try:
        return pq.read_table(path, columns=columns)
    except FileNotFoundError:
        raise DatasetError(f"{path}: missing") from None
    except Exception as e:  # truncated or not parquet
        raise DatasetError(f"{path}: unreadable parquet ({type(e).__name__}: {e})") from None


def load_tasks(root: Path) -> dict[int, str]:
    t = _read_table(root / L.TASKS_PATH)
    # pandas writes the `task` index as a column of that name (or as
    # __index_level_0__ when the index was left unnamed).
    text = "task" if "task" in t.column_names else "__index_level_0__"
    if "task_index" not in t.column_names or text not in t.column_names:
        raise DatasetError(f"{root / L.TASKS_PATH}: needs columns task_index and task")
    return dict(zip(t.column("task_index").to_pylist(), t.column(text).to_pylist()))


def load_episodes(root: Path) -> list[dict]:
    paths = sorted((root / L.EPISODES_DIR).glob("*/*.parquet"))
    if not paths:
        raise DatasetError(f"{root}: no {L.EPISODES_DIR}/chunk-*/file-*.parquet")
    rows = []
    for p in paths:
        try:
            names = pq.read_schema(p).names
        except Exception as e:
            raise DatasetError(f"{p}: unreadable parquet ({type(e).__name__}: {e})") from None
        rows += _read_table(p, [n for n in names if not n.startswith("stats/")]).to_pylist()
    for r in rows:
        for k in ("episode_index", "length", "data/chunk_index", "data/file_index"):
            if not isinstance(r.get(k), int):
                raise DatasetError(f"{root}: episode metadata lacks integer {k!r}")
    return sorted(rows, key=lambda r: r["episode_index"])


def resolve_cameras(features: dict, mapping: dict[str, str] | None) -> list[tuple[str, str]]:
    """[(wmrl camera name, LeRobot feature key)] in wmrl's camera order."""
    visual = [k for k, f in features.items() if f.get("dtype") in ("image", "video")]
    if mapping:
        for name, key in mapping.items():
            if key not in visual:
                raise DatasetError(f"--camera {name}={key}: no image or video feature {key!r} "
                                   f"(have {visual})")
        return list(mapping.items())
    out = [(name, next(k for k in keys if k in visual))
           for name, keys in CAMERA_DEFAULTS.items() if any(k in visual for k in keys)]
    if not out:
        raise DatasetError(f"no known camera key among {visual}: pass --camera agentview=KEY")
    return out


class VideoCursor:
    """Sequential decoding of one MP4 of concatenated episodes."""

    def __init__(self, path: Path):
        self.path = path
        self._open()

    def _open(self) -> None:
        import av

        try:
            self.container = av.open(str(self.path))
            self.frames = self.container.decode(video=0)
        except Exception as e:
            raise DatasetError(f"{self.path}: unreadable video ({type(e).__name__}: {e})") from None
        self.last_t = -math.inf

    def take(self, times: np.ndarray, fps: float) -> np.ndarray:
        """Frames nearest to `times` (seconds in the file), each within half a frame."""
        if times[0] < self.last_t:
            self.container.close()
            self._open()
        tol = 0.5 / fps
        out, i = [], 0
        try:
            while i < len(times):
                frame = next(self.frames)
                t = float(frame.time)
                if t < times[i] - tol:
                    continue
                if t > times[i] + tol:
                    raise DatasetError(f"{self.path}: no frame at {times[i]:.4f} s (next is {t:.4f} s)")
                out.append(frame.to_ndarray(format="rgb24"))
                self.last_t, i = t, i + 1
        except StopIteration:
            raise DatasetError(f"{self.path}: ends before {times[i]:.4f} s") from None
        except DatasetError:
            raise
        except Exception as e:  # a damaged stream
            raise DatasetError(f"{self.path}: undecodable video ({type(e).__name__}: {e})") from None
        return np.stack(out)

    def close(self) -> None:
        self.container.close()


def _state(raw: np.ndarray, fmt: str) -> np.ndarray:
    if fmt == "auto":
        fmt = "eef-axisangle" if raw.shape[1] == 8 else "raw"
    if fmt == "raw":
        return raw.astype(np.float32)
    if raw.shape[1] != 8:
        raise DatasetError(f"--state-format eef-axisangle needs 8-D states, got {raw.shape[1]}")
    # LeRobot's LIBERO layout: eef pos (3), quat2axisangle(eef quat) (3),
    # gripper qpos (2) -> the LIBERO server's pos, quat xyzw, gripper.
    return libero_proprio(raw[:, :3], raw[:, 3:6], raw[:, 6:8])


def _vectors(col, what: str) -> np.ndarray:
    try:
        return np.asarray(col.to_pylist(), dtype=np.float64)
    except (ValueError, TypeError) as e:
        raise DatasetError(f"{what}: not a fixed-length float column ({e})") from None


def read_dataset(root: Path, cameras: dict[str, str] | None, state_key: str, state_format: str,
                 flip: str, suite: str) -> Iterator[Episode]:
    """Every episode of the dataset at `root`, in episode_index order."""
    info = L.load_info(root)
    features, fps = info["features"], float(info["fps"])
    cams = resolve_cameras(features, cameras)
    for key in (state_key, L.ACTION_KEY):
        if key not in features:
            raise DatasetError(f"{root}: no feature {key!r} (have {sorted(features)})")
    tasks = load_tasks(root)
    episodes = load_episodes(root)
    wanted = [k for _, k in cams if features[k]["dtype"] == "image"]
    wanted += [state_key, L.ACTION_KEY, "episode_index", "frame_index", "task_index"]
    if L.PROGRESS_KEY in features:
        wanted.append(L.PROGRESS_KEY)
    if "next.success" in features:
        wanted.append("next.success")
    ctx = _Context(root, info, features, fps, cams, tasks, state_key, state_format, flip, suite, wanted)
    try:
        for ep in episodes:
            try:
                episode = ctx.episode(ep)
            except DatasetError:
                raise
            except Exception as e:  # a damaged or inconsistent dataset
                raise DatasetError(f"{root} episode {ep['episode_index']}: unreadable "
                                   f"({type(e).__name__}: {e})") from None
            yield episode
    finally:
        for c in ctx.video_cursors.values():
            c.close()


class _Context:
    """What reading one episode needs: layout, options, open files."""

    def __init__(self, root, info, features, fps, cams, tasks, state_key, state_format, flip,
                 suite, wanted):
        self.root, self.info, self.features, self.fps, self.cams = root, info, features, fps, cams
        self.tasks, self.state_key, self.state_format, self.suite = tasks, state_key, state_format, suite
        self.flip_rows, self.flip_cols = FLIPS[flip]
        self.wanted = wanted
        self.video_cursors: dict[Path, VideoCursor] = {}
        self.data_path: Path | None = None
        self.table: pa.Table | None = None
        self.ep_col: np.ndarray | None = None

    def rows(self, ep: dict, what: str) -> pa.Table:
        path = self.root / self.info["data_path"].format(chunk_index=ep["data/chunk_index"],
                                                         file_index=ep["data/file_index"])
        if self.data_path != path:
            self.table = _read_table(path, self.wanted)
            self.ep_col, self.data_path = np.asarray(self.table.column("episode_index")), path
        rows = self.table.filter(pa.array(self.ep_col == ep["episode_index"]))
        order = np.argsort(np.asarray(rows.column("frame_index")), kind="stable")
        rows = rows.take(pa.array(order))
        if rows.num_rows != ep["length"] or rows.num_rows == 0:
            raise DatasetError(f"{what}: {rows.num_rows} rows in {path.name}, metadata says "
                               f"{ep['length']}")
        return rows

    def frames(self, ep: dict, rows: pa.Table, key: str, what: str) -> np.ndarray:
        t = rows.num_rows
        if self.features[key]["dtype"] == "image":
            imgs = []
            for i, cell in enumerate(rows.column(key).to_pylist()):
                cell = cell or {}
                data = cell.get("bytes")
                if data is None and cell.get("path"):
                    data = (self.root / cell["path"]).read_bytes()
                if data is None:
                    raise DatasetError(f"{what}: {key} frame {i} has no image")
                imgs.append(decode_image(data, f"{what} {key} frame {i}"))
            arr = np.stack(imgs)
        else:
            vpath = self.root / self.info["video_path"].format(
                video_key=key, chunk_index=ep[f"videos/{key}/chunk_index"],
                file_index=ep[f"videos/{key}/file_index"])
            if vpath not in self.video_cursors:
                if not vpath.is_file():
                    raise DatasetError(f"{vpath}: missing")
                self.video_cursors[vpath] = VideoCursor(vpath)
            times = ep[f"videos/{key}/from_timestamp"] + np.arange(t) / self.fps
            arr = self.video_cursors[vpath].take(times, self.fps)
        if self.flip_rows:
            arr = arr[:, ::-1]
        if self.flip_cols:
            arr = arr[:, :, ::-1]
        return np.ascontiguousarray(arr)

    def episode(self, ep: dict) -> Episode:
        what = f"{self.root} episode {ep['episode_index']}"
        rows = self.rows(ep, what)
        t = rows.num_rows
        frames = [self.frames(ep, rows, key, what) for _, key in self.cams]
        proprio = _state(_vectors(rows.column(self.state_key), f"{what} {self.state_key}"),
                         self.state_format)
        actions = _vectors(rows.column(L.ACTION_KEY), f"{what} action").astype(np.float32)
        if actions.ndim != 2 or actions.shape[1] != 7:
            raise DatasetError(f"{what}: actions of shape {actions.shape}; wmrl policies act in 7-D")
        progress = [None] * t
        if L.PROGRESS_KEY in self.features:
            progress = [None if v is None or math.isnan(v) else float(v)
                        for v in rows.column(L.PROGRESS_KEY).to_pylist()]
        instruction = self.tasks.get(rows.column("task_index")[0].as_py())
        if instruction is None:
            raise DatasetError(f"{what}: task_index not in {L.TASKS_PATH}")
        return _episode(ep, rows, self.root, self.suite, instruction, self.cams, frames, proprio,
                        actions, progress)


def _episode(ep: dict, rows: pa.Table, root: Path, suite: str, instruction: str, cams, frames,
             proprio, actions, progress) -> Episode:
    """Episode metadata: wmrl's own columns where the dataset came from wmrl,
    else the suite's task index (matched by instruction) or the dataset's."""
    meta = {k: ep.get(f"wmrl/{k}") for k in L.EPISODE_META}
    if meta["suite"] is None:
        task = int(rows.column("task_index")[0].as_py())
        names = SUITE_TASKS.get(suite)
        if names is not None:
            match = [i for i, n in enumerate(names) if _norm(task_language(n)) == _norm(instruction)]
            if not match:
                raise DatasetError(f"{root} episode {ep['episode_index']}: instruction "
                                   f"{instruction!r} is no task of {suite}")
            task, instruction = match[0], task_language(names[match[0]])
        success = True
        if "next.success" in rows.column_names:
            success = bool(rows.column("next.success")[-1].as_py())
        meta = {"suite": suite, "task": task, "init_state": int(ep["episode_index"]), "seed": 0,
                "success": success, "final_progress": None, "source": f"lerobot:{root.name}"}
    fp = meta["final_progress"]
    return Episode(
        suite=str(meta["suite"]), task=int(meta["task"]), init_state=int(meta["init_state"]),
        seed=int(meta["seed"]), instruction=instruction, success=bool(meta["success"]),
        final_progress=None if fp is None or math.isnan(fp) else float(fp),
        source=str(meta["source"]), camera_names=[n for n, _ in cams], frames=frames,
        proprio=proprio, actions=actions, progress=progress,
    )
