#!/usr/bin/env python3
"""Datasets in and out of wmrl's episode format (docs/datasets.md).

  import-libero-hdf5 FILE... --out DIR [--suite libero_10] [--task N]
      LIBERO's HDF5 demonstrations -> ep_NNNNNN.msgpack, one per demo.
  import-lerobot ROOT --out DIR [--camera NAME=KEY]... [--flip ...]
      A LeRobotDataset v3.0 (parquet plus MP4 or images) -> episode files.
  export-lerobot EPISODE_DIR... --out ROOT [--fps 20] [--video | --images]
      Demonstrations or rollouts (directories of episode files) -> LeRobot v3.0;
      each episode's suite, task, init state, seed, success, final progress and
      source go into the `wmrl/*` columns of meta/episodes.

Run with envs/datasets/.venv/bin/python (scripts/setup.d/70-datasets.sh).
A malformed or truncated input fails with one `error:` line and exit status
1 and leaves nothing it created. An import makes DIR if missing and writes
its episodes only once every input converted (never over an existing
episode). An export's ROOT must not exist or be an empty directory; the
dataset appears there only when whole.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wmrl_episodes import DatasetError, EpisodeSink


def _sink_all(episodes, out: Path, start_index: int) -> tuple[int, int, int]:
    with EpisodeSink(out, start_index) as sink:
        steps = 0
        for ep in episodes:
            sink.add(ep)
            steps += len(ep)
    return sink.count, steps, start_index


def cmd_import_libero(a) -> str:
    from libero_hdf5 import read_file

    def episodes():
        for f in a.files:
            yield from read_file(Path(f), a.suite, a.task, a.pairing, a.rotate180)

    n, steps, start = _sink_all(episodes(), Path(a.out), a.start_index)
    return (f"imported {n} LIBERO demos ({steps} steps) from {len(a.files)} file(s) into {a.out} "
            f"(ep_{start:06d}..ep_{start + n - 1:06d})")


def _camera_map(items: list[str] | None) -> dict[str, str] | None:
    if not items:
        return None
    out = {}
    for item in items:
        name, sep, key = item.partition("=")
        if not sep or not name or not key:
            raise DatasetError(f"--camera {item!r}: expected NAME=FEATURE_KEY")
        out[name] = key
    return out


def cmd_import_lerobot(a) -> str:
    from lerobot_import import read_dataset

    eps = read_dataset(Path(a.root), _camera_map(a.camera), a.state_key, a.state_format, a.flip,
                       a.suite)
    n, steps, start = _sink_all(eps, Path(a.out), a.start_index)
    return (f"imported {n} LeRobot episodes ({steps} steps) from {a.root} into {a.out} "
            f"(ep_{start:06d}..ep_{start + n - 1:06d})")


def cmd_export_lerobot(a) -> str:
    from lerobot_export import export

    info = export([Path(d) for d in a.episode_dirs], Path(a.out), a.fps, not a.images, a.vcodec,
                  a.crf)
    kind = "images" if a.images else f"{a.vcodec} video"
    return (f"exported {info['total_episodes']} episodes ({info['total_frames']} frames, "
            f"{info['total_tasks']} tasks, {kind}) to {a.out} as LeRobotDataset "
            f"{info['codebase_version']}")


IMPORT_DESC = ("{what} -> wmrl episode files (ep_NNNNNN.msgpack). DIR is made if missing; "
               "the episodes appear there only once every input converted, and a failed import "
               "leaves nothing it created (not even DIR).")
OUT_HELP = ("directory for ep_NNNNNN.msgpack files (made if missing; existing episodes are never "
            "overwritten, see --start-index)")
EXPORT_DESC = ("Episode files -> a LeRobotDataset v3.0 at ROOT, which must not exist or be an empty "
               "directory; the dataset is written to a hidden sibling and renamed to ROOT when "
               "whole, so a failed export leaves nothing. Frames go to "
               "observation.images.<camera>, proprio to observation.state, actions to action, "
               "oracle progress to wmrl.progress; each episode's suite, task, init_state, seed, "
               "success, final_progress and source go into the wmrl/<field> columns of "
               "meta/episodes.")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="wmrl_datasets.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("import-libero-hdf5", help="LIBERO HDF5 demonstrations -> episode files",
                       description=IMPORT_DESC.format(what="LIBERO HDF5 demonstrations"))
    p.add_argument("files", nargs="+", metavar="FILE", help="LIBERO *_demo.hdf5 files")
    p.add_argument("--out", required=True, metavar="DIR", help=OUT_HELP)
    p.add_argument("--suite", default="libero_10", help="suite name recorded (default libero_10)")
    p.add_argument("--task", type=int, default=None,
                   help="task index in the suite (default: matched from the file's instruction "
                        "or name; required for suites without a built-in task list)")
    p.add_argument("--pairing", choices=["next", "same"], default="next",
                   help="next (default): step t = observation before action t, as wmrl records "
                        "(LIBERO stores the observation after each action: obs[k] is paired with "
                        "actions[k+1]; one step fewer); same: keep the file's obs[k], actions[k]")
    p.add_argument("--rotate180", action="store_true",
                   help="also mirror frames, as envs/libero/server.py --rotate180")
    p.add_argument("--start-index", type=int, default=0, help="index of the first episode file")
    p.set_defaults(run=cmd_import_libero)

    p = sub.add_parser("import-lerobot", help="LeRobotDataset v3.0 -> episode files",
                       description=IMPORT_DESC.format(what="A LeRobotDataset v3.0"))
    p.add_argument("root", metavar="ROOT", help="dataset root (holds meta/info.json)")
    p.add_argument("--out", required=True, metavar="DIR", help=OUT_HELP)
    p.add_argument("--camera", action="append", metavar="NAME=KEY",
                   help="wmrl camera NAME from feature KEY, in camera order (repeat); default: "
                        "agentview from observation.images.{agentview,image}, wrist from "
                        "observation.images.{wrist,wrist_image,image2}")
    p.add_argument("--state-key", default="observation.state", help="proprio feature")
    p.add_argument("--state-format", choices=["auto", "raw", "eef-axisangle"], default="auto",
                   help="eef-axisangle: 8-D eef pos + axis-angle + gripper (LeRobot's LIBERO "
                        "datasets) -> 9-D pos + quaternion xyzw + gripper; auto: that for 8-D, "
                        "raw otherwise")
    p.add_argument("--flip", choices=["none", "vertical", "horizontal", "rot180"], default="none",
                   help="frame orientation change (LeRobot's LIBERO datasets: horizontal gives "
                        "the LIBERO server's orientation)")
    p.add_argument("--suite", default="lerobot",
                   help="suite recorded for datasets not exported by wmrl (libero_10: task "
                        "index matched from the instruction)")
    p.add_argument("--start-index", type=int, default=0, help="index of the first episode file")
    p.set_defaults(run=cmd_import_lerobot)

    p = sub.add_parser("export-lerobot", help="episode files -> LeRobotDataset v3.0",
                       description=EXPORT_DESC)
    p.add_argument("episode_dirs", nargs="+", metavar="EPISODE_DIR",
                   help="directories of ep_NNNNNN.msgpack files, exported in order")
    p.add_argument("--out", required=True, metavar="ROOT",
                   help="dataset root: must not exist or be an empty directory")
    p.add_argument("--fps", type=int, default=20, help="frames per second (LIBERO: 20)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--video", action="store_true", help="frames as MP4 (default; lossy)")
    g.add_argument("--images", action="store_true", help="frames as PNG in the parquet (lossless)")
    p.add_argument("--vcodec", choices=["libsvtav1", "h264"], default="libsvtav1",
                   help="video codec (LeRobot's default: libsvtav1)")
    p.add_argument("--crf", type=int, default=30, help="video quality, lower is better (LeRobot: 30)")
    p.set_defaults(run=cmd_export_lerobot)
    return ap


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    try:
        print(a.run(a))
    except DatasetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # the output side: disk full, permissions
        print(f"error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
