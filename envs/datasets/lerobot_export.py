"""wmrl episodes -> LeRobotDataset v3.0 (docs/datasets.md).

Writes the layout LeRobot's own writer produces (LeRobotDataset.create +
add_frame + save_episode): meta/info.json, meta/stats.json,
meta/tasks.parquet, meta/episodes/chunk-000/file-000.parquet,
data/chunk-CCC/file-FFF.parquet and, with video, one MP4 per camera and file
(videos/observation.images.<camera>/chunk-CCC/file-FFF.mp4, episodes
concatenated, located by from/to timestamps); with images, PNG bytes in the
data files instead. Everything is written under a hidden sibling of ROOT and
renamed to ROOT at the end, so ROOT is either whole or absent, and a failed
export removes the sibling and any parent directory it made. The video
encoders write to the process's stderr directly (SVT-AV1's `Svt[error]: ...`
lines): that stream is held while they run and shown only inside the one
error of an export the encoder made fail. Never overwrites an existing
dataset.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import sys
import tempfile
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import lerobot_layout as L
from wmrl_episodes import (DatasetError, Episode, encode_png, list_episodes, make_parents,
                           read_episode, remove_made)

QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
# SVT-AV1 3.0.0 (in PyAV 15.1.0's wheel) dies of SIGFPE on frames narrower
# than this (measured: every even width up to 24 crashes, 26 encodes), which
# no exception can catch; such frames are refused before the encoder starts.
SVTAV1_MIN_WIDTH = 26
# At most this many of the encoder's own lines go into an error message.
ENCODER_LOG_LINES = 8


class EncoderError(DatasetError):
    """The video encoder refused or failed; the export adds what it printed."""


@contextlib.contextmanager
def held_stderr():
    """Point file descriptor 2 at a temporary file for the block and yield a
    function returning what was written there. Encoders print from C (and
    from their own threads) straight to fd 2, past `sys.stderr`. On an
    exception other than DatasetError (a bug) the held text is replayed, so
    nothing that explains a traceback is lost."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as log:
        os.dup2(log.fileno(), 2)

        def text() -> str:
            sys.stderr.flush()
            log.seek(0)
            return log.read().decode("utf-8", "replace")

        try:
            yield text
        except DatasetError:
            raise
        except BaseException:
            held = text()
            os.dup2(saved, 2)
            sys.stderr.write(held)
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def _encoder_said(held: str) -> str:
    # A retried close repeats the encoder's complaint: each line once.
    lines = list(dict.fromkeys(ln.strip() for ln in held.splitlines() if ln.strip()))
    if not lines:
        return ""
    return "; encoder: " + " | ".join(lines[-ENCODER_LOG_LINES:])


def feature_stats(x: np.ndarray) -> dict[str, np.ndarray]:
    """(N, D) -> LeRobot's per-feature stats (get_feature_stats, axis 0);
    NaN (unknown progress) is left out, all-NaN gives NaN."""
    x = np.asarray(x, dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = {"min": np.nanmin(x, 0), "max": np.nanmax(x, 0), "mean": np.nanmean(x, 0),
               "std": np.nanstd(x, 0), "count": np.array([x.shape[0]])}
        for q in QUANTILES:
            out[f"q{int(q * 100):02d}"] = np.nanquantile(x, q, axis=0)
    return out


def image_stats(frames: np.ndarray) -> dict[str, np.ndarray]:
    """(T, H, W, 3) uint8 -> per-channel stats in [0, 1], shape (3, 1, 1) as
    LeRobot's compute_episode_stats (on at most ~100 frames, every 4th pixel)."""
    step = max(1, len(frames) // 100)
    px = frames[::step, ::4, ::4].reshape(-1, 3).astype(np.float64) / 255.0
    s = feature_stats(px)
    s["count"] = np.array([len(frames[::step])])
    return {k: v if k == "count" else v.reshape(3, 1, 1) for k, v in s.items()}


def aggregate(stats: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Count-weighted mean, pooled variance, extreme min/max, weighted
    quantiles (lerobot compute_stats.aggregate_feature_stats)."""
    w = np.array([s["count"][0] for s in stats], dtype=np.float64)
    means = np.stack([s["mean"] for s in stats])
    wb = w.reshape((-1,) + (1,) * (means.ndim - 1))
    mean = (means * wb).sum(0) / w.sum()
    var = ((np.stack([s["std"] for s in stats]) ** 2 + (means - mean) ** 2) * wb).sum(0) / w.sum()
    out = {"min": np.min(np.stack([s["min"] for s in stats]), 0),
           "max": np.max(np.stack([s["max"] for s in stats]), 0),
           "mean": mean, "std": np.sqrt(var), "count": np.array([int(w.sum())])}
    for k in stats[0]:
        if k.startswith("q"):
            out[k] = (np.stack([s[k] for s in stats]) * wb).sum(0) / w.sum()
    return out


def _jsonable(stats: dict[str, dict[str, np.ndarray]]) -> dict:
    return {f: {k: np.asarray(v).tolist() for k, v in s.items()} for f, s in stats.items()}


class VideoFile:
    """One MP4 of concatenated episodes for one camera, frame k at k / fps."""

    def __init__(self, path: Path, fps: int, width: int, height: int, vcodec: str, crf: int):
        import av

        if width % 2 or height % 2:
            raise DatasetError(f"{width}x{height} frames: yuv420p video needs even sizes (use --images)")
        if vcodec == "libsvtav1" and width < SVTAV1_MIN_WIDTH:
            raise DatasetError(f"{width}x{height} frames: libsvtav1 needs frames at least "
                               f"{SVTAV1_MIN_WIDTH} pixels wide (use --vcodec h264 or --images)")
        path.parent.mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its banner otherwise
        self.path, self.vcodec = path, vcodec
        self.container = av.open(str(path), "w")
        self.closed = False
        opts = {"g": str(L.VIDEO_GOP), "crf": str(crf)}
        if vcodec == "libsvtav1":
            opts["preset"] = "12"
        with self._encoding():
            self.stream = self.container.add_stream(vcodec, rate=fps, options=opts)
            self.stream.width, self.stream.height = width, height
            self.stream.pix_fmt = L.VIDEO_PIX_FMT
        self.time_base = Fraction(1, fps)
        self.frames = 0

    @contextlib.contextmanager
    def _encoding(self):
        import av

        try:
            yield
        except av.FFmpegError as e:
            where = "/".join(self.path.parts[-3:])
            raise EncoderError(f"{where}: {self.vcodec} video encoding failed ({e})") from None

    def add(self, rgb: np.ndarray) -> None:
        import av

        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        frame.pts, frame.time_base = self.frames, self.time_base
        with self._encoding():
            for packet in self.stream.encode(frame):
                self.container.mux(packet)
        self.frames += 1

    def size_mb(self) -> float:
        return self.path.stat().st_size / 2**20

    def close(self) -> None:
        # Ends the stream: an encoder freed without its end-of-stream prints
        # a complaint (SVT-AV1: "deinit called without sending EOS!").
        self.closed = True
        with self._encoding():
            for packet in self.stream.encode(None):
                self.container.mux(packet)
            self.container.close()

    def discard(self) -> None:
        """Close after a failure, whatever state the encoder is in."""
        # The file is thrown away and the first error already reported.
        if not self.closed:
            with contextlib.suppress(Exception):
                self.close()
        with contextlib.suppress(Exception):
            self.container.close()


def video_info(path: Path) -> dict:
    """lerobot video_utils.get_video_info for one of our files."""
    import av

    with av.open(str(path)) as c:
        s = c.streams.video[0]
        return {"video.height": s.height, "video.width": s.width,
                "video.codec": s.codec_context.codec.canonical_name, "video.pix_fmt": s.pix_fmt,
                "video.is_depth_map": False, "video.fps": int(s.base_rate), "video.channels": 3,
                "has_audio": False}


class Schema:
    """Camera names and sizes, proprio and action dims, fixed by the first episode."""

    def __init__(self, ep: Episode, video: bool):
        self.cams = [(n, int(f.shape[2]), int(f.shape[1])) for n, f in zip(ep.camera_names, ep.frames)]
        self.proprio_dim = int(ep.proprio.shape[1])
        self.action_dim = int(ep.actions.shape[1])
        self.progress = any(p is not None for p in ep.progress)
        self.video = video

    def check(self, ep: Episode, what: str) -> None:
        cams = [(n, int(f.shape[2]), int(f.shape[1])) for n, f in zip(ep.camera_names, ep.frames)]
        if cams != self.cams:
            raise DatasetError(f"{what}: cameras {cams}, the first episode has {self.cams}")
        dims = (int(ep.proprio.shape[1]), int(ep.actions.shape[1]))
        if dims != (self.proprio_dim, self.action_dim):
            raise DatasetError(f"{what}: proprio/action dims {dims}, the first episode has "
                               f"{(self.proprio_dim, self.action_dim)}")
        has = any(p is not None for p in ep.progress)
        if has != self.progress:
            # The feature set is fixed by the first episode: refuse rather
            # than drop (or invent) another episode's progress.
            raise DatasetError(f"{what}: {'has' if has else 'lacks'} oracle progress, the first "
                               f"episode {'lacks' if has else 'has'} it; export such sets separately")

    def features(self) -> dict:
        f = {}
        for name, w, h in self.cams:
            f[L.IMAGES_PREFIX + name] = {"dtype": "video" if self.video else "image",
                                        "shape": [h, w, 3], "names": ["height", "width", "channels"]}
        names = (L.PROPRIO9_NAMES if self.proprio_dim == 9
                 else [f"proprio_{i}" for i in range(self.proprio_dim)])
        f[L.STATE_KEY] = {"dtype": "float32", "shape": [self.proprio_dim], "names": names}
        names = L.ACTION7_NAMES if self.action_dim == 7 else [f"action_{i}" for i in range(self.action_dim)]
        f[L.ACTION_KEY] = {"dtype": "float32", "shape": [self.action_dim], "names": names}
        if self.progress:
            f[L.PROGRESS_KEY] = {"dtype": "float32", "shape": [1], "names": None}
        return {**f, **L.DEFAULT_FEATURES}

    def arrow(self) -> pa.Schema:
        fields = []
        if not self.video:
            img = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
            fields += [(L.IMAGES_PREFIX + n, img) for n, _, _ in self.cams]
        fields += [(L.STATE_KEY, pa.list_(pa.float32(), self.proprio_dim)),
                   (L.ACTION_KEY, pa.list_(pa.float32(), self.action_dim))]
        if self.progress:
            fields.append((L.PROGRESS_KEY, pa.float32()))
        fields += [("timestamp", pa.float32()), ("frame_index", pa.int64()),
                   ("episode_index", pa.int64()), ("index", pa.int64()), ("task_index", pa.int64())]
        return pa.schema(fields)


def _fixed_list(a: np.ndarray, dim: int) -> pa.Array:
    return pa.FixedSizeListArray.from_arrays(pa.array(a.astype(np.float32).reshape(-1)), dim)


class Exporter:
    def __init__(self, stage: Path, fps: int, video: bool, vcodec: str, crf: int):
        self.stage, self.fps, self.video, self.vcodec, self.crf = stage, fps, video, vcodec, crf
        self.schema: Schema | None = None
        self.tasks: dict[str, int] = {}
        self.episodes: list[dict] = []
        self.ep_stats: list[dict] = []
        self.frames = 0
        self.data_pos, self.data_writer = (0, 0), None
        self.videos: dict[str, tuple[tuple[int, int], VideoFile]] = {}

    def _data_writer(self) -> pq.ParquetWriter:
        if self.data_writer is not None:
            path = self.stage / L.DATA_PATH.format(chunk_index=self.data_pos[0], file_index=self.data_pos[1])
            if path.stat().st_size / 2**20 >= L.DATA_FILES_SIZE_IN_MB:
                self.data_writer.close()
                self.data_writer, self.data_pos = None, L.next_file(*self.data_pos)
        if self.data_writer is None:
            path = self.stage / L.DATA_PATH.format(chunk_index=self.data_pos[0], file_index=self.data_pos[1])
            path.parent.mkdir(parents=True, exist_ok=True)
            self.data_writer = pq.ParquetWriter(path, self.schema.arrow(), compression="snappy")
        return self.data_writer

    def _video(self, key: str, w: int, h: int) -> tuple[tuple[int, int], VideoFile]:
        pos, vf = self.videos.get(key, ((0, 0), None))
        if vf is not None and vf.size_mb() >= L.VIDEO_FILES_SIZE_IN_MB:
            vf.close()
            pos, vf = L.next_file(*pos), None
        if vf is None:
            path = self.stage / L.VIDEO_PATH.format(video_key=key, chunk_index=pos[0], file_index=pos[1])
            vf = VideoFile(path, self.fps, w, h, self.vcodec, self.crf)
            self.videos[key] = (pos, vf)
        return pos, vf

    def add(self, ep: Episode, what: str) -> None:
        if self.schema is None:
            self.schema = Schema(ep, self.video)
        self.schema.check(ep, what)
        s, t, e = self.schema, len(ep), len(self.episodes)
        task_index = self.tasks.setdefault(ep.instruction, len(self.tasks))
        frame_index = np.arange(t, dtype=np.int64)
        cols = {}
        meta = {"episode_index": e, "tasks": [ep.instruction], "length": t}
        stats = {}
        for (name, w, h), frames in zip(s.cams, ep.frames):
            key = L.IMAGES_PREFIX + name
            stats[key] = image_stats(frames)
            if self.video:
                pos, vf = self._video(key, w, h)
                start = vf.frames
                for rgb in frames:
                    vf.add(rgb)
                meta.update({f"videos/{key}/chunk_index": pos[0], f"videos/{key}/file_index": pos[1],
                             f"videos/{key}/from_timestamp": start / self.fps,
                             f"videos/{key}/to_timestamp": (start + t) / self.fps})
            else:
                cols[key] = pa.array([{"bytes": encode_png(f), "path": f"frame-{i:06d}.png"}
                                      for i, f in enumerate(frames)], type=s.arrow().field(key).type)
        cols[L.STATE_KEY] = _fixed_list(ep.proprio, s.proprio_dim)
        cols[L.ACTION_KEY] = _fixed_list(ep.actions, s.action_dim)
        stats[L.STATE_KEY], stats[L.ACTION_KEY] = feature_stats(ep.proprio), feature_stats(ep.actions)
        if s.progress:
            prog = np.array([np.nan if p is None else p for p in ep.progress], dtype=np.float32)
            cols[L.PROGRESS_KEY] = pa.array(prog)
            stats[L.PROGRESS_KEY] = feature_stats(prog.reshape(-1, 1))
        index = self.frames + frame_index
        extra = {"timestamp": (frame_index / self.fps).astype(np.float32), "frame_index": frame_index,
                 "episode_index": np.full(t, e, np.int64), "index": index,
                 "task_index": np.full(t, task_index, np.int64)}
        for k, v in extra.items():
            cols[k] = pa.array(v)
            stats[k] = feature_stats(v.reshape(-1, 1))
        writer = self._data_writer()
        writer.write_table(pa.table(cols, schema=s.arrow()))
        meta.update({"data/chunk_index": self.data_pos[0], "data/file_index": self.data_pos[1],
                     "dataset_from_index": self.frames, "dataset_to_index": self.frames + t,
                     "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
        for f, st in stats.items():
            for k, v in st.items():
                meta[f"stats/{f}/{k}"] = np.asarray(v).tolist()
        for k in L.EPISODE_META:
            meta[f"wmrl/{k}"] = getattr(ep, k)
        self.episodes.append(meta)
        self.ep_stats.append(stats)
        self.frames += t

    def discard(self) -> None:
        """Close every writer after a failure, so no encoder is left to
        complain when it is freed, and free them while stderr is still held."""
        if self.data_writer is not None:
            with contextlib.suppress(Exception):
                self.data_writer.close()
            self.data_writer = None
        for _, vf in self.videos.values():
            vf.discard()
        self.videos.clear()
        gc.collect()

    def finish(self) -> dict:
        if self.schema is None:
            raise DatasetError("no episodes to export")
        if self.data_writer is not None:
            self.data_writer.close()
        features = self.schema.features()
        for _, vf in self.videos.values():
            vf.close()
        for key in self.videos:
            first = self.stage / L.VIDEO_PATH.format(video_key=key, chunk_index=0, file_index=0)
            features[key]["info"] = video_info(first)
        ep_path = self.stage / L.EPISODES_PATH.format(chunk_index=0, file_index=0)
        ep_path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(self.episodes), ep_path, compression="snappy")
        write_tasks(self.stage, list(self.tasks))
        stats = {f: aggregate([s[f] for s in self.ep_stats]) for f in self.ep_stats[0]}
        (self.stage / L.STATS_PATH).write_text(json.dumps(_jsonable(stats), indent=4))
        info = {
            "codebase_version": L.CODEBASE_VERSION, "robot_type": None,
            "total_episodes": len(self.episodes), "total_frames": self.frames,
            "total_tasks": len(self.tasks), "chunks_size": L.CHUNKS_SIZE,
            "data_files_size_in_mb": L.DATA_FILES_SIZE_IN_MB,
            "video_files_size_in_mb": L.VIDEO_FILES_SIZE_IN_MB, "fps": self.fps,
            "splits": {"train": f"0:{len(self.episodes)}"}, "data_path": L.DATA_PATH,
            "video_path": L.VIDEO_PATH if self.video else None, "features": features,
        }
        (self.stage / L.INFO_PATH).write_text(json.dumps(info, indent=4))
        return info


def write_tasks(root: Path, tasks: list[str]) -> None:
    """meta/tasks.parquet as LeRobot's write_tasks: a pandas frame indexed by
    the task string (index name `task`) with one column `task_index`."""
    import pandas as pd

    df = pd.DataFrame({"task_index": np.arange(len(tasks), dtype=np.int64)},
                      index=pd.Index(tasks, name="task"))
    df.to_parquet(root / L.TASKS_PATH)


def export(dirs: list[Path], root: Path, fps: int, video: bool, vcodec: str, crf: int) -> dict:
    """Every episode of `dirs` (in order) into a new LeRobot v3 dataset at `root`."""
    paths = []
    for d in dirs:
        found = list_episodes(d)
        if not found:
            raise DatasetError(f"{d}: no ep_NNNNNN.msgpack files")
        paths += found
    if fps <= 0:
        raise DatasetError("--fps must be positive")
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise DatasetError(f"{root} exists and is not an empty directory; nothing written")
    made = make_parents(root.parent)
    try:
        stage = Path(tempfile.mkdtemp(dir=root.parent, prefix=f".{root.name}.partial-"))
    except BaseException:
        remove_made(made)
        raise
    try:
        (stage / "meta").mkdir()
        info = _write(paths, stage, fps, video, vcodec, crf)
        if root.exists():
            root.rmdir()
        os.rename(stage, root)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        remove_made(made)
        raise
    return info


def _write(paths: list[Path], stage: Path, fps: int, video: bool, vcodec: str, crf: int) -> dict:
    """The whole dataset into `stage`, encoders' stderr held (held_stderr)."""
    with held_stderr() as held:
        ex = Exporter(stage, fps, video, vcodec, crf)
        try:
            for p in paths:
                ex.add(read_episode(p), str(p))
            return ex.finish()
        except EncoderError as e:
            ex.discard()
            raise DatasetError(f"{e}{_encoder_said(held())}") from None
        except BaseException:
            ex.discard()
            raise
