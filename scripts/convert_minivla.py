#!/usr/bin/env python3
"""Convert a Prismatic MiniVLA checkpoint into the directory crates/wmrl-minivla loads.

Inputs (one of):
  --pt RUN/checkpoints/latest-checkpoint.pt   Prismatic's native checkpoint
        ({"model": {"vision_backbone", "projector", "llm_backbone"}}); needs torch.
  --safetensors FILE [FILE ...]                flattened Prismatic names
        (vision_backbone.dino_featurizer.*, projector.0.*, llm_backbone.llm.*) or the
        HF OpenVLA layout (vision_backbone.featurizer.*, projector.fc1.*,
        language_model.*), possibly sharded; standard library only, no torch, no numpy.

Output directory: model.safetensors (converted names, dtype kept, usually BF16),
config.json (MiniVlaConfig), and, when given, tokenizer.json (Qwen2.5-0.5B's; the
prompt uses no <|extra_i|> token, so the plain Qwen tokenizer encodes it exactly) and
dataset_statistics.json (for un-normalising actions).

Key map (docs/policy.md has the table):
  vision_backbone.dino_featurizer.X    -> vision_backbone.featurizer.X   (.gamma -> .scale_factor)
  vision_backbone.siglip_featurizer.X  -> vision_backbone.fused_featurizer.X
  projector.0 / .2 / .4                -> projector.fc1 / fc2 / fc3
  llm_backbone.llm.X                   -> language_model.X
  language_model.lm_head.weight        dropped when equal to embed_tokens (tied, Qwen2.5-0.5B);
                                       kept (and tie_word_embeddings = false) otherwise
timm's ViT names below the prefixes and HF Qwen2's names below language_model. are kept
as they are: the Rust side uses them.

Self-check without any checkpoint: python3 scripts/convert_minivla.py --self-test
"""

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile

DTYPE_SIZE = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4,
              "F16": 2, "BF16": 2, "I16": 2, "U16": 2, "U8": 1, "I8": 1, "BOOL": 1}


def read_safetensors(path):
    """{name: (dtype, shape, bytes)}; checks every entry against the file."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise SystemExit(f"{path}: not a safetensors file (shorter than 8 bytes)")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise SystemExit(f"{path}: header length {n} exceeds the file")
    header = json.loads(data[8:8 + n])
    body = memoryview(data)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, (a, b) = info["dtype"], info["shape"], info["data_offsets"]
        count = 1
        for d in shape:
            count *= d
        if dtype not in DTYPE_SIZE or b - a != count * DTYPE_SIZE[dtype] or b > len(body):
            raise SystemExit(f"{path}: tensor `{name}`: bad dtype/shape/offsets {info}")
        out[name] = (dtype, list(shape), bytes(body[a:b]))
    return out


def write_safetensors(path, tensors):
    header, offset = {}, 0
    names = sorted(tensors)
    for name in names:
        dtype, shape, raw = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name in names:
            f.write(tensors[name][2])
    os.replace(tmp, path)


def read_pt(path):
    """Prismatic's torch checkpoint flattened to `component.key` names."""
    try:
        import torch
    except ImportError:
        raise SystemExit("--pt needs torch (pip install torch); or convert from safetensors")
    names = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
    model = torch.load(path, map_location="cpu", weights_only=False)["model"]
    out = {}
    for component in ("vision_backbone", "projector", "llm_backbone"):
        if component not in model:
            raise SystemExit(f"{path}: no `{component}` in the checkpoint's model dict")
        for key, t in model[component].items():
            name = key if component == "projector" else f"{component}.{key}"
            t = t.detach().contiguous()
            if t.dtype not in names:
                raise SystemExit(f"{path}: tensor `{name}`: unsupported dtype {t.dtype}")
            raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
            out[name] = (names[t.dtype], list(t.shape), raw)
    return out


PROJECTOR = {"projector.0.": "projector.fc1.", "projector.2.": "projector.fc2.",
             "projector.4.": "projector.fc3."}


def convert_name(name):
    """Prismatic (or already converted) name -> converted name; None if unknown."""
    for old, new in (("vision_backbone.dino_featurizer.", "vision_backbone.featurizer."),
                     ("vision_backbone.siglip_featurizer.", "vision_backbone.fused_featurizer."),
                     ("llm_backbone.llm.", "language_model.")):
        if name.startswith(old):
            name = new + name[len(old):]
            break
    for old, new in PROJECTOR.items():
        if name.startswith(old):
            name = new + name[len(old):]
    if name.startswith("vision_backbone.featurizer.") and name.endswith(".gamma"):
        name = name[: -len("gamma")] + "scale_factor"
    known = ("vision_backbone.featurizer.", "vision_backbone.fused_featurizer.",
             "projector.fc", "language_model.")
    return name if name.startswith(known) else None


def full_config(vocab_size, n_images, tied, tokenizer_len=151921):
    """MiniVlaConfig::full() in crates/wmrl-minivla/src/config.rs."""
    vit = dict(image_size=224, patch_size=14, norm_eps=1e-6)
    return {
        "preset": "full",
        "dino": dict(vit, width=1024, depth=24, heads=16, mlp_hidden=4096, class_token=True,
                     reg_tokens=4, layer_scale=True, attn_pool=False, feature_blocks=23,
                     mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        "siglip": dict(vit, width=1152, depth=27, heads=16, mlp_hidden=4304, class_token=False,
                       reg_tokens=0, layer_scale=False, attn_pool=True, feature_blocks=26,
                       mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5]),
        "llm": dict(vocab_size=vocab_size, hidden_size=896, intermediate_size=4864,
                    num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                    rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=tied),
        "n_images": n_images,
        "tokenizer_len": tokenizer_len,
        "n_bins": 256,
        "action_dim": 7,
        "system_prompt": "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
    }


def convert(tensors, n_images=1, config=None, tokenizer_len=151921):
    out, unknown = {}, []
    for name, t in tensors.items():
        new = convert_name(name)
        if new is None:
            unknown.append(name)
        elif new in out:
            raise SystemExit(f"tensor `{new}` given twice (from `{name}`)")
        else:
            out[new] = t
    if unknown:
        raise SystemExit(f"{len(unknown)} tensors outside the key map, first `{sorted(unknown)[0]}`")
    emb, head = "language_model.model.embed_tokens.weight", "language_model.lm_head.weight"
    if emb not in out:
        raise SystemExit(f"tensor `{emb}` missing")
    tied = head not in out or out[head] == out[emb]
    if tied:
        out.pop(head, None)
    if config is None:
        config = full_config(out[emb][1][0], n_images, tied, tokenizer_len)
    else:
        config = dict(config)
        config["llm"] = dict(config["llm"], tie_word_embeddings=tied)
    return out, config


def write_dir(out_dir, tensors, config, tokenizer=None, stats=None):
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if tokenizer:
        shutil.copyfile(tokenizer, os.path.join(out_dir, "tokenizer.json"))
    if stats:
        shutil.copyfile(stats, os.path.join(out_dir, "dataset_statistics.json"))


def self_test():
    """Synthetic Prismatic names through the map, written and read back."""
    f32 = lambda *shape: ("F32", list(shape), b"\0" * 4 * _prod(shape))
    src = {
        "vision_backbone.dino_featurizer.blocks.0.ls1.gamma": f32(4),
        "vision_backbone.dino_featurizer.reg_token": f32(1, 4, 4),
        "vision_backbone.siglip_featurizer.attn_pool.latent": f32(1, 1, 6),
        "projector.0.weight": f32(40, 10), "projector.4.bias": f32(8),
        "llm_backbone.llm.model.embed_tokens.weight": f32(64, 8),
        "llm_backbone.llm.lm_head.weight": f32(64, 8),
    }
    out, cfg = convert(src)
    want = {"vision_backbone.featurizer.blocks.0.ls1.scale_factor",
            "vision_backbone.featurizer.reg_token",
            "vision_backbone.fused_featurizer.attn_pool.latent",
            "projector.fc1.weight", "projector.fc3.bias",
            "language_model.model.embed_tokens.weight"}
    assert set(out) == want, sorted(out)
    assert cfg["llm"]["tie_word_embeddings"] and cfg["llm"]["vocab_size"] == 64
    with tempfile.TemporaryDirectory() as d:
        write_dir(d, out, cfg)
        back = read_safetensors(os.path.join(d, "model.safetensors"))
        assert back == out
    untied = dict(src)
    untied["llm_backbone.llm.lm_head.weight"] = ("F32", [64, 8], b"\1" * 4 * 64 * 8)
    out, cfg = convert(untied)
    assert "language_model.lm_head.weight" in out and not cfg["llm"]["tie_word_embeddings"]
    print("convert_minivla self-test: ok")


def _prod(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--pt", help="Prismatic checkpoint (.pt, needs torch)")
    src.add_argument("--safetensors", nargs="+", help="safetensors file(s), Prismatic or HF names")
    p.add_argument("--out", help="output directory")
    p.add_argument("--n-images", type=int, default=1,
                   help="images per observation (2 for the wrist / history variants)")
    p.add_argument("--tokenizer-len", type=int, default=151921,
                   help="ids the action tokens count down from: 151921 = len(Qwen2.5 tokenizer) + "
                   "256 extra tokens (extra_action_tokenizer); 151643 for action_tokenizer")
    p.add_argument("--tokenizer", help="Qwen2.5-0.5B tokenizer.json to copy")
    p.add_argument("--stats", help="the run's dataset_statistics.json to copy")
    p.add_argument("--config", help="write this MiniVlaConfig JSON instead of the full one "
                   "(tests; other sizes)")
    p.add_argument("--self-test", action="store_true")
    a = p.parse_args(argv)
    if a.self_test:
        return self_test()
    if not a.out or not (a.pt or a.safetensors):
        p.error("--out and one of --pt / --safetensors are required")
    tensors = {}
    if a.pt:
        tensors = read_pt(a.pt)
    else:
        for path in a.safetensors:
            for name, t in read_safetensors(path).items():
                if name in tensors:
                    raise SystemExit(f"{path}: tensor `{name}` also in another file")
                tensors[name] = t
    config = None
    if a.config:
        with open(a.config) as f:
            config = json.load(f)
    out, config = convert(tensors, a.n_images, config, a.tokenizer_len)
    write_dir(a.out, out, config, a.tokenizer, a.stats)
    n = sum(_prod(t[1]) for t in out.values())
    print(f"wrote {a.out}: {len(out)} tensors, {n} parameters, "
          f"tie_word_embeddings = {config['llm']['tie_word_embeddings']}")


if __name__ == "__main__":
    main(sys.argv[1:])
