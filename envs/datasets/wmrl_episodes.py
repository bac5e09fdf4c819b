"""wmrl's episode files (`wmrl-episode/1`, docs/episodes.md) from Python.

Reads and writes exactly what crates/wmrl-env/src/episode.rs does: one
MessagePack map per episode with named fields, every frame PNG-encoded RGB8,
floats as float32, written to `ep_NNNNNN.msgpack.partial`, fsync'd, then
renamed. `EpisodeSink` stages a whole conversion in a hidden directory and
moves the files under their final names only once every input converted, so
a failed import leaves nothing it created: no new episode in an existing
output directory, and no output directory (nor missing parent) it would
have made. This module must never leave a partial file under a final name,
nor overwrite an episode.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
import numpy as np
from PIL import Image

FORMAT = "wmrl-episode/1"
EPISODE_RE = re.compile(r"^ep_(\d{6,})\.msgpack$")


class DatasetError(Exception):
    """A bad input or a refused output: printed as one line, no traceback."""


@dataclass
class Episode:
    """One episode, arrays per field (T steps)."""

    suite: str
    task: int
    init_state: int
    seed: int
    instruction: str
    success: bool
    final_progress: float | None
    source: str
    camera_names: list[str]
    # One (T, H, W, 3) uint8 array per camera, upright (top row first).
    frames: list[np.ndarray]
    proprio: np.ndarray  # (T, P) float32
    actions: np.ndarray  # (T, A) float32
    progress: list[float | None] = field(default_factory=list)  # T entries

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    def validate(self) -> None:
        t = len(self)
        if t == 0:
            raise DatasetError("an episode needs at least one step")
        if len(self.frames) != len(self.camera_names) or not self.frames:
            raise DatasetError(f"{len(self.frames)} frame arrays for cameras {self.camera_names}")
        for name, f in zip(self.camera_names, self.frames):
            if f.dtype != np.uint8 or f.ndim != 4 or f.shape[0] != t or f.shape[3] != 3:
                raise DatasetError(f"camera {name}: frames {f.dtype} {f.shape}, need uint8 ({t}, H, W, 3)")
        if self.proprio.ndim != 2 or self.proprio.shape[0] != t:
            raise DatasetError(f"proprio shape {self.proprio.shape} for {t} steps")
        if self.actions.ndim != 2:
            raise DatasetError(f"actions shape {self.actions.shape}")
        if len(self.progress) != t:
            raise DatasetError(f"{len(self.progress)} progress values for {t} steps")
        for v, what in ((self.proprio, "proprio"), (self.actions, "action")):
            if not np.isfinite(v).all():
                raise DatasetError(f"{what} holds non-finite values")
        for name, v in (("task", self.task), ("init_state", self.init_state), ("seed", self.seed)):
            if not isinstance(v, int) or v < 0:
                raise DatasetError(f"{name} must be a non-negative integer, got {v!r}")


def encode_png(rgb: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(rgb), "RGB").save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def decode_image(data: bytes, what: str) -> np.ndarray:
    """PNG (or any format PIL reads) -> (H, W, 3) uint8."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            return np.asarray(img.convert("RGB"), dtype=np.uint8)
    except Exception as e:  # any undecodable image is the input's fault
        raise DatasetError(f"{what}: undecodable image: {e}") from None


def episode_path(directory: Path, index: int) -> Path:
    return directory / f"ep_{index:06d}.msgpack"


def list_episodes(directory: Path) -> list[Path]:
    """Complete episode files, sorted by name (partial files are ignored)."""
    if not directory.is_dir():
        raise DatasetError(f"{directory}: not a directory")
    return sorted(p for p in directory.iterdir() if EPISODE_RE.match(p.name) and p.is_file())


def _f32(v) -> float:
    return float(np.float32(v))


def to_map(ep: Episode) -> dict:
    ep.validate()
    steps = []
    for t in range(len(ep)):
        steps.append({
            "png": [encode_png(f[t]) for f in ep.frames],
            "proprio": [float(x) for x in ep.proprio[t].astype(np.float32)],
            "action": [float(x) for x in ep.actions[t].astype(np.float32)],
            "progress": None if ep.progress[t] is None else _f32(ep.progress[t]),
        })
    return {
        "format": FORMAT,
        "suite": ep.suite,
        "task": int(ep.task),
        "init_state": int(ep.init_state),
        "seed": int(ep.seed),
        "instruction": ep.instruction,
        "cameras": [{"name": n, "width": int(f.shape[2]), "height": int(f.shape[1])}
                    for n, f in zip(ep.camera_names, ep.frames)],
        "success": bool(ep.success),
        "final_progress": None if ep.final_progress is None else _f32(ep.final_progress),
        "source": ep.source,
        "steps": steps,
    }


def write_episode(directory: Path, index: int, ep: Episode) -> Path:
    """Write `directory/ep_NNNNNN.msgpack` through a fsync'd `.partial` file."""
    data = msgpack.packb(to_map(ep), use_bin_type=True, use_single_float=True)
    path = episode_path(directory, index)
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def _field(m: dict, key: str, types: type, what: str):
    if key not in m:
        raise DatasetError(f"{what}: missing field {key!r}")
    v = m[key]
    # bool is an int in Python; a MessagePack bool is never a uint here.
    if not isinstance(v, types) or (isinstance(v, bool) and types is not bool):
        raise DatasetError(f"{what}: field {key!r} has type {type(v).__name__}")
    return v


def read_episode(path: Path) -> Episode:
    """Read and check one episode file, frames decoded."""
    what = str(path)
    try:
        raw = path.read_bytes()
        m = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except OSError as e:
        raise DatasetError(f"{what}: {e.strerror or e}") from None
    except Exception as e:  # truncated or not MessagePack at all
        raise DatasetError(f"{what}: not a whole episode file ({type(e).__name__}: {e})") from None
    try:
        ep = _parse(m, what)
    except (TypeError, ValueError) as e:  # a field of the wrong shape or kind
        raise DatasetError(f"{what}: malformed episode ({type(e).__name__}: {e})") from None
    try:
        ep.validate()
    except DatasetError as e:
        raise DatasetError(f"{what}: {e}") from None
    return ep


def _parse(m, what: str) -> Episode:
    """A decoded map -> Episode; DatasetError names the field at fault."""
    if not isinstance(m, dict):
        raise DatasetError(f"{what}: not a MessagePack map")
    fmt = m.get("format")
    if fmt != FORMAT:
        raise DatasetError(f"{what}: format tag {fmt!r}, expected {FORMAT!r}")
    cams = _field(m, "cameras", list, what)
    names = []
    for c in cams:
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            raise DatasetError(f"{what}: bad camera entry {c!r}")
        names.append(c["name"])
    steps = _field(m, "steps", list, what)
    if not steps:
        raise DatasetError(f"{what}: no steps")
    frames = [[] for _ in cams]
    proprio, actions, progress = [], [], []
    for t, s in enumerate(steps):
        sw = f"{what} step {t}"
        if not isinstance(s, dict):
            raise DatasetError(f"{sw}: not a map")
        png = _field(s, "png", list, sw)
        if len(png) != len(cams):
            raise DatasetError(f"{sw}: {len(png)} frames for {len(cams)} cameras")
        for k, (b, c) in enumerate(zip(png, cams)):
            img = decode_image(b, f"{sw} camera {c['name']}")
            if img.shape[:2] != (c.get("height"), c.get("width")):
                raise DatasetError(f"{sw} camera {c['name']} is {img.shape[1]}x{img.shape[0]}, "
                                   f"header says {c.get('width')}x{c.get('height')}")
            frames[k].append(img)
        proprio.append(_field(s, "proprio", list, sw))
        actions.append(_field(s, "action", list, sw))
        p = s.get("progress")
        if p is not None and not isinstance(p, (int, float)):
            raise DatasetError(f"{sw}: progress has type {type(p).__name__}")
        progress.append(None if p is None else float(p))
    for rows, name in ((proprio, "proprio"), (actions, "action")):
        if len({len(r) for r in rows}) != 1:
            raise DatasetError(f"{what}: {name} length changes between steps")
    fp = m.get("final_progress")
    return Episode(
        suite=_field(m, "suite", str, what),
        task=_field(m, "task", int, what),
        init_state=_field(m, "init_state", int, what),
        seed=_field(m, "seed", int, what),
        instruction=_field(m, "instruction", str, what),
        success=_field(m, "success", bool, what),
        final_progress=None if fp is None else float(fp),
        source=_field(m, "source", str, what),
        camera_names=names,
        frames=[np.stack(f) for f in frames],
        proprio=np.asarray(proprio, dtype=np.float32),
        actions=np.asarray(actions, dtype=np.float32),
        progress=progress,
    )


class EpisodeSink:
    """Collects converted episodes in a hidden staging directory and, on
    success, publishes them as `OUT/ep_NNNNNN.msgpack` from `start_index` on;
    on failure removes everything it created. Refuses to overwrite an
    existing episode.

    When OUT exists the staging directory is `OUT/.staging-*` and the files
    are moved into OUT one by one. When it does not, the staging directory is
    a hidden sibling `.OUT.staging-*` renamed to OUT at the end, so OUT
    appears whole or not at all, and the parents made for it are removed
    again on failure.
    """

    def __init__(self, out: Path, start_index: int = 0):
        if start_index < 0:
            raise DatasetError("--start-index must be >= 0")
        if out.exists() and not out.is_dir():
            raise DatasetError(f"{out}: exists and is not a directory")
        self.out = out
        self.start = start_index
        self.count = 0
        self.made_parents: list[Path] = []
        self.new_out = not out.exists()
        if self.new_out:
            self.made_parents = make_parents(out.parent)
            try:
                self.stage = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.staging-"))
            except BaseException:
                remove_made(self.made_parents)
                raise
            return
        taken = [int(EPISODE_RE.match(p.name).group(1)) for p in list_episodes(out)]
        later = [i for i in taken if i >= start_index]
        if later:
            raise DatasetError(f"{out} already holds episode {min(later):06d}; "
                               f"pass --start-index {max(taken) + 1} to add after it")
        self.stage = Path(tempfile.mkdtemp(dir=out, prefix=".staging-"))

    def add(self, ep: Episode, what: str = "") -> None:
        # A bad value is the input's fault: name where it came from.
        try:
            ep.validate()
        except DatasetError as e:
            origin = what or f"{ep.source} (task {ep.task}, init state {ep.init_state})"
            raise DatasetError(f"{origin}: {e}") from None
        write_episode(self.stage, self.start + self.count, ep)
        self.count += 1

    def commit(self) -> list[Path]:
        if self.new_out:
            return self._commit_new()
        staged = list_episodes(self.stage)
        finals = [self.out / p.name for p in staged]
        clash = [f for f in finals if f.exists()]
        if clash:
            raise DatasetError(f"{clash[0]} appeared while converting; nothing moved")
        for src, dst in zip(staged, finals):
            os.rename(src, dst)
        _fsync_dir(self.out)
        shutil.rmtree(self.stage, ignore_errors=True)
        return finals

    def _commit_new(self) -> list[Path]:
        _fsync_dir(self.stage)
        try:
            # Replaces OUT only if something made it an empty directory meanwhile.
            os.rename(self.stage, self.out)
        except OSError:
            raise DatasetError(f"{self.out} appeared while converting; nothing moved") from None
        _fsync_dir(self.out.parent)
        return list_episodes(self.out)

    def abort(self) -> None:
        shutil.rmtree(self.stage, ignore_errors=True)
        remove_made(self.made_parents)

    def __enter__(self) -> EpisodeSink:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None:
            self.abort()
            return False
        try:
            self.commit()
        except BaseException:
            self.abort()
            raise
        return False


def make_parents(d: Path) -> list[Path]:
    """mkdir -p `d`; returns the directories it made, outermost first."""
    missing = []
    while not d.exists():
        missing.append(d)
        if d.parent == d:
            break
        d = d.parent
    made: list[Path] = []
    try:
        for m in reversed(missing):
            try:
                m.mkdir()
            except FileExistsError:  # made by someone else meanwhile
                continue
            made.append(m)
    except BaseException:
        remove_made(made)
        raise
    return made


def remove_made(made: list[Path]) -> None:
    """Undo `make_parents`, innermost first, stopping at the first directory
    something else has put a file in."""
    for d in reversed(made):
        try:
            d.rmdir()
        except OSError:
            break


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
