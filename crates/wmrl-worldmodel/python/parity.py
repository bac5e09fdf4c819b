#!/usr/bin/env python3
"""Run a wmrl-exported progress model through Python's onnxruntime and compare
with the candle outputs recorded beside it (parity.json, written by
`wmrl wm export` and by the Rust parity test). Exit 1 on a mismatch > 1e-4.

Usage: parity.py MODEL_DIR [MODEL_DIR ...]   (each holds model.onnx + parity.json)
"""
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

TOL = 1e-4


def pixels(n: int) -> np.ndarray:
    i = np.arange(n, dtype=np.uint64)
    h = (i * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)
    return ((h >> np.uint64(24)).astype(np.float32) / np.float32(255.0)).astype(np.float32)


def byte_tokens(text: str, length: int) -> list:
    toks = [b + 1 for b in text.lower().encode("utf-8")][:length]
    return toks + [0] * (length - len(toks))


def check(model_dir: Path) -> float:
    fx = json.loads((model_dir / "parity.json").read_text())
    b, t, h, w, l = fx["batch"], fx["num_frames"], fx["height"], fx["width"], fx["instruction_len"]
    frames = pixels(b * t * 3 * h * w).reshape(b, t, 3, h, w)
    tokens = np.array([byte_tokens(s, l) for s in fx["instructions"]], dtype=np.int64)
    sess = ort.InferenceSession(str(model_dir / "model.onnx"), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    assert names == ["frames", "instruction"], names
    meta = sess.get_modelmeta().custom_metadata_map
    assert meta.get("wmrl.contract") == "wmrl-progress/1", meta
    progress, success = sess.run(["progress", "success"], {"frames": frames, "instruction": tokens})
    diff = max(
        float(np.max(np.abs(progress.reshape(-1) - np.array(fx["progress"], dtype=np.float32)))),
        float(np.max(np.abs(success.reshape(-1) - np.array(fx["success"], dtype=np.float32)))),
    )
    status = "ok" if diff <= TOL else "MISMATCH"
    print(f"{model_dir}: onnxruntime {ort.__version__} vs candle max |diff| = {diff:.2e} ({status})")
    return diff


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    worst = max(check(Path(d)) for d in sys.argv[1:])
    return 0 if worst <= TOL else 1


if __name__ == "__main__":
    sys.exit(main())
