"""The LeRobotDataset v3.0 layout shared by import and export (docs/datasets.md).

Names, path templates and defaults as LeRobot writes them
(lerobot/datasets/utils.py: DEFAULT_DATA_PATH, DEFAULT_VIDEO_PATH,
DEFAULT_EPISODES_PATH, DEFAULT_TASKS_PATH, DEFAULT_FEATURES, chunk and file
sizes; video options from video_utils.encode_video_frames). This module
holds no I/O beyond small metadata reads.
"""

from __future__ import annotations

import json
from pathlib import Path

from wmrl_episodes import DatasetError

CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000  # files per chunk directory
DATA_FILES_SIZE_IN_MB = 100
VIDEO_FILES_SIZE_IN_MB = 200
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = EPISODES_DIR + "/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"

DEFAULT_FEATURES = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
IMAGES_PREFIX = "observation.images."
STATE_KEY = "observation.state"
ACTION_KEY = "action"
# wmrl's per-step oracle progress (NaN where unknown); not an `observation.*`
# key, so LeRobot policies never take it as an input.
PROGRESS_KEY = "wmrl.progress"
# Per-episode wmrl metadata, extra columns of meta/episodes (LeRobot keeps
# columns it does not know).
EPISODE_META = ("suite", "task", "init_state", "seed", "success", "final_progress", "source")

PROPRIO9_NAMES = ["x", "y", "z", "qx", "qy", "qz", "qw", "finger_left", "finger_right"]
ACTION7_NAMES = ["dx", "dy", "dz", "drx", "dry", "drz", "gripper"]
# encode_video_frames' defaults: AV1 through SVT-AV1, yuv420p, a key frame
# every 2 frames, crf 30, preset 12.
VIDEO_CODEC = "libsvtav1"
VIDEO_PIX_FMT = "yuv420p"
VIDEO_GOP = 2
VIDEO_CRF = 30


def next_file(chunk: int, file: int) -> tuple[int, int]:
    """lerobot update_chunk_file_indices."""
    return (chunk + 1, 0) if file == CHUNKS_SIZE - 1 else (chunk, file + 1)


def load_info(root: Path) -> dict:
    path = root / INFO_PATH
    try:
        info = json.loads(path.read_text())
    except FileNotFoundError:
        raise DatasetError(f"{root}: no {INFO_PATH} (not a LeRobot dataset root)") from None
    except (OSError, ValueError) as e:
        raise DatasetError(f"{path}: unreadable ({e})") from None
    if not isinstance(info, dict) or not isinstance(info.get("features"), dict):
        raise DatasetError(f"{path}: no `features` map")
    version = str(info.get("codebase_version", ""))
    if not version.startswith("v3."):
        raise DatasetError(f"{root}: codebase_version {version!r}; only v3.x is read (convert v2.1 "
                           "with LeRobot's datasets/v30/convert_dataset_v21_to_v30.py)")
    for key in ("fps", "data_path"):
        if key not in info:
            raise DatasetError(f"{path}: missing {key!r}")
    return info
