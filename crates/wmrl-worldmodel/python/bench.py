#!/usr/bin/env python3
"""Frames scored per second by Python's onnxruntime on a wmrl progress model,
same inputs and batch sizes as `wmrl wm bench` (which runs this script and
prints the ratio). Prints one JSON object: {"batch": frames_per_second}.

Usage: bench.py MODEL.onnx --batches 1,8,64 --seconds 2 [--threads N]
"""
import argparse
import json
import time

import numpy as np
import onnxruntime as ort


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    so = ort.SessionOptions()
    if a.threads > 0:
        so.intra_op_num_threads = a.threads
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    fr, ins = sess.get_inputs()[0], sess.get_inputs()[1]
    _, t, c, h, w = fr.shape
    l = ins.shape[1]
    rng = np.random.default_rng(0)
    out = {}
    for b in [int(x) for x in a.batches.split(",")]:
        frames = rng.random((b, t, c, h, w), dtype=np.float32)
        tokens = rng.integers(1, 257, size=(b, l), dtype=np.int64)
        feed = {fr.name: frames, ins.name: tokens}
        sess.run(None, feed)  # warm-up
        n, start = 0, time.perf_counter()
        while True:
            sess.run(None, feed)
            n += 1
            el = time.perf_counter() - start
            if el >= a.seconds and n >= 3:
                break
        out[str(b)] = n * b * t / el
    print(json.dumps(out))


if __name__ == "__main__":
    main()
